"""Two-scale leaves (pb_accountant/two_scale.py, docs/method.md §3): the rule that takes
them, the certified sums and scalings against exact arithmetic, the bounds against
dp_accounting's PLD in the small-q corner, and bitwise determinism."""
import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pb_accountant import PrivacyBucketsAccountant, SubsampledGaussian
from pb_accountant import two_scale
from pb_accountant.buckets import GroupedBuckets, Grid, SplitBuckets
from pb_accountant.composition import BucketOptions, Composer, canonical_history
from pb_accountant.engine import _two_sided_bounds
from pb_accountant.mechanisms import Gaussian, RandomizedResponse

from _closed_form import assert_two_steps_bracketed

pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")

CORNER = SubsampledGaussian(0.6, 3e-5)


def _cut(pair, options=BucketOptions(), delta=1e-6, steps=2 ** 14):
    c = Composer(options)
    cfg = c._config(delta, steps)
    leaf = c._leaf(("split",), pair, cfg)[0][0].split
    return two_scale.two_scale_leaf(pair, leaf, c.options)


def test_a_declined_pair_has_no_two_scale_state():
    """A pair the rule declines has no two-scale state at any level (None, as once the
    parts have merged), instead of failing inside ``part_leaves``."""
    c = Composer()
    cfg = c._config(1e-6, 2 ** 14)
    for pair in (SubsampledGaussian(1.1, 0.01), Gaussian(1.0), RandomizedResponse(0.75)):
        assert [c._two_scale_state(pair, k, cfg) for k in (1, 2)] == [None, None]
    assert c._two_scale_state(CORNER, 1, cfg) is not None


def test_the_rule_takes_the_corner_and_declines_elsewhere():
    cut = _cut(CORNER)
    assert cut is not None and two_scale.MIN_SCALE_RATIO <= cut.ratio <= two_scale.MAX_SCALE_RATIO
    assert _cut(SubsampledGaussian(1.1, 0.01)) is None          # bulk and leaf alike
    assert _cut(Gaussian(1.0)) is None
    assert _cut(RandomizedResponse(0.75)) is None                # loss atoms
    assert _cut(CORNER, BucketOptions(number_of_buckets=1000)) is None
    assert _cut(CORNER, BucketOptions(two_scale=False)) is None


def test_the_parts_partition_one_step():
    """Bulk plus rest, scaled back, hold one step's whole mass (1, within the certified
    errors) and no more.  (The B row may hold slightly more: its split is placed
    pessimistically, ``_split_leaf_rows``; a double-counted bucket would add far more
    than the 1e-12 allowed for that.)"""
    bulk, rest = two_scale.part_leaves(CORNER, _cut(CORNER))
    whole = two_scale.merged(bulk, rest).split
    exact = np.array([1.0, 1.0])
    tol = whole.masses() * whole.relative + whole.error + 1e-15
    assert np.all(whole.masses() >= exact - tol)
    assert np.all(whole.masses() <= exact + tol + 1e-12)
    for part in (bulk, rest):        # stored at mass at most 1
        assert np.all(part.split.masses() <= 1.0)


# -- the certified primitives against exact arithmetic -----------------------------------
def _split(rows, rel, err, a_inf=0.0, b_minf=0.0):
    n = (rows.shape[1] - 1) // 2
    return SplitBuckets(Grid(0.01, n), rows, a_inf, b_minf, np.array(err), 1, 0.0,
                        np.array(rel))


def _worst(stored, exact_rows, rel, err):
    """Largest violation of |stored - exact| <= rel stored + (l1 share of err): the l1
    norm of the excess over the relative part, minus err (<= 0 when certified)."""
    out = []
    for s_row, e_row, r, e in zip(stored, exact_rows, rel, err):
        excess = sum(max(abs(Fraction(float(s)) - x) - Fraction(float(r)) * Fraction(float(s)),
                         Fraction(0)) for s, x in zip(s_row, e_row))
        out.append(float(excess - Fraction(float(e))))
    return max(out)


magnitudes = st.floats(min_value=-320, max_value=5)


@settings(max_examples=60, deadline=None)
@given(st.lists(magnitudes, min_size=10, max_size=10), st.floats(1e-300, 1e300),
       st.floats(1e-300, 1e300))
