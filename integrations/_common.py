"""Helpers shared by the tracker, the guard and the framework callbacks.

Nothing here imports torch, opacus, lightning or transformers: every framework object
is handled by duck typing (``optimizer.noise_multiplier``, ``engine.accountant``).
"""
from __future__ import annotations

import copy
import inspect
import math
import numbers
import operator
from typing import Any, Optional, Tuple

import numpy as np

from pb_accountant._validation import (MAX_STEPS, check_count, check_noise_multiplier,
                                      check_real, check_sample_rate)
from pb_accountant.results import EpsilonBounds

__all__ = ["resolve_accountant", "steps_taken", "schedule_in_force", "epsilon_bounds",
           "epsilon_after", "find_dp_optimizer", "infer_sample_rate", "json_float",
           "accountant_state", "restore_accountant", "BudgetStateError",
           "hook_records_into"]

# Argument checks live in pb_accountant/_validation.py (one home for every layer).


class BudgetStateError(RuntimeError):
    """A resumed run cannot be given the privacy already spent (never starts from zero)."""


def accountant_state(accountant: Any) -> Optional[dict]:
    """The accountant's ``state_dict()`` as plain JSON data (history, mechanism and, for
    pb, the constructor options, so a resumed accountant with other options is refused).

    History entries become ``[noise_multiplier, sample_rate, num_steps]`` lists; JSON
    round-trips these floats exactly, so a restored accountant has the same history and
    hence bitwise the same bounds.  None for an accountant without ``state_dict``.
    """
    getter = getattr(accountant, "state_dict", None)
    if getter is None:
        return None
    state = getter()
    history = [[float(e[0]), float(e[1]), int(e[2])] for e in state["history"]]
    out = {"history": history, "mechanism": state.get("mechanism")}
    if state.get("options") is not None:           # pb's constructor options ride along
        out["options"] = dict(state["options"])
    for key, value in state.items():               # and whatever else the engine keeps
        if key not in out and isinstance(value, (str, int, float, bool, type(None), dict)):
            out[key] = dict(value) if isinstance(value, dict) else value
    from .sampling import accountant_assumptions
    out["assumptions"] = accountant_assumptions(accountant)   # sampler, relation, sizes
    return out


def _check_assumptions(accountant: Any, state: dict) -> None:
    """ValueError when the saved bounds assumed another sampler, relation or sizes.

    A state saved before samplers existed (no ``assumptions``) assumed Poisson sampling
    with add/remove neighbours.
    """
    from .sampling import DEFAULT_NEIGHBOURING, DEFAULT_SAMPLER, accountant_assumptions
    saved = state.get("assumptions")
    if saved is None:
        saved = {"sampler": DEFAULT_SAMPLER, "neighbouring": DEFAULT_NEIGHBOURING}
    if not isinstance(saved, dict):
        raise ValueError(f"saved accountant state['assumptions'] must be a dict, got {saved!r}")
    mine = accountant_assumptions(accountant)
    for key in ("sampler", "neighbouring", "dataset_size", "batch_size"):
        if key in saved and saved[key] != mine[key]:
            raise ValueError(
                f"the checkpoint's privacy budget was computed with {key}={saved[key]!r} but "
                f"this accountant has {key}={mine[key]!r}; resume with an accountant "
                f"configured as the checkpoint's ({saved!r})")


def _saved_history(state: dict) -> list:
    """``state['history']`` as (noise_multiplier, sample_rate, num_steps) tuples; a
    ValueError naming the entry and its range when it is not such a list."""
    raw = state["history"]
    where = "saved accountant state['history']"
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{where} must be a list of [noise_multiplier, sample_rate, "
                         f"num_steps] entries, got {raw!r}")
    saved = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"{where}[{i}] must be [noise_multiplier, sample_rate, "
                             f"num_steps], got {entry!r}")
        saved.append((check_real(f"{where}[{i}] noise_multiplier", entry[0], low=0.0),
                      check_real(f"{where}[{i}] sample_rate", entry[1], low=0.0, high=1.0),
                      check_count(f"{where}[{i}] num_steps", entry[2], maximum=MAX_STEPS)))
    return saved


def restore_accountant(accountant: Any, state: Optional[dict]) -> str:
    """Give ``accountant`` the saved ``state`` (from :func:`accountant_state`).

    Returns "loaded" (the accountant was empty and now holds the saved history),
    "matched" (it already holds exactly that history, e.g. Opacus's
    ``load_checkpoint`` restored it) or "none" (nothing saved).  ValueError if the
    accountant already holds a different, non-empty history (nothing is changed).
    """
    if state is None:
        return "none"
    if not isinstance(state, dict) or "history" not in state or "mechanism" not in state:
        raise ValueError("saved accountant state must be a dict with 'history' and "
                         f"'mechanism' (from accountant_state), got {state!r}")
    saved = _saved_history(state)               # all of it before anything changes
    _check_assumptions(accountant, state)
    current = [tuple(entry) for entry in (getattr(accountant, "history", None) or [])]
    full = dict(state)
    full["history"] = saved
    if current == saved:
        if "options" in full:
            accountant.load_state_dict(full)   # raises if the options differ
        return "matched"
    if steps_taken(accountant):
        raise ValueError(
            f"the accountant already holds {steps_taken(accountant)} steps ({current!r}), which "
            f"differ from the checkpoint's {sum(int(e[2]) for e in saved)} steps ({saved!r}); "
            "load the checkpoint into a fresh accountant")
    accountant.load_state_dict(full)           # raises (unchanged) if the options differ
    return "loaded"


