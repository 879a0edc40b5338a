"""Floating-point constants shared by every bound-producing module (docs/floating-point.md).

One definition each, so that no module silently uses another convention.
"""
from __future__ import annotations

#: unit round-off u of IEEE double precision: |fl(x op y) - x op y| <= u |x op y|
UNIT_ROUNDOFF = 2.0 ** -53
#: one ulp of 1.0 (machine epsilon, 2u); the comparison bounds count slack in ulps
ULP = 2.0 ** -52
