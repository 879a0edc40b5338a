"""The trade-off bounds' options and false-positive rates are checked before anything is
composed, on every path (the accountant, the dp_accounting adapter, the privacy report),
an engine limit or a NonPrivateDpEvent included: ValueErrors naming the option, its
value and its range, and a valid ``mu_alpha_min`` is the one reported by the trivial
answer too.  The report's directed rounding is exact (never past the value shown)."""
import math
import random
from decimal import Decimal

import pytest

from pb_accountant import Gaussian, PrivacyBucketsAccountant, compose
from pb_accountant.tradeoff import tradeoff_bounds

#: options whose grid factor leaves the float range on this history (an engine limit:
#: tests/test_engine_limits.py, COARSE_GRID)
LIMIT_OPTIONS = dict(number_of_buckets=4, resolution=0.2, leaf_resolution=0.5)
LIMIT_HISTORY = [(15.66, 1.0, 3000), (0.47, 1.0, 2)]

BAD_OPTIONS = [
    (dict(mu_alpha_min=5.0), r"mu_alpha_min must be in \[1e-300, 0\.25\], got 5\.0"),
    (dict(eps_step=0.0), r"eps_step must be in \[1e-06, 1\], got 0\.0"),
    (dict(mu_points=1), r"mu_points must be an integer >= 2 and <= 100000, got 1"),
    (dict(mu_alpha=1e-3), r"unknown option\(s\) \['mu_alpha'\] for the trade-off bounds; "
                          r"the options are \['mu_alpha_min', 'eps_step', 'max_points', "
                          r"'mu_points'\]"),
]


def _limited_accountant():
    acc = PrivacyBucketsAccountant(**LIMIT_OPTIONS)
    acc.history = list(LIMIT_HISTORY)
    return acc


@pytest.mark.parametrize("options,message", BAD_OPTIONS)
def test_accountant_refuses_bad_options_at_an_engine_limit(options, message):
    """They were answered with the trivial bounds (mu_alpha_min 1e-6) and a warning."""
    acc = _limited_accountant()
    with pytest.raises(ValueError, match=message):
        acc.get_tradeoff_bounds(0.1, **options)


def test_accountant_reports_the_asked_mu_alpha_min_at_an_engine_limit():
    acc = _limited_accountant()
    with pytest.warns(RuntimeWarning, match="engine limit"):
        tb = acc.get_tradeoff_bounds(0.1, mu_alpha_min=1e-3)
    assert tb.mu_alpha_min == 1e-3
    assert tb.tpr_upper.tolist() == [1.0] and tb.mu_upper == math.inf


@pytest.mark.parametrize("options,message", BAD_OPTIONS)
def test_accountant_checks_options_before_composing(options, message, monkeypatch):
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 100)]

    def composing(*args, **kwargs):
        raise AssertionError("composed before the options were checked")

    monkeypatch.setattr(acc, "_engine", composing)
    with pytest.raises(ValueError, match=message):
        acc.get_tradeoff_bounds(0.1, **options)


@pytest.mark.parametrize("options,message", BAD_OPTIONS)
def test_engine_names_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        tradeoff_bounds(compose([(Gaussian(1.0), 1)]), 0.1, **options)


