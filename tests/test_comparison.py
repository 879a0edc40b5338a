"""Tests for pb_accountant.comparison: the prior-work bounds the paper compares with.

Every bound is checked against an exact value it must bracket (Gaussian closed form,
randomized response by a binomial sum, high-precision mpmath evaluations), plus input
validation and log-space stability far beyond the paper's r = 512.
"""
import math

import numpy as np
import pytest
from _optional import HealthCheck, given, settings, st
from scipy import special

from conftest import gaussian_delta

mp = pytest.importorskip("mpmath")   # the references are computed in mpmath
from pb_accountant import comparison as C
from pb_accountant.results import DeltaBounds, EpsilonBounds, PrivacyCurve

HYP = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------
# exact reference values
# ------------------------------------------------------------------------------------


def rr_delta_mp(eps0, r, eps, dps=40):
    """Exact r-fold randomized-response delta(eps) by the binomial sum (mpmath).

    A(k) = C(r,k) e^{k eps0} / (1 + e^eps0)^r, B(k) = C(r,k) e^{(r-k) eps0} / (...)."""
    mp.mp.dps = dps
    e0 = mp.mpf(float(eps0))
    norm = (1 + mp.exp(e0)) ** r
    x = mp.exp(mp.mpf(float(eps)))
    total = mp.mpf(0)
    for k in range(r + 1):
        a = mp.binomial(r, k) * mp.exp(k * e0) / norm
        b = mp.binomial(r, k) * mp.exp((r - k) * e0) / norm
        if a > x * b:
            total += a - x * b
    return total


def kov_mp(eps0, delta0, r, i, dps=50):
    """Paper Theorem 3, evaluated directly in high precision."""
    mp.mp.dps = dps
    e = mp.mpf(float(eps0))
    s = mp.mpf(0)
    for l in range(i):
        s += mp.binomial(r, l) * (mp.exp((r - l) * e) - mp.exp((r - 2 * i + l) * e))
    delta_i = s / (1 + mp.exp(e)) ** r
    spent = -mp.expm1(r * mp.log1p(-mp.mpf(float(delta0))))   # 1 - (1 - delta0)^r
    return spent + (1 - spent) * delta_i                       # no cancellation


# ------------------------------------------------------------------------------------
# naive / adaptive / advanced composition (paper Lemmas 2-4)
# ------------------------------------------------------------------------------------

def test_naive_and_adaptive_composition_values():
    naive = C.naive_composition(0.1, 1e-6, 10)
    adaptive = C.adaptive_composition(0.1, 1e-6, 10)
    assert isinstance(naive, EpsilonBounds) and naive.method == "naive"
    assert naive.lower == 0.0 and naive.upper == pytest.approx(1.0, rel=1e-15)
    assert naive.upper >= 10 * 0.1  # rounded up, never down
    assert naive.delta == pytest.approx(1e-5, rel=1e-15)
    mp.mp.dps = 50
    exact = 1 - (1 - mp.mpf(1e-6)) ** 10
    assert adaptive.delta == pytest.approx(float(exact), rel=1e-13)
    assert float(exact) <= adaptive.delta < naive.delta
    assert adaptive.upper == naive.upper


def test_adaptive_composition_is_stable_for_tiny_delta_and_huge_r():
    out = C.adaptive_composition(1e-3, 1e-300, 10 ** 6)
    assert out.delta == pytest.approx(1e-294, rel=1e-9)
    out = C.adaptive_composition(0.0, 0.5, 5000)
    assert out.delta == 1.0 and out.upper == 0.0
    assert C.naive_composition(0.2, 0.01, 500).delta == 1.0  # capped at 1


def test_advanced_composition_formula_and_dr16_variant():
    eps, delta, r, slack = 0.1, 1e-7, 200, 1e-6
    out = C.advanced_composition(eps, delta, r, slack)
    expected = math.sqrt(2 * r * math.log(1 / slack)) * eps + r * eps * math.expm1(eps)
    assert out.method == "advanced"
    assert out.upper == pytest.approx(expected, rel=1e-13) and out.upper >= expected
    assert out.delta == pytest.approx(r * delta + slack, rel=1e-13)
    halved = C.advanced_composition(eps, delta, r, slack, variant="dr16")
    assert halved.upper == pytest.approx(expected - r * eps * math.expm1(eps) / 2, rel=1e-13)
    assert C.advanced_composition(800.0, 0.0, 2, 0.5).upper == math.inf


def test_book_simplified_advanced_composition_is_not_a_valid_bound():
    # The book chapter's Theorems 5/6 state eps' = 2 eps sqrt(2 k log(1/delta')); its
    # worked example (eps = 1, k = 1000, delta' = 1e-5) even prints 2 sqrt(k log(1/delta'))
    # = 214.59.  KOV is exact for randomized response, a 1-DP mechanism: its true delta
    # at either value is far above 1e-5 (the mean privacy loss alone is
    # 1000 tanh(1/2) = 462), while the full DR14 Theorem 3.20 bound is honoured.
    formula = 2 * 1.0 * math.sqrt(2 * 1000 * math.log(1e5))
    example = 2 * math.sqrt(1000 * math.log(1e5))
    assert formula == pytest.approx(303.49, abs=0.01)
    assert example == pytest.approx(214.59, abs=0.01)
    for value in (formula, example):
        assert C.kov_delta(1.0, 0.0, 1000, value).upper > 0.5
    full = C.advanced_composition_epsilon(1.0, 0.0, 1000, 1e-5)
    assert full.upper > 1000 * math.tanh(0.5)
    assert C.kov_delta(1.0, 0.0, 1000, full.upper).upper <= 1e-5


