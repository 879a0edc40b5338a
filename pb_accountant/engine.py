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

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from ._validation import check_delta, check_epsilons
from .buckets import LABEL_SLACK
from .composition import BucketOptions, BucketSet, Composer, canonical_history
from ._fp import UNIT_ROUNDOFF
from .queries import ThresholdSum, certified_lower_epsilon, certified_upper_epsilon
from .results import DeltaBounds, EpsilonBounds, GridInfo, PrivacyCurve

_U = UNIT_ROUNDOFF
DEFAULT_METHODS = ("split", "grouped")


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


class _PaperUpper:
    """Definition 9 for one direction, vectorised over eps with cumulative sums."""

    def __init__(self, pb):
        self.pb = pb
        n = pb.grid.number_of_buckets
        t = pb.grid.losses
        A, V, R = pb.rows
        e = np.exp(-np.maximum(t, 0.0))
        self.n = n
        self.tail_A = np.concatenate((np.cumsum(A[::-1])[::-1], [0.0]))
        self.tail_Ae = np.concatenate((np.cumsum((A * e)[::-1])[::-1], [0.0]))
        self.tail_Re = np.concatenate((np.cumsum((R * e)[::-1])[::-1], [0.0]))
        self.const = pb.a_inf + pb.error[0] + pb.error[2]
        self.slack = 8.0 * (2 * n + 3) * _U

    def __call__(self, eps):
        eps = np.atleast_1d(np.asarray(eps, dtype=float))
        pb, n = self.pb, self.n
        d = pb.grid.log_factor
        j = np.ceil(eps / d * (1.0 - 1e-15)).astype(np.int64)
        j = np.where(j * d < eps, j + 1, j)          # f^j >= e^eps exactly
        o = pb.grid.offset
        pos = np.clip(j - o + n, 0, 2 * n + 1)
        pos_u = np.clip(j - o + n + pb.u, 0, 2 * n + 1)
        with np.errstate(over="ignore", invalid="ignore"):
            inner = (self.tail_Ae[pos] - self.tail_Ae[pos_u]) + self.tail_Re[pos_u]
            body = self.tail_A[pos] - np.exp(eps) * inner
        body = np.where(inner > 0, body, self.tail_A[pos])
        val = self.const + np.maximum(body, 0.0) + self.slack * self.tail_A[pos]
        return np.minimum(val, 1.0)

    def epsilon(self, delta: float) -> float:
        d = self.pb.grid.log_factor
        n = self.n
        if self(0.0)[0] <= delta:
            return 0.0
        top = n + self.pb.grid.offset
        if top < 1:
            return math.inf
        ends = np.arange(1, top + 1) * d
        vals = self(ends)
        ok = np.nonzero(vals <= delta)[0]
        if len(ok) == 0:
            return math.inf
        j = int(ok[0]) + 1
        lo, hi = (j - 1) * d, j * d
        # inside (t_{j-1}, t_j] the bound is K - e^eps Q; bisect for the crossing
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            if self(mid)[0] <= delta:
                hi = mid
            else:
                lo = mid
        return float(hi) if self(hi)[0] <= delta else float(j * d)


