"""Grids refined to the accuracy an epsilon query needs (engine.adaptive_epsilon_bounds):
a wide bracket on the first grid is computed again with the leaf and final resolutions
halved, the best of both kept, and every query of a history gets the same answer."""

import dataclasses
import math
import warnings

import pytest

from pb_accountant import PrivacyBucketsAccountant, SubsampledGaussian
from pb_accountant.composition import BucketOptions, Composer, fills_half
from pb_accountant.engine import (MAX_REFINEMENT, TARGET_WIDTH, adaptive_epsilon_bounds,
                                  refinement_level)
from pb_accountant.results import EpsilonBounds

# a small sampling rate with a small noise multiplier: the first grid's bracket is about
# ten times the target (the leaf's rounding accumulates over the steps)
HISTORY = [(0.686467, 0.00011818, 100_000)]
DELTA = 1.8e-5


def _width(b):
    return (b.upper - b.lower) / b.upper


def test_levels_follow_the_width():
    def bounds(low, up):
        return EpsilonBounds(1e-5, low, up, "best")
    assert refinement_level(bounds(1.0, 1.0 + TARGET_WIDTH / 2)) == 0
    assert refinement_level(bounds(1.0, 1.0 / (1 - 2 * TARGET_WIDTH))) == 1
    assert refinement_level(bounds(1.0, 1.0 / (1 - 10 * TARGET_WIDTH))) == 2
    assert refinement_level(bounds(0.0, 5.0)) == MAX_REFINEMENT
    # a finer grid does not fix an infinite or zero upper bound
    assert refinement_level(bounds(1.0, math.inf)) == 0
    assert refinement_level(bounds(0.0, 0.0)) == 0


def test_refined_composers_halve_both_resolutions_and_are_made_once():
    c = Composer()
    finer = c.refined(2)
    assert finer is c.refined(2) and c.refined(0) is c
    assert finer.options.leaf_resolution == c.options.leaf_resolution / 4
    assert finer.options.resolution == c.options.resolution / 4
    # a grid fixed by the options is not refined
    assert Composer(BucketOptions(number_of_buckets=1000)).refined(1) is None
    assert Composer(BucketOptions(factor=1.001)).refined(1) is None


def test_a_wide_bracket_is_refined_and_both_grids_bound_it():
    pairs = [(SubsampledGaussian(s, q), n) for s, q, n in HISTORY]
    c = Composer(BucketOptions(two_scale=False))      # (two-scale leaves make it narrow)
    from pb_accountant.engine import _two_sided_bounds
    first = _two_sided_bounds(c, pairs, DELTA, False)
    assert _width(first) > 4 * TARGET_WIDTH            # the case needs refining
    best = adaptive_epsilon_bounds(c, pairs, DELTA)
    assert first.lower <= best.lower <= best.upper <= first.upper
    assert _width(best) <= 1.5 * TARGET_WIDTH
    assert best.grid.factor < first.grid.factor


def test_every_query_of_a_refined_history_agrees_bitwise():
    acc = PrivacyBucketsAccountant()
    acc.history = list(HISTORY)
    bounds = acc.get_epsilon_bounds(DELTA)
    assert acc.get_epsilon(DELTA) == bounds.upper
    again = PrivacyBucketsAccountant()
    again.load_state_dict(acc.state_dict())
    assert again.get_epsilon(DELTA) == bounds.upper
    assert tuple(again.get_epsilon_bounds(DELTA))[:2] == tuple(bounds)[:2]
    # the upper-bound-only paths report the trivial lower bound, the same upper
    after = acc.epsilon_after(DELTA, noise_multiplier=0.686467, sample_rate=0.00011818,
                              num_steps=0)
    assert after.lower == 0.0 and after.upper == bounds.upper


def test_refined_bounds_bracket_dp_accountings_pld():
    pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    s, q, n = HISTORY[0]
    acc = PrivacyBucketsAccountant()
    acc.history = list(HISTORY)
    b = acc.get_epsilon_bounds(DELTA)
    pld = pld_module.from_gaussian_mechanism(
        s, sampling_prob=q, value_discretization_interval=1e-4,
        use_connect_dots=True).self_compose(n)
    # PLD's pessimistic estimate is an upper bound (up to its own discretisation)
    assert b.lower <= pld.get_epsilon_for_delta(DELTA) * (1 + 1e-4)


# a heavy tail far from a narrow bulk (sampling rate 1e-5, delta 1e-14): leaves of
# 2^16 buckets, and a bracket far inside the target on the default grids
HEAVY_TAIL = [(SubsampledGaussian(1.152457, 1.064e-05), 105)]
HEAVY_DELTA = 1.22e-14


def test_negative_levels_coarsen_both_resolutions_within_their_range():
    c = Composer()
    coarser = c.refined(-2)
    assert coarser is c.refined(-2)
    assert coarser.options.leaf_resolution == 4 * c.options.leaf_resolution
    assert coarser.options.resolution == 4 * c.options.resolution
    wide = Composer(BucketOptions(resolution=0.5, leaf_resolution=0.9)).refined(-2)
    assert wide.options.resolution == 1.0 and wide.options.leaf_resolution == 1.0