def test_scaled_certifies_the_exact_product(exps, ca, cb):
    rows = np.array([10.0 ** e for e in exps]).reshape(2, 5)
    x = _split(rows, [0.0, 0.0], [0.0, 0.0], 1e-20, 3e-30)
    try:
        y = x.scaled(ca, cb)
    except (ValueError, OverflowError):
        return                                    # out of range: refused, never wrong
    exact = [[Fraction(float(v)) * Fraction(c) for v in row] for row, c in zip(rows, (ca, cb))]
    assert _worst(y.rows, exact, y.relative, y.error) <= 0
    assert abs(Fraction(y.a_inf) - Fraction(1e-20) * Fraction(ca)) <= Fraction(float(y.error[0]))


def _reference(x, sign):
    """An extreme measure x certifies: each row moved by its relative error, the absolute
    part on its first entry (exact rationals)."""
    out = []
    for row, r, e in zip(x.rows, x.relative, x.error):
        ref = [Fraction(float(v)) * (1 + sign * Fraction(float(r))) for v in row]
        ref[0] += sign * Fraction(float(e))
        out.append(ref)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(magnitudes, min_size=20, max_size=20), st.sampled_from([-1, 1]),
       st.sampled_from([-1, 1]))
def test_plus_certifies_the_exact_sum(exps, sx, sy):
    v = np.array([10.0 ** e for e in exps])
    x = _split(v[:10].reshape(2, 5), [1e-12, 2e-12], [1e-30, 0.0], 1e-9, 0.0)
    y = _split(v[10:].reshape(2, 5), [3e-12, 0.0], [0.0, 1e-31], 2e-9, 1e-10)
    z = x.plus(y)
    exact = [[a + b for a, b in zip(ra, rb)]
             for ra, rb in zip(_reference(x, sx), _reference(y, sy))]
    assert _worst(z.rows, exact, z.relative, z.error) <= 0
    assert z.a_inf >= 3e-9 * (1 - 2 ** -52) and z.b_minf == 1e-10


@settings(max_examples=40, deadline=None)
@given(st.lists(magnitudes, min_size=20, max_size=20),
       st.lists(st.floats(-700, 700), min_size=2, max_size=2))