def resolve_accountant(source: Any) -> Any:
    """The accountant behind ``source``: an accountant, or an Opacus ``PrivacyEngine``.

    Anything with ``get_epsilon`` counts as an accountant; an object with an
    ``accountant`` attribute that has one (Opacus's ``PrivacyEngine``) is unwrapped.
    Resolved at every use, so an engine whose accountant is replaced (checkpoint
    loading) is followed.
    """
    inner = getattr(source, "accountant", None)
    if inner is not None and hasattr(inner, "get_epsilon") and not hasattr(source, "history"):
        return inner
    if hasattr(source, "get_epsilon"):
        return source
    raise TypeError("expected a privacy accountant (with get_epsilon) or an Opacus PrivacyEngine, "
                    f"got {type(source).__name__}")


def steps_taken(accountant: Any) -> Optional[int]:
    """Optimisation steps recorded in an Opacus-style ``history``; None if unknown (a
    count that is not a whole number >= 0 is not read as one: 2.5 is not 2 steps)."""
    history = getattr(accountant, "history", None)
    if history is None:
        return None
    try:
        return sum(_recorded_count(entry[2]) for entry in history)
    except (TypeError, ValueError, IndexError, KeyError):
        return None


def _recorded_count(value) -> int:
    """A history entry's step count: a whole number >= 0 (an integer tensor too)."""
    try:
        return check_count("steps", value)
    except ValueError:
        if isinstance(value, (numbers.Number, np.generic, str)):
            raise
        return check_count("steps", operator.index(value))


def schedule_in_force(accountant: Any) -> Tuple[Optional[float], Optional[float]]:
    """(noise_multiplier, sample_rate) of the last recorded step, or (None, None)."""
    history = getattr(accountant, "history", None)
    if not history:
        return None, None
    try:
        sigma, q = history[-1][0], history[-1][1]
        return float(sigma), float(q)
    except (TypeError, ValueError, IndexError):
        return None, None


_ONE_SIDED = "accountant certifies an upper bound only; lower bound is 0"


def _one_sided(accountant: Any, delta: float, upper) -> EpsilonBounds:
    """(0, upper) from another accountant's ``get_epsilon``; a NaN or negative answer
    (not an epsilon) is reported as the valid bound inf, with a note, never passed on."""
    upper = float(upper)
    notes = [_ONE_SIDED]
    if math.isnan(upper) or upper < 0:
        notes.append(f"{type(accountant).__name__}.get_epsilon returned {upper!r}, which is "
                     "not an epsilon: reported as inf")
        upper = math.inf
    return EpsilonBounds(delta, 0.0, upper, method=type(accountant).__name__,
                         notes=tuple(notes))


def epsilon_bounds(accountant: Any, delta: float) -> EpsilonBounds:
    """Both bounds when the accountant has them; else (0, get_epsilon) - one-sided."""
    if hasattr(accountant, "get_epsilon_bounds"):
        return accountant.get_epsilon_bounds(delta)
    return _one_sided(accountant, delta, accountant.get_epsilon(delta))


def epsilon_after(accountant: Any, delta: float, noise_multiplier: float, sample_rate: float,
                  num_steps: int = 1) -> EpsilonBounds:
    """Bounds the accountant would report after ``num_steps`` more steps (no state change)."""
    if hasattr(accountant, "epsilon_after"):
        return accountant.epsilon_after(delta, noise_multiplier=noise_multiplier,
                                        sample_rate=sample_rate, num_steps=num_steps)
    trial = copy.deepcopy(accountant)   # any Opacus accountant: step a copy
    steps = int(num_steps)
    if steps:
        trial.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)
        steps -= 1
    history = getattr(trial, "history", None)
    last = history[-1] if isinstance(history, list) and history else None
    if (steps and type(last) is tuple and len(last) == 3 and type(last[2]) is int
            and last[:2] == (noise_multiplier, sample_rate)):
        # Opacus's history convention (the last step counted in its entry): the other
        # steps in one go, so that a long look-ahead costs no loop of that length
        history[-1] = (last[0], last[1], last[2] + steps)
        steps = 0
    for _ in range(steps):
        trial.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)
    return _one_sided(accountant, delta, trial.get_epsilon(delta))


