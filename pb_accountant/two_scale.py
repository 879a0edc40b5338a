"""Two-scale leaves: a step's narrow bulk on a fine grid, its rare rest on the leaf grid
(docs/method.md §3, "Two-scale leaves").

At small sampling rates one step's loss is a narrow bulk (losses of order q) plus a
rare tail reaching several units.  The leaf spacing follows the whole distribution's
spread, which the tail sets, so it is many times the bulk's own; rounding the bulk to it
at every one of millions of steps then decides the width.  Cut each step's events at a
loss W into the bulk (loss <= W) and the rest (loss > W).  For 2^k steps

    P^(2^k) = B_k + R_k,    B_{k+1} = B_k B_k,    R_{k+1} = R_k (2 B_k + R_k):

B_k (every step in the bulk) lives on a grid that follows its own spread, R_k on the
leaf spacing until one grid would coarsen a composition of 2^k steps, then on one grid's
spacing (``rest_spacing``; a coarser one costs width where the rest decides delta:
docs/method.md §3).  Once B's grid has coarsened to R's the two are added and the
ordinary squaring goes on; an event of the rest is rounded to the coarse grid about
once per level instead of once per step.

Both representations go through it: the split pairs' rows and atoms add (each part's
rows dominate that part, so their sum dominates the whole), and groups with the same
label merge (any grouping bounds from below).  The parts are sub-probability measures;
each is stored times a scale s = (s_A, s_B) (A-mass rows, B-mass rows) that keeps its
reference measure's mass at most 1, so the products' infinity-atom formula
(a1 + a2 - a1 a2) stays an upper bound.  The scales are floats: the reference is s
times the true part up to a relative deviation ``tau`` per term, charged as relative
error when the parts are added back (``with_relative_slack``).  Only pairs without loss
atoms or infinite losses, on adaptive grids, take this path (``two_scale_leaf``), and
groups of such pairs (one count, one leaf spacing), whose steps are folded from their
pairs' parts (``next_factor``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ._fp import UNIT_ROUNDOFF
from .buckets import GROUPED_DIRECTIONS, MAX_LOSS_RANGE, GroupedBuckets, Grid, SplitBuckets
from .composition import BucketOptions, BucketSet, Plan, compose_split, follow_plan

_U = UNIT_ROUNDOFF
#: the rest holds at most this share of one step's A-mass (W: the first leaf grid point
#: at or above 0 with no more A-mass above it)
REST_MASS = 1e-3
#: two-scale leaves are used when the leaf spacing is at least this many times the
#: bulk's own (measured: 8-64 times beat the finest refinement level at half its cost
#: or less; 2 times gains nothing over refining once, docs/method.md §3)
MIN_SCALE_RATIO = 8
#: the bulk's spacing is at least the leaf spacing over this (its scale grows as
#: (1/mass)^(2^k) over the levels before the parts merge: this keeps them in range)
MAX_SCALE_RATIO = 64
#: the parts are added after at most this many levels whatever their spacings
MAX_LEVELS = 16
#: a part whose A- or B-mass is below this is not worth a grid of its own (extreme
#: pairs: sigma near 0, where the rest's B-mass is e^{-1/(2 sigma^2)}); scaling it to
#: mass 1 would take factors near the floating-point range
MIN_PART_MASS = 1e-100
#: the group directions, each composed along its own chain when a query reads it
GROUPED = GROUPED_DIRECTIONS


@dataclass(frozen=True)
class TwoScaleLeaf:
    """Where one pair's steps are cut: at W = ``cut`` times the leaf spacing, the bulk
    on spacing ``bulk_spacing``."""

    leaf: Grid
    cut: int
    low: int          # the leaf's lowest and highest non-empty points: the parts'
    high: int         # grids span them
    bulk_spacing: float
    spread: float     # one step's loss spread (A-row) on the leaf: ``rest_spacing``

    @property
    def ratio(self) -> int:
        return int(round(self.leaf.log_factor / self.bulk_spacing))


@dataclass(frozen=True, eq=False)
class Part:
    """A sub-probability part of a composition: ``values`` (the split pair and/or
    groups, on one grid) certify a reference measure equal to
    ``scale`` (per A- and B-mass rows) times the true part, up to a relative deviation
    ``tau`` of each term; the reference's masses are at most 1."""

    values: BucketSet
    scale: Tuple[float, float]
    tau: float

    @property
    def split(self) -> SplitBuckets:
        return self.values.split


