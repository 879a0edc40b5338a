"""The Opacus accountant contract of ``PrivacyBucketsAccountant`` (Opacus 1.6 ``IAccountant``).

Pure Python: no training here (tests/test_opacus_training.py trains).  Covers the
constructor, ``step`` merging, ``history`` assignment (also as JSON lists), the float
returned by ``get_epsilon``, ``len``, ``state_dict``/``load_state_dict`` with Opacus's
own error messages, input validation that leaves the history untouched, registration
with Opacus, determinism of cached vs fresh answers, heterogeneous schedules, the
degenerate steps sigma = 0 and q = 0, ``get_noise_multiplier`` and agreement with
Opacus's PRV and RDP accountants on published settings.
"""
import json
import math
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _optional import HealthCheck, given, settings, st

from pb_accountant import PrivacyBucketsAccountant

from conftest import gaussian_epsilon

opacus_accountants = pytest.importorskip("opacus.accountants")
from opacus.accountants import (IAccountant, PRVAccountant, RDPAccountant,  # noqa: E402
                                create_accountant)
from opacus.accountants.utils import get_noise_multiplier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DELTA = 1e-5
HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a small heterogeneous schedule: changing sigma, then changing q (70 steps in all)
SCHEDULE = [(1.0, 0.02)] * 30 + [(1.5, 0.02)] * 20 + [(1.5, 0.05)] * 20
SCHEDULE_HISTORY = [(1.0, 0.02, 30), (1.5, 0.02, 20), (1.5, 0.05, 20)]


def fresh(history) -> PrivacyBucketsAccountant:
    acc = PrivacyBucketsAccountant()
    acc.history = [tuple(h) for h in history]
    return acc


def lo_up(acc, delta=DELTA):
    b = acc.get_epsilon_bounds(delta)
    return (b.lower, b.upper)


def run_length(steps):
    out = []
    for sigma, q in steps:
        if out and out[-1][0] == sigma and out[-1][1] == q:
            out[-1] = (sigma, q, out[-1][2] + 1)
        else:
            out.append((sigma, q, 1))
    return out


def prv_bounds(history, delta=DELTA, eps_error=0.01):
    """Opacus PRV's (lower, estimate, upper) for a history."""
    prv = PRVAccountant()
    prv.history = [tuple(h) for h in history]
    dprv = prv._get_dprv(eps_error=eps_error, delta_error=delta / 1000)
    return tuple(float(x) for x in dprv.compute_epsilon(delta, delta / 1000, eps_error))


def rdp_eps(history, delta=DELTA):
    rdp = RDPAccountant()
    rdp.history = [tuple(h) for h in history]
    return float(rdp.get_epsilon(delta))


# ------------------------------------------------------------------------------------
# construction, step, history, len, mechanism
# ------------------------------------------------------------------------------------

def test_zero_argument_constructor_and_mechanism():
    acc = PrivacyBucketsAccountant()
    assert acc.history == []
    assert len(acc) == 0
    assert acc.mechanism() == "pb"
    assert PrivacyBucketsAccountant.mechanism() == "pb"


def test_step_is_keyword_only():
    acc = PrivacyBucketsAccountant()
    with pytest.raises(TypeError):
        acc.step(1.0, 0.01)
    with pytest.raises(TypeError):
        acc.step(1.0, sample_rate=0.01)
    assert acc.history == []


def test_step_merges_identical_consecutive_steps():
    acc = PrivacyBucketsAccountant()
    for sigma, q in [(1.0, 0.01), (1.0, 0.01), (2.0, 0.01), (1.0, 0.01),
                     (1.0, 0.02), (1.0, 0.02), (1.0, 0.02)]:
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert acc.history == [(1.0, 0.01, 2), (2.0, 0.01, 1), (1.0, 0.01, 1), (1.0, 0.02, 3)]
    assert len(acc) == 7
    for sigma, q, n in acc.history:
        assert type(sigma) is float and type(q) is float and type(n) is int