def test_large_leaves_start_coarse_and_stay_within_the_target():
    from pb_accountant.engine import (COARSE_FIRST_LEAF_BUCKETS, COARSE_LEVEL,
                                      _two_sided_bounds)
    c = Composer()
    assert fills_half(c.largest_leaf(HEAVY_TAIL, HEAVY_DELTA), COARSE_FIRST_LEAF_BUCKETS)
    assert c.largest_leaf([], HEAVY_DELTA) == 0
    fine = _two_sided_bounds(c, HEAVY_TAIL, HEAVY_DELTA, False)
    best = adaptive_epsilon_bounds(c, HEAVY_TAIL, HEAVY_DELTA)
    # answered on the coarse grids, which meet the target by themselves
    assert best.grid.factor > fine.grid.factor
    coarse = _two_sided_bounds(c.refined(COARSE_LEVEL), HEAVY_TAIL, HEAVY_DELTA, False)
    assert (best.lower, best.upper) == (coarse.lower, coarse.upper)
    assert 0 < _width(best) <= TARGET_WIDTH
    # both brackets are certified, so they overlap
    assert max(best.lower, fine.lower) <= min(best.upper, fine.upper)


def test_a_coarse_start_that_misses_the_target_is_refined():
    from pb_accountant.engine import COARSE_FIRST_LEAF_BUCKETS, COARSE_LEVEL, _two_sided_bounds
    # sampling rate 2.3e-4 at sigma 0.77: large leaves, but the coarse bracket is wide
    pairs = [(SubsampledGaussian(0.7733, 0.000232), 337)]
    delta = 5.45e-05
    c = Composer()
    assert fills_half(c.largest_leaf(pairs, delta), COARSE_FIRST_LEAF_BUCKETS)
    coarse = _two_sided_bounds(c.refined(COARSE_LEVEL), pairs, delta, False)
    assert _width(coarse) > TARGET_WIDTH
    best = adaptive_epsilon_bounds(c, pairs, delta)
    assert _width(best) <= TARGET_WIDTH
    assert coarse.lower <= best.lower <= best.upper <= coarse.upper


def _scripted_passes(monkeypatch, width_at):
    """Replace each pass by a bracket of relative width ``width_at(level)`` (None: an
    infinite upper bound; the decisions stay the engine's) and return the list the
    levels it runs are appended to."""
    from pb_accountant import engine
    seen = []

    def scripted(composer, history, delta, symmetric):
        level = math.log2(Composer().options.resolution / composer.options.resolution)
        if abs(level - round(level)) < 1e-9:          # (else a three-quarter level)
            level = round(level)
        seen.append(level)
        width = width_at(level)
        if width is None:
            return engine.EpsilonBounds(delta, 0.5, math.inf)
        return engine.EpsilonBounds(delta, 1.0 - width, 1.0)

    monkeypatch.setattr(engine, "_two_sided_bounds", scripted)
    # the split pair's refinement alone (``_refined_bounds``) moves no scripted bracket:
    # every refinement then composes both bounds, as the scripts expect
    monkeypatch.setattr(engine, "_upper_bound", lambda composer, history, delta, symmetric:
                        engine.EpsilonBounds(delta, 0.0, 1.0))
    return seen


def _long_leaves(monkeypatch):
    """Make every history look long-tailed and long (a leaf of 2^20 buckets whose
    composition coarsens): the first pass is on COARSE_LEVEL's grids."""
    monkeypatch.setattr(Composer, "largest_leaf", lambda self, h, d=None: 2 ** 20)
    monkeypatch.setattr(Composer, "final_grid_coarsens", lambda self, h, d=None: True)


def _coarse_start(monkeypatch, too_wide):
    """Levels run from a coarse start whose bracket is ``too_wide`` times the target,
    each halving shrinking it 4-fold, and the answer."""
    from pb_accountant import engine
    seen = _scripted_passes(monkeypatch, lambda level: too_wide * TARGET_WIDTH
                            / 4.0 ** (level - engine.COARSE_LEVEL))
    _long_leaves(monkeypatch)
    best = engine.adaptive_epsilon_bounds(Composer(), [(SubsampledGaussian(1.0, 1e-5), 10)],
                                          1e-5)
    return seen, best


def test_a_coarse_start_goes_straight_to_the_level_its_width_asks_for(monkeypatch):
    """The cap MAX_REFINEMENT is on the level reached, not on one step's halvings: a
    coarse bracket 200 times too wide goes straight to level MAX_REFINEMENT instead of
    through level 0, which its width already rules out."""
    from pb_accountant import engine
    seen, best = _coarse_start(monkeypatch, 200)
    assert seen == [engine.COARSE_LEVEL, engine.MAX_REFINEMENT]
    assert _width(best) <= TARGET_WIDTH


