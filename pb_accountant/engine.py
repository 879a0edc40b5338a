"""The engine's public face: compose a sequence of mechanisms, query certified bounds.

    >>> from pb_accountant import compose, SubsampledGaussian
    >>> pb = compose([(SubsampledGaussian(1.1, 0.01), 1000)], delta=1e-5)
    >>> bounds = pb.epsilon_bounds(1e-5)          # EpsilonBounds(lower=..., upper=...)

Upper bounds come from every tracked upper method ("split": the split pair, docs/method.md
§4; "paper": Definition 9) and the smallest is reported; lower bounds from "grouped"
(Theorem 2 over all groups) and "paper" (Theorem 2), the largest reported.  Both
neighbouring directions are always included.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._validation import check_delta, check_epsilons
from .composition import (DEFAULT_DELTA_CLASS, LEAF_BUCKETS_AT_FULL_RESOLUTION,
                          THREE_QUARTER_LEVEL, BucketOptions, BucketSet, Composer,
                          canonical_history, delta_class, fills_half, grouped_directions,
                          level_parts)
from .queries import certified_lower_epsilon, upper_epsilon
from .results import DeltaBounds, EpsilonBounds, GridInfo, PrivacyCurve

DEFAULT_METHODS = ("split", "grouped")

#: Exceptions from inside the engine that mean "this history is beyond what the engine
#: can represent", not "the code is wrong": answered with the valid bound inf and a
#: reason.  Every other exception from the engine is an internal error and propagates.
ENGINE_LIMITS = (MemoryError, OverflowError, FloatingPointError)
#: the method names a query may ask for (of a composition that reached a limit, whose
#: composed methods are unknown)
_QUERY_METHODS = ("grouped", "paper", "split")


def _check_method(method) -> None:
    """ValueError unless ``method`` is None (the best bounds) or a method a query may
    name (an unknown name was answered as the best bounds, labelled with it)."""
    if method is not None and method not in _QUERY_METHODS:
        raise ValueError(f"method must be None (the best bounds) or one of "
                         f"{list(_QUERY_METHODS)}, got {method!r}")


def engine_limit_reason(exc: BaseException, consequence: str = "") -> str:
    """The note that reports an engine limit (one of ENGINE_LIMITS) and what it means."""
    reason = f"engine limit reached ({type(exc).__name__}: {exc})"
    return f"{reason}; {consequence}" if consequence else reason


def _warn_limit(what: str, reason: str) -> None:
    """The loud warning beside an engine limit's trivial answer (as the accountant's)."""
    warnings.warn(f"pb accountant could not certify {what}: {reason}", RuntimeWarning,
                  stacklevel=4)


def _cap_note(cap: float) -> Tuple[str, ...]:
    return (() if math.isinf(cap) else
            (f"the upper bound is the history's largest total privacy loss, {cap:.6g} "
             "(every pair's loss is bounded: pure DP)",))


def trivial_epsilon_bounds(delta: float, reason: str, cap: float = math.inf) -> EpsilonBounds:
    """Epsilon in [0, inf] at ``delta``, valid for every mechanism, with ``reason``; in
    [0, ``cap``] for a history whose total loss is at most ``cap`` (``history_loss_cap``:
    pure DP, as the dp_accounting adapter answers its limits; RandomizedResponse(0.8)
    10^9 times had answered inf, not 1.39e9)."""
    return EpsilonBounds(delta, 0.0, cap, "none", None, (reason,) + _cap_note(cap))


def trivial_delta_bounds(epsilon, reason: str, cap: float = math.inf) -> DeltaBounds:
    """Delta in [0, 1] at ``epsilon`` (one or an array), valid for every mechanism; 0
    from ``cap`` (``trivial_epsilon_bounds``) on."""
    eps = np.asarray(epsilon, dtype=float)
    up = np.where(eps >= cap, 0.0, 1.0)
    if eps.ndim == 0:
        return DeltaBounds(float(eps), 0.0, float(up), "none", None, (reason,))
    return DeltaBounds(eps, np.zeros(eps.shape), up, "none", None, (reason,))


def history_loss_cap(history) -> float:
    """The least double at or above max(sum of count * hi, sum of count * -lo) over the
    pairs' ``loss_bounds`` (lo, hi) of a canonical ``history``: from this epsilon on
    delta is 0 in both directions, where every pair's loss is bounded (pure DP); inf
    where some pair's is not.  The sums are exact (fractions of the doubles)."""
    from fractions import Fraction
    ab = ba = Fraction(0)
    for pair, count in history:
        lo, hi = pair.loss_bounds()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return math.inf
        ab += count * Fraction(hi)
        ba += count * Fraction(-lo)
    total = max(ab, ba, Fraction(0))
    cap = float(total)
    if Fraction(cap) < total:
        cap = math.nextafter(cap, math.inf)
    return cap


