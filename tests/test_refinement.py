"""Grids refined to the accuracy an epsilon query needs (engine.adaptive_epsilon_bounds):
a wide bracket on the first grid is computed again with the leaf and final resolutions
halved, the best of both kept, and every query of a history gets the same answer."""

import math

import pytest

from pb_accountant import PrivacyBucketsAccountant, SubsampledGaussian
from pb_accountant.composition import BucketOptions, Composer
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
    c = Composer()
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
    assert c.largest_leaf(HEAVY_TAIL, HEAVY_DELTA) >= COARSE_FIRST_LEAF_BUCKETS
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
    assert c.largest_leaf(pairs, delta) >= COARSE_FIRST_LEAF_BUCKETS
    coarse = _two_sided_bounds(c.refined(COARSE_LEVEL), pairs, delta, False)
    assert _width(coarse) > TARGET_WIDTH
    best = adaptive_epsilon_bounds(c, pairs, delta)
    assert _width(best) <= TARGET_WIDTH
    assert coarse.lower <= best.lower <= best.upper <= coarse.upper


def _scripted_passes(monkeypatch, width_at):
    """Replace each pass by a bracket of relative width ``width_at(level)`` (the
    decisions stay the engine's) and return the list the levels it runs are appended to."""
    from pb_accountant import engine
    seen = []

    def scripted(composer, history, delta, symmetric):
        level = round(math.log2(Composer().options.resolution / composer.options.resolution))
        seen.append(level)
        return engine.EpsilonBounds(delta, 1.0 - width_at(level), 1.0)

    monkeypatch.setattr(engine, "_two_sided_bounds", scripted)
    return seen


def _coarse_start(monkeypatch, too_wide):
    """Levels run from a coarse start whose bracket is ``too_wide`` times the target,
    each halving shrinking it 4-fold, and the answer."""
    from pb_accountant import engine
    seen = _scripted_passes(monkeypatch, lambda level: too_wide * TARGET_WIDTH
                            / 4.0 ** (level - engine.COARSE_LEVEL))
    monkeypatch.setattr(Composer, "largest_leaf", lambda self, h, d=None: 2 ** 20)
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


def test_a_coarse_start_refines_toward_the_target_itself(monkeypatch):
    """A coarse bracket 40 times too wide asks for log4(40) = 2.7, so three halvings
    (level 1), the first level the h^2 law predicts within the target; aiming at half
    the target would have asked for level 2, four times the cost."""
    from pb_accountant import engine
    seen, best = _coarse_start(monkeypatch, 40)
    assert seen == [engine.COARSE_LEVEL, 1]
    assert _width(best) <= TARGET_WIDTH


#: random-suite #77: two segments whose leaf grids reach the bucket cap on level 1
CAPPED = [(SubsampledGaussian(1.191691, 7.511e-05), 1609653),
          (SubsampledGaussian(0.595846, 7.511e-05), 1609652)]
CAPPED_DELTA = 7.895397081579481e-14


def test_no_refinement_where_no_leaf_grid_gets_finer():
    from pb_accountant.engine import _refines_no_leaf, canonical_history
    c = Composer()
    history = canonical_history(CAPPED)
    cap = c.options.max_buckets
    assert all(g.number_of_buckets == cap for g in c.refined(1).leaf_grids(history, CAPPED_DELTA))
    assert _refines_no_leaf(c.refined(1), c.refined(2), history, CAPPED_DELTA)
    # level 0's leaves are below the cap: refining them is worth it
    assert not _refines_no_leaf(c.refined(0), c.refined(1), history, CAPPED_DELTA)
    typical = canonical_history([(SubsampledGaussian(1.1, 0.01), 1000)])
    assert not _refines_no_leaf(c, c.refined(1), typical, 1e-5)
    assert c.largest_leaf(history, CAPPED_DELTA) == max(
        g.number_of_buckets for g in c.leaf_grids(history, CAPPED_DELTA))


def test_a_query_stops_where_no_leaf_grid_gets_finer(monkeypatch):
    """Scripted widths: the coarse pass asks for level 1, whose width (twice the
    target) asks for level 2; the real leaf grids of CAPPED are capped and equal on
    levels 1 and 2, so the query keeps level 1's bracket."""
    from pb_accountant import engine
    widths = {engine.COARSE_LEVEL: 40 * TARGET_WIDTH, 1: 2 * TARGET_WIDTH, 2: TARGET_WIDTH / 2}
    seen = _scripted_passes(monkeypatch, widths.__getitem__)
    best = engine.adaptive_epsilon_bounds(Composer(), CAPPED, CAPPED_DELTA)
    assert seen == [engine.COARSE_LEVEL, 1]          # level 2 would refine no leaf
    assert _width(best) == pytest.approx(2 * TARGET_WIDTH)
    # the control: leaves that do get finer are refined as before
    seen.clear()
    monkeypatch.setattr(engine, "_refines_no_leaf", lambda *a: False)
    engine.adaptive_epsilon_bounds(Composer(), CAPPED, CAPPED_DELTA)
    assert seen == [engine.COARSE_LEVEL, 1, 2]
