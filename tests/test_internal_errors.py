"""Whose fault: user errors are ValueErrors raised before any state changes; internal
failures surface as errors in direct calls and the CLI, and inside a training loop
(tracker, guard) are warned with their cause, kept on the object and answered with the
valid bound inf.  No internal bug may pass silently as a valid-looking inf."""
import math
import warnings

import pytest

import pb_accountant.accountant as accountant_module
from pb_accountant import PrivacyBucketsAccountant, SubsampledGaussian
from pb_accountant.integrations import BudgetExceededError, BudgetGuard, BudgetTracker
from pb_accountant.integrations.tracker import SinkErrorWarning

DELTA = 1e-5
BUGS = [KeyError, TypeError, AssertionError, ZeroDivisionError, IndexError]


def fresh(history):
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    return acc


def break_engine(monkeypatch, acc, exc_type):
    """Every engine entry point of ``acc`` raises ``exc_type`` (an internal bug)."""
    def bug(*args, **kwargs):
        raise exc_type("injected internal bug")

    monkeypatch.setattr(acc._composer, "compose", bug)
    monkeypatch.setattr(accountant_module, "adaptive_epsilon_bounds", bug)


# -- the accountant: direct library calls ------------------------------------------------

@pytest.mark.parametrize("exc_type", BUGS)
def test_an_internal_bug_propagates_from_every_query(monkeypatch, exc_type):
    acc = fresh([(1.0, 0.02, 30)])
    break_engine(monkeypatch, acc, exc_type)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # and no warning-plus-inf fallback either
        with pytest.raises(exc_type, match="injected internal bug"):
            acc.get_epsilon(DELTA)
        with pytest.raises(exc_type, match="injected internal bug"):
            acc.get_epsilon_bounds(DELTA)
        with pytest.raises(exc_type, match="injected internal bug"):
            acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02, num_steps=5)
    assert acc.history == [(1.0, 0.02, 30)]


@pytest.mark.parametrize("exc_type", [OverflowError, MemoryError, FloatingPointError])
def test_an_engine_limit_is_inf_with_the_cause_in_notes_and_a_warning(monkeypatch, exc_type):
    acc = fresh([(1.0, 0.02, 30)])
    break_engine(monkeypatch, acc, exc_type)
    with pytest.warns(RuntimeWarning, match=exc_type.__name__):
        b = acc.get_epsilon_bounds(DELTA)
    assert b.upper == math.inf and b.lower == 0.0
    assert any(exc_type.__name__ in n and "injected" in n for n in b.notes)


def test_user_errors_are_value_errors_before_any_state_change():
    acc = fresh([(1.0, 0.02, 3)])
    for kwargs, name in [({"noise_multiplier": -1.0, "sample_rate": 0.1}, "noise_multiplier"),
                         ({"noise_multiplier": 5e-7, "sample_rate": 0.1}, "noise_multiplier"),
                         ({"noise_multiplier": 1.0, "sample_rate": 1.5}, "sample_rate"),
                         ({"noise_multiplier": "1", "sample_rate": 0.1}, "noise_multiplier")]:
        with pytest.raises(ValueError, match=name) as info:
            acc.step(**kwargs)
        assert "got" in str(info.value)
        assert acc.history == [(1.0, 0.02, 3)]
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got 2\.0"):
        acc.get_epsilon(2.0)


# -- the one noise rule ------------------------------------------------------------------

def test_noise_rule_step_accepts_zero_but_a_gaussian_pair_needs_noise():
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=0.0, sample_rate=0.01)   # a step without noise (Opacus allows)
    assert acc.get_epsilon(0.02) < math.inf            # mass q = 0.01 < delta: finite
    assert acc.get_epsilon(0.005) == math.inf          # below delta = q nothing certifies
    with pytest.raises(ValueError, match=r"must be 0 or in \[1e-06, 1e\+12\]"):
        acc.step(noise_multiplier=1e-9, sample_rate=0.01)
    with pytest.raises(ValueError, match=r"noise_multiplier must be in \[1e-06, "):
        SubsampledGaussian(0.0, 0.01)
    with pytest.raises(ValueError, match=r"sample_rate must be in \(0, 1\]"):
        SubsampledGaussian(1.0, 0.0)


def test_validation_messages_name_parameter_range_and_value():
    from pb_accountant._validation import (check_array, check_choice, check_count, check_delta,
                                           check_noise_multiplier, check_real)
    with pytest.raises(ValueError, match=r"^tol must be in \(0, 1\], got 0$"):
        check_real("tol", 0, low=0.0, high=1.0, low_open=True)
    with pytest.raises(ValueError, match=r"^x must be a finite number in \[0, inf\), got nan$"):
        check_real("x", float("nan"), low=0.0)
    with pytest.raises(ValueError, match=r"^x must be a real number"):
        check_real("x", True)
    with pytest.raises(ValueError, match=r"^n must be an integer >= 1 and <= 5, got 6$"):
        check_count("n", 6, minimum=1, maximum=5)
    with pytest.raises(ValueError, match=r"^n must be an integer >= 0, got 2\.5$"):
        check_count("n", 2.5)
    with pytest.raises(ValueError, match="--delta must be in"):
        check_delta(0.0, "--delta")
    with pytest.raises(ValueError, match="must not contain NaN"):
        check_array("alphas", [1.0, float("nan")])
    with pytest.raises(ValueError, match="must be one of"):
        check_choice("mode", "warn", ("raise", "stop"))
    assert check_noise_multiplier(0) == 0.0
    import numpy as np
    assert check_count("n", np.int64(3)) == 3 and check_real("x", np.float32(0.5)) == 0.5