def test_a_coarse_start_without_a_finite_upper_bound_falls_back_to_the_default_grids(
        monkeypatch):
    """A coarse pass whose windows leave more than delta in the infinity atoms certifies
    no upper bound, and refining from it would not be tried (an infinite bound predicts
    no level): the default grids run next, then refinement as usual.  (A 374-segment
    schedule, sigma 0.59 decaying to 0.4, q 1.5e-4, 868,699 steps, delta 2.6e-15: the
    coarse pass's B-mass beyond its grid was 7.8e-11, and the answer was [30.43, inf];
    the default grids certify 30.464.)"""
    from pb_accountant import engine
    seen = _scripted_passes(monkeypatch, lambda level: None if level < 0
                            else 2 * TARGET_WIDTH / 4.0 ** level)
    _long_leaves(monkeypatch)
    best = engine.adaptive_epsilon_bounds(Composer(), [(SubsampledGaussian(1.0, 1e-5), 10)],
                                          1e-5)
    assert seen == [engine.COARSE_LEVEL, 0, 1]
    assert math.isfinite(best.upper) and _width(best) <= TARGET_WIDTH


@pytest.mark.parametrize("error", [OverflowError, FloatingPointError])
def test_a_coarse_start_beyond_the_floating_point_range_falls_back_to_the_default_grids(
        monkeypatch, error):
    """A coarse pass that reaches the floating-point range (a spacing wider than the
    default grids': a factor e^d above 1e308, or a grouped row's weights, at epsilon of
    millions) is an answer the default grids may still give: they run next, as after a
    coarse pass without a finite upper bound, and the query answers instead of
    reporting an engine limit.  (Random settings at 5e5 <= epsilon <= 1.5e7 raised
    OverflowError on grids 3-6 halvings coarser than the default.)"""
    from pb_accountant import engine
    seen = _scripted_passes(monkeypatch, lambda level: 2 * TARGET_WIDTH / 4.0 ** level)
    scripted = engine._two_sided_bounds

    def raising(composer, history, delta, symmetric):
        if composer.options.resolution > Composer().options.resolution:
            seen.append("raised")
            raise error("grid factor beyond floating-point range")
        return scripted(composer, history, delta, symmetric)

    monkeypatch.setattr(engine, "_two_sided_bounds", raising)
    _long_leaves(monkeypatch)
    best = engine.adaptive_epsilon_bounds(Composer(), [(SubsampledGaussian(1.0, 1e-5), 10)],
                                          1e-5)
    assert seen == ["raised", 0, 1]
    assert math.isfinite(best.upper) and _width(best) <= TARGET_WIDTH


def test_a_delta_query_whose_coarse_start_overflows_answers_on_the_default_grids(
        monkeypatch):
    """The same fallback for delta queries: the bounds are those of a query that
    started on the default grids."""
    from pb_accountant import engine
    history = [(SubsampledGaussian(0.402455, 3.013e-05), 12)]
    monkeypatch.setattr(engine, "_first_level", lambda *a: 0)
    reference = engine.adaptive_delta_bounds(Composer(), history, [2.0, 6.0])
    real = engine.compose_history
    tried = []

    def raising(composer, history, delta=None, methods=engine.DEFAULT_METHODS):
        tried.append(composer.options.resolution)
        if composer.options.resolution > Composer().options.resolution:
            raise OverflowError("grid factor beyond floating-point range")
        return real(composer, history, delta, methods)

    monkeypatch.setattr(engine, "compose_history", raising)
    monkeypatch.setattr(engine, "_first_level", lambda *a: engine.COARSE_LEVEL)
    got = engine.adaptive_delta_bounds(Composer(), history, [2.0, 6.0])
    assert tried[0] > Composer().options.resolution            # the coarse start was tried
    assert list(got.upper) == list(reference.upper)
    assert list(got.lower) == list(reference.lower)


def test_a_coarse_start_refines_toward_the_target_itself(monkeypatch):
    """A coarse bracket 40 times too wide asks for log4(40) = 2.7, so three halvings
    (level 1), the first level the h^2 law predicts within the target; aiming at half
    the target would have asked for level 2, four times the cost."""
    from pb_accountant import engine
    seen, best = _coarse_start(monkeypatch, 40)
    assert seen == [engine.COARSE_LEVEL, 1]
    assert _width(best) <= TARGET_WIDTH


def test_a_bracket_too_wide_on_the_finest_grids_gets_its_leaves_at_full_resolution(
        monkeypatch):
    """Where the finest level's bracket is still wider than the target and a long-tailed
    leaf there has half its resolution (``BucketOptions.halve_long_tails``), the last
    pass runs the finest level with the leaves at full resolution; where no leaf grid
    would change, or no pass is left, the query stops as before."""
    from pb_accountant import engine
    history = [(SubsampledGaussian(1.0, 0.01), 100)]
    c = Composer()
    finest = c.refined(engine.MAX_REFINEMENT)
    full = c.refined(engine.MAX_REFINEMENT, halve_long_tails=False)
    assert full is c.refined(engine.MAX_REFINEMENT, halve_long_tails=False)   # made once
    assert finest.options.halve_long_tails and not full.options.halve_long_tails
    h = engine.canonical_history(history)
    (halved,), (whole,) = finest.leaf_grids(h, 1e-5), full.leaf_grids(h, 1e-5)
    assert whole.log_factor == halved.log_factor / 2
    assert whole.number_of_buckets > halved.number_of_buckets
    seen = []

    def scripted(composer, history, delta, symmetric):
        level = math.log2(Composer().options.resolution / composer.options.resolution)
        if abs(level - round(level)) < 1e-9:          # (else a three-quarter level)
            level = round(level)
        seen.append((level, composer.options.halve_long_tails))
        if level < engine.MAX_REFINEMENT:
            width = 20 * TARGET_WIDTH
        else:
            width = (2.0 if composer.options.halve_long_tails else 0.8) * TARGET_WIDTH
        return engine.EpsilonBounds(delta, 1.0 - width, 1.0)

    monkeypatch.setattr(engine, "_two_sided_bounds", scripted)
    best = engine.adaptive_epsilon_bounds(Composer(), history, 1e-5)
    assert seen == [(0, True), (2, True), (2, False)]
    assert _width(best) == pytest.approx(0.8 * TARGET_WIDTH) and _note(best) is None
    # a leaf the finest level does not halve: no third pass, and the note says why
    seen.clear()
    short = [(SubsampledGaussian(1.0, 0.5), 100)]
    hs = engine.canonical_history(short)
    assert finest.leaf_grids(hs, 1e-5) == full.leaf_grids(hs, 1e-5)
    best = engine.adaptive_epsilon_bounds(Composer(), short, 1e-5)
    assert seen == [(0, True), (2, True)] and "finest allowed" in _note(best)