def test_grouped_plus_aligns_the_log_scales(exps, scales):
    """Rows stored at e^{log_scale}: the sum at the larger scale is certified against
    the exact values (mpmath at 60 digits)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    v = np.array([10.0 ** e for e in exps]).reshape(2, 2, 5)
    grid = Grid(0.01, 2)
    # the A row holds true masses (log-scale 0), the C row any scale
    g = [GroupedBuckets(grid, v[i], np.zeros(2), 1, 0.0, 0.0, ("ab",), np.zeros(2),
                        np.array([0.0, scales[i]])) for i in (0, 1)]
    z = g[0].plus(g[1])
    for row in range(2):
        top = mpmath.mpf(float(z.log_scale[row]))
        for j in range(5):
            exact = sum(mpmath.mpf(float(h.rows[row, j])) * mpmath.exp(
                mpmath.mpf(float(h.log_scale[row])) - top) for h in g)
            stored = mpmath.mpf(float(z.rows[row, j]))
            assert abs(stored - exact) <= mpmath.mpf(float(z.relative[row])) * stored \
                + mpmath.mpf(float(z.error[row]))


def test_relative_slack_covers_the_deviation():
    rows = np.array([[0.25, 0.5, 0.25, 0.0, 0.0], [0.5, 0.25, 0.25, 0.0, 0.0]])
    x = _split(rows, [1e-12, 1e-12], [1e-20, 1e-20], 1e-6, 0.0)
    y = x.with_relative_slack(1e-9)
    # any measure within 1e-9 of the certified one, entry by entry: x's worst case
    for sign in (-1.0, 1.0):
        m = rows * (1 + sign * 1e-12) * (1 + sign * 1e-9)
        assert np.all(np.abs(y.rows - m) <= y.relative[:, None] * y.rows + y.error[:, None])
    assert y.error[0] >= 2e-9 * 1e-6


# -- the bounds in the corner against dp_accounting ---------------------------------------
def _pld_epsilon(sigma, q, steps, delta, interval, pessimistic):
    p = pld.from_gaussian_mechanism(sigma, sampling_prob=q,
                                    value_discretization_interval=interval,
                                    pessimistic_estimate=pessimistic,
                                    use_connect_dots=pessimistic)
    return p.self_compose(steps).get_epsilon_for_delta(delta)


#: where dp_accounting's PLD is erratic (sigma 0.8, q 1.2e-5, 150,001 steps, delta 1e-10:
#: pessimistic 0.06217 at interval 1.23401e-6, 0.06044 at 1.23397e-6 and 0.06147 at 1e-6),
#: connect-the-dots in long double is the reference (``python benchmarks/check_ctd.py
#: --history 0.8,1.2e-05,150001 --delta 1e-10 --h 2e-6 1e-6 --long-double``: 0.0616999 and
#: 0.0616951, an upper bound at each spacing up to round-off, converging as h^2 to about
#: 0.0616935, here less 5e-7 as the lower estimate; float64 gives 0.0617126 and 0.0617048)
CTD_08 = (0.061693, 0.0616951)


@pytest.mark.parametrize("sigma, q, steps, delta, reference", [
    (0.6, 3e-5, 20_000, 1e-6, "pld"),
    (0.8, 1.2e-5, 150_001, 1e-10, CTD_08),
    (0.45, 1e-4, 3_000, 1e-5, "pld"),
])
def test_two_scale_brackets_a_reference_and_narrows(sigma, q, steps, delta, reference):
    """pb's bracket lies between a lower and an upper estimate of the true epsilon
    (dp_accounting's optimistic and pessimistic PLD at an interval fine enough for its
    width, or connect-the-dots where PLD is erratic) and meets the width target; on the
    same grids it is narrower than the one-grid bracket."""
    a = PrivacyBucketsAccountant()
    a.history = [(sigma, q, steps)]
    b = a.get_epsilon_bounds(delta)
    if reference == "pld":
        interval = b.upper * 2e-5
        lo = _pld_epsilon(sigma, q, steps, delta, interval, False)
        hi = _pld_epsilon(sigma, q, steps, delta, interval, True)
    else:
        lo, hi = reference
    assert 0 < b.lower <= hi and lo <= b.upper
    assert b.width <= 5e-4
    history = canonical_history([(SubsampledGaussian(sigma, q), steps)])
    on, off = (_two_sided_bounds(Composer(BucketOptions(two_scale=t)), history, delta, False)
               for t in (True, False))
    assert off.lower <= on.upper and on.lower <= off.upper
    assert on.width < off.width


def test_the_rest_is_never_coarser_than_one_grid():
    """The rest's spacing is the leaf's until the engine's rule would coarsen an ordinary
    composition of as many steps (twice the spacing at most ``resolution`` times its
    spread), then doubles with it: a power-of-two multiple of the leaf spacing, never
    above ``resolution`` times the spread."""
    cut = _cut(SubsampledGaussian(0.1, 1e-3), delta=1e-5, steps=3000)
    assert cut is not None
    o, H = BucketOptions(), cut.leaf.log_factor
    for spread in (0.0, H, 30 * H, 1e3 * H):
        for level in range(17):
            s = two_scale.rest_spacing(dataclasses.replace(cut, spread=spread), level, o)
            whole = spread * 2.0 ** (level / 2)
            ratio = s / H
            assert ratio >= 1 and ratio == 2.0 ** round(np.log2(ratio))
            assert s == H or s <= o.resolution * whole
            assert 2 * s > o.resolution * whole


def test_the_parts_windows_drop_true_mass_as_one_grid(monkeypatch):
    """A part is stored at a scale s (its mass times s at most 1), so its windows may
    fold s times the budget of stored mass: what the parts drop into their infinity
    atoms stays, in true mass, within what one grid's windows may drop over as many
    steps (each of the k levels so far up to the budget of its 2^k steps: the log2 R in
    the per-step budget); counted in stored mass instead, the rest's windows keep its
    far tail (1.5 times the buckets or more)."""
    def chain():
        c = Composer()
        cfg = c._config(1e-6, 2 ** 14)
        return [c._two_scale_state(CORNER, k, cfg) for k in range(1, 13)], cfg[1]

    states, budget_per_step = chain()
    for k, state in enumerate(states, start=1):
        assert state is not None
        for part in state[:2]:
            true = (part.split.a_inf / part.scale[0], part.split.b_minf / part.scale[1])
            assert max(true) <= k * budget_per_step * 2 ** k, (k, true)
    assert states[0][1].scale[0] > 100                    # the rest: scaled far up
    stored = two_scale.compose_split

    def in_stored_mass(*args, **kwargs):
        kwargs.pop("stored_scale", None)
        return stored(*args, **kwargs)

    monkeypatch.setattr(two_scale, "compose_split", in_stored_mass)
    old, _ = chain()
    narrow, wide = states[0][1].split.grid, old[0][1].split.grid
    assert narrow.log_factor == wide.log_factor
    assert 3 * narrow.number_of_buckets <= 2 * wide.number_of_buckets     # 1.76x here


def test_a_far_reaching_rest_brackets_pld_and_coarsens():
    """Small sigma: the rest's range doubles every level, and its spacing follows one
    grid's; the bracket still lies between dp_accounting's optimistic and pessimistic
    estimates and meets the width target."""
    sigma, q, steps, delta = 0.1, 1e-3, 3_000, 1e-5
    c = Composer(BucketOptions())
    history = canonical_history([(SubsampledGaussian(sigma, q), steps)])
    cfg = c._config(delta, steps)
    unit = history[0][0]
    leaf_spacing = c._two_scale_cut(("split",), unit, cfg).leaf.log_factor
    rests = [c._two_scale_state(unit, k, cfg) for k in range(1, 12)]
    assert any(r is not None and r[1].split.grid.log_factor > leaf_spacing for r in rests)
    a = PrivacyBucketsAccountant()
    a.history = [(sigma, q, steps)]
    b = a.get_epsilon_bounds(delta)
    interval = b.upper * 2e-5
    lo = _pld_epsilon(sigma, q, steps, delta, interval, False)
    hi = _pld_epsilon(sigma, q, steps, delta, interval, True)
    assert 0 < b.lower <= hi and lo <= b.upper
    assert b.width <= 5e-4


def test_delta_bounds_bracket_pld_in_the_corner():
    """Delta queries gain most: at sigma 0.6, q 3e-5, 40,000 steps the one-grid bracket
    on the first grids is 43% wide at epsilon 0.1 (two-scale: 1.1%).  Both are computed
    again on finer grids where wider than 1% (``engine.DELTA_TARGET_WIDTH``): two-scale
    0.24% in 0.9 s, one grid 0.88% in 3.2 s."""
    sigma, q, steps = 0.6, 3e-5, 40_000
    eps = np.array([0.1, 0.2, 0.4])
    d, d_off = [], []
    for t, out in ((True, d), (False, d_off)):
        a = PrivacyBucketsAccountant(two_scale=t)
        a.history = [(sigma, q, steps)]
        out.append(a.get_delta_bounds(eps))
    d, d_off = d[0], d_off[0]
    curves = []
    for pess in (True, False):
        p = pld.from_gaussian_mechanism(sigma, sampling_prob=q,
                                        value_discretization_interval=2e-6,
                                        pessimistic_estimate=pess, use_connect_dots=pess)
        c = p.self_compose(steps)
        curves.append(np.array([c.get_delta_for_epsilon(e) for e in eps]))
    hi, lo = curves
    assert np.all(d.lower <= hi) and np.all(lo <= d.upper)
    width, width_off = (x.upper - x.lower for x in (d, d_off))
    assert np.all(width <= 0.005 * d.upper) and np.all(width <= width_off / 2)


def test_determinism_incremental_fresh_and_restored():
    """The same history gives bitwise the same bounds queried every epoch, once, or
    after a state_dict round trip."""
    sigma, q, per_epoch, epochs, delta = 0.6, 3e-5, 3_000, 5, 1e-6
    a = PrivacyBucketsAccountant()
    for _ in range(epochs):
        a.history = a.history + [(sigma, q, per_epoch)]
        a.get_epsilon_bounds(delta)
    fresh = PrivacyBucketsAccountant()
    fresh.history = [(sigma, q, per_epoch)] * epochs
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(a.state_dict())
    answers = [x.get_epsilon_bounds(delta) for x in (a, fresh, restored)]
    assert len({(b.lower, b.upper) for b in answers}) == 1
    assert answers[0].upper == a.get_epsilon(delta)


@pytest.mark.parametrize("sigma, q", [(0.6, 3e-5), (0.45, 1e-4)])
def test_two_steps_bracket_the_exact_delta(sigma, q):
    """Two steps go through two-scale leaves (the first level's bulk and rest, added):
    both bounds bracket delta computed to 30 digits."""
    pair = SubsampledGaussian(sigma, q)
    assert _cut(pair, delta=1e-10, steps=2) is not None
    comp = Composer()
    buckets = comp.compose([(pair, 2)], None)
    assert any(cut is not None for cut in comp._two_scale_cuts.values())
    eps = np.array([0.0, 0.01, 0.05, 0.2, 1.0])
    for e, lo, exact, up in assert_two_steps_bracketed(buckets, sigma, q, eps):
        if exact >= 1e-10:        # (tiny deltas sit below the default delta class)
            assert up - lo <= 1e-2 * exact


@pytest.mark.parametrize("sigma, q", [(0.6, 3e-5), (0.45, 1e-4)])
def test_a_coarsened_rest_still_brackets_the_exact_delta(sigma, q, monkeypatch):
    """The rest's coarsening (``rest_spacing``, reached after many levels in practice)
    forced onto the first level, four leaf spacings: two steps still bracket delta
    computed to 30 digits, for the split pair and the groups of both directions."""
    pair = SubsampledGaussian(sigma, q)
    monkeypatch.setattr(two_scale, "rest_spacing",
                        lambda cut, level, options: 4 * cut.leaf.log_factor)
    comp = Composer()
    buckets = comp.compose([(pair, 2)], None)
    cfg = comp._config(None, 2)
    state = comp._two_scale_state(pair, 1, cfg)
    cut = comp._two_scale_cut(("split",), pair, cfg)
    assert state[1].split.grid.log_factor == 4 * cut.leaf.log_factor
    assert_two_steps_bracketed(buckets, sigma, q, np.array([0.0, 0.01, 0.05, 0.2, 1.0]))


def test_a_tiny_mass_row_keeps_its_true_units_in_products():
    """A grouped product normalises the C and D rows (their log-scales move), never the A
    and B rows, which the bounds and ``plus`` read as true masses: a part stored at a
    scale its infinity atom sets can hold an A row far below 2^-256, and its product
    used to carry a log-scale that ``plus`` refused (an internal error)."""
    pair = SubsampledGaussian(1.1, 0.01)
    g = GroupedBuckets.leaves(pair, Grid(2.0 ** -7, 510, 3), ("grouped-ab",))[0]
    tiny = g.scaled(1e-100, 1.0)
    product = tiny.compose_full(tiny)
    reference = g.compose_full(g)
    a = product.kinds.index("A")
    assert product.log_scale[a] == 0.0

    def within_errors(got, scale):
        """``got``'s A row is ``scale`` times the reference's, up to both certified
        errors (absolute l1 parts, relative parts)."""
        want = scale * reference.row("A")
        allowed = (got.row_error("A") + scale * reference.row_error("A")
                   + (got.row_relative("A") + reference.row_relative("A") + 1e-12)
                   * want.sum())
        assert np.abs(got.row("A") - want).sum() <= allowed
        assert got.row("A").sum() == pytest.approx(want.sum(), rel=1e-9)

    within_errors(product, 1e-200)
    # and the sum of two such products is formed, in true units
    total = product.plus(product)
    assert total.log_scale[a] == 0.0
    within_errors(total, 2e-200)


@pytest.mark.parametrize("steps", [2, 3, 5])
@pytest.mark.parametrize("delta", [0.1, 0.5])
def test_two_scale_parts_with_a_dominant_infinity_atom_answer(steps, delta):
    """sigma 0.05, q 1e-6, replace-one neighbours: the rest's A-mass lies almost all
    beyond the grid (its infinity atom), so its stored A row is tiny; the query raised
    RuntimeError on the coarse start's grids (an independent review's find).  It
    answers, and its bracket overlaps the one computed on one grid."""
    history = [(0.05, 1e-6, steps)]
    acc = PrivacyBucketsAccountant(neighbouring="replace_one")
    acc.history = history
    b = acc.get_epsilon_bounds(delta)
    one = PrivacyBucketsAccountant(neighbouring="replace_one", two_scale=False)
    one.history = history
    ref = one.get_epsilon_bounds(delta)
    assert 0.0 <= b.lower <= b.upper < float("inf")
    assert max(b.lower, ref.lower) <= min(b.upper, ref.upper)


def test_parts_stay_inside_the_loss_range_at_tiny_noise():
    """sigma 0.02 at q 0.01: the leaf reaches |loss| 700, and the parts' padded grids
    must not pass it (e^t overflowed: an 'engine limit' inf where [0, 0] is certified).
    One step's distinguishing mass is q, so delta(0) of 10 steps is 1 - 0.99^10 up to
    e^{-1000}."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(0.02, 0.01, 10)]
    eb = acc.get_epsilon_bounds(0.5)
    assert (eb.lower, eb.upper) == (0.0, 0.0) and not any("engine" in n for n in eb.notes)
    db = acc.get_delta_bounds(0.0)
    exact = 1.0 - 0.99 ** 10
    assert db.lower <= exact * (1 + 1e-12) and exact <= db.upper <= exact * (1 + 1e-9)
    for step, lo, hi in ((2.0, 1, 350), (0.03125, -64, 32), (4.0, 1, 175)):
        grid = two_scale._leaf_covering(step, lo, hi)
        assert grid.losses[0] <= lo * step and grid.losses[-1] >= hi * step
        assert np.max(np.abs(grid.losses)) <= two_scale.MAX_LOSS_RANGE
    assert two_scale._leaf_covering(2.0, 1, 351) is None      # 702 > 700: no grid


