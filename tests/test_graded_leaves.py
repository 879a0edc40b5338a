"""Graded leaves (pb_accountant/graded_leaves.py, docs/method.md §3): where the tails are
cut on every r-th point, the exact placing of a coarse segment on the leaf grid, and
the bounds of graded leaves against delta computed to 30 digits and against the
ordinary leaves."""
import math

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant import graded_leaves
from pb_accountant.buckets import GroupedBuckets, Grid, SplitBuckets, leaf_masses
from pb_accountant.composition import BucketOptions, BucketSet, Composer
from pb_accountant.engine import PrivacyBuckets, adaptive_epsilon_bounds
from pb_accountant.mechanisms import Gaussian, RandomizedResponse, SubsampledGaussian

from _closed_form import (assert_two_steps_bracketed, gaussian_epsilon,
                          subsampled_gaussian_one_step_delta)

#: pairs whose leaves take graded tails at these lengths and deltas (the last, swapped,
#: on its lower side)
GRADED = [(SubsampledGaussian(1.0, 0.01), 1000, 1e-5),
          (SubsampledGaussian(1.0, 0.01), 10 ** 6, 1e-10),
          (SubsampledGaussian(0.5, 1e-4), 10 ** 6, 1e-10),
          (SubsampledGaussian(2.0, 0.05, swapped=True), 10 ** 5, 1e-8)]


def _segments(pair, steps, delta, options=BucketOptions()):
    c = Composer(options)
    cfg = c._config(delta, steps)
    return c._leaf_grid(pair, cfg), c._graded(pair, cfg)


@pytest.mark.parametrize("pair, steps, delta", GRADED)
def test_segments_cover_the_leaf_grid_on_their_own_lattices(pair, steps, delta):
    """The segments meet end to end from the leaf grid's bottom to its top; each one's
    ends are multiples of its ratio (its cuts lie on a grid of r times the spacing);
    every tier holds MIN_TIER_CUTS cuts and its ratio is a power of two within the
    cap; the grid's end points are cuts."""
    grid, segs = _segments(pair, steps, delta)
    assert segs is not None and any(s.ratio > 1 for s in segs)
    assert segs[0].lo == grid.offset - grid.number_of_buckets
    assert segs[-1].hi == grid.offset + grid.number_of_buckets
    for a, b in zip(segs, segs[1:]):
        assert a.hi == b.lo and a.ratio != b.ratio
    for s in segs:
        assert s.lo % s.ratio == 0 and s.hi % s.ratio == 0 and s.hi > s.lo
        if s.ratio > 1:
            assert s.hi - s.lo >= graded_leaves.MIN_TIER_CUTS * s.ratio
            assert s.ratio & (s.ratio - 1) == 0 and s.ratio <= graded_leaves.MAX_RATIO
    cuts = graded_leaves.cut_points(segs)
    assert np.all(np.diff(cuts) > 0) and cuts[0] == segs[0].lo and cuts[-1] == segs[-1].hi
    assert len(cuts) < grid.size


def test_leaves_stay_whole_where_grading_does_not_apply_or_pay():
    """Short histories (the composition will not coarsen the grid), tails that decay
    fast, loss atoms, fixed grids or budgets, and the switch: ordinary leaves."""
    pair = SubsampledGaussian(1.0, 0.01)
    assert _segments(pair, 2, 1e-5)[1] is None
    assert _segments(Gaussian(1.0), 64, 1e-10)[1] is None
    # near-Gaussian tails (large sigma, tiny q) decay within a few leaf spacings however
    # far out: cut coarser, they widened the bracket of this setting (seed 2027 #2) by
    # 30% at 5 million steps
    assert _segments(SubsampledGaussian(13.364939, 1.395e-05), 5376468, 4.87e-6)[1] is None
    up, down = graded_leaves._decay_lengths(SubsampledGaussian(1.0, 0.01), 1e-6)
    assert 0.1 < up < 1.0 and 0 < down < 1e-3     # (the lower tail ends at log(1 - q))
    assert _segments(RandomizedResponse(0.75), 10 ** 6, 1e-10)[1] is None
    for options in (BucketOptions(graded_leaves=False), BucketOptions(number_of_buckets=2000),
                    BucketOptions(free_infty_budget=1e-15)):
        assert _segments(pair, 1000, 1e-5, options)[1] is None
    assert graded_leaves.segments(pair, _segments(pair, 1000, 1e-5)[0], 1) is None
    # a grid that does not hold loss 0 (never a leaf grid): whole, not an internal error
    assert graded_leaves.segments(pair, Grid(2.0 ** -6, 200, 250), 4, None) is None
    with pytest.raises(ValueError, match="graded_leaves"):
        BucketOptions(graded_leaves=1)