class PrivacyBuckets:
    """Certified two-sided bounds for one composed sequence of mechanism pairs.

    ``history``: the canonical history composed, if known: where every pair's loss is
    bounded (``history_loss_cap``), the best bounds (no ``method`` named) take that
    pure-DP bound besides the grid's: delta 0 from the history's largest total loss on,
    and epsilon at most it.  The grid's upper bound rounds an atom at that loss up to
    the next grid point and may fall short of small deltas on its round-off.

    Objects handed to a user (:func:`compose`) answer an engine limit (ENGINE_LIMITS,
    met while composing or querying) with the trivial bounds, the reason in ``notes``
    and a RuntimeWarning, as the accountant does; the engine's own objects raise, so
    that its queries can fall back to other grids."""

    def __init__(self, buckets: Optional[BucketSet], delta_target: Optional[float] = None,
                 history=None):
        self.buckets = buckets
        #: the engine limit that stopped the composition (and the note saying so), else None
        self.limit_error: Optional[BaseException] = None
        self.limit_reason: Optional[str] = None
        #: whether a query's engine limit is answered (True) or raised (False)
        self.answers_limits = False
        self.delta_target = delta_target
        self.loss_cap = math.inf if history is None else history_loss_cap(history)
        self._upper: Dict[str, list] = {}
        self._lower: Dict[str, list] = {}
        # (composition, direction or None for both): where the curves come from
        self._sources: Tuple = ((buckets, None),) if buckets is not None else ()
        if buckets is not None:
            self._build()

    @classmethod
    def beyond_limits(cls, error: BaseException, delta_target: Optional[float] = None,
                      history=None) -> "PrivacyBuckets":
        """A composition that reached an engine limit, ``error`` (one of ENGINE_LIMITS):
        every query answers the trivial bounds (delta in [0, 1], epsilon in [0, inf];
        the pure-DP bound of ``history`` where its losses are bounded) with the reason
        in its notes."""
        beyond = cls(None, delta_target, history)
        beyond.limit_error = error
        beyond.limit_reason = engine_limit_reason(
            error, "the trivial bounds are valid but uninformative")
        beyond.answers_limits = True
        return beyond

    def _cap(self, method: Optional[str]) -> float:
        """The pure-DP bound the best bounds (``method`` None) take besides the grid's,
        also at an engine limit (``history_loss_cap``; inf where a loss is unbounded)."""
        return self.loss_cap if method is None else math.inf

    def _answer(self, what: str, query, trivial):
        """``query()``, or ``trivial(reason)`` where this composition reached an engine
        limit, or the query reaches one and this object answers limits."""
        if self.limit_reason is not None:
            _warn_limit(what, self.limit_reason)
            return trivial(self.limit_reason)
        if not self.answers_limits:
            return query()
        try:
            return query()
        except ENGINE_LIMITS as exc:
            reason = engine_limit_reason(exc, "the trivial bounds are valid but uninformative")
            _warn_limit(what, reason)
            return trivial(reason)

    @classmethod
    def of_directions(cls, ab: "PrivacyBuckets",
                      ba: "Optional[PrivacyBuckets]" = None) -> "PrivacyBuckets":
        """The A||B curves of ``ab`` and the B||A curves of ``ba``: two compositions of
        the same history, each focused on one direction (``Composer.compose``); each
        curve is a valid bound of its own direction.  ``ba`` None: the pairs are their
        own mirrors, so A||B decides both.  Grid and notes are reported from ``ab``."""
        joined = copy.copy(ab)
        joined._upper, joined._lower = {}, {}
        sources = [(ab, "ab")] + ([(ba, "ba")] if ba is not None else [])
        for src, direction in sources:
            for table, mine in ((src._upper, joined._upper), (src._lower, joined._lower)):
                for name, curves in table.items():
                    mine.setdefault(name, []).extend(
                        (d, c) for d, c in curves if d == direction)
        joined._sources = tuple((src.buckets, direction) for src, direction in sources)
        return joined

    # -- the curves of each method -----------------------------------------------------
    def _build(self):
        """Collect every representation's curves by method name, in the BucketSet's
        order (each curve is tagged with its neighbouring direction)."""
        for name, rep in self.buckets.representations():
            for direction, curve in rep.upper_curves().items():
                self._upper.setdefault(name, []).append((direction, curve))
            for direction, curve in rep.lower_curves().items():
                self._lower.setdefault(name, []).append((direction, curve))

    def upper_curves(self, method: str, direction: Optional[str] = None) -> Tuple:
        """The certified delta_up curves of ``method`` (one direction, or all)."""
        return tuple(c for d, c in self._upper.get(method, ())
                     if direction is None or d == direction)

    def lower_curves(self, method: str, direction: Optional[str] = None) -> Tuple:
        """The certified delta_low curves of ``method`` (one direction, or all)."""
        return tuple(c for d, c in self._lower.get(method, ())
                     if direction is None or d == direction)

    def with_lower_curves_of(self, other: "PrivacyBuckets") -> "PrivacyBuckets":
        """These bounds with ``other``'s lower curves joined in (a composition of the
        same history for other directions: every such curve is a valid lower bound)."""
        joined = copy.copy(self)
        joined._upper = dict(self._upper)
        joined._lower = {name: list(curves) for name, curves in self._lower.items()}
        for name, curves in other._lower.items():
            joined._lower[name] = joined._lower.get(name, []) + list(curves)
        return joined

    def _method_names(self, table, method, side) -> List[str]:
        if self.limit_reason is not None:
            # nothing was composed: a name any composition may hold is answered
            if method and method not in _QUERY_METHODS:
                raise ValueError(f"method must be one of {list(_QUERY_METHODS)}, "
                                 f"got {method!r}")
            return []
        if self.buckets is None:
            return []                    # (an empty history: every bound is 0)
        if not method:
            return list(table)
        if method not in table:
            raise ValueError(f"method must be one of the composed {side}-bound methods "
                             f"{sorted(table)}, got {method!r}")
        return [method]

    @property
    def grid_info(self) -> Optional[GridInfo]:
        if self.buckets is None:
            return None
        g = self.buckets.grid
        return GridInfo(g.factor, g.number_of_buckets)

    @property
    def methods(self) -> List[str]:
        return sorted(set(self._upper) | set(self._lower))

    @property
    def infinity_mass(self) -> float:
        if self.limit_reason is not None:
            return 1.0                   # (nothing certified: the trivial bound)
        if self.buckets is None:
            return 0.0
        return max(b.split.infinity_mass(d) for b, d in self._sources)

    def notes(self, delta: Optional[float] = None):
        """What a reader of bounds at ``delta`` should know (e.g. a heavy infinity bucket)."""
        if self.limit_reason is not None:
            return (self.limit_reason,)
        notes = []
        if delta is not None and self.buckets is not None and self.infinity_mass > 0.01 * delta:
            notes.append(
                f"the infinity atoms (distinguishing events, mass beyond the grid) plus "
                f"certified round-off carry {self.infinity_mass:.3g}, over 1% of "
                f"delta={delta:.3g}; the upper bound counts them in full")
        if self.buckets is not None and self.infinity_mass >= 1.0 and math.isinf(self.loss_cap):
            # (with a pure-DP bound, epsilon is certified at most it and delta 0 from it on)
            notes.append("bounds cannot be certified below the trivial ones (delta 1, epsilon "
                         "inf): the infinity mass plus certified round-off is 1, the losses "
                         "are beyond the grid's range")
        return tuple(notes)

    # -- delta ------------------------------------------------------------------------
    def delta_upper(self, epsilon, method: Optional[str] = None) -> np.ndarray:
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        names = self._method_names(self._upper, method, "upper")
        return self._answer("delta", lambda: self._delta_upper(eps, method, names),
                            lambda reason: np.where(eps >= self._cap(method), 0.0, 1.0))

    def _delta_upper(self, eps: np.ndarray, method: Optional[str], names) -> np.ndarray:
        if self.buckets is None:
            return np.zeros_like(eps)
        best = np.ones_like(eps)
        for name in names:
            curves = self.upper_curves(name)
            best = np.minimum(best, np.maximum.reduce([np.asarray(c(eps)) for c in curves]))
        if method is None:
            best = np.where(eps >= self.loss_cap, 0.0, best)
        return best

    def delta_lower(self, epsilon, method: Optional[str] = None) -> np.ndarray:
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        names = self._method_names(self._lower, method, "lower")
        return self._answer("delta", lambda: self._delta_lower(eps, names),
                            lambda reason: np.zeros_like(eps))

    def _delta_lower(self, eps: np.ndarray, names) -> np.ndarray:
        if self.buckets is None:
            return np.zeros_like(eps)
        best = np.zeros_like(eps)
        for name in names:
            for c in self.lower_curves(name):
                best = np.maximum(best, c(eps))
        return best

    def delta_bounds(self, epsilon, method: Optional[str] = None) -> DeltaBounds:
        """Certified delta bounds at one epsilon or an array of them (one pass)."""
        scalar = np.ndim(epsilon) == 0
        eps = np.atleast_1d(np.asarray(check_epsilons(epsilon), dtype=float))
        _check_method(method)
        up_method = method if method in (None, "split", "paper") else None
        low_names = self._method_names(self._lower, None if method in (None, "split")
                                       else method, "lower")
        up_names = self._method_names(self._upper, up_method, "upper")
        return self._answer(
            "delta", lambda: self._delta_bounds(eps, scalar, method, up_names, low_names),
            lambda reason: trivial_delta_bounds(eps[0] if scalar else eps, reason,
                                                self._cap(method)))

    def _delta_bounds(self, eps: np.ndarray, scalar: bool, method: Optional[str], up_names,
                      low_names) -> DeltaBounds:
        up = self._delta_upper(eps, method if method in (None, "split", "paper") else None,
                               up_names)
        lo = np.minimum(self._delta_lower(eps, low_names), up)
        notes = self._delta_notes(eps, up)
        if scalar:
            return DeltaBounds(float(eps[0]), float(lo[0]), float(up[0]),
                               method or "best", self.grid_info, notes)
        return DeltaBounds(eps, lo, up, method or "best", self.grid_info, notes)

    def _delta_notes(self, eps: np.ndarray, up: np.ndarray) -> Tuple[str, ...]:
        """Why a delta upper bound is the trivial 1, or is mostly the infinity atoms
        (``notes``' reasons, for delta queries)."""
        if self.buckets is None:
            return ()
        notes = list(self.notes())
        mass = self.infinity_mass
        if (eps >= self.loss_cap).any():
            notes.append(f"delta is 0 from epsilon {self.loss_cap:.6g} on, the history's "
                         "largest total privacy loss (every pair's loss is bounded: pure DP)")
        trivial = up >= 1.0
        if trivial.any():
            where = eps[trivial]
            notes.append(
                f"the upper bound is the trivial delta 1 at {int(trivial.sum())} of the "
                f"{len(eps)} epsilons (from {float(where.min()):.6g} to "
                f"{float(where.max()):.6g}): "
                + (f"the infinity atoms plus certified round-off carry {mass:.3g}"
                   if mass >= 0.01 else "the composed distributions barely overlap there"))
        elif (eps < self.loss_cap).any() and mass > 0.01 * float(np.min(up[eps < self.loss_cap])):
            # (the grid's upper bounds: from the pure-DP bound on, delta is 0)
            smallest = float(np.min(up[eps < self.loss_cap]))
            notes.append(
                f"the infinity atoms (distinguishing events, mass beyond the grid) plus "
                f"certified round-off carry {mass:.3g}, over 1% of the smallest upper bound "
                f"({smallest:.3g}); the upper bound counts them in full")
        return tuple(dict.fromkeys(notes))

    # -- epsilon ------------------------------------------------------------------------
    def epsilon_upper(self, delta: float, method: Optional[str] = None) -> float:
        delta = check_delta(delta)
        if self.buckets is None and self.limit_reason is None:
            return 0.0
        names = self._method_names(self._upper, method, "upper")
        return self._answer("epsilon", lambda: self._epsilon_upper(delta, method, names),
                            lambda reason: self._cap(method))

    def _epsilon_upper(self, delta: float, method: Optional[str], names) -> float:
        best = self._grid_epsilon_upper(delta, names)
        return min(best, self.loss_cap) if method is None else best

    def _grid_epsilon_upper(self, delta: float, names) -> float:
        """The smallest upper bound of the grid's methods ``names``."""
        best = math.inf
        for name in names:
            best = min(best, upper_epsilon(self.upper_curves(name), delta))
        return best

    def epsilon_lower(self, delta: float, method: Optional[str] = None) -> float:
        delta = check_delta(delta)
        if self.buckets is None and self.limit_reason is None:
            return 0.0
        names = self._method_names(self._lower, method, "lower")
        return self._answer("epsilon", lambda: self._epsilon_lower(delta, names),
                            lambda reason: 0.0)

    def _epsilon_lower(self, delta: float, names) -> float:
        best = 0.0
        for name in names:
            best = max(best, certified_lower_epsilon(self.lower_curves(name), delta))
        return best

    def epsilon_bounds(self, delta: float, method: Optional[str] = None) -> EpsilonBounds:
        """Certified bounds on the smallest epsilon with delta(epsilon) <= delta."""
        delta = check_delta(delta)
        _check_method(method)
        up_method = method if method in (None, "split", "paper") else None
        lo_method = method if method in (None, "grouped", "paper") else None
        up_names = self._method_names(self._upper, up_method, "upper")
        lo_names = self._method_names(self._lower, lo_method, "lower")
        return self._answer(
            "epsilon", lambda: self._epsilon_bounds(delta, method, up_method, up_names,
                                                    lo_names),
            lambda reason: trivial_epsilon_bounds(delta, reason, self._cap(method)))

    def _epsilon_bounds(self, delta: float, method: Optional[str], up_method, up_names,
                        lo_names) -> EpsilonBounds:
        if self.buckets is None:
            up = grid_up = 0.0
        elif up_method is None:
            grid_up = self._grid_epsilon_upper(delta, up_names)
            up = min(grid_up, self.loss_cap)
        else:
            up = grid_up = self._epsilon_upper(delta, up_method, up_names)
        if self.buckets is None:
            lo = 0.0
        else:
            lo = min(self._epsilon_lower(delta, lo_names), up) if self._lower else 0.0
        notes = self.notes(delta)
        if up < grid_up:
            # the pure-DP bound decided: the grid's notes are about its own bound
            notes = (f"the upper bound is the history's largest total privacy loss, "
                     f"{up:.6g} (every pair's loss is bounded: pure DP); the grid's own "
                     f"upper bound was {grid_up:.6g}",)
        elif math.isinf(up):
            notes += ("no epsilon could be certified for this delta: the infinity mass plus "
                      f"certified round-off ({self.infinity_mass:.3g}) is not below delta",)
        elif lo == 0.0 and up > 1.0 and (self._lower or self.buckets is None):
            notes += (_zero_lower_note(up),)
        return EpsilonBounds(delta, float(lo), float(up), method or "best", self.grid_info, notes)

    def curve(self, epsilons=None, num: int = 200) -> PrivacyCurve:
        """The eps-delta curve with both bounds (default: up to where delta_up reaches
        1e-10 or ten times the certified floor)."""
        if epsilons is not None:
            epsilons = check_epsilons(epsilons)

        def curve():
            nonlocal epsilons
            if epsilons is None:
                epsilons = self._curve_epsilons(num)
            eps = np.atleast_1d(np.asarray(epsilons, dtype=float))
            db = self._delta_bounds(eps, np.ndim(epsilons) == 0, None, list(self._upper),
                                    list(self._lower))
            return PrivacyCurve(np.asarray(db.epsilon), np.asarray(db.lower),
                                np.asarray(db.upper), "best", self.grid_info)

        def trivial(reason):
            eps = (np.linspace(0.0, 1.0, num) if epsilons is None
                   else np.asarray(epsilons, dtype=float))
            up = np.where(eps >= self.loss_cap, 0.0, 1.0)
            return PrivacyCurve(eps, np.zeros(eps.shape), up, "none", None, (reason,))

        return self._answer("the privacy curve", curve, trivial)

    def curve_epsilons(self, num: int = 200) -> np.ndarray:
        """The epsilons a default privacy curve is drawn at: ``num`` from 0 up to where
        delta_up reaches 1e-10 or ten times the certified floor (0 to 1 where no such
        epsilon is certified)."""
        return self._answer("the privacy curve's epsilons", lambda: self._curve_epsilons(num),
                            lambda reason: np.linspace(0.0, 1.0, num))

    def _curve_epsilons(self, num: int) -> np.ndarray:
        floor = max(1e-10, 10.0 * self.infinity_mass)
        top = (self._epsilon_upper(min(floor, 0.5), None, list(self._upper))
               if self.buckets is not None else 1.0)
        top = 1.0 if (math.isinf(top) or top == 0.0) else top
        return np.linspace(0.0, top, num)

    # -- attack risk (docs/attack-risk.md) --------------------------------------------
    def tradeoff_bounds(self, fpr=None, **kwargs):
        """Certified bounds on the f-DP trade-off curve at false-positive rates ``fpr``
        (default 1e-3, 1e-2, 0.1), the attacker's TPR there and the GDP mu bracket;
        see :func:`pb_accountant.tradeoff.tradeoff_bounds`."""
        from .tradeoff import tradeoff_bounds
        return tradeoff_bounds(self, fpr, **kwargs)


