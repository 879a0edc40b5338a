"""A guard state is checked whole before anything is restored: a malformed field is a
ValueError naming it, the guard (and a callback restoring it) unchanged.

(``should_stop`` used to go through ``bool()``: "false" from a hand-edited or foreign
checkpoint stopped training, and a value whose truth is ambiguous raised a numpy error
after ``refused_steps`` had been overwritten.)
"""
import json

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetGuard

DELTA = 1e-5


def _guard():
    return BudgetGuard(PrivacyBucketsAccountant(), max_epsilon=3.0, delta=DELTA, mode="stop")


GOOD = {"should_stop": False, "refused_steps": 0, "stop_message": None,
        "max_epsilon": 3.0, "delta": DELTA}


@pytest.mark.parametrize("field, value", [
    ("should_stop", "false"), ("should_stop", 1), ("should_stop", None),
    ("should_stop", np.array([1, 0])), ("max_epsilon", -1.0), ("max_epsilon", "3"),
    ("delta", 2.0), ("stop_message", 5),
])
def test_a_malformed_field_is_refused_before_anything_changes(field, value):
    guard = _guard()
    with pytest.raises(ValueError, match=field):
        guard.load_state_dict(dict(GOOD, refused_steps=7, **{field: value}))
    assert guard.refused_steps == 0 and not guard.should_stop


def test_a_callback_with_a_malformed_guard_state_restores_nothing():
    from pb_accountant.integrations._callback_core import BudgetMonitor
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    monitor = BudgetMonitor(acc, DELTA, 5.0, None, False, [], 1.0, 0.01, False)
    state = json.loads(json.dumps(monitor.state_dict()))
    fresh = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], 1.0,
                          0.01, False)
    with pytest.raises(ValueError, match="should_stop"):
        fresh.load_state_dict(dict(state, guard=dict(GOOD, should_stop="no")))
    assert fresh.accountant.history == [] and fresh.restored is None


def test_round_trips_still_load():
    guard = _guard()
    state = json.loads(json.dumps(guard.state_dict()))
    other = _guard()
    other.load_state_dict(state)
    assert not other.should_stop and other.refused_steps == 0
    other.load_state_dict(dict(state, should_stop=np.bool_(True), stop_message="stopped"))
    assert other.should_stop and other.stop_message == "stopped"


def test_a_callback_state_whose_stopped_flag_is_not_a_bool_is_refused():
    from pb_accountant.integrations._callback_core import BudgetMonitor
    fresh = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], 1.0,
                          0.01, False)
    state = json.loads(json.dumps(fresh.state_dict()))
    with pytest.raises(ValueError, match="stopped"):
        fresh.load_state_dict(dict(state, stopped="false", guard=dict(GOOD)))
    fresh.load_state_dict(dict(state, guard=dict(GOOD)))
    assert not fresh.stopped


def test_a_bool_num_steps_is_refused_with_or_without_a_look_ahead():
    """check(num_steps=True) was let through by the look-ahead's fast path (True == 1)
    while the same call without a plan raised."""
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, max_epsilon=5.0, delta=DELTA)
    assert guard.check(noise_multiplier=1.0, sample_rate=0.01)
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    assert guard._plan is not None
    with pytest.raises(ValueError, match="num_steps"):
        guard.check(noise_multiplier=1.0, sample_rate=0.01, num_steps=True)
