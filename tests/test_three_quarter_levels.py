"""Grid levels between two halvings (``Composer.refined`` at k + THREE_QUARTER_LEVEL):
every spacing 3/4 of level k's (``BucketOptions.spacing_base`` 3/4, exact in binary),
certified as every grid is, and chosen by ``engine.target_level`` where the width asks
for a little more accuracy than the grids below give."""

import math

import numpy as np
import pytest

from pb_accountant import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian
from pb_accountant.composition import (THREE_QUARTER_LEVEL, BucketOptions, Composer,
                                       level_parts)
from pb_accountant.engine import (COARSE_LEVEL, MAX_REFINEMENT, TARGET_WIDTH,
                                  _two_sided_bounds, compose_history, target_level)
from pb_accountant.results import EpsilonBounds
from pb_accountant.subsampled_laplace import SubsampledLaplace
from conftest import gaussian_delta, gaussian_epsilon

TQ = THREE_QUARTER_LEVEL


def _bounds(width):
    """A bracket of relative width ``width`` (upper bound 1)."""
    return EpsilonBounds(1e-5, 1.0 - width, 1.0, "best")


def test_spacing_base_is_checked():
    assert BucketOptions(spacing_base=0.75).spacing_base == 0.75
    for bad in (0.5, 0.7, 1.5, True, "0.75", None):
        with pytest.raises(ValueError, match="spacing_base"):
            BucketOptions(spacing_base=bad)


def test_levels_are_integers_or_three_quarter_steps():
    assert level_parts(0) == (0, False) and level_parts(-2) == (-2, False)
    assert level_parts(TQ) == (0, True) and level_parts(1 + TQ) == (1, True)
    assert level_parts(-2 + TQ) == (-2, True)
    for bad in (0.3, 0.5, 1.0001, True, "1"):
        with pytest.raises(ValueError, match="level"):
            level_parts(bad)
    with pytest.raises(ValueError, match="level"):
        Composer().refined(0.5)


def test_a_three_quarter_level_is_made_once_with_three_quarter_resolutions():
    c = Composer()
    o, tq = c.options, c.refined(TQ)
    assert tq is c.refined(TQ) and tq is not c and tq is not c.refined(1)
    assert tq.options.resolution == 0.75 * o.resolution
    assert tq.options.leaf_resolution == 0.75 * o.leaf_resolution
    assert tq.options.spacing_base == 0.75
    assert tq.options.max_buckets == c.refined(1).options.max_buckets    # a finer level
    one = c.refined(1 + TQ).options
    assert one.resolution == 0.375 * o.resolution and one.spacing_base == 0.75
    full = c.refined(TQ, halve_long_tails=False)
    assert full is c.refined(TQ, halve_long_tails=False) and full is not tq
    assert not full.options.halve_long_tails
    assert Composer(BucketOptions(number_of_buckets=1000)).refined(TQ) is None
    assert Composer(BucketOptions(factor=1.001)).refined(TQ) is None


@pytest.mark.parametrize("pair", [
    Gaussian(1.3), Gaussian(20.0), SubsampledGaussian(1.1, 0.01), SubsampledGaussian(3.0, 0.2),
    SubsampledGaussian(0.8, 0.5), Laplace(2.0), RandomizedResponse(0.6)])
@pytest.mark.parametrize("delta", [1e-5, 1e-12])
def test_three_quarter_leaves_are_three_quarters_of_level_zeros(pair, delta):
    """Leaves away from the caps: the same rules on a ladder 3/4 as wide give exactly 3/4
    of the spacing, and every grid point (i + offset) spacing is exact (3 times a power
    of two, times an integer far below 2^50)."""
    c = Composer()
    history = [(pair, 100)]
    g0, = c.leaf_grids(history, delta)
    g, = c.refined(TQ).leaf_grids(history, delta)
    if g0.number_of_buckets > 4000:
        pytest.skip("a leaf near the caps: its spacing follows them")
    assert g.log_factor == 0.75 * g0.log_factor
    mantissa, _ = math.frexp(g.log_factor)
    assert mantissa == 0.75
    idx = g.indices.astype(float)
    assert np.array_equal(g.losses / g.log_factor, idx)
    assert np.all(np.abs(idx) < 2.0 ** 50)