def two_scale_leaf(pair, leaf: SplitBuckets, options: BucketOptions) -> Optional[TwoScaleLeaf]:
    """The cut for ``pair`` whose ordinary leaf is ``leaf``, or None where two-scale
    leaves do not apply (loss atoms, infinite losses, fixed grids, ``two_scale`` off) or
    would gain little
    (the bulk's spacing at ``leaf_resolution`` is within MIN_SCALE_RATIO of the leaf's)."""
    if (not options.two_scale or options.number_of_buckets is not None
            or options.factor is not None
            or pair.has_loss_atoms() or tuple(pair.infinity_masses()) != (0.0, 0.0)):
        return None
    grid = leaf.grid
    H = grid.log_factor
    t = grid.losses
    A = leaf.rows[0]
    above = np.cumsum(A[::-1])[::-1]             # A-mass at or above each point
    candidates = np.flatnonzero((t >= 0) & (above <= REST_MASS))
    if not len(candidates) or candidates[0] < 2:
        return None
    i = int(candidates[0])
    inside = A[: i + 1]
    m = math.fsum(inside)
    if not m > 0.5:
        return None
    mu = math.fsum(inside * t[: i + 1]) / m
    sd = math.sqrt(max(math.fsum(inside * (t[: i + 1] - mu) ** 2) / m, 0.0))
    if not sd > 0:
        return None
    base = options.spacing_base          # (the leaf's ladder: H / h a power of two)
    h = base * 2.0 ** math.floor(math.log2(options.leaf_resolution * sd / base))
    h = max(h, H / MAX_SCALE_RATIO)
    if h * MIN_SCALE_RATIO > H:
        return None
    cut = int(grid.indices[i])
    filled = np.flatnonzero(np.any(leaf.rows != 0.0, axis=0))
    low, high = (int(grid.indices[int(j)]) for j in (filled[0], filled[-1]))
    ratio = int(round(H / h))
    if (cut - low) * ratio / 2 + 8 > options.max_buckets:
        return None
    return TwoScaleLeaf(grid, cut, low, high, h, leaf.loss_moments(0)[1])


def _covering(step: float, i_lo: int, i_hi: int) -> Grid:
    """A grid of spacing ``step`` whose points include absolute indices i_lo..i_hi."""
    n = max(2, math.ceil((i_hi - i_lo) / 2))
    n += n % 2
    return Grid(step, n, i_lo + n)


def _leaf_covering(step: float, i_lo: int, i_hi: int, pad: int = 4) -> Optional[Grid]:
    """``_covering`` of i_lo - pad..i_hi + pad with every point's loss inside
    MAX_LOSS_RANGE (a leaf forms e^t: the padding stops there), or None where no grid
    of spacing ``step`` covers i_lo..i_hi inside it."""
    limit = math.floor(MAX_LOSS_RANGE / step)
    if i_lo < -limit or i_hi > limit:
        return None
    lo, hi = max(i_lo - pad, -limit), min(i_hi + pad, limit)
    n = max(2, math.ceil((hi - lo) / 2))
    n += n % 2
    if 2 * n > 2 * limit:
        return None
    return Grid(step, n, min(lo + n, limit - n))


def _cut_masses(pair, bulk: Grid, rest: Grid, W: float):
    """``leaf_masses`` of both parts from one set of cut points (the bulk's points up to
    W, the rest's above it), so that the two parts partition the events exactly: per
    part (a, b, ea, eb, shift) on its own grid, the other part's buckets empty."""
    tb, tr = bulk.losses, rest.losses
    nb = int(np.count_nonzero(tb <= W))
    first = int(np.count_nonzero(tr <= W))          # rest points at or below W
    if tb[nb - 1] != W or tr[first - 1] != W:
        raise RuntimeError("internal error: the parts' grids do not share the cut point")
    cuts = np.concatenate((tb[:nb], tr[first:]))
    spacing = np.concatenate((np.full(nb, bulk.log_factor), np.full(len(cuts) - nb,
                                                                     rest.log_factor)))
    a, b, ea, eb, sh = pair.bucket_masses_with_displacement(cuts)
    if not (np.all(np.isfinite(sh)) and np.all(sh <= 0.01 * spacing)):
        a, b, ea, eb = pair.bucket_masses_with_error(cuts)
        sh = np.zeros(len(cuts))
    out = []
    for grid, buckets, points, at in ((bulk, slice(0, nb), slice(0, nb), 0),
                                      (rest, slice(nb, len(cuts) + 1), slice(nb - 1, len(cuts)),
                                       first)):
        masses = []
        for v in (a, b, ea, eb):
            m = np.zeros(grid.size + 1)
            part = np.asarray(v, dtype=float)[buckets]
            m[at: at + len(part)] = part
            masses.append(m)
        shift = np.zeros(grid.size)
        pts = np.asarray(sh, dtype=float)[points]
        shift[max(at - 1, 0): max(at - 1, 0) + len(pts)] = pts
        out.append(tuple(masses) + (shift,))
    return out