def test_integrations_share_the_rules():
    acc = PrivacyBucketsAccountant()
    for bad in (0.0, 1.0, float("nan"), "1e-5", True):
        with pytest.raises(ValueError, match="delta"):
            BudgetTracker(acc, bad)
        with pytest.raises(ValueError, match="delta"):
            BudgetGuard(acc, 1.0, bad)
    with pytest.raises(ValueError, match=r"every_n_steps must be an integer >= 1, got 0"):
        BudgetTracker(acc, DELTA, every_n_steps=0)
    with pytest.raises(ValueError, match=r"max_epsilon must be in \[0, inf\], got -1"):
        BudgetGuard(acc, -1, DELTA)
    guard = BudgetGuard(acc, math.inf, DELTA)          # inf: a guard that never stops
    assert guard.max_epsilon == math.inf
    with pytest.raises(ValueError, match="noise_multiplier"):
        guard.check(noise_multiplier=-1.0, sample_rate=0.1)
    assert guard.errors == [] and guard.refused_steps == 0


# -- inside a training loop: warned, kept, answered with inf -----------------------------

@pytest.mark.parametrize("exc_type", [KeyError, TypeError, AssertionError])
def test_tracker_in_a_loop_warns_keeps_the_cause_and_goes_on(monkeypatch, exc_type):
    acc = PrivacyBucketsAccountant()
    records = []
    tracker = BudgetTracker(acc, DELTA, every_n_steps=2, every_epoch=False,
                            sinks=[records.append])
    break_engine(monkeypatch, acc, exc_type)
    with pytest.warns(SinkErrorWarning, match=exc_type.__name__):
        for _ in range(4):
            acc.step(noise_multiplier=1.0, sample_rate=0.01)
            tracker.on_step()
    assert len(acc) == 4                                 # training went on
    assert [r.step for r in records] == [2, 4]
    assert all(r.eps_upper == math.inf and r.eps_lower == 0.0 for r in records)
    assert len(tracker.sink_errors) == 2
    assert all(isinstance(e.error, exc_type) and e.sink is None for e in tracker.sink_errors)
    # a direct call is not a training loop: the bug surfaces
    with pytest.raises(exc_type, match="injected internal bug"):
        tracker.record()


@pytest.mark.parametrize("mode", ["stop", "raise"])
def test_guard_in_a_loop_refuses_the_uncertified_step_loudly(monkeypatch, mode):
    acc = fresh([(1.0, 0.01, 10)])
    guard = BudgetGuard(acc, max_epsilon=10.0, delta=DELTA, mode=mode)
    assert guard.check(noise_multiplier=1.0, sample_rate=0.01) is True
    guard2 = BudgetGuard(acc, max_epsilon=10.0, delta=DELTA, mode=mode)
    break_engine(monkeypatch, acc, TypeError)
    with pytest.warns(RuntimeWarning, match="TypeError"):
        if mode == "stop":
            assert guard2.check(noise_multiplier=1.0, sample_rate=0.01) is False
            assert guard2.should_stop and "TypeError" in guard2.stop_message
        else:
            with pytest.raises(BudgetExceededError, match="TypeError") as info:
                guard2.check(noise_multiplier=1.0, sample_rate=0.01)
            assert info.value.epsilon == math.inf
    assert guard2.errors and all(isinstance(e, TypeError) for e in guard2.errors)
    assert guard2.refused.upper == math.inf
    assert any("injected internal bug" in n for n in guard2.refused.notes)
    assert acc.history == [(1.0, 0.01, 10)]
    # a direct query is not a training loop: the bug surfaces
    with pytest.raises(TypeError, match="injected internal bug"):
        guard2.epsilon_after(noise_multiplier=1.0, sample_rate=0.01)


# -- the CLI: exit 1, "internal error" ---------------------------------------------------

@pytest.mark.parametrize("exc_type", [KeyError, TypeError, AssertionError])
def test_cli_reports_an_internal_bug_as_internal_error(monkeypatch, capsys, exc_type):
    from pb_accountant.integrations.cli import main

    def bug(*args, **kwargs):
        raise exc_type("injected internal bug")

    monkeypatch.setattr(PrivacyBucketsAccountant, "get_epsilon_bounds", bug)
    status = main(["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3",
                   "--delta", "1e-5"])
    err = capsys.readouterr().err
    assert status == 1 and "internal error" in err and exc_type.__name__ in err


def test_cli_engine_bug_in_delta_is_an_internal_error_not_a_looser_answer(monkeypatch, capsys):
    import pb_accountant
    from pb_accountant.integrations.cli import main

    def bug(*args, **kwargs):
        raise KeyError("injected internal bug")

    monkeypatch.setattr(pb_accountant, "compose", bug)
    status = main(["delta", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3",
                   "--epsilon", "1"])
    captured = capsys.readouterr()
    assert status == 1 and "internal error" in captured.err and "KeyError" in captured.err
    assert captured.out == ""