def compose(sequence, *, delta: Optional[float] = None,
            methods: Sequence[str] = DEFAULT_METHODS,
            number_of_buckets: Optional[int] = None, factor: Optional[float] = None,
            free_infty_budget: Optional[float] = None, growth_factor: float = 2.2,
            resolution: float = 0.015, leaf_resolution: float = 0.04, composer: Optional[Composer] = None) -> PrivacyBuckets:
    """Compose ``[(mechanism_pair, count), ...]`` and return certified bounds.

    ``delta`` sizes the grid so that the infinity atoms stay far below it; bounds for
    other deltas remain valid, only possibly looser.  ``methods`` picks the
    representations: "split" (always, tight upper), "grouped" (lower), "paper"
    (Definition 9 upper and Theorem 2 lower).

    Options the engine cannot compose this history with (a grid factor or product
    beyond the floating-point range, ENGINE_LIMITS) give an object whose every query
    answers the trivial bounds with the reason in ``notes`` and a RuntimeWarning.
    """
    if delta is not None:
        delta = check_delta(delta)
    options = BucketOptions(number_of_buckets, factor, free_infty_budget, growth_factor,
                            resolution, leaf_resolution)
    composer = composer or Composer(options)
    history = canonical_history(sequence)
    return answering_limits(
        lambda: PrivacyBuckets(composer.compose(history, delta, methods), delta, history),
        delta, history)