def test_advanced_composition_epsilon_split_and_edge_cases():
    out = C.advanced_composition_epsilon(0.01, 1e-10, 10000, 1e-5)
    direct = C.advanced_composition(0.01, 1e-10, 10000, 1e-5 - 10000 * 1e-10)
    assert out.delta == 1e-5
    assert out.upper == pytest.approx(direct.upper, rel=1e-12)
    assert out.upper < 10000 * 0.01  # beats naive here
    small = C.advanced_composition_epsilon(0.5, 0.0, 3, 1e-5)
    assert small.upper == pytest.approx(1.5) and "naive" in small.notes[0]
    over = C.advanced_composition_epsilon(0.1, 1e-4, 100, 1e-5)
    assert over.upper == math.inf and over.notes


@HYP
@given(eps=st.floats(0.01, 2.0), log_delta=st.floats(-12, -4), r=st.integers(2, 3000),
       log_target=st.floats(-9, -2))
def test_kov_is_never_worse_than_advanced_composition(eps, log_delta, r, log_target):
    """KOV is the optimal composition of the (eps, delta) class (paper Theorem 3)."""
    delta, target = 10.0 ** log_delta, 10.0 ** log_target
    adv = C.advanced_composition_epsilon(eps, delta, r, target)
    kov = C.kov_epsilon(eps, delta, r, target)
    assert kov.upper <= adv.upper * (1 + 1e-9) + 1e-12
    naive = C.naive_composition(eps, delta, r)
    if naive.delta <= target:
        assert kov.upper <= naive.upper * (1 + 1e-12)