def test_two_scale_parts_stay_on_the_three_quarter_ladder():
    """A pair that takes two-scale leaves (q 1e-5): its bulk's spacing is the leaf's over
    a power of two on both ladders."""
    from pb_accountant import two_scale
    pair = SubsampledGaussian(1.0, 1e-5)
    for level in (0, TQ):
        c = Composer().refined(level)
        cfg = c._config(1e-10, 10 ** 6)
        leaf = c._leaf(("split",), pair, cfg)[0][0].split
        cut = two_scale.two_scale_leaf(pair, leaf, c.options)
        assert cut is not None
        ratio = leaf.grid.log_factor / cut.bulk_spacing
        assert ratio >= 8 and math.frexp(ratio)[0] == 0.5          # a power of two
        assert math.frexp(cut.bulk_spacing)[0] == (0.75 if level else 0.5)


@pytest.mark.parametrize("sigma, steps", [(1.0, 1), (2.0, 10), (5.0, 100), (10.0, 1000),
                                          (0.8, 3), (30.0, 20000)])
def test_three_quarter_grids_bracket_the_gaussian_composition(sigma, steps):
    mu = math.sqrt(steps) / sigma
    pb = compose_history(Composer().refined(TQ), [(Gaussian(sigma), steps)], 1e-12)
    assert math.frexp(pb.buckets.grid.log_factor)[0] == 0.75
    eps = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
    exact = gaussian_delta(eps, mu)
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact) and np.all(exact <= db.upper)
    for delta in (1e-3, 1e-8, 1e-12, 1e-15):
        b = pb.epsilon_bounds(delta)
        e = gaussian_epsilon(delta, mu)
        assert b.lower <= e <= b.upper


@pytest.mark.parametrize("sigma, steps, delta", [(2.5, 1000, 1e-5), (2.5, 1000, 1e-14),
                                                 (10.0, 10 ** 6, 1e-12)])
def test_an_epsilon_query_on_three_quarter_grids_brackets_the_closed_form(sigma, steps,
                                                                          delta):
    """Both bounds on the three-quarter level (q = 1) bracket the exact epsilon, and the
    bracket is narrower than the default grids' (about 0.56 times: the h^2 law)."""
    from _closed_form import gaussian_epsilon as exact_epsilon
    history = [(SubsampledGaussian(sigma, 1.0), steps)]
    c = Composer()
    tq = _two_sided_bounds(c.refined(TQ), history, delta, False)
    first = _two_sided_bounds(c, history, delta, False)
    exact = exact_epsilon(delta, math.sqrt(steps) / sigma)
    assert tq.lower <= exact <= tq.upper and first.lower <= exact <= first.upper
    assert tq.width < 0.8 * first.width


def _rr_delta(p, r, eps):
    from scipy import stats
    k = np.arange(r + 1)
    logpmf_a = stats.binom.logpmf(k, r, p)
    loss = (2 * k - r) * math.log(p / (1 - p))
    pa, pb = np.exp(logpmf_a), np.exp(logpmf_a - loss)
    return math.fsum(np.maximum(pa - math.exp(eps) * pb, 0.0).tolist())


@pytest.mark.parametrize("p, r", [(0.51, 512), (0.6, 64), (0.75, 10)])
def test_three_quarter_grids_bracket_randomized_response(p, r):
    pb = compose_history(Composer().refined(TQ), [(RandomizedResponse(p), r)], 1e-6,
                         ("split", "grouped", "paper"))
    eps = np.linspace(0.0, 3.0, 13)
    exact = np.array([_rr_delta(p, r, e) for e in eps])
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact * (1 + 1e-12))
    assert np.all(exact <= db.upper * (1 + 1e-12))


def test_three_quarter_brackets_overlap_the_other_levels():
    """Small sampling rates (two-scale leaves) and a schedule: certified brackets of
    every level overlap, and the three-quarter level's lies between level 0's and 1's
    in width."""
    c = Composer()
    for history, delta in [([(SubsampledGaussian(0.8, 1e-4), 200_000)], 1e-10),
                           ([(SubsampledGaussian(1.0 + 0.05 * i, 0.01), 50)
                             for i in range(12)], 1e-6)]:
        got = [_two_sided_bounds(c.refined(level), history, delta, False)
               for level in (0, TQ, 1)]
        assert max(b.lower for b in got) <= min(b.upper for b in got)
        assert got[0].width > got[1].width > got[2].width