def answering_limits(build, delta: Optional[float] = None, history=None) -> PrivacyBuckets:
    """``build()``, a PrivacyBuckets, as handed to a user: an engine limit met while
    composing it or querying it answers the trivial bounds with the reason in
    ``notes`` (``PrivacyBuckets.answers_limits``; ``delta``: the target it composes for;
    ``history``: the canonical history, whose pure-DP bound the trivial answers keep)."""
    try:
        composed = build()
    except ENGINE_LIMITS as exc:
        return PrivacyBuckets.beyond_limits(exc, delta, history)
    composed.answers_limits = True
    return composed


#: relative width (up - low) / up an epsilon query aims for: a wider bracket is computed
#: again on a grid refined until its predicted width (which shrinks about 4-fold per
#: halving of both resolutions) meets it.  Issue 12 asks for widths below 0.05% and an
#: upper bound within 0.03% of dp_accounting's pessimistic PLD: up - eps <= up - low,
#: so the target sits below 0.05%.  (5e-4 halved the cost of per-epoch queries in a
#: training loop, whose default-grid widths sit near 4e-4, but left three random-suite
#: settings' upper bounds more than 0.03% above PLD.)
TARGET_WIDTH = 4e-4
#: errors a coarse first pass (COARSE_LEVEL or SHORT_HISTORY_LEVEL) may meet where the
#: default grids need not: a wider spacing reaches the floating-point range sooner (a
#: grid factor e^d beyond 1e308, a grouped row's weights) at epsilon of millions
COARSE_PASS_LIMITS = (OverflowError, FloatingPointError)
#: most halvings of the leaf and final resolutions a query may ask for
MAX_REFINEMENT = 2
#: leaf grids of at least this many buckets (a heavy tail far from a narrow bulk, as at
#: small sampling rates and small delta) make an epsilon query start on grids
#: COARSE_LEVEL halvings coarser: there the leaf's cost dominates, a coarse pass costs a
#: fraction of a full one and often meets the target by itself; where it does not, its
#: width tells how far to refine
COARSE_FIRST_LEAF_BUCKETS = 2 ** 15 - 2
COARSE_LEVEL = -2
#: where an epsilon query of a short history starts (``Composer.final_grid_coarsens``
#: False, a leaf of at least LEAF_BUCKETS_AT_FULL_RESOLUTION buckets): its answer sits on
#: the leaf grid, sized for the rounding of many steps it does not take.  Measured on
#: random-suite seeds 5 and 31 (docs/method.md §3): on COARSE_LEVEL's grids 11 of 20 such
#: answers were at least 16 times narrower than TARGET_WIDTH; on these grids 15 of the 20
#: met it, at a quarter of the buckets (the others refine by the h^2 law)
SHORT_HISTORY_LEVEL = -4
#: grids an epsilon query computes at most
MAX_PASSES = 3
#: a bracket at most this many times TARGET_WIDTH is refined split pair first
#: (``_refined_bounds``).  The split pair's rounding is most of a bracket's width: of
#: what one halving removed, its upper bound's share was 0.51-0.83 (median 0.65) in the
#: 48 refinements of random-suite seed 5, so one halving of its grids alone shrinks a
#: bracket to about (1 - 3/4 0.65) = 0.5 of itself.  Within twice the target that met it
#: in 25 of 27 of those refinements, beyond it in 1 of 21
SPLIT_FIRST = 2.0
#: the split pair's share of what a refinement removes from a bracket that a near miss
#: refined split pair first to 3/4 of the spacing counts on (``target_level``): the
#: least of those 48 refinements, not their median (SPLIT_FIRST is about
#: 1 / (1 - 3/4 0.65)), because where the split pair alone falls short there the
#: groups are composed too, which costs more than the halving it replaces
UPPER_SHARE = 0.51


