"""Epsilon in the thousands to hundreds of thousands (issue 12).

The closed-form Gaussian composition (q = 1: r steps of N(1, sigma^2) vs N(0, sigma^2)
are one Gaussian with mu = sqrt(r) / sigma, epsilon about mu^2 / 2) must be bracketed
with relative tolerances, and the grouped lower bound must not collapse to 0 where the
groups mix events of very different losses (docs/method.md §6).  References are the
60-digit mpmath evaluations of tests/test_small_delta.py.
"""
import math

import numpy as np
import pytest

from pb_accountant import Gaussian, PrivacyBucketsAccountant, SubsampledGaussian, compose
from pb_accountant.buckets import LABEL_SLACK, GroupedBuckets, _label_caps
from pb_accountant.engine import epsilon_bounds

pytest.importorskip("mpmath")
from test_small_delta import gaussian_delta, gaussian_epsilon  # noqa: E402

#: (sigma, steps): mu = sqrt(steps) / sigma from 50 to 1000, epsilon 1.5e3 to 5e5
LARGE = [(2.0, 10 ** 4), (0.5, 2000), (0.05, 100)]


@pytest.mark.parametrize("sigma,steps", LARGE)
@pytest.mark.parametrize("delta", [1e-5, 1e-12, 1e-15])
def test_gaussian_composition_at_large_epsilon_is_bracketed(sigma, steps, delta):
    mu = math.sqrt(steps) / sigma
    exact = gaussian_epsilon(delta, mu)
    assert exact > 1000.0                              # the regime of this file
    b = epsilon_bounds([(Gaussian(sigma), steps)], delta)
    assert 0.0 < b.lower <= exact <= b.upper < math.inf
    # measured: width 2.3e-4 to 4.3e-4, the upper bound 1.6e-4 to 2.9e-4 above exact
    assert (b.upper - b.lower) / b.upper < 6e-4
    assert (b.upper - exact) / exact < 4e-4
    assert not any("lower bound is 0" in n for n in b.notes)


def test_a_million_gaussian_steps_are_bracketed():
    """mu = 1000, epsilon about 5e5 at delta 1e-12, through the subsampled pair at q = 1."""
    mu = 1000.0
    exact = gaussian_epsilon(1e-12, mu)
    b = epsilon_bounds([(SubsampledGaussian(1.0, 1.0), 10 ** 6)], 1e-12)
    assert b.lower <= exact <= b.upper
    assert (b.upper - b.lower) / b.upper < 6e-4      # measured 4.5e-4


@pytest.mark.parametrize("sigma,steps", [(2.0, 10 ** 4), (0.5, 2000)])
def test_large_epsilon_delta_bounds_bracket_the_exact_curve(sigma, steps):
    """delta(eps) at eps where it is 1e-3 down to 1e-14, bracketed pointwise (relative
    checks: the exact values are far below any absolute tolerance)."""
    mu = math.sqrt(steps) / sigma
    eps = [gaussian_epsilon(d, mu) for d in (1e-3, 1e-8, 1e-14)]
    pb = compose([(Gaussian(sigma), steps)], delta=1e-14)
    db = pb.delta_bounds(np.array(eps))
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = float(gaussian_delta(e, mu))
        assert lo <= exact <= up
        assert lo > 0.0 and up < 1.0