@HYP
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                          st.sampled_from([0.0, 0.01, 0.5, 1.0])), max_size=40))
def test_step_history_is_run_length_encoding(steps):
    acc = PrivacyBucketsAccountant()
    for i, (sigma, q) in enumerate(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
        assert len(acc) == i + 1 > 0
    assert acc.history == run_length(steps)
    assert len(acc) == len(steps) == sum(n for _, _, n in acc.history)


def test_step_accepts_numpy_scalars_and_stores_plain_floats():
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=np.float32(1.25), sample_rate=np.float64(0.02))
    acc.step(noise_multiplier=np.float32(1.25), sample_rate=np.float64(0.02))
    assert acc.history == [(1.25, 0.02, 2)]
    assert type(acc.history[0][0]) is float
    json.dumps(acc.state_dict())  # a numpy float32 would not serialise


def test_len_counts_steps_not_entries():
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.0)
    assert len(acc) == 1 > 0       # even a step that costs nothing is a step
    acc.history = [(1.0, 0.01, 100), (2.0, 0.01, 23)]
    assert len(acc) == 123         # Opacus's own accountants would say 2 (opacus #834)


def test_step_refuses_to_pass_the_largest_count_and_keeps_history():
    """A step beyond MAX_STEPS in one entry could be neither queried nor loaded back
    from a checkpoint: it is refused before the history changes (both step paths)."""
    from pb_accountant._validation import MAX_STEPS
    for sigma, q in ((1.0, 0.01), (np.float64(1.0), np.float32(0.5))):
        acc = PrivacyBucketsAccountant()
        acc.history = [(float(sigma), float(q), MAX_STEPS)]
        before = acc.state_dict()
        with pytest.raises(ValueError, match="num_steps"):
            acc.step(noise_multiplier=sigma, sample_rate=q)
        assert acc.state_dict() == before
        PrivacyBucketsAccountant().load_state_dict(acc.state_dict())
        acc.step(noise_multiplier=2.0, sample_rate=q)      # another entry is still fine
        assert acc.history[-1] == (2.0, float(q), 1)