def refinement_level(bounds: EpsilonBounds, aim: float = TARGET_WIDTH,
                     most: int = MAX_REFINEMENT) -> int:
    """Halvings of the resolutions predicted to bring ``bounds`` to ``aim``, at most
    ``most`` (0: none; never for an infinite or zero upper bound, which a finer grid
    does not fix)."""
    up, low = bounds.upper, bounds.lower
    if not (math.isfinite(up) and up > 0.0):
        return 0
    width = (up - low) / up
    if width <= TARGET_WIDTH:
        return 0
    return int(min(most, max(1, math.ceil(math.log(width / aim, 4.0)))))


def target_level(level: float, bounds: EpsilonBounds, split_first: bool = True,
                 between: bool = True) -> Optional[float]:
    """The level a bracket ``bounds`` computed on ``level``'s grids is refined to, or None
    where it meets TARGET_WIDTH (or has an infinite or zero upper bound).

    Levels are integers (halvings of both resolutions) and, from the default grids on,
    the levels between them, integers plus THREE_QUARTER_LEVEL (grids 3/4 as wide,
    ``Composer.refined``), up to MAX_REFINEMENT (coarse levels are cheap first passes,
    not answers).  From a start coarser than COARSE_LEVEL (SHORT_HISTORY_LEVEL) the
    prediction reaches over four levels and more, and is the least reliable there (a
    leaf halved on finer grids only, answers a few buckets wide): it keeps the integer
    levels, whose rounding up leaves more room (random-suite seed 5's #168, two steps:
    from -4 the level between predicted to meet the target missed it 4-fold, and the
    query ran out of passes).  ``between`` False: integer levels only (histories with
    loss atoms, whose rounding onto a ladder 3/4 as wide does not follow the h^2 law: a
    Laplace pair's atoms at multiples of 1/b lie on powers of two, not on 3/4 of them;
    Laplace(0.5), 20 steps, delta 1e-10: width 3.1e-5 on level 0, 4.0e-3 on 3/4 of its
    spacing).  A bracket's width shrinks as the square of the spacing, by
    4^-(L - level) on level L; the first level predicted to meet the target is taken, so
    a width a little above it refines to 3/4 of the spacing (1.8 times fewer buckets
    than a halving), not to half.  A near miss refined split pair first
    (``_refined_bounds``, ``split_first``) takes the level between two halvings only
    where the split pair alone is predicted to meet the target there (UPPER_SHARE of
    the bracket shrinking), else one halving: otherwise the groups would be composed
    there too, which costs more than the split pair alone one halving finer."""
    if refinement_level(bounds) == 0:
        return None
    width = bounds.width
    whole = level_parts(level)[0]
    between = between and level >= COARSE_LEVEL     # (deeper starts: integer levels)
    candidates = [c for k in range(whole, MAX_REFINEMENT + 1)
                  for c in ((k, k + THREE_QUARTER_LEVEL) if k >= 0 and between else (k,))
                  if level + 1e-9 < c <= MAX_REFINEMENT + 1e-9]
    if not candidates:
        return None
    if split_first and width <= SPLIT_FIRST * TARGET_WIDTH:
        shrink = 1.0 - (1.0 - 4.0 ** (level - candidates[0])) * UPPER_SHARE
        if width * shrink <= TARGET_WIDTH:
            return candidates[0]
        return min(level + 1, MAX_REFINEMENT)        # one halving, as always
    for c in candidates:
        if width * 4.0 ** (level - c) <= TARGET_WIDTH:
            return c
    return candidates[-1]


def _first_level(composer: Composer, history, delta: Optional[float]) -> int:
    """The level a query's first pass runs at, where the grids may be coarsened:
    SHORT_HISTORY_LEVEL where a leaf grid of the (canonical) ``history`` has at least
    LEAF_BUCKETS_AT_FULL_RESOLUTION buckets (``fills_half``, here and below) and the
    history is too short for its composition to coarsen the leaf spacing
    (``Composer.final_grid_coarsens``: the default grids then resolve the answer far
    beyond the target), COARSE_LEVEL where a leaf grid has at least
    COARSE_FIRST_LEAF_BUCKETS buckets, else 0.  Delta queries, which do not refine, start
    no coarser than COARSE_LEVEL (``adaptive_delta_bounds``)."""
    if not history or composer.refined(COARSE_LEVEL) is None:
        return 0
    largest = composer.largest_leaf(history, delta)
    if not fills_half(largest, LEAF_BUCKETS_AT_FULL_RESOLUTION):
        return 0
    if not composer.final_grid_coarsens(history, delta):
        return SHORT_HISTORY_LEVEL
    return COARSE_LEVEL if fills_half(largest, COARSE_FIRST_LEAF_BUCKETS) else 0