# ------------------------------------------------------------------------------------
# KOV (paper Theorem 3, §5.6)
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("r", [1, 2, 7, 64, 257, 512])
@pytest.mark.parametrize("eps0", [2.0 ** -10, 0.0625, 0.5, 1.0, 3.0, 10.0])
def test_kov_matches_direct_high_precision_formula(r, eps0):
    half = r // 2
    idx = sorted({0, 1, half // 3, half // 2, half} & set(range(half + 1)))
    for delta0 in (0.0, 1e-6):
        for i in idx:
            eps = (r - 2 * i) * eps0          # exact in binary for these eps0
            ref = float(kov_mp(eps0, delta0, r, i))
            for interpolate in (False, True):
                got = C.kov_delta(eps0, delta0, r, eps, interpolate=interpolate).upper
                if ref < 1e-300:
                    assert got <= 1e-290
                else:
                    assert got == pytest.approx(ref, rel=1e-9), (r, eps0, delta0, i)
                    assert got >= ref * (1 - 1e-13)


def test_kov_handles_inexact_grid_products():
    eps0, r, i = math.log(3.0), 300, 120
    eps = (r - 2 * i) * eps0 * (1 + 2.0 ** -50)   # just above the grid point
    ref = float(kov_mp(eps0, 1e-7, r, i))
    got = C.kov_delta(eps0, 1e-7, r, eps, interpolate=False).upper
    assert got == pytest.approx(ref, rel=1e-9)
    below = C.kov_delta(eps0, 1e-7, r, (r - 2 * i) * eps0 * (1 - 2.0 ** -40),
                        interpolate=False).upper
    assert below == pytest.approx(float(kov_mp(eps0, 1e-7, r, i + 1)), rel=1e-9)


def test_kov_equals_exact_randomized_response():
    """KOV is tight for randomized response (paper §5.8): equal to the binomial sum."""
    p, r = 0.75, 40
    eps0 = math.log(p / (1 - p))
    grid = [(r - 2 * i) * eps0 * (1 + 1e-15) for i in range(0, r // 2 + 1, 3)]
    off_grid = list(np.linspace(0.0, r * eps0 * 0.9, 13))
    for eps in grid + off_grid:
        exact = float(rr_delta_mp(eps0, r, eps))
        tight = C.kov_delta(eps0, 0.0, r, eps).upper
        step = C.kov_delta(eps0, 0.0, r, eps, interpolate=False).upper
        assert tight >= exact * (1 - 1e-12)
        assert tight == pytest.approx(exact, rel=1e-9, abs=1e-300)
        assert step >= tight * (1 - 1e-12)
    for eps in grid:
        step = C.kov_delta(eps0, 0.0, r, eps, interpolate=False).upper
        assert step == pytest.approx(float(rr_delta_mp(eps0, r, eps)), rel=1e-9)


def test_kov_odd_r_below_smallest_grid_point():
    eps0, r = 0.5, 5
    step = C.kov_delta(eps0, 0.0, r, 0.2, interpolate=False)
    assert step.upper == 1.0 and step.notes
    tight = C.kov_delta(eps0, 0.0, r, [0.0, 0.2, 0.5])
    exact = [float(rr_delta_mp(eps0, r, e)) for e in (0.0, 0.2, 0.5)]
    assert np.all(tight.upper >= np.array(exact) * (1 - 1e-12))
    assert np.all(tight.upper < 1.0)
    assert tight.upper[2] == pytest.approx(exact[2], rel=1e-9)


def test_kov_returns_result_objects_and_scalars():
    out = C.kov_delta(0.3, 1e-8, 100, 2.0)
    assert isinstance(out, DeltaBounds) and out.method == "kov"
    assert isinstance(out.upper, float) and out.lower == 0.0
    arr = C.kov_delta(0.3, 1e-8, 100, [1.0, 2.0])
    assert arr.upper.shape == (2,) and np.all(arr.lower == 0.0)
    assert arr.upper[1] == pytest.approx(out.upper, rel=1e-15)
    assert C.kov_delta(0.3, 1e-8, 100, math.inf).upper == pytest.approx(
        -math.expm1(100 * math.log1p(-1e-8)), rel=1e-12)
    assert C.kov_delta(0.0, 0.0, 10, 0.0).upper == 0.0
    assert C.kov_delta(0.4, 1.0, 10, 3.0).upper == 1.0


def test_kov_epsilon_is_certified_and_tight():
    eps0, delta0, r, target = 0.1, 1e-9, 2000, 1e-5
    out = C.kov_epsilon(eps0, delta0, r, target)
    assert isinstance(out, EpsilonBounds) and out.method == "kov" and out.lower == 0.0
    assert C.kov_delta(eps0, delta0, r, out.upper).upper <= target
    assert C.kov_delta(eps0, delta0, r, out.upper * (1 - 1e-6)).upper > target
    step = C.kov_epsilon(eps0, delta0, r, target, interpolate=False)
    assert step.upper >= out.upper
    k = round(step.upper / eps0)
    assert step.upper == pytest.approx(k * eps0, rel=1e-14) and (r - k) % 2 == 0
    none = C.kov_epsilon(0.1, 1e-6, 100, 1e-5)
    assert none.upper == math.inf and none.notes


def test_kov_stays_finite_and_monotone_far_beyond_paper_limit():
    """The paper could only evaluate r <= 512; log space reaches r = 10**6."""
    eps = np.linspace(0.0, 150.0, 301)
    out = C.kov_delta(0.01, 1e-12, 10 ** 6, eps)
    assert np.all(np.isfinite(out.upper))
    assert np.all((out.upper >= 0) & (out.upper <= 1))
    assert np.all(np.diff(out.upper) <= 0)
    assert out.upper[0] > 0.99 and out.upper[-1] < 1e-5
    assert out.upper[-1] >= -math.expm1(10 ** 6 * math.log1p(-1e-12))
    big = C.kov_delta(10.0, 0.0, 10 ** 6, np.linspace(9.998e6, 1e7, 21))
    assert np.all(np.isfinite(big.upper)) and np.all(np.diff(big.upper) <= 0)
    assert big.upper[-1] == 0.0 and big.upper[0] > 0.5
    eps_out = C.kov_epsilon(0.01, 0.0, 10 ** 6, 1e-5)
    assert np.isfinite(eps_out.upper) and 0 < eps_out.upper < 150


def test_kov_against_mpmath_beyond_512():
    eps0, r = 0.05, 2000
    i = 800
    ref = float(kov_mp(eps0, 0.0, r, i, dps=60))
    got = C.kov_delta(eps0, 0.0, r, (r - 2 * i) * eps0 * (1 + 1e-15), interpolate=False).upper
    assert got == pytest.approx(ref, rel=1e-9) and got >= ref


@HYP
@given(eps0=st.floats(1e-4, 12.0), log_delta0=st.floats(-15, -1) | st.just(-math.inf),
       r=st.integers(1, 3000), targets=st.lists(st.floats(0.0, 200.0), min_size=2,
                                                  max_size=12))
def test_kov_delta_is_nonincreasing_and_in_unit_interval(eps0, log_delta0, r, targets):
    delta0 = 0.0 if log_delta0 == -math.inf else 10.0 ** log_delta0
    eps = np.sort(np.array(targets))
    for interpolate in (True, False):
        up = C.kov_delta(eps0, delta0, r, eps, interpolate=interpolate).upper
        assert np.all(np.isfinite(up)) and np.all((up >= 0) & (up <= 1))
        assert np.all(np.diff(up) <= 0)
        assert np.all(up >= -math.expm1(r * math.log1p(-delta0)) * (1 - 1e-12))


@HYP
@given(eps0=st.floats(0.01, 3.0), r=st.integers(1, 400), log_target=st.floats(-12, -0.5))
def test_kov_epsilon_round_trip(eps0, r, log_target):
    target = 10.0 ** log_target
    out = C.kov_epsilon(eps0, 0.0, r, target)
    assert 0.0 <= out.upper <= r * eps0 * (1 + 1e-12)
    assert C.kov_delta(eps0, 0.0, r, out.upper).upper <= target


def test_kov_curve_of_gaussian_base_curve_brackets_exact_composition():
    sigma, r = 2.0, 64
    base_eps = np.concatenate([[0.0], np.geomspace(1e-3, 6.0, 250)])
    base_delta = gaussian_delta(base_eps, 1.0 / sigma)
    targets = np.linspace(0.0, 12.0, 61)
    curve = C.kov_curve(base_eps, base_delta, r, targets)
    assert isinstance(curve, PrivacyCurve) and curve.method == "kov"
    assert np.all(curve.delta_lower == 0.0)
    exact = gaussian_delta(targets, math.sqrt(r) / sigma)
    assert np.all(curve.delta_upper >= exact)
    assert np.all(np.diff(curve.delta_upper) <= 0)
    # the minimum over base points is at least as good as any single base point
    for j in (40, 120, 200):
        single = C.kov_delta(base_eps[j], base_delta[j], r, targets).upper
        assert np.all(curve.delta_upper <= single)


def test_kov_curve_at_paper_sgd_size():
    """paper §5.8 omitted KOV for r = 2**16; a few hundred base points work here (its cost
    is measured by the reproduction scripts, not asserted)."""
    base_eps = np.geomspace(1e-4, 4.0, 300)
    base_delta = gaussian_delta(base_eps, 0.5)
    targets = np.linspace(0.0, 30.0, 200)
    curve = C.kov_curve(base_eps, base_delta, 2 ** 16, targets)
    assert np.all(np.isfinite(curve.delta_upper))
    assert np.all((curve.delta_upper >= 0) & (curve.delta_upper <= 1))
    assert np.all(np.diff(curve.delta_upper) <= 0)


# ------------------------------------------------------------------------------------
# Renyi DP (paper §5.7)
# ------------------------------------------------------------------------------------

def test_renyi_divergence_of_randomized_response_closed_form():
    p = 0.8
    e0 = math.log(p / (1 - p))
    orders = np.array([0.5, 1.0, 2.0, 3.7, 40.0, np.inf])
    got = C.renyi_divergence([e0, -e0], [p, 1 - p], orders)
    a = orders[[0, 2, 3, 4]]
    closed = np.log(p ** a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)
    np.testing.assert_allclose(got[[0, 2, 3, 4]], closed, rtol=1e-13)
    assert got[1] == pytest.approx((2 * p - 1) * e0, rel=1e-13)   # KL divergence
    assert got[5] == pytest.approx(e0, rel=1e-15)
    assert np.all(np.diff(got) > 0)                                  # nondecreasing in alpha
    assert isinstance(C.renyi_divergence([e0, -e0], [p, 1 - p], 2.0), float)


def test_renyi_divergence_of_discretised_gaussian_loss():
    sigma = 2.0
    mu = 1.0 / sigma
    edges = np.linspace(mu ** 2 / 2 - 14 * mu, mu ** 2 / 2 + 14 * mu, 200001)
    mass = np.diff(special.ndtr((edges - mu ** 2 / 2) / mu))
    centres = (edges[:-1] + edges[1:]) / 2
    orders = np.array([1.5, 2.0, 8.0])
    got = C.renyi_divergence(centres, mass, orders)
    np.testing.assert_allclose(got, orders / (2 * sigma ** 2), rtol=1e-4)
    sgm = C.subsampled_gaussian_rdp(sigma, 1.0, orders)
    np.testing.assert_allclose(got, sgm, rtol=1e-4)


def test_renyi_divergence_infinity_mass_and_log_space_stability():
    got = C.renyi_divergence([0.1, -0.1], [0.5, 0.49], [0.5, 1.0, 2.0], infinity_mass=0.01)
    assert np.isfinite(got[0]) and got[1] == math.inf and got[2] == math.inf
    # huge losses and tiny masses: no overflow, matches mpmath
    losses, probs, order = [1000.0, -1000.0], [1e-300, 1.0 - 1e-300], 50.0
    got = C.renyi_divergence(losses, probs, order)
    mp.mp.dps = 50
    tiny = mp.mpf(1e-300)
    ref = mp.log(tiny * mp.exp(49 * 1000) + (1 - tiny) * mp.exp(-49 * 1000)) / 49
    assert np.isfinite(got) and got == pytest.approx(float(ref), rel=1e-13)
    assert C.renyi_divergence([math.inf, 0.0], [0.2, 0.8], 2.0) == math.inf


def test_subsampled_gaussian_rdp_matches_opacus():
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp
    orders = np.array(RDPAccountant.DEFAULT_ALPHAS[::3] + [12, 33, 63, 128, 256])
    for sigma in (0.5, 1.5, 4.0):
        for q in (0.04, 0.2, 0.5, 0.9):
            mine = C.subsampled_gaussian_rdp(sigma, q, orders)
            theirs = compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=orders)
            np.testing.assert_allclose(mine, theirs, rtol=1e-8)
    assert C.subsampled_gaussian_rdp(2.0, 1.0, 3.0) == pytest.approx(3.0 / 8.0, rel=1e-15)
    assert C.subsampled_gaussian_rdp(2.0, 0.0, 3.0) == 0.0
    assert C.subsampled_gaussian_rdp(0.0, 0.1, 3.0) == math.inf
    assert C.subsampled_gaussian_rdp(1.0, 0.1, math.inf) == math.inf


def _sgm_rdp_quad(sigma, q, alpha):
    mp.mp.dps = 40
    f = lambda x: (((1 - q) * mp.npdf(x, 0, sigma) + q * mp.npdf(x, 1, sigma)) ** alpha
                   * mp.npdf(x, 0, sigma) ** (1 - alpha))
    a = mp.quad(f, [-mp.inf, -20 * sigma, 0, 0.5, 1, 20 * sigma, mp.inf])
    return float(mp.log(a) / (alpha - 1))


@pytest.mark.parametrize("sigma,q,alpha", [(1.5, 0.04, 1.1), (0.8, 0.2, 2.5),
                                           (1.0, 0.01, 10.3), (0.5, 0.01, 1.5),
                                           (1.0, 0.01, 1.1), (2.0, 0.1, 7.0)])
def test_subsampled_gaussian_rdp_is_an_upper_bound_vs_quadrature(sigma, q, alpha):
    ref = _sgm_rdp_quad(sigma, q, alpha)
    got = C.subsampled_gaussian_rdp(sigma, q, alpha)
    assert ref * (1 - 1e-13) <= got <= ref * (1 + 1e-8)


def test_rdp_accountant_reference_value_is_reproduced():
    from opacus.accountants import RDPAccountant
    orders = RDPAccountant.DEFAULT_ALPHAS
    rdp = C.subsampled_gaussian_rdp(1.5, 0.04, orders) * 2250
    out = C.rdp_to_epsilon(orders, rdp, 1e-5)
    assert isinstance(out, EpsilonBounds) and out.method == "rdp" and out.lower == 0.0
    assert out.upper == pytest.approx(7.3291, abs=5e-5)
    acc = RDPAccountant()
    acc.history = [(1.5, 0.04, 2250)]
    assert out.upper == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
    assert out.upper >= acc.get_epsilon(delta=1e-5) * (1 - 1e-12)
    standard = C.rdp_to_epsilon(orders, rdp, 1e-5, conversion="standard")
    assert standard.upper > out.upper


@HYP
@given(rdp=st.lists(st.floats(0.0, 50.0), min_size=1, max_size=8),
       log_delta=st.floats(-20, -0.01))
def test_rdp_conversions_are_consistent(rdp, log_delta):
    orders = np.linspace(1.5, 40.0, len(rdp))
    delta = 10.0 ** log_delta
    imp = C.rdp_to_epsilon(orders, rdp, delta)
    std = C.rdp_to_epsilon(orders, rdp, delta, conversion="standard")
    assert 0.0 <= imp.upper <= std.upper
    assert not math.isnan(imp.upper)
    for out, conv in ((imp, "improved"), (std, "standard")):
        back = C.rdp_to_delta(orders, rdp, out.upper, conversion=conv).upper
        assert 0.0 <= back <= delta * (1 + 1e-9)


def test_rdp_edge_cases():
    out = C.rdp_to_epsilon([2.0, 3.0], [math.inf, math.inf], 1e-5)
    assert out.upper == math.inf and out.notes
    assert C.rdp_to_epsilon([2.0], [0.1], 0.0).upper == math.inf
    assert C.rdp_to_epsilon([2.0], [0.1], 1.0).upper == 0.0
    assert C.rdp_to_epsilon([2.0], [0.0], 0.9).upper == 0.0        # clamped, not negative
    d = C.rdp_to_delta([2.0, 3.0], [math.inf, math.inf], [0.0, 1.0])
    assert np.all(d.upper == 1.0)
    d = C.rdp_to_delta([2.0, 8.0], [0.01, 0.04], [0.0, 1.0, math.inf])
    assert isinstance(d, DeltaBounds) and np.all(d.upper <= 1.0) and d.upper[2] == 0.0


# ------------------------------------------------------------------------------------
# concentrated DP: zCDP and Dwork-Rothblum (mu, tau)-CDP
# ------------------------------------------------------------------------------------

def test_zcdp_conversions_values():
    rho, delta = 0.5, 1e-5
    bs = C.zcdp_epsilon(rho, delta, method="bun-steinke")
    assert bs.upper == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)), rel=1e-14)
    cks = C.zcdp_epsilon(rho, delta, method="cks")
    alphas = 1 + np.logspace(-3, 3, 200001)
    brute = np.min(alphas * rho + np.log1p(-1 / alphas)
                   - (math.log(delta) + np.log(alphas)) / (alphas - 1))
    assert cks.upper == pytest.approx(brute, rel=1e-8) and cks.upper < bs.upper
    best = C.zcdp_epsilon(rho, delta)
    assert best.upper == cks.upper and best.method == "zcdp"
    assert C.zcdp_delta(rho, best.upper).upper <= delta * (1 + 1e-9)
    assert C.zcdp_delta(rho, 3.0, method="bun-steinke").upper == pytest.approx(
        math.exp(-(3.0 - rho) ** 2 / (4 * rho)), rel=1e-14)
    assert C.gaussian_zcdp(2.0) == pytest.approx(1 / 8) and C.gaussian_zcdp(2.0, 3.0) == 9 / 8