def _part_leaf(grid: Grid, masses) -> Tuple[BucketSet, np.ndarray]:
    """One part as a split pair and groups of both directions, and upper bounds on the
    A- and B-masses of the split pair's reference rows."""
    a, b, ea, eb, sh = masses
    split = SplitBuckets.from_masses(grid, a, b, ea, eb, sh)
    groups = tuple(GroupedBuckets.from_masses(grid, a, b, ea, eb, sh, (0.0, 0.0), (d,),
                                              "upper") for d in ("ab", "ba"))
    mass = np.array([math.fsum(row) for row in split.rows]) * (1.0 + split.relative) \
        + split.error + np.array([split.a_inf, split.b_minf])
    return BucketSet(grid, (("split", (split,)), ("grouped", groups))), mass * (1.0 + 8 * _U)


def _scaled(values: BucketSet, ca: float, cb: float) -> BucketSet:
    return values.mapped(lambda r: r.scaled(ca, cb))


def _below_inverse(w: float) -> float:
    """A float at most 1 / w."""
    return (1.0 / w) * (1.0 - 4 * _U)


def part_leaves(pair, cut: TwoScaleLeaf) -> Optional[Tuple[Part, Part]]:
    """The bulk and the rest of one step of ``pair``, each stored at mass at most 1
    (None if either holds less than MIN_PART_MASS of A- or B-mass)."""
    H, h = cut.leaf.log_factor, cut.bulk_spacing
    r = cut.ratio
    W = cut.cut * H
    lo = cut.low * r
    hi = cut.high
    grids = (_leaf_covering(h, lo, cut.cut * r), _leaf_covering(H, cut.cut, hi))
    if None in grids:
        return None
    parts = []
    for grid, masses in zip(grids, _cut_masses(pair, *grids, W)):
        values, mass = _part_leaf(grid, masses)
        stored = values.split.rows.sum(axis=1)
        if not (np.all(stored > MIN_PART_MASS) and np.all(np.isfinite(mass))):
            return None
        c = (_below_inverse(float(mass[0])), _below_inverse(float(mass[1])))
        parts.append(Part(_scaled(values, *c), c, 0.0))
    return parts[0], parts[1]


def representation(part: Part, rep: str) -> Part:
    """``part`` with the values of one representation alone: "split", or a group
    direction of GROUPED (the chains of the split pair and of each direction's groups
    are composed separately: a query composes only the directions it reads)."""
    values = part.values
    if rep == "split":
        members = (("split", (values.split,)),)
    else:
        members = (("grouped", (values.representations_of("grouped")[GROUPED.index(rep)],)),)
    return Part(BucketSet(values.grid, members), part.scale, part.tau)


def _product_weights(x: Part, y: Part) -> Tuple[Tuple[float, float], float]:
    scale = (x.scale[0] * y.scale[0], x.scale[1] * y.scale[1])
    tau = ((1.0 + x.tau) * (1.0 + y.tau) - 1.0 + _U) * (1.0 + 4 * _U)
    return scale, tau


def _product(x: Part, y: Part, budget: float, options: BucketOptions) -> Tuple[Part, Plan]:
    """x * y for split-pair parts, by the engine's policy, and the plan the groups'
    products follow (``_followed``).  The windows drop at most ``budget`` of true mass
    per composition, as on one grid: each row of the product stores its part at least
    min(scale) times over (``compose_split``'s ``stored_scale``)."""
    scale, tau = _product_weights(x, y)
    z, plan = compose_split(x.values, x.values if x is y else y.values, budget, options,
                            stored_scale=min(scale))
    return Part(BucketSet(z.grid, (("split", (z.split,)),)), scale, tau), plan


