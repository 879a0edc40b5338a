"""Certified trade-off (f-DP) bounds bracket the closed forms: the Gaussian mechanism's
curve Phi(Phi^-1(1 - alpha) - mu), composed (mu = sqrt(T) / sigma), and randomized
response's piecewise-linear curve; TPR-at-FPR and GDP-mu bounds follow."""
import math

import numpy as np
import pytest
from scipy import special

from pb_accountant import (Gaussian, PrivacyBucketsAccountant, RandomizedResponse,
                           SubsampledGaussian, compose)
from pb_accountant.tradeoff import (DEFAULT_FPR, TradeoffBounds, tradeoff_bounds,
                                    tradeoff_from_curves, trivial_tradeoff)

ALPHAS = np.array([1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99,
                   0.999999])
#: allowance for scipy's ndtr/ndtri in the reference values (a few ulp)
REF = 1e-12


def gaussian_tpr(alpha, mu):
    """1 - G_mu(alpha) = Phi(Phi^-1(alpha) + mu), accurate for tiny alpha."""
    return special.ndtr(special.ndtri(alpha) + mu)


def gaussian_beta(alpha, mu):
    return special.ndtr(-special.ndtri(alpha) - mu)


def assert_brackets(tb: TradeoffBounds, beta, tpr):
    assert np.all(tb.beta_lower <= beta * (1 + REF))
    assert np.all(beta * (1 - REF) <= tb.beta_upper)
    assert np.all(tb.tpr_lower <= tpr * (1 + REF))
    assert np.all(tpr * (1 - REF) <= tb.tpr_upper)
    assert np.all(tb.beta_lower >= 0) and np.all(tb.beta_upper <= 1 - tb.fpr + 1e-15)
    assert np.all(tb.tpr_lower >= 0) and np.all(tb.tpr_upper <= 1)


@pytest.mark.parametrize("sigma,count", [(1.0, 1), (2.0, 1), (0.5, 1), (4.0, 16), (10.0, 50)])
def test_brackets_the_gaussian_curve(sigma, count):
    mu = math.sqrt(count) / sigma
    pb = compose([(Gaussian(sigma), count)], delta=1e-10)
    tb = tradeoff_bounds(pb, ALPHAS)
    assert_brackets(tb, gaussian_beta(ALPHAS, mu), gaussian_tpr(ALPHAS, mu))
    # not vacuous: relative width in the TPR below 1% wherever the TPR is above 1e-9
    tpr = gaussian_tpr(ALPHAS, mu)
    big = tpr > 1e-9
    assert np.all((tb.tpr_upper - tb.tpr_lower)[big] <= 1e-2 * tpr[big])
    assert tb.mu_lower <= mu <= tb.mu_upper
    assert tb.mu_upper - tb.mu_lower <= 0.02 * mu


def test_randomized_response_curve():
    """RR with bias p is exactly (eps0, 0)-DP with eps0 = log(p / (1-p)): its curve is
    max(0, 1 - e^eps0 alpha, e^-eps0 (1 - alpha))."""
    for p in (0.6, 0.75, 0.9):
        e0 = p / (1 - p)
        pb = compose([(RandomizedResponse(p), 1)], delta=1e-10)
        tb = tradeoff_bounds(pb, ALPHAS)
        beta = np.maximum.reduce([np.zeros_like(ALPHAS), 1 - e0 * ALPHAS, (1 - ALPHAS) / e0])
        assert_brackets(tb, beta, 1 - beta)
        # not vacuous: within the leaf grid's spacing (4% of the loss's spread, so up to
        # e^0.04 on the atoms' loss log(p / (1-p)))
        np.testing.assert_allclose(tb.beta_upper, beta, rtol=5e-2, atol=1e-12)
        np.testing.assert_allclose(tb.beta_lower, beta, rtol=5e-2, atol=1e-12)