@HYP
@given(log_rho=st.floats(-8, 4), log_delta=st.floats(-30, -0.1), eps=st.floats(0.0, 100.0))
def test_zcdp_tightest_is_never_worse_and_never_nan(log_rho, log_delta, eps):
    rho, delta = 10.0 ** log_rho, 10.0 ** log_delta
    best = C.zcdp_epsilon(rho, delta).upper
    bs = C.zcdp_epsilon(rho, delta, method="bun-steinke").upper
    assert 0.0 <= best <= bs and not math.isnan(best)
    d = C.zcdp_delta(rho, eps)
    assert 0.0 <= d.upper <= C.zcdp_delta(rho, eps, method="bun-steinke").upper
    assert d.upper <= 1.0


def test_zcdp_edge_cases():
    assert C.zcdp_epsilon(0.0, 1e-5).upper == 0.0
    assert C.zcdp_epsilon(0.0, 1e-5, xi=0.3).upper == 0.3
    assert C.zcdp_epsilon(0.1, 0.0).upper == math.inf
    assert C.zcdp_epsilon(math.inf, 1e-5).upper == math.inf
    assert C.zcdp_delta(0.0, 0.0).upper == 0.0
    assert C.zcdp_delta(math.inf, 5.0).upper == 1.0
    assert C.zcdp_delta(0.1, math.inf).upper == 0.0
    xi = C.zcdp_epsilon(0.1, 1e-5, xi=0.2, method="bun-steinke").upper
    assert xi == pytest.approx(0.2 + C.zcdp_epsilon(0.1, 1e-5, method="bun-steinke").upper)


