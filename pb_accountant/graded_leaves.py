"""Graded leaves: a step's rare tails cut on every r-th grid point (docs/method.md §3,
"Graded leaves").

A leaf's spacing follows one step's whole loss spread, and its grid reaches out to
where the tail holds the per-step infinity budget.  Most of its points then hold almost
no mass: for sigma 1, q 0.01, 95% of the points lie where the A-mass above is below
1e-3.  Each of them still costs a certified mass computation.  Cut the tails on every
r-th point instead, r doubling as the tail's mass falls, and keep the bulk as it is:

* the leaf grid is divided into *segments* (ratio r, lo, hi), contiguous ranges of
  absolute grid indices whose cut points are lo + r, lo + 2r, ..., hi (the first
  segment also cuts at lo); the grid's two end points are always cuts;
* one set of masses is computed on all the cut points (``leaf_masses``), so the
  buckets between consecutive cuts partition the events exactly;
* ``from_masses(..., cuts=...)`` splits (groups) each bucket between its own two cuts
  and puts the atoms (labels) at their points of the leaf grid; the points between cuts
  stay empty.  Cut at every point it gives the ordinary leaf bit for bit.

Any cut points give a sound leaf; the rule below only decides tightness.  A tail event
rounded on a spacing r times the leaf's adds about (r h)^2 to the spread of the paths
holding it, where every step already adds about h^2: tier r begins where one step's
tail mass beyond it is at most TAIL_SHARE * 4 / r^2, so each tier adds at most
4 TAIL_SHARE h^2 per step on average.  And r is at most the ratio by which the
composition's own grid will have coarsened for the planned number of steps
(``ratio_cap``): no tail event is rounded coarser than the grid will round the whole
composition anyway; and at most DECAY_FRACTION of the tail's decay length (a
near-Gaussian tail changes within a few leaf spacings however far out, and over millions
of steps the paths that decide delta hold its events: such leaves stay whole).  Only
pairs without loss atoms or infinite losses, on adaptive grids, take this path (as
two-scale leaves).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .buckets import GROUPED_DIRECTIONS, GroupedBuckets, Grid, SplitBuckets, leaf_masses

#: tier r begins where one step's tail mass beyond it is at most TAIL_SHARE * 4 / r^2
#: (A-mass above for the upper tail, B-mass below for the lower one)
TAIL_SHARE = 1e-4
#: the coarsest tier, whatever the composition's coarsening
MAX_RATIO = 64
#: a tier is kept only where it holds at least this many of its cuts (fewer save
#: nothing worth a segment)
MIN_TIER_CUTS = 4
#: tier r's cut spacing, r leaf spacings, is at most this fraction of the tail's decay
#: length (the loss over which its mass falls by e), at the tier's start and at the
#: grid's end: rounding an event within a sixteenth of the length over which its
#: density changes by e moves its share of delta by about (1/16)^2 / 2 = 0.2% of the
#: tail's local curvature term, wherever that tail decides delta (1/8 cost 2% of the
#: width on near-Gaussian tails, seed 2027 #150)
DECAY_FRACTION = 0.0625
#: the group directions a graded leaf builds (the split pair's masses, "upper" labels)
GROUPED = GROUPED_DIRECTIONS


@dataclass(frozen=True)
class Segment:
    """Cut points lo + r, ..., hi (absolute indices of the leaf grid; the first segment
    also cuts at lo): buckets (previous cut, cut] r leaf spacings wide."""

    ratio: int
    lo: int
    hi: int

    def points(self, first: bool) -> np.ndarray:
        start = self.lo if first else self.lo + self.ratio
        return np.arange(start, self.hi + 1, self.ratio, dtype=np.int64)


def ratio_cap(leaf_spacing: float, spread: float, resolution: float, planned: int) -> int:
    """The most a tail may be coarsened: half the factor by which an ordinary
    composition of ``planned`` steps of one step's ``spread`` will have doubled the leaf
    spacing (``compose_split`` doubles while twice the spacing is at most ``resolution``
    times the spread; this stops one doubling short, which keeps a tail at least twice
    as fine as the composed grid), at most MAX_RATIO."""
    if not (leaf_spacing > 0 and spread > 0 and resolution > 0 and planned >= 1):
        return 1
    whole = resolution * spread * math.sqrt(float(planned))
    r = 1
    while r < MAX_RATIO and 2.0 * (2 * r) * leaf_spacing <= whole:
        r *= 2
    return r


def _upper_end(top: int, r: int) -> int:
    """The last cut of the outermost upper tier: the last multiple of r at most the
    grid's top (the points above it, up to the top, are cut on the leaf spacing)."""
    return (top // r) * r


def _lower_start(bottom: int, r: int) -> int:
    """The first cut of the outermost lower tier, mirrored."""
    return -(-bottom // r) * r


def _kept(tiers, outer_end, sign: int):
    """The tiers (ratio, boundary; finest first) that hold at least MIN_TIER_CUTS of
    their cuts: a shorter one is left to the finer tier inside it (its boundaries are
    multiples of the finer ratio too), until every tier left is long enough."""
    tiers = list(tiers)
    while True:
        for k, (r, at) in enumerate(tiers):
            end = tiers[k + 1][1] if k + 1 < len(tiers) else outer_end(r)
            if sign * (end - at) < MIN_TIER_CUTS * r:
                del tiers[k]
                break
        else:
            return tiers


def _decay_lengths(pair, mass: float):
    """(upper, lower): the losses over which one step's A-mass above (B-mass below)
    falls from ``mass`` by a factor e (``MechanismPair.loss_range``; inf where a side
    does not reach that far)."""
    lo, hi = pair.loss_range(mass)
    lo2, hi2 = pair.loss_range(mass / math.e)
    up = hi2 - hi if math.isfinite(hi) and math.isfinite(hi2) else math.inf
    down = lo - lo2 if math.isfinite(lo) and math.isfinite(lo2) else math.inf
    return up, down


def segments(pair, grid: Grid, cap: int,
             end_mass: Optional[float] = None) -> Optional[Tuple[Segment, ...]]:
    """The leaf grid cut into segments (lowest first), or None where no tier would hold
    MIN_TIER_CUTS cuts (the ordinary leaf then serves).

    Upper tail: tier r starts at U_r, the first multiple of r at or above both the loss
    beyond which one step's A-mass is at most TAIL_SHARE 4 / r^2 and U_{r/2}, and ends
    where tier 2r starts (the last tier: at the last multiple of r at most the grid's
    top, ``_upper_end``, the points above it on the leaf spacing).  The lower tail
    mirrors it with the B-mass below.  A tier whose spacing exceeds DECAY_FRACTION of
    the tail's decay length at its start or at the grid's end (``end_mass``: the tail
    mass there, the leaf's per-step budget) is not taken, nor any coarser one on its
    side: a near-Gaussian tail decays within a few leaf spacings however far out."""
    d = grid.log_factor
    bottom = grid.offset - grid.number_of_buckets
    top = grid.offset + grid.number_of_buckets
    if cap < 2 or not bottom < 0 < top:
        # (tiers start at loss 0 at the nearest: a leaf grid spans one step's loss
        # range, which holds 0)
        return None
    far = _decay_lengths(pair, end_mass) if end_mass else (math.inf, math.inf)
    ups, downs = [], []               # (ratio, boundary), finest tier first
    r = 2
    while r <= cap:
        mass = TAIL_SHARE * 4.0 / (r * r)
        lo, hi = pair.loss_range(mass)
        near = _decay_lengths(pair, mass)
        room_up = r * d <= DECAY_FRACTION * min(near[0], far[0])
        room_down = r * d <= DECAY_FRACTION * min(near[1], far[1])
        if room_up and math.isfinite(hi) and (not ups or len(ups) == r.bit_length() - 2):
            at = max(math.ceil(hi / d), ups[-1][1] if ups else 0, 0)
            at = -(-at // r) * r
            if _upper_end(top, r) - at >= MIN_TIER_CUTS * r:
                ups.append((r, at))
        if room_down and math.isfinite(lo) and (not downs
                                                or len(downs) == r.bit_length() - 2):
            at = min(math.floor(lo / d), downs[-1][1] if downs else 0, 0)
            at = (at // r) * r
            if at - _lower_start(bottom, r) >= MIN_TIER_CUTS * r:
                downs.append((r, at))
        r *= 2
    ups = _kept(ups, lambda r: _upper_end(top, r), +1)
    downs = _kept(downs, lambda r: _lower_start(bottom, r), -1)
    if not ups and not downs:
        return None
    out = []
    if downs:
        r, end = downs[-1]
        first = _lower_start(bottom, r)
        if first > bottom:
            out.append(Segment(1, bottom, first))
        out.append(Segment(r, first, end))
        for k in range(len(downs) - 2, -1, -1):
            r, end = downs[k]
            out.append(Segment(r, downs[k + 1][1], end))
    cursor = out[-1].hi if out else bottom
    bulk_end = ups[0][1] if ups else top
    out.append(Segment(1, cursor, bulk_end))
    for k, (r, start) in enumerate(ups):
        end = ups[k + 1][1] if k + 1 < len(ups) else _upper_end(top, r)
        out.append(Segment(r, start, end))
    if out[-1].hi < top:
        out.append(Segment(1, out[-1].hi, top))
    segs = tuple(seg for seg in out if seg.hi > seg.lo)
    for a, b in zip(segs, segs[1:]):
        if a.hi != b.lo:
            raise RuntimeError(f"internal error: graded segments {a} and {b} do not meet")
    if segs[0].lo != bottom or segs[-1].hi != top:
        raise RuntimeError("internal error: graded segments do not cover the leaf grid")
    return segs


def cut_points(segs: Tuple[Segment, ...]) -> np.ndarray:
    """Every segment's cut points in order (absolute indices of the leaf grid)."""
    return np.concatenate([seg.points(k == 0) for k, seg in enumerate(segs)])


def masses(pair, grid: Grid, segs: Tuple[Segment, ...]):
    """``leaf_masses`` on the segments' cut points (displacements kept below 1% of the
    leaf spacing, the finest)."""
    cuts = cut_points(segs).astype(float) * grid.log_factor
    return leaf_masses(pair, cuts, grid.log_factor)


def build(grid: Grid, segs: Tuple[Segment, ...], values, kinds):
    """The graded leaves of ``kinds`` ("split", "grouped-ab", "grouped-ba"), in that
    order, from ``values`` = ``masses(pair, grid, segs)``: each bucket split (grouped)
    between its own two cuts, the atoms (groups) at their points of the leaf grid
    (``from_masses`` with ``cuts``)."""
    cuts = cut_points(segs)
    out = []
    for kind in kinds:
        if kind == "split":
            out.append(SplitBuckets.from_masses(grid, *values, cuts=cuts))
        elif kind in GROUPED:
            out.append(GroupedBuckets.from_masses(grid, *values, (0.0, 0.0), (kind[-2:],),
                                                  "upper", cuts=cuts))
        else:
            raise ValueError(f"kinds must be among ('split',) + {GROUPED}, got {kind!r}")
    return tuple(out)
