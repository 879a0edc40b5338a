"""Epsilons of tens of millions: the grid factor reaches 1e222 and the grouped C and D
rows must stay in floating-point range (``GroupedBuckets.squared`` moves f^+-1 into the
log-scales), and a NaN or inf must never pass as a number (docs/floating-point.md)."""
import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from _closed_form import gaussian_delta, gaussian_epsilon
from pb_accountant import PrivacyBucketsAccountant, engine
from pb_accountant.buckets import GroupedBuckets, Grid, _merged, _parity_slices
from pb_accountant.convolution import check_finite, convolve_rows
from pb_accountant.queries import ThresholdSum


def _accountant(sigma, q, steps):
    acc = PrivacyBucketsAccountant()
    acc.history = [(sigma, q, steps)]
    return acc


def _quiet(f, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return f(*args)


def _bracketed_epsilon(b, mu, delta, rel=1e-9):
    assert not (math.isnan(b.lower) or math.isnan(b.upper)), b
    assert 0.0 < b.lower <= b.upper, b
    assert float(gaussian_delta(b.lower, mu)) >= delta * (1 - rel), b
    assert float(gaussian_delta(b.upper, mu)) <= delta * (1 + rel), b


@pytest.fixture(scope="module")
def big_gaussian():
    """sigma 0.1, q 1, 10^6 steps: mu = 1e4, epsilon ~ 5e7, grid factor ~ 2.3e222."""
    return _accountant(0.1, 1.0, 10 ** 6), 1e4


def test_epsilon_at_small_delta_is_bracketed_at_a_factor_near_overflow(monkeypatch):
    # both directions on one grid: its range spans +-KL, hence the huge factor (an
    # epsilon query composes this history one direction at a time, below)
    monkeypatch.setattr(engine, "DIRECTIONS_APART", math.inf)
    acc, mu = _accountant(0.1, 1.0, 10 ** 6), 1e4
    b = _quiet(acc.get_epsilon_bounds, 1e-5)
    _bracketed_epsilon(b, mu, 1e-5)
    assert b.grid.factor > 1e200                      # the regime this file is about
    exact = gaussian_epsilon(1e-5, mu)
    assert b.lower <= exact <= b.upper
    assert b.lower >= exact * (1 - 1e-3)              # informative, not merely valid


def test_epsilon_by_direction_is_bracketed_on_a_far_smaller_factor(big_gaussian):
    acc, mu = big_gaussian
    b = _quiet(acc.get_epsilon_bounds, 1e-5)
    _bracketed_epsilon(b, mu, 1e-5)
    assert b.grid.factor < 1e100
    exact = gaussian_epsilon(1e-5, mu)
    assert b.lower <= exact <= b.upper
    assert (b.upper - b.lower) / b.upper <= engine.TARGET_WIDTH


def test_delta_bounds_are_bracketed_at_a_factor_near_overflow(big_gaussian, monkeypatch):
    monkeypatch.setattr(engine, "DIRECTIONS_APART", math.inf)   # one grid, as above
    acc, mu = big_gaussian
    db = _quiet(acc.get_delta_bounds, 5e7)
    exact = float(gaussian_delta(5e7, mu))            # 0.49996
    assert not (math.isnan(db.lower) or math.isnan(db.upper)), db
    assert db.lower <= exact * (1 + 1e-12) and exact <= db.upper * (1 + 1e-12), (db, exact)
    assert db.lower > 0.0                             # the lower bound is not given up


def test_privacy_curve_is_bracketed_at_a_factor_near_overflow(big_gaussian):
    acc, mu = big_gaussian
    eps = np.array([4.99e7, 5.0e7, 5.01e7])
    curve = _quiet(acc.get_privacy_curve, eps)
    lower, upper = np.asarray(curve.delta_lower), np.asarray(curve.delta_upper)
    assert not np.isnan(lower).any() and not np.isnan(upper).any(), curve
    for e, lo, up in zip(np.asarray(curve.epsilons), lower, upper):
        exact = float(gaussian_delta(float(e), mu))
        assert 0.0 <= lo <= exact * (1 + 1e-12) and exact <= up * (1 + 1e-12), (e, lo, up, exact)


@pytest.mark.parametrize("q", [0.5])   # (0.9 and sigma 0.14 over 2e6 steps
#   behave alike; left out for CI time: about 35 s each)
def test_subsampled_bounds_stay_valid_at_a_factor_near_overflow(q):
    """q < 1: no closed form; the lower bound is checked against an upper bound on the
    truth, the q = 1 Gaussian's exact epsilon (Poisson subsampling only lowers delta(eps)
    of the add/remove pair)."""
    sigma, steps, delta = 0.1, 10 ** 6, 1e-5
    b = _quiet(_accountant(sigma, q, steps).get_epsilon_bounds, delta)
    assert not (math.isnan(b.lower) or math.isnan(b.upper)), b
    assert 0.0 <= b.lower <= b.upper, b
    assert b.lower <= gaussian_epsilon(delta, math.sqrt(steps) / sigma), b


# -- non-finite numbers fail loudly --------------------------------------------------------
def test_check_finite_names_nan_an_internal_error_and_inf_an_engine_limit():
    check_finite("ok", np.array([0.0, 1e308]))
    with pytest.raises(RuntimeError, match="internal error"):
        check_finite("x", np.array([1.0, np.nan]))
    with pytest.raises(OverflowError, match="floating-point range"):
        check_finite("x", np.array([1.0, np.inf]))


def test_convolve_rows_refuses_non_finite_operands_and_products():
    with pytest.raises(RuntimeError, match="internal error"):
        convolve_rows(np.array([[1.0, np.nan, 0.5]]))
    with pytest.raises(OverflowError):
        convolve_rows(np.array([[1.0, np.inf, 0.5]]))
    with pytest.raises(OverflowError):                # (1e200)^2 leaves the range
        convolve_rows(np.array([[1e200, 1e200, 0.0]]))


def test_threshold_sum_refuses_nan_masses_and_constants():
    theta, p, r, u = np.array([1.0, 2.0]), np.array([0.5, np.nan]), np.ones(2), np.array([1.0, 2.0])
    with pytest.raises(RuntimeError, match="internal error"):
        ThresholdSum.build(theta, p, r, u, 0.0, False)
    with pytest.raises(RuntimeError, match="internal error"):
        ThresholdSum.build(theta, np.array([0.5, 0.2]), r, u, math.nan, True)


def _grouped(error=1e-12):
    grid = Grid(0.1, 2)
    rows = np.array([[0.1, 0.2, 0.4, 0.2, 0.1], [0.2, 0.3, 0.4, 0.3, 0.2]])
    return GroupedBuckets(grid, rows, np.array([1e-12, error]), directions=("ab",))


def test_grouped_queries_refuse_nan_error_bounds():
    """NaN compared False in ``e > 0`` and ``q_err > 0`` and counted as no error."""
    g = _grouped(math.nan)
    with pytest.raises(RuntimeError, match="internal error"):
        g.row_errors()
    with pytest.raises(RuntimeError, match="internal error"):
        g.lower_curves()
    assert set(_grouped().lower_curves()) == {"ab"}


def test_squaring_at_a_huge_factor_keeps_rows_in_range_and_values_exact():
    """At f = e^600 the merged C row's true values (stored times e^log_scale) equal the
    plain merge even + f odd, computed here in logs; the stored rows stay below 1."""
    d = 600.0
    grid = Grid(d, 2)
    a = np.array([0.1, 0.2, 0.4, 0.2, 0.1])
    c = np.array([0.3, 0.1, 0.2, 0.5, 0.25])
    g = GroupedBuckets(grid, np.vstack([a, c]), np.array([1e-15, 1e-15]), directions=("ab",))
    s = g.squared()
    assert np.all(np.isfinite(s.rows)) and s.rows.max() <= 1.0
    # the reference in 50 digits, on the merged groups' positions
    even_start, odd_start, base, new = _parity_slices(grid)
    with mp.workdps(50):
        true = [mp.mpf(0)] * new.size
        for j, x in enumerate(c[even_start::2]):
            true[base + j] += mp.mpf(x)
        first_odd = base + (1 if odd_start > even_start else 0)
        for j, x in enumerate(c[odd_start::2]):
            true[first_odd + j] += mp.mpf(x) * mp.exp(mp.mpf(d))
        for stored, t in zip(s.rows[1], true):
            got = mp.mpf(stored) * mp.exp(mp.mpf(s.log_scale[1]))
            assert abs(got - t) <= t * 1e-12 + mp.mpf(s.error[1]) * mp.exp(s.log_scale[1])
    assert np.array_equal(s.rows[0], _merged(a, grid, 1.0))
    # C's error grew by f, in true units
    assert s.error[1] * math.exp(s.log_scale[1] - d) >= 1e-15 * (1 - 1e-9)


def test_delta_queries_answer_an_engine_limit_with_the_valid_trivial_bounds(monkeypatch):
    """An engine limit in a delta query (here a forced OverflowError) gives [0, 1] with
    the reason and a warning, for one epsilon and for an array, as epsilon queries do."""
    import pb_accountant.accountant as A
    from pb_accountant import PrivacyBucketsAccountant, engine

    def overflow(*args, **kwargs):
        raise OverflowError("forced")

    monkeypatch.setattr(A, "adaptive_delta_bounds", overflow)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.01, 100)]
    with pytest.warns(RuntimeWarning, match="could not certify delta"):
        one = acc.get_delta_bounds(1.0)
    assert (one.lower, one.upper) == (0.0, 1.0) and "forced" in one.notes[0]
    with pytest.warns(RuntimeWarning):
        many = acc.get_delta_bounds([0.5, 2.0])
    assert list(many.lower) == [0.0, 0.0] and list(many.upper) == [1.0, 1.0]