def _followed(plan: Plan, x: Part, y: Part) -> Part:
    """x * y for parts holding one group direction, on the grids of ``plan``."""
    same = x is y
    gx, = x.values.representations_of("grouped")
    gy, = y.values.representations_of("grouped")
    z = follow_plan(plan, gx, gx if same else gy, same)
    return Part(BucketSet(z.grid, (("grouped", (z,)),)), *_product_weights(x, y))


def _sum(x: BucketSet, y: BucketSet) -> BucketSet:
    """x + y (disjoint event sets) on the coarser of their spacings."""
    d = max(x.grid.log_factor, y.grid.log_factor)
    x, y = x.coarsened_to(d), y.coarsened_to(d)
    lo = min(g.offset - g.number_of_buckets for g in (x.grid, y.grid))
    hi = max(g.offset + g.number_of_buckets for g in (x.grid, y.grid))
    grid = _covering(d, lo, hi)
    members = tuple((name, tuple(a.placed(grid).plus(b.placed(grid))
                                 for a, b in zip(reps, y.representations_of(name))))
                    for name, reps in x.members)
    return BucketSet(grid, members)


def _mixture(parts, weights, scale, tau) -> Part:
    """sum_i weights_i parts_i, stored at ``scale``: part i is multiplied by
    weights_i scale / scale_i (one rounding: the deviation grows by u)."""
    out = None
    for p, w in zip(parts, weights):
        c = tuple(w * scale[j] / p.scale[j] for j in (0, 1))
        v = _scaled(p.values, *c)
        out = v if out is None else _sum(out, v)
    return Part(out, scale, tau)


def _mixture_scale(parts, weights) -> Tuple[float, float]:
    """Per row, a float c with sum_i weights_i c / scale_i <= 1 after the coefficients'
    rounding: the mixture's reference mass stays at most 1."""
    return tuple((1.0 - 16 * _U) / math.fsum(w / p.scale[j] for p, w in zip(parts, weights))
                 for j in (0, 1))


def merged(bulk: Part, rest: Part) -> BucketSet:
    """B + R in true units: an ordinary BucketSet certifying the whole composition."""
    both = (bulk, rest)
    x = _mixture(both, (1.0, 1.0), (1.0, 1.0), 0.0)
    tau = ((1.0 + max(bulk.tau, rest.tau)) * (1.0 + 2 * _U) - 1.0) * (1.0 + 4 * _U)
    return x.values.mapped(lambda r: r.with_relative_slack(tau))


def _weighted_sum(x: Part, y: Part, wx: float, wy: float) -> Part:
    """wx x + wy y, stored at a scale that keeps its reference mass at most 1."""
    scale = _mixture_scale((x, y), (wx, wy))
    tau = ((1.0 + max(x.tau, y.tau)) * (1.0 + 2 * _U) - 1.0) * (1.0 + 4 * _U)
    return _mixture((x, y), (wx, wy), scale, tau)


def _rest_factor(bulk: Part, rest: Part) -> Part:
    """2 B_k + R_k (``_weighted_sum``)."""
    return _weighted_sum(bulk, rest, 2.0, 1.0)


def _at_least(part: Part, spacing: float) -> Part:
    values = part.values.coarsened_to(spacing)       # itself where already as coarse
    return part if values is part.values else Part(values, part.scale, part.tau)


def rest_spacing(cut: TwoScaleLeaf, level: int, options: BucketOptions) -> float:
    """The rest's spacing after ``level`` levels: the leaf spacing, doubled as the engine's
    rule doubles an ordinary composition's (``compose_split``: while twice the spacing is
    at most ``resolution`` times the spread) for 2^level steps of one step's spread
    (``cut.spread``): the rest is never rounded coarser than one grid would round the
    whole."""
    spacing = cut.leaf.log_factor
    whole = cut.spread * math.sqrt(2.0 ** level)
    while 2.0 * spacing <= options.resolution * whole:
        spacing *= 2.0
    return spacing


def in_range(part: Part) -> bool:
    """Whether ``part``'s scales and deviation are finite (and its scales positive): a
    part whose are not cannot be added back or composed further (its weights in a sum,
    scale over scale, come out 0 or not finite)."""
    return (all(math.isfinite(s) and s > 0.0 for s in part.scale)
            and math.isfinite(part.tau))


