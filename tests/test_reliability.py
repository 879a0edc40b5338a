"""Reliability of the engine and the accountant (issue 9): per-step schedules, large
epsilons, calibration through Opacus, and the accountant's smaller contract gaps."""
import copy
import json
import math
import pickle
import warnings

import numpy as np
import pytest
from scipy import special
from scipy.optimize import brentq

from pb_accountant import PrivacyBucketsAccountant, SubsampledGaussian, compose

DELTA = 1e-5


def gaussian_delta_stable(eps, mu):
    """delta(eps) of the Gaussian mechanism, in log space (no overflow at large eps)."""
    return (math.exp(special.log_ndtr(-eps / mu + mu / 2))
            - math.exp(eps + special.log_ndtr(-eps / mu - mu / 2)))


def gaussian_epsilon_stable(delta, mu):
    return brentq(lambda e: gaussian_delta_stable(e, mu) - delta, 0.0, 1e5, xtol=1e-12)


def fresh(history, **options):
    acc = PrivacyBucketsAccountant(**options)
    acc.history = history
    return acc


# ------------------------------------------------------------------------------------
# per-step schedules: every step its own noise multiplier
# ------------------------------------------------------------------------------------

def _pld_epsilon(history, delta, pessimistic):
    pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    plds = [pld_lib.from_gaussian_mechanism(
        s, sampling_prob=q, value_discretization_interval=1e-3,
        pessimistic_estimate=pessimistic, use_connect_dots=pessimistic)
        for s, q, _ in history]
    while len(plds) > 1:
        plds = [plds[i].compose(plds[i + 1]) if i + 1 < len(plds) else plds[i]
                for i in range(0, len(plds), 2)]
    return plds[0].get_epsilon_for_delta(delta)


def test_per_step_schedule_is_finite_tight_and_brackets_pld():
    rng = np.random.default_rng(7)
    history = [(float(s), 0.01, 1) for s in rng.uniform(0.8, 1.5, size=200)]
    b = fresh(history).get_epsilon_bounds(DELTA)
    assert 0.0 < b.lower <= b.upper < math.inf
    assert b.width < 2e-3
    pessimistic = _pld_epsilon(history, DELTA, True)
    optimistic = _pld_epsilon(history, DELTA, False)
    assert b.lower <= pessimistic
    assert b.upper >= optimistic
    assert b.upper <= pessimistic * 1.002        # PLD at discretization 1e-3


def test_decreasing_noise_ramp_stays_finite_and_no_mass_is_lost():
    """The audit's ramp (shortened): the lossy trim used to push it to inf."""
    n = 300
    history = [(1.5 - 0.7 * i / (n - 1), 0.01, 1) for i in range(n)]
    acc = fresh(history)
    b = acc.get_epsilon_bounds(DELTA)
    assert 0.0 < b.lower <= b.upper < math.inf
    assert b.width < 2e-3
    # the composition keeps (almost) no mass in the infinity atoms
    buckets = acc._composer.compose(acc._pairs(history), DELTA, ("split",))
    assert buckets.split.a_inf < 1e-3 * DELTA and buckets.split.b_minf < 1e-3 * DELTA


def test_cropping_after_squaring_is_lossless():
    from pb_accountant.composition import (BucketOptions, BucketSet, leaf_grid,
                                           per_step_infinity_budget)
    for sigma in (0.8, 1.2, 1.5):
        pair = SubsampledGaussian(sigma, 0.01)
        grid = leaf_grid(pair, per_step_infinity_budget(1e-5), BucketOptions())
        leaf = BucketSet.leaf(pair, grid, frozenset({"split", "grouped"}))
        for k in range(1, 8):
            target = grid.log_factor * 2 ** k
            cropped = leaf.coarsened_to(target, trim=True)
            full = leaf.coarsened_to(target, trim=False)
            assert cropped.grid.number_of_buckets <= full.grid.number_of_buckets
            assert cropped.split.a_inf == full.split.a_inf
            assert cropped.split.b_minf == full.split.b_minf
            assert np.array_equal(np.sort(cropped.split.rows[0][cropped.split.rows[0] > 0]),
                                  np.sort(full.split.rows[0][full.split.rows[0] > 0]))
            assert cropped.split.rows.sum() == pytest.approx(full.split.rows.sum(), rel=1e-15)