def _group_unit(comp: Composer, history):
    """The group unit of ``history`` (pairs of one count and leaf spacing), after a
    composition registered it."""
    comp.compose(history, None)
    units = [u for u in comp._group_members]
    assert len(units) == 1
    return units[0]


@pytest.mark.parametrize("first, second", [((0.61, 3e-5), (0.62, 3e-5)),
                                           ((0.6, 1e-4), (0.61, 1e-4))])
def test_a_groups_fold_brackets_the_exact_delta(first, second):
    """One step of a group of two pairs, folded from their parts
    (``two_scale.next_factor``: bulk B B', rest R (B' + R') + B R') and added back:
    the split pair and the groups of both directions bracket delta of the two pairs'
    product computed to 30 digits."""
    from pb_accountant.composition import BucketSet
    from pb_accountant.engine import PrivacyBuckets

    from _closed_form import subsampled_gaussian_pair_delta

    pairs = [SubsampledGaussian(*first), SubsampledGaussian(*second)]
    comp = Composer()
    unit = _group_unit(comp, [(p, 2) for p in pairs])
    cfg = comp._config(None, 4)
    assert comp._two_scale_cut(("split",), unit, cfg) is not None
    bulk, rest, plans = comp._two_scale_fold(unit, cfg)
    assert len(plans) == 1
    whole = two_scale.merged(bulk, rest)
    groups = tuple(two_scale.merged(*comp._two_scale_group_fold(rep, unit, cfg))
                   .representations_of("grouped")[0]
                   for rep in ("grouped-ab", "grouped-ba"))
    assert all(g.grid == whole.grid for g in groups)
    buckets = BucketSet(whole.grid, (("split", (whole.split,)), ("grouped", groups)))
    eps = np.array([0.0, 0.01, 0.05, 0.2, 1.0])
    d = PrivacyBuckets(buckets, None).delta_bounds(eps)
    for e, lo, up in zip(eps, d.lower, d.upper):
        exact = max(subsampled_gaussian_pair_delta(first, second, e))
        assert lo <= exact * (1 + 1e-12) and exact <= up * (1 + 1e-12), (e, lo, exact, up)
        if exact >= 1e-10:
            assert up - lo <= 1e-2 * exact