def adaptive_epsilon_bounds(composer: Composer, history, delta: float,
                            symmetric: bool = False, split_first: bool = True) -> EpsilonBounds:
    """Both bounds at ``delta``, on a grid as fine as the answer needs.

    The first grids are ``composer``'s, or coarser where a leaf grid is large
    (``_first_level``: COARSE_LEVEL or, for short histories, SHORT_HISTORY_LEVEL
    halvings; ``composer``'s own follow where that coarse pass certifies no finite
    upper bound or reaches the floating-point range, COARSE_PASS_LIMITS).  While the
    relative width exceeds TARGET_WIDTH the bounds are computed again on the first finer
    level predicted to meet it (``target_level``: a halving of the leaf and final
    resolutions, or 3/4 of the spacing; ``Composer.refined``: finer levels also have
    twice the bucket cap; a bracket near the target refines its upper bound alone
    first, ``_refined_bounds``), up to MAX_REFINEMENT halvings of
    ``composer``'s and MAX_PASSES grids, but not where no leaf grid would get finer
    (``_refines_no_leaf``); a bracket still too wide on the finest grids gets one more
    pass there with every long-tailed leaf at full resolution (``_unhalved``), if a pass
    remains; the best bounds of all are kept (each is certified).  The
    decisions depend on the history and delta alone, so every query of the same
    history gets the same answer.  A bracket left wider than TARGET_WIDTH carries a
    note saying why refinement stopped (``EpsilonBounds.notes``).
    ``symmetric``: the pairs are their own mirrors (the B||A groups repeat the A||B ones).
    ``split_first`` False: every refinement computes both bounds (for a caller that
    reads the lower bound alone, which the split pair's refinement leaves as it was).
    """
    delta = check_delta(delta)
    history = canonical_history(history)
    level = _first_level(composer, history, delta)
    coarse, passes = None, int(level < 0)
    if level < 0:
        try:
            coarse = _two_sided_bounds(composer.refined(level), history, delta, symmetric)
        except COARSE_PASS_LIMITS:
            pass     # the default grids below answer (they are finer than the coarse ones)
    if coarse is not None and math.isfinite(coarse.upper):
        best = coarse
    else:
        # no coarse start, or one whose grids could not certify an upper bound (its
        # windows left more than delta in the infinity atoms, or its spacing reached
        # the floating-point range): the default grids, before any refinement
        level = 0
        best = _two_sided_bounds(composer, history, delta, symmetric)
        if coarse is not None:
            best = _best_of(coarse, best)
        passes += 1
    stop = None                    # why refinement stopped short of the target width
    full_leaves = False            # whether the finest grids ran with unhalved leaves
    between = None                 # whether levels between two halvings may be used
    for _ in range(MAX_PASSES - passes):
        # (the cap is on the level reached: from a coarse start a query may go straight
        # to MAX_REFINEMENT instead of through a level its width already rules out)
        if level >= MAX_REFINEMENT:
            full = (None if full_leaves or refinement_level(best) == 0
                    else _unhalved(composer, level, history, delta))
            if full is not None:
                full_leaves = True
                best = _refined_bounds(best, full, history, delta, symmetric, split_first)
                continue
            stop = f"its grids are the finest allowed ({MAX_REFINEMENT} halvings)"
            break
        if between is None:
            between = not any(pair.has_loss_atoms() for pair, _ in history)
        target = target_level(level, best, split_first, between)
        if target is None:
            break
        finer = composer.refined(target)
        if finer is None:
            stop = "its grid is fixed by number_of_buckets or factor"
            break
        current = composer.refined(level)
        if _refines_no_leaf(current, finer, history, delta):
            stop = (f"every leaf grid is at the bucket cap ({current.options.max_buckets} "
                    "buckets: a long, thin tail, as at small sampling rates), so the next "
                    "level would refine the final grid alone")
            break
        level = target
        best = _refined_bounds(best, finer, history, delta, symmetric, split_first)
    else:
        stop = (f"its grids are the finest allowed ({MAX_REFINEMENT} halvings)"
                if level >= MAX_REFINEMENT else
                f"it has computed the most grids a query may ({MAX_PASSES})")
    return _with_width_note(best, stop)


def _upper_bound(composer: Composer, history, delta: float,
                 symmetric: bool = False) -> EpsilonBounds:
    """The split pair's certified upper bound at ``delta`` on ``composer``'s grids
    (lower bound 0: no group is composed).  The A||B groups' leaves are built with the
    split pair's, from the same masses, as ``_two_sided_bounds`` builds them, so that
    composing the groups afterwards computes no leaf masses again.  ``symmetric``: the
    pairs are their own mirrors (composed one direction at a time, A||B decides both)."""
    if _directions_apart(composer, history, delta, ("grouped-ab",)):
        return _by_direction(composer, history, delta, ("split",),
                             symmetric).epsilon_bounds(delta)
    return PrivacyBuckets(composer.compose(history, delta, ("split",),
                                           leaves=("grouped-ab",)),
                          delta, history).epsilon_bounds(delta)


def _refined_bounds(best: EpsilonBounds, finer: Composer, history, delta: float,
                    symmetric: bool, split_first: bool = True) -> EpsilonBounds:
    """``best`` tightened on ``finer``'s grids, composing the groups there only if they
    are needed.

    A bracket within SPLIT_FIRST times the target refines the split pair first: where
    its upper bound with ``best``'s lower bound meets TARGET_WIDTH, that bracket is the
    answer (both bounds are certified), at about half a pass.  Otherwise both bounds are
    computed on ``finer`` (``_two_sided_bounds``), its split pair a cache hit."""
    if not split_first or best.width > SPLIT_FIRST * TARGET_WIDTH:
        return _best_of(best, _two_sided_bounds(finer, history, delta, symmetric))
    upper = _best_of(best, _upper_bound(finer, history, delta, symmetric))
    if refinement_level(upper) == 0:
        return upper
    return _best_of(upper, _two_sided_bounds(finer, history, delta, symmetric))


def _unhalved(composer: Composer, level: int, history, delta: float) -> Optional[Composer]:
    """The grids of ``level`` with every long-tailed leaf at its full resolution
    (``BucketOptions.halve_long_tails`` False), where that changes a leaf grid of
    ``history``, else None.  Halving such a leaf's resolution costs about 1e-4 in
    epsilon where it was measured, but a bracket still too wide on the finest grids can
    owe its width to it (10^7 steps at sigma 1, q 1e-5, delta 1e-10: width 7.1e-4 with
    the halved leaf, 2.1e-4 without, at twice the pass's cost)."""
    full = composer.refined(level, halve_long_tails=False)
    if full is None or full.leaf_grids(history, delta) == composer.refined(level).leaf_grids(
            history, delta):
        return None
    return full


#: how the note on a bracket left wider than TARGET_WIDTH begins (``_with_width_note``)
WIDTH_NOTE = "the relative width"


def _with_width_note(bounds: EpsilonBounds, stop: Optional[str]) -> EpsilonBounds:
    """``bounds`` with a note saying why its bracket is wider than TARGET_WIDTH, where it
    is (both bounds finite and positive) and refinement stopped for ``stop``."""
    if (stop is None or not (bounds.lower > 0.0 and math.isfinite(bounds.upper))
            or bounds.width <= TARGET_WIDTH):
        return bounds
    note = (f"{WIDTH_NOTE} {bounds.width:.1e} is above the {TARGET_WIDTH:g} the engine "
            f"aims for: the query stopped refining because {stop}")
    return dataclasses.replace(bounds, notes=bounds.notes + (note,))


def upper_only(bounds: EpsilonBounds) -> EpsilonBounds:
    """``bounds`` as a query for the upper bound alone answers it: lower 0, and no
    note about a width it no longer reports."""
    return dataclasses.replace(bounds, lower=0.0, notes=tuple(
        n for n in bounds.notes if not n.startswith(WIDTH_NOTE)))


def _refines_no_leaf(current: Composer, finer: Composer, history, delta: float) -> bool:
    """True where every leaf grid of ``history`` is already at the bucket cap
    (``max_buckets``; ``fills_half``) on ``current``'s grids and the same on ``finer``'s:
    refining would change the final grid alone, while such a history's width comes from
    its leaves' rounding (a capped leaf is coarser, relative to its spread, than its
    ``leaf_resolution``).  The finer levels share one cap (twice the default's,
    ``Composer.refined``), so a leaf at that cap on level 1 stays as coarse on level 2."""
    now = current.leaf_grids(history, delta)
    cap = current.options.max_buckets
    return (bool(now) and all(fills_half(g.number_of_buckets, cap) for g in now)
            and now == finer.leaf_grids(history, delta))