def test_composed_randomized_response_is_bracketed_by_its_exact_curve():
    """Two-fold RR: the exact curve from the exact hockey-stick divergence (a 3-atom
    loss distribution), via the duality formula on a fine eps grid (a lower envelope of
    the true curve; the true curve at the atoms' kinks is exactly attained)."""
    p = 0.8
    e0 = math.log(p / (1 - p))
    losses = np.array([2 * e0, 0.0, -2 * e0])
    pa = np.array([p * p, 2 * p * (1 - p), (1 - p) ** 2])
    pb_ = pa * np.exp(-losses)

    def hs(eps, a, b):
        return np.maximum(a[None, :] - np.exp(eps)[:, None] * b[None, :], 0).sum(axis=1)

    eps = np.concatenate((np.linspace(0, 4 * e0, 4001), [2 * e0]))
    d = hs(eps, pa, pb_)
    alpha = np.array([1e-6, 1e-3, 0.01, 0.04, 0.2, 0.5, 0.9])
    beta = np.maximum(0, np.max(np.maximum(1 - d[None, :] - np.exp(eps)[None, :] * alpha[:, None],
                                           np.exp(-eps)[None, :] * (1 - d[None, :] - alpha[:, None])),
                                axis=1))
    tb = tradeoff_bounds(compose([(RandomizedResponse(p), 2)], delta=1e-10), alpha)
    assert np.all(tb.beta_lower <= beta * (1 + 1e-9))
    assert np.all(beta * (1 - 1e-3) <= tb.beta_upper)


def test_subsampled_gaussian_consistent_with_epsilon_bounds():
    """The f-DP bound is at least as strong as the (eps, delta) one at every delta:
    TPR <= e^eps_up alpha + delta; and TPR >= alpha (no test is worse than guessing)."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 500)]
    tb = acc.get_tradeoff_bounds(ALPHAS)
    for delta in (1e-7, 1e-5, 1e-3):
        eps = acc.get_epsilon(delta)
        assert np.all(tb.tpr_upper <= np.minimum(1.0, math.exp(eps) * ALPHAS + delta) * (1 + 1e-9))
    assert np.all(tb.tpr_lower >= ALPHAS * (1 - 1e-12))
    assert np.all(tb.tpr_lower <= tb.tpr_upper)
    assert 0 < tb.mu_lower <= tb.mu_upper


def test_empty_history_is_exact():
    pb = compose([], delta=1e-6)
    tb = tradeoff_bounds(pb, ALPHAS)
    # exact up to the certified rounding allowance (a few 1e-15 absolute)
    np.testing.assert_allclose(tb.beta_lower, 1 - ALPHAS, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(tb.beta_upper, 1 - ALPHAS, rtol=1e-14, atol=1e-14)
    assert tb.mu_lower == 0.0 and tb.mu_upper <= 1e-5       # mu = 0 up to rounding


def test_accountant_api_is_deterministic_and_matches_engine():
    acc = PrivacyBucketsAccountant()
    for _ in range(50):
        acc.step(noise_multiplier=1.2, sample_rate=0.05)
    lo, up = acc.get_tpr_bounds(0.01)
    assert isinstance(lo, float) and lo < up
    again = PrivacyBucketsAccountant()
    again.load_state_dict(acc.state_dict())
    assert again.get_tpr_bounds(0.01) == (lo, up)
    tb = acc.get_tradeoff_bounds()
    np.testing.assert_array_equal(tb.fpr, DEFAULT_FPR)
    engine = compose([(SubsampledGaussian(1.2, 0.05), 50)])
    tb2 = engine.tradeoff_bounds()
    np.testing.assert_array_equal(tb.tpr_upper, tb2.tpr_upper)
    arr_lo, arr_up = acc.get_tpr_bounds([0.01, 0.1])
    assert arr_lo[0] == lo and arr_up[0] == up
    d = tb.as_dict()
    assert d["fpr"] == list(DEFAULT_FPR) and len(d["tpr_upper"]) == 3


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), "0.1", [0.1, 2.0], 1e-310, 5e-324])
def test_bad_fpr_raises_naming_it(bad):
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.1, 3)]
    with pytest.raises(ValueError, match="fpr"):
        acc.get_tradeoff_bounds(bad)
    with pytest.raises(ValueError, match="fpr"):
        tradeoff_bounds(compose([(Gaussian(1.0), 1)]), bad)


def test_bad_options_raise():
    pb = compose([(Gaussian(1.0), 1)])
    with pytest.raises(ValueError, match="mu_alpha_min"):
        tradeoff_bounds(pb, mu_alpha_min=0.0)
    with pytest.raises(ValueError, match="mu_alpha_min"):
        tradeoff_bounds(pb, mu_alpha_min=1e-310)      # a subnormal: 1/alpha would overflow
    with pytest.raises(ValueError, match="eps_step"):
        tradeoff_bounds(pb, eps_step=-1)


def test_trivial_and_nan_guard():
    tb = trivial_tradeoff([0.1], note="why")
    assert tb.tpr_upper[0] == 1.0 and tb.tpr_lower[0] <= 0.1 and tb.notes == ("why",)
    with pytest.raises(RuntimeError, match="NaN"):
        tradeoff_from_curves(lambda d, e: np.full_like(e, np.nan), lambda d, e: np.zeros_like(e))


def _rr_tradeoff(p, k, alpha):
    """Exact trade-off curve of k-fold randomized response (symmetric: T(A,B) = T(B,A)):
    outcomes j = truthful answers, P(j) = Bin(k, p), Q(j) = Bin(k, 1-p); Neyman-Pearson
    rejects where Q / P is largest, randomising on the boundary outcome."""
    j = np.arange(k + 1)
    comb = np.array([math.comb(k, int(i)) for i in j], dtype=float)
    P = comb * p ** j * (1 - p) ** (k - j)
    Q = comb * (1 - p) ** j * p ** (k - j)
    order = np.argsort(-(Q / P))
    cp = np.concatenate(([0.0], np.cumsum(P[order])))
    cq = np.concatenate(([0.0], np.cumsum(Q[order])))
    return 1.0 - np.interp(alpha, cp, cq)


def test_gdp_mu_of_a_large_pure_dp_curve():
    """3-fold randomized response at p = 0.999 (eps 20.7): f stays positive below
    alpha = 1, and its mu* (about 9.05) needs lines from eps beyond the first grid end,
    log(1 / alpha_min) + 5 = 18.8, where the grid used to stop (mu_upper was inf)."""
    tb = tradeoff_bounds(compose([(RandomizedResponse(0.999), 3)], delta=1e-10), [0.1])
    grid = np.concatenate((np.geomspace(1e-6, 0.5, 20000), 1 - np.geomspace(1e-6, 0.5, 20000)))
    est = float(np.max(-special.ndtri(grid) - special.ndtri(_rr_tradeoff(0.999, 3, grid))))
    assert 2.0 < tb.mu_lower <= tb.mu_upper < math.inf
    assert est <= tb.mu_upper <= est * 1.01       # est <= mu* (a max over a grid)
    assert tb.mu_lower <= est * (1 + 1e-6)


def test_gdp_mu_upper_for_large_gaussian_mu():
    """mu up to 20 (a Gaussian with sigma 0.05) is bracketed: the grid extends while the
    certified delta at its end is above alpha_min / 2, and the second line family keeps
    its relative accuracy near alpha = 1 (it was inf for mu above about 3.3)."""
    for sigma, count in [(0.3, 1), (1.0, 16), (0.125, 1), (0.05, 1)]:
        mu = math.sqrt(count) / sigma
        tb = tradeoff_bounds(compose([(Gaussian(sigma), count)], delta=1e-10), ALPHAS)
        assert tb.mu_lower <= mu <= tb.mu_upper <= mu * 1.01


def test_engine_imports_without_dp_accounting():
    """dp_accounting is optional: the engine, the trade-off bounds and the sampled
    Laplace pair import without it; only the adapter needs it."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['dp_accounting'] = None\n"
            "import pb_accountant, pb_accountant.tradeoff, pb_accountant.subsampled_laplace\n"
            "try:\n    import pb_accountant.dp_accounting_adapter\n"
            "except ImportError:\n    print('adapter needs dp_accounting')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "adapter needs dp_accounting"