def test_the_cap_follows_the_compositions_coarsening():
    """The ratio doubles as the planned length grows four times (the composed spread
    doubles), stays 1 where twice the leaf spacing exceeds the composed grid's spacing,
    and never passes MAX_RATIO."""
    caps = [graded_leaves.ratio_cap(1e-3, 0.025, 0.015, 4 ** k) for k in range(12)]
    assert caps[0] == 1 and caps == sorted(caps) and caps[-1] == graded_leaves.MAX_RATIO
    for k in range(1, 11):
        assert caps[k] in (1, 2 * caps[k - 1], caps[k - 1]) or caps[k - 1] == 1
    assert graded_leaves.ratio_cap(1e-3, 0.025, 0.015, 10 ** 30) == graded_leaves.MAX_RATIO
    assert graded_leaves.ratio_cap(0.0, 0.025, 0.015, 10 ** 6) == 1


def test_cut_at_every_point_is_the_ordinary_leaf_bit_for_bit():
    """``from_masses`` with cuts at every grid point gives the ordinary leaf exactly (the
    general widths path is the uniform one, entry by entry), for the split pair and the
    groups of both directions; cuts that are not increasing points of the grid, and
    cuts with "nearest" labels, are refused."""
    for pair, grid in ((SubsampledGaussian(1.0, 0.01), Grid(2.0 ** -11, 600, 500)),
                       (Gaussian(1.0), Grid(0.01, 300, 0)),
                       (SubsampledGaussian(0.7, 0.3, swapped=True), Grid(2.0 ** -7, 400, -100))):
        m = leaf_masses(pair, grid.losses, grid.log_factor)
        whole = SplitBuckets.from_masses(grid, *m)
        cut = SplitBuckets.from_masses(grid, *m, cuts=grid.indices)
        for field in ("rows", "error", "relative"):
            assert np.array_equal(getattr(whole, field), getattr(cut, field))
        assert (whole.a_inf, whole.b_minf) == (cut.a_inf, cut.b_minf)
        for d in ("ab", "ba"):
            g1 = GroupedBuckets.from_masses(grid, *m, (0.0, 0.0), (d,), "upper")
            g2 = GroupedBuckets.from_masses(grid, *m, (0.0, 0.0), (d,), "upper",
                                            cuts=grid.indices)
            for field in ("rows", "error", "relative"):
                assert np.array_equal(getattr(g1, field), getattr(g2, field))
    grid = Grid(0.01, 20, 0)
    m = leaf_masses(Gaussian(1.0), grid.losses[::2], grid.log_factor)
    with pytest.raises(RuntimeError, match="cut points"):
        SplitBuckets.from_masses(grid, *m, cuts=grid.indices[::2][::-1])
    with pytest.raises(RuntimeError, match="cut points"):
        SplitBuckets.from_masses(grid, *m, cuts=grid.indices[::2] + 100)
    with pytest.raises(ValueError, match="labels"):
        GroupedBuckets.from_masses(grid, *m, labels="nearest", cuts=grid.indices[::2])


def test_graded_atoms_sit_on_their_cuts():
    """A graded leaf's atoms and groups lie on its cut points only, and its A row holds
    the same total as the ordinary leaf's within their certified errors."""
    pair = SubsampledGaussian(1.0, 0.01)
    grid, segs = _segments(pair, 10 ** 6, 1e-10)
    cuts = graded_leaves.cut_points(segs)
    split, ab = graded_leaves.build(grid, segs, graded_leaves.masses(pair, grid, segs),
                                    ("split", "grouped-ab"))
    on = np.zeros(grid.size, dtype=bool)
    on[cuts - (grid.offset - grid.number_of_buckets)] = True
    assert not split.rows[:, ~on].any() and not ab.rows[:, ~on].any()
    whole = SplitBuckets.from_masses(grid, *leaf_masses(pair, grid.losses, grid.log_factor))
    tol = (split.masses()[0] * split.relative[0] + split.error[0]
           + whole.masses()[0] * whole.relative[0] + whole.error[0])
    assert abs((split.masses()[0] + split.a_inf) - (whole.masses()[0] + whole.a_inf)) <= tol


def _graded_step(pair, grid, cap):
    segs = graded_leaves.segments(pair, grid, cap)
    assert segs is not None and max(s.ratio for s in segs) > 1
    values = graded_leaves.masses(pair, grid, segs)
    split, ab, ba = graded_leaves.build(grid, segs, values, ("split", "grouped-ab",
                                                             "grouped-ba"))
    return BucketSet(grid, (("split", (split,)), ("grouped", (ab, ba))))


@pytest.mark.parametrize("sigma, q, cap, swapped", [(1.0, 0.01, 16, False),
                                                    (0.8, 0.003, 64, False),
                                                    (2.0, 0.05, 4, False),
                                                    (1.0, 0.01, 16, True)])