def test_cdp_parameters_and_composition():
    g = C.gaussian_cdp(2.0)
    assert g.mu == pytest.approx(1 / 8, rel=1e-14) and g.tau == pytest.approx(0.5, rel=1e-14)
    comp = C.compose_cdp(g.mu, g.tau, 64)
    assert comp.mu == pytest.approx(8.0, rel=1e-14) and comp.tau == pytest.approx(4.0, rel=1e-14)
    het = C.compose_cdp([0.1, 0.2], [0.3, 0.4])
    assert tuple(het) == pytest.approx((0.3, 0.5), rel=1e-14)
    pure = C.pure_dp_cdp(1.0)
    assert pure.mu == pytest.approx(math.expm1(1.0) / 2, rel=1e-14) and pure.tau == 1.0
    p = 0.75
    rr = C.randomized_response_cdp(p)
    e0 = math.log(3.0)
    assert rr.mu == pytest.approx((2 * p - 1) * e0, rel=1e-13) and rr.tau == pytest.approx(e0)
    assert rr.mu <= C.pure_dp_cdp(e0).mu
    assert C.randomized_response_cdp(0.25).mu == pytest.approx(rr.mu, rel=1e-13)
    lap = C.laplace_cdp(2.0)
    assert lap.mu == pytest.approx(0.5 + math.exp(-0.5) - 1, rel=1e-13) and lap.tau == 0.5
    assert lap.mu <= C.pure_dp_cdp(0.5).mu
    zero = C.randomized_response_cdp(0.5)
    assert zero.mu == 0.0 and zero.tau == 0.0
    assert C.cdp_delta(zero.mu, zero.tau, 0.0).upper == 0.0