def test_a_small_q_schedule_folds_its_groups_and_meets_the_target():
    """A noise schedule at a small sampling rate: its pairs share a count and a leaf
    spacing, so each step of the group is folded from the pairs' parts and its powers
    go through two-scale levels, as one pair's do.  The bracket meets the width target
    and lies between those of the schedule's ends, its smallest and largest sigma for
    every step (one pair each: the path checked against PLD and connect-the-dots
    above); on the same grids the one-grid groups' bracket overlaps it and is wider.
    (dp_accounting's optimistic estimate is no reference here: 0.021 at interval
    1.4e-5 and 0.078 at 6.8e-6, against pb's [0.136812, 0.136853].)"""
    q, per_epoch, delta = 3e-5, 4_000, 1e-6
    sigmas = (0.6, 0.605, 0.61, 0.615)
    a = PrivacyBucketsAccountant()
    a.history = [(s, q, per_epoch) for s in sigmas]
    b = a.get_epsilon_bounds(delta)
    assert b.width <= 5e-4
    ends = []
    for s in (sigmas[0], sigmas[-1]):
        e = PrivacyBucketsAccountant()
        e.history = [(s, q, per_epoch * len(sigmas))]
        ends.append(e.get_epsilon_bounds(delta))
    assert ends[1].lower <= b.upper and b.lower <= ends[0].upper
    assert ends[1].upper < b.lower and b.upper < ends[0].lower      # (not vacuous)
    history = canonical_history([(SubsampledGaussian(s, q), per_epoch) for s in sigmas])
    comp = Composer()
    on = _two_sided_bounds(comp, history, delta, False)
    assert any(isinstance(u, tuple) and cut is not None
               for (u, _), cut in comp._two_scale_cuts.items())
    off = _two_sided_bounds(Composer(BucketOptions(two_scale=False)), history, delta, False)
    assert off.lower <= on.upper and on.lower <= off.upper
    assert on.width < off.width


