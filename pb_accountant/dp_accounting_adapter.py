"""``PrivacyBucketsDpAccountant``: certified bounds for dp_accounting ``DpEvent``s.

JAX (jax_privacy), TensorFlow Privacy and Google's pipelines describe training as
dp_accounting ``DpEvent`` trees and accept any ``dp_accounting.PrivacyAccountant``.  This
subclass maps each event to the engine's worst-case pairs (docs/method.md §2) and
answers with the privacy buckets' certified bounds: ``get_epsilon`` is the certified
upper bound, ``get_epsilon_bounds`` / ``get_delta_bounds`` give both sides, and
``get_tradeoff_bounds`` the attack-risk bounds of docs/attack-risk.md.

Supported events (anything else: ``supports`` is False, never a wrong number):

* ADD_OR_REMOVE_ONE: ``GaussianDpEvent`` (sensitivity 1), ``LaplaceDpEvent``,
  ``PoissonSampledDpEvent`` of a Gaussian or Laplace event;
* REPLACE_ONE: ``GaussianDpEvent`` (the sum moves by 2, as in dp_accounting's PLD),
  ``RandomizedResponseDpEvent``, and, where ``pb_accountant.samplers`` is present (its
  ``step_pairs``), ``PoissonSampledDpEvent`` of a Gaussian event;
* both: ``SelfComposedDpEvent``, ``ComposedDpEvent``, ``NoOpDpEvent``,
  ``NonPrivateDpEvent`` (epsilon inf, delta 1).

REPLACE_ONE reads a Gaussian's noise multiplier as ``GaussianDpEvent`` defines it (sigma
/ C with every record's norm at most C), so replacing one record moves the sum by up to
2C: N(2) vs N(0) for a plain step, as dp_accounting's ``PLDAccountant`` reads the plain
and Poisson-sampled Gaussian.  Its ``RdpAccountant`` charges a Gaussian under REPLACE_ONE
as a sum moving by C (Renyi divergence alpha / (2 sigma^2)), i.e. as pb charges the
event with twice the noise; for that reading, compose noise multiplier 2 sigma.

``SampledWithoutReplacementDpEvent`` is not supported: the fixed-size pair (1-g) N(0) +
g N(2) vs N(0) bounds one step only where e^eps >= 1, and composed alone it fell below a
realisable run (docs/method.md, "Samplers and neighbouring relations");
``PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one")`` brackets
such runs.

Not supported, because no certified pair is implemented: ``ZCDpEvent`` (a zCDP
statement is not a pair of distributions), ``MixtureOfGaussiansDpEvent``,
``DiscreteLaplaceDpEvent``, ``TruncatedSubsampledGaussianDpEvent``,
``SampledWithReplacementDpEvent``, ``SingleEpochTreeAggregationDpEvent``,
``RepeatAndSelectDpEvent``, ``UnsupportedDpEvent``; REPLACE_SPECIAL altogether.

Counts, as in the accountant's history: ``compose``'s count and each mechanism's composed
count (nested ``SelfComposedDpEvent`` counts multiplied, equal mechanisms merged) are at
most 10^15; a larger one is refused before anything changes.  An engine limit (a
history past the floating-point range) gives the valid trivial answer with the reason in
``notes`` and a RuntimeWarning, in every query.

Importing this module needs dp_accounting (the ``dp_accounting`` extra); the engine does
not.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import warnings
from typing import List, Optional, Tuple

import numpy as np

from dp_accounting import dp_event
from dp_accounting import privacy_accountant

from ._validation import MAX_STEPS, _scalar, check_array, check_count, check_real
from .accountant import (ENGINE_LIMITS, PrivacyBucketsAccountant, engine_limit_reason,
                         step_pair)
from .composition import canonical_history
from .engine import (PrivacyBuckets, adaptive_delta_bounds, adaptive_epsilon_bounds,
                     answering_limits, compose_history, history_loss_cap, upper_only)
from .mechanisms import (DiscretePair, Gaussian, KaryRandomizedResponse, Laplace,
                         MechanismPair)
from .results import DeltaBounds, EpsilonBounds
from .subsampled_laplace import SubsampledLaplace

__all__ = ["PrivacyBucketsDpAccountant"]

NeighboringRelation = privacy_accountant.NeighboringRelation
_Details = privacy_accountant.PrivacyAccountant.CompositionErrorDetails
_RELATION_NAME = {NeighboringRelation.ADD_OR_REMOVE_ONE: "add_remove",
                  NeighboringRelation.REPLACE_ONE: "replace_one",
                  NeighboringRelation.REPLACE_SPECIAL: "replace_special"}
_SAMPLER_OF = {dp_event.PoissonSampledDpEvent: "poisson",
               dp_event.SampledWithoutReplacementDpEvent: "fixed_size"}


def _no_pair(event, message) -> "_Details":
    return _Details(invalid_event=event, error_message=message)


class PrivacyBucketsDpAccountant(privacy_accountant.PrivacyAccountant):
    """A ``dp_accounting.PrivacyAccountant`` with certified upper and lower bounds.

    ``options`` are the engine's expert options, as for
    :class:`pb_accountant.PrivacyBucketsAccountant` (``number_of_buckets``, ``factor``,
    ``free_infty_budget``, ...).  For the same history of Poisson-sampled Gaussian steps
    the answers are bitwise those of ``PrivacyBucketsAccountant`` with the same options.
    """

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
                 **options):
        if not isinstance(neighboring_relation, NeighboringRelation):
            raise ValueError("neighboring_relation must be a dp_accounting NeighboringRelation "
                             f"(ADD_OR_REMOVE_ONE or REPLACE_ONE), got {neighboring_relation!r}")
        assumed = sorted(set(options) & set(_ACCOUNTANT_ASSUMPTIONS))
        if assumed:
            # (they reached PrivacyBucketsAccountant, which the adapter uses for its engine
            # alone: neighbouring='replace_one' or sampler='fixed_size' was silently
            # ignored, the answers those of the relation given and the events' samplers)
            raise ValueError(
                f"{', '.join(f'{k}={options[k]!r}' for k in assumed)}: PrivacyBucketsDpAccountant "
                "takes the engine's options only (number_of_buckets, factor, ...); the "
                "neighbouring relation is neighboring_relation (ADD_OR_REMOVE_ONE or "
                "REPLACE_ONE) and each event says how it was sampled "
                "(PoissonSampledDpEvent); for fixed-size or shuffled batches use "
                "PrivacyBucketsAccountant(sampler=..., neighbouring=..., dataset_size=..., "
                "batch_size=...)")
        super().__init__(neighboring_relation)
        # the engine, its options and caches (validates the options)
        self._pb = PrivacyBucketsAccountant(**options)
        self._lock = threading.RLock()
        self._pairs: List[Tuple[MechanismPair, int]] = []
        self._contains_non_dp_event = False
        self._samplers = set()

    # -- pickling and copying, as dp_accounting's accountants allow --------------------
    def __getstate__(self):
        # (the lock cannot be pickled: deepcopy and pickle raised TypeError)
        with self._lock:
            state = dict(self.__dict__)
            state["_pairs"] = list(self._pairs)
            state["_samplers"] = set(self._samplers)
        del state["_lock"]
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # -- events to pairs --------------------------------------------------------------
    def _leaf_pair(self, event) -> Tuple[Optional[MechanismPair], Optional["_Details"], bool]:
        """(pair or None, error, non_private) for a leaf event."""
        rel = self.neighboring_relation
        add_remove = rel == NeighboringRelation.ADD_OR_REMOVE_ONE
        replace = rel == NeighboringRelation.REPLACE_ONE
        if isinstance(event, dp_event.GaussianDpEvent):
            sigma = event.noise_multiplier
            if not (add_remove or replace):
                return None, _no_pair(event, f"GaussianDpEvent needs ADD_OR_REMOVE_ONE or "
                                             f"REPLACE_ONE, found {rel}"), False
            if not _is_real(sigma) or float(sigma) < 0.0:
                return None, _no_pair(event, _NOISE_RANGE.format(sigma)), False
            if _is_zero(sigma):
                return None, None, True
            return self._make(event, lambda: Gaussian(float(sigma), 1.0 if add_remove else 2.0))
        if isinstance(event, dp_event.LaplaceDpEvent):
            if not add_remove:
                return None, _no_pair(event, f"LaplaceDpEvent needs ADD_OR_REMOVE_ONE, "
                                             f"found {rel}"), False
            if not _is_real(event.noise_multiplier) or float(event.noise_multiplier) < 0.0:
                return None, _no_pair(event, _NOISE_RANGE.format(event.noise_multiplier)), False
            if _is_zero(event.noise_multiplier):
                return None, None, True
            if 1.0 / float(event.noise_multiplier) > _MAX_LAPLACE_EPSILON0:
                # (1e-308: eps0 = 1e308 is finite, but twice it is not: every query
                # raised an internal NaN error; mechanisms.Laplace checks eps0 alone)
                return None, _no_pair(event, _LAPLACE_RANGE.format(event.noise_multiplier)), False
            return self._make(event, lambda: Laplace(float(event.noise_multiplier)))
        if isinstance(event, dp_event.RandomizedResponseDpEvent):
            if not replace:
                return None, _no_pair(event, "RandomizedResponseDpEvent needs REPLACE_ONE, "
                                             f"found {rel}"), False
            return self._randomized_response(event)
        if isinstance(event, dp_event.PoissonSampledDpEvent) and replace:
            return self._sampled_replace_one(event)
        if isinstance(event, dp_event.PoissonSampledDpEvent):
            if not add_remove:
                return None, _no_pair(event, "PoissonSampledDpEvent needs ADD_OR_REMOVE_ONE "
                                             f"or REPLACE_ONE, found {rel}"), False
            inner = event.event
            q = event.sampling_probability
            if not isinstance(inner, (dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent)):
                return None, _no_pair(event, "the sub-event of PoissonSampledDpEvent must be a "
                                             f"GaussianDpEvent or LaplaceDpEvent, found {inner}"), False
            if not _is_real(q) or not 0.0 <= float(q) <= 1.0:
                return None, _no_pair(event, f"sampling_probability must be in [0, 1], got {q!r}"), False
            q = float(q)
            scale = inner.noise_multiplier
            # (checked before q = 0, which never touches the data: a string, NaN or
            # negative noise at rate 0 had been supported)
            if not _is_real(scale) or float(scale) < 0.0:
                return None, _no_pair(event, _NOISE_RANGE.format(scale)), False
            if q == 0.0:
                return None, None, False                  # never touches the data
            if _is_zero(scale):
                # the sampled record is revealed: distinguishing mass q (as the accountant)
                return self._make(event, lambda: DiscretePair((1.0 - q, q), (1.0, 0.0)))
            if isinstance(inner, dp_event.GaussianDpEvent):
                return self._make(event, lambda: step_pair(float(scale), q))
            return self._make(event, lambda: SubsampledLaplace(float(scale), q))
        if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
            # no pair certifies both bounds: (1-g) N(0) + g N(2) vs N(0) bounds one step
            # at e^eps >= 1 only, and composed alone it fell below a realisable run; the
            # accountant brackets it (its upper pairs composed with their mirrors)
            return None, _no_pair(event, _WITHOUT_REPLACEMENT_REASON), False
        return None, _no_pair(event, "Unsupported event."), False

    def _sampled_replace_one(self, event):
        """Poisson-sampled Gaussian under REPLACE_ONE: the pair of pb_accountant.samplers
        (``step_pairs``), where that module is present; a pair whose upper and lower
        versions differ is refused (no bracket here)."""
        try:
            from . import samplers
            step_pairs, gaussian_noise = samplers.step_pairs, samplers.gaussian_noise
        except (ImportError, AttributeError):
            return None, _no_pair(event, f"{type(event).__name__} under REPLACE_ONE needs "
                                         "pb_accountant.samplers, absent in this version"), False
        inner = event.event
        if not isinstance(inner, dp_event.GaussianDpEvent):
            return None, _no_pair(event, "the sub-event must be a GaussianDpEvent, found "
                                         f"{inner}"), False
        q = event.sampling_probability
        if not _is_real(q) or not 0.0 <= float(q) <= 1.0:
            return None, _no_pair(event, f"sampling_probability must be in [0, 1], got {q!r}"), False
        q = float(q)
        sigma = inner.noise_multiplier
        if not _is_real(sigma) or float(sigma) < 0.0:
            return None, _no_pair(event, _NOISE_RANGE.format(sigma)), False
        if q == 0.0:
            return None, None, False

        def build():
            upper, lower = step_pairs(gaussian_noise(float(sigma)), q, "poisson", "replace_one")
            if upper != lower:
                raise ValueError("the sampler's upper and lower pairs differ")
            return upper
        return self._make(event, build)

    def _randomized_response(self, event):
        p, k = event.noise_parameter, _scalar(event.num_buckets)    # (numpy's integers too)
        if not _is_real(p) or not 0.0 <= float(p) <= 1.0:
            return None, _no_pair(event, f"noise_parameter must be in [0, 1], got {p!r}"), False
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            return None, _no_pair(event, f"num_buckets must be an integer >= 1, got {k!r}"), False
        p = float(p)
        if k == 1:
            return None, None, False                       # one output: nothing revealed
        if p == 0.0:
            return None, None, True
        # (the masses rounded from their exact values, with the error every bound covers)
        return self._make(event, lambda: KaryRandomizedResponse.of(p, k))

    @staticmethod
    def _make(event, build):
        try:
            return build(), None, False
        except ValueError as exc:        # parameters outside what the pairs represent
            return None, _no_pair(event, str(exc)), False

    # -- the dp_accounting contract ---------------------------------------------------
    def compose(self, event, count: int = 1):
        """dp_accounting's ``compose``, with ``count`` checked first (an integer in
        [1, MAX_STEPS]: a ValueError naming it, before any state changes)."""
        count = check_count("count", count, minimum=1, maximum=MAX_STEPS)
        # dp_accounting checks the event, writes the ledger, then composes, dropping the
        # second pass's error: one lock over all three, or a concurrent compose between
        # them (merged count past MAX_STEPS) left the ledger ahead of the bounds
        with self._lock:
            return super().compose(event, count)    # (an int: numpy's are not to its ledger)

    def _maybe_compose(self, event, count: int, do_compose: bool):
        # the whole event is checked (every leaf, and each merged count against
        # MAX_STEPS) before anything is composed; ``supports`` (count 0) asks whether
        # composing it once would be
        leaves: List[Tuple[Optional[MechanismPair], int, bool, str]] = []
        error = self._collect(event, max(count, 1), leaves)
        if error is not None:
            return error
        with self._lock:
            pairs = list(canonical_history(
                self._pairs + [(pair, c) for pair, c, _, _ in leaves if pair is not None]))
            # equal pairs anywhere in the history are composed as one (count_groups sums
            # them): [(g, 10^15), (laplace, 1), (g, 10^15)] had been accepted
            totals = {}
            for pair, c in pairs:
                totals[pair] = totals.get(pair, 0) + c
            largest = max(totals.values(), default=0)
            if largest > MAX_STEPS:
                return _no_pair(event, "the composed count of one mechanism must be an "
                                       f"integer <= {MAX_STEPS}, got {largest}")
            if do_compose and count:
                self._pairs = pairs
                self._contains_non_dp_event |= any(non_private for _, _, non_private, _
                                                   in leaves)
                self._samplers.update(sampler for pair, _, _, sampler in leaves
                                      if pair is not None)
        return None

    def _collect(self, event, count: int, leaves):
        """Append (pair or None, count, non_private, sampler) for every leaf of ``event``
        composed ``count`` times; the first leaf's error, or None."""
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            if count:
                leaves.append((None, count, True, "none"))
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            if not _is_count(event.count):
                return _no_pair(event, f"count must be an integer >= 0 and <= {MAX_STEPS}, "
                                       f"got {event.count!r}")
            return self._collect(event.event, event.count * count, leaves)
        if isinstance(event, dp_event.ComposedDpEvent):
            for e in event.events:
                result = self._collect(e, count, leaves)
                if result is not None:
                    return result
            return None
        pair, error, non_private = self._leaf_pair(event)
        if error is not None:
            return error
        if count and (non_private or pair is not None):
            leaves.append((pair, count, non_private, _SAMPLER_OF.get(type(event), "none")))
        return None

    def _tagged(self, result):
        """The result with the relation and samplers of the composed events, where the
        result type records them (fields ``neighbouring`` / ``sampler``)."""
        names = {f.name for f in dataclasses.fields(result)}
        changes = {}
        if "neighbouring" in names:
            changes["neighbouring"] = _RELATION_NAME[self.neighboring_relation]
        if "sampler" in names:
            with self._lock:
                changes["sampler"] = "+".join(sorted(self._samplers)) or "none"
        return dataclasses.replace(result, **changes) if changes else result

    def _history(self) -> List[Tuple[MechanismPair, int]]:
        with self._lock:
            return list(self._pairs)

    @property
    def history(self) -> Tuple[Tuple[MechanismPair, int], ...]:
        """The composed ``(pair, count)`` sequence (canonical: equal neighbours merged)."""
        return tuple(self._history())

    def get_epsilon(self, target_delta: float) -> float:
        """Certified upper bound on epsilon at ``target_delta`` in [0, 1] (inf if
        non-private; 0 at delta = 1, as dp_accounting's accountants answer)."""
        return self.get_epsilon_bounds(target_delta, lower=False).upper

    def get_delta(self, target_epsilon: float) -> float:
        """Certified upper bound on delta at ``target_epsilon`` in [0, inf] (1 if
        non-private)."""
        target_epsilon = check_real("target_epsilon", target_epsilon, low=0.0, allow_inf=True)
        return float(self.get_delta_bounds(target_epsilon).upper)

    def get_epsilon_bounds(self, target_delta: float, lower: bool = True) -> EpsilonBounds:
        """Certified lower and upper bounds on epsilon at ``target_delta`` in [0, 1].

        delta = 1 needs no epsilon (0); delta = 0 has the upper bound inf unless nothing
        private was composed (the certified round-off floor is positive) or every pair's
        loss is bounded (pure DP: Laplace, randomized response, sampled Laplace), where
        it is the history's largest total loss, from which on ``get_delta`` answers 0;
        as lower bound the one at the smallest positive delta (epsilon(delta) is
        non-increasing).
        """
        delta = check_real("target_delta", target_delta, low=0.0, high=1.0)
        if self._contains_non_dp_event:
            # dp_accounting's contract: epsilon inf at every delta, 1 included; the
            # lower bound is 0 at delta = 1 (delta(0) is a total variation distance, at
            # most 1, whatever was composed)
            return self._tagged(EpsilonBounds(delta, 0.0 if delta == 1.0 else math.inf,
                                              math.inf, "none", None,
                                              ("a NonPrivateDpEvent was composed: no guarantee",)))
        pairs = self._history()
        if delta == 1.0 or not pairs:
            return self._tagged(EpsilonBounds(delta, 0.0, 0.0, "best", None, ()))
        composer = self._pb._composer
        try:
            if delta == 0.0:
                low = self.engine().epsilon_lower(_TINY) if lower else 0.0
                # pure DP (every pair's loss bounded: Laplace, randomized response,
                # sampled Laplace): delta is 0 from the history's largest total loss on
                # (get_delta answers 0 there); the grid's round-off floor bounds the rest
                cap = _pure_dp_cap(pairs)
                if math.isfinite(cap):
                    return self._tagged(EpsilonBounds(
                        0.0, float(low), cap, "best", None,
                        ("delta = 0: the upper bound is the history's largest total "
                         "privacy loss (every pair's loss is bounded: pure DP)",)))
                return self._tagged(EpsilonBounds(
                    0.0, float(low), math.inf, "best", None,
                    ("delta = 0: no finite epsilon can be certified (a pair's loss is "
                     "unbounded, and the certified round-off floor of delta is positive)",)))
            # both bounds even for the upper one alone: the grid is refined where their
            # bracket is wide, and get_epsilon must equal get_epsilon_bounds().upper
            result = adaptive_epsilon_bounds(composer, pairs, delta)
            return self._tagged(result if lower else upper_only(result))
        except ENGINE_LIMITS as exc:
            reason = engine_limit_reason(exc, "the upper bound inf is valid but uninformative")
            warnings.warn(f"pb accountant could not certify epsilon: {reason}", RuntimeWarning,
                          stacklevel=2)
            # (a pure-DP history's largest total loss bounds epsilon at every delta: it
            # had answered inf at delta 1e-5 and the cap at delta 0)
            return self._tagged(EpsilonBounds(delta, 0.0, _pure_dp_cap(pairs), "none", None,
                                              (reason,)))

    def get_delta_bounds(self, target_epsilon) -> DeltaBounds:
        """Certified bounds on delta at one epsilon in [0, inf] or an array of them
        (at eps = inf: delta_up at eps = 1e6, which is >= delta(inf), or 0 where every
        pair's loss is bounded (pure DP: no distinguishing event); lower bound 0)."""
        scalar = np.ndim(target_epsilon) == 0
        eps = check_array("target_epsilon", np.atleast_1d(target_epsilon), low=0.0,
                          allow_inf=True)
        if self._contains_non_dp_event:
            one = np.ones_like(eps)
            return self._tagged(_delta_result(eps, one, one, scalar, ("non-private event",)))
        history = self._history()
        if not history:
            zero = np.zeros_like(eps)
            return self._tagged(_delta_result(eps, zero, zero, scalar, ()))
        infinite = np.isinf(eps)
        try:
            # composed again for the answer's delta class where it is small, as the
            # accountant's delta queries are (the same numbers)
            db = adaptive_delta_bounds(self._pb._composer, history,
                                       np.where(infinite, _LARGE_EPSILON, eps),
                                       ("split", "grouped"))
        except ENGINE_LIMITS as exc:
            reason = engine_limit_reason(exc, "the upper bound 1 is valid but uninformative")
            warnings.warn(f"pb accountant could not certify delta: {reason}", RuntimeWarning,
                          stacklevel=2)
            cap = _pure_dp_cap(history)
            up = np.where(math.isfinite(cap) & (eps >= cap), 0.0, 1.0)   # (inf >= inf)
            return self._tagged(_delta_result(eps, np.zeros_like(eps), up,
                                              scalar, (reason,), method="none"))
        lo = np.where(infinite, 0.0, np.atleast_1d(db.lower))
        # a pure-DP history has no distinguishing event: delta(inf) = 0 (delta_up at 1e6
        # had answered 1 where the largest total loss is beyond it, e.g. one Laplace
        # step of scale 1e-7: get_delta(inf) 1, get_delta(2e7) 0)
        up = np.where(infinite & math.isfinite(_pure_dp_cap(history)), 0.0,
                      np.atleast_1d(db.upper))
        return self._tagged(_delta_result(eps, lo, up, scalar, tuple(db.notes), db.grid))

    def engine(self, delta: Optional[float] = None) -> PrivacyBuckets:
        """The engine's bounds object for the composed history (both bounds); an
        engine limit answers the trivial bounds with the reason, as ``compose``'s."""
        history = self._history()
        return answering_limits(lambda: compose_history(
            self._pb._composer, history, delta, ("split", "grouped")), delta, history)

    def get_tradeoff_bounds(self, fpr=None, **kwargs):
        """Certified bounds on the trade-off curve and the attacker's TPR at ``fpr``
        (docs/attack-risk.md); see :func:`pb_accountant.tradeoff.tradeoff_bounds`."""
        from .tradeoff import _check_fpr, _check_options, tradeoff_bounds, trivial_tradeoff
        _check_fpr(fpr)                                     # user errors raise first,
        _check_options(**kwargs)                            # before any composition
        mu_alpha_min = kwargs.get("mu_alpha_min", 1e-6)
        if self._contains_non_dp_event:
            return trivial_tradeoff(fpr, note="a NonPrivateDpEvent was composed: no guarantee",
                                    mu_alpha_min=mu_alpha_min)
        try:
            return tradeoff_bounds(self.engine(), fpr, **kwargs)
        except ENGINE_LIMITS as exc:
            reason = engine_limit_reason(exc)
            warnings.warn(f"pb accountant could not certify the trade-off curve: {reason}",
                          RuntimeWarning, stacklevel=2)
            return trivial_tradeoff(fpr, note=reason, mu_alpha_min=mu_alpha_min)


