"""Heterogeneous histories (noise schedules, batch-size changes; issue 12).

Random histories of up to 50 segments: an accountant queried after every segment, a
fresh one given the whole history and one restored from ``state_dict`` agree bitwise,
and the certified bounds bracket dp_accounting's PLD estimates.  Also: the split pair
is composed once per history whatever the order of the queries (each representation
is cached on its own, docs/method.md §3).
"""
import math

import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant import composition, engine, graded_leaves
from pb_accountant.composition import Composer
from pb_accountant.mechanisms import SubsampledGaussian

from _optional import HealthCheck, given, settings, st

#: PLD's own arithmetic (double-precision FFTs, no certified round-off) may move its
#: epsilon by a few ulps times the composition count; the bracket allows this much
#: relative slack on PLD's side, far below its discretisation effect
PLD_SLACK = 1e-9
#: PLD's value discretisation interval: 1e-3 keeps a 50-segment reference to seconds
#: (1e-4 takes over a minute); its estimates bracket the true epsilon at any interval
PLD_INTERVAL = 1e-3


def _pld_epsilons(history, delta, interval=PLD_INTERVAL):
    """dp_accounting's (optimistic, pessimistic) epsilon for the history."""
    pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    out = []
    for pessimistic in (False, True):
        parts = [pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=q, value_discretization_interval=interval,
            pessimistic_estimate=pessimistic, use_connect_dots=pessimistic
        ).self_compose(count) for sigma, q, count in history]
        while len(parts) > 1:                       # pairwise: fewer large transforms
            parts = [parts[i].compose(parts[i + 1]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        out.append(parts[0].get_epsilon_for_delta(delta))
    return tuple(out)


@st.composite
def schedules(draw):
    """Up to 50 segments: sigma 0.8-3, q 0.005-0.2, 1-12 steps each (small, so that
    the PLD reference stays quick); neighbours may repeat (merged by the history)."""
    n = draw(st.integers(1, 50))
    base_sigma = draw(st.floats(0.8, 3.0))
    base_q = draw(st.floats(0.005, 0.2))
    history = []
    for _ in range(n):
        sigma = round(base_sigma * draw(st.floats(0.8, 1.25)), 4)
        q = round(min(base_q * draw(st.sampled_from([0.5, 1.0, 1.0, 2.0])), 1.0), 5)
        history.append((sigma, q, draw(st.integers(1, 12))))
    delta = draw(st.sampled_from([1e-6, 1e-5, 1e-3]))
    return history, delta


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schedules())
def test_incremental_fresh_and_restored_agree_bitwise_and_bracket_pld(case):
    history, delta = case
    incremental = PrivacyBucketsAccountant()
    for sigma, q, count in history:
        for _ in range(count):
            incremental.step(noise_multiplier=sigma, sample_rate=q)
        incremental.get_epsilon_bounds(delta)               # queried after every segment
    final = incremental.get_epsilon_bounds(delta)

    fresh = PrivacyBucketsAccountant()
    fresh.history = [tuple(h) for h in history]
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(incremental.state_dict())
    for other in (fresh, restored):
        b = other.get_epsilon_bounds(delta)
        assert (b.lower, b.upper) == (final.lower, final.upper)
    assert fresh.get_epsilon(delta) == final.upper

    assert 0.0 <= final.lower <= final.upper < math.inf
    optimistic, pessimistic = _pld_epsilons(history, delta)
    # pb_low <= true eps <= PLD pessimistic; pb_up >= true eps >= PLD optimistic
    assert final.lower <= pessimistic * (1 + PLD_SLACK)
    assert final.upper >= optimistic * (1 - PLD_SLACK)


def test_split_pair_composed_once_whatever_the_query_order(monkeypatch):
    """get_epsilon, then get_epsilon_bounds, then the B||A groups: the split pair's
    compositions are paid for once; the groups follow its plan on the same grids
    (get_epsilon computes the lower bound too: it decides whether the grid is refined,
    docs/method.md §3, so the bounds query after it composes nothing new)."""
    calls = {"split": 0, "follow": 0}
    real_split, real_follow = composition.compose_split, composition.follow_plan

    def counting_split(*args, **kwargs):
        calls["split"] += 1
        return real_split(*args, **kwargs)

    def counting_follow(*args, **kwargs):
        calls["follow"] += 1
        return real_follow(*args, **kwargs)

    monkeypatch.setattr(composition, "compose_split", counting_split)
    monkeypatch.setattr(composition, "follow_plan", counting_follow)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.2, 0.02, 37), (0.9, 0.04, 21), (1.5, 0.02, 50)]
    upper = acc.get_epsilon(1e-5)
    after_upper = calls["split"]
    after_follow = calls["follow"]
    assert after_upper > 0 and after_follow > 0
    bounds = acc.get_epsilon_bounds(1e-5)
    assert calls["split"] == after_upper          # the split pair is reused
    assert calls["follow"] == after_follow        # and so are the groups
    assert bounds.upper == upper
    both = acc.get_delta_bounds(1.0)              # another delta class: new compositions
    assert 0.0 <= both.lower <= both.upper <= 1.0

    # composing the B||A groups after the A||B groups reuses the split pair too
    composer = Composer()
    history = [(SubsampledGaussian(1.1, 0.05), 10), (SubsampledGaussian(2.0, 0.05), 7)]
    composer.compose(history, 1e-5, ("split", "grouped-ab"))
    n = calls["split"]
    ba = composer.compose(history, 1e-5, ("split", "grouped-ba"))
    assert calls["split"] == n
    assert [d for g in ba.members[1][1] for d in g.directions] == ["ba"]
    assert all(g.grid == ba.grid for _, g in ba.representations())