def test_a_folds_three_products_share_one_compositions_budget(monkeypatch):
    """One step of a group is folded from three products (B B', R (B' + R'), B R'),
    pieces of one composition: their windows share its budget of dropped mass, a third
    each.  Each used to drop a whole budget, so a group of 12 pairs at delta 1e-10 put
    several times one grid's mass into the infinity atoms and its bracket came out 9
    times as wide as one grid's on the same grids ([2.7878949, 2.7880742] against
    [2.7879997, 2.7880191]); now it is within twice one grid's, and they overlap."""
    budgets = []
    real = two_scale._product

    def spy(x, y, budget, options):
        budgets.append(budget)
        return real(x, y, budget, options)

    q, delta = 1e-4, 1e-10
    sigmas = [round(0.5 * (1 + 0.1 * i / 12), 4) for i in range(12)]
    history = canonical_history([(SubsampledGaussian(s, q), 3) for s in sigmas])
    monkeypatch.setattr(two_scale, "_product", spy)
    folded = Composer().refined(-2)
    folds = []                   # per fold: how many products came before it
    real_factor = two_scale.next_factor

    def factor_spy(x, y, budget, options, spacing):
        folds.append(len(budgets))
        out = real_factor(x, y, budget, options, spacing)
        assert budgets[folds[-1]:] == [budget / 3.0] * 3
        return out

    monkeypatch.setattr(two_scale, "next_factor", factor_spy)
    on = _two_sided_bounds(folded, history, delta, False)
    assert folds                                             # (the fold was taken)
    one = Composer(BucketOptions(two_scale=False)).refined(-2)
    off = _two_sided_bounds(one, history, delta, False)
    assert off.lower <= on.upper and on.lower <= off.upper
    assert on.width <= 2.0 * off.width, (on, off)


