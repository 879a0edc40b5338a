"""Bounds bracket exact values: Gaussian composition (closed form), randomized response."""
import math

import numpy as np
import pytest
from scipy import stats

from pb_accountant import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian, compose
from conftest import gaussian_delta, gaussian_epsilon

EPS = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0])


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (2.0, 10), (5.0, 100), (10.0, 1000),
                                         (0.8, 3), (30.0, 20000)])
@pytest.mark.parametrize("methods", [("split", "grouped"), ("split", "grouped", "paper")])
def test_gaussian_homogeneous(sigma, steps, methods):
    mu = math.sqrt(steps) / sigma
    pb = compose([(Gaussian(sigma), steps)], delta=1e-8, methods=methods)
    exact = gaussian_delta(EPS, mu)
    for m in pb.methods:
        if m in ("split", "paper"):
            assert np.all(pb.delta_upper(EPS, m) >= exact), m
        if m in ("grouped", "paper"):
            assert np.all(pb.delta_lower(EPS, m) <= exact), m
    db = pb.delta_bounds(EPS)
    assert np.all(db.lower <= exact) and np.all(exact <= db.upper)
    for delta in (1e-3, 1e-5, 1e-8):
        e = gaussian_epsilon(delta, mu)
        b = pb.epsilon_bounds(delta)
        assert b.lower <= e <= b.upper
        assert b.width < (2e-3 if e < 20 else 5e-3) or e < 0.05


@pytest.mark.parametrize("fixed", [None, 4094])
def test_gaussian_heterogeneous(fixed):
    seq = [(Gaussian(2.0), 50), (Gaussian(5.0), 300), (Gaussian(1.5), 7)]
    mu = math.sqrt(sum(r / s.sigma ** 2 for s, r in seq))
    pb = compose(seq, delta=1e-6, number_of_buckets=fixed,
                 methods=("split", "grouped", "paper"))
    exact = gaussian_delta(EPS, mu)
    db = pb.delta_bounds(EPS)
    assert np.all(db.lower <= exact) and np.all(exact <= db.upper)
    e = gaussian_epsilon(1e-6, mu)
    b = pb.epsilon_bounds(1e-6)
    assert b.lower <= e <= b.upper
    assert b.width < 5e-3


def test_subsampled_gaussian_q1_is_gaussian():
    a = compose([(SubsampledGaussian(3.0, 1.0), 40)], delta=1e-6).epsilon_bounds(1e-6)
    mu = math.sqrt(40) / 3.0
    e = gaussian_epsilon(1e-6, mu)
    assert a.lower <= e <= a.upper and a.width < 2e-3


def rr_delta(p, r, eps):
    """Exact r-fold randomized response delta (both directions are equal by symmetry)."""
    k = np.arange(r + 1)
    logpmf_a = stats.binom.logpmf(k, r, p)          # k outcomes agreeing with A's bias
    loss = (2 * k - r) * math.log(p / (1 - p))
    pa = np.exp(logpmf_a)
    pb = np.exp(logpmf_a - loss)
    return math.fsum(np.maximum(pa - math.exp(eps) * pb, 0.0).tolist())


@pytest.mark.parametrize("p,r", [(0.51, 512), (0.6, 64), (0.75, 10), (0.55, 2000)])
def test_randomized_response(p, r):
    pb = compose([(RandomizedResponse(p), r)], delta=1e-6,
                 methods=("split", "grouped", "paper"))
    eps = np.linspace(0.0, 3.0, 13)
    exact = np.array([rr_delta(p, r, e) for e in eps])
    for m in ("split", "paper"):
        assert np.all(pb.delta_upper(eps, m) >= exact - 1e-15), m
    for m in ("grouped", "paper"):
        assert np.all(pb.delta_lower(eps, m) <= exact + 1e-15), m
    db = pb.delta_bounds(eps)
    assert np.max(db.upper - db.lower) < 0.02


def test_laplace_single_step_exact():
    """One Laplace step: delta(eps) = 1 - e^{(eps - eps0)/2} for eps < eps0 (known form)."""
    lap = Laplace(scale=2.0)
    eps0 = 0.5
    pb = compose([(lap, 1)], methods=("split", "grouped", "paper"))
    eps = np.array([0.0, 0.1, 0.3, 0.49])
    exact = 1.0 - np.exp((eps - eps0) / 2.0)
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact + 1e-15) and np.all(exact <= db.upper + 1e-15)
    assert pb.delta_bounds(0.6).upper < 1e-9


@pytest.mark.parametrize("sigma,steps,delta", [(1.0, 100, 1e-8), (5.0, 1000, 1e-12),
                                               (30.0, 20000, 1e-15)])
@pytest.mark.parametrize("path", ["direct", "transform"])
def test_gaussian_composition_brackets_with_every_product_on_one_path(monkeypatch, sigma,
                                                                      steps, delta, path):
    """Every product summed directly where it can be certified (as if the cost model
    always preferred it), or none: both bounds bracket the closed form, delta at five
    epsilons and epsilon at delta down to 1e-15, so each path's relative bound
    (gamma_d of the blocks, 48u of the transform) carries through a whole composition."""
    import pb_accountant.convolution as conv
    if path == "direct":
        monkeypatch.setattr(conv, "direct_is_cheaper", lambda *args: True)
    else:
        monkeypatch.setattr(conv, "_DIRECT_MOST_TERMS", 0)
    mu = math.sqrt(steps) / sigma
    pb = compose([(Gaussian(sigma), steps)], delta=delta)
    eps = np.array([0.0, 0.5, 1.0, 2.0, 4.0])
    exact = gaussian_delta(eps, mu)
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact) and np.all(exact <= db.upper)
    e = gaussian_epsilon(delta, mu)
    b = pb.epsilon_bounds(delta)
    assert b.lower <= e <= b.upper and b.upper - b.lower <= 1e-2 * b.upper