def test_privacy_curve_answers_an_engine_limit_with_the_valid_trivial_curve():
    """sigma 0.1, q 0.1, 10^8 steps overflows the grouped rows: the curve is delta in
    [0, 1] at every epsilon with the reason and a warning (it raised OverflowError)."""
    acc = _accountant(0.1, 0.1, 10 ** 8)
    with pytest.warns(RuntimeWarning, match="could not certify the privacy curve"):
        curve = acc.get_privacy_curve(num=5)
    assert list(curve.epsilons) == list(np.linspace(0.0, 1.0, 5))
    assert not curve.delta_lower.any() and (curve.delta_upper == 1.0).all()
    assert "engine limit" in curve.notes[0] and curve.method == "none"
    with pytest.warns(RuntimeWarning):
        given = acc.get_privacy_curve([0.5, 3.0])
    assert list(given.epsilons) == [0.5, 3.0] and list(given.delta_upper) == [1.0, 1.0]
    with pytest.raises(ValueError, match="num"):          # user errors still raise first
        acc.get_privacy_curve(num=1)


def test_leaf_mass_past_one_is_charged_to_the_products_infinity_atoms():
    """A leaf's B row may hold more than mass 1 (its split is placed pessimistically:
    2.3e-4 more at sigma 1e-6), so a product's -inf atom is b1 M2 + b2 M1 - b1 b2, not
    b1 + b2 - b1 b2; against exact rational arithmetic.  At 5.1e6 such steps the mass
    leaves the floating-point range: an engine limit (inf, with the reason), where the
    atom formula went negative and NaN reached the error bounds (an internal error)."""
    from fractions import Fraction as F
    from pb_accountant.buckets import SplitBuckets
    grid = Grid(0.5, 2)
    x = SplitBuckets(grid, np.array([[0.1, 0.2, 0.3, 0.2, 0.1], [0.3, 0.3, 0.2, 0.1, 0.2]]),
                     0.1, 0.25, np.zeros(2))
    y = SplitBuckets(grid, np.array([[0.2, 0.2, 0.2, 0.1, 0.2], [0.4, 0.2, 0.2, 0.2, 0.1]]),
                     0.1, 0.5, np.zeros(2))
    z = x.compose_full(y)
    for row, ax, ay, got in ((0, x.a_inf, y.a_inf, z.a_inf), (1, x.b_minf, y.b_minf, z.b_minf)):
        mx = sum(F(v) for v in x.rows[row]) + F(ax)
        my = sum(F(v) for v in y.rows[row]) + F(ay)
        exact = F(ax) * my + F(ay) * mx - F(ax) * F(ay)
        assert F(got) + F(float(z.error[row])) >= exact
        assert F(got) <= exact * (1 + F(1, 10 ** 9))
    acc = _accountant(1e-6, 1e-3, 5_100_000)
    with pytest.warns(RuntimeWarning, match="engine limit"):
        eb = acc.get_epsilon_bounds(1e-5)
    assert eb.upper == math.inf and "engine limit" in eb.notes[0]