def test_schedule_order_of_composition_is_a_function_of_the_history():
    history = [(1.0 + 0.01 * i, 0.02, 1 + i % 3) for i in range(13)]
    incremental = PrivacyBucketsAccountant()
    for sigma, q, count in history:
        for _ in range(count):
            incremental.step(noise_multiplier=sigma, sample_rate=q)
        incremental.get_epsilon(DELTA)
    assert incremental.history == history
    assert tuple(incremental.get_epsilon_bounds(DELTA)) == tuple(
        fresh(history).get_epsilon_bounds(DELTA))


# ------------------------------------------------------------------------------------
# large epsilons: no ceiling, no cliff
# ------------------------------------------------------------------------------------

def test_gaussian_thousand_steps_q1_is_finite_and_brackets_closed_form():
    b = fresh([(1.0, 1.0, 1000)]).get_epsilon_bounds(DELTA)
    exact = gaussian_epsilon_stable(DELTA, math.sqrt(1000))
    assert 600 < exact < 700
    assert b.lower <= exact <= b.upper < math.inf
    assert b.width < 1e-3


def test_engine_answers_beyond_the_old_range_and_brackets_pld():
    pb = compose([(SubsampledGaussian(0.5, 0.2), 4000)], delta=1e-6)
    b = pb.epsilon_bounds(1e-6)                    # used to raise ValueError (|loss| > 700)
    assert 0.0 < b.lower <= b.upper < math.inf
    assert b.width < 2e-3
    pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    eps = {}
    for pessimistic in (True, False):
        pld = pld_lib.from_gaussian_mechanism(
            0.5, sampling_prob=0.2, value_discretization_interval=1e-2,
            pessimistic_estimate=pessimistic, use_connect_dots=pessimistic)
        eps[pessimistic] = pld.self_compose(4000).get_epsilon_for_delta(1e-6)
    assert b.lower <= eps[True]
    assert b.upper >= eps[False]
    db = pb.delta_bounds(np.array([0.0, 100.0, b.upper, 2000.0]))
    assert np.all(np.isfinite(db.upper)) and np.all(db.lower <= db.upper)
    assert db.upper[2] <= 1e-6


def test_epsilon_is_continuous_in_sigma_at_large_epsilon():
    """No cliff: the certified epsilon grows smoothly as sigma shrinks."""
    sigmas = [0.2, 0.15, 0.1, 0.07, 0.05]
    ups = [fresh([(s, 0.5, 100)]).get_epsilon(DELTA) for s in sigmas]
    assert all(math.isfinite(u) for u in ups)
    assert all(a < b for a, b in zip(ups, ups[1:]))
    assert ups[-1] > 1000


# ------------------------------------------------------------------------------------
# calibration through Opacus terminates and certifies the target
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sample_rate,steps", [(0.5, 10), (0.01, 50)])
@pytest.mark.parametrize("target", [0.01, 1, 10, 100, 1000, 5000])
def test_opacus_get_noise_multiplier_returns_a_certified_sigma(sample_rate, steps, target):
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401  (registers "pb" and wraps the search)
    from opacus.accountants import utils

    sigma = utils.get_noise_multiplier(target_epsilon=target, target_delta=DELTA,
                                       sample_rate=sample_rate, steps=steps,
                                       accountant="pb")
    up = fresh([(sigma, sample_rate, steps)]).get_epsilon(DELTA)
    assert up <= target
    assert up >= min(target - 0.01, 0.9 * target) or target <= 0.01


