"""Bad input to the tracker and to a saved budget state is a ValueError naming the
parameter and its range, raised before anything changes (never TypeError or
OverflowError, never a silently accepted -5 or 0.7)."""
import math

import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetTracker
from pb_accountant.integrations._callback_core import BudgetMonitor
from pb_accountant.integrations._common import accountant_state, restore_accountant

DELTA = 1e-5
SIGMA, Q = 1.0, 0.125
BAD_COUNTS = [math.inf, -math.inf, math.nan, -5, 0.7, [1], "3", None, True]


def tracker(steps=0):
    acc = PrivacyBucketsAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    return BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[])


def counters(t):
    return t.step, t.epoch, t.steps_seen, len(t.records), list(t.accountant.history)


@pytest.mark.parametrize("method,name", [("on_step", "step"), ("on_epoch_end", "epoch")])
@pytest.mark.parametrize("bad", [b for b in BAD_COUNTS if b is not None])
def test_on_step_and_on_epoch_end_reject_what_is_not_a_count(method, name, bad):
    t = tracker(2)
    before = counters(t)
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= 0"):
        getattr(t, method)(bad)
    assert counters(t) == before


@pytest.mark.parametrize("bad", [b for b in BAD_COUNTS if b is not None])
def test_record_rejects_a_step_or_epoch_that_is_not_a_count(bad):
    t = tracker(2)
    before = counters(t)
    with pytest.raises(ValueError, match=r"step must be an integer >= 0"):
        t.record(step=bad)
    with pytest.raises(ValueError, match=r"epoch must be an integer >= 0"):
        t.record(epoch=bad)
    assert counters(t) == before


def test_whole_numbers_are_counts_as_everywhere_else():
    t = tracker(3)
    t.on_step(3.0)
    assert t.step == 3 and type(t.step) is int and t.records[-1].step == 3
    t.on_epoch_end(0.0)
    assert t.epoch == 1 and t.records[-1].epoch == 0
    rec = t.record(step=7.0, epoch=2.0)
    assert (rec.step, rec.epoch) == (7, 2)


BAD_HISTORIES = [5, None, "1,2", [1, 2], [[1.0, 0.1]], [[1.0, 0.1, 2, 4]],
                 [[1.0, 0.1, -1]], [[1.0, 0.1, 0.5]], [[1.0, 1.5, 2]], [[-1.0, 0.1, 2]],
                 [[math.nan, 0.1, 2]], [["a", 0.1, 2]]]


@pytest.mark.parametrize("history", BAD_HISTORIES)
def test_a_bad_saved_history_is_a_value_error_and_changes_nothing(history):
    state = tracker(3).state_dict()
    state["accountant"]["history"] = history
    state["step"] = 9
    fresh = tracker()
    with pytest.raises(ValueError, match=r"state\['history'\]"):
        fresh.load_state_dict(state)
    assert counters(fresh) == (0, 0, 0, 0, [])
    with pytest.raises(ValueError, match=r"state\['history'\]"):
        restore_accountant(PrivacyBucketsAccountant(), state["accountant"])


@pytest.mark.parametrize("history", BAD_HISTORIES[:5])
def test_the_callbacks_restore_refuses_a_bad_history_the_same_way(history):
    source = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], SIGMA, Q,
                           False)
    state = source.state_dict()
    state["accountant"]["history"] = history
    fresh = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], SIGMA, Q,
                          False)
    with pytest.raises(ValueError, match=r"state\['history'\]"):
        fresh.load_state_dict(state)
    assert fresh.accountant.history == [] and fresh.restored is None


@pytest.mark.parametrize("part", [5, "x", [1]])
def test_the_callbacks_restore_refuses_a_tracker_part_that_is_not_a_dict(part):
    source = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], SIGMA, Q,
                           False)
    fresh = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], SIGMA, Q,
                          False)
    with pytest.raises(ValueError, match=r"state\['tracker'\]"):
        fresh.load_state_dict(dict(source.state_dict(), tracker=part))
    assert fresh.restored is None


