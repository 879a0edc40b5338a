"""Laplace pairs at small delta and large per-step epsilon: both bounds bracket exact
references, and the upper bound is finite and tight.

The leaf used to charge each bucket the mass within an end point's round-off at the
densities' maximum 1 / (2b); near the least loss -eps0 that is e^{eps0} times the A-mass
there, and the split leaf turned it into B-mass error times e^{eps0} again, so every
delta below about 1e-13 e^{eps0} had no finite upper bound (one step at eps0 = 20 or
10 steps at eps0 = 1 and delta 1e-15: inf).  The leaf now moves the buckets' borders by
the end points' round-off instead (displaced borders, as for the Gaussian pairs,
docs/floating-point.md).

References, in 50-digit mpmath on the very doubles given: one and two Laplace steps from
the privacy-loss distribution (atoms at +-eps0, density e^{(L - eps0)/2} / 4 between,
the two-step convolution integrated piecewise), one Poisson-sampled Laplace step by
quadrature over the outcome, both directions.
"""
import math
import warnings

import numpy as np
import pytest

from pb_accountant import Laplace, compose, epsilon_bounds
from pb_accountant.subsampled_laplace import SubsampledLaplace

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp


def _laplace_delta(eps0, steps, eps):
    """Exact delta(eps) of ``steps`` (1 or 2) Laplace steps with eps0 = 1/scale (the
    pair is symmetric: both directions are equal)."""
    e0, eps = mp.mpf(eps0), mp.mpf(eps)
    atoms = [(e0, mp.mpf(1) / 2), (-e0, mp.exp(-e0) / 2)]

    def density(loss):
        return mp.exp((loss - e0) / 2) / 4

    def cont(c):
        """E[(1 - e^{c - L})_+] over the continuous part."""
        if c >= e0:
            return mp.mpf(0)
        lo = max(c, -e0)
        return ((1 - mp.exp((lo - e0) / 2)) / 2
                - mp.exp(c) * mp.exp(-e0 / 2) * (mp.exp(-lo / 2) - mp.exp(-e0 / 2)) / 2)

    def pos(x):
        return x if x > 0 else mp.mpf(0)

    if steps == 1:
        return sum(p * pos(1 - mp.exp(eps - l)) for l, p in atoms) + cont(eps)
    total = mp.mpf(0)
    for l1, p1 in atoms:
        for l2, p2 in atoms:
            total += p1 * p2 * pos(1 - mp.exp(eps - l1 - l2))
        total += 2 * p1 * cont(eps - l1)
    cuts = sorted({-e0, e0} | {c for c in (eps - e0, eps + e0) if -e0 < c < e0})
    total += mp.quad(lambda l: density(l) * cont(eps - l), cuts)
    return total


def _subsampled_laplace_delta(scale, q, eps):
    """Exact delta(eps) of one Poisson-sampled Laplace step, the larger direction's:
    A = (1-q) Lap(0, b) + q Lap(1, b), B = Lap(0, b).  The loss increases in the
    outcome x (L_- at and left of 0, L_+ at and right of 1), so {L > eps} and
    {L < -eps} are half-lines cut at the outcome of that loss, and each direction's
    delta is a difference of Laplace tails in closed form."""
    b, q, eps = mp.mpf(scale), mp.mpf(q), mp.mpf(eps)

    def cdf(x, mean):
        z = (x - mean) / b
        return mp.exp(z) / 2 if z < 0 else 1 - mp.exp(-z) / 2

    def loss(x):
        return mp.log(1 - q + q * mp.exp((2 * x - 1) / b))

    def cut(t):
        """The outcome whose loss is t, clipped to [0, 1] (t beyond the loss range)."""
        if t <= loss(0):
            return mp.mpf(0)
        if t >= loss(1):
            return mp.mpf(1)
        return (b * mp.log((mp.exp(t) - (1 - q)) / q) + 1) / 2

    e = mp.exp(eps)
    out = []
    # A||B: P_A(L > eps) - e^eps P_B(L > eps); the atom at 1 has loss L_+ (> eps if
    # eps < L_+, counted by the half-line x > cut, which then lies below 1)
    if eps < loss(1):
        x = cut(eps)
        out.append((1 - q) * (1 - cdf(x, 0)) + q * (1 - cdf(x, 1)) - e * (1 - cdf(x, 0)))
    # B||A: P_B(L < -eps) - e^eps P_A(L < -eps)
    if -eps > loss(0):
        x = cut(-eps)
        out.append(cdf(x, 0) - e * ((1 - q) * cdf(x, 0) + q * cdf(x, 1)))
    return max(out + [mp.mpf(0)])