def test_make_private_with_epsilon_uses_the_bounded_search():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus import PrivacyEngine
    from opacus import privacy_engine as pe_module
    from opacus.accountants import utils

    assert pe_module.get_noise_multiplier is utils.get_noise_multiplier
    assert getattr(utils.get_noise_multiplier, "_pb_wrapped", False)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(20, 3), torch.randn(20, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=10)
    engine = PrivacyEngine(accountant="pb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, opt, _ = engine.make_private_with_epsilon(
            module=model, optimizer=optimizer, data_loader=loader, target_epsilon=1000.0,
            target_delta=DELTA, epochs=2, max_grad_norm=1.0)
    sigma = opt.noise_multiplier
    up = fresh([(sigma, 0.5, 4)]).get_epsilon(DELTA)
    assert up <= 1000.0


def test_calibration_that_cannot_be_certified_says_why():
    from pb_accountant._opacus_hook import calibrated_noise_multiplier
    with pytest.raises(ValueError, match="cannot be certified"):
        calibrated_noise_multiplier(target_epsilon=0.01, target_delta=1e-300,
                                    sample_rate=0.5, steps=10, max_sigma=100.0)


# ------------------------------------------------------------------------------------
# the accountant's smaller gaps (item 5)
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["1", True, None, float("nan"), -1.0, [0.5, "x"], [True]])
def test_get_delta_validates_epsilon_like_get_epsilon(bad):
    acc = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match="epsilon"):
        acc.get_delta(bad)
    with pytest.raises(ValueError, match="epsilon"):
        acc.get_delta_bounds(bad)
    assert acc.history == [(1.0, 0.02, 5)]


@pytest.mark.parametrize("bad", ["x", 5, [("history", [])], object()])
def test_load_state_dict_rejects_non_mappings_with_value_error(bad):
    acc = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match="state_dict"):
        acc.load_state_dict(bad)
    assert acc.history == [(1.0, 0.02, 5)]


@pytest.mark.parametrize("history,pattern", [
    ([(1.0, 0.01, 2.5)], r"history\[0\] num_steps"),
    ([(1.0, 0.01, 5), (1.0, 2.0, 1)], r"history\[1\] sample_rate"),
    ("abc", "history"),
])
def test_history_is_validated_when_assigned(history, pattern):
    acc = fresh([(1.0, 0.01, 3)])
    with pytest.raises(ValueError, match=pattern):
        acc.history = history
    assert acc.history == [(1.0, 0.01, 3)]
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    assert acc.history == [(1.0, 0.01, 4)] and len(acc) == 4


def test_history_accepts_opacus_forms_and_stays_a_plain_list():
    acc = PrivacyBucketsAccountant()
    acc.history = [[1.0, 0.01, 3], (2, 0.5, 1)]                # JSON lists, ints
    assert type(acc.history) is list
    assert acc.history == [(1.0, 0.01, 3), (2.0, 0.5, 1)]
    acc.step(noise_multiplier=2.0, sample_rate=0.5)
    assert acc.history == [(1.0, 0.01, 3), (2.0, 0.5, 2)] and len(acc) == 5


def test_step_refuses_to_extend_an_entry_corrupted_in_place():
    acc = fresh([(1.0, 0.01, 3)])
    acc.history[-1] = (1.0, 0.01, 2.5)                       # bypasses the setter
    with pytest.raises(ValueError, match="num_steps"):
        acc.step(noise_multiplier=1.0, sample_rate=0.01)


@pytest.mark.parametrize("bad,sigma,q", [((-1.0, 0.5, 3), -1.0, 0.5),
                                         ((float("inf"), 0.5, 3), float("inf"), 0.5),
                                         ((1.0, 1.5, 3), 1.0, 1.5)])
def test_step_repeating_an_invalid_entry_replaced_in_place_is_refused(bad, sigma, q):
    """step()'s fast path extends only the entry it wrote itself: a step repeating an
    invalid entry put in place of it was counted (it raised only at the next query)."""
    acc = fresh([(1.0, 0.01, 3)])
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    acc.history[-1] = bad
    with pytest.raises(ValueError):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert acc.history[-1] == bad