def test_cdp_delta_tail_formula_and_best():
    mu, tau = 0.5, 1.0
    tail = C.cdp_delta(mu, tau, [0.2, 3.0], method="tail")
    assert tail.upper[0] == 1.0
    assert tail.upper[1] == pytest.approx(math.exp(-(2.5) ** 2 / 2), rel=1e-14)
    best = C.cdp_delta(mu, tau, [0.2, 3.0])
    assert np.all(best.upper <= tail.upper) and best.upper[1] < tail.upper[1]
    eps = C.cdp_epsilon(mu, tau, 1e-6, method="tail")
    assert eps.upper == pytest.approx(mu + tau * math.sqrt(2 * math.log(1e6)), rel=1e-14)
    assert C.cdp_epsilon(mu, tau, 1e-6).upper <= eps.upper
    assert C.cdp_delta(mu, tau, C.cdp_epsilon(mu, tau, 1e-6).upper).upper <= 1e-6 * (1 + 1e-9)
    assert C.cdp_delta(0.3, 0.0, [0.0, 0.3]).upper.tolist() == pytest.approx(
        [-math.expm1(-0.3), 0.0], rel=1e-14)
    assert C.cdp_epsilon(0.3, 0.0, 1e-9).upper == 0.3


def test_randomized_response_cdp_brackets_exact_composition():
    p, r = 0.6, 200
    e0 = math.log(p / (1 - p))
    single = C.randomized_response_cdp(p)
    params = C.compose_cdp(single.mu, single.tau, r)
    for eps in (5.0, 15.0, 30.0):
        exact = float(rr_delta_mp(e0, r, eps))
        assert C.cdp_delta(params.mu, params.tau, eps).upper >= exact
        assert C.kov_delta(e0, 0.0, r, eps).upper >= exact * (1 - 1e-12)


def test_laplace_cdp_brackets_exact_single_release():
    b = 0.5
    eps0 = 1.0 / b
    lap = C.laplace_cdp(b)
    for eps in (0.0, 0.5, 1.0, 1.9):
        exact = -math.expm1((eps - eps0) / 2)       # Laplace hockey stick, eps <= eps0
        assert C.cdp_delta(lap.mu, lap.tau, eps).upper >= exact


# ------------------------------------------------------------------------------------
# every bound brackets the exact Gaussian composition
# ------------------------------------------------------------------------------------

def test_every_bound_is_above_the_exact_gaussian_curve():
    sigma, r = 2.0, 64
    mu = math.sqrt(r) / sigma
    targets = np.linspace(0.0, 25.0, 51)
    exact = gaussian_delta(targets, mu)
    from opacus.accountants import RDPAccountant
    orders = RDPAccountant.DEFAULT_ALPHAS
    rdp = C.subsampled_gaussian_rdp(sigma, 1.0, orders) * r
    bounds = {
        "rdp": C.rdp_to_delta(orders, rdp, targets).upper,
        "rdp-std": C.rdp_to_delta(orders, rdp, targets, conversion="standard").upper,
        "zcdp": C.zcdp_delta(r * C.gaussian_zcdp(sigma), targets).upper,
        "zcdp-bs": C.zcdp_delta(r * C.gaussian_zcdp(sigma), targets,
                                method="bun-steinke").upper,
    }
    g = C.compose_cdp(*tuple(C.gaussian_cdp(sigma)), compositions=r)
    bounds["cdp"] = C.cdp_delta(g.mu, g.tau, targets).upper
    bounds["cdp-tail"] = C.cdp_delta(g.mu, g.tau, targets, method="tail").upper
    base = np.concatenate([[0.0], np.geomspace(1e-3, 8.0, 200)])
    bounds["kov"] = C.kov_curve(base, gaussian_delta(base, 1 / sigma), r, targets).delta_upper
    for name, up in bounds.items():
        assert np.all(np.isfinite(up)) and np.all((up >= 0) & (up <= 1)), name
        assert np.all(up >= exact), name
    # epsilon-side bounds: the exact delta at the certified epsilon is below delta'
    for eps0 in (1.0, 1.5, 2.5):
        d0 = float(gaussian_delta(eps0, 1 / sigma))
        for out in (C.naive_composition(eps0, d0, r), C.adaptive_composition(eps0, d0, r),
                    C.advanced_composition(eps0, d0, r, 1e-6),
                    C.advanced_composition(eps0, d0, r, 1e-6, variant="dr16")):
            assert gaussian_delta(out.upper, mu) <= out.delta
        kov = C.kov_epsilon(eps0, d0, r, 0.05)
        if math.isfinite(kov.upper):
            assert gaussian_delta(kov.upper, mu) <= 0.05
    for delta in (1e-3, 1e-6, 1e-10):
        for out in (C.rdp_to_epsilon(orders, rdp, delta),
                    C.zcdp_epsilon(r * C.gaussian_zcdp(sigma), delta),
                    C.cdp_epsilon(g.mu, g.tau, delta)):
            assert gaussian_delta(out.upper, mu) <= delta


# ------------------------------------------------------------------------------------
# input validation: ValueError naming parameter, value and range
# ------------------------------------------------------------------------------------