def test_target_levels_follow_the_width():
    """The first level predicted (4^-(L - level) of the width) to meet the target."""
    assert target_level(0, _bounds(0.5 * TARGET_WIDTH)) is None
    assert target_level(0, EpsilonBounds(1e-5, 1.0, math.inf, "best")) is None
    assert target_level(MAX_REFINEMENT, _bounds(5 * TARGET_WIDTH)) is None
    # far from the target: both bounds, on the first level predicted to meet it
    assert target_level(0, _bounds(1.6 * TARGET_WIDTH), split_first=False) == TQ
    assert target_level(0, _bounds(3 * TARGET_WIDTH)) == 1
    assert target_level(0, _bounds(5 * TARGET_WIDTH)) == 1 + TQ
    assert target_level(0, _bounds(12 * TARGET_WIDTH)) == 2
    assert target_level(0, _bounds(1000 * TARGET_WIDTH)) == MAX_REFINEMENT
    assert target_level(TQ, _bounds(2.1 * TARGET_WIDTH)) == 1
    # coarse starts reach the default grids or finer, through integer levels below them
    assert target_level(COARSE_LEVEL, _bounds(20 * TARGET_WIDTH)) == TQ
    assert target_level(COARSE_LEVEL, _bounds(3 * TARGET_WIDTH)) == -1
    assert target_level(-4, _bounds(200 * TARGET_WIDTH)) == 0
    # a near miss refined split pair first: 3/4 of the spacing where the split pair
    # alone is predicted to meet the target there, else one halving
    assert target_level(0, _bounds(1.2 * TARGET_WIDTH)) == TQ
    assert target_level(0, _bounds(1.6 * TARGET_WIDTH)) == 1
    assert target_level(TQ, _bounds(1.3 * TARGET_WIDTH)) == 1
    assert target_level(TQ, _bounds(1.5 * TARGET_WIDTH)) == 1 + TQ
    assert target_level(0, _bounds(1.35 * TARGET_WIDTH)) == 1     # (UPPER_SHARE 0.51)
    assert target_level(1 + TQ, _bounds(1.9 * TARGET_WIDTH)) == 2


def test_odd_levels_are_refused_by_name():
    for bad in (math.nan, math.inf, -math.inf, 2000, -2000, 1e300):
        with pytest.raises(ValueError, match="level"):
            Composer().refined(bad)


def test_spacing_base_is_the_engines_own():
    """Users do not set the ladder (a root on 3/4 would make the levels between two
    halvings coarser, not finer), and checkpoints leave it out, so the versions before it
    still read them."""
    from pb_accountant import PrivacyBucketsAccountant
    with pytest.raises(ValueError, match="spacing_base"):
        PrivacyBucketsAccountant(spacing_base=0.75)
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    state = acc.state_dict()
    assert "spacing_base" not in state["options"]
    other = PrivacyBucketsAccountant()
    other.load_state_dict(state)
    bad = dict(state, options=dict(state["options"], spacing_base=0.75))
    with pytest.raises(ValueError, match="spacing_base"):
        PrivacyBucketsAccountant().load_state_dict(bad)


def test_histories_with_loss_atoms_refine_by_whole_halvings(monkeypatch):
    """A Laplace pair's atoms (losses at multiples of 1/b) lie on powers of two, not on
    3/4 of them: such a history's levels stay whole (on 3/4 of the spacing its bracket
    was wider than level 0's).  (The history this was found on, 72 Laplace(0.25) and 146
    Gaussian(30) steps at delta 1.3e-12, meets the target on level 0 since the Laplace
    leaves take displaced borders; a Poisson-sampled Laplace history refines.)"""
    from pb_accountant import engine
    history = [(SubsampledLaplace(0.5, 0.05), 10000)]
    delta = 1e-15
    first = _two_sided_bounds(Composer(), history, delta, False)
    assert first.width > TARGET_WIDTH
    seen = []
    for name in ("_two_sided_bounds", "_upper_bound"):
        real = getattr(engine, name)

        def recording(composer, *args, real=real):
            seen.append(math.log2(0.015 / composer.options.resolution))
            return real(composer, *args)
        monkeypatch.setattr(engine, name, recording)
    best = engine.adaptive_epsilon_bounds(Composer(), history, delta)
    assert len(seen) >= 2 and all(abs(v - round(v)) < 1e-9 for v in seen)
    assert 0 < best.width <= TARGET_WIDTH
    assert target_level(0, first, between=False) in (1, 2)
