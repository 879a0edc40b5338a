"""A composition per direction where the two rows' masses lie far apart (issue 12).

The split pair's A-row sits near +KL and its B-row near -KL; at epsilon of thousands a
grid holding both is mostly the empty span between them.  Composed one direction at a
time (``Composer.compose(..., focus=...)``), each grid holds one row's mass, and each
direction's bound is certified by its own composition.  References: the 60-digit
closed form of the Gaussian composition (tests/_closed_form.py).
"""
import math

import numpy as np
import pytest

from pb_accountant import Gaussian, PrivacyBucketsAccountant, SubsampledGaussian
from pb_accountant import engine
from pb_accountant.composition import BucketOptions, Composer
from pb_accountant.engine import PrivacyBuckets, epsilon_bounds
from pb_accountant.queries import certified_lower_epsilon, upper_epsilon

pytest.importorskip("mpmath")
from _closed_form import gaussian_epsilon  # noqa: E402

#: mu = 200: epsilon about 2e4, the joint range about 12-18 times one row's
FAR = [(Gaussian(0.05), 100)]
#: a typical DP-SGD run: the two rows overlap
NEAR = [(SubsampledGaussian(1.1, 0.01), 1000)]


@pytest.fixture
def focuses(monkeypatch):
    """The ``focus`` of every ``Composer.compose`` call the test makes, in order."""
    seen = []
    real = Composer.compose

    def counted(self, history, delta=None, methods=("split", "grouped"), focus=None):
        seen.append(focus)
        return real(self, history, delta, methods, focus)

    monkeypatch.setattr(Composer, "compose", counted)
    return seen


def test_the_predicted_ranges_tell_far_from_near():
    c = Composer()
    joint, ab, ba = c.direction_spans(FAR, 1e-10)
    assert joint >= engine.DIRECTIONS_APART * max(ab, ba) > 0.0
    joint, ab, ba = c.direction_spans(NEAR, 1e-10)
    assert max(ab, ba) <= joint < 1.5 * max(ab, ba)
    assert c.direction_spans([], 1e-10) == (0.0, 0.0, 0.0)


def test_the_prediction_builds_only_groups():
    with pytest.raises(ValueError, match="groups must be among"):
        Composer().direction_spans(NEAR, 1e-5, ("split",))


def test_fixed_grids_always_compose_both_directions_together():
    assert not engine._directions_apart(Composer(BucketOptions(number_of_buckets=500)),
                                        FAR, 1e-10)


@pytest.mark.parametrize("delta", [1e-5, 1e-15])
@pytest.mark.parametrize("sigma,steps", [(0.05, 100), (0.5, 10 ** 4)])   # mu 200, 200
def test_by_direction_and_together_both_bracket_the_closed_form(monkeypatch, sigma, steps,
                                                                 delta):
    mu = math.sqrt(steps) / sigma
    exact = gaussian_epsilon(delta, mu)
    history = [(Gaussian(sigma), steps)]
    assert engine._directions_apart(Composer(), history, delta)
    apart = epsilon_bounds(history, delta)
    monkeypatch.setattr(engine, "DIRECTIONS_APART", math.inf)
    together = epsilon_bounds(history, delta)
    for b in (apart, together):
        assert 0.0 < b.lower <= exact <= b.upper < math.inf
        assert not b.notes
    assert apart.width <= engine.TARGET_WIDTH
    # the point of it: a grid for one row's mass, not for the span between the rows
    assert apart.grid.number_of_buckets * 4 <= together.grid.number_of_buckets


def test_subsampled_steps_far_apart_agree_with_the_joint_composition(monkeypatch):
    """q = 0.9 (no closed form): both brackets are certified, so they must overlap, and
    the one direction at a time meets the target width."""
    history = [(SubsampledGaussian(1.0, 0.9), 40_000)]
    assert engine._directions_apart(Composer(), history, 1e-8)
    apart = epsilon_bounds(history, 1e-8)
    monkeypatch.setattr(engine, "DIRECTIONS_APART", math.inf)
    together = epsilon_bounds(history, 1e-8)
    assert max(apart.lower, together.lower) <= min(apart.upper, together.upper)
    assert 1e3 < apart.upper < math.inf and apart.width <= engine.TARGET_WIDTH
    # dominated by the Gaussian at q = 1 (mu = 200)
    assert apart.upper < gaussian_epsilon(1e-8, 200.0)


