"""Composing sequences of mechanisms: leaves, binary powers, squaring, canonical order.

The composition of a history [(pair, count), ...] is built in one canonical order so
that the bounds are a function of the history alone (DESIGN.md §5): for each segment
the cached binary powers M^(2^k) are folded from the highest set bit down, and the
segments are folded left to right.  Before each composition the operands are brought
to a common grid (squaring the finer one); after it, if the corners pushed more mass
into the infinity atoms than ``free_infty_budget`` per composed step allows and the
infinity mass grew more than ``growth_factor``-fold (paper §4.6, Fig. 10), both
operands are squared and the composition is redone on the coarser grid.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Sequence, Tuple

import numpy as np

from ._validation import check_count, check_delta, check_real
from .buckets import MAX_LOSS_RANGE, Grid, GroupedBuckets, PaperBuckets, SplitBuckets
from .mechanisms import MechanismPair

UPPER_METHODS = ("split", "paper")
LOWER_METHODS = ("grouped", "paper")
#: steps the automatic per-step infinity budget is sized for
MAX_STEPS_PLANNED = 2 ** 21
#: fraction of the target delta the infinity atoms may take in the end
INFINITY_FRACTION = 1e-3


@dataclass(frozen=True)
class BucketOptions:
    """Expert overrides; ``None`` means chosen automatically (paper's vocabulary)."""

    number_of_buckets: Optional[int] = None
    factor: Optional[float] = None
    free_infty_budget: Optional[float] = None
    growth_factor: float = 2.2

    def __post_init__(self):
        if self.number_of_buckets is not None:
            n = check_count("number_of_buckets", self.number_of_buckets, minimum=2)
            if n % 2:
                raise ValueError(f"number_of_buckets must be even, got {n!r}")
        if self.factor is not None:
            check_real("factor", self.factor, low=1.0, low_open=True)
        if self.free_infty_budget is not None:
            check_real("free_infty_budget", self.free_infty_budget, low=0.0, high=1.0)
        check_real("growth_factor", self.growth_factor, low=1.0, low_open=True)


def delta_class(delta: Optional[float]) -> float:
    """Target delta rounded down to a power of ten (grids are cached per class)."""
    if delta is None:
        return 1e-12
    return 10.0 ** math.floor(math.log10(delta) + 1e-12)


def default_number_of_buckets(delta_q: float) -> int:
    """Automatic n: 2^k - 2 so that a full linear convolution fits 2^(k+2) points."""
    return 2 ** 13 - 2


def per_step_infinity_budget(delta_q: float) -> float:
    return INFINITY_FRACTION * delta_q / MAX_STEPS_PLANNED


def leaf_grid(pair: MechanismPair, n: int, delta_q: float, options: BucketOptions) -> Grid:
    """Leaf grid: spacing a power of two covering the pair's loss range at the budget."""
    if options.factor is not None:
        return Grid(math.log(options.factor), n)
    lo, hi = pair.loss_range(per_step_infinity_budget(delta_q))
    reach = max(abs(lo), abs(hi), 1e-12)
    step = 2.0 ** math.ceil(math.log2(reach / n))
    while n * step > MAX_LOSS_RANGE:
        step /= 2.0
    return Grid(step, n)


@dataclass(frozen=True, eq=False)
class BucketSet:
    """The representations of one composition, all on the same grid."""

    grid: Grid
    split: SplitBuckets
    grouped: Optional[GroupedBuckets]
    paper: Optional[Tuple[PaperBuckets, PaperBuckets]]   # (A||B, B||A)

    @property
    def compositions(self) -> int:
        return self.split.compositions

    @staticmethod
    def leaf(pair: MechanismPair, grid: Grid, methods: FrozenSet[str]) -> "BucketSet":
        t = grid.losses
        masses = pair.bucket_masses_with_error(t)
        split = SplitBuckets.from_masses(grid, *masses)
        grouped = GroupedBuckets.from_masses(grid, *masses) if "grouped" in methods else None
        paper = None
        if "paper" in methods:
            mirrored = pair.mirrored().bucket_masses_with_error(t)
            paper = (PaperBuckets.from_masses(grid, *masses),
                     PaperBuckets.from_masses(grid, *mirrored))
        return BucketSet(grid, split, grouped, paper)

    def squared(self) -> "BucketSet":
        return BucketSet(self.grid.squared(), self.split.squared(),
                         self.grouped.squared() if self.grouped is not None else None,
                         tuple(p.squared() for p in self.paper) if self.paper else None)

    def coarsened_to(self, log_factor: float) -> "BucketSet":
        out = self
        while out.grid.log_factor < log_factor * (1 - 1e-12):
            out = out.squared()
        return out

    def can_square(self) -> bool:
        g = self.grid
        return g.number_of_buckets * g.log_factor * 2.0 <= MAX_LOSS_RANGE

    def compose(self, other: "BucketSet", budget_per_step: float, growth: float) -> "BucketSet":
        x, y = self, other
        target = max(x.grid.log_factor, y.grid.log_factor)
        same = x is y
        x = x.coarsened_to(target)
        y = x if same else y.coarsened_to(target)
        while True:
            split = x.split.compose(y.split)
            inf_before = max(x.split.a_inf, x.split.b_minf) + max(y.split.a_inf, y.split.b_minf)
            inf_after = max(split.a_inf, split.b_minf)
            too_much = (split.overflow > budget_per_step * split.compositions
                        and inf_after > 0.5 * growth * inf_before)
            if too_much and x.can_square():
                x = x.squared()
                y = x if same else y.squared()
                continue
            break
        grouped = x.grouped.compose(y.grouped) if x.grouped is not None else None
        paper = (tuple(px.compose(py) for px, py in zip(x.paper, y.paper))
                 if x.paper is not None else None)
        return BucketSet(x.grid, split, grouped, paper)


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


class Composer:
    """Composes histories with caches of binary powers and of composed prefixes.

    The caches only ever store values the canonical order computes anyway, so a cached
    and a fresh computation give bit-identical results.
    """

    def __init__(self, options: BucketOptions = BucketOptions(), cache_size: int = 48):
        self.options = options
        self._powers: Dict[tuple, list] = {}
        self._prefix: "OrderedDict[tuple, BucketSet]" = OrderedDict()
        self._cache_size = cache_size

    # -- configuration ---------------------------------------------------------------
    def _config(self, delta: Optional[float], methods: FrozenSet[str]):
        dq = delta_class(delta)
        n = self.options.number_of_buckets or default_number_of_buckets(dq)
        budget = (self.options.free_infty_budget if self.options.free_infty_budget is not None
                  else per_step_infinity_budget(dq))
        return dq, n, budget, methods

    def _remember(self, key, value):
        self._prefix[key] = value
        self._prefix.move_to_end(key)
        while len(self._prefix) > self._cache_size:
            self._prefix.popitem(last=False)

    def _power(self, pair, k: int, cfg) -> BucketSet:
        dq, n, budget, methods = cfg
        key = (pair, cfg)
        chain = self._powers.get(key)
        if chain is None:
            chain = [BucketSet.leaf(pair, leaf_grid(pair, n, dq, self.options), methods)]
            self._powers[key] = chain
        while len(chain) <= k:
            last = chain[-1]
            chain.append(last.compose(last, budget, self.options.growth_factor))
        return chain[k]

    def _segment(self, pair, count: int, cfg) -> BucketSet:
        bits = [b for b in range(count.bit_length() - 1, -1, -1) if (count >> b) & 1]
        result = None
        for b in bits:
            key = ("seg", pair, cfg, count >> b)
            hit = self._prefix.get(key)
            if hit is not None:
                result = hit
                self._prefix.move_to_end(key)
                continue
            power = self._power(pair, b, cfg)
            result = power if result is None else result.compose(
                power, cfg[2], self.options.growth_factor)
            self._remember(key, result)
        return result

    def compose(self, history, delta: Optional[float] = None,
                methods: Sequence[str] = ("split", "grouped")) -> Optional[BucketSet]:
        """The BucketSet of a canonical history (None for an empty one)."""
        methods = frozenset(methods) | {"split"}
        unknown = methods - {"split", "grouped", "paper"}
        if unknown:
            raise ValueError(f"methods must be among 'split', 'grouped', 'paper', got {sorted(unknown)!r}")
        cfg = self._config(delta, methods)
        history = canonical_history(history)
        result = None
        for i, (pair, count) in enumerate(history):
            key = ("hist", history[: i + 1], cfg)
            hit = self._prefix.get(key)
            if hit is not None:
                result = hit
                self._prefix.move_to_end(key)
                continue
            seg = self._segment(pair, count, cfg)
            result = seg if result is None else result.compose(
                seg, cfg[2], self.options.growth_factor)
            self._remember(key, result)
        return result
