"""From bucket rows to certified delta(eps) and eps(delta) (docs/method.md §7).

Every bound used here has the form

    F(eps) = const + sum over i with theta_i > eps of (p_i - e^eps q_i)

with each included term >= 0, so F is non-increasing and, between two consecutive
thresholds theta, equal to (K - e^eps Q): a whole array of eps is one pass of
cumulative sums (with a certified allowance for their round-off), and the crossing
F(eps) = delta has a closed form.  The returned epsilons are re-checked with the very
function ``delta_bounds`` reports, at the very point returned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .convolution import UNIT_ROUNDOFF

_U = UNIT_ROUNDOFF


@dataclass(frozen=True, eq=False)
class ThresholdSum:
    """F(eps) = const + sum_{theta_i > eps} (p_i - e^eps q_i), upper or lower side."""

    theta: np.ndarray     # ascending
    p: np.ndarray
    q: np.ndarray
    const: float
    upper: bool           # True: round-off is added; False: subtracted and clamped at 0

    @staticmethod
    def build(theta, p, q, const, upper) -> "ThresholdSum":
        theta = np.asarray(theta, dtype=float)
        keep = (p > 0) & (theta > -np.inf)
        order = np.argsort(theta[keep], kind="stable")
        return ThresholdSum(theta[keep][order], np.asarray(p)[keep][order],
                            np.asarray(q)[keep][order], float(const), upper)

    def _tails(self):
        # reverse cumulative sums: P[k] = sum_{i >= k} p_i in ascending-theta order
        cache = getattr(self, "_cache", None)
        if cache is None:
            P = np.concatenate((np.cumsum(self.p[::-1])[::-1], [0.0]))
            Q = np.concatenate((np.cumsum(self.q[::-1])[::-1], [0.0]))
            cache = (P, Q)
            object.__setattr__(self, "_cache", cache)
        return cache

    def __call__(self, eps) -> np.ndarray:
        """Vectorised bound (with a cumulative-sum round-off allowance)."""
        eps = np.asarray(eps, dtype=float)
        P, Q = self._tails()
        k = np.searchsorted(self.theta, eps, side="right")
        with np.errstate(over="ignore", invalid="ignore"):
            eQ = np.exp(eps) * Q[k]
            body = np.where(Q[k] > 0, P[k] - eQ, P[k])
        slack = 4.0 * (len(self.p) + 2) * _U * P[k]
        body = np.maximum(body, 0.0)
        if self.upper:
            return np.minimum(self.const + body + slack, 1.0)
        return np.maximum(self.const + body - slack, 0.0)

    def crossing(self, delta: float) -> float:
        """Smallest eps >= 0 with F(eps) <= delta (inf if none), from the closed form."""
        if self(0.0) <= delta:
            return 0.0
        P, Q = self._tails()
        pts = self.theta[self.theta > 0.0]
        if len(pts) == 0 or self(pts[-1]) > delta:
            return math.inf
        vals = self(pts)
        j = int(np.argmax(vals <= delta))        # first breakpoint with F <= delta
        lo = 0.0 if j == 0 else float(pts[j - 1])
        hi = float(pts[j])
        k = int(np.searchsorted(self.theta, lo, side="right"))
        slack_factor = 4.0 * (len(self.p) + 2) * _U
        K = self.const + P[k] * (1.0 + (slack_factor if self.upper else -slack_factor)) - delta
        if Q[k] > 0 and K > 0:
            x = math.log(K / Q[k])
            return float(min(max(x, lo), hi))
        return hi


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