def squarable(bulk: Part) -> bool:
    """Whether ``bulk`` squared (``next_level``) keeps finite scales: the square's are
    the squares of its."""
    return in_range(bulk) and all(math.isfinite(s * s) for s in bulk.scale)


def next_level(bulk: Part, rest: Part, budget: float, options: BucketOptions,
               spacing: float) -> Tuple[Part, Part, tuple]:
    """(B_{k+1}, R_{k+1}) = (B_k B_k, R_k (2 B_k + R_k)) for split-pair parts, and how
    the two products were made (``next_group_level``): the rest's product is coarsened
    to ``spacing`` (``rest_spacing``), not on its own spread."""
    square, bulk_plan = _product(bulk, bulk, budget, options)
    keep = dataclasses.replace(options, resolution=1e-12)
    product, rest_plan = _product(rest, _rest_factor(bulk, rest), budget, keep)
    return square, _at_least(product, spacing), (bulk_plan, rest_plan, spacing)


def next_group_level(bulk: Part, rest: Part, made: tuple) -> Tuple[Part, Part]:
    """``next_level`` for parts of one group direction, on the split pair's grids."""
    rest = _followed(made[1], rest, _rest_factor(bulk, rest))
    return _followed(made[0], bulk, bulk), _at_least(rest, made[2])


# -- a group's steps (several pairs of one count and leaf spacing) ---------------------
# A group unit P_1 ... P_m (``Composer._group``) takes two-scale leaves where each of its
# pairs does: with P_i = B_i + R_i, the product's bulk is every step in its bulk and
# its rest the others,
#
#     (B, R) * (B', R') = (B B', R (B' + R') + B R'),
#
# folded from the left over the pairs in the group's order.  Its spread is that of the
# sum of their losses (variances add), which sizes the rest's spacing as for one pair.

def group_cut(cuts) -> TwoScaleLeaf:
    """The cut of a group unit whose pairs' cuts are ``cuts`` (one leaf spacing): what
    ``rest_spacing`` reads (the leaf spacing and the unit's spread)."""
    first = cuts[0]
    if any(c.leaf.log_factor != first.leaf.log_factor for c in cuts):
        raise RuntimeError("internal error: a group's pairs have different leaf spacings")
    spread = math.sqrt(math.fsum(c.spread ** 2 for c in cuts))
    return TwoScaleLeaf(first.leaf, first.cut, first.low, first.high,
                        min(c.bulk_spacing for c in cuts), spread)


def _whole(bulk: Part, rest: Part) -> Part:
    """B + R (``_weighted_sum``)."""
    return _weighted_sum(bulk, rest, 1.0, 1.0)


def _rest_sum(first: Part, second: Part, spacing: float) -> Part:
    """The two disjoint terms of a product's rest, added (``_whole``) on at least
    ``spacing``."""
    return _at_least(_whole(first, second), spacing)


def next_factor(x: Tuple[Part, Part], y: Tuple[Part, Part], budget: float,
                options: BucketOptions, spacing: float) -> Tuple[Part, Part, tuple]:
    """(B B', R (B' + R') + B R') for split-pair parts x = (B, R), y = (B', R'), and how
    its products were made (``next_group_factor``): the bulk's product by the engine's
    policy, the rest's two terms kept on their spacing and their sum coarsened to
    ``spacing`` (``rest_spacing`` of the unit at level 0).  The three products are
    pieces of one composition, so their windows share its ``budget``, a third each (a
    whole one each put up to three times one grid's mass into the infinity atoms per
    pair, docs/method.md §3)."""
    (xb, xr), (yb, yr) = x, y
    share = budget / 3.0
    bulk, bulk_plan = _product(xb, yb, share, options)
    keep = dataclasses.replace(options, resolution=1e-12)
    first, first_plan = _product(xr, _whole(yb, yr), share, keep)
    second, second_plan = _product(xb, yr, share, keep)
    return bulk, _rest_sum(first, second, spacing), (bulk_plan, first_plan, second_plan,
                                                      spacing)


def next_group_factor(x: Tuple[Part, Part], y: Tuple[Part, Part],
                      made: tuple) -> Tuple[Part, Part]:
    """``next_factor`` for parts of one group direction, on the split pair's grids."""
    (xb, xr), (yb, yr) = x, y
    bulk = _followed(made[0], xb, yb)
    first = _followed(made[1], xr, _whole(yb, yr))
    second = _followed(made[2], xb, yr)
    return bulk, _rest_sum(first, second, made[3])
