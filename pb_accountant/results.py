"""Small immutable result objects returned by every bound-producing path.

Engine queries, the accountant and the comparison bounds all answer with these, so
results plot and compare side by side.  A one-sided result (a comparison bound that
only certifies an upper bound) carries the trivially valid lower bound 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class GridInfo:
    """The final bucket grid a result was read from (paper Definition 3)."""

    factor: float
    number_of_buckets: int

    @property
    def log_factor(self) -> float:
        return float(np.log(self.factor))


@dataclass(frozen=True)
class EpsilonBounds:
    """Certified bounds on the smallest epsilon with delta(epsilon) <= delta.

    ``upper`` is a point at which a certified upper bound on delta was evaluated and
    found <= delta; ``lower`` a point at which a certified lower bound on delta was
    evaluated and found > delta (or 0).  ``notes`` says why a bound is looser than
    usual (for example eps = inf when delta is below what can be certified).
    """

    delta: float
    lower: float
    upper: float
    method: str = "buckets"
    grid: Optional[GridInfo] = None
    notes: Tuple[str, ...] = ()
    #: how batches were formed and which neighbouring relation the bounds assume
    sampler: str = "poisson"
    neighbouring: str = "add_remove"

    @property
    def width(self) -> float:
        """Relative width (upper - lower) / upper; 0 when upper is 0."""
        if self.upper == 0.0:
            return 0.0
        if np.isinf(self.upper):
            return float("inf")
        return (self.upper - self.lower) / self.upper

    def __iter__(self):  # allows ``lo, up = bounds``
        yield self.lower
        yield self.upper


@dataclass(frozen=True)
class DeltaBounds:
    """Certified bounds on delta(epsilon) for one epsilon or an array of them."""

    epsilon: "float | np.ndarray"
    lower: "float | np.ndarray"
    upper: "float | np.ndarray"
    method: str = "buckets"
    grid: Optional[GridInfo] = None
    notes: Tuple[str, ...] = ()
    #: how batches were formed and which neighbouring relation the bounds assume
    sampler: str = "poisson"
    neighbouring: str = "add_remove"

    def __iter__(self):
        yield self.lower
        yield self.upper


@dataclass(frozen=True)
class PrivacyCurve:
    """An epsilon-delta curve with both certified bounds, ready to plot."""

    epsilons: np.ndarray
    delta_lower: np.ndarray
    delta_upper: np.ndarray
    method: str = "buckets"
    grid: Optional[GridInfo] = None
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: how batches were formed and which neighbouring relation the bounds assume
    sampler: str = "poisson"
    neighbouring: str = "add_remove"


def directed_decimal(value: float, upper: bool, *, significant: Optional[int] = None,
                     decimals: Optional[int] = None) -> Decimal:
    """The exact decimal value of the finite double ``value`` rounded up (``upper``) or
    down, to ``significant`` digits or to ``decimals`` places: the one home of the
    outward rounding every displayed bound goes through (rounding ``value * 10^k`` in
    floats can land on the wrong side)."""
    exact = Decimal(float(value))
    exp = (-int(decimals) if significant is None
           else exact.adjusted() - int(significant) + 1)
    with localcontext() as ctx:
        ctx.prec = 1100              # room for every double's digits at any places
        return exact.quantize(Decimal(1).scaleb(exp),
                              rounding=ROUND_CEILING if upper else ROUND_FLOOR)


def bound_text(value: float, upper: bool, decimals: int = 6) -> str:
    """``value`` with ``decimals`` digits after the point, rounded outward (up for an
    upper bound, down for a lower one), so that the text is still a bound: rounded to
    the nearest, 4.0040953 shows as 4.004095, below the upper bound it is."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    text = str(directed_decimal(value, upper, decimals=decimals))
    if "E" in text or "e" in text:
        text = format(Decimal(text), "f")
    return "0" + text[2:] if text.startswith("-0") and Decimal(text) == 0 else text