def test_a_state_without_mechanism_says_so():
    state = accountant_state(tracker(3).accountant)
    del state["mechanism"]
    fresh = tracker()
    with pytest.raises(ValueError, match="'mechanism'") as info:
        fresh.load_state_dict({"step": 3, "accountant": state})
    assert "None" not in str(info.value).split("got")[0]    # not "state_dict of None"
    assert counters(fresh) == (0, 0, 0, 0, [])


def test_a_good_state_still_loads():
    source = tracker(3)
    source.on_step()
    fresh = tracker()
    fresh.load_state_dict(source.state_dict())
    assert fresh.accountant.history == source.accountant.history
    assert (fresh.step, fresh.steps_seen) == (3, 1)


# ------------------------------------------------------------------------------------
# flags: True or False (numpy's too), never a truthy stand-in such as "False"
# ------------------------------------------------------------------------------------

BAD_FLAGS = ["False", "no", 0, 1, None, 1.0, [True]]


@pytest.mark.parametrize("bad", BAD_FLAGS)
def test_tracker_flags_are_true_or_false(bad):
    acc = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match=r"every_epoch must be True or False"):
        BudgetTracker(acc, DELTA, every_epoch=bad, sinks=[])
    t = tracker(2)
    before = counters(t)
    if bad is None:
        return                          # (attach's account=None: decided by the hook)
    # (checked before the optimizer is even looked at: nothing is attached)
    with pytest.raises(ValueError, match=r"account must be True or False"):
        t.attach(object(), account=bad)
    assert counters(t) == before and t._optimizer is None


@pytest.mark.parametrize("bad", BAD_FLAGS)
def test_guard_lookahead_is_true_or_false(bad):
    from pb_accountant.integrations import BudgetGuard
    acc = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match=r"lookahead must be True or False"):
        BudgetGuard(acc, 3.0, DELTA, lookahead=bad)
    guard = BudgetGuard(acc, 3.0, DELTA, lookahead=False)
    with pytest.raises(ValueError, match=r"lookahead must be True or False"):
        guard.lookahead = bad
    assert guard.lookahead is False


@pytest.mark.parametrize("bad", BAD_FLAGS)
def test_sink_and_monitor_flags_are_true_or_false(bad, tmp_path):
    from pb_accountant.integrations import CSVSink, JSONLinesSink, TensorBoardSink
    for sink, name in ((CSVSink, "fsync"), (JSONLinesSink, "append")):
        path = tmp_path / f"{sink.__name__}.log"
        with pytest.raises(ValueError, match=rf"{name} must be True or False"):
            sink(path, **{name: bad})
        assert not path.exists()                      # nothing opened, nothing truncated
    with pytest.raises(ValueError, match=r"log_schedule must be True or False"):
        TensorBoardSink(writer=object(), log_schedule=bad)
    acc = PrivacyBucketsAccountant()
    for name in ("log_on_epoch_end", "guard_optimizer"):
        args = dict(log_on_epoch_end=True, guard_optimizer=True)
        args[name] = bad
        with pytest.raises(ValueError, match=rf"{name} must be True or False"):
            BudgetMonitor(acc, DELTA, 3.0, None, sinks=[], noise_multiplier=None,
                          sample_rate=None, **args)


def test_numpy_bools_are_flags(tmp_path):
    import numpy as np
    from pb_accountant.integrations import BudgetGuard, CSVSink
    acc = PrivacyBucketsAccountant()
    assert BudgetTracker(acc, DELTA, every_epoch=np.False_, sinks=[]).every_epoch is False
    assert BudgetGuard(acc, 3.0, DELTA, lookahead=np.True_).lookahead is True
    sink = CSVSink(tmp_path / "a.csv", fsync=np.bool_(True))
    assert sink.fsync is True
    sink.close()