def test_large_epsilon_lower_bound_does_not_collapse():
    """Random-suite setting #160 (sigma 1.42, q 0.403, 727,893 steps, delta 1.2e-5):
    the lower bound was 0 under an upper bound of 32,641.  Relabelling kept the C row's
    absolute error when the row shrank (an f-fold ratchet per down-and-up move), and the
    error was charged at weight e^0.05 although every group's likelihood ratio sat about
    18 below its label.  Now [32851.6, 32875.9] (accountant), width 7.4e-4."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.42, 0.403, 727_893)]
    b = acc.get_epsilon_bounds(1.2e-5)
    assert 1e4 < b.upper < math.inf
    assert b.lower > 0.0
    assert (b.upper - b.lower) / b.upper < 2e-3
    assert not any("lower bound is 0" in n for n in b.notes)


def test_the_label_caps_follow_the_groups_and_never_exceed_the_slack():
    p = np.array([1e-30, 0.5, 0.4999, 1e-4 - 1e-12, 1e-12])
    gap = np.array([5.0, -18.0, -17.5, -19.0, -30.0])   # log(A/C): ratio minus label
    labels = np.arange(5.0)
    # all groups above the error (the tiny one does not count), then upper tails
    assert _label_caps(gap, p, 1e-20, labels) == (-17.5, -19.0, -30.0)
    assert _label_caps(gap, p, 1.0, labels) == (LABEL_SLACK,)    # no group above the error
    assert _label_caps(np.array([0.3, -1.0]), np.array([0.5, 0.5]), 0.0,
                       np.arange(2.0)) == (LABEL_SLACK,)       # no small upper tail


def test_relabelling_moves_only_the_scale_and_does_not_ratchet_the_error():
    """restricted(s) then restricted(-s) scales C by f^s f^-s.  The rows and their
    absolute error bounds stay as they are (only the log-scale moves; the groups moved
    past the grid's end are merged into its last group, which adds that sum's rounding
    alone), so the error cannot grow f-fold per down-and-up move as it once did."""
    pb = compose([(SubsampledGaussian(1.0, 0.1), 64)], delta=1e-5,
                 methods=("split", "grouped-ab"))
    g = pb.buckets.grouped
    assert isinstance(g, GroupedBuckets)
    d = g.grid.log_factor
    mean = float(np.dot(g.rows[0], g.grid.losses) / g.rows[0].sum())
    up = g.restricted(g.grid, (mean + 5 * d, 0.0))       # labels move by about +5
    back = up.restricted(g.grid, (mean, 0.0))
    c = g.kinds.index("C")
    assert up.log_scale[c] == pytest.approx(g.log_scale[c] + 5 * d, abs=1e-12)
    assert np.all(g.error <= up.error) and np.all(up.error <= g.error * (1 + 1e-6))
    assert np.all(back.error <= g.error * (1 + 1e-6))
    assert back.log_scale[c] == pytest.approx(g.log_scale[c], abs=1e-12)
    # the scale's rounding is charged as a tiny relative error, nothing more
    assert back.relative[c] - g.relative[c] < 1e-13
    # the bound itself is unchanged up to that rounding
    e0 = g.lower_curves()["ab"](np.array([0.5, 1.0]))
    e1 = back.lower_curves()["ab"](np.array([0.5, 1.0]))
    assert np.allclose(e0, e1, rtol=1e-9, atol=0)


def test_epsilon_of_millions_keeps_a_lower_bound():
    """sigma 0.48, q 0.49, 10^7 steps: epsilon about 7e6, where C = B f^label is e^8800
    times the A-mass (beyond floating-point range without the log-scale) and the gap
    log(ratio) - label falls by 40 across the bulk (one cap cannot serve it)."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(0.479215, 0.48842134, 9_909_581)]
    b = acc.get_epsilon_bounds(3.8e-6)
    assert 1e6 < b.upper < math.inf
    assert b.lower > 0.0 and (b.upper - b.lower) / b.upper < 3e-3      # measured 1.25e-3


def test_a_window_merges_the_tail_each_direction_reads(monkeypatch):
    """Restricting grouped buckets to a narrower window merges the groups beyond it into
    the kept group next to them, on the side each direction's bound reads (A||B: high
    labels in the A and C rows; B||A: low labels in the B and D rows): the A-mass
    above and the B-mass below are kept, C and D take the weights f^-m, the error bounds
    grow by the sums' rounding (relative to what is merged) alone, and the lower bound is at least the one that
    drops those groups, and still below the split pair's upper bound."""
    from fractions import Fraction

    from pb_accountant.buckets import Grid
    pb = compose([(SubsampledGaussian(0.9, 0.05), 40)], delta=1e-8,
                 methods=("split", "grouped"))
    eps = np.linspace(0.05, 4.0, 80)
    upper = {k: c(eps) for k, c in pb.buckets.split.upper_curves().items()}
    for g in pb.buckets.representations_of("grouped"):
        direction = g.directions[0]
        mass, weighted = g.kinds                     # ("A", "C") or ("B", "D")
        n, d = g.grid.number_of_buckets, g.grid.log_factor
        cut = n // 3
        window = Grid(d, n - cut, g.grid.offset)     # drops cut groups at each end
        kept = g.restricted(window)                  # labels kept
        row = dict(zip(g.kinds, g.rows))
        new = dict(zip(kept.kinds, kept.rows))
        lo, hi = cut, g.grid.size - cut
        f = Fraction(math.exp(-d))       # e^-d to double precision; compared at 1e-12
        if direction == "ab":            # the A-mass from the window's bottom up is kept
            assert row["A"][hi:].sum() > 0
            assert math.isclose(new["A"].sum(), row["A"][lo:].sum(), rel_tol=1e-12)
            exact = Fraction(row["C"][hi - 1]) + sum(
                Fraction(v) * f ** (m + 1) for m, v in enumerate(row["C"][hi:]) if v)
            assert math.isclose(new["C"][-1], float(exact), rel_tol=1e-12)
        else:                            # the B-mass up to the window's top is kept
            assert row["B"][:lo].sum() > 0
            assert math.isclose(new["B"].sum(), row["B"][:hi].sum(), rel_tol=1e-12)
            exact = Fraction(row["D"][lo]) + sum(
                Fraction(v) * f ** (lo - j) for j, v in enumerate(row["D"][:lo]) if v)
            assert math.isclose(new["D"][0], float(exact), rel_tol=1e-12)
        tails = np.array([np.abs(r[hi:] if direction == "ab" else r[:lo]).sum()
                          for r in g.rows])                # what each row merges
        assert np.all(kept.error >= g.error)
        assert np.all(kept.error - g.error <= 1e-8 * g.error + 1e-12 * tails)
        with monkeypatch.context() as m:
            m.setattr(GroupedBuckets, "_folded", lambda self, rows, lo, hi, start: self.error)
            dropped = g.restricted(window)
        merged_low = kept.lower_curves()[direction](eps)
        dropped_low = dropped.lower_curves()[direction](eps)
        assert np.all(merged_low >= dropped_low)
        assert np.any(merged_low > dropped_low * (1 + 1e-6))
        assert np.all(merged_low <= upper[direction])