def find_dp_optimizer(obj: Any) -> Any:
    """The Opacus ``DPOptimizer`` inside ``obj`` (Lightning/accelerate wrappers unwrapped)."""
    seen = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        if hasattr(obj, "attach_step_hook") and hasattr(obj, "noise_multiplier"):
            return obj
        obj = getattr(obj, "optimizer", None) or getattr(obj, "_optimizer", None)
    return None


def _hook_sample_rate(hook: Any) -> Optional[float]:
    """The sample rate an accountant's optimizer hook was built with, if it can be read."""
    seen = set()
    while hook is not None and id(hook) not in seen:
        seen.add(id(hook))
        rate = getattr(hook, "_pb_sample_rate", None)
        if rate is not None:
            return float(rate)
        try:
            nonlocals = inspect.getclosurevars(hook).nonlocals
        except (TypeError, ValueError):
            nonlocals = {}
        rate = nonlocals.get("sample_rate")
        if isinstance(rate, numbers.Real) and not isinstance(rate, bool):
            return float(rate)
        hook = getattr(hook, "_pb_wrapped", None)
    return None


def hook_records_into(optimizer: Any, accountant: Any) -> bool:
    """Whether ``optimizer.step_hook`` (or a hook it wraps: a tracker's) steps
    ``accountant``: Opacus's ``get_optimizer_hook_fn`` closes over the accountant as
    ``self``, a tracker's hook that accounts over the tracker."""
    hook, seen = getattr(optimizer, "step_hook", None), set()
    while hook is not None and id(hook) not in seen:
        seen.add(id(hook))
        try:
            owner = inspect.getclosurevars(hook).nonlocals.get("self")
        except (TypeError, ValueError):
            owner = None
        if owner is accountant:
            return True
        if (owner is not None and getattr(owner, "_account", False)
                and getattr(owner, "accountant", None) is accountant):
            return True                      # a BudgetTracker that steps it
        hook = getattr(hook, "_pb_wrapped", None)
    return False


def infer_sample_rate(*, sample_rate: Optional[float] = None, optimizer: Any = None,
                      data_loader: Any = None, accountant: Any = None) -> Optional[float]:
    """The per-step sample rate, from the first source that knows it.

    Order: the explicit value; the rate Opacus's accounting hook on ``optimizer`` was
    built with (``make_private`` uses 1/len(data_loader)); 1/len(data_loader); the
    last step in the accountant's history.  None when nothing knows it.
    """
    if sample_rate is not None:
        return float(sample_rate)
    if optimizer is not None:
        rate = _hook_sample_rate(getattr(optimizer, "step_hook", None))
        if rate is not None:
            return rate
    if data_loader is not None:
        try:
            n = len(data_loader)
        except TypeError:
            n = 0
        if n:
            return 1.0 / n
    if accountant is not None:
        return schedule_in_force(accountant)[1]
    return None


def accumulated_iterations(optimizer: Any, first_param: Any = None) -> int:
    """Opacus's ``accumulated_iterations`` (1 when it cannot be read yet).

    Read from the first parameter's ``grad_sample`` (a tensor: 1; a list: its length),
    which is what Opacus's property returns when the parameters agree (Opacus itself
    raises when they do not); the property is the fallback.  ``first_param``: that
    parameter, when the caller has it at hand.
    """
    try:
        if first_param is None:
            params = optimizer.params
            first_param = params[0] if params else None
        grad_sample = getattr(first_param, "grad_sample", None)
        if grad_sample is not None:
            return max(1, len(grad_sample)) if isinstance(grad_sample, list) else 1
    except Exception:
        pass
    try:
        return max(1, int(optimizer.accumulated_iterations))
    except Exception:  # no grad_sample yet, not a DPOptimizer, ...
        return 1


def json_float(x: Any) -> Any:
    """Floats for JSON: finite as is, non-finite as the strings "inf", "-inf", "nan"."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def check_step_defaults(noise_multiplier, sample_rate) -> Tuple[Optional[float], Optional[float]]:
    """The default (noise_multiplier, sample_rate) a guard or callback prices a pending
    step with, each None or valid as the accountant takes it (ValueError naming it
    otherwise), checked when it is given rather than inside a training step."""
    return (None if noise_multiplier is None else check_noise_multiplier(noise_multiplier),
            None if sample_rate is None else check_sample_rate(sample_rate))


def record_accumulated_step(accountant: Any, noise_multiplier: float, sample_rate: float,
                            batches: int) -> None:
    """Record one step over ``batches`` accumulated batches of rate ``sample_rate`` into
    ``accountant``: the pb accountant's ``step_accumulated`` (which warns where Poisson
    batches accumulate), another Opacus accountant's ``step`` at the summed rate."""
    record = getattr(accountant, "step_accumulated", None)
    if record is not None:
        record(noise_multiplier=noise_multiplier, sample_rate=sample_rate, batches=batches)
    else:
        accountant.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate * batches)