class PrivacyBuckets:
    """Certified two-sided bounds for one composed sequence of mechanism pairs."""

    def __init__(self, buckets: Optional[BucketSet], delta_target: Optional[float] = None):
        self.buckets = buckets
        self.delta_target = delta_target
        self._upper: Dict[str, list] = {}
        self._lower: Dict[str, list] = {}
        if buckets is not None:
            self._build()

    # -- the curves of each method -----------------------------------------------------
    def _build(self):
        bs = self.buckets
        t = bs.grid.losses
        s = bs.split
        A, B = s.rows
        # every B-mass weight is passed factored (r, u: q = r e^{-u}): queries shift
        # the exponent, so grids may reach any loss (docs/floating-point.md)
        self._upper["split"] = [
            ThresholdSum.build(t, A, A, t, s.a_inf + s.error[0], True),
            ThresholdSum.build(-t, B, B, -t, s.b_minf + s.error[1], True)]
        if bs.grouped is not None:
            g = bs.grouped
            k = LABEL_SLACK
            w = math.exp(k)
            curves = []
            with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
                if "ab" in g.directions:
                    gA, gC = g.row("A"), g.row("C")
                    th = np.minimum(t + k, t + _log(gA) - _log(gC))
                    curves.append(ThresholdSum.build(
                        np.nan_to_num(th, nan=-np.inf), gA, gC, t,
                        g.a_pinf - (g.row_error("A") + w * g.row_error("C")), False))
                if "ba" in g.directions:
                    gB, gD = g.row("B"), g.row("D")
                    th = np.minimum(-t + k, -t + _log(gB) - _log(gD))
                    curves.append(ThresholdSum.build(
                        np.nan_to_num(th, nan=-np.inf), gB, gD, -t,
                        g.b_minf - (g.row_error("B") + w * g.row_error("D")), False))
            self._lower["grouped"] = curves
        if bs.paper is not None:
            self._upper["paper"] = [_PaperUpper(p) for p in bs.paper]
            lows = []
            for p in bs.paper:
                pA, pV, _ = p.rows
                with np.errstate(invalid="ignore", divide="ignore"):
                    th = np.nan_to_num(np.minimum(t, t + _log(pA) - _log(pV)), nan=-np.inf)
                lows.append(ThresholdSum.build(th, pA, pV, t,
                                               -(p.error[0] + p.error[1]), False))
            self._lower["paper"] = lows

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
        if self.buckets is None:
            return 0.0
        s = self.buckets.split
        return max(s.a_inf + s.error[0], s.b_minf + s.error[1])

    def _notes(self, delta: Optional[float] = None):
        notes = []
        if delta is not None and self.buckets is not None and self.infinity_mass > 0.01 * delta:
            notes.append(
                f"the infinity atoms (distinguishing events, mass beyond the grid) plus "
                f"certified round-off carry {self.infinity_mass:.3g}, over 1% of "
                f"delta={delta:.3g}; the upper bound counts them in full")
        return tuple(notes)

    # -- delta ------------------------------------------------------------------------
    def delta_upper(self, epsilon, method: Optional[str] = None) -> np.ndarray:
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        if self.buckets is None:
            return np.zeros_like(eps)
        names = [method] if method else list(self._upper)
        best = np.ones_like(eps)
        for name in names:
            curves = self._upper[name]
            best = np.minimum(best, np.maximum.reduce([np.asarray(c(eps)) for c in curves]))
        return best

    def delta_lower(self, epsilon, method: Optional[str] = None) -> np.ndarray:
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        if self.buckets is None:
            return np.zeros_like(eps)
        names = [method] if method else list(self._lower)
        best = np.zeros_like(eps)
        for name in names:
            for c in self._lower[name]:
                best = np.maximum(best, c(eps))
        return best

    def delta_bounds(self, epsilon, method: Optional[str] = None) -> DeltaBounds:
        """Certified delta bounds at one epsilon or an array of them (one pass)."""
        scalar = np.ndim(epsilon) == 0
        eps = np.atleast_1d(np.asarray(check_epsilons(epsilon), dtype=float))
        lo = self.delta_lower(eps, None if method in (None, "split") else method)
        up = self.delta_upper(eps, method if method in (None, "split", "paper") else None)
        lo = np.minimum(lo, up)
        if scalar:
            return DeltaBounds(float(eps[0]), float(lo[0]), float(up[0]),
                               method or "best", self.grid_info)
        return DeltaBounds(eps, lo, up, method or "best", self.grid_info)

    # -- epsilon ------------------------------------------------------------------------
    def epsilon_upper(self, delta: float, method: Optional[str] = None) -> float:
        delta = check_delta(delta)
        if self.buckets is None:
            return 0.0
        names = [method] if method else list(self._upper)
        best = math.inf
        for name in names:
            if name == "paper":
                eps = max(c.epsilon(delta) for c in self._upper[name])
            else:
                eps = certified_upper_epsilon(self._upper[name], delta)
            best = min(best, eps)
        return best

    def epsilon_lower(self, delta: float, method: Optional[str] = None) -> float:
        delta = check_delta(delta)
        if self.buckets is None:
            return 0.0
        names = [method] if method else list(self._lower)
        best = 0.0
        for name in names:
            best = max(best, certified_lower_epsilon(self._lower[name], delta))
        return best

    def epsilon_bounds(self, delta: float, method: Optional[str] = None) -> EpsilonBounds:
        """Certified bounds on the smallest epsilon with delta(epsilon) <= delta."""
        delta = check_delta(delta)
        up_method = method if method in (None, "split", "paper") else None
        lo_method = method if method in (None, "grouped", "paper") else None
        up = self.epsilon_upper(delta, up_method)
        lo = min(self.epsilon_lower(delta, lo_method), up) if self._lower or self.buckets is None else 0.0
        notes = self._notes(delta)
        if math.isinf(up):
            notes += ("no epsilon could be certified for this delta: the infinity mass plus "
                      f"certified round-off ({self.infinity_mass:.3g}) is not below delta",)
        return EpsilonBounds(delta, float(lo), float(up), method or "best", self.grid_info, notes)

    def curve(self, epsilons=None, num: int = 200) -> PrivacyCurve:
        """The eps-delta curve with both bounds (default: up to where delta_up reaches
        1e-10 or ten times the certified floor)."""
        if epsilons is None:
            floor = max(1e-10, 10.0 * self.infinity_mass)
            top = self.epsilon_upper(min(floor, 0.5)) if self.buckets is not None else 1.0
            top = 1.0 if (math.isinf(top) or top == 0.0) else top
            epsilons = np.linspace(0.0, top, num)
        db = self.delta_bounds(np.asarray(epsilons, dtype=float))
        return PrivacyCurve(np.asarray(db.epsilon), np.asarray(db.lower),
                            np.asarray(db.upper), "best", self.grid_info)


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
    """
    if delta is not None:
        delta = check_delta(delta)
    options = BucketOptions(number_of_buckets, factor, free_infty_budget, growth_factor,
                            resolution, leaf_resolution)
    composer = composer or Composer(options)
    history = canonical_history(sequence)
    return PrivacyBuckets(composer.compose(history, delta, methods), delta)


def adaptive_epsilon_bounds(composer: Composer, history, delta: float) -> EpsilonBounds:
    """Both bounds at ``delta``, paying for the B||A lower bound only when it can matter.

    The lower bound starts from the A||B groups alone.  If the split pair's certified
    B||A upper bound is already <= delta at the epsilon found, no B||A group can raise
    it (their lower bound lies below that upper bound for every larger epsilon), so the
    answer equals the two-direction one; otherwise the B||A groups are composed too.
    """
    delta = check_delta(delta)
    history = canonical_history(history)
    first = PrivacyBuckets(composer.compose(history, delta, ("split", "grouped-ab")), delta)
    bounds = first.epsilon_bounds(delta)
    if first.buckets is None or math.isinf(bounds.lower):
        return bounds
    split_ba = first._upper["split"][1]
    if float(split_ba(bounds.lower)) <= delta:
        return bounds
    second = PrivacyBuckets(composer.compose(history, delta, ("split", "grouped-ba")), delta)
    first._lower["grouped"] = first._lower["grouped"] + second._lower["grouped"]
    return first.epsilon_bounds(delta)


def epsilon_bounds(sequence, delta: float, **options) -> EpsilonBounds:
    """Certified bounds on epsilon at ``delta`` for ``[(pair, count), ...]`` (both
    directions, both bounds); ``options`` as for :func:`compose`."""
    delta = check_delta(delta)
    return adaptive_epsilon_bounds(Composer(BucketOptions(**options)), sequence, delta)