#: PrivacyBucketsAccountant's sampling assumptions, which the adapter takes from its
#: relation and its events instead
_ACCOUNTANT_ASSUMPTIONS = ("sampler", "neighbouring", "dataset_size", "batch_size")
#: why SampledWithoutReplacementDpEvent is not supported
_WITHOUT_REPLACEMENT_REASON = (
    "no certified pair for a sampled-without-replacement Gaussian here: the fixed-size "
    "pair (1-g) N(0) + g N(2) vs N(0) bounds one step only where e^eps >= 1, and composed "
    "alone it falls below a realisable run; PrivacyBucketsAccountant(sampler='fixed_size', "
    "neighbouring='replace_one', dataset_size=n, batch_size=b) certifies a bracket (its "
    "upper bound composes the pair with its mirror)")
#: the range of a noise parameter (a finite real number, not a bool or a string)
_NOISE_RANGE = "noise_multiplier must be a finite real number >= 0, got {!r}"
#: the largest pure-DP epsilon 1 / noise_multiplier of a LaplaceDpEvent the Laplace pair
#: is used for (its loss span 2 eps0 and the engine's sums of it stay finite)
_MAX_LAPLACE_EPSILON0 = 2.0 ** 1020
_LAPLACE_RANGE = ("LaplaceDpEvent noise_multiplier must be 0 or >= 2**-1020 (about 8.9e-308; "
                  "its epsilon 1 / noise_multiplier at most 2**1020), got {!r}")