def test_grouped_both_directions_equal_one_direction_each():
    """methods=("split", "grouped") is exactly the A||B and B||A groups composed one at
    a time: the lower curves are the same objects' curves, bitwise."""
    history = [(SubsampledGaussian(1.0, 0.1), 9), (SubsampledGaussian(1.4, 0.05), 20)]
    composer = Composer()
    both = composer.compose(history, 1e-5, ("split", "grouped"))
    ab = Composer().compose(history, 1e-5, ("split", "grouped-ab"))
    ba = Composer().compose(history, 1e-5, ("split", "grouped-ba"))
    g_both = both.members[1][1]
    assert (g_both[0].rows == ab.members[1][1][0].rows).all()
    assert (g_both[1].rows == ba.members[1][1][0].rows).all()
    assert (both.split.rows == ab.split.rows).all()


# -- count groups (docs/method.md §3, "Segment grids") ----------------------------------

def test_count_groups_merge_equal_pairs_and_group_by_count():
    a, b, c, d = (SubsampledGaussian(s, 0.01) for s in (1.0, 1.1, 1.2, 1.3))
    history = composition.canonical_history([(a, 5), (b, 10), (a, 5), (c, 10), (d, 3)])
    assert composition.count_groups(history) == ((10, (a, b, c)), (3, (d,)))
    # and by leaf spacing: pairs of different spacings are powered on their own
    spacing = {a: 1.0, b: 0.5, c: 1.0, d: 1.0}.get
    assert composition.count_groups(history, spacing) == ((10, (a, c)), (10, (b,)), (3, (d,)))
    # a history of one pair is one group of one pair
    assert composition.count_groups(((a, 7),)) == ((7, (a,)),)


def _count_compositions(monkeypatch):
    calls = [0]
    real = composition.compose_split

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(composition, "compose_split", counting)
    return calls


def test_equal_length_epochs_square_once(monkeypatch):
    """m epochs of c steps, one sigma each: per group of equal leaf spacing,
    (P_1 * ... * P_k)^c costs k - 1 products of leaves and the binary powers of c
    once, not binary powers for every epoch."""
    calls = _count_compositions(monkeypatch)
    m, c = 12, 100
    history = [(SubsampledGaussian(1.0 + 0.02 * i, 0.01), c) for i in range(m)]
    budget = composition.per_step_infinity_budget(
        composition.delta_class(1e-5), composition.planned_steps(m * c))
    options = composition.BucketOptions()
    groups = composition.count_groups(
        history, lambda p: composition.leaf_grid(p, budget, options).log_factor)
    g = len(groups)
    assert g <= m // 2                         # the test needs shared spacings
    Composer().compose(history, 1e-5, ("split",))
    # 100 = 0b1100100: 6 squarings and 2 products per group, g - 1 to join the groups
    assert 0 < calls[0] <= (m - g) + 8 * g + (g - 1)