#: the smallest delta class a delta query composes for (the brief's range ends here)
SMALLEST_DELTA_CLASS = 1e-15
#: relative width (up - low) / up above which a delta bracket with a positive lower
#: bound is computed once more, on the level its width predicts to meet this (a
#: bracket's width shrinks about 4-fold per halving, ``target_level``), up to
#: MAX_REFINEMENT.  A delta query's first grids are COARSE_LEVEL halvings coarser where
#: a leaf grid is large: sigma 1, q 1e-3, 600,000 steps at epsilon 5 answered [9.355e-7,
#: 1.105e-6] (15% wide) in 0.1 s, while its epsilon query at delta 1e-6 already
#: certified delta(5) <= 1e-6; on the default grids [9.853e-7, 9.957e-7] in 0.4 s.
DELTA_TARGET_WIDTH = 1e-2


def _delta_level(start: int, lower: float, upper: float) -> int:
    """The level a delta bracket [lower, upper] found on level ``start`` is computed again
    on (``start`` itself: it is not), a function of the bracket alone."""
    if not (lower > 0.0 and math.isfinite(upper)) or start >= MAX_REFINEMENT:
        return start
    width = (upper - lower) / upper
    if width <= DELTA_TARGET_WIDTH:
        return start
    return min(MAX_REFINEMENT, start + math.ceil(math.log(width / DELTA_TARGET_WIDTH, 4.0)))


def adaptive_delta_bounds(composer: Composer, history, epsilon,
                          methods: Sequence[str] = DEFAULT_METHODS) -> DeltaBounds:
    """Bounds on delta at ``epsilon`` (one or an array), sized for the answer.

    A delta query does not know its answer's size in advance, so it first composes for
    the default delta class; the infinity mass and round-off that class allows leave an
    absolute floor near 1e-14.  Where an upper bound found lies below the class, the
    history is composed again for the class of that answer (at least
    SMALLEST_DELTA_CLASS), and where a bracket with a positive lower bound is wider than
    DELTA_TARGET_WIDTH, on the finer level its width predicts (``_delta_level``); each
    entry of an array is composed again for its own class and level, so that it is
    bitwise its scalar query, whatever else is asked with it, and keeps the tighter of
    its two certified brackets.  Large leaf grids start COARSE_LEVEL halvings coarser,
    as epsilon queries do (the default grids answer where that start reaches the
    floating-point range, COARSE_PASS_LIMITS).  The decisions depend on the history and
    epsilon alone.
    """
    history = canonical_history(history)
    # (no coarser than COARSE_LEVEL: a delta query answers on its first grids)
    level = max(_first_level(composer, history, None), COARSE_LEVEL)
    start = composer.refined(level)
    try:
        first = compose_history(start, history, None, methods).delta_bounds(epsilon)
    except COARSE_PASS_LIMITS:
        if start is composer:
            raise
        start, level = composer, 0  # a coarse start beyond the floating-point range
        first = compose_history(start, history, None, methods).delta_bounds(epsilon)
    # Each epsilon's bracket is tightened on the grids of its own answer's class and
    # width, as a query of that epsilon alone would be: an entry of an array (or of a
    # privacy curve) gets bitwise what the scalar query gets, whatever else is asked
    upper = np.atleast_1d(np.asarray(first.upper, dtype=float))
    lower = np.atleast_1d(np.asarray(first.lower, dtype=float))
    targets = np.maximum(upper, SMALLEST_DELTA_CLASS)
    by_pass: Dict[Tuple[float, int], List[int]] = {}
    for i in np.flatnonzero((upper > 0.0) & np.isfinite(upper)):
        cls = delta_class(float(targets[i]))
        finer = _delta_level(level, float(lower[i]), float(upper[i]))
        if finer > level and composer.refined(finer) is None:
            finer = level            # (fixed grids: number_of_buckets or factor given)
        if cls < DEFAULT_DELTA_CLASS or finer > level:
            by_pass.setdefault((min(cls, DEFAULT_DELTA_CLASS), finer), []).append(int(i))
    if not by_pass:
        return first
    scalar = np.ndim(first.upper) == 0
    eps = np.atleast_1d(np.asarray(first.epsilon, dtype=float))
    up = upper.copy()
    low = lower.copy()
    reported, notes = first, ()
    for k, (cls, finer) in enumerate(sorted(by_pass)):
        idx = np.asarray(by_pass[(cls, finer)])
        target = (float(targets[idx].min()) if cls < DEFAULT_DELTA_CLASS else None)
        grids = start if finer == level else composer.refined(finer)
        try:
            composed = compose_history(grids, history, target, methods)
            # (the first pass's composition reports the grid and notes, over every
            # epsilon, as a single composition for the smallest answer did)
            second = composed.delta_bounds(epsilon if k == 0 else eps[idx])
        except (MemoryError, OverflowError, FloatingPointError) as exc:
            # the first answer stands for these entries (certified); say why it was not
            # tightened
            where = (f"for {target:.1e}" if target is not None
                     else f"on grids {finer - level} halvings finer")
            notes += (f"delta bounds from the first grids: composing {where} reached an "
                      f"engine limit ({type(exc).__name__})",)
            continue
        if k == 0:
            reported = second
        s_up = np.atleast_1d(np.asarray(second.upper, dtype=float))
        s_low = np.atleast_1d(np.asarray(second.lower, dtype=float))
        if k == 0:
            s_up, s_low = s_up[idx], s_low[idx]
        up[idx] = np.minimum(up[idx], s_up)
        low[idx] = np.minimum(np.maximum(low[idx], s_low), up[idx])
    if scalar:
        return dataclasses.replace(reported, lower=float(low[0]), upper=float(up[0]),
                                   notes=reported.notes + notes)
    return dataclasses.replace(reported, lower=low, upper=up, notes=reported.notes + notes)


#: how the note on a lower bound of 0 beside a large upper bound begins
ZERO_LOWER_NOTE = "the certified lower bound is 0"


def _zero_lower_note(upper: float) -> str:
    return (f"{ZERO_LOWER_NOTE} while the upper bound is {upper:.6g}: the lower bound's "
            "certified error allowance exceeds delta at losses this large (a known limit "
            "of the grouped buckets); the upper bound is unaffected")