#: smallest positive double: the lower bound at delta = 0 is the one at this delta
_TINY = 5e-324
#: where delta(inf) is bounded from above (delta is non-increasing)
_LARGE_EPSILON = 1e6


def _pure_dp_cap(pairs) -> float:
    """The history's largest total loss where every pair's loss is bounded (pure DP: delta
    is 0 from it on, epsilon at most it at every delta), else inf; inf too where it is
    beyond the floats (``history_loss_cap``'s exact sum overflows)."""
    try:
        return history_loss_cap(pairs)
    except OverflowError:
        return math.inf


def _delta_result(eps, lo, up, scalar, notes, grid=None, method="best") -> DeltaBounds:
    if scalar:
        return DeltaBounds(float(eps[0]), float(lo[0]), float(up[0]), method, grid, notes)
    return DeltaBounds(eps, lo, up, method, grid, notes)


def _as_number(x):
    """numpy / 0-d array values (JAX's too) as Python numbers; anything else unchanged."""
    if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError):
            return x
    return _scalar(x)


def _is_real(x) -> bool:
    """A finite real number (an int past the float range is not: 10**400)."""
    x = _as_number(x)
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _is_count(x) -> bool:
    """A Python int in [0, MAX_STEPS] (dp_accounting's ledger takes ints alone)."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_STEPS


def _is_zero(x) -> bool:
    return _is_real(x) and float(x) == 0.0