def test_non_adjacent_equal_pairs_compose_as_one_segment():
    """Equal pairs anywhere in the history are one count: bitwise the same bounds."""
    split = PrivacyBucketsAccountant()
    split.history = [(1.0, 0.02, 5), (1.3, 0.02, 5), (1.0, 0.02, 5)]
    merged = PrivacyBucketsAccountant()
    merged.history = [(1.0, 0.02, 10), (1.3, 0.02, 5)]
    a, b = split.get_epsilon_bounds(1e-5), merged.get_epsilon_bounds(1e-5)
    assert (a.lower, a.upper) == (b.lower, b.upper)
    assert 0.0 < a.lower <= a.upper < math.inf


def test_epoch_schedule_per_step_queries_agree_bitwise_and_bracket_pld():
    """A per-epoch noise schedule trained step by step with a query after every step
    (the last epoch's count, and so the count groups, change at every step): the final
    bounds equal a fresh accountant's and a restored one's, and bracket PLD."""
    delta = 1e-5
    history = [(1.0 + 0.1 * i, 0.02, 16) for i in range(4)] + [(1.5, 0.02, 9)]
    incremental = PrivacyBucketsAccountant()
    for sigma, q, count in history:
        for _ in range(count):
            incremental.step(noise_multiplier=sigma, sample_rate=q)
            incremental.get_epsilon_bounds(delta)
    final = incremental.get_epsilon_bounds(delta)
    fresh = PrivacyBucketsAccountant()
    fresh.history = list(history)
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(incremental.state_dict())
    for other in (fresh, restored):
        b = other.get_epsilon_bounds(delta)
        assert (b.lower, b.upper) == (final.lower, final.upper)
    assert 0.0 < final.lower <= final.upper < math.inf
    assert (final.upper - final.lower) / final.upper <= 5e-4
    # at interval 1e-4 PLD's optimistic estimate is within 0.1% of the upper bound
    optimistic, pessimistic = _pld_epsilons(history, delta, interval=1e-4)
    assert final.lower <= pessimistic * (1 + PLD_SLACK)
    assert final.upper >= optimistic * (1 - PLD_SLACK)


def test_long_equal_count_schedule_brackets_pld():
    """Epochs of 64 steps (the group's binary powers), one sigma per epoch, plus a
    partial epoch: both bounds bracket dp_accounting's PLD estimates."""
    delta = 1e-6
    history = [(0.9 + 0.08 * i, 0.03, 64) for i in range(10)] + [(1.7, 0.03, 13)]
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    b = acc.get_epsilon_bounds(delta)
    assert 0.0 < b.lower <= b.upper < math.inf
    optimistic, pessimistic = _pld_epsilons(history, delta)
    assert b.lower <= pessimistic * (1 + PLD_SLACK)
    assert b.upper >= optimistic * (1 - PLD_SLACK)


def _count_leaf_masses(monkeypatch) -> list:
    """The pairs whose leaf masses are computed from now on, in order."""
    computed = []
    leaf_masses = composition.leaf_masses

    def counted(pair, *args, **kwargs):
        computed.append(pair)
        return leaf_masses(pair, *args, **kwargs)

    monkeypatch.setattr(composition, "leaf_masses", counted)
    monkeypatch.setattr(graded_leaves, "leaf_masses", counted)     # (graded leaves' cuts)
    return computed