def test_history_is_directly_assignable_and_never_stale():
    """get_noise_multiplier assigns history again and again on one accountant."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.005, 100)]
    first = lo_up(acc)
    assert first == lo_up(fresh([(1.1, 0.005, 100)]))
    acc.history = [(1.1, 0.005, 200)]
    assert lo_up(acc) == lo_up(fresh([(1.1, 0.005, 200)]))
    assert lo_up(acc)[0] > first[1]          # twice the steps cost strictly more
    assert acc.get_epsilon(DELTA) == fresh([(1.1, 0.005, 200)]).get_epsilon(DELTA)
    acc.history = [(1.1, 0.005, 100)]
    assert lo_up(acc) == first


def test_history_as_lists_after_json_round_trip():
    acc = PrivacyBucketsAccountant()
    for _ in range(5):
        acc.step(noise_multiplier=1.3, sample_rate=0.05)
    state = json.loads(json.dumps(acc.state_dict()))
    assert state["history"] == [[1.3, 0.05, 5]]
    # assigning lists directly works (Opacus's load_state_dict assigns as is)
    other = PrivacyBucketsAccountant()
    other.history = state["history"]
    assert len(other) == 5
    assert lo_up(other) == lo_up(acc)
    assert other.get_epsilon(DELTA) == acc.get_epsilon(DELTA)
    # a further identical step merges into the list entry
    other.step(noise_multiplier=1.3, sample_rate=0.05)
    assert [tuple(h) for h in other.history] == [(1.3, 0.05, 6)]
    assert len(other) == 6


# ------------------------------------------------------------------------------------
# get_epsilon and friends
# ------------------------------------------------------------------------------------

def test_get_epsilon_returns_a_float_equal_to_the_certified_upper_bound():
    acc = fresh([(1.0, 0.02, 50)])
    eps = acc.get_epsilon(DELTA)
    assert isinstance(eps, float) and not isinstance(eps, np.ndarray)
    assert math.isfinite(eps) and eps > 0
    bounds = acc.get_epsilon_bounds(DELTA)
    assert isinstance(bounds.lower, float) and isinstance(bounds.upper, float)
    assert 0.0 < bounds.lower <= bounds.upper == eps
    assert isinstance(bounds.notes, tuple)
    lo, up = bounds   # unpacks
    assert (lo, up) == (bounds.lower, bounds.upper)


def test_get_epsilon_ignores_unknown_keyword_arguments():
    acc = fresh([(1.0, 0.02, 50)])
    eps = acc.get_epsilon(DELTA)
    assert acc.get_epsilon(DELTA, eps_error=0.5, delta_error=1e-9) == eps
    assert acc.get_epsilon(delta=DELTA, alphas=[1.5, 2.0], foo="bar") == eps


def test_empty_history_gives_zero_not_an_exception():
    acc = PrivacyBucketsAccountant()
    assert acc.get_epsilon(DELTA) == 0.0
    assert isinstance(acc.get_epsilon(DELTA), float)
    assert lo_up(acc) == (0.0, 0.0)
    assert acc.get_delta(0.5) == 0.0
    # steps that never touch the data are as good as no steps
    acc.history = [(1.0, 0.0, 10), (0.0, 0.0, 3)]
    assert acc.get_epsilon(DELTA) == 0.0
    assert lo_up(acc) == (0.0, 0.0)


def test_delta_queries_are_consistent_with_epsilon_bounds():
    acc = fresh([(1.0, 0.02, 50)])
    b = acc.get_epsilon_bounds(DELTA)
    # get_delta* compose on their own (delta-agnostic) grid, so they need not reproduce
    # the exact crossing, but they must never contradict the epsilon certificates:
    # delta(eps_up) <= DELTA is certified, so no certified lower bound may exceed it ...
    at_up = acc.get_delta_bounds(b.upper)
    assert at_up.lower <= DELTA
    # ... and delta(eps_lo) > DELTA is certified, so no certified upper bound is below it
    at_lo = acc.get_delta_bounds(b.lower)
    assert at_lo.upper >= DELTA
    assert at_lo.lower <= at_lo.upper and at_up.lower <= at_up.upper
    assert acc.get_delta(b.upper) == at_up.upper
    # and they are tight to a few percent
    assert at_up.upper <= 1.05 * DELTA and at_lo.lower >= 0.95 * DELTA
    d = acc.get_delta_bounds(np.array([0.1, 0.5, 1.0, 2.0]))
    assert np.all(d.lower <= d.upper)
    assert np.all(np.diff(d.upper) <= 0)
    curve = acc.get_privacy_curve()
    assert np.all(curve.delta_lower <= curve.delta_upper)
    assert np.all(np.diff(curve.delta_upper) <= 0)


def test_epsilon_after_predicts_without_changing_state():
    acc = fresh([(1.0, 0.02, 40)])
    before = lo_up(acc)
    planned = acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02, num_steps=40)
    assert acc.history == [(1.0, 0.02, 40)]
    assert planned.upper == fresh([(1.0, 0.02, 80)]).get_epsilon(DELTA)
    assert planned.upper > before[1]
    # a planning query must not change later answers of the same accountant
    assert lo_up(acc) == before
    assert acc.get_epsilon(DELTA) == before[1]
    assert acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02,
                             num_steps=0).upper == before[1]


def test_optimizer_hook_records_sample_rate_times_accumulated_iterations():
    acc = PrivacyBucketsAccountant()
    hook = acc.get_optimizer_hook_fn(sample_rate=0.01)
    hook(SimpleNamespace(noise_multiplier=1.2, accumulated_iterations=1))
    hook(SimpleNamespace(noise_multiplier=1.2, accumulated_iterations=1))
    hook(SimpleNamespace(noise_multiplier=1.2, accumulated_iterations=3))
    assert acc.history == [(1.2, 0.01, 2), (1.2, 0.03, 1)]
    rdp = RDPAccountant()
    rhook = rdp.get_optimizer_hook_fn(sample_rate=0.01)
    for k in (1, 1, 3):
        rhook(SimpleNamespace(noise_multiplier=1.2, accumulated_iterations=k))
    assert acc.history == rdp.history


# ------------------------------------------------------------------------------------
# state_dict / load_state_dict
# ------------------------------------------------------------------------------------

def test_state_dict_holds_history_and_mechanism_and_is_json_serialisable():
    acc = fresh([(1.0, 0.02, 5), (2.0, 0.5, 1)])
    state = acc.state_dict()
    assert set(state) == {"history", "mechanism", "options", "assumptions"}
    assert state["assumptions"] == {"sampler": "poisson", "neighbouring": "add_remove",
                                   "dataset_size": None, "batch_size": None}
    assert state["mechanism"] == "pb"
    assert state["history"] == [(1.0, 0.02, 5), (2.0, 0.5, 1)]
    restored = json.loads(json.dumps(state))
    assert restored["history"] == [[1.0, 0.02, 5], [2.0, 0.5, 1]]
    assert restored["mechanism"] == "pb"
    assert restored["options"] == state["options"]
    state["history"].append((9.0, 0.9, 9))          # a copy, not the live list
    assert acc.history == [(1.0, 0.02, 5), (2.0, 0.5, 1)]
    dest = OrderedDict(other=1)
    assert acc.state_dict(destination=dest) is dest
    assert dest["other"] == 1 and dest["mechanism"] == "pb"


def _message(fn):
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("bad", [None, {}, OrderedDict()], ids=["None", "empty", "emptyOD"])
def test_load_state_dict_rejects_none_and_empty_with_opacus_message(bad):
    acc = fresh([(1.0, 0.02, 5)])
    msg = _message(lambda: acc.load_state_dict(bad))
    assert msg == _message(lambda: RDPAccountant().load_state_dict(bad))
    assert "None or empty" in msg
    assert acc.history == [(1.0, 0.02, 5)]


@pytest.mark.parametrize("bad,key", [({"mechanism": "pb"}, "history"),
                                     ({"history": [(1.0, 0.1, 1)]}, "mechanism")])
def test_load_state_dict_rejects_missing_keys_with_opacus_message(bad, key):
    acc = fresh([(1.0, 0.02, 5)])
    msg = _message(lambda: acc.load_state_dict(bad))
    assert f"`{key}`" in msg
    assert msg == _message(lambda: RDPAccountant().load_state_dict(
        dict(bad, mechanism="rdp") if key == "history" else bad))
    assert acc.history == [(1.0, 0.02, 5)]


def test_load_state_dict_rejects_another_mechanism_with_opacus_message():
    acc = fresh([(1.0, 0.02, 5)])
    rdp = RDPAccountant()
    rdp.history = [(1.0, 0.02, 7)]
    msg = _message(lambda: acc.load_state_dict(rdp.state_dict()))
    # Opacus's wording (including its double space), with the roles swapped
    expected = _message(lambda: RDPAccountant().load_state_dict(acc.state_dict()))
    assert msg == expected.replace("pb", "@").replace("rdp", "pb").replace("@", "rdp")
    assert msg == ("state_dict of rdp cannot be loaded into  Privacy Accountant with "
                   "mechanism pb")
    assert acc.history == [(1.0, 0.02, 5)]
    # and Opacus's accountants refuse ours
    with pytest.raises(ValueError, match="state_dict of pb"):
        PRVAccountant().load_state_dict(acc.state_dict())


def test_load_state_dict_round_trip_including_json():
    acc = fresh(SCHEDULE_HISTORY)
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(acc.state_dict())
    assert restored.history == acc.history
    assert len(restored) == 70
    via_json = PrivacyBucketsAccountant()
    via_json.load_state_dict(json.loads(json.dumps(acc.state_dict())))
    assert [tuple(h) for h in via_json.history] == acc.history
    assert lo_up(restored) == lo_up(via_json) == lo_up(acc)


# ------------------------------------------------------------------------------------
# validation: ValueError naming the parameter, before the history changes
# ------------------------------------------------------------------------------------

BAD_STEPS = [
    (dict(noise_multiplier=-0.5, sample_rate=0.01), "noise_multiplier"),
    (dict(noise_multiplier=float("nan"), sample_rate=0.01), "noise_multiplier"),
    (dict(noise_multiplier=float("inf"), sample_rate=0.01), "noise_multiplier"),
    (dict(noise_multiplier="1.0", sample_rate=0.01), "noise_multiplier"),
    (dict(noise_multiplier=None, sample_rate=0.01), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=1.5), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=-0.01), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=float("nan")), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=float("inf")), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=None), "sample_rate"),
    (dict(noise_multiplier=10 ** 400, sample_rate=0.01), "noise_multiplier"),  # > any float
    (dict(noise_multiplier=1.0, sample_rate=-10 ** 400), "sample_rate"),
]


@pytest.mark.parametrize("kwargs,name", BAD_STEPS)
def test_bad_step_raises_value_error_naming_parameter_and_keeps_history(kwargs, name):
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    with pytest.raises(ValueError, match=name):
        acc.step(**kwargs)
    assert acc.history == [(1.0, 0.01, 1)]
    assert len(acc) == 1
    with pytest.raises(ValueError, match=name):
        acc.epsilon_after(DELTA, num_steps=3, **kwargs)
    assert acc.history == [(1.0, 0.01, 1)]


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 1.5, float("nan"), float("inf"), None,
                                   "1e-5"])
def test_bad_delta_raises_value_error_naming_delta(delta):
    acc = fresh([(1.0, 0.02, 5)])
    for query in (acc.get_epsilon, acc.get_epsilon_bounds):
        with pytest.raises(ValueError, match="delta"):
            query(delta)
    with pytest.raises(ValueError, match="delta"):
        acc.epsilon_after(delta, noise_multiplier=1.0, sample_rate=0.02)
    assert acc.history == [(1.0, 0.02, 5)]


@pytest.mark.parametrize("epsilon", [-0.1, float("nan"), None])
def test_bad_epsilon_raises_value_error_naming_epsilon(epsilon):
    acc = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match="epsilon"):
        acc.get_delta(epsilon)
    assert acc.history == [(1.0, 0.02, 5)]


def test_bad_num_steps_in_epsilon_after():
    acc = fresh([(1.0, 0.02, 5)])
    for k in (-1, 2.5, "3"):
        with pytest.raises(ValueError, match="num_steps"):
            acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02, num_steps=k)
    assert acc.history == [(1.0, 0.02, 5)]


def test_epsilon_after_lower_must_be_a_flag():
    """``lower="False"`` (truthy) had been read as True; anything but True/False is a
    ValueError naming ``lower``, and numpy's bools are taken."""
    acc = fresh([(1.0, 0.02, 5)])
    for bad in ("False", 1, None, [True]):
        with pytest.raises(ValueError, match="lower"):
            acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02, lower=bad)
    plain = acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02)
    both = acc.epsilon_after(DELTA, noise_multiplier=1.0, sample_rate=0.02,
                             lower=np.bool_(True))
    assert plain.lower == 0.0 and 0.0 < both.lower <= both.upper == plain.upper
    assert acc.history == [(1.0, 0.02, 5)]