def test_steps_taken_reads_whole_counts_only():
    """Another accountant's history whose count is not a whole number is not a step
    count: 2.5 was read as 2 steps."""
    import numpy as np
    from pb_accountant.integrations._common import steps_taken

    class Other:
        history = None
    acc = Other()
    for history, steps in (([(1.0, 0.1, 3), (1.0, 0.1, np.int64(2))], 5),
                           ([(1.0, 0.1, 3.0)], 3), ([(1.0, 0.1, 2.5)], None),
                           ([(1.0, 0.1, -1)], None), ([(1.0, 0.1, True)], None),
                           ([(1.0, 0.1, "3")], None), ([(1.0, 0.1)], None), ([], 0)):
        acc.history = history
        assert steps_taken(acc) == steps, history


class _BrokenAccountant:
    """An Opacus-style accountant whose get_epsilon answers something that is not an
    epsilon (a PRV grid gone wrong, a third-party accountant's bug)."""

    def __init__(self, value):
        self.value = value
        self.history = []

    def step(self, *, noise_multiplier, sample_rate):
        self.history.append((noise_multiplier, sample_rate, 1))

    def get_epsilon(self, delta):
        return self.value


@pytest.mark.parametrize("value", [math.nan, -0.5])
def test_a_nan_or_negative_epsilon_is_never_recorded(tmp_path, value):
    """It was recorded (and written: "nan" in the JSON lines, which the report then
    refused); it is now the valid bound inf, with a note."""
    import json
    from pb_accountant.integrations import JSONLinesSink
    from pb_accountant.integrations._common import epsilon_after
    acc = _BrokenAccountant(value)
    t = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[JSONLinesSink(tmp_path / "b.jsonl")])
    acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    rec = t.on_step()
    assert (rec.eps_lower, rec.eps_upper) == (0.0, math.inf)
    line = json.loads((tmp_path / "b.jsonl").read_text())
    assert line["eps_upper"] == "inf"
    after = epsilon_after(acc, DELTA, SIGMA, Q, 3)
    assert after.upper == math.inf and "not an epsilon" in after.notes[-1]


@pytest.mark.parametrize("name,bad", [
    ("noise_multiplier", "1.0"), ("noise_multiplier", math.nan), ("noise_multiplier", True),
    ("noise_multiplier", -1.0), ("noise_multiplier", 1e-9), ("sample_rate", 2.0),
    ("sample_rate", -0.1), ("sample_rate", math.nan), ("sample_rate", "0.1"),
])
def test_a_guard_or_monitor_refuses_a_bad_default_schedule_at_construction(name, bad):
    """A guard's (or a callback's) default noise_multiplier / sample_rate is validated
    when given: it had been stored as is and raised only inside the training loop, in
    the callback's after_step, after the optimiser step had been taken and recorded."""
    from pb_accountant.integrations import BudgetGuard
    acc = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match=name):
        BudgetGuard(acc, 3.0, DELTA, **{name: bad})
    schedule = {"noise_multiplier": None, "sample_rate": None, name: bad}
    with pytest.raises(ValueError, match=name):
        BudgetMonitor(acc, DELTA, 3.0, None, True, [], schedule["noise_multiplier"],
                      schedule["sample_rate"], False)
    assert acc.history == []


def test_a_guard_and_monitor_take_numpy_and_int_defaults_as_floats():
    np = pytest.importorskip("numpy")
    from pb_accountant.integrations import BudgetGuard
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, 3.0, DELTA, noise_multiplier=np.float32(1.0), sample_rate=0)
    assert (guard.noise_multiplier, guard.sample_rate) == (1.0, 0.0)
    assert type(guard.noise_multiplier) is float and guard.check()
    monitor = BudgetMonitor(acc, DELTA, 3.0, None, True, [], 1, np.float64(Q), False)
    assert (monitor.noise_multiplier, monitor.sample_rate) == (1.0, Q)