def _best_of(bounds: EpsilonBounds, better: EpsilonBounds) -> EpsilonBounds:
    """The tighter of two certified brackets of the same query (``better``: the one on
    the finer grid, whose grid and notes are reported, unless it certified no finite
    upper bound where ``bounds`` did: its notes then say why none could be certified,
    which is not true of the answer, and ``bounds``' grid and notes are reported; a note
    on a lower bound of 0 names the upper bound reported)."""
    if math.isinf(better.upper) and math.isfinite(bounds.upper):
        bounds, better = better, bounds
    up = min(bounds.upper, better.upper)
    low = min(max(bounds.lower, better.lower), up)
    notes = tuple(n for n in better.notes if not n.startswith(ZERO_LOWER_NOTE))
    if low == 0.0 and up > 1.0 and any(n.startswith(ZERO_LOWER_NOTE)
                                       for n in bounds.notes + better.notes):
        notes += (_zero_lower_note(up),)
    return dataclasses.replace(better, lower=float(low), upper=float(up), notes=notes)


#: a composition per direction (``Composer.compose(..., focus=...)``) where the predicted
#: range of both rows together is at least this many times the larger range of one row
#: alone (``Composer.direction_spans``).  Two compositions on the narrow grids replace
#: one on the wide grid, and a history of many segments pays its leaves' products twice;
#: grids come in powers of two and the ranges are a normal approximation.  Measured on
#: seed 31 (both bounds, from scratch): ratio 7.1 (#28, 176 segments) 2.9 s joint,
#: 4.5 s by direction; 7.6 (#30) 1.5 s, 0.8 s; 9.1 (#196) 1.4 s, 1.1 s; 17 (#66) 1.8 s,
#: 0.56 s; 49 (#82) 4.9 s, 0.48 s.  Only the cost depends on it: both ways are certified.
DIRECTIONS_APART = 8.0
#: the leaves' prediction (``Composer.direction_spans``) is skipped where the pairs'
#: probes (``Composer.predicted_spans``) put the ratio below this fraction of
#: DIRECTIONS_APART: the probes' moments are estimates, and they may only decide the
#: clear cases
PROBE_MARGIN = 0.5


def _directions_apart(composer: Composer, history, delta: float,
                      groups: Sequence[str] = ()) -> bool:
    """Whether ``history`` composes faster one direction at a time: its rows' predicted
    ranges lie far apart (DIRECTIONS_APART), on grids the options do not fix.
    ``groups``: the grouped leaves the composition that follows reads, built with the
    split leaves from the same masses where the prediction builds leaves (where they
    would not fit in the cache, the pairs' probes decide the clear cases without them,
    PROBE_MARGIN)."""
    if composer.options.number_of_buckets is not None:
        return False
    if not composer.leaves_fit(history, delta, groups):
        # leaves built here would be evicted before the composition reads them, and
        # built again: the pairs' probes first (no leaf built), and where even they put
        # the ranges less than half as far apart, the answer is no.  (Where the leaves
        # fit, building them all here, ahead of the composition, measured faster than
        # building them between its products.)
        joint, ab, ba = composer.predicted_spans(history, delta)
        if joint < PROBE_MARGIN * DIRECTIONS_APART * max(ab, ba, 0.0):
            return False
    joint, ab, ba = composer.direction_spans(history, delta, groups)
    return joint >= DIRECTIONS_APART * max(ab, ba, 0.0) and joint > 0.0


def _by_direction(composer: Composer, history, delta: Optional[float], methods,
                  symmetric: bool = False) -> PrivacyBuckets:
    """``methods`` (among split and grouped) composed once per direction, each on grids
    that follow that direction's row (``Composer.compose(..., focus=...)``), joined
    (``PrivacyBuckets.of_directions``); ``symmetric``: A||B alone decides both."""
    grouped = "grouped" in methods

    def one(direction):
        wanted = ("split",) + ((f"grouped-{direction}",)
                               if grouped or f"grouped-{direction}" in methods else ())
        return PrivacyBuckets(composer.compose(history, delta, wanted, direction), delta,
                              history)

    return PrivacyBuckets.of_directions(one("ab"), None if symmetric else one("ba"))


def compose_history(composer: Composer, history, delta: Optional[float] = None,
                    methods: Sequence[str] = DEFAULT_METHODS) -> PrivacyBuckets:
    """Certified bounds for ``history`` on ``composer``'s grids: one direction at a time
    where its rows lie far apart and only the split pair and the groups are asked for
    (``.buckets`` is then the A||B composition), else both together (as
    :func:`compose`)."""
    history = canonical_history(history)
    if set(methods) <= _FOCUSABLE and _directions_apart(
            composer, history, delta,
            tuple(f"grouped-{d}" for d in grouped_directions(methods))):
        return _by_direction(composer, history, delta, methods)
    return PrivacyBuckets(composer.compose(history, delta, methods), delta, history)


#: methods a composition per direction can give (the paper's buckets are composed jointly)
_FOCUSABLE = frozenset({"split", "grouped", "grouped-ab", "grouped-ba"})


def _two_sided_bounds(composer: Composer, history, delta: float,
                      symmetric: bool) -> EpsilonBounds:
    """Both bounds at ``delta`` on ``composer``'s grids, paying for the B||A lower bound
    only when it can matter.

    The lower bound starts from the A||B groups alone.  If the split pair's certified
    B||A upper bound is already <= delta at the epsilon found, no B||A group can raise
    it (their lower bound lies below that upper bound for every larger epsilon), so the
    answer equals the two-direction one; otherwise the B||A groups are composed too.
    """
    if _directions_apart(composer, history, delta, ("grouped-ab",)):
        return _by_direction(composer, history, delta, ("split", "grouped"),
                             symmetric).epsilon_bounds(delta)
    first = PrivacyBuckets(composer.compose(history, delta, ("split", "grouped-ab")), delta,
                           history)
    if symmetric:
        return first.epsilon_bounds(delta)
    bounds = first.epsilon_bounds(delta)
    if first.buckets is None or math.isinf(bounds.lower):
        return bounds
    split_ba = first.upper_curves("split", "ba")
    if max(float(c(bounds.lower)) for c in split_ba) <= delta:
        return bounds
    second = PrivacyBuckets(composer.compose(history, delta, ("split", "grouped-ba")), delta,
                            history)
    return first.with_lower_curves_of(second).epsilon_bounds(delta)


def epsilon_bounds(sequence, delta: float, **options) -> EpsilonBounds:
    """Certified bounds on epsilon at ``delta`` for ``[(pair, count), ...]`` (both
    directions, both bounds); ``options`` as for :func:`compose`."""
    delta = check_delta(delta)
    composer = Composer(BucketOptions(**options))
    history = canonical_history(sequence)
    try:
        return adaptive_epsilon_bounds(composer, history, delta)
    except ENGINE_LIMITS as exc:
        # (as the accountant answers: the valid looser bounds, the reason, a warning)
        cap = history_loss_cap(history)
        reason = engine_limit_reason(exc, "the upper bound inf is valid but uninformative"
                                     if math.isinf(cap) else "the bounds are valid but loose")
        warnings.warn(f"pb accountant could not certify epsilon: {reason}", RuntimeWarning,
                      stacklevel=2)
        return trivial_epsilon_bounds(delta, reason, cap)