def test_good_options_give_the_same_bounds_as_before():
    """Checking first changes no answer."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 100)]
    tb = acc.get_tradeoff_bounds([1e-3, 0.1], mu_alpha_min=1e-4, mu_points=100)
    ref = tradeoff_bounds(acc._engine(None, lower=True), [1e-3, 0.1], mu_alpha_min=1e-4,
                          mu_points=100)
    assert tb.tpr_upper.tolist() == ref.tpr_upper.tolist()
    assert tb.tpr_lower.tolist() == ref.tpr_lower.tolist()
    assert (tb.mu_lower, tb.mu_upper) == (ref.mu_lower, ref.mu_upper)


def test_adapter_checks_options_for_a_non_private_event():
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event
    from pb_accountant.dp_accounting_adapter import PrivacyBucketsDpAccountant
    acc = PrivacyBucketsDpAccountant()
    acc.compose(dp_event.NonPrivateDpEvent())
    for options, message in BAD_OPTIONS:
        with pytest.raises(ValueError, match=message):
            acc.get_tradeoff_bounds(0.1, **options)
    tb = acc.get_tradeoff_bounds(0.1, mu_alpha_min=1e-3)
    assert tb.mu_alpha_min == 1e-3 and tb.tpr_upper.tolist() == [1.0]


@pytest.mark.parametrize("fpr,message", [
    ([1e-310], r"fpr must lie in \[1e-300, 1\], got array\(\[1\.e-310\]\)"),
    ([True], r"fpr must be a false-positive rate in \[1e-300, 1\] or an array of them, "
             r"got \[True\]"),
    (["0.1"], r"fpr must be a false-positive rate in \[1e-300, 1\] or an array of them, "
              r"got \['0\.1'\]"),
])
def test_report_checks_fpr_as_the_library_does(fpr, message, monkeypatch):
    """The report took (0, 1] (1e-310 then failed in the library after the epsilon
    table, naming the plot grid merged with it) and turned True and '0.1' into rates."""
    from pb_accountant.integrations.report import privacy_report
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 100)]

    def bounding(*args, **kwargs):
        raise AssertionError("a bound was computed before fpr was checked")

    monkeypatch.setattr(acc, "get_epsilon_bounds", bounding)
    with pytest.raises(ValueError, match=message):
        privacy_report(acc, None, deltas=(1e-5,), fpr=fpr)


def test_report_rounding_is_directed_exactly():
    """Upper bounds are shown at or above the double, lower ones at or below: a product
    x * 10^k in floats rounded, so 0.0008297000000000001 showed as 0.0008297 (up) and the
    double 0.00853 (below 0.00853) as 0.00853 (down)."""
    from pb_accountant.integrations.report import _fmt
    assert _fmt(math.nextafter(0.0008297, math.inf)) == "0.0008298"
    assert _fmt(0.00853, False) == "0.008529"
    assert _fmt(0.0069445177828011415) == "0.006945"        # unchanged where it was right
    assert _fmt(0.0069445177828011415, False) == "0.006944"
    assert (_fmt(5e-324), _fmt(5e-324, False)) == ("4.941e-324", "4.940e-324")
    rng = random.Random(7)
    for _ in range(20000):
        x = rng.randint(1000, 9999) * 10.0 ** rng.randint(-15, 5)
        for _ in range(rng.randint(0, 3)):
            x = math.nextafter(x, rng.choice([math.inf, -math.inf]))
        assert Decimal(_fmt(x)) >= Decimal(x)
        assert Decimal(_fmt(x, False)) <= Decimal(x)


def test_gdp_mu_lower_end_saturates_as_documented():
    """docs/attack-risk.md: mu_upper stays within 1% of a Gaussian's mu (here 14), the
    lower end stops near 12.5 at alpha_min = 1e-6 (f's upper bound is never below about
    4e-15); the bracket still holds mu."""
    mu = 14.0
    tb = tradeoff_bounds(compose([(Gaussian(1.0 / mu), 1)], delta=1e-10), [0.1])
    assert tb.mu_lower <= mu <= tb.mu_upper <= mu * 1.01
    assert 12.5 < tb.mu_lower < 12.6


def test_tradeoff_from_curves_names_malformed_curves():
    """A number is broadcast over eps; another shape, or no numbers, is a ValueError
    naming the curve (numpy's "zero-dimensional arrays cannot be concatenated" and
    broadcast errors before)."""
    import numpy as np
    from pb_accountant.tradeoff import tradeoff_from_curves
    zeros = lambda d, e: np.zeros_like(e)                      # noqa: E731
    tb = tradeoff_from_curves(lambda d, e: 0.0, lambda d, e: 0.0, [1e-3, 0.1])
    ref = tradeoff_from_curves(zeros, zeros, [1e-3, 0.1])
    assert tb.beta_lower.tolist() == ref.beta_lower.tolist()
    assert tb.beta_upper.tolist() == ref.beta_upper.tolist()
    with pytest.raises(ValueError, match=r"delta_up\('ab', eps\) must return an array of "
                                         r"the shape of eps, \(\d+,\), got shape \(3,\)"):
        tradeoff_from_curves(lambda d, e: [0.0] * 3, zeros, [0.1])
    with pytest.raises(ValueError, match=r"delta_low\('ab', eps\) must return numbers"):
        tradeoff_from_curves(zeros, lambda d, e: "x", [0.1])
    with pytest.raises(ValueError, match=r"delta_up must be a function"):
        tradeoff_from_curves(0.0, zeros, [0.1])
    # lower above upper: not bounds of one pair (it had been accepted, each half used
    # as if it were a bound)
    with pytest.raises(ValueError, match=r"delta_low\('ab', eps\) must not exceed "
                                         r"delta_up\('ab', eps\): at eps=0\.0"):
        tradeoff_from_curves(zeros, lambda d, e: np.full_like(e, 0.5), [0.1])


def test_trivial_tradeoff_checks_mu_alpha_min():
    from pb_accountant.tradeoff import trivial_tradeoff
    with pytest.raises(ValueError, match=r"mu_alpha_min must be in \[1e-300, 0\.25\], "
                                         r"got -5\.0"):
        trivial_tradeoff([0.1], mu_alpha_min=-5.0)
    assert trivial_tradeoff([0.1], mu_alpha_min=1e-3).mu_alpha_min == 1e-3


def test_tpr_bounds_are_one_minus_beta_rounded_outward_only_where_needed():
    """The TPR bounds are 1 - f's bounds rounded outward, moved an ulp only where the
    subtraction rounded inward: at FPR 1 (f = 0 for every mechanism) the TPR is exactly
    1 (it was 1 - 2^-53 below, always), and every bound still brackets 1 - f exactly."""
    from fractions import Fraction
    import numpy as np
    from pb_accountant.tradeoff import _one_minus
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 100)]
    for tb in (acc.get_tradeoff_bounds([0.5, 1.0]),
               tradeoff_bounds(compose([(Gaussian(0.5), 3)]), [1.0])):
        assert tb.tpr_lower[-1] == 1.0 and tb.tpr_upper[-1] == 1.0
        assert tb.beta_lower[-1] == 0.0
    rng = np.random.default_rng(3)
    b = np.concatenate((rng.uniform(0, 1, 2000), 10.0 ** rng.uniform(-300, 0, 2000),
                        [0.0, 1.0, 0.5, 2.0 ** -53, 2.0 ** -54, 1e-300]))
    low, high = _one_minus(b, up=False), _one_minus(b, up=True)
    for x, lo, hi in zip(b.tolist(), low.tolist(), high.tolist()):
        exact = 1 - Fraction(x)
        assert Fraction(lo) <= exact <= Fraction(hi)
        assert hi == lo or np.nextafter(lo, 2.0) == hi      # at most one ulp apart


def test_tpr_bounds_keep_the_shape_of_fpr():
    """An array of rates gets arrays of its shape (a 2-D array was flattened); no fpr
    gets the default rates' bounds (it had given the first of them alone)."""
    import numpy as np
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.02, 100)]
    fpr = np.array([[1e-3, 1e-2], [0.1, 0.5]])
    low, up = acc.get_tpr_bounds(fpr)
    assert low.shape == up.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            assert (low[i, j], up[i, j]) == acc.get_tpr_bounds(float(fpr[i, j]))
    tb = acc.get_tradeoff_bounds()
    low, up = acc.get_tpr_bounds(None)
    assert low.tolist() == tb.tpr_lower.tolist() and up.tolist() == tb.tpr_upper.tolist()