BAD_CALLS = [
    (C.naive_composition, dict(epsilon=-1.0, delta=0.0, compositions=3), "epsilon"),
    (C.naive_composition, dict(epsilon=1.0, delta=1.5, compositions=3), "delta"),
    (C.naive_composition, dict(epsilon=1.0, delta=0.0, compositions=0), "compositions"),
    (C.adaptive_composition, dict(epsilon=1.0, delta=0.0, compositions=2.5), "compositions"),
    (C.adaptive_composition, dict(epsilon=float("nan"), delta=0.0, compositions=2), "epsilon"),
    (C.advanced_composition, dict(epsilon=1.0, delta=0.0, compositions=2, delta_slack=0.0),
     "delta_slack"),
    (C.advanced_composition, dict(epsilon=1.0, delta=0.0, compositions=2, delta_slack=0.1,
                                  variant="book"), "variant"),
    (C.advanced_composition_epsilon, dict(epsilon=1.0, delta=0.0, compositions=2,
                                          target_delta=-1e-5), "target_delta"),
    (C.kov_delta, dict(epsilon0=-0.1, delta0=0.0, compositions=5, epsilon=1.0), "epsilon0"),
    (C.kov_delta, dict(epsilon0=0.1, delta0=2.0, compositions=5, epsilon=1.0), "delta0"),
    (C.kov_delta, dict(epsilon0=0.1, delta0=0.0, compositions=10 ** 8, epsilon=1.0),
     "compositions"),
    (C.kov_delta, dict(epsilon0=0.1, delta0=0.0, compositions=True, epsilon=1.0),
     "compositions"),
    (C.kov_delta, dict(epsilon0=0.1, delta0=0.0, compositions=5, epsilon=[1.0, -1.0]),
     "epsilon"),
    (C.kov_epsilon, dict(epsilon0=0.1, delta0=0.0, compositions=5, delta=1.1), "delta"),
    (C.kov_curve, dict(base_epsilons=[0.1, 0.2], base_deltas=[0.1], compositions=5,
                       epsilons=[1.0]), "base_epsilons"),
    (C.kov_curve, dict(base_epsilons=[], base_deltas=[], compositions=5, epsilons=[1.0]),
     "base_epsilons"),
    (C.kov_curve, dict(base_epsilons=[0.1], base_deltas=[float("nan")], compositions=5,
                       epsilons=[1.0]), "base_deltas"),
    (C.renyi_divergence, dict(losses=[0.1, 0.2], probabilities_a=[0.5], orders=2.0), "losses"),
    (C.renyi_divergence, dict(losses=[0.1], probabilities_a=[-0.5], orders=2.0),
     "probabilities_a"),
    (C.renyi_divergence, dict(losses=[0.1, 0.0], probabilities_a=[0.7, 0.7], orders=2.0),
     "sum"),
    (C.renyi_divergence, dict(losses=[0.1], probabilities_a=[0.5], orders=0.0), "orders"),
    (C.renyi_divergence, dict(losses=[0.1], probabilities_a=[0.5], orders=2.0,
                              infinity_mass=-0.1), "infinity_mass"),
    (C.renyi_divergence, dict(losses=[-math.inf], probabilities_a=[0.5], orders=2.0), "losses"),
    (C.rdp_to_epsilon, dict(orders=[1.0, 2.0], rdp=[0.1, 0.2], delta=1e-5), "orders"),
    (C.rdp_to_epsilon, dict(orders=[2.0], rdp=[-0.1], delta=1e-5), "rdp"),
    (C.rdp_to_epsilon, dict(orders=[2.0, 3.0], rdp=[0.1], delta=1e-5), "orders"),
    (C.rdp_to_epsilon, dict(orders=[2.0], rdp=[0.1], delta=1e-5, conversion="x"), "conversion"),
    (C.rdp_to_delta, dict(orders=[2.0], rdp=[0.1], epsilon=-1.0), "epsilon"),
    (C.subsampled_gaussian_rdp, dict(noise_multiplier=-1.0, sample_rate=0.1, orders=[2.0]),
     "noise_multiplier"),
    (C.subsampled_gaussian_rdp, dict(noise_multiplier=1.0, sample_rate=1.5, orders=[2.0]),
     "sample_rate"),
    (C.subsampled_gaussian_rdp, dict(noise_multiplier=1.0, sample_rate=0.1, orders=[0.5]),
     "orders"),
    (C.zcdp_epsilon, dict(rho=-0.1, delta=1e-5), "rho"),
    (C.zcdp_epsilon, dict(rho=0.1, delta=1e-5, method="exact"), "method"),
    (C.zcdp_delta, dict(rho=0.1, epsilon=float("nan")), "epsilon"),
    (C.cdp_delta, dict(mu=-0.1, tau=1.0, epsilon=1.0), "mu"),
    (C.cdp_delta, dict(mu=0.1, tau=-1.0, epsilon=1.0), "tau"),
    (C.cdp_epsilon, dict(mu=0.1, tau=1.0, delta=-1.0), "delta"),
    (C.compose_cdp, dict(mu=[0.1, 0.2], tau=[0.1]), "mu"),
    (C.compose_cdp, dict(mu=0.1, tau=0.1, compositions=-2), "compositions"),
    (C.gaussian_zcdp, dict(noise_multiplier=-2.0), "noise_multiplier"),
    (C.gaussian_cdp, dict(noise_multiplier=1.0, sensitivity=-1.0), "sensitivity"),
    (C.pure_dp_cdp, dict(epsilon0=math.inf), "epsilon0"),
    (C.randomized_response_cdp, dict(p=1.0), "p"),
    (C.laplace_cdp, dict(scale=0.0), "scale"),
]


@pytest.mark.parametrize("func,kwargs,name", BAD_CALLS,
                         ids=[f"{f.__name__}-{n}-{i}" for i, (f, _, n) in enumerate(BAD_CALLS)])
def test_invalid_inputs_raise_value_error_naming_the_parameter(func, kwargs, name):
    with pytest.raises(ValueError, match=name) as info:
        func(**kwargs)
    message = str(info.value)
    assert "must" in message and "got" in message


def test_results_are_never_nan_or_negative():
    outs = [
        C.rdp_to_epsilon([2.0, 64.0], [0.0, 0.0], 0.5),
        C.zcdp_epsilon(1e-12, 0.9),
        C.cdp_epsilon(0.0, 1e-9, 0.5),
        C.kov_epsilon(5.0, 0.0, 3, 0.99),
        C.advanced_composition_epsilon(0.0, 0.0, 10, 1e-5),
    ]
    for out in outs:
        assert not math.isnan(out.upper) and out.upper >= 0.0 and out.lower == 0.0