def test_a_merge_takes_a_group_whole_or_not_at_all():
    """A group whose C weight f^-m falls below e^-700 (m d > 700) is dropped from the A
    row too: merging its A-mass without its B-mass would count A in full and never
    subtract e^eps B (found by review: at d = 400 the bound rose from 0.2 to 0.5, above
    the exact 0.2).  Groups are the events of a sub-probability pair here, so the exact
    divergence is their own sum."""
    from pb_accountant.buckets import Grid
    d, lq = 400.0, 400.0
    A, B = np.zeros(9), np.zeros(9)
    A[4], B[4] = 0.3, 0.1                 # label 0, kept
    A[6], B[6] = 0.3, 0.5                 # label 2: m = 2 past the window, m d = 800
    C = np.array([b * math.exp((i - 4) * d - lq) if b else 0.0 for i, b in enumerate(B)])
    g = GroupedBuckets(Grid(d, 4), np.vstack([A, C]), np.zeros(2), directions=("ab",),
                       log_scale=np.array([0.0, lq]))
    kept = g.restricted(Grid(d, 2, -2))   # labels -4..0
    for eps in (0.0, 0.01, 0.04):
        exact = sum(max(0.0, a - math.exp(eps) * b) for a, b in zip(A, B))
        assert kept.lower_curves()["ab"](np.array([eps]))[0] <= exact


def test_a_merge_charges_the_last_addition():
    """Adding a tiny merged sum to a large kept entry rounds relative to the entry (1 +
    1e-17 is 1): the error bound covers that rounding too."""
    from fractions import Fraction

    from pb_accountant.buckets import Grid
    for j in (0, 1):                       # the A row, the C row
        rows = np.zeros((2, 9))
        rows[:, 4] = 1.0                   # the kept top group, label 0
        rows[j, 5] = 1e-17                 # merged, m = 1
        g = GroupedBuckets(Grid(0.1, 4), rows, np.zeros(2), directions=("ab",))
        kept = g.restricted(Grid(0.1, 2, -2))
        weight = Fraction(float(np.exp(-0.1))) if j == 1 else 1
        exact = Fraction(1.0) + Fraction(1e-17) * weight
        assert abs(Fraction(float(kept.rows[j][-1])) - exact) <= Fraction(kept.error[j])


@pytest.mark.parametrize("pair,steps,exact", [
    (Gaussian(2.0), 20, lambda eps: float(gaussian_delta(eps, math.sqrt(20) / 2.0))),
    (Gaussian(0.5), 4, lambda eps: float(gaussian_delta(eps, math.sqrt(4) / 0.5))),
    ("rr", 30, None)])
def test_merged_windows_bracket_exact_deltas(pair, steps, exact):
    """Lower bounds of grouped buckets restricted to windows narrower than their rows,
    with and without re-labelling (the merges of ``GroupedBuckets.restricted``), stay at
    or below the exact delta: the Gaussian composition's closed form and 30-fold
    randomized response enumerated (p 0.6)."""
    from pb_accountant import RandomizedResponse
    from pb_accountant.buckets import Grid
    if pair == "rr":
        p = 0.6
        pair = RandomizedResponse(p)
        lr = math.log(p / (1 - p))

        def exact(eps):                    # k of the 30 outcomes follow A's bias
            return math.fsum(max(0.0, math.comb(steps, k) * (p ** k * (1 - p) ** (steps - k)
                                                               - math.exp(eps) * p ** (steps - k)
                                                               * (1 - p) ** k))
                             for k in range(steps + 1) if (2 * k - steps) * lr > eps)
    pb = compose([(pair, steps)], delta=1e-8, methods=("split", "grouped"))
    eps = np.linspace(0.0, 6.0, 25)
    truth = np.array([exact(e) for e in eps])
    for g in pb.buckets.representations_of("grouped"):
        direction = g.directions[0]
        n, d = g.grid.number_of_buckets, g.grid.log_factor
        for cut, shift in ((n // 4, 0), (n // 2, 0), (n // 3, 7), (n // 3, -7)):
            window = Grid(d, (n - cut) // 2 * 2, g.grid.offset)
            mean = (d * (g.grid.offset + shift), d * (g.grid.offset - shift))
            kept = g.restricted(window, mean if shift else None)
            low = kept.lower_curves()[direction](eps)
            assert np.all(low <= truth * (1 + 1e-9) + 1e-300), (cut, shift)