@pytest.mark.parametrize("bad,field", [
    ((1.0, 0.01, 2.5), "num_steps"), ((1.0, 0.01, None), "num_steps"),
    (("x", 0.01, 3), "noise_multiplier"), ((1.0, float("nan"), 3), "sample_rate"),
    ((1.0, 0.01), "must be"), (None, "must be"),
])
def test_an_entry_appended_in_place_is_validated_before_any_use(bad, field):
    """The live list bypasses the setter: a malformed entry is named by every use of the
    history (a count, a checkpoint, a copy, a bound), never silently counted or saved."""
    acc = fresh([(1.0, 0.01, 3)])
    before = acc.get_epsilon_bounds(DELTA)
    acc.history.append(bad)
    uses = [len, lambda a: a.state_dict(), pickle.dumps, copy.deepcopy,
            lambda a: a.get_epsilon(DELTA), lambda a: a.get_epsilon_bounds(DELTA),
            lambda a: a.get_delta_bounds(1.0),
            lambda a: a.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.01)]
    for use in uses:
        with pytest.raises(ValueError, match=rf"history\[1\].*{field}"):
            use(acc)
    acc.history.pop()                                     # repaired: the same bits again
    assert tuple(acc.get_epsilon_bounds(DELTA)) == tuple(before) and len(acc) == 3


def test_an_earlier_entry_replaced_in_place_is_validated_after_queries():
    """Entries validated by an earlier query are taken as they were only while they are
    the same immutable tuples: one replaced (or a list changed in place) is checked."""
    acc = fresh([(1.0, 0.01, 3), (1.5, 0.02, 4), (2.0, 0.01, 5)])
    acc.get_epsilon_bounds(DELTA)
    acc.history[0] = (1.0, 0.01, -1)
    with pytest.raises(ValueError, match=r"history\[0\] num_steps"):
        len(acc)
    entry = [1.0, 0.01, 3]
    acc.history[0] = entry
    assert len(acc) == 12
    entry[2] = 2.5
    with pytest.raises(ValueError, match=r"history\[0\] num_steps"):
        acc.get_epsilon_bounds(DELTA)


@pytest.mark.parametrize("entry", [{1.0, 0.5, 3}, {"sigma": 1.0, "q": 0.5, "steps": 3},
                                   "abc", iter((1.0, 0.5, 3))])
def test_an_entry_without_order_is_refused(entry):
    """A set or dict of three values unpacks in no defined order (a set of {1.0, 0.5, 3}
    read as sigma 0.5, q 1.0): it is refused, not read."""
    acc = fresh([])
    with pytest.raises(ValueError, match=r"history\[0\] must be \(noise_multiplier"):
        acc.history = [entry]
    assert acc.history == []


def test_numpy_entries_appended_in_place_are_saved_as_plain_numbers():
    acc = fresh([(1.0, 0.01, 3)])
    acc.history.append((np.float64(2.0), np.float32(0.5), np.int64(2)))
    state = json.loads(json.dumps(acc.state_dict()))     # JSON-serialisable
    assert state["history"] == [[1.0, 0.01, 3], [2.0, 0.5, 2]] and len(acc) == 5
    same = fresh([(1.0, 0.01, 3), (2.0, 0.5, 2)])
    assert tuple(acc.get_epsilon_bounds(DELTA)) == tuple(same.get_epsilon_bounds(DELTA))


def test_pickle_and_deepcopy_carry_history_and_options_only():
    acc = fresh([(1.0, 0.02, 300)], resolution=0.02)
    before = acc.get_epsilon_bounds(DELTA)
    blob = pickle.dumps(acc)
    assert len(blob) < 2000
    for clone in (pickle.loads(blob), copy.deepcopy(acc)):
        assert clone.history == acc.history
        assert clone.options == acc.options
        assert tuple(clone.get_epsilon_bounds(DELTA)) == tuple(before)
        clone.step(noise_multiplier=1.0, sample_rate=0.02)      # a working lock
    assert acc.history == [(1.0, 0.02, 300)]