def _exact_tradeoff(p0, p1, alpha):
    """T(P0, P1)(alpha) of two discrete distributions, exactly as Neyman-Pearson gives
    it: reject P0 on the atoms with the largest ratio P1/P0 first (randomising on the
    boundary), i.e. the piecewise-linear curve through the cumulative (alpha, beta)."""
    with np.errstate(divide="ignore"):
        ratio = np.where(p0 > 0, p1 / np.where(p0 > 0, p0, 1.0), np.inf)
    order = np.argsort(-ratio, kind="stable")
    a = np.concatenate(([0.0], np.cumsum(p0[order])))
    b = np.concatenate(([1.0], 1.0 - np.cumsum(p1[order])))
    b = np.maximum(b, 0.0)
    # np.interp needs increasing x: equal alphas (atoms with P0 = 0) keep the last beta
    keep = np.concatenate((np.diff(a) > 0, [True]))
    return np.interp(alpha, a[keep], b[keep], right=0.0)


@pytest.mark.parametrize("seed", range(12))
def test_brackets_exact_tradeoff_of_composed_discrete_pairs(seed):
    """Random small histogram pairs (some with distinguishing events), composed a few
    times: the certified bounds bracket the exact trade-off curve f = min(T(B, A),
    T(A, B)) of the product distributions, in both orders, at many alphas."""
    from itertools import product

    from pb_accountant import DiscretePair
    rng = np.random.default_rng(seed)
    sequence, atoms_a, atoms_b = [], [], []
    for _ in range(rng.integers(1, 3)):
        k = int(rng.integers(2, 4))
        a = rng.dirichlet(np.ones(k))
        b = rng.dirichlet(np.ones(k))
        if rng.random() < 0.3:                   # a distinguishing event (B-mass 0)
            b[0] = 0.0
            b /= b.sum()
        pair = DiscretePair(tuple(a), tuple(b))
        count = int(rng.integers(1, 3))
        sequence.append((pair, count))
        atoms_a += [np.asarray(pair.probabilities_a)] * count
        atoms_b += [np.asarray(pair.probabilities_b)] * count
    pa = np.array([np.prod(c) for c in product(*atoms_a)])
    pb_ = np.array([np.prod(c) for c in product(*atoms_b)])
    alpha = np.concatenate((np.geomspace(1e-9, 1e-2, 8), np.linspace(0.02, 1.0, 25)))
    exact = np.minimum(_exact_tradeoff(pb_, pa, alpha), _exact_tradeoff(pa, pb_, alpha))
    tb = tradeoff_bounds(compose(sequence, delta=1e-10), alpha)
    assert np.all(tb.beta_lower <= exact * (1 + 1e-9) + 1e-13)
    assert np.all(exact * (1 - 1e-9) - 1e-13 <= tb.beta_upper)
    assert np.max(tb.beta_upper - tb.beta_lower) < 0.01      # not vacuous (seen: <= 0.005)


