"""Helpers shared by the bound families: rounding-safe arithmetic, sequences, bisection."""
from __future__ import annotations

import math

import numpy as np

from ..composition import canonical_history
from ..mechanisms import MechanismPair
from ..results import EpsilonBounds
from .._validation import _real

from .._fp import ULP as _ULP, UNIT_ROUNDOFF as _U  # noqa: F401  (used by the families)
_TINY = float(np.nextafter(0.0, 1.0))   # smallest positive double


# --------------------------------------------------------------------------------------
# small numerical helpers
# --------------------------------------------------------------------------------------

def _up(x, ulps: float = 4.0):
    """Inflate a non-negative float (array) by a few ulps: covers rounding in x."""
    return np.asarray(x, dtype=float) * (1.0 + ulps * _ULP)


def _two_prod(a, b):
    """Dekker's error-free product: p = fl(a*b), err = a*b - p exactly (finite inputs)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    p = a * b
    split = 134217729.0  # 2**27 + 1

    def _split(x):
        c = split * x
        hi = c - (c - x)
        return hi, x - hi

    ah, al = _split(a)
    bh, bl = _split(b)
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, err


def _mul_up(a, b):
    """Smallest double >= the exact product a*b (non-negative finite inputs)."""
    p, err = _two_prod(a, b)
    return np.where(err > 0, np.nextafter(p, np.inf), p)


def _product_le(m, x, y):
    """Exact test m*x <= y for integer-valued m, finite x >= 0 and y (inf allowed)."""
    m = np.asarray(m, dtype=float)
    y = np.asarray(y, dtype=float)
    p, err = _two_prod(m, x)
    return np.isposinf(y) | (p < y) | ((p == y) & (err <= 0))


def _log1mexp(x):
    """log(1 - exp(x)) for x <= 0, accurate in both regimes."""
    x = np.minimum(np.asarray(x, dtype=float), 0.0)
    with np.errstate(divide="ignore"):
        return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _exp_upper(log_value):
    """exp of a log-space upper bound, never rounding a positive bound down to 0."""
    log_value = np.asarray(log_value, dtype=float)
    with np.errstate(over="ignore"):
        out = np.exp(log_value)
    out = np.where(np.isfinite(log_value) & (out == 0.0), _TINY, out)
    return np.minimum(out, 1.0)


def _scalar_or_array(x, scalar):
    x = np.asarray(x, dtype=float)
    return float(x) if scalar else x


def _sequence(sequence):
    """Accept a pair, or [(pair, count), ...] as compose() does."""
    if isinstance(sequence, MechanismPair):
        return ((sequence, 1),)
    return canonical_history(sequence)


def _bisect_epsilon(delta_fn, delta, method, notes=()) -> EpsilonBounds:
    target = _real("delta", delta, low=0.0, high=1.0, low_open=True)
    if delta_fn(np.array([0.0]))[0] <= target:
        return EpsilonBounds(target, 0.0, 0.0, method, notes=notes)
    hi = 1.0
    while delta_fn(np.array([hi]))[0] > target:
        hi *= 2.0
        if hi > 1e4:
            return EpsilonBounds(target, 0.0, math.inf, method,
                                 notes=notes + ("delta is below what this bound certifies "
                                                "at any epsilon (e.g. the distinguishing "
                                                "mass exceeds it)",))
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi or hi - lo <= 1e-12 * hi:
            break
        if delta_fn(np.array([mid]))[0] <= target:
            hi = mid
        else:
            lo = mid
    return EpsilonBounds(target, 0.0, float(hi), method, notes=notes)