# ------------------------------------------------------------------------------------
# review by helper 41: the last ulps of KOV, and zCDP / CDP tails below the double range
# ------------------------------------------------------------------------------------


def test_kov_delta_is_not_below_the_exact_theorem_value_by_an_ulp():
    """Above r eps0 the KOV bound is exactly 1 - (1 - delta0)^r; computed in log space
    without an allowance for the last roundings it came out a few ulps below that
    (about half of random delta0; a chord of two values near 1 gave 1 - 2^-53 where
    the exact bound exceeds 1 - 1e-49).  Exact rational check."""
    from fractions import Fraction
    rng = np.random.default_rng(41)
    for _ in range(300):
        d0 = float(10.0 ** rng.uniform(-15.0, -0.05))
        r = int(rng.integers(1, 11))
        up = C.kov_delta(1.0, d0, r, 50.0).upper
        assert Fraction(up) >= 1 - (1 - Fraction(d0)) ** r, (d0, r, up)
    # the chord between two grid values that both round to 1
    assert C.kov_delta(0.019617907045033696, 0.6796211686442357, 100, 0.1).upper == 1.0


def test_kov_delta_with_delta0_brackets_the_mpmath_curve_between_grid_points():
    """The interpolated KOV curve (chord in e^eps of the Theorem 3 grid values) in
    50-digit mpmath, at grid points and between them, with delta0 > 0."""
    mp.mp.dps = 50
    for e0, d0, r in ((0.01, 0.3, 2), (1.2458033897794039, 1e-12, 50), (0.5, 1e-6, 7)):
        E0, D0 = mp.mpf(e0), mp.mpf(d0)
        grid = []
        for i in range(r // 2 + 1):
            di = mp.fsum(mp.binomial(r, l) * (mp.exp((r - l) * E0) - mp.exp((r - 2 * i + l) * E0))
                         for l in range(i)) / (1 + mp.exp(E0)) ** r
            grid.append(((r - 2 * i) * E0, 1 - (1 - D0) ** r * (1 - di)))
        targets = [float(g[0]) for g in grid] + [float(g[0] - E0 / 3) for g in grid[:-1]]
        ups = C.kov_delta(e0, d0, r, np.array(targets)).upper
        for t, up in zip(targets, ups):
            T = mp.mpf(t)
            exact = min([d for e, d in grid if e <= T] + [mp.mpf(1)])
            for (ea, da), (eb, db) in zip(grid, grid[1:]):
                if eb <= T <= ea:
                    lam = (mp.exp(ea) - mp.exp(T)) / (mp.exp(ea) - mp.exp(eb))
                    exact = min(exact, lam * db + (1 - lam) * da)
            assert mp.mpf(float(up)) >= exact, (e0, d0, r, t, up, exact)


def test_zcdp_and_cdp_tails_never_round_a_positive_bound_to_zero():
    """exp(-(eps - rho)^2 / (4 rho)) below the double range was reported as 0, below the
    true delta of the Gaussian it bounds (1e-486 at sigma 5, 10 steps, eps 30); the
    (mu, tau)-CDP tail raised OverflowError past eps ~ 1e154 ((e - m) ** 2)."""
    rho = 10 / (2 * 5.0 ** 2)
    mp.mp.dps = 40
    mu = mp.sqrt(10) / 5
    exact = mp.ncdf(-30 / mu + mu / 2) - mp.exp(30) * mp.ncdf(-30 / mu - mu / 2)
    assert 0 < exact < mp.mpf("1e-400")
    for method in ("best", "bun-steinke", "cks"):
        up = C.zcdp_delta(rho, np.array([30.0, 1e3, 1e300]), method=method).upper
        assert np.all(up > 0) and np.all(up <= 2 ** -1074 * 2), (method, up)
    for method in ("best", "tail"):
        up = C.cdp_delta(0.2, 0.6, np.array([30.0, 1e3, 1e300]), method=method).upper
        assert np.all(up > 0) and np.all(up < 1e-300), (method, up)
    from pb_accountant import Gaussian
    up = C.cdp_delta_for_sequence([(Gaussian(1.0), 10)], np.array([1e3, 1e300])).upper
    assert np.all(np.isfinite(up)) and np.all(up < 1e-10)
    # pure DP (rho = 0, tau = 0) keeps its exact 0
    assert C.zcdp_delta(0.0, 1.0).upper == 0.0
    assert C.cdp_delta(1.0, 0.0, 2.0).upper == 0.0


def test_cdp_with_tau_zero_answers_every_epsilon():
    """(mu, 0)-CDP: delta = (1 - e^{eps - mu})_+, 0 from eps = mu on.  expm1(eps - mu)
    raised OverflowError past eps - mu = 709, so cdp_delta(0, 0, 800) and the bisection
    of cdp_epsilon_for_sequence (which doubles eps up to 1e4) over a pair whose
    conditional pair has tau = 0 (here one direction keeps a single event) crashed."""
    assert C.cdp_delta(0.0, 0.0, 800.0).upper == 0.0
    assert C.cdp_delta(1.0, 0.0, 0.5).upper >= -math.expm1(-0.5)
    from pb_accountant import DiscretePair
    pair = DiscretePair((0.7248397836541915, 0.27516021634580845), (0.0, 1.0))
    # the distinguishing mass 0.7248 is above 1e-12: no epsilon certifies it
    assert C.cdp_epsilon_for_sequence([(pair, 1)], 1e-12).upper == math.inf
    assert C.cdp_epsilon_for_sequence([(pair, 1)], 0.9).upper == 0.0
