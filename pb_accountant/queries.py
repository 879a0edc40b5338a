"""From bucket rows to certified delta(eps) and eps(delta) (docs/method.md §7).

Every bound used here has the form

    F(eps) = const + sum over i with theta_i > eps of (p_i - e^eps q_i)

with each included term >= 0, so F is non-increasing and, between two consecutive
thresholds theta, equal to (K - e^eps Q): a whole array of eps is one pass of
cumulative sums (with a certified allowance for their round-off), and the crossing
F(eps) = delta has a closed form.  The returned epsilons are re-checked with the very
function ``delta_bounds`` reports, at the very point returned.  ``PaperUpper`` is the
paper's Definition 9 bound (docs/method.md §5), searched by bisection instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._fp import LEAST_NORMAL, LEAST_NORMAL_LOG, LEAST_SUBNORMAL, UNIT_ROUNDOFF

_U = UNIT_ROUNDOFF


#: width (in loss) of the blocks that share one exponent shift; e^{eps - s} <= e^W
_BLOCK_WIDTH = 256.0
#: absolute allowance per term for underflow in shifted sums (each such error is at
#: most 2^-1074 times e^{W + 1} < 1e-210; see docs/floating-point.md)
_UNDERFLOW_PER_TERM = 1e-200


@dataclass(frozen=True, eq=False)
class ThresholdSum:
    """F(eps) = const + sum_{theta_i > eps} (p_i - e^eps q_i), upper or lower side.

    q_i is given factored as r_i e^{-u_i} (u_i the loss the B-mass is scaled from), so
    no e^{t} is ever formed: the terms are grouped into blocks of thresholds at most
    ``_BLOCK_WIDTH`` wide and each block's tail sums are kept scaled by e^{s_b}
    (s_b its smallest threshold).  A query evaluates e^{eps - s_b} (eps - s_b <= W),
    so epsilons of any size are answered without overflow (docs/floating-point.md).
    All tables are built once, in the constructor: the object is immutable.
    """

    theta: np.ndarray     # ascending
    P: np.ndarray         # P[k] = sum_{i >= k} p_i
    Qs: np.ndarray        # Qs[k] = e^{s_b(k)} sum_{i >= k} q_i
    block: np.ndarray     # block of position k (k = len: the last block, Qs = 0)
    shift: np.ndarray     # s_b
    const: float
    upper: bool           # True: round-off is added; False: subtracted and clamped at 0
    slack_factor: float   # relative round-off allowance on P[k]
    absolute: float       # underflow allowance

    @staticmethod
    def build(theta, p, r, u, const, upper, relative: float = 0.0) -> "ThresholdSum":
        """Terms p_i - e^eps r_i e^{-u_i} for eps < theta_i; needs theta_i <= u_i + 0.05
        (every included term then has e^eps q_i <= e^0.05 p_i).

        ``relative``: entrywise relative error of the rows, in units of the included
        p-mass (r_p + e^0.05 r_q, docs/floating-point.md); it is added to the
        round-off allowance on P, so it costs in proportion to the tail that decides
        delta, never a fixed floor."""
        theta = np.asarray(theta, dtype=float)
        p = np.asarray(p, dtype=float)
        r = np.asarray(r, dtype=float)
        u = np.asarray(u, dtype=float)
        if (np.isnan(p).any() or np.isnan(r[p > 0]).any() or np.isnan(u[p > 0]).any()
                or math.isnan(const) or math.isnan(relative)
                or (upper and np.isnan(theta[p > 0]).any())):
            # NaN compares False: it would silently drop a term or a constant
            raise RuntimeError("internal error: NaN in a ThresholdSum's masses, weights or "
                               "constant")
        keep = (p > 0) & (theta > -np.inf)
        theta, p, r, u = theta[keep], p[keep], r[keep], u[keep]
        if not upper:
            # a lower threshold only drops terms (the bound gets smaller: still sound)
            theta = np.minimum(theta, u + 0.05)
        elif np.any(theta > u + 0.05):
            raise RuntimeError("ThresholdSum: an upper-bound threshold exceeds its loss")
        order = np.argsort(theta, kind="stable")
        theta, p, r, u = theta[order], p[order], r[order], u[order]
        m = len(theta)
        if m:
            ids = np.floor((theta - theta[0]) / _BLOCK_WIDTH)
            starts = np.concatenate(([0], np.flatnonzero(np.diff(ids)) + 1))
        else:
            starts = np.zeros(0, dtype=np.int64)
        ends = np.concatenate((starts[1:], [m])).astype(np.int64)
        shift = theta[starts] if m else np.zeros(1)
        # each term's gap to its block's shift, s_b - u_i (the exponent of its weight)
        gap = np.repeat(shift[: len(starts)], ends - starts) - u
        if not upper and m:
            # a B-weight r e^{s_b - u} whose factor e^{s_b - u} leaves the normal range
            # would lose its q-part to underflow, and on the lower side r may be huge
            # (up to 1e300), so that loss may be any size: such a term is dropped (delta
            # is at least the sum of max(p - e^eps q, 0) over any subset of the groups,
            # paper Theorem 2, so a lower bound stays one without it)
            far = gap < LEAST_NORMAL_LOG
            if far.any():
                p = np.where(far, 0.0, p)
                r = np.where(far, 0.0, r)
        P = np.concatenate((np.cumsum(p[::-1])[::-1], [0.0]))
        Qs = np.zeros(m + 1)
        block = np.zeros(m + 1, dtype=np.int64)
        tail = 0.0                         # sum of later blocks, scaled by e^{s_{b+1}}
        with np.errstate(under="ignore"):
            for b in range(len(starts) - 1, -1, -1):
                lo, hi = int(starts[b]), int(ends[b])
                w = r[lo:hi] * np.exp(np.minimum(shift[b] - u[lo:hi], 0.05))
                later = tail * math.exp(shift[b] - shift[b + 1]) if b + 1 < len(starts) else 0.0
                Qs[lo:hi] = np.cumsum(w[::-1])[::-1] + later
                block[lo:hi] = b
                tail = float(Qs[lo])
        if m:
            block[m] = len(starts) - 1
        nblocks = max(len(starts), 1)
        # the exponents' arguments are rounded differences, each within u of its own
        # size: shift - u_i (at most the largest such gap), the block links (at most
        # the span of the shifts in all) and, in a query, eps - shift (eps lies below
        # the last threshold and is at least 0: at most |shift| + |theta|); together E,
        # a relative error of at most e^E - 1 in each e^eps q_i <= e^0.05 p_i
        if m:
            reach = float(np.max(np.abs(theta))) + float(np.max(np.abs(shift)))
            exponents = _U * (float(np.max(np.abs(gap))) + float(shift[-1] - shift[0]) + reach
                              + _BLOCK_WIDTH + 1.0)
        else:
            exponents = 0.0
        slack_factor = (4.0 * (m + 2 + 4 * nblocks + 8) * _U + float(relative)
                        + 1.06 * math.expm1(exponents)) * (1.0 + 1e-9)
        absolute = (m + 4 * nblocks + 4) * _UNDERFLOW_PER_TERM
        return ThresholdSum(theta, P, Qs, block, np.asarray(shift, dtype=float), float(const),
                            upper, slack_factor, absolute)

    def _terms(self, eps):
        """(P[k], e^eps Q[k]) at the first threshold above each eps."""
        eps = np.asarray(eps, dtype=float)
        k = np.searchsorted(self.theta, eps, side="right")
        x = eps - self.shift[self.block[k]]
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            eQ = np.exp(x) * self.Qs[k]
        eQ = np.where(self.Qs[k] > 0, eQ, 0.0)
        return k, self.P[k], eQ

    def __call__(self, eps) -> np.ndarray:
        """Vectorised bound (with a cumulative-sum round-off allowance)."""
        _, P, eQ = self._terms(eps)
        body = np.maximum(P - eQ, 0.0)
        with np.errstate(invalid="ignore"):
            slack = self.slack_factor * P + self.absolute
        # (an unbounded relative error, inf, times an empty sum: no bound, inf, not NaN)
        slack = np.where(np.isnan(slack), np.inf, slack)
        if self.upper:
            return np.minimum(self.const + body + slack, 1.0)
        return np.maximum(self.const + body - slack, 0.0)

    def crossing(self, delta: float) -> float:
        """Smallest eps >= 0 with F(eps) <= delta (inf if none), from the closed form."""
        if self(0.0) <= delta:
            return 0.0
        pts = self.theta[self.theta > 0.0]
        if len(pts) == 0 or self(pts[-1]) > delta:
            return math.inf
        vals = self(pts)
        j = int(np.argmax(vals <= delta))        # first breakpoint with F <= delta
        lo = 0.0 if j == 0 else float(pts[j - 1])
        hi = float(pts[j])
        k = int(np.searchsorted(self.theta, lo, side="right"))
        sign = 1.0 if self.upper else -1.0
        K = (self.const + self.P[k] * (1.0 + sign * self.slack_factor)
             + sign * self.absolute - delta)
        Qs = self.Qs[k]
        if Qs > 0 and K > 0:
            with np.errstate(over="ignore"):         # K / Qs past the range: hi
                x = math.log(K / Qs) + float(self.shift[self.block[k]])
            return float(min(max(x, lo), hi))
        return hi


@dataclass(frozen=True, eq=False)
class MaxOfSums:
    """The largest of several lower-side ``ThresholdSum`` curves of one direction (each a
    valid lower bound, so their maximum is one): the grouped buckets' bounds for several
    label caps (docs/method.md §6).  Offers what the queries read from a curve."""

    parts: tuple
    upper: bool = False

    @property
    def const(self) -> float:
        return max(c.const for c in self.parts)

    @property
    def theta(self) -> np.ndarray:
        """Thresholds of the part reaching furthest (its last is the largest of all)."""
        return max(self.parts, key=lambda c: c.theta[-1] if len(c.theta) else -math.inf).theta

    def __call__(self, eps) -> np.ndarray:
        return np.maximum.reduce([np.asarray(c(eps)) for c in self.parts])

    def crossing(self, delta: float) -> float:
        """Smallest eps >= 0 with every part <= delta (each is non-increasing)."""
        return max(c.crossing(delta) for c in self.parts)


class PaperUpper:
    """Definition 9 for one direction, vectorised over eps with cumulative sums.

    ``A``, ``R``: the paper's bucket masses and real EC rows (docs/method.md §5) on
    ``grid``; ``const``: infinity bucket plus certified round-off; ``u``: u_T;
    ``relative``: entrywise relative error of A and R (each term's error is at most
    that times its A and R parts).  All tables are built in the constructor; the
    object is never changed afterwards.
    """

    def __init__(self, grid, A, R, const: float, u: int, relative: float = 0.0):
        n = grid.number_of_buckets
        t = grid.losses
        with np.errstate(under="ignore"):
            e = np.exp(-np.maximum(t, 0.0))
            Ae, Re = A * e, R * e
        self.grid = grid
        self.u = u
        self.n = n
        self.tail_A = np.concatenate((np.cumsum(A[::-1])[::-1], [0.0]))
        self.tail_Ae = np.concatenate((np.cumsum(Ae[::-1])[::-1], [0.0]))
        self.tail_Re = np.concatenate((np.cumsum(Re[::-1])[::-1], [0.0]))
        # a factor e^{-t} or a product below the normal range is off by up to 2^-1075
        # absolutely (e by 2^-1074, times A or R), which e^eps then multiplies: that
        # much per such term, above each position, is added in ``__call__`` (three
        # tails read there, each at or above ``pos``)
        tiny = (((t > -LEAST_NORMAL_LOG) | (Ae < LEAST_NORMAL) | (Re < LEAST_NORMAL))
                & ((A > 0) | (R > 0)))             # (zero rows' products are exact)
        lost = np.where(tiny, (A + R + 2.0) * (2.0 * LEAST_SUBNORMAL), 0.0)
        self.tail_lost = np.concatenate((np.cumsum(lost[::-1])[::-1], [0.0])) \
            * (3.0 * (1.0 + 1e-9))
        self.const = const
        self.slack = 8.0 * (2 * n + 3) * _U + float(relative) * (1.0 + 1e-9)
        self.relative = float(relative) * (1.0 + 1e-9)

    def __call__(self, eps):
        eps = np.atleast_1d(np.asarray(eps, dtype=float))
        grid, n = self.grid, self.n
        d = grid.log_factor
        o = grid.offset
        # past this many grid steps every index below is clipped to the end anyway; the
        # quotient is clipped before the cast (eps / d beyond 2^63, from eps near 1e18,
        # wrapped to the most negative int64: the first bucket, a sum e^eps * 0 = NaN)
        reach = float(2 * n + 4 + abs(int(o)) + abs(int(self.u)))
        with np.errstate(over="ignore"):         # (an overflow to inf is clipped)
            q = np.clip(eps / d * (1.0 - 1e-15), -reach, reach)
        j = np.ceil(q).astype(np.int64)
        j = np.where(j * d < eps, j + 1, j)          # f^j >= e^eps exactly
        pos = np.clip(j - o + n, 0, 2 * n + 1)
        pos_u = np.clip(j - o + n + self.u, 0, 2 * n + 1)
        with np.errstate(over="ignore", invalid="ignore"):
            inner = (self.tail_Ae[pos] - self.tail_Ae[pos_u]) + self.tail_Re[pos_u]
            body = self.tail_A[pos] - np.exp(eps) * inner
        body = np.where(inner > 0, body, self.tail_A[pos])
        with np.errstate(over="ignore", invalid="ignore"):
            # the R side's relative error (the A side's is in ``slack``)
            # (relative 0: no such term, also where e^eps overflows: 0 * inf is NaN)
            r_side = np.where((inner > 0) & (self.relative > 0),
                              self.relative * np.exp(eps) * inner, 0.0)
            # e^eps times the subnormal allowance, formed as one exp (e^eps alone
            # overflows past eps 709.78 where the product need not); the log's and the
            # exp's rounding, a few ulps of |eps| + 745, is covered by the 1e-9
            live = self.tail_lost[pos] > 0
            log_lost = np.log(np.where(live, self.tail_lost[pos], 1.0))
            lost = np.where(live, np.exp(eps + log_lost) * (1.0 + 1e-9), 0.0)
        with np.errstate(invalid="ignore"):
            val = (self.const + np.maximum(body, 0.0) + self.slack * self.tail_A[pos]
                   + r_side + lost)
        # an unbounded relative error (inf, after ~10^15 compositions) times an empty
        # tail is NaN: no bound, the trivial 1, as ThresholdSum answers (it was reported
        # as delta NaN, and the lower bound, clipped to it, NaN too)
        val = np.where(np.isnan(val), np.inf, val)
        return np.minimum(val, 1.0)

    def epsilon(self, delta: float) -> float:
        """Smallest eps found with F(eps) <= delta, verified there (inf if none)."""
        d = self.grid.log_factor
        n = self.n
        if self(0.0)[0] <= delta:
            return 0.0
        top = n + self.grid.offset
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


def upper_epsilon(curves, delta: float) -> float:
    """Smallest certified eps with every curve <= delta.  Curves of one kind are
    searched together; across kinds the largest answer holds for all (each curve is
    non-increasing in eps)."""
    best = 0.0
    paper = [c for c in curves if isinstance(c, PaperUpper)]
    sums = [c for c in curves if not isinstance(c, PaperUpper)]
    if paper:
        best = max(best, max(c.epsilon(delta) for c in paper))
    if sums:
        best = max(best, certified_upper_epsilon(sums, delta))
    return best


def _nudge_up(x: float, steps: int) -> float:
    return x + max(abs(x), 1e-300) * 4.0 * _U * (2 ** steps)


def certified_upper_epsilon(curves, delta: float) -> float:
    """Smallest eps found with max_c c(eps) <= delta, verified at that very point."""
    eps = max(c.crossing(delta) for c in curves)
    if math.isinf(eps):
        return math.inf
    for attempt in range(60):
        if max(float(c(eps)) for c in curves) <= delta:
            return eps
        eps = _nudge_up(eps, attempt)
    return math.inf


def certified_lower_epsilon(curves, delta: float) -> float:
    """Largest eps found with max_c c(eps) > delta, verified at that point; 0 if none."""
    best = 0.0
    for c in curves:
        if not c.upper and c.const > delta:
            return math.inf               # the infinity group alone exceeds delta
        x = c.crossing(delta)
        if x == 0.0:
            continue
        if math.isinf(x):
            x = float(c.theta[-1]) if len(c.theta) else 0.0
        for attempt in range(60):
            if x <= 0.0:
                break
            if float(c(x)) > delta:
                best = max(best, x)
                break
            x = x - max(abs(x), 1e-300) * 4.0 * _U * (2 ** attempt)
    return max(best, 0.0)