def test_ten_million_steps_at_q_1e5_meet_the_target_at_delta_1e10():
    """The issue's 10^7 steps at q 1e-5 (sigma 1) at delta 1e-10: the finest grids with
    the long-tailed leaf halved left [0.2312925, 0.2314567] (width 7.1e-4, noted); with
    it at full resolution the bracket meets the target inside that one (both are
    certified).  dp_accounting's PLD is no reference here: at intervals 1e-4 to 1e-6 its
    optimistic estimate is 0 and its pessimistic one 0.25-0.56."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 1e-5, 10 ** 7)]
    b = acc.get_epsilon_bounds(1e-10)
    assert _width(b) <= TARGET_WIDTH and not b.notes
    assert 0.2312925 <= b.lower <= b.upper <= 0.2314568


def test_halve_long_tails_is_checked():
    with pytest.raises(ValueError, match="halve_long_tails must be True or False"):
        BucketOptions(halve_long_tails=1)


#: random-suite #77: two segments whose leaf grids need more than the default grids'
#: bucket cap (max_buckets) on level 1
CAPPED = [(SubsampledGaussian(1.191691, 7.511e-05), 1609653),
          (SubsampledGaussian(0.595846, 7.511e-05), 1609652)]
CAPPED_DELTA = 7.895397081579481e-14


def test_a_finer_level_has_a_bucket_cap_to_match():
    """A finer level may use twice the default bucket cap, so a leaf the default cap made
    coarser than its leaf_resolution gets finer on the next level (it used to stay as
    coarse, and only the final grid was refined)."""
    from pb_accountant.engine import canonical_history
    c = Composer()
    cap = c.options.max_buckets
    assert c.refined(-2).options.max_buckets == cap
    assert c.refined(1).options.max_buckets == 2 * (cap + 2) - 2
    assert c.refined(2).options.max_buckets == 2 * (cap + 2) - 2
    history = canonical_history(CAPPED)
    level1 = c.refined(1).leaf_grids(history, CAPPED_DELTA)
    level2 = c.refined(2).leaf_grids(history, CAPPED_DELTA)
    assert fills_half(max(g.number_of_buckets for g in level1), cap)   # at the default cap
    for g1, g2 in zip(level1, level2):
        assert g2.log_factor == g1.log_factor / 2
        assert g2.number_of_buckets * g2.log_factor >= g1.number_of_buckets * g1.log_factor
    assert c.largest_leaf(history, CAPPED_DELTA) == max(
        g.number_of_buckets for g in c.leaf_grids(history, CAPPED_DELTA))


#: sigma 0.44, q 6.0e-5, 2.7e6 steps (seed 5 of the random settings): the leaf grid is
#: at the finer levels' cap on level 1 already
AT_CAP = [(SubsampledGaussian(0.441284, 6.02e-05), 2697440)]
AT_CAP_DELTA = 5.455894017474291e-14


def test_no_refinement_where_no_leaf_grid_gets_finer():
    from pb_accountant.engine import _refines_no_leaf, canonical_history
    c = Composer()
    history = canonical_history(AT_CAP)
    cap = c.refined(1).options.max_buckets
    assert all(fills_half(g.number_of_buckets, cap)
               for g in c.refined(1).leaf_grids(history, AT_CAP_DELTA))
    assert _refines_no_leaf(c.refined(1), c.refined(2), history, AT_CAP_DELTA)
    # level 0's leaf is below its cap: refining it is worth it; so is #77's on level 1
    assert not _refines_no_leaf(c, c.refined(1), history, AT_CAP_DELTA)
    capped = canonical_history(CAPPED)
    assert not _refines_no_leaf(c.refined(1), c.refined(2), capped, CAPPED_DELTA)
    typical = canonical_history([(SubsampledGaussian(1.1, 0.01), 1000)])
    assert not _refines_no_leaf(c, c.refined(1), typical, 1e-5)


def test_a_query_stops_where_no_leaf_grid_gets_finer(monkeypatch):
    """Scripted widths: the coarse pass asks for level 1, whose width (twice the
    target) asks for level 2; AT_CAP's real leaf grids are at the cap and equal on
    levels 1 and 2, so the query keeps level 1's bracket."""
    from pb_accountant import engine
    widths = {engine.COARSE_LEVEL: 40 * TARGET_WIDTH, 1: 2 * TARGET_WIDTH, 2: TARGET_WIDTH / 2}
    seen = _scripted_passes(monkeypatch, widths.__getitem__)
    best = engine.adaptive_epsilon_bounds(Composer(), AT_CAP, AT_CAP_DELTA)
    assert seen == [engine.COARSE_LEVEL, 1]          # level 2 would refine no leaf
    assert _width(best) == pytest.approx(2 * TARGET_WIDTH)
    # the control: leaves that do get finer are refined as before
    seen.clear()
    monkeypatch.setattr(engine, "_refines_no_leaf", lambda *a: False)
    engine.adaptive_epsilon_bounds(Composer(), AT_CAP, AT_CAP_DELTA)
    assert seen == [engine.COARSE_LEVEL, 1, 2]