def test_state_dict_carries_options_and_a_mismatch_is_refused():
    acc = fresh([(1.0, 0.02, 30)], resolution=0.02)
    state = json.loads(json.dumps(acc.state_dict()))
    assert state["options"]["resolution"] == 0.02
    same = PrivacyBucketsAccountant(resolution=0.02)
    same.load_state_dict(state)
    assert tuple(same.get_epsilon_bounds(DELTA)) == tuple(acc.get_epsilon_bounds(DELTA))
    other = fresh([(1.0, 0.02, 1)])
    with pytest.raises(ValueError, match="resolution"):
        other.load_state_dict(state)
    assert other.history == [(1.0, 0.02, 1)]
    with pytest.raises(ValueError, match="options"):
        other.load_state_dict(dict(state, options={"bogus": 1}))
    # Opacus-style states without options still load
    other.load_state_dict({"history": [[1.0, 0.02, 7]], "mechanism": "pb"})
    assert other.history == [(1.0, 0.02, 7)]


def test_engine_limits_are_reported_loudly_and_bugs_propagate(monkeypatch):
    acc = fresh([(1.0, 0.02, 30)])

    def out_of_memory(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(acc._composer, "compose", out_of_memory)
    with pytest.warns(RuntimeWarning, match="engine limit"):
        b = acc.get_epsilon_bounds(DELTA)
    assert b.upper == math.inf and b.lower == 0.0
    assert any("MemoryError" in n for n in b.notes)

    def bug(*args, **kwargs):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(acc._composer, "compose", bug)
    with pytest.raises(RuntimeError, match="internal bug"):
        acc.get_epsilon(DELTA)
    # user errors are still ValueErrors, raised before the engine runs
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(2.0)


def test_calibration_below_the_certified_floor_raises_instead_of_searching():
    """The audit's case at delta = 1e-60: no sigma certifies it (round-off floor).
    (The audit used 1e-30, which became certifiable in issue 12 once every level of the
    FFT's split was checked: the floor here fell from 7e-22 to about 8e-24.)"""
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus.accountants import utils

    with pytest.raises(ValueError, match="cannot be certified"):
        utils.get_noise_multiplier(target_epsilon=1000, target_delta=1e-60, sample_rate=0.5,
                                   steps=1000, accountant="pb")


def test_constructor_curve_and_step_counts_are_validated():
    """Unknown options, curve sizes and absurd step counts are ValueErrors naming them."""
    with pytest.raises(ValueError, match="bogus"):
        PrivacyBucketsAccountant(bogus=1)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    for num in (-1, 0, 1, 2.5, True, 10 ** 7):
        with pytest.raises(ValueError, match="num"):
            acc.get_privacy_curve(num=num)
    with pytest.raises(ValueError, match="num_steps"):
        acc.history = [(1.0, 0.01, 10 ** 16)]
    with pytest.raises(ValueError, match="num_steps"):
        acc.epsilon_after(1e-5, noise_multiplier=1.0, sample_rate=0.01, num_steps=10 ** 16)
    assert acc.history == [(1.0, 0.01, 100)]


@pytest.mark.parametrize("options,pattern", [
    ({"factor": 1e300}, r"factor must be > 1 and <= e\^\(700/2\)"),   # no grid at all
    ({"factor": 1.5, "number_of_buckets": 10 ** 6}, r"e\^\(700/1000000\)"),
    ({"free_infty_budget": 0.0}, r"free_infty_budget must be in \(0, 1\)"),
    ({"free_infty_budget": 1.0}, r"free_infty_budget must be in \(0, 1\)"),
    ({"number_of_buckets": 10 ** 9}, r"number_of_buckets must be .* <= 2097152"),  # 15 GB
    ({"max_buckets": 10 ** 9}, r"max_buckets must be .* <= 2097152"),
])
def test_options_without_a_grid_are_refused_at_construction(options, pattern):
    """A factor whose fewest buckets already leave the loss range (refused only at the
    first query before), the infinity budgets 0 (no mass may leave a grid: minutes at
    full range) and 1 (all of it may: an internal error labelled an engine limit), and
    bucket counts whose rows would not fit in memory."""
    with pytest.raises(ValueError, match=pattern):
        PrivacyBucketsAccountant(**options)


# ------------------------------------------- an independent review's findings (s48)
def test_opacus_get_noise_multiplier_checks_epochs_and_sample_rate_first():
    """epochs / sample_rate was formed before any check: 0, inf, NaN and strings raised
    ZeroDivisionError, OverflowError, a ValueError naming nothing or a TypeError."""
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus.accountants import utils

    for kwargs, name in [(dict(sample_rate=0.0, epochs=1), "sample_rate"),
                         (dict(sample_rate="0.01", epochs=1), "sample_rate"),
                         (dict(sample_rate=-0.01, epochs=1), "sample_rate"),
                         (dict(sample_rate=0.01, epochs=float("inf")), "epochs"),
                         (dict(sample_rate=0.01, epochs=float("nan")), "epochs"),
                         (dict(sample_rate=0.01, epochs=-1), "epochs"),
                         (dict(sample_rate=1e-10, epochs=1e300), "epochs / sample_rate"),
                         (dict(sample_rate=0.5, epochs=0.1), "epochs / sample_rate")]:
        with pytest.raises(ValueError, match=name):
            utils.get_noise_multiplier(target_epsilon=1.0, target_delta=1e-5,
                                       accountant="pb", **kwargs)


def test_calibration_names_the_steps_it_was_given():
    """steps beyond the accountant's limit: the message names ``steps`` and its range
    (it named the internal ``num_steps``)."""
    from pb_accountant.calibration import find_noise_multiplier
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 1 and <= "):
        find_noise_multiplier(1.0, 1e-5, 0.01, steps=10 ** 16)


def test_whole_float_and_numpy_options_are_stored_as_python_numbers():
    """number_of_buckets=1000.0 passed the constructor and failed at every query; numpy
    scalars kept the state_dict out of json.dumps."""
    for n in (1000.0, np.int64(1000)):
        acc = PrivacyBucketsAccountant(number_of_buckets=n, max_buckets=np.int64(4094),
                                       resolution=np.float32(0.015))
        acc.history = [(1.0, 0.01, 10)]
        assert type(acc.options.number_of_buckets) is int and acc.options.number_of_buckets == 1000
        assert math.isfinite(acc.get_epsilon(1e-5))
        state = json.loads(json.dumps(acc.state_dict()["options"]))
        assert state["number_of_buckets"] == 1000 and type(state["max_buckets"]) is int
    with pytest.raises(ValueError, match="number_of_buckets"):
        PrivacyBucketsAccountant(number_of_buckets=1000.5)


def test_trivial_delta_bounds_say_why():
    """A delta query whose upper bound is the trivial 1 carries the reason in ``notes``
    (10^15 steps at sigma 10^9: the certified round-off is beyond 1), as epsilon
    queries did; an informative one carries none."""
    pb = compose([(SubsampledGaussian(1e9, 1.0), 10 ** 15)], delta=1e-10)
    db = pb.delta_bounds(np.array([0.0, 1.0]))
    assert np.all(db.upper == 1.0)
    assert any("trivial delta 1 at 2 of the 2 epsilons" in n for n in db.notes), db.notes
    fine = compose([(SubsampledGaussian(1.0, 0.01), 100)], delta=1e-10).delta_bounds(1.0)
    assert fine.upper < 1e-3 and fine.notes == ()