BAD_HISTORIES = [
    ([(1.0, 0.02, 5), (1.0, 0.02)], r"history\[1\]"),
    ([(1.0, 0.02, 5), None], r"history\[1\]"),
    ([(1.0, 0.02, 5), (1.0, 0.02, 3, 4)], r"history\[1\]"),
    ([(-1.0, 0.02, 5)], r"history\[0\] noise_multiplier"),
    ([(float("nan"), 0.02, 5)], r"history\[0\] noise_multiplier"),
    ([(1.0, 1.02, 5)], r"history\[0\] sample_rate"),
    ([(1.0, 0.02, 5), (1.0, -0.02, 5)], r"history\[1\] sample_rate"),
    ([(1.0, 0.02, -5)], r"history\[0\] num_steps"),
    ([(1.0, 0.02, 2.5)], r"history\[0\] num_steps"),
    ([(1.0, 0.02, "5")], r"history\[0\] num_steps"),
]


@pytest.mark.parametrize("history", [None, 5, "abc"])
def test_load_state_dict_rejects_a_history_that_is_not_a_list(history):
    acc = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match="history"):
        acc.load_state_dict({"history": history, "mechanism": "pb"})
    assert acc.history == [(1.0, 0.02, 5)]


@pytest.mark.parametrize("history,pattern", BAD_HISTORIES)
def test_bad_history_entries_raise_value_error_naming_the_entry(history, pattern):
    acc = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match=pattern):
        acc.load_state_dict({"history": history, "mechanism": "pb"})
    assert acc.history == [(1.0, 0.02, 5)]          # nothing replaced
    assert len(acc) == 5
    # assigned directly (as Opacus's utilities do): rejected at the assignment
    direct = fresh([(1.0, 0.02, 5)])
    with pytest.raises(ValueError, match=pattern):
        direct.history = history
    assert direct.history == [(1.0, 0.02, 5)]