def test_a_focused_composition_certifies_its_direction_and_only_trivially_the_other():
    exact = gaussian_epsilon(1e-10, 200.0)
    c = Composer()
    ab = PrivacyBuckets(c.compose(FAR, 1e-10, ("split", "grouped-ab"), "ab"), 1e-10)
    ba = PrivacyBuckets(c.compose(FAR, 1e-10, ("split", "grouped-ba"), "ba"), 1e-10)
    both = PrivacyBuckets(c.compose(FAR, 1e-10, ("split", "grouped")), 1e-10)
    for pb, direction in ((ab, "ab"), (ba, "ba")):
        other = "ba" if direction == "ab" else "ab"
        up = pb.epsilon_upper(1e-10)              # the folded row's bound: valid, trivial
        assert up == math.inf
        own = upper_epsilon(pb.upper_curves("split", direction), 1e-10)
        assert own >= exact and own < math.inf
        low = certified_lower_epsilon(pb.lower_curves("grouped", direction), 1e-10)
        assert 0.0 < low <= exact
        assert pb.upper_curves("split", other)   # still there, and still an upper bound
        assert pb.infinity_mass > 0.5
    joined = PrivacyBuckets.of_directions(ab, ba)
    b = joined.epsilon_bounds(1e-10)
    assert b.lower <= exact <= b.upper < math.inf and not b.notes
    assert joined.infinity_mass < 1e-12
    # the pair is its own mirror: either direction gives the other's answer
    assert upper_epsilon(both.upper_curves("split", "ba"), 1e-10) >= exact
    only_ab = PrivacyBuckets.of_directions(ab).epsilon_bounds(1e-10)
    assert only_ab.lower <= exact <= only_ab.upper


@pytest.mark.parametrize("focus,methods", [
    ("xy", ("split",)),
    ("ab", ("split", "grouped-ba")),
    ("ba", ("split", "grouped")),
    ("ab", ("split", "paper")),
])
def test_a_focus_is_checked_before_anything_is_composed(focus, methods):
    with pytest.raises(ValueError, match="focus"):
        Composer().compose(FAR, 1e-10, methods, focus)


def test_replace_one_composes_one_direction_only(focuses):
    """Self-mirrored pairs (Poisson, replace-one): the A||B composition decides both
    directions.  At q = 1 the pair is N(1) vs N(-1): a Gaussian with mu = 2 sqrt(T) / sigma."""
    acc = PrivacyBucketsAccountant(neighbouring="replace_one")
    acc.history = [(1.0, 1.0, 10_000)]
    b = acc.get_epsilon_bounds(1e-8)
    exact = gaussian_epsilon(1e-8, 2.0 * math.sqrt(10_000) / 1.0)
    assert b.lower <= exact <= b.upper < math.inf
    assert focuses and set(focuses) == {"ab"}


def test_the_same_history_gives_the_same_bits_by_direction():
    """Queried at every chunk or once, fresh or restored from state_dict."""
    chunks = [(1.0, 0.9, 10_000)] * 4
    grown = PrivacyBucketsAccountant()
    seen = []
    for chunk in chunks:
        grown.history = grown.history + [chunk]
        seen.append(grown.get_epsilon_bounds(1e-8))
    once = PrivacyBucketsAccountant()
    once.history = list(chunks)
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(grown.state_dict())
    final = [seen[-1], once.get_epsilon_bounds(1e-8), restored.get_epsilon_bounds(1e-8)]
    assert len({(b.lower, b.upper) for b in final}) == 1
    assert engine._directions_apart(Composer(), grown._pairs(grown.history), 1e-8)
    assert np.isfinite(final[0].upper) and final[0].lower > 0.0


def test_delta_queries_far_apart_bracket_the_closed_form(focuses):
    """get_delta_bounds composes by direction too (for its delta class and the class of
    its answer); pointwise brackets with relative checks, as in test_large_epsilon."""
    from _closed_form import gaussian_delta

    acc = PrivacyBucketsAccountant()
    acc.history = [(0.05, 1.0, 100)]                  # mu = 200
    eps = np.array([gaussian_epsilon(d, 200.0) for d in (1e-3, 1e-8, 1e-14)])
    db = acc.get_delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = float(gaussian_delta(e, 200.0))
        assert 0.0 < lo <= exact <= up < 1.0
        # a delta query is not refined: at epsilon 2e4 its grid's spacing of 2 costs
        # 6-15% of delta (measured), as much as the joint composition's
        assert up <= 1.2 * exact and lo >= 0.9 * exact
    assert {"ab", "ba"} <= set(focuses) and None not in focuses


def test_curves_and_tradeoff_bounds_far_apart_go_by_direction(monkeypatch):
    """The privacy curve and the trade-off bounds read the same by-direction
    compositions (``engine.compose_history``): the curve brackets the closed form, and
    the trade-off brackets overlap the joint composition's (both certified)."""
    from _closed_form import gaussian_delta

    acc = PrivacyBucketsAccountant()
    acc.history = [(0.05, 1.0, 100)]                  # mu = 200
    eps = np.array([gaussian_epsilon(d, 200.0) for d in (1e-3, 1e-9)])
    curve = acc.get_privacy_curve(eps)
    for e, lo, up in zip(eps, curve.delta_lower, curve.delta_upper):
        exact = float(gaussian_delta(e, 200.0))
        assert 0.0 < lo <= exact <= up < 1.0
    apart = acc.get_tradeoff_bounds([1e-3, 0.1])
    monkeypatch.setattr(engine, "DIRECTIONS_APART", math.inf)
    together = PrivacyBucketsAccountant()
    together.history = list(acc.history)
    joint = together.get_tradeoff_bounds([1e-3, 0.1])
    assert np.all(np.asarray(apart.tpr_lower) <= np.asarray(joint.tpr_upper))
    assert np.all(np.asarray(joint.tpr_lower) <= np.asarray(apart.tpr_upper))
    assert apart.mu_lower <= 200.0 <= apart.mu_upper
