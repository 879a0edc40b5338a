"""Composing sequences of mechanisms: leaves, binary powers, squaring, canonical order.

The composition of a history [(pair, count), ...] is built in one canonical order so
that the bounds are a function of the history alone (docs/method.md §3): equal pairs
are merged, pairs of equal count and leaf spacing are grouped, each group is the product
of its leaves raised to its count by cached binary powers M^(2^k), and products are
binary trees over aligned blocks (``Composer``).  Before each composition the operands are brought
to a common grid (squaring the finer one); after it, if the corners pushed more mass
into the infinity atoms than ``free_infty_budget`` per composed step allows and the
infinity mass grew more than ``growth_factor``-fold (paper §4.6, Fig. 10), both
operands are squared and the composition is redone on the coarser grid.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterator, Optional, Sequence, Tuple, Type

import numpy as np
from scipy import special

from ._validation import check_count, check_real
from .buckets import (MAX_LOSS_RANGE, Grid, GroupedBuckets, PaperBuckets, SplitBuckets,
                      leaf_masses, summable_spacing,
                      grouped_directions)  # noqa: F401  (grouped_directions re-exported)
from . import graded_leaves
from ._memory import prime_allocator
from .convolution import RowProduct, convolve_rows, smooth_length
from .mechanisms import MechanismPair
from .representation import BucketRepresentation

#: the per-step infinity budget is sized for the history's length rounded up to a
#: power of two, with no larger floor: a floor of 2^14 steps made every query of a
#: short history pay for 16,384 steps (longer leaves, finer round-off splits; 105 steps
#: at sigma 1.15, q 1.06e-5, delta 1.2e-14 took 0.24 s, now 0.12 s).  The price is a
#: new grid at each doubling of a growing history (one query per epoch over 100
#: epochs of 195 steps, run back to back: 2.3 s in all before, 3.8 s now;
#: docs/method.md §3)
MIN_STEPS_PLANNED = 1
#: fraction of the target delta the infinity atoms may take in the end
INFINITY_FRACTION = 1e-3
#: leaves needing more buckets than this at ``leaf_resolution`` (a heavy tail far from a
#: narrow bulk) get half that resolution (``BucketOptions.halve_long_tails``); measured
#: cost: about 1e-4 relative in epsilon
LEAF_BUCKETS_AT_FULL_RESOLUTION = 2 ** 13 - 2
#: largest |loss| a leaf resolves (e^t is formed directly there; beyond it, the
#: infinity atoms); per-step epsilons up to several hundred stay finite
LEAF_LOSS_RANGE = 600.0
#: the ladders adaptive grids' spacings may lie on (``BucketOptions.spacing_base``):
#: powers of two, and 3/4 of them (the query's levels between two halvings)
SPACING_BASES = (1.0, 0.75)
#: the level between two halvings: grids 3/4 as wide as the integer level below it
#: (``Composer.refined``; levels are integers and integers plus this)
THREE_QUARTER_LEVEL = math.log2(4.0 / 3.0)


#: the largest |level| a Composer refines or coarsens to (the engine uses -4..2)
MAX_LEVEL = 30


def level_parts(level: float) -> Tuple[int, bool]:
    """(k, whether ``level`` is k + THREE_QUARTER_LEVEL) for a grid level; ValueError for
    any other number."""
    if (isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating))
            or not abs(level) <= MAX_LEVEL):
        raise ValueError(f"level must be a number in [-{MAX_LEVEL}, {MAX_LEVEL}], got {level!r}")
    whole = math.floor(level + 1e-9)
    rest = level - whole
    if abs(rest) < 1e-9:
        return int(whole), False
    if abs(rest - THREE_QUARTER_LEVEL) < 1e-9:
        return int(whole), True
    raise ValueError(f"level must be an integer or an integer plus log2(4/3), got {level!r}")


#: prepared operands (coarsened, windowed, padded buckets) remembered per Composer:
#: at most this many entries and about this many bytes of rows (``OperandMemo``)
_OPERAND_MEMO_ENTRIES = 256
_OPERAND_MEMO_BYTES = 64 * 2 ** 20


@dataclass(frozen=True)
class BucketOptions:
    """Expert overrides; ``None`` means chosen automatically (paper's vocabulary).

    ``number_of_buckets`` fixes n for every composition and switches to the paper's
    squaring rule (square when a composition pushes more than ``free_infty_budget``
    per composed step into the infinity bucket and the infinity mass grew more than
    ``growth_factor``-fold).  Without it the grid adapts: the spacing follows the
    spread of the composed loss (``resolution`` times its standard deviation) and n
    follows its range, so only the buckets the precision needs are paid for.
    ``max_buckets`` caps the default grids; an epsilon query's finer levels
    (``Composer.refined``) may use twice as many.  ``halve_long_tails``: a leaf that
    needs more than LEAF_BUCKETS_AT_FULL_RESOLUTION buckets at ``leaf_resolution`` gets
    half that resolution (False: the query whose finest grids stayed too wide asks for
    them at full resolution, ``engine.adaptive_epsilon_bounds``).  ``two_scale``: a
    pair whose leaf is far coarser than its loss's narrow bulk composes its bulk on a
    finer grid of its own (pb_accountant/two_scale.py; False: one grid, as before).
    ``spacing_base``: adaptive grids' spacings are this times powers of two, so that
    grids of different pairs align; 1 (the default), or 3/4 for the query's levels
    between two halvings (``Composer.refined``; 3/4 is exact in binary, so every grid
    point (i + offset) spacing stays exact).  ``graded_leaves``: a leaf's rare tails
    are cut on every r-th grid point (pb_accountant/graded_leaves.py; False: on every
    point, as before).
    """

    number_of_buckets: Optional[int] = None
    factor: Optional[float] = None
    free_infty_budget: Optional[float] = None
    growth_factor: float = 2.2
    resolution: float = 0.015
    leaf_resolution: float = 0.04
    max_buckets: int = 2 ** 17 - 2
    halve_long_tails: bool = True
    two_scale: bool = True
    spacing_base: float = 1.0
    graded_leaves: bool = True

    def __post_init__(self):
        if self.number_of_buckets is not None:
            n = check_count("number_of_buckets", self.number_of_buckets, minimum=2,
                            maximum=MAX_BUCKETS_LIMIT)
            if n % 2:
                raise ValueError(f"number_of_buckets must be an even integer >= 2 and <= "
                                 f"{MAX_BUCKETS_LIMIT}, got {n!r}")
        if self.factor is not None:
            check_real("factor", self.factor, low=1.0, low_open=True)
            # the leaf forms e^t: even the fewest buckets (2, or the given number) must
            # stay inside MAX_LOSS_RANGE (said here, not at the first query)
            n = self.number_of_buckets or 2
            top = math.exp(MAX_LOSS_RANGE / n)
            if n * math.log(self.factor) > MAX_LOSS_RANGE:
                raise ValueError(f"factor must be > 1 and <= e^({MAX_LOSS_RANGE:g}/{n}) = "
                                 f"{top:.6g} with number_of_buckets={n} (the leaf's losses "
                                 f"stay within {MAX_LOSS_RANGE:g}), got {self.factor!r}")
        if self.free_infty_budget is not None:
            # (0 and 1 have no grid: no mass may leave it, or all of it may)
            check_real("free_infty_budget", self.free_infty_budget, low=0.0, high=1.0,
                       low_open=True, high_open=True)
        check_real("growth_factor", self.growth_factor, low=1.0, low_open=True)
        check_real("resolution", self.resolution, low=0.0, high=1.0, low_open=True)
        check_real("leaf_resolution", self.leaf_resolution, low=0.0, high=1.0, low_open=True)
        check_count("max_buckets", self.max_buckets, minimum=62, maximum=MAX_BUCKETS_LIMIT)
        for name in ("halve_long_tails", "two_scale", "graded_leaves"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got "
                                 f"{getattr(self, name)!r}")
        if (isinstance(self.spacing_base, bool)
                or not isinstance(self.spacing_base, (int, float))
                or self.spacing_base not in SPACING_BASES):
            raise ValueError(f"spacing_base must be one of {SPACING_BASES}, got "
                             f"{self.spacing_base!r}")
        # stored as plain Python numbers once valid: a whole float such as 1000.0 is the
        # count it names (it used to pass here and fail at the first query), and numpy
        # scalars would not go through json.dumps with a state_dict
        for name in ("number_of_buckets", "max_buckets"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("factor", "free_infty_budget", "growth_factor", "resolution",
                     "leaf_resolution", "spacing_base"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))


#: delta class used when no target delta is given (curves, delta queries): it sizes the
#: infinity atoms (at most 1e-13 in all).  Round-off is certified relative to the tail
#: (docs/floating-point.md), so delta queries stay tight far below it (3.4e-16 at
#: sigma 1.1, q 0.01, 1,000 steps); a smaller class costs about twice the time
DEFAULT_DELTA_CLASS = 1e-10
#: the most buckets a user may ask for (``number_of_buckets``, ``max_buckets``): 16 times
#: the default cap; at 2^21 fixed buckets 1,000 steps took 2.3 GB and 2 minutes, and
#: 10^9 asked for 15 GB before failing (a query must not exhaust the machine's memory)
MAX_BUCKETS_LIMIT = 2 ** 21

#: grids of a composed history are sized for no delta below this: after a composition
#: the certified round-off is mostly above it (measured 2.5e-31 for two sigma-5 Gaussian
#: steps, 5e-29 - 3e-26 for DP-SGD histories of 10-1,000 steps), so such deltas get no
#: finite upper bound, while the grids sized for them grew to 10^5 buckets (minutes at
#: delta 1e-300).  Not always: two steps at q 1e-9, or a few steps of a small discrete
#: pair, certify deltas near 1e-35 (an independent review), on these grids 1e-4 looser
#: than on grids sized for their delta.  Lower bounds there are valid on either grid
COMPOSED_DELTA_FLOOR = 1e-32


def delta_class(delta: Optional[float]) -> float:
    """Target delta rounded down to a power of ten (grids are cached per class)."""
    if delta is None:
        return DEFAULT_DELTA_CLASS
    return 10.0 ** math.floor(math.log10(delta) + 1e-12)


def planned_steps(total_steps: int) -> int:
    """History length rounded up to a power of two (at least MIN_STEPS_PLANNED)."""
    return max(MIN_STEPS_PLANNED, 1 << max(int(total_steps) - 1, 0).bit_length())


def per_step_infinity_budget(delta_q: float, planned: int = MIN_STEPS_PLANNED) -> float:
    """Infinity mass one step may add: the corners of every one of the ~log2(planned)
    composition levels may each add that much per composed step, so the total stays
    below INFINITY_FRACTION * delta."""
    return INFINITY_FRACTION * delta_q / (planned * max(1, planned.bit_length()))


def planned_for_budget(delta_q: float, budget: float) -> Optional[int]:
    """The planned length whose ``per_step_infinity_budget`` is ``budget`` (the budget
    falls strictly as the planned length doubles), or None where none is (a budget the
    user fixed)."""
    planned = MIN_STEPS_PLANNED
    while planned < 2 ** 63:
        b = per_step_infinity_budget(delta_q, planned)
        if b == budget:
            return planned
        if b < budget:
            return None
        planned *= 2
    return None


def buckets_for(reach: float, log_factor: float, cap: int) -> int:
    """Even n >= reach / log_factor (at least 30, at most ``cap``) whose full convolution,
    4n + 1 points, fills a 5-smooth transform (``fft_length``): the largest such n
    with the least transform that holds the reach."""
    need = max(reach / log_factor, 30.0)
    if not need < 2.0 ** 46:              # (beyond any cap; keeps 4n + 1 in the table)
        return int(cap)
    n = int(math.ceil(need))
    n += n % 2
    n = (smooth_length(4 * n + 1) - 1) // 4
    return int(min(n - n % 2, cap))


def fills_half(n: int, buckets: int) -> bool:
    """Whether a grid of ``n`` buckets (``buckets_for``) reaches more than half of
    ``buckets``: for ``buckets`` = 2^k - 2 that is what ``n >= buckets`` meant while n was
    rounded up to 2^k - 2 (power-of-two transforms), and a grid the cap ``buckets`` made
    coarser (its step doubled until the reach fits) always does."""
    return n > buckets // 2


def _leaf_reach(pair: MechanismPair, budget: float, cap: float):
    """(lo, hi, reach): the leaf's loss interval at tail ``budget`` and the larger end's
    distance from 0, at most ``cap``."""
    lo, hi = pair.loss_range(budget)
    return lo, hi, min(max(abs(lo), abs(hi), 1e-9), cap)


def leaf_spread(pair: MechanismPair, budget: float, cap: float = LEAF_LOSS_RANGE) -> float:
    """The loss spread that sizes ``pair``'s adaptive leaf spacing (``leaf_grid``): the
    A-weighted standard deviation of one step's loss, or reach / 32 where the finite
    loss takes a single value."""
    return leaf_probe(pair, budget, cap)[0]


def leaf_probe(pair: MechanismPair, budget: float, cap: float = LEAF_LOSS_RANGE):
    """(``leaf_spread``, the estimated loss moments of one step under A and under B),
    from one probe of ``pair`` (``MechanismPair.loss_probe``)."""
    reach = _leaf_reach(pair, budget, cap)[2]
    spread, moments = pair.loss_probe(reach)
    return (reach / 32.0 if spread < 1e-9 * reach else spread), moments


def leaf_grid(pair: MechanismPair, budget: float, options: BucketOptions,
              cap: float = LEAF_LOSS_RANGE, spread: Optional[float] = None) -> Grid:
    """Leaf grid: a spacing of ``spacing_base`` times a power of two (adaptive grids),
    so that grids of different pairs align.

    Losses beyond ``cap`` go to the infinity atoms (sound): leaves form e^t directly.
    The paper's buckets use MAX_LOSS_RANGE / 8 so that their products stay in range.
    ``spread``: ``leaf_spread(pair, budget, cap)``, where the caller has it.
    """
    lo, hi, reach = _leaf_reach(pair, budget, cap)
    if options.factor is not None:
        step = summable_spacing(math.log(options.factor))
        n = options.number_of_buckets or buckets_for(reach, step, options.max_buckets)
        if n * step > MAX_LOSS_RANGE:
            raise ValueError(
                f"factor={options.factor!r} with number_of_buckets={n} reaches |loss| = "
                f"{n * step:.4g} > {MAX_LOSS_RANGE} at the leaf; choose a smaller factor or "
                "fewer buckets")
        return Grid(step, n)
    if options.number_of_buckets is not None:
        n = options.number_of_buckets
        step = 2.0 ** math.ceil(math.log2(reach / n))
        while n * step > MAX_LOSS_RANGE:
            step /= 2.0
        return Grid(step, n)
    if spread is None:
        spread = leaf_spread(pair, budget, cap)
    base = options.spacing_base
    step = base * 2.0 ** math.floor(math.log2(max(options.leaf_resolution * spread / base,
                                                  1e-300)))
    step = min(step, base * 2.0 ** math.ceil(math.log2(reach / 30.0 / base)))
    # the grid follows the loss interval [lo, hi] (an offset centres it)
    clipped = lo < -cap or hi > cap
    lo, hi = max(lo, -cap), min(hi, cap)
    half = max((hi - lo) / 2.0, 1e-9)
    if options.halve_long_tails and half / step + 2 > LEAF_BUCKETS_AT_FULL_RESOLUTION / base:
        # long thin tails: half the leaf resolution halves its cost (on a ladder 3/4 as
        # wide, a leaf 4/3 as long is the one the integer level below halves: its
        # spacing stays 3/4 of that level's, never coarser)
        step *= 2.0
    while half / step + 2 > options.max_buckets:
        step *= 2.0
    offset = int(round((lo + hi) / 2.0 / step))
    n = buckets_for(half + step, step, options.max_buckets)
    # the leaf forms e^t: keep every grid point inside MAX_LOSS_RANGE (n need not fill
    # its transform, that only saves transform length)
    n_max = int((MAX_LOSS_RANGE / step - abs(offset))) // 2 * 2
    if clipped and cap >= LEAF_LOSS_RANGE:
        # losses beyond the cap go to the infinity atoms, and at per-step epsilons of
        # hundreds that mass decides the answer: reach as far as e^t allows
        n = max(n, min(n_max, options.max_buckets))
    return Grid(step, max(min(n, n_max), 2), offset)


@dataclass(frozen=True, eq=False)
class BucketSet:
    """The representations of one composition, all on the same grid.

    ``members`` holds, per registered method (``REPRESENTATIONS`` order, split first),
    the objects that method stores (one, or one per direction); every operation goes
    through the interface of pb_accountant/representation.py.
    """

    grid: Grid
    members: Tuple[Tuple[str, Tuple[BucketRepresentation, ...]], ...]

    def _get(self, method: str) -> Tuple[BucketRepresentation, ...]:
        for name, reps in self.members:
            if name == method:
                return reps
        return ()

    def mapped(self, f) -> "BucketSet":
        """Every representation through ``f``, an operation that keeps the grid (scaling,
        relative slack: pb_accountant/two_scale.py)."""
        return self._map(self.grid, f)

    def representations_of(self, method: str) -> Tuple[BucketRepresentation, ...]:
        """What ``method`` stores here (one, or one per direction; () if absent)."""
        return self._get(method)

    @property
    def split(self) -> SplitBuckets:
        """The split pair: always composed (it sizes the grid and the infinity mass)."""
        return self._get("split")[0]

    @property
    def grouped(self) -> Optional[GroupedBuckets]:
        reps = self._get("grouped")
        return reps[0] if reps else None

    @property
    def paper(self) -> Optional[Tuple[PaperBuckets, ...]]:
        """(A||B, B||A), or None."""
        return self._get("paper") or None

    @property
    def compositions(self) -> int:
        return self.split.compositions

    @staticmethod
    def leaf(pair: MechanismPair, grid: Grid, methods: FrozenSet[str]) -> "BucketSet":
        """Every representation ``methods`` asks for, built by its own ``leaves``."""
        members = tuple((name, reps) for name, reps in
                        ((name, tuple(cls.leaves(pair, grid, methods)))
                         for name, cls in REPRESENTATIONS.items()) if reps)
        return BucketSet(grid, members)

    def representations(self) -> Iterator[Tuple[str, BucketRepresentation]]:
        """(method name, representation) for every representation held, in a fixed
        order (split, grouped, paper A||B, paper B||A): the engine's curve order."""
        for name, reps in self.members:
            for rep in reps:
                yield name, rep

    def _map(self, grid, f) -> "BucketSet":
        """Apply one interface operation ``f`` to every representation."""
        return BucketSet(grid, tuple((name, tuple(f(r) for r in reps))
                                     for name, reps in self.members))

    def squared(self) -> "BucketSet":
        return self._map(self.grid.squared(), lambda r: r.squared())

    def padded(self, n: int) -> "BucketSet":
        if n == self.grid.number_of_buckets:
            return self
        return self._map(self.grid.with_buckets(n), lambda r: r.padded(n))

    def restricted(self, n: int, centre: int = 0) -> "BucketSet":
        """Keep 2n+1 buckets around local index ``centre`` (corners as each
        representation's rules say; relabelled groups centre on the split pair's
        mean loss)."""
        if n >= self.grid.number_of_buckets:
            return self
        grid = self.grid.window(n, centre)
        relabels = any(r.relabels for _, r in self.representations())
        mean = (self.split.mean_loss(0), self.split.mean_loss(1)) if relabels else None
        return self._map(grid, lambda r: r.restricted(grid, mean))

    def window(self, tail: float, cap: int, span=None,
               focus: Optional[str] = None) -> Tuple[int, int]:
        """(n, centre): the buckets the loss range needs at tail mass ``tail``
        (``span``: that range, if already known; ``focus``: the direction certified,
        ``SplitBuckets.needed_window``)."""
        lo, hi = span if span is not None else self.split.needed_window(tail, focus)
        d = self.grid.log_factor
        n = buckets_for((hi - lo) / 2.0 + d, d, cap)
        centre = int(round((lo + hi) / 2.0 / d)) - self.grid.offset
        return n, centre

    def trimmed(self, budget_per_step: float, cap: int) -> "BucketSet":
        """Restrict to the buckets the range needs (the adaptive policy)."""
        n, centre = self.window(budget_per_step * self.compositions, cap)
        return self.restricted(n, centre) if n < self.grid.number_of_buckets else self

    def coarsened_to(self, log_factor: float, trim: bool = False, memo=None) -> "BucketSet":
        """Square until the spacing is ``log_factor``; ``trim`` crops the emptied buckets
        (lossless: only buckets that are exactly empty in every row are dropped).

        ``memo``: the Composer's ``OperandMemo`` (cached binary powers are coarsened to
        the same spacing again and again during training); entries are immutable and
        published whole, so a concurrent reader never sees a half-built one.
        """
        if self.grid.log_factor >= log_factor * (1 - 1e-12):
            return self
        key = ("coarsened", self, log_factor, trim)
        if memo is not None:
            hit = memo.get(key)
            if hit is not None:
                return hit
        out = self
        while out.grid.log_factor < log_factor * (1 - 1e-12):
            out = out.squared()
            if trim:
                out = out.cropped()
        if memo is not None:
            memo.put(key, out)
        return out

    def _rows(self):
        for _, rep in self.representations():
            yield rep.rows

    def cropped(self) -> "BucketSet":
        """The same buckets on the smallest grid of the usual shape (``buckets_for``) that
        holds every non-zero entry of every row: exact, nothing moves."""
        n = self.grid.number_of_buckets
        first, last = None, None
        for rows in self._rows():
            nz = np.flatnonzero(np.any(rows != 0.0, axis=0))
            if len(nz):
                first = nz[0] if first is None else min(first, nz[0])
                last = nz[-1] if last is None else max(last, nz[-1])
        if first is None:
            return self
        centre = int((first + last) // 2)                  # position of the new centre
        half = max(centre - first, last - centre)
        m = buckets_for(float(half), 1.0, n)
        if m >= n:
            return self
        lo, hi = centre - m, centre + m
        if lo < 0 or hi > 2 * n:
            return self
        grid = self.grid.with_buckets(m, centre - n)
        return self._map(grid, lambda r: r.columns(grid, lo, hi))

    @property
    def forms_exponentials(self) -> bool:
        """Some representation forms e^{t} directly (the paper's buckets): the grid
        must then stay inside MAX_LOSS_RANGE."""
        return any(r.forms_exponentials for _, r in self.representations())

    def can_square(self) -> bool:
        """Representations that form e^{t} directly stay inside MAX_LOSS_RANGE; the
        others (split, grouped) may square without limit."""
        if not self.forms_exponentials:
            return True
        g = self.grid
        return (g.number_of_buckets + abs(g.offset)) * g.log_factor * 4.0 <= MAX_LOSS_RANGE

    def compose_full(self, other: "BucketSet", same: bool, tolerance: float) -> "BucketSet":
        """Product with all indices kept; ``tolerance``: round-off worth a finer split."""
        o = self if same else other
        t = tolerance
        if ([(name, len(reps)) for name, reps in self.members]
                != [(name, len(reps)) for name, reps in o.members]):
            raise ValueError("compose needs BucketSets of the same representations")
        pairs = [(x, y) for (_, x), (_, y) in zip(self.representations(), o.representations())]
        batched = [(x, y) for x, y in pairs if x.batchable]
        out = {}
        if len(batched) > 1 and self.grid.number_of_buckets <= 4094:
            # small grids: one batched transform for the split and the grouped rows
            # (large ones decide the finer split per representation instead)
            rows = np.vstack([x.rows for x, _ in batched])
            product = convolve_rows(rows, None if same else
                                    np.vstack([y.rows for _, y in batched]),
                                    np.concatenate([x.row_tolerance(y, t)
                                                    for x, y in batched]))
            start = 0
            for x, y in batched:
                rows_of_x = slice(start, start + len(x.rows))
                out[id(x)] = x.from_product(y, RowProduct(*(a[rows_of_x] for a in product)))
                start += len(x.rows)
        members = tuple((name, tuple(out[id(x)] if id(x) in out else x.compose_full(y, t)
                                     for x, y in zip(reps, o._get(name))))
                        for name, reps in self.members)
        return BucketSet(members[0][1][0].grid, members)


def compose_sets(x: BucketSet, y: BucketSet, budget_per_step: float,
                 options: BucketOptions, memo=None) -> BucketSet:
    """x * y on a common grid, with the squaring and range policy of ``options``
    (``memo``: the Composer's ``OperandMemo`` of coarsened buckets)."""
    same = x is y
    target = max(x.grid.log_factor, y.grid.log_factor)
    adaptive = options.number_of_buckets is None
    x = x.coarsened_to(target, trim=adaptive, memo=memo)
    y = x if same else y.coarsened_to(target, trim=adaptive, memo=memo)
    if options.number_of_buckets is None:
        # squaring leaves the content in the middle half: drop the empty indices
        x = x.trimmed(budget_per_step, options.max_buckets)
        y = x if same else y.trimmed(budget_per_step, options.max_buckets)
    n = max(x.grid.number_of_buckets, y.grid.number_of_buckets)
    if x.forms_exponentials:
        offsets = abs(x.grid.offset + y.grid.offset)
        limit = int((MAX_LOSS_RANGE / x.grid.log_factor - offsets) / 2.0) // 2 * 2
        if n > limit:                  # the paper's buckets form e^t: keep it in range
            n = max(limit, 2)
            x = x.restricted(n)
            y = x if same else y.restricted(n)
    x = x.padded(n)
    y = x if same else y.padded(n)
    # round-off above this share of the product's infinity budget buys a finer split
    tol = budget_per_step * (x.compositions + y.compositions)
    if options.number_of_buckets is not None:
        # the paper's rule on a fixed number of buckets
        while True:
            z = x.compose_full(y, same, tol).restricted(n)
            inf_before = max(x.split.infinity_bucket) + max(y.split.infinity_bucket)
            inf_after = max(z.split.infinity_bucket)
            if (z.split.overflow > budget_per_step * z.compositions
                    and inf_after > 0.5 * options.growth_factor * inf_before and x.can_square()):
                x = x.squared()
                y = x if same else y.squared()
                continue
            return z
    z = x.compose_full(y, same, tol)
    tail = budget_per_step * z.compositions
    _, spread = z.split.loss_moments()
    while (2.0 * z.grid.log_factor <= options.resolution * spread and z.can_square()):
        z = z.squared()
    while True:
        lo, hi = z.split.needed_window(tail)
        if not ((hi - lo) / 2.0 / z.grid.log_factor + 3 > options.max_buckets
                and z.can_square()):
            break
        z = z.squared()
    n_out, centre = z.window(tail, options.max_buckets, (lo, hi))
    return z.restricted(min(n_out, z.grid.number_of_buckets), centre)


# ------------------------------------------------------------- one plan, every representation
# The split pair alone decides every grid operation (squaring, windows, padding); the
# other representations follow the recorded plan (docs/method.md §3), so each is
# composed and cached on its own: a lower bound asked after an upper bound reuses the
# split pair, and the B||A groups are composed without recomposing it.

def _record_square(x: BucketSet, ops: list) -> BucketSet:
    ops.append(("square",))
    return x.squared()


def _record_restrict(x: BucketSet, n: int, centre: int, ops: list) -> BucketSet:
    """``x.restricted(n, centre)``, recording the window and the split pair's mean loss
    (where relabelling representations re-centre)."""
    if n >= x.grid.number_of_buckets:
        return x
    grid = x.grid.window(n, centre)
    mean = (x.split.mean_loss(0), x.split.mean_loss(1))
    ops.append(("restrict", grid, mean))
    return x._map(grid, lambda r: r.restricted(grid, None))


def _record_coarsen(x: BucketSet, log_factor: float, trim: bool, memo, ops: list) -> BucketSet:
    """``x.coarsened_to(log_factor, trim)``, recording its squarings and crops
    (``memo``: the Composer's ``OperandMemo``)."""
    out = x
    while out.grid.log_factor < log_factor * (1 - 1e-12):
        # one squaring (and crop) at a time, remembered: operands coarsened to
        # different spacings share their first squarings
        key = ("coarsen-step", out, trim)
        hit = memo.get(key) if memo is not None else None
        if hit is None:
            sub: list = []
            step = _record_square(out, sub)
            if trim:
                cropped = step.cropped()
                if cropped is not step:
                    sub.append(("crop", cropped.grid))
                    step = cropped
            hit = (step, tuple(sub))
            if memo is not None:
                memo.put(key, hit)
        out = hit[0]
        ops.extend(hit[1])
    return out


def _record_window(s: BucketSet, tail: float, cap: int, focus, memo, ops: list) -> BucketSet:
    """``s`` restricted to the window its ``tail`` leaves (``BucketSet.window``),
    recording the restriction; remembered in ``memo`` (a cached binary power is an
    operand of a new product at every query of a growing history)."""
    key = ("window", s, tail, cap, focus)
    hit = memo.get(key) if memo is not None else None
    if hit is not None:
        ops.extend(hit[1])
        return hit[0]
    sub: list = []
    n_keep, centre = s.window(tail, cap, focus=focus)
    out = _record_restrict(s, n_keep, centre, sub)
    if memo is not None:
        memo.put(key, (out, tuple(sub)))
    ops.extend(sub)
    return out


def _padded(s, n: int, memo):
    """``s.padded(n)`` (a BucketSet or one representation), remembered in ``memo``."""
    key = ("padded", s, n)
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        hit = s.padded(n)
        if memo is not None:
            memo.put(key, hit)
    return hit


@dataclass(frozen=True)
class Plan:
    """The grid operations of one composition, as the split pair decided them: on each
    operand, the tolerance of the product, then on the product."""

    x_ops: tuple
    y_ops: tuple
    tolerance: float
    z_ops: tuple


def compose_split(x: BucketSet, y: BucketSet, budget_per_step: float,
                  options: BucketOptions, memo=None,
                  focus: Optional[str] = None,
                  stored_scale: float = 1.0) -> Tuple[BucketSet, Plan]:
    """``compose_sets`` for BucketSets of the split pair alone, with the plan that the
    other representations follow (``follow_plan``).  ``memo``: the Composer's
    ``OperandMemo``, where the operands' coarsenings, windows and paddings are
    remembered.  ``focus`` "ab" or "ba": the
    windows and the spacing follow that direction's row alone (``Composer.compose``).
    ``stored_scale``: the product's rows hold at least this many times the true masses
    (a two-scale part, pb_accountant/two_scale.py), so the windows' tail, a budget of
    true mass, is that many times larger in stored units (any window is sound: it only
    decides how much mass folds into the infinity atoms)."""
    if x.forms_exponentials or y.forms_exponentials:
        raise ValueError("compose_split composes the split pair alone")
    same = x is y
    xo: list = []
    yo: list = []
    target = max(x.grid.log_factor, y.grid.log_factor)
    adaptive = options.number_of_buckets is None
    x = _record_coarsen(x, target, adaptive, memo, xo)
    y = x if same else _record_coarsen(y, target, adaptive, memo, yo)
    if adaptive:
        # squaring leaves the content in the middle half: drop the empty indices
        for ref in ("x", "y"):
            if ref == "y" and same:
                y = x
                continue
            s = x if ref == "x" else y
            s = _record_window(s, stored_scale * budget_per_step * s.compositions,
                               options.max_buckets, focus, memo, xo if ref == "x" else yo)
            if ref == "x":
                x = s
            else:
                y = s
    n = max(x.grid.number_of_buckets, y.grid.number_of_buckets)
    if n != x.grid.number_of_buckets:
        xo.append(("pad", n))
        x = _padded(x, n, memo)
    if same:
        y = x
    elif n != y.grid.number_of_buckets:
        yo.append(("pad", n))
        y = _padded(y, n, memo)
    tol = budget_per_step * (x.compositions + y.compositions)
    if not adaptive:
        # the paper's rule on a fixed number of buckets
        while True:
            zo: list = []
            z = _record_restrict(x.compose_full(y, same, tol), n, 0, zo)
            inf_before = max(x.split.infinity_bucket) + max(y.split.infinity_bucket)
            inf_after = max(z.split.infinity_bucket)
            if (z.split.overflow > budget_per_step * z.compositions
                    and inf_after > 0.5 * options.growth_factor * inf_before):
                x = _record_square(x, xo)
                y = x if same else _record_square(y, yo)
                continue
            return z, Plan(tuple(xo), tuple(yo), tol, tuple(zo))
    zo = []
    z = x.compose_full(y, same, tol)
    tail = stored_scale * budget_per_step * z.compositions
    _, spread = z.split.loss_moments(1 if focus == "ba" else 0)
    while 2.0 * z.grid.log_factor <= options.resolution * spread:
        z = _record_square(z, zo)
    while True:
        lo, hi = z.split.needed_window(tail, focus)
        if not (hi - lo) / 2.0 / z.grid.log_factor + 3 > options.max_buckets:
            break
        z = _record_square(z, zo)
    n_out, centre = z.window(tail, options.max_buckets, (lo, hi))
    z = _record_restrict(z, min(n_out, z.grid.number_of_buckets), centre, zo)
    return z, Plan(tuple(xo), tuple(yo), tol, tuple(zo))


def _follow_ops(r: BucketRepresentation, ops, memo=None) -> BucketRepresentation:
    """``ops`` applied to ``r``; ``memo`` (see ``follow_plan``) remembers each step, so
    an operand whose last steps differ (its padding follows the other operand) still
    reuses the steps before."""
    if memo is not None:
        for op in ops:
            key = ("follow", r, op)
            hit = memo.get(key)
            if hit is None:
                hit = _follow_ops(r, (op,))
                memo.put(key, hit)
            r = hit
        return r
    for op in ops:
        if op[0] == "square":
            r = r.squared()
        elif op[0] == "restrict":
            r = r.restricted(op[1], op[2])
        elif op[0] == "crop":
            # exact for the split pair (empty columns); a group outside is merged into
            # the edge group or dropped (GroupedBuckets.restricted), which only lowers
            # a lower bound
            r = r.restricted(op[1], None)
        else:                                   # ("pad", n)
            r = r.padded(op[1])
    return r


def follow_plan(plan: Plan, x: BucketRepresentation, y: BucketRepresentation,
                same: bool, memo=None) -> BucketRepresentation:
    """x * y for a representation other than the split pair, on the grids the split
    pair's composition chose (``compose_split``).  ``memo``: the Composer's
    ``OperandMemo``, where each operand's grid operations are remembered (as the split
    pair's are in ``compose_split``)."""
    x = _follow_ops(x, plan.x_ops, memo)
    y = x if same else _follow_ops(y, plan.y_ops, memo)
    z = x.compose_full(x if same else y, plan.tolerance)
    return _follow_ops(z, plan.z_ops)


#: the registry: method name -> representation class (pb_accountant/representation.py):
#: split pair (upper), grouped buckets for both or one direction (lower), the paper's
#: buckets (Definition 9 upper, Theorem 2 lower)
REPRESENTATIONS: Dict[str, Type[BucketRepresentation]] = {
    cls.method: cls for cls in (SplitBuckets, GroupedBuckets, PaperBuckets)}


def known_methods() -> Tuple[str, ...]:
    """Every name ``methods`` may hold: the variants of the registered representations."""
    return tuple(v for cls in REPRESENTATIONS.values() for v in cls.variants)


#: the method names of the built-in representations
METHODS = known_methods()


def canonical_history(sequence) -> Tuple[Tuple[MechanismPair, int], ...]:
    """Validate [(pair, count), ...], drop zero counts, merge equal neighbours."""
    out = []
    for k, item in enumerate(sequence):
        try:
            pair, count = item
        except (TypeError, ValueError):
            raise ValueError(f"sequence[{k}] must be a (mechanism, count) pair, got {item!r}") from None
        if not isinstance(pair, MechanismPair):
            raise ValueError(f"sequence[{k}][0] must be a MechanismPair, got {pair!r}")
        count = check_count(f"sequence[{k}] count", count)
        if count == 0:
            continue
        if out and out[-1][0] == pair:
            out[-1] = (pair, out[-1][1] + count)
        else:
            out.append((pair, count))
    return tuple(out)


def count_groups(history, spacing=None) -> Tuple[Tuple[int, Tuple[MechanismPair, ...]], ...]:
    """The canonical grouping of a canonical history (docs/method.md §3, segment grids).

    Equal pairs anywhere in the history are merged (their counts summed: composition
    is a product of independent pairs, so the order of the steps does not change the
    composed privacy loss distribution); then the pairs are grouped by count and by
    ``spacing(pair)`` (their leaf spacing), each group in order of first appearance,
    the groups in order of their first member.  A group (count c, pairs P_1..P_m) is
    composed as (P_1 * ... * P_m)^c: one product of leaves and one set of binary powers
    instead of binary powers of every pair.  Leaves of one group share their spacing,
    so no leaf is coarsened before its own composition has widened (a coarser leaf
    spacing costs tightness at every step, docs/method.md §3).
    """
    merged: "OrderedDict[MechanismPair, int]" = OrderedDict()
    for pair, count in history:
        merged[pair] = merged.get(pair, 0) + count
    groups: "OrderedDict[tuple, list]" = OrderedDict()
    for pair, count in merged.items():
        key = (count, None if spacing is None else spacing(pair))
        groups.setdefault(key, []).append(pair)
    return tuple((key[0], tuple(pairs)) for key, pairs in groups.items())


def _leaf_cap(methods) -> float:
    """Largest |loss| of the leaves of a joint composition of ``methods``: the paper's
    buckets form e^t, so their products must stay inside MAX_LOSS_RANGE."""
    exps = any(cls.forms_exponentials for cls in REPRESENTATIONS.values()
               if methods & set(cls.variants))
    return MAX_LOSS_RANGE / 8.0 if exps else LEAF_LOSS_RANGE


def _aligned_blocks(n: int):
    """(start, size) of the aligned blocks of n items: one block of 2^b consecutive items
    per set bit b of n, from the highest down."""
    blocks = []
    start = 0
    for b in range(n.bit_length() - 1, -1, -1):
        if (n >> b) & 1:
            blocks.append((start, 1 << b))
            start += 1 << b
    return blocks


class Composer:
    """Composes histories in a canonical order, with caches (docs/method.md §3, §8).

    Canonical order: the history's pairs are merged and grouped by count and leaf
    spacing (``count_groups``); a group (c, P_1..P_m) is the product of its leaves
    (a binary tree over aligned blocks: m written in binary, one block of 2^b
    consecutive leaves per set bit b from the highest down, each block the product of
    its two halves, the blocks folded left to right), raised to the power c by its
    binary powers folded from the highest set bit down; the groups are then combined
    by the same aligned-block tree.  The result is a function of the history alone;
    a schedule of equal-length epochs costs one product per epoch and one set of binary
    powers per leaf spacing, a per-step schedule about one small composition per step,
    and a history that grows at its end recomputes only O(log N) blocks (plus the
    powers of the group that grew).

    Thread safety: every cache holds immutable values (BucketSets, tuples), published
    whole under one re-entrant lock that every composition holds, so concurrent callers
    get bit-identical results and never see a half-built entry.
    """

    def __init__(self, options: BucketOptions = BucketOptions(), cache_size: int = 48):
        prime_allocator()      # (once per process: pb_accountant/_memory.py)
        self.options = options
        self._lock = threading.RLock()
        self._values: "OrderedDict[tuple, BucketSet]" = OrderedDict()
        self._operands = OperandMemo()
        self._coarsened_joint = OperandMemo()
        self._ids: dict = {}
        self._leaf_grids: dict = {}
        self._leaf_probes: dict = {}
        # the representations whose leaves a composition builds with the split leaf
        # (``compose``'s ``leaves``; set while it holds the lock)
        self._leaf_companions: Tuple[str, ...] = ()
        self._leaf_moments: dict = {}
        self._two_scale_cuts: dict = {}
        # the split pair's two-scale plans (``_two_scale_plans_of``): how each level's
        # and each fold's products were made, which the groups' chains repeat; kept
        # apart from the values, whose byte limit may evict a split state before the
        # groups' chains read its plans (grid operations, no rows; least recently made
        # out first beyond _GROUPS_REMEMBERED products)
        self._two_scale_plans: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._plans_held = 0
        # (unit, cfg, k) whose two-scale level k left the floating-point range
        # (``_two_scale_state``): its powers from k on are squared as ordinary ones
        self._two_scale_beyond: set = set()
        self._group_members: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._group_pairs = 0
        self._graded_segments: dict = {}
        self._refined: dict = {}
        self._bytes = 0
        self._cache_size = cache_size

    def __getstate__(self):
        return {"options": self.options, "cache_size": self._cache_size}

    def __setstate__(self, state):
        self.__init__(state["options"], state["cache_size"])

    def refined(self, level: float, halve_long_tails: bool = True) -> "Optional[Composer]":
        """A Composer whose leaf and final resolutions are 2^-level of this one's (its own
        caches, made once; a negative level coarsens), or None where the grid is fixed
        by the options (``number_of_buckets`` or ``factor``): the grids an answer asks
        for when it needs more, or less, accuracy (``engine.adaptive_epsilon_bounds``).
        ``level``: an integer, or an integer plus THREE_QUARTER_LEVEL, whose grids are
        3/4 as wide as the integer's (``BucketOptions.spacing_base`` 3/4: every spacing
        exactly 3/4 of the integer level's, the same rules sizing them).
        ``halve_long_tails`` False: its long-tailed leaves keep their full resolution
        (``BucketOptions.halve_long_tails``)."""
        whole, three_quarter = level_parts(level)
        o = self.options
        if whole == 0 and not three_quarter and halve_long_tails:
            return self
        if o.number_of_buckets is not None or o.factor is not None:
            return None
        key = (whole, three_quarter) if halve_long_tails else (whole, three_quarter, False)
        with self._lock:
            finer = self._refined.get(key)
            if finer is None:
                scale = 0.5 ** whole * (0.75 if three_quarter else 1.0)
                base = o.spacing_base
                if three_quarter:
                    # (a base already at 3/4 keeps the powers of two: its levels between
                    # two halvings need not be exactly 3/4 of the integer's)
                    base = 0.75 if base == 1.0 else 1.0
                # a finer level may use twice the bucket cap, so that a leaf the cap made
                # coarser than its leaf_resolution gets finer too (it used to stay as
                # coarse); not more: beyond 2^18 buckets the certified round-off of the
                # larger transforms outgrows what the finer spacing gains at small delta
                # (docs/method.md §3)
                cap = o.max_buckets if scale >= 1.0 else 2 * (o.max_buckets + 2) - 2
                finer = self._refined[key] = Composer(
                    dataclasses.replace(o, resolution=min(o.resolution * scale, 1.0),
                                        leaf_resolution=min(o.leaf_resolution * scale, 1.0),
                                        max_buckets=cap,
                                        halve_long_tails=o.halve_long_tails
                                        and halve_long_tails,
                                        spacing_base=base),
                    self._cache_size)
                # a leaf's probe (its spread and moments) depends on its pair and budget,
                # not on the resolutions: every level reads the same ones (each costs
                # about a leaf's masses; a many-pair schedule asks for them on every level;
                # the levels' locks differ, but each get, set or clear of a dict is atomic
                # and a probe is a pure function of its key)
                finer._leaf_probes = self._leaf_probes
            return finer

    def leaf_grids(self, history, delta: Optional[float] = None) -> Tuple[Grid, ...]:
        """The leaf grid of each of ``history``'s pairs, in canonical order (what composing
        it would use)."""
        history = canonical_history(history)
        if not history:
            return ()
        cfg = self._config(delta, sum(count for _, count in history))
        with self._lock:
            return tuple(self._leaf_grid(pair, cfg) for pair, _ in history)

    def largest_leaf(self, history, delta: Optional[float] = None) -> int:
        """The most buckets among the leaf grids of ``history``'s pairs: a query's cost
        grows with it."""
        return max((g.number_of_buckets for g in self.leaf_grids(history, delta)), default=0)

    def final_grid_coarsens(self, history, delta: Optional[float] = None) -> bool:
        """Whether composing ``history`` (adaptive grids) coarsens its leaf spacing.

        ``compose_split`` coarsens a product once ``resolution`` times its loss spread
        reaches twice its spacing.  The steps' spreads add as variances, so the whole
        history's spread is sqrt(sum count * spread^2) over its leaves
        (``leaf_spread``), against the widest leaf spacing.  Where it stays below, the
        answer's grid is the leaf grid itself: short histories, whose leaves were sized
        for the rounding of many steps.  Fixed grids: False."""
        history = canonical_history(history)
        o = self.options
        if not history or o.number_of_buckets is not None or o.factor is not None:
            return False
        cfg = self._config(delta, sum(count for _, count in history))
        with self._lock:
            spacing = max(self._leaf_grid(pair, cfg).log_factor for pair, _ in history)
            variance = math.fsum(count * self._leaf_spread(pair, cfg) ** 2
                                 for pair, count in history)
        return o.resolution * math.sqrt(variance) >= 2.0 * spacing

    def direction_spans(self, history, delta: Optional[float] = None,
                        groups: Sequence[str] = ()) -> Tuple[float, float, float]:
        """Predicted loss ranges of ``history``'s composed split pair: (both rows
        together, the A-row's alone, the B-row's alone).

        Means and variances of the loss add under composition; each row's range is its
        mean +- z standard deviations, z the normal quantile of the final tail mass
        (the infinity budget of the whole history), from the moments of the leaves
        (which the composition builds and caches anyway).  The A-row's mean lies near
        +KL and the B-row's near -KL, so at epsilon of thousands the joint range is
        mostly the empty span between them (``compose(..., focus=...)``).

        ``groups`` (among "grouped-ab", "grouped-ba"): the groups' leaves to build with
        the split pair's, from the same masses, for the composition that follows (a
        leaf's masses cost more than the rest of it, and are not kept once its leaves
        are made)."""
        groups = tuple(groups)
        if not set(groups) <= {"grouped-ab", "grouped-ba"}:
            raise ValueError(f"groups must be among 'grouped-ab' and 'grouped-ba', "
                             f"got {groups!r}")
        return self._spans(history, delta,
                           lambda pair, cfg: self._moments(("split",) + groups, pair, cfg))

    def leaves_fit(self, history, delta: Optional[float] = None,
                   groups: Sequence[str] = ()) -> bool:
        """Whether the leaves of ``history``'s pairs (the split pair's and those of
        ``groups``) fit in half the value cache, so that a prediction that builds them
        ahead of the composition (``direction_spans``) leaves them cached for it."""
        history = canonical_history(history)
        if not history:
            return True
        cfg = self._config(delta, sum(count for _, count in history))
        reps = 1 + len(tuple(groups))
        with self._lock:
            rows = sum(2 * (2 * self._leaf_grid(pair, cfg).number_of_buckets + 1)
                       for pair, _ in history)
        return (2 * reps * len(history) <= _VALUE_CACHE_ENTRIES + 4 * self._cache_size
                and 2 * 8 * reps * rows <= _VALUE_CACHE_BYTES)

    def predicted_spans(self, history, delta: Optional[float] = None
                        ) -> Tuple[float, float, float]:
        """``direction_spans`` from the pairs' probes (``leaf_probe``: the moments of
        one step's loss, estimated on the grid that sizes its leaf) instead of their
        leaves: no leaf is built, and every level predicts the same spans.  An
        estimate: ``engine`` reads it only to skip the leaves' prediction where the
        leaves do not fit in the cache (``leaves_fit``) and the directions are clearly
        not apart."""
        return self._spans(history, delta, lambda pair, cfg: self._leaf_probe(pair, cfg)[1])

    def _spans(self, history, delta, moments_of) -> Tuple[float, float, float]:
        """``_spans`` of ``history`` with each pair's moments from ``moments_of(pair,
        cfg)``."""
        history = canonical_history(history)
        if not history:
            return 0.0, 0.0, 0.0
        total = sum(count for _, count in history)
        cfg = self._config(delta, total)
        with self._lock:
            moments = [(count, moments_of(pair, cfg)) for pair, count in history]
        return _spans(moments, cfg[1] * total)

    # -- configuration ---------------------------------------------------------------
    def _config(self, delta: Optional[float], total_steps: int, focus: Optional[str] = None):
        """(delta class, per-step infinity budget, focus): part of every cache key (the
        leaves' keys leave the focus out: a leaf does not depend on it)."""
        dq = delta_class(delta)
        if total_steps > 1:
            dq = max(dq, COMPOSED_DELTA_FLOOR)
        budget = (self.options.free_infty_budget if self.options.free_infty_budget is not None
                  else per_step_infinity_budget(dq, planned_steps(total_steps)))
        return dq, budget, focus

    def _remember(self, key, value):
        old = self._values.pop(key, None)
        if old is not None:
            self._bytes -= _size(old)
        self._values[key] = value
        self._bytes += _size(value)
        limit = _VALUE_CACHE_ENTRIES + 4 * self._cache_size
        while len(self._values) > 8 and (len(self._values) > limit
                                         or self._bytes > _VALUE_CACHE_BYTES):
            _, old = self._values.popitem(last=False)
            self._bytes -= _size(old)

    def _intern(self, key) -> int:
        ident = self._ids.get(key)
        if ident is None:
            if len(self._ids) > _INTERNED_KEYS:
                # forget all names at once; ids are never reused, so values cached
                # under old ids are simply never found again
                self._ids.clear()
                self._values.clear()
                self._bytes = 0
            ident = self._ids[key] = _next_id()
        return ident

    # -- one node of the canonical order, per representation -------------------------
    # ``rep`` is "split" (value: (BucketSet of the split pair, Plan)), a grouped variant
    # "grouped-ab" / "grouped-ba" (value: GroupedBuckets on the split pair's grid), or
    # ("joint", methods) (value: a BucketSet of every method, composed together: the
    # paper's buckets, whose grid range the split pair alone does not respect).
    def _cached(self, key):
        hit = self._values.get(key)
        if hit is not None:
            self._values.move_to_end(key)
        return hit

    def _leaf_grid(self, pair, cfg, cap: float = LEAF_LOSS_RANGE) -> Grid:
        """The leaf grid of ``pair`` (remembered: the canonical grouping asks for its
        spacing at every query, and sizing it costs about as much as a leaf)."""
        key = (pair, cfg[:2], cap)
        grid = self._leaf_grids.get(key)
        if grid is None:
            if len(self._leaf_grids) > _INTERNED_KEYS:
                self._leaf_grids.clear()
            o = self.options
            spread = (self._leaf_spread(pair, cfg, cap)
                      if o.number_of_buckets is None and o.factor is None else None)
            grid = self._leaf_grids[key] = leaf_grid(pair, cfg[1], o, cap, spread)
        return grid

    def _leaf_spread(self, pair, cfg, cap: float = LEAF_LOSS_RANGE) -> float:
        """``leaf_spread`` of ``pair`` (remembered: it sizes the leaf grid and tells
        whether the composition coarsens, ``final_grid_coarsens``)."""
        return self._leaf_probe(pair, cfg, cap)[0]

    def _leaf_probe(self, pair, cfg, cap: float = LEAF_LOSS_RANGE):
        """``leaf_probe`` of ``pair``, remembered (shared by every refined level: it
        depends on the pair and the budget alone)."""
        key = (pair, cfg[:2], cap)
        probe = self._leaf_probes.get(key)
        if probe is None:
            if len(self._leaf_probes) > _INTERNED_KEYS:
                self._leaf_probes.clear()
            probe = self._leaf_probes[key] = leaf_probe(pair, cfg[1], cap)
        return probe

    def _graded(self, pair, cfg):
        """The segments of ``pair``'s graded leaf (pb_accountant/graded_leaves.py), or
        None where its leaf is cut on every grid point (remembered: a function of the
        pair and the budget alone)."""
        key = (pair, cfg[:2])
        if key not in self._graded_segments:
            if len(self._graded_segments) > _INTERNED_KEYS:
                self._graded_segments.clear()
            self._graded_segments[key] = self._graded_plan(pair, cfg)
        return self._graded_segments[key]

    def _graded_plan(self, pair, cfg):
        o = self.options
        if (not o.graded_leaves or o.number_of_buckets is not None or o.factor is not None
                or o.free_infty_budget is not None or pair.has_loss_atoms()
                or tuple(pair.infinity_masses()) != (0.0, 0.0)):
            return None
        planned = planned_for_budget(cfg[0], cfg[1])
        if planned is None:
            return None
        grid = self._leaf_grid(pair, cfg)
        cap = graded_leaves.ratio_cap(grid.log_factor, self._leaf_spread(pair, cfg),
                                      o.resolution, planned)
        return graded_leaves.segments(pair, grid, cap, cfg[1])

    def _moments(self, reps, pair, cfg):
        """``loss_moments`` of both rows of ``pair``'s split leaf, remembered (a query
        reads every pair's, and a history of many pairs need not keep all its leaves
        cached for that); the first call builds the leaves of ``reps`` with it."""
        key = (pair, cfg[:2])
        moments = self._leaf_moments.get(key)
        if moments is None:
            split = self._leaf(reps, pair, cfg)[0][0].split
            moments = (split.loss_moments(0), split.loss_moments(1))
            if len(self._leaf_moments) > _INTERNED_KEYS:
                self._leaf_moments.clear()
            self._leaf_moments[key] = moments
        return moments

    def _demote(self, keys) -> None:
        """Move cached ``keys`` to the front of the value cache, the first to be evicted:
        a leaf or a node already consumed into its parent is read again only if that
        parent is evicted, while a leaf not yet consumed is about to be read (a history
        of more leaves than the cache holds otherwise evicts each just before its use)."""
        for key in keys:
            if key in self._values:
                self._values.move_to_end(key, last=False)

    def _leaf(self, reps, pair, cfg):
        """The leaves of ``pair`` for each rep in ``reps`` (a tuple, in that order).  The
        split pair and the groups of a pair without loss atoms read the same masses
        (``leaf_masses`` on the leaf grid's points, ``GroupedBuckets.leaves``), computed
        once for all the leaves one call makes; where it builds the split leaf, it also
        builds the leaves of ``compose``'s ``leaves`` from the same masses."""
        out = []
        computed: dict = {}       # the split pair's masses, by leaf grid
        extra = ()
        if (self._leaf_companions and "split" in reps
                and self._cached(("split", "leaf", pair, cfg[:2])) is None):
            extra = tuple(rep for rep in self._leaf_companions if rep not in reps)

        def shared(grid):
            key = (grid.log_factor, grid.number_of_buckets, grid.offset)
            if key not in computed:
                computed[key] = leaf_masses(pair, grid.losses, grid.log_factor)
            return computed[key]

        def graded(grid, segs, kind):
            """The graded leaf of ``kind``, from masses shared like ``shared``'s."""
            key = ("graded", grid.log_factor, grid.number_of_buckets, grid.offset)
            if key not in computed:
                computed[key] = graded_leaves.masses(pair, grid, segs)
            return graded_leaves.build(grid, segs, computed[key], (kind,))[0]

        for rep in reps + extra:
            key = (rep, "leaf", pair, cfg[:2])
            value = self._cached(key)
            if value is None:
                if rep == "split":
                    grid = self._leaf_grid(pair, cfg)
                    segs = self._graded(pair, cfg)
                    split = (SplitBuckets.leaves(pair, grid, masses=shared(grid)) if segs is None
                             else (graded(grid, segs, "split"),))
                    value = (BucketSet(grid, (("split", split),)), None)
                elif isinstance(rep, tuple):
                    methods = rep[1]
                    value = BucketSet.leaf(pair, self._leaf_grid(pair, cfg, _leaf_cap(methods)),
                                           methods)
                else:
                    grid = self._leaf(("split",), pair, cfg)[0][0].grid
                    segs = (self._graded(pair, cfg) if rep in graded_leaves.GROUPED
                            else None)
                    if segs is not None:
                        value = graded(grid, segs, rep)
                    else:
                        masses = (shared(grid) if GroupedBuckets.reads_split_masses(pair)
                                  else None)
                        value = GroupedBuckets.leaves(pair, grid, (rep,),
                                                      split_masses=masses)[0]
                self._remember(key, value)
            out.append(value)
        return tuple(out[:len(reps)])

    def _combine(self, reps, key, cfg, left, right, same: bool = False):
        """The values of node ``key`` for each rep in ``reps``: left * right, cached.

        All representations of a node are computed together (the split pair first, its
        plan then followed by the others), so none needs a child that the value cache
        evicted while another representation's tree was being composed.
        """
        out = {}
        for rep in reps:
            hit = self._cached((rep, key))
            if hit is not None:
                out[rep] = hit
        missing = tuple(rep for rep in reps if rep not in out)
        if not missing:
            return tuple(out[rep] for rep in reps)
        joint = [rep for rep in missing if isinstance(rep, tuple)]
        for rep in joint:
            x = left((rep,))[0]
            y = x if same else right((rep,))[0]
            out[rep] = compose_sets(x, y, cfg[1], self.options, self._coarsened_joint)
            self._remember((rep, key), out[rep])
        following = tuple(rep for rep in missing if not isinstance(rep, tuple))
        if following:
            split = out.get("split") or self._cached(("split", key))
            child = tuple(rep for rep in following if rep != "split")
            if split is None:
                child = ("split",) + child
            xs = dict(zip(child, left(child)))
            ys = xs if same else dict(zip(child, right(child)))
            if split is None:
                split = compose_split(xs["split"][0], ys["split"][0], cfg[1], self.options,
                                      self._operands, cfg[2])
                self._remember(("split", key), split)
            out["split"] = split
            for rep in following:
                if rep == "split":
                    continue
                value = follow_plan(split[1], xs[rep], ys[rep], same, self._operands)
                if value.grid != split[0].grid:
                    raise RuntimeError(f"internal error: {rep} left the split pair's grid "
                                       f"({value.grid!r} != {split[0].grid!r})")
                self._remember((rep, key), value)
                out[rep] = value
        return tuple(out[rep] for rep in reps)

    # A *unit* is what binary powers are taken of: a mechanism pair (key: the pair,
    # base: its leaf) or the product of the leaves of one count group (key:
    # ("group", name), base: that product).  ``base(reps)`` returns its values.
    def _power(self, reps, unit, k: int, cfg, base):
        """unit^(2^k): the base squared k times by self-composition, or, for a pair
        that takes two-scale leaves, their sum up to the level where its parts merge
        (pb_accountant/two_scale.py); a group that takes them has its fold's sum as its
        first power (its pairs' product on one grid would be composed for it alone)."""
        if k == 0:
            if isinstance(unit, tuple) and self._two_scale_cut(reps, unit, cfg) is not None:
                return self._two_scale_power(reps, unit, 0, cfg, None)
            return base(reps)
        if self._two_scale_cut(reps, unit, cfg) is not None:
            cached = tuple(self._cached((rep, ("pow", unit, cfg, k))) for rep in reps)
            if all(v is not None for v in cached):
                return cached         # (the parts' levels may have left the cache)
            state = self._two_scale_state(unit, k, cfg,
                                          tuple(rep for rep in reps if rep != "split"))
            if state is not None:
                return self._two_scale_power(reps, unit, k, cfg, state)
        below = lambda r: self._power(r, unit, k - 1, cfg, base)  # noqa: E731
        return self._combine(reps, ("pow", unit, cfg, k), cfg, below, below, same=True)

    # -- two-scale leaves (pb_accountant/two_scale.py) --------------------------------
    def _two_scale_cut(self, reps, unit, cfg):
        """The cut of ``unit``'s steps into bulk and rest, or None (focused or joint
        compositions, pairs the rule declines, groups with such a pair).  A group's cut
        joins its pairs' (``two_scale.group_cut``): its steps are folded from theirs
        (``_two_scale_fold``)."""
        if (not self.options.two_scale or cfg[2] is not None
                or not all(isinstance(r, str) for r in reps)):
            return None
        key = (unit, cfg[:2])
        if key not in self._two_scale_cuts:
            if len(self._two_scale_cuts) > _INTERNED_KEYS:
                self._two_scale_cuts.clear()
            from . import two_scale      # (it composes with this module's functions)
            if isinstance(unit, tuple):
                pairs = self._group_members.get(unit)
                if pairs is None:
                    raise RuntimeError(f"internal error: the pairs of group {unit!r} are "
                                       "not known")
                cuts = []
                for pair in pairs:
                    # (the first pair that declines settles it: the pairs' leaves are
                    # built for the check, and the group's own product reads them next)
                    cuts.append(self._two_scale_cut(reps, pair, cfg))
                    if cuts[-1] is None:
                        break
                self._two_scale_cuts[key] = (None if cuts[-1] is None
                                             else two_scale.group_cut(cuts))
                return self._two_scale_cuts[key]
            # (the leaves the query asks for, made together: they share their masses)
            leaf = self._leaf(("split",) + tuple(r for r in reps if r != "split"), unit,
                              cfg)[0][0].split
            cut = two_scale.two_scale_leaf(unit, leaf, self.options)
            if cut is not None:
                parts = two_scale.part_leaves(unit, cut)
                if parts is None:
                    cut = None
                else:
                    self._remember(("two-scale-leaves", unit, cfg[:2]), parts)
            self._two_scale_cuts[key] = cut
        return self._two_scale_cuts[key]

    def _two_scale_state(self, unit, k: int, cfg, also=()):
        """The split pair's (bulk, rest, done, plans) after k levels, or None once the
        parts have merged at a level below k (the ordinary squaring then goes on from
        the merged sum), where level k's parts would leave the floating-point range (a
        group of many pairs: its bulk's scale, about (1/mass)^(2^k), grows with its
        pairs' count as well; ``two_scale.in_range``), or where ``unit`` takes no
        two-scale leaves; ``plans``: how
        level k's products were made from level k-1's parts, which the groups' chains
        repeat (``_two_scale_group_state``).  ``also``: group directions the query
        reads, whose folds a group's fold makes with the split pair's
        (``_two_scale_fold``)."""
        from . import two_scale
        key = ("two-scale", "split", unit, cfg, k)
        hit = self._cached(key)
        if hit is not None:
            return hit
        if self._two_scale_cut(("split",), unit, cfg) is None:
            return None
        if k == 1 and isinstance(unit, tuple):
            below = self._two_scale_fold(unit, cfg, also)[:2] + (False,)
        elif k == 1:
            below = self._two_scale_leaves(unit, cfg)
            below = (two_scale.representation(below[0], "split"),
                     two_scale.representation(below[1], "split"), False)
        else:
            below = self._two_scale_state(unit, k - 1, cfg, also)
            if below is None or below[2]:
                return None
        if (unit, cfg, k) in self._two_scale_beyond or not two_scale.squarable(below[0]):
            return None
        cut = self._two_scale_cut(("split",), unit, cfg)
        spacing = two_scale.rest_spacing(cut, k, self.options)
        bulk, rest, plans = two_scale.next_level(below[0], below[1], cfg[1], self.options,
                                                 spacing)
        if not (two_scale.in_range(bulk) and two_scale.in_range(rest)):
            # the parts' scales left the floating-point range (any use of such a part
            # raised): the parts merge at level k - 1 and the ordinary squaring goes on
            if len(self._two_scale_beyond) > _INTERNED_KEYS:
                self._two_scale_beyond.clear()
            self._two_scale_beyond.add((unit, cfg, k))
            return None
        done = (bulk.split.grid.log_factor >= rest.split.grid.log_factor * (1 - 1e-12)
                or k >= two_scale.MAX_LEVELS)
        value = (bulk, rest, done, plans)
        self._remember(key, value)
        self._keep_plans(("level", unit, cfg, k), plans)
        return value

    def _keep_plans(self, key, plans) -> None:
        """Remember the plans under ``key`` (a level's: one product's; a fold's: one per
        pair after the first), the oldest forgotten beyond _GROUPS_REMEMBERED products
        (a schedule that grows by one pair per epoch makes a longer fold every query)."""
        def products(name, value) -> int:
            return max(len(value), 1) if name[0] == "fold" else 1

        held = self._two_scale_plans
        old = held.pop(key, None)
        if old is not None:
            self._plans_held -= products(key, old)
        held[key] = plans
        self._plans_held += products(key, plans)
        while len(held) > 1 and self._plans_held > _GROUPS_REMEMBERED:
            self._plans_held -= products(*held.popitem(last=False))

    def _two_scale_plans_of(self, unit, k: int, cfg):
        """The split pair's plans of level k (k >= 1: ``_two_scale_state``'s) or of its
        fold (k = 0: ``_two_scale_fold``'s), remembered when they were made, else made
        again (the same plans: each is a function of the unit and ``cfg`` alone)."""
        plans = self._two_scale_plans.get(("level" if k else "fold", unit, cfg, k))
        if plans is None:
            plans = (self._two_scale_state(unit, k, cfg)[3] if k
                     else self._two_scale_fold(unit, cfg)[2])
        return plans

    def _two_scale_group_state(self, rep: str, unit, k: int, cfg):
        """(bulk, rest) of the groups ``rep`` after k levels, composed on the grids the
        split pair's chain chose (only the directions a query reads are composed)."""
        from . import two_scale
        key = ("two-scale", rep, unit, cfg, k)
        hit = self._cached(key)
        if hit is not None:
            return hit
        if k == 1 and isinstance(unit, tuple):
            below = self._two_scale_group_fold(rep, unit, cfg)
        elif k == 1:
            below = tuple(two_scale.representation(p, rep)
                          for p in self._two_scale_leaves(unit, cfg))
        else:
            below = self._two_scale_group_state(rep, unit, k - 1, cfg)
        value = two_scale.next_group_level(below[0], below[1],
                                           self._two_scale_plans_of(unit, k, cfg))
        self._remember(key, value)
        return value

    def _two_scale_fold(self, unit, cfg, also=()):
        """The split pair's (bulk, rest, plans) of one step of a group ``unit``: its
        pairs' parts folded from the left (``two_scale.next_factor``); ``plans``: how
        each product was made, which the groups' folds repeat.  Every prefix of the
        pairs is a fold of its own, cached under its name and the rest's spacing: a
        schedule that grows by one pair per epoch folds one more pair per query.

        ``also``: group directions whose folds are made in the same pass, pair by pair
        (``_two_scale_group_fold``'s values, cached under its names), where they start
        from the same prefix: each pair's parts are then read once while they are in
        the cache (a many-pair group's parts can outgrow it, and a fold of the groups
        after the split pair's would make them all again)."""
        from . import two_scale
        spacing = two_scale.rest_spacing(self._two_scale_cut(("split",), unit, cfg), 0,
                                         self.options)
        pairs = self._fold_members(unit)
        names = self._fold_names("split", pairs, cfg, spacing)
        start, state = self._fold_prefix(names)
        together = []
        if start < len(pairs):
            for rep in dict.fromkeys(also):
                rep_names = self._fold_names(rep, pairs, cfg, spacing)
                rep_start, rep_state = self._fold_prefix(rep_names)
                if rep_start == start:
                    together.append([rep, rep_names, rep_state])
        for j in range(start, len(pairs)):
            leaves = self._two_scale_leaves(pairs[j], cfg)
            parts = tuple(two_scale.representation(p, "split") for p in leaves)
            if state is None:
                state = parts + ((),)
            else:
                bulk, rest, made = two_scale.next_factor(state[:2], parts, cfg[1],
                                                         self.options, spacing)
                state = (bulk, rest, state[2] + (made,))
            for entry in together:
                parts = tuple(two_scale.representation(p, entry[0]) for p in leaves)
                entry[2] = (parts if entry[2] is None
                            else two_scale.next_group_factor(entry[2], parts, state[2][j - 1]))
        if start < len(pairs):
            self._remember(names[-1], state)
            for rep, rep_names, rep_state in together:
                self._remember(rep_names[-1], rep_state)
        self._keep_plans(("fold", unit, cfg, 0), state[2])
        return state

    def _two_scale_group_fold(self, rep: str, unit, cfg):
        """``_two_scale_fold`` of the groups ``rep``, on the split pair's grids."""
        from . import two_scale
        spacing = two_scale.rest_spacing(self._two_scale_cut(("split",), unit, cfg), 0,
                                         self.options)
        pairs = self._fold_members(unit)
        names = self._fold_names(rep, pairs, cfg, spacing)
        start, state = self._fold_prefix(names)
        if start < len(pairs):
            plans = self._two_scale_plans_of(unit, 0, cfg) if start or len(pairs) > 1 else ()
        for j in range(start, len(pairs)):
            parts = tuple(two_scale.representation(p, rep)
                          for p in self._two_scale_leaves(pairs[j], cfg))
            state = (parts if state is None
                     else two_scale.next_group_factor(state, parts, plans[j - 1]))
        if start < len(pairs):
            self._remember(names[-1], state)
        return state

    def _fold_members(self, unit):
        pairs = self._group_members.get(unit)
        if pairs is None:
            raise RuntimeError(f"internal error: the pairs of group {unit!r} are not known")
        return pairs

    def _fold_names(self, rep: str, pairs, cfg, spacing):
        """The cache keys of the folds of every prefix of ``pairs`` for ``rep``."""
        names, prev = [], None
        for pair in pairs:
            prev = self._intern(("pair-fold", prev, pair))
            names.append(("two-scale-fold", rep, prev, spacing, cfg))
        return names

    def _fold_prefix(self, names):
        """(length, fold) of the longest prefix whose fold is cached ((0, None): none)."""
        for j in range(len(names) - 1, -1, -1):
            hit = self._cached(names[j])
            if hit is not None:
                return j + 1, hit
        return 0, None

    def _two_scale_leaves(self, unit, cfg):
        from . import two_scale
        hit = self._cached(("two-scale-leaves", unit, cfg[:2]))
        if hit is None:
            hit = two_scale.part_leaves(unit, self._two_scale_cut(("split",), unit, cfg))
            self._remember(("two-scale-leaves", unit, cfg[:2]), hit)
        return hit

    def _two_scale_power(self, reps, unit, k: int, cfg, state):
        """unit^(2^k) = bulk + rest, each representation cached as the ordinary powers
        are (k = 0, state None: a group's fold)."""
        from . import two_scale
        key = ("pow", unit, cfg, k)
        out = {rep: self._cached((rep, key)) for rep in reps}
        for rep in reps:
            if out[rep] is None:
                if rep == "split":
                    parts = (state[:2] if k else self._two_scale_fold(
                        unit, cfg, tuple(r for r in reps if r != "split"))[:2])
                    whole = two_scale.merged(*parts)
                    value = (BucketSet(whole.grid, (("split", (whole.split,)),)), None)
                else:
                    parts = (self._two_scale_group_state(rep, unit, k, cfg) if k
                             else self._two_scale_group_fold(rep, unit, cfg))
                    value, = two_scale.merged(*parts).representations_of("grouped")
                out[rep] = value
                self._remember((rep, key), value)
        return tuple(out[rep] for rep in reps)

    def _segment(self, reps, unit, count: int, b: int, cfg, base):
        """unit^count down to bit ``b``: its binary powers folded from the highest set
        bit down (canonical order)."""
        higher = [c for c in range(b + 1, count.bit_length()) if (count >> c) & 1]
        if not higher:
            return self._power(reps, unit, b, cfg, base)
        prev = higher[0]
        return self._combine(reps, ("seg", unit, cfg, count >> b, b), cfg,
                             lambda r: self._segment(r, unit, count, prev, cfg, base),
                             lambda r: self._power(r, unit, b, cfg, base))

    def _block(self, reps, ids, item, start: int, size: int, cfg, item_keys=None):
        """The product of items[start:start+size] (size a power of two): the product of
        its two halves, cached under the interned name of its content; ``item(reps, i)``
        gives the values of item i.  ``item_keys(i)``: the cache keys of item i, where
        consumed items and nodes are to be evicted first (``_demote``)."""
        if size == 1:
            return item(reps, start)
        half = size // 2
        out = self._combine(reps, ("block", ids[(start, size)], cfg), cfg,
                            lambda r: self._block(r, ids, item, start, half, cfg, item_keys),
                            lambda r: self._block(r, ids, item, start + half, half, cfg,
                                                  item_keys))
        if item_keys is not None:
            if half == 1:
                self._demote(item_keys(start) + item_keys(start + 1))
            else:
                self._demote([(rep, ("block", ids[(s, half)], cfg))
                              for s in (start, start + half) for rep in reps])
        return out

    def _fold(self, reps, ids, item, blocks, k: int, cfg, item_keys=None):
        """The blocks 0..k folded left to right."""
        start, size = blocks[k]
        if k == 0:
            return self._block(reps, ids, item, start, size, cfg, item_keys)
        return self._combine(reps, ("fold", tuple(ids[blk] for blk in blocks[: k + 1]), cfg),
                             cfg, lambda r: self._fold(r, ids, item, blocks, k - 1, cfg,
                                                       item_keys),
                             lambda r: self._block(r, ids, item, start, size, cfg, item_keys))

    def _product(self, reps, names, item, cfg, item_keys=None):
        """The product of the items named ``names`` (interned keys) in the canonical
        binary tree over aligned blocks (``item_keys``: see ``_block``)."""
        blocks = _aligned_blocks(len(names))
        ids = {(i, 1): self._intern(name) for i, name in enumerate(names)}
        for start, size in blocks:
            self._name_block(ids, start, size)
        return self._fold(reps, ids, item, blocks, len(blocks) - 1, cfg, item_keys)

    def _group(self, reps, count: int, pairs, cfg):
        """The steps of one count group: (product of the leaves of ``pairs``)^count."""
        if len(pairs) == 1:
            pair = pairs[0]
            base = lambda r: self._leaf(r, pair, cfg)  # noqa: E731
            unit = pair
        else:
            base = lambda r: self._product(  # noqa: E731
                r, [("seg", p, 1) for p in pairs],
                lambda rr, i: self._leaf(rr, pairs[i], cfg), cfg,
                lambda i: [(rep, "leaf", pairs[i], cfg[:2]) for rep in r])
            unit = ("group", self._intern(("group",) + tuple(pairs)))
            self._register_group(unit, pairs)
        low = (count & -count).bit_length() - 1        # lowest set bit
        return self._segment(reps, unit, count, low, cfg, base)

    def _register_group(self, unit, pairs) -> None:
        """Remember the pairs of group ``unit`` for its two-scale fold (``_two_scale_fold``),
        the most recent first: every composition of the group comes through ``_group``,
        which registers it again, so it is present while its powers are composed; the
        oldest are forgotten beyond _GROUPS_REMEMBERED groups or pairs."""
        members = self._group_members
        if unit in members:
            members.move_to_end(unit)
            return
        members[unit] = tuple(pairs)
        self._group_pairs += len(pairs)
        while len(members) > 1 and (len(members) > _GROUPS_REMEMBERED
                                    or self._group_pairs > _GROUPS_REMEMBERED):
            _, old = members.popitem(last=False)
            self._group_pairs -= len(old)

    def _history(self, reps, groups, cfg):
        """The product of the count groups (canonical order, ``count_groups``)."""
        names = [("group-value", count) + tuple(pairs) for count, pairs in groups]
        return self._product(reps, names,
                             lambda r, i: self._group(r, groups[i][0], groups[i][1], cfg), cfg)

    def _name_block(self, ids, start, size):
        key = (start, size)
        if key not in ids:
            half = size // 2
            left = self._name_block(ids, start, half)
            right = self._name_block(ids, start + half, half)
            ids[key] = self._intern(("node", left, right))
        return ids[key]

    def compose(self, history, delta: Optional[float] = None,
                methods: Sequence[str] = ("split", "grouped"),
                focus: Optional[str] = None,
                leaves: Sequence[str] = ()) -> Optional[BucketSet]:
        """The BucketSet of a canonical history (None for an empty one).

        The split pair and the grouped buckets are each composed and cached on their
        own, the groups following the split pair's plan (``compose_split``): "grouped"
        is the A||B and the B||A groups, each re-centred on its own direction's mean
        loss.  Other representations (the paper's buckets, which must stay inside
        MAX_LOSS_RANGE, or a new registry entry) are composed together with them.

        ``focus`` "ab" ("ba"): every window and spacing follows the A-row (B-row) alone,
        so the grids hold that direction's mass and not the span between the two
        directions' (twice the mean loss, which at epsilon of thousands is many times
        the spread).  The result certifies that direction only: the other row folds
        into its infinity atom or its edge, which keeps its bound valid but trivial
        (``engine.PrivacyBuckets.of_directions`` joins two such compositions).  Only
        the split pair and that direction's groups may be asked for.

        ``leaves`` (among "grouped-ab", "grouped-ba"): group directions whose leaves are
        built, and cached, with the split pair's from the same masses, for a
        composition of those groups that may follow (``engine._refined_bounds``).
        """
        methods = frozenset(methods) | {"split"}
        known = known_methods()
        unknown = methods - set(known)
        if unknown:
            raise ValueError(f"methods must be among {', '.join(known)}, got {sorted(unknown)!r}")
        leaves = tuple(leaves)
        if not set(leaves) <= {"grouped-ab", "grouped-ba"}:
            raise ValueError(f"leaves must be among 'grouped-ab' and 'grouped-ba', "
                             f"got {leaves!r}")
        if focus is not None:
            allowed = {"split", f"grouped-{focus}"} if focus in ("ab", "ba") else None
            if allowed is None or not methods <= allowed:
                raise ValueError(f"focus must be None, 'ab' or 'ba', with methods among "
                                 f"split and grouped-<focus>; got focus={focus!r}, "
                                 f"methods {sorted(methods)!r}")
        history = canonical_history(history)
        if not history:
            return None
        cfg = self._config(delta, sum(count for _, count in history), focus)
        cap = LEAF_LOSS_RANGE if methods <= _FOLLOWING else _leaf_cap(methods)
        with self._lock:
            groups = count_groups(history,
                                  lambda pair: self._leaf_grid(pair, cfg, cap).log_factor)
            if not methods <= _FOLLOWING:
                return self._history((("joint", methods),), groups, cfg)[0]
            reps = ("split",) + tuple(f"grouped-{d}" for d in grouped_directions(methods))
            self._leaf_companions = leaves
            try:
                values = self._history(reps, groups, cfg)
            finally:
                self._leaf_companions = ()
        split, grouped = values[0][0], values[1:]
        members = split.members + ((("grouped", grouped),) if grouped else ())
        return BucketSet(split.grid, members)


#: methods composed one representation at a time (the others jointly)
_FOLLOWING = frozenset({"split", "grouped", "grouped-ab", "grouped-ba"})

#: cached composed values per Composer: at most this many entries (plus 4 per
#: cache_size) and about this many bytes of split rows
_VALUE_CACHE_ENTRIES = 4096
_VALUE_CACHE_BYTES = 256 * 2 ** 20
#: interned block names before the table is reset
_INTERNED_KEYS = 400_000
#: groups, and pairs in them, whose members a Composer remembers (``_register_group``)
_GROUPS_REMEMBERED = 2 ** 16
_ID_LOCK = threading.Lock()
_ID_COUNTER = [0]


def _size(value) -> int:
    """Bytes of rows held by a cached value (BucketSet, (BucketSet, Plan) or one
    representation)."""
    if isinstance(value, tuple):    # (BucketSet, Plan), two-scale (bulk, rest, done, plans)
        return sum(_size(v) for v in value
                   if v is not None and not isinstance(v, (bool, float, Plan)))
    if isinstance(value, BucketSet):
        return sum(rows.nbytes for rows in value._rows())
    part = getattr(value, "values", None)            # a two-scale part
    if isinstance(part, BucketSet):
        return _size(part)
    return value.rows.nbytes


class OperandMemo:
    """Operands prepared for a product (coarsened, windowed, padded), remembered per
    Composer.  A cached binary power or fold is an operand at every query of a growing
    history, while most operands of a query from scratch are prepared once, and keeping
    those would only hold memory: an operand's preparation is remembered from the
    second time it is asked for, and so are the later steps of a chain that starts
    from a remembered value.  Each value is a pure function of an immutable value and
    the operation, so a hit gives the same bits.  Keys hold their operands (ids are
    not reused while a value is kept); least recently used out first, at most
    _OPERAND_MEMO_ENTRIES values and about _OPERAND_MEMO_BYTES bytes of rows.  Callers
    hold the Composer's lock."""

    def __init__(self, entries: int = _OPERAND_MEMO_ENTRIES,
                 max_bytes: int = _OPERAND_MEMO_BYTES):
        self._values: "OrderedDict[tuple, object]" = OrderedDict()
        # (kind, id(operand), ...) of keys asked for and missed, True once asked for
        # twice (an id reused by a new operand only makes one value kept early)
        self._asked: "OrderedDict[tuple, bool]" = OrderedDict()
        self._held: Dict[int, int] = {}       # id(value) -> entries holding it
        self._entries = entries
        self._max_bytes = max_bytes
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @staticmethod
    def _mark(key) -> tuple:
        return (key[0], id(key[1])) + tuple(key[2:])

    def get(self, key):
        hit = self._values.get(key)
        if hit is not None:
            self._values.move_to_end(key)
            return hit
        mark = self._mark(key)
        self._asked[mark] = mark in self._asked
        self._asked.move_to_end(mark)
        while len(self._asked) > 4 * self._entries:
            self._asked.popitem(last=False)
        return None

    def put(self, key, value) -> None:
        """Remember ``value`` under ``key`` = (kind, operand, ...) if the key was asked
        for before or its operand is a remembered value; both the value and the operand
        the key keeps alive are counted."""
        if not (self._asked.get(self._mark(key), False) or id(key[1]) in self._held):
            return
        self._forget(key)
        self._values[key] = value
        held = id(value[0] if isinstance(value, tuple) else value)
        self._held[held] = self._held.get(held, 0) + 1
        self._bytes += self._entry_bytes(key, value)
        while self._values and (len(self._values) > self._entries
                                or self._bytes > self._max_bytes):
            self._forget(next(iter(self._values)))

    def _forget(self, key) -> None:
        old = self._values.pop(key, None)
        if old is None:
            return
        self._bytes -= self._entry_bytes(key, old)
        held = id(old[0] if isinstance(old, tuple) else old)
        if self._held[held] == 1:
            del self._held[held]
        else:
            self._held[held] -= 1

    @staticmethod
    def _entry_bytes(key, value) -> int:
        """Rows held by an entry: its operand (key[1]) and its value (a BucketSet, one
        representation, or (BucketSet, recorded operations))."""
        if isinstance(value, tuple):
            value = value[0]
        return _size(key[1]) + _size(value)


def _spans(moments, tail: float) -> Tuple[float, float, float]:
    """(both rows, A-row, B-row) loss ranges of a composition of steps with the given
    (count, ((A mean, A sd), (B mean, B sd))): means and variances add, each row's
    range is its mean +- z sd, z the normal quantile of the final ``tail`` mass."""
    mean, var = [0.0, 0.0], [0.0, 0.0]
    for count, rows in moments:
        for row, (m, sd) in enumerate(rows):
            mean[row] += count * m
            var[row] += count * sd * sd
    z = float(-special.ndtri(min(tail, 0.25)))
    lo = [mean[r] - z * math.sqrt(var[r]) for r in (0, 1)]
    hi = [mean[r] + z * math.sqrt(var[r]) for r in (0, 1)]
    return float(max(hi) - min(lo)), float(hi[0] - lo[0]), float(hi[1] - lo[1])


def _next_id() -> int:
    with _ID_LOCK:
        _ID_COUNTER[0] += 1
        return _ID_COUNTER[0]