def test_determinism_of_a_folded_schedule():
    """A small-q schedule's folded groups give bitwise the same bounds queried every
    epoch, once, or after a state_dict round trip."""
    q, per_epoch, delta = 3e-5, 2_000, 1e-6
    epochs = [(0.6 + 0.005 * i, q, per_epoch) for i in range(4)]
    a = PrivacyBucketsAccountant()
    for e in epochs:
        a.history = a.history + [e]
        a.get_epsilon_bounds(delta)
    fresh = PrivacyBucketsAccountant()
    fresh.history = list(epochs)
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(a.state_dict())
    answers = [x.get_epsilon_bounds(delta) for x in (a, fresh, restored)]
    assert len({(b.lower, b.upper) for b in answers}) == 1


def test_a_composer_that_forgets_groups_gives_the_same_bits(monkeypatch):
    """The pairs of each group are remembered for its fold only while it is composed
    (``Composer._register_group``): a Composer that remembers a single group composes a
    schedule of three folded groups, fresh and again from its caches, to the bits of
    one that remembers them all."""
    from pb_accountant import composition
    q, delta = 3e-5, 1e-6
    history = canonical_history([(SubsampledGaussian(round(0.6 + 0.02 * g + 0.004 * i, 6), q),
                                  count)
                                 for g, count in enumerate((1_000, 2_000, 3_000))
                                 for i in range(3)])
    roomy = _two_sided_bounds(Composer(), history, delta, False)
    monkeypatch.setattr(composition, "_GROUPS_REMEMBERED", 1)
    forgetful = Composer()
    for _ in range(2):
        b = _two_sided_bounds(forgetful, history, delta, False)
        assert (b.lower, b.upper) == (roomy.lower, roomy.upper)
    assert len(forgetful._group_members) == 1
    assert sum(isinstance(u, tuple) and cut is not None
               for (u, _), cut in forgetful._two_scale_cuts.items()) == 3


