"""``PrivacyBucketsAccountant``: a drop-in for Opacus's "prv"/"rdp" accountants.

A thin stateful wrapper over the engine (Opacus 1.6 ``IAccountant``): ``history`` holds
``(noise_multiplier, sample_rate, num_steps)`` entries exactly as Opacus's accountants
do; every query is a pure function of it.  Composed binary powers and composed prefixes
are cached, so a training loop that asks for epsilon every epoch pays only for the
steps added since its last question, and gets bit-identical answers to a fresh
accountant (or one restored from ``state_dict``) given the same history.

Thread safety: one accountant may be queried and stepped from several threads.  The
history is read and written under a lock, every query works on a snapshot of it, and the
engine's caches hold immutable values published under the composer's lock, so every
answer is bitwise the single-threaded one (docs/method.md §8).

Importing this module does not import torch or opacus; with opacus installed the class
is registered as the mechanism "pb" and as a virtual subclass of ``IAccountant``.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping as _MappingABC
from typing import Any, Callable, List, Mapping, Optional, Tuple

import numpy as np

from ._validation import (MAX_STEPS, check_count, check_delta, check_epsilon, check_epsilons,
                          check_flag, check_noise_multiplier, check_sample_rate)
from .composition import BucketOptions, Composer
# (ENGINE_LIMITS, engine_limit_reason: defined with the engine, whose compose answers
# them as the accountant does; imported from here by the adapter and calibration)
from .engine import (ENGINE_LIMITS, PrivacyBuckets, adaptive_delta_bounds,
                     adaptive_epsilon_bounds, compose_history, engine_limit_reason,
                     upper_only)
from .mechanisms import DiscretePair, MechanismPair, SubsampledGaussian
from .results import DeltaBounds, EpsilonBounds, PrivacyCurve
from .samplers import (AccumulatedBatchesWarning, Assumptions, accumulated_step_note,
                       SampledPairs, available_samplers, bracket_lower_delta,
                       bracket_lower_epsilon, check_assumptions, sampled_pairs)

MECHANISM = "pb"

#: most points a privacy curve may ask for (bounded memory)
MAX_CURVE_POINTS = 100_000


def _validate_step(noise_multiplier, sample_rate, where: str = "") -> Tuple[float, float]:
    """A training step: sigma = 0 (no noise) and q = 0 (data untouched) are accepted,
    as Opacus accepts them; step_pair says what each costs (rule in _validation.py)."""
    sigma = check_noise_multiplier(noise_multiplier, f"{where}noise_multiplier")
    q = check_sample_rate(sample_rate, f"{where}sample_rate")
    return sigma, q


def _lower_or_limit(what: str, compute, trivial, consequence: str):
    """(lower bound, extra notes): ``compute()``, or where the lower pairs' composition
    reaches an engine limit (ENGINE_LIMITS) the trivial lower bound with the reason and a
    warning.  The lower pairs differ from the upper ones (fixed_size under replace_one,
    shuffle), so their limit must not discard a certified upper bound already computed
    (it had turned a finite upper epsilon into inf)."""
    try:
        return compute(), ()
    except ENGINE_LIMITS as exc:
        reason = engine_limit_reason(exc, consequence)
        warnings.warn(f"pb accountant could not certify the lower {what}: {reason}",
                      RuntimeWarning, stacklevel=4)
        return trivial, (reason,)


def step_pair(noise_multiplier: float, sample_rate: float) -> Optional[MechanismPair]:
    """The worst-case pair of one DP-SGD step (None when the step costs nothing).

    sample_rate = 0 never touches the data; noise_multiplier = 0 reveals the sampled
    example, a pair with distinguishing mass q (so epsilon is inf below delta = q).
    """
    if sample_rate == 0.0:
        return None
    if noise_multiplier == 0.0:
        return DiscretePair((1.0 - sample_rate, sample_rate), (1.0, 0.0))
    return SubsampledGaussian(noise_multiplier, sample_rate)


class PrivacyBucketsAccountant:
    """Opacus accountant with certified upper and lower epsilon (privacy buckets).

    ``get_epsilon(delta)`` returns the certified upper bound (what Opacus expects);
    ``get_epsilon_bounds(delta)`` returns both bounds.  ``sampler`` ("poisson",
    "fixed_size", "shuffle"), ``neighbouring`` ("add_remove", "replace_one",
    "replace_special"), ``dataset_size`` and ``batch_size`` say how batches were formed
    (pb_accountant.samplers; docs/method.md §10).  Keyword options are expert
    overrides of the engine (paper's vocabulary): ``number_of_buckets``, ``factor``,
    ``free_infty_budget``, ``growth_factor``, ``resolution``, ``leaf_resolution``,
    ``max_buckets``, ``halve_long_tails`` and ``two_scale`` (False: no separate bulk
    grid for small sampling rates); ``BucketOptions`` says what each does.

    ``history`` is a plain list of ``(noise_multiplier, sample_rate, num_steps)``
    tuples; assigning it (lists of tuples or JSON lists of lists) validates it first.
    It is the live list, as with Opacus's accountants, so an entry appended or changed
    in place is validated when the history is next used: every query, ``len``,
    ``state_dict`` and pickling raise a ValueError naming a malformed entry, so it never
    reaches a bound, a step count or a checkpoint.
    Thread-safe: ``step`` and every query may run concurrently on one accountant and
    each answer is bitwise what a single thread gets for the history it saw
    (docs/method.md §8).  Pickling, ``deepcopy`` and ``state_dict`` carry the history,
    the options and the sampler assumptions only, never the caches.
    """

    def __init__(self, sampler: str = "poisson", neighbouring: str = "add_remove",
                 dataset_size: Optional[int] = None, batch_size: Optional[int] = None,
                 **options: Any):
        known = _option_names()
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown!r} for PrivacyBucketsAccountant; "
                             f"the options are {known!r}")
        self._assumptions = check_assumptions(sampler, neighbouring, dataset_size, batch_size)
        self.options = BucketOptions(**options)
        self._lock = threading.RLock()
        self._history: List[Tuple[float, float, int]] = []
        self._written = None          # the entry step() wrote last (its fast path's)
        self._checked = ((), ())      # the history _snapshot saw last, and its entries
        self._composer = Composer(self.options)
        self._warned_accumulated = False   # (step_accumulated's warning, given once)

    # -- history: validated when assigned, and when used ---------------------------------
    @property
    def history(self) -> List[Tuple[float, float, int]]:
        """The live list (Opacus code reads, appends to and assigns it); see the class
        docstring for when in-place changes are validated."""
        return self._history

    @history.setter
    def history(self, value) -> None:
        validated = _validated_history(value)          # raises before anything changes
        with self._lock:
            self._history = validated

    # -- what the bounds assume (read-only) ----------------------------------------------
    @property
    def sampler(self) -> str:
        """How batches are formed: "poisson", "fixed_size" or "shuffle"."""
        return self._assumptions.sampler

    @property
    def neighbouring(self) -> str:
        """The neighbouring relation: "add_remove", "replace_one" or "replace_special"."""
        return self._assumptions.neighbouring

    @property
    def assumptions(self) -> dict:
        """A new dict: sampler, neighbouring, dataset_size, batch_size."""
        return self._assumptions.as_dict()

    def _snapshot(self) -> List[Tuple[float, float, int]]:
        """A validated copy of the history (ValueError naming a malformed entry): the
        live list may have been changed in place, bypassing the setter."""
        with self._lock:
            history = list(self._history)
        # an entry that is the very tuple of (float, float, int) validated last time
        # is taken as it was (immutable): a long history is not checked anew per query
        seen, checked = self._checked
        out = [checked[i] if (i < len(seen) and entry is seen[i] and _is_plain(entry))
               else _validated_entry(entry, i) for i, entry in enumerate(history)]
        self._checked = (history, out)      # (one assignment: threads see either pair)
        return out

    # -- pickling and copying: history and options only --------------------------------
    def __getstate__(self):
        return {"history": self._snapshot(), "options": _options_dict(self.options),
                "assumptions": self._assumptions.as_dict()}

    def __setstate__(self, state) -> None:
        self._assumptions = check_assumptions(**state.get("assumptions", {}))
        self.options = BucketOptions(**state["options"])
        self._lock = threading.RLock()
        self._composer = Composer(self.options)
        self._history = _validated_history(state["history"])
        self._written = None
        self._checked = ((), ())
        self._warned_accumulated = False

    # -- the Opacus contract ----------------------------------------------------------
    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one optimisation step (validated before the history changes)."""
        with self._lock:
            history = self._history
            if history:
                last = history[-1]
                # fast path: the step repeats the last entry (the usual case in training),
                # the very tuple this accountant wrote (one replaced in place is checked)
                if (last is self._written
                        and noise_multiplier == last[0] and sample_rate == last[1]
                        and type(noise_multiplier) is float and type(sample_rate) is float
                        and last[2] < MAX_STEPS):
                    self._written = history[-1] = (last[0], last[1], last[2] + 1)
                    return
            sigma, q = _validate_step(noise_multiplier, sample_rate)
            if history:
                # the list may have been changed in place: check what is extended
                last_sigma, last_q, count = _validated_entry(history[-1], len(history) - 1)
                if last_sigma == sigma and last_q == q:
                    # (the history's own check: a longer entry could be neither queried
                    # nor loaded back)
                    count = check_count(f"history[{len(history) - 1}] num_steps", count + 1,
                                        maximum=MAX_STEPS)
                    self._written = history[-1] = (last_sigma, last_q, count)
                    return
            self._written = (sigma, q, 1)
            history.append(self._written)

    def __len__(self) -> int:
        """Number of optimisation steps recorded (not of history entries)."""
        return sum(count for _, _, count in self._snapshot())

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """Certified upper bound on epsilon at ``delta``; unknown keywords are ignored."""
        return self._bounds(delta, lower=False).upper

    def step_accumulated(self, *, noise_multiplier: float, sample_rate: float,
                         batches: int) -> None:
        """Record one optimisation step over ``batches`` accumulated batches, each drawn
        with ``sample_rate``: at rate ``batches * sample_rate``, as Opacus records it.
        Under Poisson or fixed-size sampling with ``batches`` > 1 that rate does not
        model an example drawn into several batches, and a shuffled run's rate that is
        not ``batches``/len(loader) is read as one batch per step, so the bounds are not
        certified for such training: an ``AccumulatedBatchesWarning`` says so (once per
        accountant)."""
        k = check_count("batches", batches, minimum=1)
        q = check_sample_rate(sample_rate)
        if q * k > 1.0:
            # (step() would name only the product, a sample_rate the caller never gave)
            raise ValueError(f"batches x sample_rate must be at most 1 (the rate of the "
                             f"step), got {k!r} x {q!r} = {q * k!r}")
        self.step(noise_multiplier=noise_multiplier, sample_rate=q * k)
        if k > 1 and not self._warned_accumulated:
            note = accumulated_step_note(self._assumptions, q, k, q * k)
            if note is not None:
                self._warned_accumulated = True
                warnings.warn(note, AccumulatedBatchesWarning, stacklevel=2)

    def get_optimizer_hook_fn(self, sample_rate: float) -> Callable[[Any], None]:
        def hook_fn(optim) -> None:
            self.step_accumulated(noise_multiplier=optim.noise_multiplier,
                                  sample_rate=sample_rate,
                                  batches=optim.accumulated_iterations)

        return hook_fn

    def state_dict(self, destination: Optional[Mapping] = None):
        """Opacus's keys ("history", "mechanism") plus the constructor ``options``."""
        if destination is None:
            destination = OrderedDict()
        destination["history"] = self._snapshot()
        destination["mechanism"] = self.mechanism()
        destination["options"] = _options_dict(self.options)
        destination["assumptions"] = self._assumptions.as_dict()
        return destination

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Replace the history (validated first).  A state carrying ``options`` must
        match this accountant's options; Opacus-style states without them load as is.
        A state's ``assumptions`` (sampler, neighbouring, dataset_size, batch_size) must
        equal this accountant's; a state without them means poisson / add_remove."""
        if state_dict is not None and not isinstance(state_dict, _MappingABC):
            raise ValueError("state_dict must be a mapping with the keys `history` and "
                             f"`mechanism`, got {state_dict!r}")
        if state_dict is None or len(state_dict) == 0:
            raise ValueError("state dict is either None or empty and hence cannot be loaded"
                             " into Privacy Accountant.")
        if "history" not in state_dict.keys():
            raise ValueError("state_dict does not have the key `history`."
                             " Cannot be loaded into Privacy Accountant.")
        if "mechanism" not in state_dict.keys():
            raise ValueError("state_dict does not have the key `mechanism`."
                             " Cannot be loaded into Privacy Accountant.")
        if self.mechanism() != state_dict["mechanism"]:
            raise ValueError(f"state_dict of {state_dict['mechanism']} cannot be loaded into "
                             f" Privacy Accountant with mechanism {self.mechanism()}")
        if "options" in state_dict.keys():
            self._check_options(state_dict["options"])
        self._check_assumptions(state_dict.get("assumptions"))
        raw = state_dict["history"]
        if not isinstance(raw, (list, tuple)):
            raise ValueError(f"state_dict['history'] must be a list of (noise_multiplier, "
                             f"sample_rate, num_steps) entries, got {raw!r}")
        self.history = raw             # validated before replacing anything

    def _check_assumptions(self, theirs) -> None:
        if theirs is None:
            theirs = {}
        if not isinstance(theirs, _MappingABC):
            raise ValueError(f"state_dict['assumptions'] must be a mapping, got {theirs!r}")
        unknown = sorted(set(theirs) - set(Assumptions().as_dict()), key=repr)
        if unknown:
            raise ValueError(f"state_dict['assumptions'] has unknown key(s) {unknown!r}; "
                             f"known: {sorted(Assumptions().as_dict())!r}")
        theirs = check_assumptions(**dict(theirs)).as_dict()
        for name, value in self._assumptions.as_dict().items():
            if theirs[name] != value:
                raise ValueError(
                    f"state_dict was recorded with {name}={theirs[name]!r}, this accountant "
                    f"has {name}={value!r}; construct the accountant with "
                    f"PrivacyBucketsAccountant({name}={theirs[name]!r}, ...) to load it")

    def _check_options(self, options) -> None:
        if not isinstance(options, _MappingABC):
            raise ValueError(f"state_dict['options'] must be a mapping, got {options!r}")
        known = set(_option_names())
        unknown = sorted(set(options) - known, key=repr)
        if unknown:
            raise ValueError(f"state_dict['options'] has unknown option(s) {unknown!r}; "
                             f"known: {sorted(known)!r}")
        mine = _options_dict(self.options)
        theirs = _options_dict(BucketOptions(**dict(options)))
        for name, value in mine.items():
            if theirs[name] != value:
                raise ValueError(
                    f"state_dict option {name}={theirs[name]!r} differs from this "
                    f"accountant's {name}={value!r}; construct the accountant with "
                    f"PrivacyBucketsAccountant({name}={theirs[name]!r}) to load it")

    # -- more than Opacus gives ---------------------------------------------------------
    def get_epsilon_bounds(self, delta: float) -> EpsilonBounds:
        """Certified lower and upper bounds on epsilon at ``delta``."""
        return self._bounds(delta, lower=True)

    def get_delta(self, epsilon: float) -> float:
        """Certified upper bound on delta at ``epsilon``."""
        epsilon = check_epsilon(epsilon)
        return self.get_delta_bounds(epsilon).upper

    def get_delta_bounds(self, epsilon) -> DeltaBounds:
        """Certified bounds on delta at one epsilon or an array of them."""
        epsilon = check_epsilons(epsilon)
        return self._delta_bounds(epsilon, self._snapshot(), self._assumptions)

    def get_privacy_curve(self, epsilons=None, num: int = 200) -> PrivacyCurve:
        """The eps-delta curve with both certified bounds: at each epsilon, bitwise
        what ``get_delta_bounds`` answers there (each tightened for its own delta class).
        Default epsilons: ``num`` from 0 up to where delta_up reaches 1e-10."""
        if epsilons is not None:
            epsilons = check_epsilons(epsilons)
        num = check_count("num", num, minimum=2, maximum=MAX_CURVE_POINTS)
        history = self._snapshot()
        sp = self._sampled(history)                              # user errors raise
        tag = {"sampler": self._assumptions.sampler,
               "neighbouring": self._assumptions.neighbouring}
        if epsilons is None:
            try:
                methods = ("split",) if sp.lower is not None else ("split", "grouped")
                epsilons = compose_history(self._composer, list(sp.upper), None,
                                           methods).curve_epsilons(num)
            except ENGINE_LIMITS as exc:
                # as for epsilon (``_bounds``): the valid looser curve, delta in [0, 1]
                reason = engine_limit_reason(exc, "the upper bound 1 is valid but uninformative")
                warnings.warn(f"pb accountant could not certify the privacy curve: {reason}",
                              RuntimeWarning, stacklevel=2)
                eps = np.linspace(0.0, 1.0, num)
                return PrivacyCurve(eps, np.zeros(eps.shape), np.ones(eps.shape), "none", None,
                                    (reason,) + sp.notes, **tag)
        db = self._delta_bounds(epsilons, history, self._assumptions)
        return PrivacyCurve(np.asarray(db.epsilon, dtype=float),
                            np.asarray(db.lower, dtype=float),
                            np.asarray(db.upper, dtype=float),
                            "best" if db.method != "none" else "none", db.grid, db.notes,
                            **tag)

    def get_epsilon_bounds_by_sampler(self, delta: float) -> "dict[str, EpsilonBounds]":
        """Bounds at ``delta`` for this history under every sampler the known sizes
        allow (sampler -> EpsilonBounds; each result names its sampler and relation).

        Shuffle, undefined under add_remove, is given under replace_special (for
        Poisson, add_remove and replace_special have the same pair).
        """
        delta = check_delta(delta)
        history = self._snapshot()
        return {a.sampler: self._bounds(delta, lower=True, history=history, assumptions=a)
                for a in available_samplers(self._assumptions)}

    def epsilon_bounds_of(self, history, delta: float) -> EpsilonBounds:
        """Both bounds at ``delta`` of another ``history`` ([(noise_multiplier,
        sample_rate, num_steps), ...], validated) under this accountant's sampler,
        neighbouring relation and options, without changing its own history (a what-if
        query; one that extends a history queried before reuses its compositions)."""
        return self._bounds(delta, lower=True, history=list(history))

    def epsilon_after(self, delta: float, *, noise_multiplier: float, sample_rate: float,
                      num_steps: int = 1, lower: bool = False) -> EpsilonBounds:
        """Bounds the history would have after ``num_steps`` more steps (no state change).

        Only the upper bound is computed unless ``lower=True`` (without it the returned
        lower is the trivial 0), which is all a budget guard needs.
        """
        sigma, q = _validate_step(noise_multiplier, sample_rate)
        k = check_count("num_steps", num_steps, minimum=0, maximum=MAX_STEPS)
        lower = check_flag("lower", lower)      # (a truthy "False" would read as True)
        history = self._snapshot() + ([(sigma, q, k)] if k else [])
        return self._bounds(delta, lower=lower, history=history)

    # -- internals ------------------------------------------------------------------------
    def _sampled(self, history, assumptions: Optional[Assumptions] = None) -> SampledPairs:
        """The pairs of ``history`` under the assumptions (samplers.sampled_pairs)."""
        a = self._assumptions if assumptions is None else assumptions
        return sampled_pairs(_validated_history(history), **a.as_dict())

    def _pairs(self, history) -> List[Tuple[MechanismPair, int]]:
        """The pairs whose composition certifies the upper bound."""
        return list(self._sampled(history).upper)

    def _engine(self, delta: Optional[float], lower: bool, history=None) -> PrivacyBuckets:
        pairs = self._pairs(self._snapshot() if history is None else history)
        methods = ("split", "grouped") if lower else ("split",)
        return compose_history(self._composer, pairs, delta, methods)

    def _bounds(self, delta: float, lower: bool, history=None,
                assumptions: Optional[Assumptions] = None) -> EpsilonBounds:
        delta = check_delta(delta)
        a = self._assumptions if assumptions is None else assumptions
        sp = self._sampled(self._snapshot() if history is None else history, a)  # user errors raise
        tag = {"sampler": a.sampler, "neighbouring": a.neighbouring}
        try:
            if sp.lower is None:
                # both bounds even for the upper one alone: the grid is refined where
                # their bracket is wide (engine.adaptive_epsilon_bounds), and
                # get_epsilon must equal get_epsilon_bounds().upper; self-mirrored
                # pairs' B||A groups repeat the A||B ones
                result = adaptive_epsilon_bounds(self._composer, list(sp.upper), delta,
                                                 symmetric=sp.symmetric)
                if not lower:
                    result = upper_only(result)
            else:
                engine = compose_history(self._composer, list(sp.upper), delta, ("split",))
                result = engine.epsilon_bounds(delta)
                if lower:
                    low, note = _lower_or_limit(
                        "epsilon", lambda: bracket_lower_epsilon(self._composer, sp, delta),
                        0.0, "the lower bound 0 is valid but uninformative; the upper "
                        "bound is unaffected")
                    result = dataclasses.replace(result, lower=min(low, result.upper),
                                                 notes=result.notes + note)
            return dataclasses.replace(result, notes=result.notes + sp.notes, **tag)
        except ENGINE_LIMITS as exc:
            # the engine's resource limits (memory, floating-point overflow): a valid
            # looser answer, inf, with the reason in notes and a loud warning.  Anything
            # else (KeyError, TypeError, ZeroDivisionError, ...) is a bug and propagates:
            # a bug must never pass as a valid-looking inf.
            reason = engine_limit_reason(exc, "the upper bound inf is valid but uninformative")
            warnings.warn(f"pb accountant could not certify epsilon: {reason}",
                          RuntimeWarning, stacklevel=3)
            return EpsilonBounds(delta, 0.0, math.inf, "none", None, (reason,) + sp.notes, **tag)

    def _delta_bounds(self, epsilon, history, a: Assumptions) -> DeltaBounds:
        if np.ndim(epsilon) > 1:
            # the engine answers one epsilon or a flat array: a multi-dimensional array's
            # entries are answered flat (each entry is bitwise its scalar query anyway)
            # and the result takes the array's shape
            shape = np.shape(epsilon)
            flat = self._delta_bounds(np.ravel(epsilon), history, a)
            return dataclasses.replace(
                flat, epsilon=np.reshape(flat.epsilon, shape),
                lower=np.reshape(flat.lower, shape), upper=np.reshape(flat.upper, shape))
        sp = self._sampled(history, a)                           # user errors raise
        tag = {"sampler": a.sampler, "neighbouring": a.neighbouring}
        try:
            if sp.lower is None:
                result = adaptive_delta_bounds(self._composer, list(sp.upper), epsilon)
                return dataclasses.replace(result, notes=result.notes + sp.notes, **tag)
            result = adaptive_delta_bounds(self._composer, list(sp.upper), epsilon,
                                           ("split",))
            at = np.asarray(result.epsilon, dtype=float)
            lo, note = _lower_or_limit(
                "delta", lambda: bracket_lower_delta(self._composer, sp, at),
                np.zeros(np.shape(np.atleast_1d(at))), "the lower bound 0 is valid but "
                "uninformative; the upper bound is unaffected")
            lo = np.minimum(lo, np.asarray(result.upper))
            if np.ndim(result.upper) == 0:
                lo = float(np.reshape(lo, -1)[0])
            return dataclasses.replace(result, lower=lo,
                                       notes=result.notes + note + sp.notes, **tag)
        except ENGINE_LIMITS as exc:
            # as for epsilon (``_bounds``): the valid looser answer [0, 1] with the reason
            reason = engine_limit_reason(exc, "the upper bound 1 is valid but uninformative")
            warnings.warn(f"pb accountant could not certify delta: {reason}",
                          RuntimeWarning, stacklevel=3)
            eps = np.asarray(epsilon, dtype=float)
            if eps.ndim == 0:
                return DeltaBounds(float(eps), 0.0, 1.0, "none", None, (reason,) + sp.notes,
                                   **tag)
            return DeltaBounds(eps, np.zeros(eps.shape), np.ones(eps.shape), "none", None,
                               (reason,) + sp.notes, **tag)

    # -- attack risk (docs/attack-risk.md) --------------------------------------------
    def get_tradeoff_bounds(self, fpr=None, **kwargs):
        """Certified bounds on the trade-off curve f(alpha), the attacker's TPR at each
        false-positive rate in ``fpr`` (default 1e-3, 1e-2, 0.1) and the GDP mu bracket
        (a :class:`pb_accountant.tradeoff.TradeoffBounds`).  At an engine limit the
        trivial bounds come back with the reason in ``notes``."""
        from .tradeoff import _check_fpr, _check_options, tradeoff_bounds, trivial_tradeoff
        _check_fpr(fpr)                                     # user errors raise first,
        _check_options(**kwargs)                            # before any composition
        sampled = getattr(self, "_sampled", None)           # samplers with a bracket
        sp = sampled(self._snapshot()) if sampled is not None else None   # user errors raise
        # what the bound assumes (a sample rate the sizes contradict, the batch fraction
        # read from the rate, ...) is said on every path, as for epsilon and delta
        notes = tuple(sp.notes) if sp is not None else ()
        try:
            if sp is not None and getattr(sp, "lower", None) is not None:
                # the upper pairs' own lower curves bound a dominating pair, not the
                # mechanism: only the certified upper curves are used (TPR lower = FPR)
                engine = compose_history(self._composer, list(sp.upper), None, ("split",))
            else:
                engine = self._engine(None, lower=True)
            result = tradeoff_bounds(engine, fpr, **kwargs)
            return dataclasses.replace(result, notes=result.notes + notes)
        except ENGINE_LIMITS as exc:
            reason = engine_limit_reason(exc)
            warnings.warn(f"pb accountant could not certify the trade-off curve: {reason}",
                          RuntimeWarning, stacklevel=2)
            result = trivial_tradeoff(fpr, note=reason,
                                      mu_alpha_min=kwargs.get("mu_alpha_min", 1e-6))
            return dataclasses.replace(result, notes=result.notes + notes)

    def get_tpr_bounds(self, fpr):
        """Certified (lower, upper) bounds on an attacker's best true-positive rate at
        false-positive rate ``fpr`` (a number, or arrays of ``fpr``'s shape)."""
        import numpy as np
        scalar = fpr is not None and np.ndim(fpr) == 0
        tb = self.get_tradeoff_bounds(fpr)
        if scalar:
            return float(tb.tpr_lower[0]), float(tb.tpr_upper[0])
        shape = np.shape(tb.fpr if fpr is None else fpr)
        return tb.tpr_lower.reshape(shape), tb.tpr_upper.reshape(shape)


#: BucketOptions fields the engine sets for itself, never a user: ``spacing_base`` (the
#: query's levels between two halvings, ``Composer.refined``) and ``graded_leaves``
#: (a switch for comparisons; graded leaves are as certified as the others).  Left out of the
#: constructor's options and of ``state_dict``, so a checkpoint stays readable by the
#: versions before it
_ENGINE_OPTIONS = ("spacing_base", "graded_leaves")


def _option_names() -> List[str]:
    """The options a user may give (BucketOptions' fields but the engine's own)."""
    return [f.name for f in dataclasses.fields(BucketOptions) if f.name not in _ENGINE_OPTIONS]


def _options_dict(options: BucketOptions) -> dict:
    """The constructor options as a JSON-serialisable dict."""
    return {name: getattr(options, name) for name in _option_names()}


def _validated_entry(entry, i: int) -> Tuple[float, float, int]:
    try:
        if not isinstance(entry, (tuple, list, np.ndarray)):
            raise TypeError     # (a set or dict has no order: its three values are no entry)
        sigma, q, count = entry
    except (TypeError, ValueError):
        raise ValueError(
            f"history[{i}] must be (noise_multiplier, sample_rate, num_steps), "
            f"got {entry!r}") from None
    sigma, q = _validate_step(sigma, q, where=f"history[{i}] ")
    count = check_count(f"history[{i}] num_steps", count, maximum=MAX_STEPS)
    return sigma, q, count


def _is_plain(entry) -> bool:
    """Whether ``entry`` is a tuple of exactly (float, float, int): nothing in it can
    change after it was validated."""
    return (type(entry) is tuple and len(entry) == 3 and type(entry[0]) is float
            and type(entry[1]) is float and type(entry[2]) is int)


def _validated_history(history) -> List[Tuple[float, float, int]]:
    """A new list of validated (float, float, int) entries; ValueError naming the entry."""
    if not isinstance(history, (list, tuple)):
        raise ValueError("history must be a list of (noise_multiplier, sample_rate, "
                         f"num_steps) entries, got {history!r}")
    return [_validated_entry(entry, i) for i, entry in enumerate(history)]