def test_a_history_of_more_leaves_than_the_cache_holds_computes_each_once(monkeypatch):
    """A schedule whose leaves fill the value cache: composing it evicts the leaves
    already consumed into their products first, not the ones about to be read, and a
    query reads the pairs' remembered moments, not their leaves, so every leaf's masses
    are computed once (1000 per-step sigmas at q 0.01: 1654 times before;
    docs/method.md §3)."""
    pairs = [SubsampledGaussian(round(1.0 + 0.01 * i, 6), 0.01) for i in range(48)]
    history = [(pair, 3) for pair in pairs]
    # every leaf fits (the split pair and two group directions per pair), with room for
    # a few products only
    monkeypatch.setattr(composition, "_VALUE_CACHE_ENTRIES", 3 * len(pairs) + 6)
    computed = _count_leaf_masses(monkeypatch)
    composer = Composer(cache_size=1)
    first = engine.compose_history(composer, history, 1e-6).epsilon_bounds(1e-6)
    again = engine.compose_history(composer, history, 1e-6).epsilon_bounds(1e-6)
    assert sorted(computed, key=pairs.index) == pairs
    assert (first.lower, first.upper) == (again.lower, again.upper)
    fresh = engine.compose_history(Composer(), history, 1e-6).epsilon_bounds(1e-6)
    assert (fresh.lower, fresh.upper) == (first.lower, first.upper)


def test_a_growing_history_queried_every_epoch_prepares_each_operand_at_most_twice(
        monkeypatch):
    """One query per epoch on a growing history: each product's operands are cached
    binary powers and folds, coarsened, windowed and padded to the other operand's
    grid.  The Composer remembers those preparations from their second use
    (``OperandMemo``), so across 20 queries no representation is squared, restricted
    or padded three times with the same arguments (before it, some were prepared 10
    or 11 times, 884 preparations in all against 471), and every answer is bitwise a
    fresh accountant's."""
    from pb_accountant.buckets import GroupedBuckets, SplitBuckets

    calls, alive = {}, []
    for cls in (SplitBuckets, GroupedBuckets):
        for name in ("squared", "restricted", "padded"):
            original = getattr(cls, name)

            def counted(self, *args, _original=original, _name=name, **kwargs):
                key = (id(self), _name, repr(args), repr(sorted(kwargs.items())))
                calls[key] = calls.get(key, 0) + 1
                alive.append(self)          # (ids are not reused while counted)
                return _original(self, *args, **kwargs)

            monkeypatch.setattr(cls, name, counted)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.02, 1100)]       # 20 epochs on one planned length (2048)
    answers = {}
    for epoch in range(1, 21):
        for _ in range(37):
            acc.step(noise_multiplier=1.1, sample_rate=0.02)
        answers[epoch] = acc.get_epsilon_bounds(1e-5)
    assert max(calls.values()) <= 2
    assert len(acc._composer._operands) > 0
    for epoch in (3, 11, 20):
        fresh = PrivacyBucketsAccountant()
        fresh.history = [(1.1, 0.02, 1100 + 37 * epoch)]
        b = fresh.get_epsilon_bounds(1e-5)
        assert (b.lower, b.upper) == (answers[epoch].lower, answers[epoch].upper)


def test_the_operand_memo_keeps_the_most_recently_used_within_its_bounds():
    """``OperandMemo`` keeps a preparation from the second time it is asked for (or
    when its operand is itself a kept value), evicts the least recently used entry
    first, and counts the rows of both the value and the operand its key holds."""
    from pb_accountant.buckets import Grid, SplitBuckets

    def rows(n):
        pair = SubsampledGaussian(1.0, 0.1)
        return SplitBuckets.leaves(pair, Grid(0.01, n))[0]

    def ask_and_put(memo, key, value):
        assert memo.get(key) is None
        memo.put(key, value)

    a, b, c = rows(100), rows(100), rows(100)
    one = a.rows.nbytes
    memo = composition.OperandMemo(entries=2, max_bytes=10 * one)
    ask_and_put(memo, ("padded", a, 1), a)
    assert len(memo) == 0                           # asked for once: not kept
    ask_and_put(memo, ("padded", a, 1), a)
    ask_and_put(memo, ("padded", b, 1), b)
    ask_and_put(memo, ("padded", b, 1), b)
    assert memo.get(("padded", a, 1)) is a          # a is now the most recent
    ask_and_put(memo, ("padded", a, 2), c)          # its operand a is kept: kept at once
    assert memo.get(("padded", b, 1)) is None       # over 2 entries: b went
    assert memo.get(("padded", a, 1)) is a and memo.get(("padded", a, 2)) is c
    small = composition.OperandMemo(entries=10, max_bytes=3 * one)
    for _ in range(2):
        ask_and_put(small, ("padded", a, 1), (b, ("ops",)))   # operand and value: 2 rows
    for _ in range(2):
        ask_and_put(small, ("padded", c, 1), c)     # 4 rows > 3: the first entry goes
    assert len(small) == 1 and small.get(("padded", c, 1)) is c