# ------------------------------------------------------------------------------------
# registration with Opacus
# ------------------------------------------------------------------------------------

def test_is_an_opacus_iaccountant():
    acc = PrivacyBucketsAccountant()
    assert isinstance(acc, IAccountant)
    assert issubclass(PrivacyBucketsAccountant, IAccountant)


def test_create_accountant_pb():
    acc = create_accountant("pb")
    assert type(acc) is PrivacyBucketsAccountant
    assert acc.history == [] and acc.mechanism() == "pb"
    assert create_accountant("pb") is not acc


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(REPO),
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})


def test_importing_pb_accountant_does_not_import_torch_or_opacus():
    res = _python("""
        import pb_accountant, sys
        assert 'torch' not in sys.modules, 'torch imported'
        assert 'opacus' not in sys.modules, 'opacus imported'
        acc = pb_accountant.PrivacyBucketsAccountant()
        acc.step(noise_multiplier=1.0, sample_rate=0.1)
        acc.get_epsilon_bounds(1e-5)
        assert 'torch' not in sys.modules, 'torch imported by a query'
        print('ok')
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


@pytest.mark.parametrize("order", ["pb_first", "opacus_first"])
def test_registration_works_in_either_import_order(order):
    imports = ("import pb_accountant\nimport opacus" if order == "pb_first"
               else "import opacus\nimport pb_accountant")
    res = _python(imports + """
from opacus import PrivacyEngine
from opacus.accountants import IAccountant, create_accountant
acc = create_accountant('pb')
assert type(acc).__name__ == 'PrivacyBucketsAccountant'
assert isinstance(acc, IAccountant)
assert PrivacyEngine(accountant='pb').accountant.mechanism() == 'pb'
print('ok')
""")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


# ------------------------------------------------------------------------------------
# determinism: cached, incremental, restored and fresh accountants agree exactly
# ------------------------------------------------------------------------------------

def test_incremental_queries_do_not_change_answers():
    """Asking after every step / every 10 steps / once / after a restore: identical."""
    every_step = PrivacyBucketsAccountant()
    every_ten = PrivacyBucketsAccountant()
    once = PrivacyBucketsAccountant()
    seen_every_step, seen_every_ten = {}, {}
    for i, (sigma, q) in enumerate(SCHEDULE, start=1):
        for acc in (every_step, every_ten, once):
            acc.step(noise_multiplier=sigma, sample_rate=q)
        if i <= 12 or i % 10 == 0:          # every step for the first 12, then every 10
            seen_every_step[i] = lo_up(every_step)
            assert every_step.get_epsilon(DELTA) == seen_every_step[i][1]
        if i % 10 == 0:
            seen_every_ten[i] = lo_up(every_ten)
    assert every_step.history == every_ten.history == once.history == SCHEDULE_HISTORY
    final = lo_up(once)
    assert lo_up(every_step) == lo_up(every_ten) == final
    for i, value in seen_every_ten.items():
        assert seen_every_step[i] == value, f"step {i}"
    # a fresh accountant per prefix gives the same numbers as the incremental ones
    for i in (7, 12, 20, 40, 60):
        assert lo_up(fresh(run_length(SCHEDULE[:i]))) == seen_every_step[i], f"step {i}"
    # restored from state_dict, directly and after a JSON round trip
    restored = PrivacyBucketsAccountant()
    restored.load_state_dict(every_step.state_dict())
    via_json = PrivacyBucketsAccountant()
    via_json.load_state_dict(json.loads(json.dumps(every_step.state_dict())))
    assert lo_up(restored) == lo_up(via_json) == final
    assert restored.get_epsilon(DELTA) == via_json.get_epsilon(DELTA) == final[1]
    # the bounds never contradict monotonicity in the number of steps
    keys = sorted(seen_every_step)
    for a, b in zip(keys, keys[1:]):
        assert seen_every_step[a][0] <= seen_every_step[b][1]
    assert all(lo <= up for lo, up in seen_every_step.values())


def test_answers_do_not_depend_on_query_order_or_other_deltas():
    a = fresh(SCHEDULE_HISTORY)
    b = fresh(SCHEDULE_HISTORY)
    a.get_epsilon_bounds(1e-3)
    a.get_epsilon(1e-7)
    a.get_delta(1.0)
    b_first = lo_up(b)
    assert lo_up(a) == b_first
    assert a.get_epsilon(DELTA) == b.get_epsilon(DELTA)


# ------------------------------------------------------------------------------------
# heterogeneous schedules and degenerate steps
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("history", [
    [(1.0, 0.02, 30), (1.5, 0.02, 20), (0.8, 0.02, 10)],           # changing sigma
    [(1.2, 0.01, 40), (1.2, 0.05, 20), (1.2, 0.002, 100)],         # changing q
    [(0.9, 0.03, 10), (2.0, 0.3, 5), (1.1, 0.01, 50), (0.9, 0.03, 10)],
], ids=["sigma", "q", "both"])
def test_heterogeneous_schedules_bracket_prv_and_beat_rdp(history):
    lo, up = lo_up(fresh(history))
    assert 0.0 < lo <= up < math.inf
    prv_lo, prv_est, prv_up = prv_bounds(history)
    assert lo <= prv_up and up >= prv_lo
    assert up <= rdp_eps(history)
    # each homogeneous part alone costs less (composition only adds privacy loss)
    for part in history:
        assert lo_up(fresh([part]))[0] <= up
    # the order of the steps does not matter for the true epsilon
    lo_rev, up_rev = lo_up(fresh(history[::-1]))
    assert lo <= up_rev and lo_rev <= up


def test_gaussian_steps_q1_bracket_closed_form():
    """q = 1 is the Gaussian mechanism: 1000 steps of sigma 10 -> eps 17.856587."""
    history = [(10.0, 1.0, 600), (10.0, 1.0, 400)]
    lo, up = lo_up(fresh(history))
    exact = gaussian_epsilon(DELTA, math.sqrt(1000) / 10.0)
    assert abs(exact - 17.856587) < 1e-5
    assert lo <= exact <= up
    assert (up - lo) / up < 1e-3


def test_zero_noise_gives_infinite_epsilon_below_q_with_a_note():
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    acc.step(noise_multiplier=0.0, sample_rate=0.01)
    assert acc.history == [(1.0, 0.01, 1), (0.0, 0.01, 1)]
    eps = acc.get_epsilon(DELTA)                    # no exception
    assert eps == math.inf and isinstance(eps, float)
    b = acc.get_epsilon_bounds(DELTA)
    assert b.upper == math.inf
    assert b.lower <= b.upper
    assert len(b.notes) > 0 and any("delta" in n for n in b.notes)
    # above the distinguishing mass q the unnoised step is affordable
    above = acc.get_epsilon_bounds(0.05)
    assert above.upper < math.inf
    assert above.lower <= above.upper


def test_zero_sample_rate_steps_cost_nothing():
    base = [(1.0, 0.02, 20)]
    with_idle = [(1.0, 0.02, 10), (0.5, 0.0, 1000), (0.0, 0.0, 7), (1.0, 0.02, 10)]
    assert lo_up(fresh(with_idle)) == lo_up(fresh(base))
    assert fresh(with_idle).get_epsilon(DELTA) == fresh(base).get_epsilon(DELTA)
    assert len(fresh(with_idle)) == 1027


# ------------------------------------------------------------------------------------
# get_noise_multiplier and published values
# ------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")
def test_get_noise_multiplier_pb_certifies_the_target():
    sigma = get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA, sample_rate=0.004,
                                 epochs=50, accountant="pb")
    steps = int(50 / 0.004)
    lo, up = lo_up(fresh([(sigma, 0.004, steps)]))
    assert up <= 3.0
    assert up >= 3.0 - 0.01 - 1e-9       # the search's epsilon_tolerance
    assert lo <= up
    # close to what Opacus's PRV picks (a tighter estimate than RDP)
    sigma_prv = get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA,
                                     sample_rate=0.004, epochs=50, accountant="prv")
    sigma_rdp = get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA,
                                     sample_rate=0.004, epochs=50, accountant="rdp")
    assert abs(sigma - sigma_prv) / sigma_prv < 0.02
    assert sigma < sigma_rdp


@pytest.mark.parametrize("n,epochs", [(93, 1), (99, 1), (75, 3), (49, 7), (1000, 2.5)])
def test_get_noise_multiplier_pb_counts_every_step_of_the_epochs(n, epochs):
    """Opacus passes sample_rate = 1/len(loader): epochs / rate may round below the
    steps the run takes (1 / fl(1/93) = 92.99...), which calibrated one step too few and
    left the run's certified lower bound above the target (1.0028 at target 1)."""
    from pb_accountant._opacus_hook import steps_of_epochs
    q = 1.0 / n
    steps = math.ceil(epochs * n)
    assert steps_of_epochs(epochs, q) == steps
    sigma = get_noise_multiplier(target_epsilon=1.0, target_delta=DELTA, sample_rate=q,
                                 epochs=epochs, accountant="pb")
    assert lo_up(fresh([(sigma, q, steps)]))[1] <= 1.0


def test_published_opacus_value_is_bracketed():
    """Opacus tests: sigma 1.5, q 0.04, 2249 steps, delta 1e-5 -> PRV eps 6.7774."""
    history = [(1.5, 0.04, 2249)]
    b = fresh(history).get_epsilon_bounds(DELTA)
    prv_lo, prv_est, prv_up = prv_bounds(history)
    assert abs(prv_up - 6.7774) < 1e-3
    prv_acc = PRVAccountant()
    prv_acc.history = history
    assert abs(prv_acc.get_epsilon(DELTA) - 6.7774) < 1e-3
    assert b.lower <= prv_up and b.upper >= prv_lo
    assert b.lower <= 6.7774 + 1e-3
    assert b.upper <= rdp_eps(history) < 7.3291 + 1e-3     # RDP at 2250 steps: 7.3291
    assert (b.upper - b.lower) / b.upper < 1e-3


def test_epsilon_bounds_of_another_history_leaves_the_accountants_own():
    """A what-if query: the bounds of another history, bitwise those of an accountant
    holding it, with the accountant's own history untouched; a malformed history is
    refused naming the entry."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.01, 50)]
    other = [(1.1, 0.01, 50), (0.9, 0.02, 30)]
    fresh = PrivacyBucketsAccountant()
    fresh.history = list(other)
    assert acc.epsilon_bounds_of(other, 1e-5) == fresh.get_epsilon_bounds(1e-5)
    assert acc.history == [(1.1, 0.01, 50)]
    with pytest.raises(ValueError, match=r"history\[1\]"):
        acc.epsilon_bounds_of([(1.1, 0.01, 50), (0.9, 2.0, 30)], 1e-5)
    assert acc.history == [(1.1, 0.01, 50)]