def test_one_graded_step_brackets_the_exact_delta(sigma, q, cap, swapped):
    """One step on a graded leaf (tiers forced by the cap): both bounds of both
    directions bracket delta computed to 30 digits, from epsilon 0 out into the tail the
    coarse tiers hold; and the A row holds one step's whole A-mass."""
    pair = SubsampledGaussian(sigma, q, swapped=swapped)
    c = Composer()
    grid = c._leaf_grid(pair, c._config(1e-10, 10 ** 6))
    step = _graded_step(pair, grid, cap)
    split = step.split
    # the A row keeps each bucket's A-mass whole (the exact split moves it between two
    # points); the B row's split is rounded down, within 1e-12 of the B-mass
    tol = split.masses()[0] * split.relative[0] + split.error[0] + 1e-15
    if not swapped:
        assert abs(split.masses()[0] + split.a_inf - 1.0) <= tol
    assert abs(split.masses()[1 - swapped] + split.b_minf - 1.0) <= 1e-12
    top = max(grid.losses[-1], -grid.losses[0])
    eps = np.array([0.0, 1e-3, 0.01, 0.05, 0.2, 0.5 * top, 0.9 * top])
    d = PrivacyBuckets(step, None).delta_bounds(eps)
    for e, lo, up in zip(eps, d.lower, d.upper):
        exact = max(subsampled_gaussian_one_step_delta(sigma, q, e))
        assert lo <= exact * (1 + 1e-12), (e, lo, exact)
        assert exact <= up * (1 + 1e-12), (e, exact, up)


@pytest.mark.parametrize("sigma, q", [(1.0, 0.01), (0.7, 0.002)])
def test_two_graded_steps_bracket_the_exact_delta(sigma, q, monkeypatch):
    """Two steps through the composer with graded leaves forced (the cap of a long
    history): both bounds bracket delta computed to 30 digits."""
    pair = SubsampledGaussian(sigma, q)
    monkeypatch.setattr(graded_leaves, "ratio_cap", lambda *args: 16)
    comp = Composer()
    buckets = comp.compose([(pair, 2)], None)
    assert any(s is not None for s in comp._graded_segments.values())
    assert_two_steps_bracketed(buckets, sigma, q, np.array([0.0, 0.01, 0.05, 0.2, 1.0]))


@pytest.mark.parametrize("sigma, q, steps, delta", [(1.0, 0.01, 1000, 1e-5),
                                                    (1.1, 256 / 50000, 9750, 1e-5),
                                                    (0.8, 0.002, 20000, 1e-10)])
def test_graded_and_whole_leaves_agree(sigma, q, steps, delta):
    """The accountant with graded leaves (the default) and without: the brackets overlap
    and the graded one is at most 10% wider (the tails' rounding is the rare events')."""
    pair = SubsampledGaussian(sigma, q)
    g, w = (adaptive_epsilon_bounds(Composer(BucketOptions(graded_leaves=graded)),
                                    [(pair, steps)], delta) for graded in (True, False))
    acc = PrivacyBucketsAccountant()
    acc.history = [(sigma, q, steps)]
    got = acc.get_epsilon_bounds(delta)
    assert (got.lower, got.upper) == (g.lower, g.upper)
    assert g.lower <= w.upper and w.lower <= g.upper
    assert g.upper - g.lower <= 1.1 * (w.upper - w.lower) + 1e-12 * w.upper
    assert math.isfinite(g.upper) and g.lower > 0


@pytest.mark.parametrize("sigma, steps, delta", [(500.0, 10 ** 6, 1e-10),
                                                 (50.0, 10 ** 4, 1e-12),
                                                 (10.0, 4096, 1e-15)])
def test_graded_gaussian_compositions_bracket_the_closed_form(sigma, steps, delta,
                                                              monkeypatch):
    """The Gaussian mechanism's tails decay within a few leaf spacings, so its leaves
    stay whole (DECAY_FRACTION); forced onto graded tails of both sides (any cuts are
    sound), the composition's bounds still bracket the exact epsilon (mu = sqrt(T) /
    sigma, 60 digits) at delta down to 1e-15."""
    pair = Gaussian(sigma)
    assert _segments(pair, steps, delta)[1] is None
    monkeypatch.setattr(graded_leaves, "DECAY_FRACTION", 1e9)
    assert _segments(pair, steps, delta)[1] is not None
    exact = gaussian_epsilon(delta, math.sqrt(steps) / sigma)
    g = adaptive_epsilon_bounds(Composer(), [(pair, steps)], delta)
    assert g.lower <= exact * (1 + 1e-12) and exact <= g.upper * (1 + 1e-12)
    assert math.isfinite(g.upper) and g.lower > 0