def test_a_long_run_with_a_capped_leaf_gets_tighter():
    """10^7 steps at sigma 0.8, q 1e-5: the leaf needs 2^18 buckets on level 2.  Under
    one cap for every level its width stayed at 5.35e-3 however far the query refined;
    with the finer levels' larger cap it is about 1.3e-3, and it overlaps the default
    grids' bracket (both are certified)."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(0.8, 1e-5, 10 ** 7)]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0.0 < b.lower <= b.upper
    assert _width(b) < 2e-3
    from pb_accountant.engine import _two_sided_bounds
    first = _two_sided_bounds(Composer(), [(SubsampledGaussian(0.8, 1e-5), 10 ** 7)], 1e-5,
                              False)
    assert max(first.lower, b.lower) <= min(first.upper, b.upper)
    assert _width(b) <= TARGET_WIDTH < _width(first)
    level1 = _two_sided_bounds(Composer().refined(1),
                               [(SubsampledGaussian(0.8, 1e-5), 10 ** 7)], 1e-5, False)
    assert _width(first) > 2.5 * _width(level1)


def _note(bounds):
    """The width note of a bracket (None without one)."""
    notes = [n for n in bounds.notes if n.startswith("the relative width")]
    assert len(notes) <= 1
    return notes[0] if notes else None


def test_a_bracket_left_wide_says_why(monkeypatch):
    """Scripted widths that stay above the target: the answer notes its width and the
    reason refinement stopped (the finest level, leaves at the bucket cap, the most
    passes); a bracket that meets the target, or an infinite upper bound (which has its
    own note), gets none."""
    from pb_accountant import engine
    history = [(SubsampledGaussian(1.0, 0.01), 100)]

    def run(width_at, composer=None, h=history, d=1e-5):
        seen = _scripted_passes(monkeypatch, width_at)
        return seen, engine.adaptive_epsilon_bounds(composer or Composer(), h, d)

    # levels 0, then 2 (20x the target asks for three halvings, capped at 2), then 2
    # again with unhalved leaves (level 2 halves this leaf's resolution): still wide
    seen, best = run(lambda level: 20 * TARGET_WIDTH / 4.0 ** level)
    assert seen == [0, engine.MAX_REFINEMENT, engine.MAX_REFINEMENT]
    assert _width(best) > TARGET_WIDTH
    assert f"{_width(best):.1e}" in _note(best) and "finest allowed" in _note(best)
    # met on level 1: no note
    seen, best = run(lambda level: 2 * TARGET_WIDTH / 4.0 ** level)
    assert seen == [0, 1] and _note(best) is None
    # leaves at the cap: AT_CAP's real grids on levels 1 and 2
    widths = {engine.COARSE_LEVEL: 40 * TARGET_WIDTH, 1: 2 * TARGET_WIDTH}
    seen, best = run(widths.__getitem__, h=AT_CAP, d=AT_CAP_DELTA)
    assert seen == [engine.COARSE_LEVEL, 1] and "bucket cap" in _note(best)
    # a coarse start without an upper bound, then two more passes that stop short of
    # the finest level (level 1 asks for no more than one halving): the most grids
    _long_leaves(monkeypatch)
    seen, best = run(lambda level: None if level < 0 else 3 * TARGET_WIDTH)
    assert seen == [engine.COARSE_LEVEL, 0, 1] and "most grids" in _note(best)
    # ... and when the last of them is the finest level, that is the reason given
    seen, best = run(lambda level: None if level < 0 else 20 * TARGET_WIDTH)
    assert seen == [engine.COARSE_LEVEL, 0, 2] and "finest allowed" in _note(best)
    monkeypatch.undo()
    # an infinite upper bound throughout, or a lower bound of 0: no width to speak of
    # (an infinite bound has its own note)
    assert _note(run(lambda level: None)[1]) is None
    monkeypatch.setattr(engine, "_two_sided_bounds",
                        lambda c, h, d, s: engine.EpsilonBounds(d, 0.0, 0.5))
    assert _note(engine.adaptive_epsilon_bounds(Composer(), history, 1e-5)) is None
    monkeypatch.undo()
    # a grid fixed by the options is not refined
    fixed = Composer(BucketOptions(number_of_buckets=1000))
    seen, best = run(lambda level: 3 * TARGET_WIDTH, fixed)
    assert seen == [0] and "fixed by number_of_buckets" in _note(best)


def test_a_real_capped_run_notes_its_width():
    """10^7 steps at sigma 0.6, q 1e-5 (issue 12's small-q corner): one step's loss has
    a spread near 4e-5 and a tail past 3, and even the finest level's leaf is far
    coarser than that spread asks for; the bracket is certified but about 0.5% wide, and
    the answer says so.  (Two-scale leaves, on by default, give this case its own bulk
    grid; with them off it stays the capped run it was.)"""
    acc = PrivacyBucketsAccountant(two_scale=False)
    acc.history = [(0.6, 1e-5, 10 ** 7)]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0.0 < b.lower <= b.upper < math.inf
    assert _width(b) > 10 * TARGET_WIDTH and "finest allowed" in _note(b)
    # a query for the upper bound alone reports no width, and no note about one
    alone = acc.epsilon_after(1e-5, noise_multiplier=0.6, sample_rate=1e-5, num_steps=0)
    assert alone.upper == b.upper and alone.lower == 0.0 and _note(alone) is None
    typical = PrivacyBucketsAccountant()
    typical.history = [(1.1, 0.01, 1000)]
    assert _note(typical.get_epsilon_bounds(1e-5)) is None


# few steps on a long-tailed leaf (more than half of LEAF_BUCKETS_AT_FULL_RESOLUTION,
# not of COARSE_FIRST_LEAF_BUCKETS, `fills_half`): the composition never coarsens the
# leaf spacing, so the default grids resolve epsilon some 30 times finer than the target
# (random-suite seed 31, #188)
SHORT = [(SubsampledGaussian(0.810047, 0.00265325), 39)]
SHORT_DELTA = 2.67e-12


def test_short_histories_on_long_tailed_leaves_start_coarse():
    from pb_accountant import engine
    from pb_accountant.composition import LEAF_BUCKETS_AT_FULL_RESOLUTION, canonical_history
    c = Composer()
    leaf = c.leaf_grids(SHORT, SHORT_DELTA)[0]
    assert fills_half(leaf.number_of_buckets, LEAF_BUCKETS_AT_FULL_RESOLUTION)
    assert not fills_half(leaf.number_of_buckets, engine.COARSE_FIRST_LEAF_BUCKETS)
    assert not c.final_grid_coarsens(SHORT, SHORT_DELTA)
    assert c.final_grid_coarsens([(SHORT[0][0], 100_000)], SHORT_DELTA)
    assert (engine._first_level(c, canonical_history(SHORT), SHORT_DELTA)
            == engine.SHORT_HISTORY_LEVEL)
    fine = engine._two_sided_bounds(c, SHORT, SHORT_DELTA, False)
    assert math.isclose(fine.grid.factor, math.exp(leaf.log_factor), rel_tol=1e-14)
    best = adaptive_epsilon_bounds(c, SHORT, SHORT_DELTA)
    assert best.grid.factor > fine.grid.factor and 0 < _width(best) <= TARGET_WIDTH
    assert max(best.lower, fine.lower) <= min(best.upper, fine.upper)
    # answered on the short-history grids alone, coarser than the large leaves' start
    short = engine._two_sided_bounds(c.refined(engine.SHORT_HISTORY_LEVEL), SHORT,
                                     SHORT_DELTA, False)
    assert (best.lower, best.upper) == (short.lower, short.upper)
    coarse = engine._two_sided_bounds(c.refined(engine.COARSE_LEVEL), SHORT, SHORT_DELTA,
                                      False)
    assert best.grid.factor > coarse.grid.factor
    assert max(best.lower, coarse.lower) <= min(best.upper, coarse.upper)


def test_a_short_history_whose_first_bracket_misses_the_target_is_refined():
    """Three steps at sigma 0.74, q 1.06e-3, delta 1.4e-4 (random-suite seed 5, #17): the
    short-history grids give a bracket 12 times the target, so the query refines by the
    h^2 law (two halvings) and meets it; both brackets are certified, so they nest."""
    from pb_accountant import engine
    from pb_accountant.composition import canonical_history
    history = [(SubsampledGaussian(0.740013, 0.00106046), 3)]
    delta = 1.427e-4
    c = Composer()
    assert engine._first_level(c, canonical_history(history), delta) == \
        engine.SHORT_HISTORY_LEVEL
    first = engine._two_sided_bounds(c.refined(engine.SHORT_HISTORY_LEVEL), history, delta,
                                     False)
    assert _width(first) > TARGET_WIDTH
    best = adaptive_epsilon_bounds(c, history, delta)
    assert 0 < _width(best) <= TARGET_WIDTH
    assert first.lower <= best.lower <= best.upper <= first.upper


def test_a_delta_query_of_a_short_history_starts_no_coarser_than_coarse_level(monkeypatch):
    """Delta queries do not refine, so their first grids are their answer: a short
    history's delta query keeps COARSE_LEVEL's grids, not the epsilon query's coarser
    start."""
    from pb_accountant import engine
    from pb_accountant.composition import canonical_history
    c = Composer()
    assert engine._first_level(c, canonical_history(SHORT), None) == \
        engine.SHORT_HISTORY_LEVEL
    real = engine.compose_history
    tried = []

    def recording(composer, history, delta=None, methods=engine.DEFAULT_METHODS):
        tried.append(composer.options.resolution)
        return real(composer, history, delta, methods)

    monkeypatch.setattr(engine, "compose_history", recording)
    engine.adaptive_delta_bounds(c, SHORT, [1.0, 2.0])
    assert tried and set(tried) == {c.refined(engine.COARSE_LEVEL).options.resolution}


@pytest.mark.parametrize("steps", [1, 3, 10, 30, 100, 300, 1000])
def test_final_grid_coarsens_says_what_the_composition_does(steps):
    """The prediction (variances of the leaves' spreads adding) against the grid the
    composition ends on: the leaf's spacing exactly where it says no coarsening.
    Histories within 1.5x of the threshold are skipped (the composed spread is the
    prediction only up to the grid's rounding)."""
    from pb_accountant import engine
    from pb_accountant.composition import canonical_history, leaf_spread
    history = canonical_history([(SubsampledGaussian(1.0, 0.01), steps)])
    c = Composer()
    cfg = c._config(1e-5, steps)
    leaf = c.leaf_grids(history, 1e-5)[0]
    ratio = (c.options.resolution * math.sqrt(steps) * leaf_spread(history[0][0], cfg[1])
             / (2 * leaf.log_factor))
    if 1 / 1.5 < ratio < 1.5:
        pytest.skip(f"within 1.5x of the threshold ({ratio:.2f})")
    final = engine._two_sided_bounds(c, history, 1e-5, False).grid.factor
    same = math.isclose(final, math.exp(leaf.log_factor), rel_tol=1e-14)
    assert c.final_grid_coarsens(history, 1e-5) == (not same), ratio


# sigma 3.88, q 1.66e-5, 56,292 steps, delta 1.2e-14 (random-suite seed 12, #56): the
# default grids' bracket is just wider than the target (4.07e-4)
NEAR_MISS = [(SubsampledGaussian(3.882771, 1.659e-05), 56292)]
NEAR_MISS_DELTA = 1.2402498826570343e-14


def test_a_near_miss_refines_the_split_pair_alone(monkeypatch):
    """A bracket within SPLIT_FIRST times the target: the split pair's grids at 3/4 of
    the spacing (the level between two halvings: this bracket is just above the target)
    bring its upper bound close enough to the first pass's lower bound, so the groups
    are not composed again.  The answer's upper bound is the finer grids' (the same as a
    full refinement's), its lower bound the first pass's."""
    from pb_accountant import engine
    from pb_accountant.composition import THREE_QUARTER_LEVEL
    c = Composer()
    first = engine._two_sided_bounds(c, NEAR_MISS, NEAR_MISS_DELTA, False)
    assert TARGET_WIDTH < _width(first) <= engine.SPLIT_FIRST * TARGET_WIDTH
    assert engine.target_level(0, first) == THREE_QUARTER_LEVEL
    full = engine._two_sided_bounds(c.refined(THREE_QUARTER_LEVEL), NEAR_MISS,
                                    NEAR_MISS_DELTA, False)
    real = engine._two_sided_bounds
    passes = []

    def counting(composer, history, delta, symmetric):
        passes.append(composer.options.resolution)
        return real(composer, history, delta, symmetric)

    monkeypatch.setattr(engine, "_two_sided_bounds", counting)
    best = adaptive_epsilon_bounds(Composer(), NEAR_MISS, NEAR_MISS_DELTA)
    assert passes == [c.options.resolution]          # the groups of level 1: never
    assert (best.lower, best.upper) == (first.lower, full.upper)
    assert 0 < _width(best) <= TARGET_WIDTH
    assert best.grid == full.grid


def test_a_split_pair_refinement_that_falls_short_composes_both_bounds(monkeypatch):
    """Where the split pair's refined upper bound still leaves the bracket wider than
    the target, both bounds are computed on the same grids (the split pair a cache
    hit) and the tighter of the certified brackets is kept."""
    from pb_accountant import engine
    seen = _scripted_passes(monkeypatch, lambda level: 1.5 * TARGET_WIDTH / 4.0 ** level)
    uppers = []

    def upper(composer, history, delta, symmetric):
        uppers.append(composer.options.resolution)
        return engine.EpsilonBounds(delta, 0.0, 1.0 - TARGET_WIDTH / 100)

    monkeypatch.setattr(engine, "_upper_bound", upper)
    best = engine.adaptive_epsilon_bounds(Composer(), [(SubsampledGaussian(1.0, 0.01), 10)],
                                          1e-5)
    assert seen == [0, 1] and uppers == [Composer().refined(1).options.resolution]
    # the full pass's lower bound, the split pair's (smaller) upper bound
    assert best.upper == 1.0 - TARGET_WIDTH / 100
    assert best.lower == 1.0 - 1.5 * TARGET_WIDTH / 4.0
    # beyond SPLIT_FIRST times the target, both bounds at once, as before
    uppers.clear()
    seen = _scripted_passes(monkeypatch, lambda level: 3 * TARGET_WIDTH / 4.0 ** level)
    monkeypatch.setattr(engine, "_upper_bound", upper)
    engine.adaptive_epsilon_bounds(Composer(), [(SubsampledGaussian(1.0, 0.01), 10)], 1e-5)
    assert seen == [0, 1] and uppers == []


def test_a_zero_lower_bound_note_names_the_upper_bound_reported():
    """sigma 0.05, q 1e-6, one step, delta 1e-6: every pass's lower bound is 0, and the
    answer's upper bound is the smallest of the passes'; the note on the lower bound
    names that one (it named the finer pass's 59.68 beside a reported 47.31)."""
    from pb_accountant.engine import ZERO_LOWER_NOTE
    acc = PrivacyBucketsAccountant()
    acc.history = [(0.05, 1e-6, 1)]
    b = acc.get_epsilon_bounds(1e-6)
    notes = [n for n in b.notes if n.startswith(ZERO_LOWER_NOTE)]
    assert b.lower == 0.0 and b.upper > 1.0
    assert len(notes) == 1 and f"{b.upper:.6g}" in notes[0]


def test_a_caller_of_the_lower_bound_alone_refines_both_bounds(monkeypatch):
    """``split_first=False`` (the shuffle bracket's lower bound reads ``.lower`` alone):
    a near miss is refined with both bounds, so the lower bound is the finer grids'."""
    from pb_accountant import engine
    from pb_accountant.composition import THREE_QUARTER_LEVEL
    c = Composer()
    first = engine._two_sided_bounds(c, NEAR_MISS, NEAR_MISS_DELTA, False)
    assert engine.target_level(0, first, split_first=False) == THREE_QUARTER_LEVEL
    full = engine._two_sided_bounds(c.refined(THREE_QUARTER_LEVEL), NEAR_MISS,
                                    NEAR_MISS_DELTA, False)

    def refused(*args):
        raise AssertionError("the split pair alone was refined")

    monkeypatch.setattr(engine, "_upper_bound", refused)
    best = adaptive_epsilon_bounds(Composer(), NEAR_MISS, NEAR_MISS_DELTA, split_first=False)
    assert (best.lower, best.upper) == (full.lower, full.upper)


@pytest.mark.parametrize("sigma, steps, delta", [(2.5, 1000, 1e-5), (2.5, 1000, 1e-10),
                                                 (2.5, 1000, 1e-14), (2.5, 10000, 1e-14)])
def test_split_pair_first_brackets_the_closed_form_gaussian(sigma, steps, delta):
    """q = 1 (the Gaussian mechanism): the first grids' bracket is a near miss, the
    answer pairs their lower bound with the finer grids' upper bound, and the exact
    epsilon of the Gaussian composition (mu = sqrt(steps) / sigma) lies inside it."""
    from _closed_form import gaussian_epsilon
    from pb_accountant import engine
    history = [(SubsampledGaussian(sigma, 1.0), steps)]
    first = engine._two_sided_bounds(Composer(), history, delta, False)
    assert TARGET_WIDTH < _width(first) <= engine.SPLIT_FIRST * TARGET_WIDTH
    best = adaptive_epsilon_bounds(Composer(), history, delta)
    exact = gaussian_epsilon(delta, math.sqrt(steps) / sigma)
    assert best.lower <= exact <= best.upper
    assert best.lower == first.lower and 0 < _width(best) <= TARGET_WIDTH


def test_best_of_reports_the_pass_whose_upper_bound_it_keeps():
    """A finer pass that certified no upper bound (its round-off or windows reached
    delta) does not lend its notes to a bracket whose upper bound came from a coarser
    pass: they would say no epsilon could be certified beside a finite one."""
    from pb_accountant.engine import _best_of
    from pb_accountant.results import GridInfo
    coarse = EpsilonBounds(1e-5, 0.0, 7.0, "best", GridInfo(2.0, 100), ("coarse note",))
    finer = EpsilonBounds(1e-5, 0.0, math.inf, "best", GridInfo(1.5, 200),
                          ("no epsilon could be certified for this delta: ...",))
    kept = _best_of(coarse, finer)
    assert (kept.lower, kept.upper) == (0.0, 7.0)
    assert kept.grid == coarse.grid
    assert not any(n.startswith("no epsilon could be certified") for n in kept.notes)
    assert "coarse note" in kept.notes
    # the usual case: the finer pass's grid and notes
    tighter = dataclasses.replace(finer, lower=6.5, upper=6.9, notes=("finer note",))
    kept = _best_of(coarse, tighter)
    assert (kept.lower, kept.upper, kept.grid, kept.notes) == (6.5, 6.9, finer.grid,
                                                                ("finer note",))


def test_a_finite_upper_bound_never_carries_the_no_epsilon_note():
    """10^14 steps: the finer grids' round-off (which grows with the step count) passes
    delta where the first grid's did not; the answer keeps the first grid's finite
    upper bound, and its notes describe that grid."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(2.0, 0.01, 10 ** 14)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = acc.get_epsilon_bounds(1e-5)
    assert math.isfinite(b.upper) and b.upper > 1e9
    assert not any(n.startswith("no epsilon could be certified") for n in b.notes), b.notes
