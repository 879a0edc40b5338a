"""Floating-point constants shared by every bound-producing module (docs/floating-point.md).

One definition each, so that no module silently uses another convention.
"""
from __future__ import annotations

#: unit round-off u of IEEE double precision: |fl(x op y) - x op y| <= u |x op y|
UNIT_ROUNDOFF = 2.0 ** -53
#: one ulp of 1.0 (machine epsilon, 2u); the comparison bounds count slack in ulps
ULP = 2.0 ** -52
#: below this exponent e^x may leave the normal range (e^-708 = 3.3e-308 > 2^-1022 =
#: 2.2e-308), where neither exp nor a product with it keeps its relative accuracy (a
#: subnormal result is off by up to 2^-1075 absolutely)
LEAST_NORMAL_LOG = -708.0
#: the least normal and the least subnormal double (and the latter's binary exponent)
LEAST_NORMAL = 2.0 ** -1022
LEAST_SUBNORMAL_EXPONENT = -1074
LEAST_SUBNORMAL = 2.0 ** LEAST_SUBNORMAL_EXPONENT

#: Veltkamp's splitter for doubles: 2^27 + 1
_SPLITTER = 134217729.0


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth; no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """(p, e) with p = fl(a b) and p + e = a b exactly (Dekker, without FMA; |a|, |b|
    below 2^995 and products not underflowing)."""
    p = a * b
    a1, a2 = _split(a)
    b1, b2 = _split(b)
    return p, ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2


def two_square(a):
    """(p, e) with p = fl(a^2) and p + e = a^2 exactly (``two_prod`` with one split)."""
    p = a * a
    a1, a2 = _split(a)
    return p, ((a1 * a1 - p) + 2.0 * (a1 * a2)) + a2 * a2