def test_a_history_whose_leaves_outgrow_the_cache_computes_each_leaf_once(monkeypatch):
    """A schedule whose leaves do not all fit in the value cache (``leaves_fit``): the
    direction prediction reads the pairs' probes (``Composer.predicted_spans``), which put the
    two rows' ranges close together, so no leaf is built before the composition, and
    each pair's masses are computed once (they used to be computed for the prediction,
    evicted, and computed again; docs/method.md §3).  The bounds are those of a
    composer whose cache holds everything."""
    pairs = [SubsampledGaussian(round(1.0 + 0.01 * i, 6), 0.01) for i in range(40)]
    history = [(pair, 5) for pair in pairs]
    monkeypatch.setattr(composition, "_VALUE_CACHE_ENTRIES", 12)
    computed = _count_leaf_masses(monkeypatch)
    small = Composer(cache_size=1)
    assert not small.leaves_fit(history, 1e-6, ("grouped-ab",))
    joint, ab, ba = small.predicted_spans(history, 1e-6)
    assert joint < engine.PROBE_MARGIN * engine.DIRECTIONS_APART * max(ab, ba)
    first = engine.compose_history(small, history, 1e-6).epsilon_bounds(1e-6)
    assert sorted(computed, key=pairs.index) == pairs
    monkeypatch.setattr(composition, "_VALUE_CACHE_ENTRIES", 4096)
    assert Composer().leaves_fit(history, 1e-6, ("grouped-ab",))
    roomy = engine.compose_history(Composer(), history, 1e-6).epsilon_bounds(1e-6)
    assert (roomy.lower, roomy.upper) == (first.lower, first.upper)


def test_an_upper_bound_alone_builds_the_groups_leaves_from_its_masses(monkeypatch):
    """A refinement that composes the split pair first (``engine._upper_bound``) builds
    the A||B groups' leaves with it (``Composer.compose(..., leaves=...)``), so that
    composing the groups on those grids afterwards computes no leaf masses again."""
    pairs = [SubsampledGaussian(1.0 + 0.05 * i, 0.02) for i in range(6)]
    history = [(pair, 50) for pair in pairs]
    computed = _count_leaf_masses(monkeypatch)
    composer = Composer()
    upper = engine._upper_bound(composer, history, 1e-6)
    both = engine._two_sided_bounds(composer, history, 1e-6, False)
    assert sorted(computed, key=pairs.index) == pairs
    assert upper.upper == both.upper and upper.lower == 0.0 < both.lower
    fresh = engine._two_sided_bounds(Composer(), history, 1e-6, False)
    assert (fresh.lower, fresh.upper) == (both.lower, both.upper)
    with pytest.raises(ValueError, match="leaves must be among"):
        composer.compose(history, 1e-6, ("split",), leaves=("paper",))


def test_the_probes_predict_the_leaves_spans():
    """``Composer.predicted_spans`` (the pairs' probes) against ``direction_spans``
    (their leaves): within a few percent where the rows overlap, and both far apart
    where epsilon is in the thousands, so the probes' margin (``engine.PROBE_MARGIN``)
    never sends such a history to one joint composition."""
    c = Composer()
    for history, delta in (([(SubsampledGaussian(1.1, 0.01), 10_000)], 1e-5),
                           ([(SubsampledGaussian(0.6, 1e-4), 200),
                             (SubsampledGaussian(2.0, 0.3), 30)], 1e-10)):
        probe = c.predicted_spans(history, delta)
        leaf = c.direction_spans(history, delta)
        assert probe == pytest.approx(leaf, rel=0.05)
    apart = [(SubsampledGaussian(0.3, 1.0), 300_000)]
    joint, ab, ba = c.predicted_spans(apart, 1e-10)
    assert joint > engine.DIRECTIONS_APART * max(ab, ba)
    assert engine._directions_apart(c, apart, 1e-10)