def _bisect_epsilon(delta_of, delta, hi):
    lo, hi = mp.mpf(0), mp.mpf(hi)
    if delta_of(lo) <= delta:
        return lo
    for _ in range(80):
        mid = (lo + hi) / 2
        if delta_of(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


@pytest.mark.parametrize("scale,steps", [(1.0, 1), (1.0, 2), (0.2, 2), (0.05, 1),
                                         (0.03, 1), (0.02, 2)])
@pytest.mark.parametrize("delta", [1e-5, 1e-10, 1e-12, 1e-15])
def test_laplace_bounds_bracket_the_exact_curve_with_a_finite_upper_bound(scale, steps,
                                                                         delta):
    mp.dps = 40
    eps0 = 1.0 / scale
    pb = compose([(Laplace(scale), steps)], delta=delta)
    bounds = epsilon_bounds([(Laplace(scale), steps)], delta)
    truth = _bisect_epsilon(lambda e: _laplace_delta(eps0, steps, e), mp.mpf(delta),
                            steps * eps0 * 1.01)
    assert mp.mpf(bounds.lower) <= truth <= mp.mpf(bounds.upper), (bounds, truth)
    assert math.isfinite(bounds.upper)
    assert (bounds.upper - bounds.lower) / bounds.upper < 2e-3, bounds
    # delta at epsilons below the answer and at it
    for e in (0.5 * bounds.lower, bounds.lower, bounds.upper):
        db = pb.delta_bounds(e)
        exact = _laplace_delta(eps0, steps, e)
        assert mp.mpf(float(db.lower)) <= exact <= mp.mpf(float(db.upper)), (e, db, exact)


@pytest.mark.parametrize("scale,steps", [(1.0, 10), (0.2, 10), (0.1, 5)])
def test_pure_dp_laplace_histories_have_finite_upper_bounds_down_to_1e_15(scale, steps):
    """steps * eps0 bounds epsilon at every delta (pure DP); the engine's upper bound is
    finite and within 0.1% of it, and the lower bound within the target below it."""
    total = steps / scale
    for delta in (1e-10, 1e-12, 1e-15):
        b = epsilon_bounds([(Laplace(scale), steps)], delta)
        assert math.isfinite(b.upper) and b.upper <= total * (1 + 1e-3), (delta, b)
        assert b.lower >= total * (1 - 1e-3), (delta, b)


@pytest.mark.parametrize("scale,q", [(0.1, 0.5), (0.05, 0.1), (0.5, 0.01), (0.03, 1.0),
                                     (2.0, 0.3)])
@pytest.mark.parametrize("delta", [1e-6, 1e-10, 1e-15])
def test_subsampled_laplace_one_step_brackets_the_exact_curve(scale, q, delta):
    mp.dps = 40
    pair = SubsampledLaplace(scale, q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pb = compose([(pair, 1)], delta=delta)
        bounds = epsilon_bounds([(pair, 1)], delta)
    truth = _bisect_epsilon(lambda e: _subsampled_laplace_delta(scale, q, e),
                            mp.mpf(delta), 1.01 / scale + 1)
    assert mp.mpf(bounds.lower) <= truth <= mp.mpf(bounds.upper), (bounds, truth)
    assert math.isfinite(bounds.upper), bounds
    eps = np.array([0.0, 0.3 * float(truth), float(truth)])
    db = pb.delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = _subsampled_laplace_delta(scale, q, e)
        assert mp.mpf(float(lo)) <= exact <= mp.mpf(float(up)), (e, lo, up, exact)