def test_a_groups_folds_are_made_once_when_the_cache_forgets(monkeypatch):
    """A group's fold is made once per pass even where the value cache cannot hold its
    pairs' parts (a many-pair schedule at a small sampling rate: 381 segments of
    ~9600 steps at q 1.3e-4 took minutes): the groups' folds are made pair by pair
    with the split pair's (``Composer._two_scale_fold``'s ``also``), and the groups'
    chains read the split pair's plans from ``_two_scale_plans``, not from split states
    the cache evicted (they used to fold the split pair again, and make every pair's
    parts again, for each).  The bits are those of a roomy cache."""
    from pb_accountant import composition
    calls: dict = {}
    for name in ("next_factor", "next_group_factor", "part_leaves"):
        real = getattr(two_scale, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(two_scale, name, counted)
    q, delta = 1e-4, 1e-10
    sigmas = [round(0.5 * (1 + 0.1 * i / 12), 4) for i in range(12)]
    history = canonical_history([(SubsampledGaussian(s, q), 3) for s in sigmas])
    roomy = _two_sided_bounds(Composer().refined(-2), history, delta, False)
    made = dict(calls)
    assert made["next_factor"] >= 8 and made["next_group_factor"] == made["next_factor"]
    calls.clear()
    monkeypatch.setattr(composition, "_VALUE_CACHE_BYTES", 1)
    forgetful = _two_sided_bounds(Composer().refined(-2), history, delta, False)
    assert (forgetful.lower, forgetful.upper) == (roomy.lower, roomy.upper)
    assert calls["next_factor"] == made["next_factor"]
    assert calls["next_group_factor"] == made["next_group_factor"]
    # each pair's parts: once for its cut, at most once more for the folds
    assert calls["part_leaves"] <= 2 * made["part_leaves"]


def test_parts_beyond_the_float_range_merge_a_level_earlier(monkeypatch):
    """A two-scale level whose parts' scales leave the floating-point range is not
    used: the parts merge a level earlier and the ordinary squaring goes on.  A group
    of many pairs reaches it (its bulk's scale is about (1/mass)^(2^k), the mass that
    of all its pairs' bulks: 1000 epochs of 10^4 steps at sigma 0.42-0.78, q 5e-5,
    delta 1e-10 raised "scaled needs finite positive factors" after 90 s); here the
    third level's bulk is given infinite scales."""
    q, delta = 3e-5, 1e-6
    history = [(round(0.6 + 0.005 * i, 6), q, 2_000) for i in range(4)]
    plain = PrivacyBucketsAccountant()
    plain.history = list(history)
    ref = plain.get_epsilon_bounds(delta)
    real = two_scale.next_level
    made = []

    def overflowing(bulk, rest, budget, options, spacing):
        b, r, plans = real(bulk, rest, budget, options, spacing)
        made.append(b)
        if len(made) >= 3:
            b = dataclasses.replace(b, scale=(math.inf, math.inf))
        return b, r, plans

    monkeypatch.setattr(two_scale, "next_level", overflowing)
    a = PrivacyBucketsAccountant()
    a.history = list(history)
    b = a.get_epsilon_bounds(delta)
    assert len(made) >= 3
    assert 0.0 < b.lower <= b.upper < math.inf
    assert b.lower <= ref.upper and ref.lower <= b.upper      # both certify the same epsilon
    assert b.lower <= ref.upper and ref.lower <= b.upper