def test_normal_quantile_brackets_hold_the_exact_quantile():
    mpmath = pytest.importorskip("mpmath")
    from pb_accountant.mechanisms import normal_cdf_upper, normal_quantile_bracket
    mpmath.mp.dps = 60
    rng = np.random.default_rng(7)
    p = np.concatenate(([0.0, 1.0, 5e-324, 1e-300, 1e-17, 0.5, 1 - 2.0 ** -53],
                        rng.uniform(0, 1, 60), 10 ** rng.uniform(-300, 0, 60)))
    lo, hi = normal_quantile_bracket(p)
    assert (lo[0], hi[0], lo[1], hi[1]) == (-np.inf, -np.inf, np.inf, np.inf)
    for pk, a, b in zip(p[2:], lo[2:], hi[2:]):
        assert mpmath.ncdf(mpmath.mpf(float(a))) <= pk <= mpmath.ncdf(mpmath.mpf(float(b)))
        assert 0 < b - a <= 1e-11 * (1 + abs(a)), pk
    x = np.concatenate((np.linspace(-39, 39, 157), [-np.inf, np.inf]))
    for xk, up in zip(x, normal_cdf_upper(x)):
        assert mpmath.ncdf(mpmath.mpf(float(xk))) <= up <= 1.0


def test_gdp_mu_bracket_trusts_no_library_cdf(monkeypatch):
    """scipy's ndtr and ndtri only steer the mu bracket: made wrong (ndtri off by 0.3,
    ndtr by 10%), they move neither end past the exact mu."""
    sigma, count = 2.0, 4
    mu = math.sqrt(count) / sigma
    pb = compose([(Gaussian(sigma), count)], delta=1e-10)
    right = tradeoff_bounds(pb, ALPHAS)
    ndtr, ndtri = special.ndtr, special.ndtri
    monkeypatch.setattr(special, "ndtri", lambda p: ndtri(p) + 0.3)
    monkeypatch.setattr(special, "ndtr", lambda x: 0.9 * ndtr(x))
    wrong = tradeoff_bounds(pb, ALPHAS)
    for tb in (right, wrong):
        assert tb.mu_lower <= mu <= tb.mu_upper
    assert wrong.mu_upper - wrong.mu_lower <= 0.02 * mu


def test_normal_functions_name_bad_input():
    from pb_accountant.mechanisms import normal_log_cdf_and_error, normal_quantile_bracket
    for bad in ([0.5, float("nan")], [1.5], [-0.1]):
        with pytest.raises(ValueError, match=r"p must lie in \[0, 1\], got"):
            normal_quantile_bracket(bad)
    with pytest.raises(ValueError, match="x must be a number or \\+-inf, got NaN"):
        normal_log_cdf_and_error([0.0, float("nan")])
