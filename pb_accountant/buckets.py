"""Privacy buckets on a grid of loss values t_i = i log f, i = -n..n (paper §3-4).

Three representations of the same composition, all stored as rows of masses so that
composition is one batched FFT convolution per row (indices add, paper Definition 4):

* ``SplitBuckets``: the tight *upper* bound.  Every event is split into two atoms on
  the neighbouring grid points, preserving its A- and B-mass (docs/method.md §4, the
  privacy-buckets counterpart of "Connect the Dots").  The split pair dominates the
  true pair in both neighbouring directions at once, and corner atoms beyond t_n
  (t_{-n}) are split between t_n and +inf (t_{-n} and -inf) the same way.
* ``GroupedBuckets``: the *lower* bound.  Events are grouped by index; grouping is
  post-processing, so sum over groups of max(0, A_g - e^eps B_g) never exceeds the
  true hockey-stick divergence (paper Theorem 2, virtual EC terms).
* ``PaperBuckets``: the paper's buckets with real and virtual error-correction terms
  and u_T, one direction per object (Definitions 4, 7, 9).

B-masses are stored scaled to A units (C_i = B_i f^i, paper's A/f^i + EC term) where
a query weighs them by e^{eps - t_i} <= 1.  Each row carries a certified bound on its
accumulated floating-point error in two parts (docs/floating-point.md): ``relative``
(every entry is within that fraction of itself of the exact value) and ``error`` (an l1
bound on the rest, and on the row's infinity atom).  Every rounding of a non-negative
sum is relative, so only the FFT's round-off on the small rest and underflow are
absolute: the error scales with the mass in the region that decides delta, not with 1.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, Dict, Optional, Tuple

import numpy as np

from ._fp import LEAST_NORMAL, LEAST_NORMAL_LOG, LEAST_SUBNORMAL, UNIT_ROUNDOFF
from .convolution import CONVOLUTION_RELATIVE_ERROR, RowProduct, check_finite, convolve_rows
from .queries import MaxOfSums, PaperUpper, ThresholdSum
from .representation import BucketRepresentation

_U = UNIT_ROUNDOFF
#: weight of a B-side relative error in a query: every included term has
#: e^eps q_i <= e^0.05 p_i (pb_accountant/queries.py), so r_p + _W r_q bounds the
#: relative error of the included sum in units of P
_W = math.exp(0.05) * (1.0 + 1e-9)

#: Largest |t| at which e^{t} is formed directly: leaves (whose masses are split with
#: e^{t}) and the paper's buckets stay inside it.  Composed split and grouped buckets
#: may reach any loss: queries evaluate e^{eps - t} with a shifted exponent
#: (pb_accountant/queries.py, docs/floating-point.md).
MAX_LOSS_RANGE = 700.0


#: significant bits a grid spacing keeps (``summable_spacing``)
SPACING_BITS = 20


def summable_spacing(log_factor: float) -> float:
    """``log_factor`` rounded to SPACING_BITS significant bits.  Every label
    (i + offset) d of such a spacing d is then exact for |i + offset| < 2^33, so the
    labels of a product are the sums of its operands' labels and a squaring's are twice
    them, exactly: the scales the grouped rows carry (C = B e^label) and the losses the
    split pair's bound reads stay those of the events composed, with no rounding that
    grows with |loss|.  Adaptive spacings (``SPACING_BASES`` times powers of two) have at
    most two significant bits; a fixed ``factor``'s log f moves down by less than 2^-19
    of itself (``GridInfo.factor`` reports the grid's)."""
    m, e = math.frexp(float(log_factor))
    # rounded down: the spacing never exceeds the one asked for, so a factor that
    # BucketOptions lets reach MAX_LOSS_RANGE still does
    return math.ldexp(math.floor(m * 2.0 ** SPACING_BITS), e - SPACING_BITS)


@dataclass(frozen=True)
class Grid:
    """Bucket factor f = e^{log_factor}, an even number of buckets n (Definition 3) and
    an index offset: bucket i = -n..n sits at loss t_i = (i + offset) log f.

    The paper's grids are symmetric (offset 0); an offset lets a grid follow a loss
    distribution that is far from symmetric (a DP-SGD step's loss lies in
    [log(1-q), +large)) with half the buckets.
    """

    log_factor: float
    number_of_buckets: int
    offset: int = 0

    def __post_init__(self):
        n = self.number_of_buckets
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n % 2:
            raise ValueError(f"number_of_buckets must be an even integer >= 2, got {n!r}")
        d = self.log_factor
        # a grid squared past the floating-point range (a fixed number_of_buckets whose
        # squaring rule keeps doubling log f, ``squared``) is an engine limit, as the
        # factor e^d overflowing is elsewhere: OverflowError (ENGINE_LIMITS), answered
        # with the trivial bounds and a note, not an internal ValueError
        if isinstance(d, (float, np.floating)) and d == math.inf:
            raise OverflowError(f"the grid's log(factor) left the floating-point range "
                                f"({n} buckets, offset {self.offset})")
        if not (isinstance(d, (int, float, np.floating)) and math.isfinite(d) and d > 0):
            raise ValueError(f"log(factor) must be finite and > 0, got {d!r}")
        if not math.isfinite((n + abs(self.offset)) * d):
            raise OverflowError(f"the grid's losses must be finite, got factor e^{d!r} "
                                f"with {n} buckets and offset {self.offset}")

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)

    @property
    def size(self) -> int:
        return 2 * self.number_of_buckets + 1

    @property
    def indices(self) -> np.ndarray:
        """Absolute indices i + offset of the buckets (read-only)."""
        return _grid_arrays(self.number_of_buckets, self.offset, self.log_factor)[0]

    @property
    def losses(self) -> np.ndarray:
        """Losses t_i = (i + offset) log f of the buckets (read-only)."""
        return _grid_arrays(self.number_of_buckets, self.offset, self.log_factor)[1]

    def compatible(self, other: "Grid") -> bool:
        """Same factor and number of buckets: products convolve (offsets add)."""
        return (self.log_factor == other.log_factor
                and self.number_of_buckets == other.number_of_buckets)

    def squared(self) -> "Grid":
        """Grid after the squaring operation T: f -> f^2, absolute index j -> ceil(j/2)."""
        return Grid(2.0 * self.log_factor, self.number_of_buckets, -((-self.offset) // 2))

    def with_buckets(self, n: int, shift: int = 0) -> "Grid":
        return Grid(self.log_factor, n, self.offset + shift)

    def window(self, n: int, centre: int = 0) -> "Grid":
        """The window of 2n+1 buckets around local index ``centre`` (clipped into this
        grid); this grid itself if ``n`` is not smaller than its number_of_buckets."""
        m = self.number_of_buckets
        if n >= m:
            return self
        centre = max(-(m - n), min(m - n, int(centre)))
        return self.with_buckets(n, centre)


#: grids of at most this many buckets keep their indices and losses in ``_grid_arrays``
_CACHED_GRID_BUCKETS = 2 ** 12


def _grid_arrays(n: int, offset: int, log_factor: float):
    """(indices, losses) of a grid, read-only; remembered for small grids, whose
    bookkeeping asks for them many times per composition."""
    if n <= _CACHED_GRID_BUCKETS:
        return _small_grid_arrays(n, offset, log_factor)
    return _make_grid_arrays(n, offset, log_factor)


def _make_grid_arrays(n: int, offset: int, log_factor: float):
    indices = np.arange(-n, n + 1) + offset
    losses = indices.astype(float) * log_factor
    indices.setflags(write=False)
    losses.setflags(write=False)
    return indices, losses


_small_grid_arrays = functools.lru_cache(maxsize=128)(_make_grid_arrays)


def _dot(a, b) -> float:
    """Dot product of two vectors without BLAS (whose threads stall on busy machines)."""
    return float(np.einsum("i,i->", a, b))


def _widened(rows: np.ndarray, k: int) -> np.ndarray:
    """``rows`` with k zero columns added on each side (``np.pad``'s result, without its
    per-call overhead, which small grids' compositions paid many times per query)."""
    if k < 0:
        raise RuntimeError(f"internal error: a grid cannot be widened by {k} buckets")
    out = np.zeros((rows.shape[0], rows.shape[1] + 2 * k), dtype=rows.dtype)
    out[:, k:k + rows.shape[1]] = rows
    return out


def _ceil_half(j):
    return -((-j) // 2)


def _parity_slices(grid: Grid):
    """Local positions of the even and odd absolute indices, and where they land.

    Returns (even_start, odd_start, base): position 0 holds absolute index o - n; the
    squared grid puts absolute even index 2k at position k - o' + n, o' = ceil(o/2).
    """
    n, o = grid.number_of_buckets, grid.offset
    first = o - n                       # absolute index at position 0
    even_start = 0 if first % 2 == 0 else 1
    new = grid.squared()
    base = (first + even_start) // 2 - new.offset + new.number_of_buckets
    return even_start, 1 - even_start, base, new


def _merged(row: np.ndarray, grid: Grid, odd_weight: float = 1.0) -> np.ndarray:
    """Squaring by grouping: absolute j -> ceil(j/2), odd j weighted (paper Def. 4)."""
    even_start, odd_start, base, new = _parity_slices(grid)
    out = np.zeros(new.size)
    even = row[even_start::2]
    out[base: base + len(even)] += even
    odd = row[odd_start::2]                     # odd j -> (j + 1) / 2
    first_odd = base + (1 if odd_start > even_start else 0)
    out[first_odd: first_odd + len(odd)] += odd * odd_weight
    return out


def _merged_parts(even: np.ndarray, odd: np.ndarray, grid: Grid) -> np.ndarray:
    """``_merged`` of a row whose even and odd entries (already weighted) are given."""
    even_start, odd_start, base, new = _parity_slices(grid)
    out = np.zeros(new.size)
    out[base: base + len(even)] += even
    first_odd = base + (1 if odd_start > even_start else 0)
    out[first_odd: first_odd + len(odd)] += odd
    return out


def _window(grid: Grid, window: Grid):
    """Positions [lo, hi] of ``window`` (from ``grid.window``) inside ``grid``."""
    if (window.log_factor != grid.log_factor or window.number_of_buckets > grid.number_of_buckets
            or abs(window.offset - grid.offset) > grid.number_of_buckets - window.number_of_buckets):
        raise ValueError(f"restricted needs a window of the grid {grid!r}, got {window!r}")
    m, n = grid.number_of_buckets, window.number_of_buckets
    centre = window.offset - grid.offset
    return m + centre - n, m + centre + n


@functools.lru_cache(maxsize=256)
def _fold_weights(n: int, log_factor: float):
    """e^{-k log f} and 1 - e^{-k log f} for k = 1..n (corner splits)."""
    k = np.arange(1, n + 1, dtype=float) * log_factor
    keep, out = np.exp(-k), -np.expm1(-k)
    keep.setflags(write=False)
    out.setflags(write=False)
    return keep, out


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


def _upper_const(x: float) -> float:
    """An upper bound's constant; a non-finite certified error (an overflowed bound)
    makes the bound trivial (1 after clamping), never NaN."""
    return float(x) if not math.isnan(x) else math.inf


def _lower_const(x: float) -> float:
    """A lower bound's constant; a non-finite certified error makes it trivial (0)."""
    return float(x) if math.isfinite(x) else -math.inf


#: largest relative error a leaf row takes on; entries whose error bound is a larger
#: fraction of them (cancellation in a split) go to the absolute part instead
MAX_LEAF_RELATIVE = 1e-9
#: a leaf's absolute error of this size costs as much as a relative error of 1: the
#: split between the two parts is chosen for deltas near 1e-14 (docs/floating-point.md)
LEAF_TAIL_SCALE = 1e-14
_CANDIDATES = np.concatenate(([0.0], np.logspace(-17, math.log10(MAX_LEAF_RELATIVE), 33)))
#: the candidates at the default cap (selected once)
_CANDIDATES_AT_CAP = _CANDIDATES[_CANDIDATES <= MAX_LEAF_RELATIVE]


def _relative_part(err, row, cap: float = MAX_LEAF_RELATIVE):
    """Write an entrywise error bound ``err`` of ``row`` as r * row + rest.

    Returns (r, l1 bound of rest).  r (at most ``cap``) minimises r + rest / 1e-14
    (``LEAF_TAIL_SCALE``): a few entries with a large relative error (the far tail, a
    bucket whose computed mass is 0) go to the absolute part, where their tiny masses
    cost little, instead of raising every entry's relative error.  The rest is computed
    with r slightly shrunk, so it is never under-counted.
    """
    err = np.asarray(err, dtype=float)
    row = np.asarray(row, dtype=float)
    cands = _CANDIDATES_AT_CAP if cap == MAX_LEAF_RELATIVE else _CANDIDATES[_CANDIDATES <= cap]
    # choose r from the ratios binned between the candidates (estimates only, no sort),
    # then count the rest in one pass
    live = row > 0
    # ratio: err / row where row > 0, inf elsewhere (those entries overwritten)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = err / row
    np.copyto(ratio, np.inf, where=~live)
    # bin j + 1 holds the entries with ratio above candidates 0..j
    idx = np.searchsorted(cands, ratio, side="left")
    k = len(cands) + 1
    # the rows' weights, 0 where row <= 0: the row itself when no entry is negative or
    # NaN (an entry -0 instead of 0 adds nothing to the bins' sums, which start at +0)
    weights = row if row.min(initial=0.0) >= 0.0 else np.where(live, row, 0.0)
    sum_err = np.cumsum(np.bincount(idx, weights=err, minlength=k)[::-1])[::-1]
    sum_row = np.cumsum(np.bincount(idx, weights=weights, minlength=k)[::-1])[::-1]
    # entries with ratio > cands[j]: bins j + 1 and above
    estimate = np.maximum(sum_err[1:] - cands * sum_row[1:], 0.0)
    with np.errstate(over="ignore"):          # (an overflowing estimate is never chosen)
        r = float(cands[int(np.argmin(cands + estimate / LEAF_TAIL_SCALE))])
    # rest: the sum of max(err - r (1 - 1e-12) row, 0), in place
    with np.errstate(over="ignore", invalid="ignore"):
        rest = row * (r * (1.0 - 1e-12))
        np.subtract(err, rest, out=rest)
        np.maximum(rest, 0.0, out=rest)
    return r, float(rest.sum()) * (1.0 + 1e-9)


def _leaf_errors(rows, entry_errors, extra):
    """(relative, absolute) per row of a leaf: entrywise bounds plus 4u of each entry
    (the leaf's own products and sums), ``extra`` absolute (atoms, underflow)."""
    rel, err = [], []
    for row, e, x in zip(rows, entry_errors, extra):
        r, rest = _relative_part(np.asarray(e) + 4.0 * _U * row, row)
        rel.append(r)
        err.append(rest + x)
    return np.array(rel), np.array(err)


def _compose_relative(rel_x, rel_y, c=CONVOLUTION_RELATIVE_ERROR):
    """Entrywise relative error of a product: (1+r_x)(1+r_y) - 1 and the
    convolution's own ``c`` (per row: ``RowProduct.relative``), relative to the
    computed entries."""
    return (rel_x + rel_y + rel_x * rel_y + c) / (1.0 - c) * (1.0 + 4 * _U)


def _rounded_relative(rel, ops: int = 8):
    """Relative error after a non-negative linear map computed with ``ops`` roundings
    per entry (weights included)."""
    return (rel + ops * _U) * (1.0 + ops * _U)


def _propagate(err_x, rel_x, mass_x, err_y, rel_y, mass_y, fft_err, folded, atoms,
               conv_rel=CONVOLUTION_RELATIVE_ERROR):
    """Absolute part of a product's error (the relative part is ``_compose_relative``).

    With |x - x*| <= r_x x + alpha_x entrywise (||alpha_x||_1 <= err_x), Young's
    inequality gives the absolute part err_x ((1+r_y) m_y + err_y) + (1+r_x) m_x err_y;
    plus the FFT's absolute round-off, the corner sums (``folded``: mass summed into
    the corners, each sum of <= n terms) and the rounding of the infinity atoms'
    product formula (``atoms``: the operands' atoms summed); ``conv_rel``: the
    convolution's own relative round-off (``RowProduct.relative``).
    """
    inputs = (err_x, rel_x, mass_x, err_y, rel_y, mass_y, fft_err, folded, atoms)
    if any(np.isnan(np.asarray(v, dtype=float)).any() for v in inputs):
        raise RuntimeError("internal error: NaN in the operands of a product's error bound")
    with np.errstate(over="ignore", invalid="ignore"):   # an overflowing bound is inf:
        rel_z = _compose_relative(rel_x, rel_y, conv_rel)     # still a bound
        err = ((err_x * ((1.0 + rel_y) * mass_y + err_y) + (1.0 + rel_x) * mass_x * err_y
                + fft_err * (1.0 + rel_z)
                + 4.0 * folded.shape[-1] * _U * folded.sum(axis=-1)
                + 4.0 * _U * atoms) * (1.0 + 1e-12))
    # NaN here can only be inf * 0 or inf - inf from an infinite operand: inf bounds it
    return np.where(np.isnan(err), np.inf, err)


def _times(atom: float, factor: float) -> float:
    """atom * factor with an empty atom contributing 0 whatever the factor (an operand's
    mass bound may be inf: 0 inf is 0 here, not NaN)."""
    return float(atom * factor) if atom != 0.0 else 0.0


def _infinity_product(a1: float, a2: float, excess1: float, excess2: float) -> float:
    """The infinity atom of a product: a1 M2 + a2 M1 - a1 a2 with M_i <= 1 + excess_i
    (its rounding is charged by ``_propagate``'s ``atoms``); inf, never NaN, once it
    leaves the floating-point range."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = a1 + a2 - a1 * a2 + (_times(a1, excess2) + _times(a2, excess1))
    return math.inf if math.isnan(z) else float(z)


def leaf_masses(pair, cuts, spacing: float):
    """(a, b, ea, eb, shift) of ``pair`` on the cut points ``cuts``: event sets with
    displaced borders (``bucket_masses_with_displacement``) while every displacement
    stays below 1% of ``spacing``, else the exact intervals with the end points'
    round-off in the mass errors (shift 0)."""
    a, b, ea, eb, sh = pair.bucket_masses_with_displacement(cuts)
    if np.all(np.isfinite(sh)) and not np.any(sh > 0.01 * spacing):
        return a, b, ea, eb, sh
    a, b, ea, eb = pair.bucket_masses_with_error(cuts)
    return a, b, ea, eb, np.zeros(len(cuts))


def _cut_positions(grid: Grid, cuts):
    """Positions on ``grid`` of the cut points at absolute indices ``cuts`` (increasing,
    inside the grid) and the widths t_k - t_{k-1} of the buckets between them (exact:
    differences of grid points)."""
    cuts = np.asarray(cuts, dtype=np.int64)
    pos = cuts - (grid.offset - grid.number_of_buckets)
    if (len(cuts) < 2 or np.any(np.diff(cuts) <= 0) or pos[0] < 0
            or pos[-1] >= grid.size):
        raise RuntimeError(f"internal error: cut points {cuts!r} are not increasing points "
                           f"of {grid!r}")
    return pos, np.diff(cuts).astype(float) * grid.log_factor


def _expm1_of(widths):
    """(expm1(w), -expm1(-w)) per entry of ``widths``, each distinct width's formed by
    ``math.expm1`` as a uniform grid's spacing is."""
    fm1 = np.empty(len(widths))
    em1 = np.empty(len(widths))
    for w in np.unique(widths).tolist():
        at = widths == w
        fm1[at] = math.expm1(w)
        em1[at] = -math.expm1(-w)
    return fm1, em1


def _displaced_share(sh, em1):
    """Share of an atom displaced by ``sh`` past a point that goes one point further
    (exact split of an atom at t + s between t and t + w, -expm1(-w) = ``em1``,
    rounded up)."""
    return np.where(sh > 0, np.minimum(-np.expm1(-sh) / em1 * (1.0 + 1e-9) + 4.0 * _U, 1.0),
                    0.0)


def _split_leaf_rows(t, d: float, widths, a, b, ea, eb, shift=None):
    """``SplitBuckets.from_masses`` on the points ``t`` (K of them; bucket k = 1..K-1
    the interval (t_{k-1}, t_k], of width ``d``, or ``widths[k - 1]`` where given, the
    displacements at most 1% of ``d``): (rows, a_inf, b_minf, error, relative)."""
    K = len(t)
    if widths is None:
        fm1 = math.expm1(d)
        em1 = -math.expm1(-d)
        em1_up = em1_down = em1
    else:
        # per bucket k = 1..K-1 (t_k - t_{k-1}, exact: grid points); each distinct
        # width's expm1 formed as the uniform grid's is
        fm1, em1 = _expm1_of(widths)
        # an atom displaced past point j is split with the point beyond it: up (A)
        # over the next bucket, down (B) over the one below (past the ends: the
        # end bucket's width, a finite stand-in for the infinity atom, which takes
        # a larger share than the atom's exact split with it)
        em1_up = np.append(em1, em1[-1])
        em1_down = np.insert(em1, 0, em1[0])
    f = fm1 + 1.0
    sh = np.zeros(K) if shift is None else np.asarray(shift, dtype=float)
    if np.any(sh > 0.01 * d) or not np.all(np.isfinite(sh)):
        raise RuntimeError("internal error: from_masses needs displacements below 1% "
                           "of the spacing (leaf_masses falls back)")
    A = np.zeros(K + 1)                           # index K: the +inf atom
    B = np.zeros(K + 1)                           # index 0: the -inf atom
    ai, bi = a[1:-1], b[1:-1]                      # bucket (t_{k-1}, t_k], k = 1..2n
    ti = t[1:]
    et = np.exp(ti)
    ci = bi * et                                   # B-mass scaled to A units at t_k
    beta = (ai * f - ci) / fm1                     # A-mass sent up to t_k
    # |beta - beta*| (beta* of the exact masses) plus the A-mass error of the bucket:
    # the A row rounds beta up, the B row down, so that the reference rows below
    # (computed rows scaled by a*/a per bucket) dominate the exact split; the split
    # on the widened points differs from beta by at most
    # a (e^{s_lo} - 1) / (1 - e^{-d}) + a (e^{s_hi} - 1) / (e^d - 1) (to first order;
    # a factor 2 covers the rest while shift <= 1% of d)
    s_lo = sh[:-1]               # (the shift at each bucket's lower end; grow reads both)
    ea_i = ea[1:-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ra = ea_i / ai                             # ea / a where a > 0, else 0
        ra *= 1 + 1e-9
    # a bucket whose error bound is beyond ea / a's range (a tiny mass far out, as at
    # per-step epsilons near 900) is placed as an empty one is: its whole bound at both
    # points it may reach (ra a * share <= ea there); inf * 0 would otherwise be NaN
    held = (ai > 0) & np.isfinite(ra)
    np.copyto(ra, 0.0, where=~held)
    # (expm1 of the shifts once, read at both ends of each bucket)
    grow = np.expm1(sh)
    slack = (((ea_i * f + eb[1:-1] * et) + 8.0 * _U * (ai * f + ci)) / fm1
             + 2.0 * ea_i
             + 2.0 * ai * (grow[:-1] / em1 + grow[1:] / fm1)) * (1.0 + 1e-9)
    beta_up = np.clip(beta + slack, 0.0, ai)       # A row: toward the higher loss
    beta_down = np.clip(beta - slack, 0.0, ai)     # B row: toward the lower loss
    # (temporaries are freed once dead, here and below: later ones reuse their
    # memory instead of growing the heap)
    del ci, beta, grow, slack
    alpha_up, alpha_down = ai - beta_up, ai - beta_down
    # share of an atom displaced by s past a grid point that goes one point further
    # (exact split of an atom at t + s between t and t + d, rounded up)
    lam_up = _displaced_share(sh, em1_up)
    lam_dn = lam_up if em1_down is em1_up else _displaced_share(sh, em1_down)
    lam_hi, lam_lo = lam_up[1:], lam_dn[:-1]
    down = np.exp(-t[:-1] + s_lo)                  # B-mass per A-mass at t_{k-1} - s
    # A row: alpha at t_{k-1}; beta at t_k + s_hi -> t_k and t_{k+1} (index K: +inf)
    A[:-2] += alpha_up
    A[1:-1] += beta_up * (1.0 - lam_hi)
    A[2:] += beta_up * lam_hi
    # B row (index j + 1 holds t_j, index 0 holds -inf): beta at t_k; alpha's
    # B-mass at t_{k-1} - s_lo -> t_{k-1} and t_{k-2}
    Bb = alpha_down * down
    B[1:-1] += Bb * (1.0 - lam_lo)
    B[:-2] += Bb * lam_lo
    B[2:] += beta_down / et
    # entrywise: the reference differs by a*/a - 1 (<= ra) per bucket, plus the
    # roundings of the shares (3u); a bucket whose computed A-mass is 0 may hold up
    # to ea, placed pessimistically (at both points it may reach)
    lost = np.where(held, 0.0, ea_i)
    eA = np.zeros(K + 1)
    eB = np.zeros(K + 1)
    eA[:-2] += alpha_up * ra
    eA[1:-1] += beta_up * (1.0 - lam_hi) * (ra + 3.0 * _U) + lost
    eA[2:] += beta_up * lam_hi * (ra + 3.0 * _U) + lost
    eB[1:-1] += Bb * (1.0 - lam_lo) * (ra + 3.0 * _U) + lost * down
    eB[:-2] += Bb * lam_lo * (ra + 3.0 * _U) + lost * down
    eB[2:] += beta_down / et * ra + np.where(held, 0.0, ea_i) / et
    del et, ra, beta_up, beta_down, alpha_up, alpha_down, Bb, lost, down
    # corner buckets: L <= t_{-n} + s (paper's S_{-n}) and L > t_n - s (S_inf): the
    # exact split onto (-inf, t_{-n} + s) and (t_n - s, +inf), then as above
    bottom, top = math.exp(-t[0] - sh[0]), math.exp(t[-1] - sh[-1])
    A[0] += a[0] * (1.0 - lam_up[0])
    A[1] += a[0] * lam_up[0]
    eA[0] += ea[0] + a[0] * 3.0 * _U
    eA[1] += ea[0] + a[0] * 3.0 * _U
    B[1] += a[0] * bottom
    eB[1] += ea[0] * bottom
    b_minf = max(0.0, b[0] - a[0] * bottom) + eb[0] + ea[0] * bottom
    B[-1] += b[-1] * (1.0 - lam_dn[-1])
    B[-2] += b[-1] * lam_dn[-1]
    eB[-1] += eb[-1] + b[-1] * 3.0 * _U
    eB[-2] += eb[-1] + b[-1] * 3.0 * _U
    A[-2] += b[-1] * top
    eA[-2] += eb[-1] * top
    a_inf = max(0.0, a[-1] - b[-1] * top) + ea[-1] + eb[-1] * top + A[-1] + eA[-1]
    b_minf = b_minf + B[0] + eB[0]
    A, eA = A[:-1], eA[:-1]
    B, eB = B[1:], eB[1:]
    # + masses that may have underflowed (each below 1e-300) and the exponentials'
    # rounding (relative, in _leaf_errors)
    rows = np.vstack([A, B])
    del A, B
    rel, error = _leaf_errors(rows, (eA, eB), (1e-300 * len(t), 1e-300 * len(t)))
    return rows, a_inf, b_minf, error, rel


# --------------------------------------------------------------------------- split
@dataclass(frozen=True, eq=False)
class SplitBuckets(BucketRepresentation):
    """Atoms on grid points (A-masses, B-masses) plus atoms at +inf (A) and -inf (B):
    upper bounds of both directions (docs/method.md §4)."""

    method: ClassVar[str] = "split"
    variants: ClassVar[Tuple[str, ...]] = ("split",)

    grid: Grid
    rows: np.ndarray          # (2, 2n+1): A-mass and B-mass of the atom at t_i
    a_inf: float              # A-mass of loss +inf (distinguishing events)
    b_minf: float             # B-mass of loss -inf
    error: np.ndarray         # (2,) absolute parts: (A row, a_inf) and (B row, b_minf)
    compositions: int = 1
    overflow: float = 0.0     # mass the last composition moved into the infinity atoms
    relative: Optional[np.ndarray] = None   # (2,) entrywise relative error of the rows

    def __post_init__(self):
        if self.relative is None:
            object.__setattr__(self, "relative", np.zeros(len(self.rows)))

    @classmethod
    def leaves(cls, pair, grid: Grid, methods=("split",),
               masses=None) -> Tuple["SplitBuckets", ...]:
        """The split pair is always composed (it sizes the grid); ``masses``:
        ``leaf_masses`` on the grid points, if already computed (the groups read them
        too, ``GroupedBuckets.leaves``)."""
        if masses is None:
            masses = leaf_masses(pair, grid.losses, grid.log_factor)
        return (cls.from_masses(grid, *masses),)

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb, shift=None, cuts=None) -> "SplitBuckets":
        """Split bucket masses (K+1 intervals of ``grid.losses``, with absolute error
        bounds ``ea``, ``eb``) onto the grid points.

        ``shift`` (per grid point, default 0): bucket k holds events with losses in
        (t_{k-1} - shift_{k-1}, t_k + shift_k] (the end points' round-off, see
        ``MechanismPair.bucket_masses_with_displacement``).  The exact split of such a
        bucket sits on the widened points; the A row takes it toward the higher loss
        (its upper atom at t_k + shift is split again between t_k and t_{k+1}), the B row
        toward the lower loss (its lower atom likewise between t_{k-1} and t_{k-2}),
        so both rows still dominate (docs/method.md §4).

        ``cuts`` (graded leaves, pb_accountant/graded_leaves.py): the absolute indices of
        the points the events were cut at, a subset of the grid's (default: every
        point); each bucket is then split between its own two cuts and the atoms placed
        at their points, the others left empty (exact: every atom keeps its loss).
        """
        if cuts is None:
            rows, a_inf, b_minf, error, rel = _split_leaf_rows(
                grid.losses, grid.log_factor, None, a, b, ea, eb, shift)
        else:
            pos, widths = _cut_positions(grid, cuts)
            t = grid.losses[pos]
            part, a_inf, b_minf, error, rel = _split_leaf_rows(
                t, grid.log_factor, widths, a, b, ea, eb, shift)
            rows = np.zeros((2, grid.size))
            rows[:, pos] = part
        return SplitBuckets(grid, rows, float(a_inf), float(b_minf), error, 1, 0.0, rel)

    def masses(self) -> np.ndarray:
        return self.rows.sum(axis=1) + np.array([self.a_inf, self.b_minf])

    def mass_excess(self, masses: Optional[np.ndarray] = None) -> np.ndarray:
        """Per row, an upper bound on max(M - 1, 0), M the reference's whole mass (rows
        within their certified errors, plus the atom): the infinity atoms' product
        formula charges it (``from_product``).  ``masses``: ``self.masses()``, where the
        caller has it (the products sum each row once)."""
        if masses is None:
            masses = self.masses()
        n = self.rows.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            # (rows (1 + r) + atoms <= (rows + atoms)(1 + r): the atoms are >= 0)
            m = (masses * (1.0 + self.relative) + self.error) * (1.0 + (n + 8) * _U)
        return np.where(np.isnan(m), np.inf, np.maximum(m - 1.0, 0.0))

    @property
    def infinity_bucket(self) -> Tuple[float, float]:
        return self.a_inf, self.b_minf

    def row_errors(self) -> Dict[str, float]:
        """Row errors; the A (B) error also covers ``a_inf`` (``b_minf``)."""
        return {"A": float(self.error[0]), "B": float(self.error[1])}

    def infinity_mass(self, direction: Optional[str] = None) -> float:
        """Mass every upper bound counts in full: the infinity bucket plus certified
        round-off, of ``direction`` ("ab": a_inf, "ba": b_minf), or the larger one (an
        overflowed error bound makes it inf, as in the curves, never NaN)."""
        with np.errstate(invalid="ignore"):
            ab = _upper_const(self.a_inf + self.error[0])
            ba = _upper_const(self.b_minf + self.error[1])
        if direction == "ab":
            return ab
        if direction == "ba":
            return ba
        return max(ab, ba)

    def upper_curves(self) -> Dict[str, ThresholdSum]:
        """Both directions of the split pair; B-mass weights are passed factored
        (r, u: q = r e^{-u}) so grids may reach any loss (docs/floating-point.md)."""
        t = self.grid.losses
        A, B = self.rows
        ra, rb = (float(r) * (1.0 + _W) for r in self.relative)
        return {"ab": ThresholdSum.build(t, A, A, t, self.infinity_mass("ab"), True, ra),
                "ba": ThresholdSum.build(-t, B, B, -t, self.infinity_mass("ba"), True, rb)}

    def lower_curves(self) -> Dict[str, ThresholdSum]:
        return {}

    def padded(self, n: int) -> "SplitBuckets":
        """The same atoms on a grid with more buckets (exact)."""
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        rows = _widened(self.rows, k)
        return SplitBuckets(self.grid.with_buckets(n), rows, self.a_inf, self.b_minf,
                            self.error, self.compositions, self.overflow, self.relative)

    def restricted(self, grid: Grid, mean_loss: Optional[Tuple[float, float]] = None) -> "SplitBuckets":
        """Keep the buckets of ``grid`` (a ``Grid.window``); atoms beyond it are split
        between its edge and +-inf (both masses preserved)."""
        if grid == self.grid:
            return self
        lo, hi = _window(self.grid, grid)
        d = self.grid.log_factor
        A, B = self.rows
        a_top, a_bot = A[hi + 1:], A[:lo]
        b_top, b_bot = B[hi + 1:], B[:lo][::-1]             # b_bot[k-1]: k below the edge
        w_keep_top, w_out_top = _fold_weights(len(a_top), d)
        w_keep_bot, w_out_bot = _fold_weights(len(b_bot), d)
        newA = A[lo: hi + 1].copy()
        newB = B[lo: hi + 1].copy()
        a_bot_sum, b_top_sum = a_bot.sum(), b_top.sum()
        newA[-1] += _dot(a_top, w_keep_top)
        a_over = _dot(a_top, w_out_top)
        newA[0] += a_bot_sum
        newB[-1] += b_top_sum
        newB[0] += _dot(b_bot, w_keep_bot)
        b_over = _dot(b_bot, w_out_bot)
        folded = np.array([a_top.sum() + a_bot_sum, b_top_sum + b_bot.sum()])
        # non-negative folds keep each entry's relative error; their rounding and the
        # moved atoms' relative error are absolute (the folded mass is tiny)
        over = np.array([a_over, b_over])
        with np.errstate(invalid="ignore"):   # (an unbounded relative error moves no mass:
            moved = np.where(over > 0, (self.relative + 4 * _U) * over, 0.0)   # 0, not NaN)
        err = (self.error + 4.0 * max(len(a_top), len(a_bot), 1) * _U * folded
               + moved) * (1.0 + 1e-12)
        return SplitBuckets(grid, np.vstack([newA, newB]),
                            self.a_inf + a_over, self.b_minf + b_over, err,
                            self.compositions, self.overflow + max(a_over, b_over),
                            self.relative)

    def compose_full(self, other: "SplitBuckets", tolerance: float = 0.0) -> "SplitBuckets":
        """T1 x T2 with all 4n+1 indices kept (no corner folding yet)."""
        if not other.grid.compatible(self.grid):
            raise ValueError("compose needs buckets on grids of the same factor and size")
        return self.from_product(other, convolve_rows(
            self.rows, None if other is self else other.rows, tolerance))

    def from_product(self, other: "SplitBuckets", product: RowProduct) -> "SplitBuckets":
        """The full product given the convolved rows and their round-off bounds.

        An infinity atom of the product is a1 M2 + a2 M1 - a1 a2 (M: an operand's whole
        reference mass), which is a1 + a2 - a1 a2 while M <= 1; a reference may hold
        more (the leaf's B row places its split pessimistically, which adds B-mass), and
        the excess M - 1 is then charged in full."""
        n = self.grid.number_of_buckets
        mx = self.masses()
        my = mx if other is self else other.masses()
        ex = self.mass_excess(mx)
        ey = ex if other is self else other.mass_excess(my)
        a_inf = _infinity_product(self.a_inf, other.a_inf, ex[0], ey[0])
        b_minf = _infinity_product(self.b_minf, other.b_minf, ex[1], ey[1])
        with np.errstate(over="ignore"):            # (past the range: inf bounds it)
            atoms = np.array([
                _times(self.a_inf, 1.0 + ey[0]) + _times(other.a_inf, 1.0 + ex[0]),
                _times(self.b_minf, 1.0 + ey[1]) + _times(other.b_minf, 1.0 + ex[1])])
        z, fft_err, conv_rel = product
        err = _propagate(self.error, self.relative, mx, other.error, other.relative, my,
                         fft_err, np.zeros((2, 1)), atoms, conv_rel)
        grid = Grid(self.grid.log_factor, 2 * n, self.grid.offset + other.grid.offset)
        return SplitBuckets(grid, z, a_inf, b_minf, err,
                            self.compositions + other.compositions, 0.0,
                            _compose_relative(self.relative, other.relative, conv_rel))

    def squared(self) -> "SplitBuckets":
        """T: f -> f^2; odd points split between their even neighbours, masses kept."""
        grid = self.grid
        even_start, odd_start, base, new = _parity_slices(grid)
        g = math.exp(-grid.log_factor)
        lo_a, hi_a = g / (1.0 + g), 1.0 / (1.0 + g)      # A weights to j-1 and j+1
        # odd j sits between even neighbours landing at k = (j-1)/2 and k + 1
        first_lo = base - (1 if odd_start < even_start else 0)
        # both rows at once (row A: weights (lo_a, hi_a), row B: (hi_a, lo_a))
        w_lo = np.array([[lo_a], [hi_a]])
        w_hi = np.array([[hi_a], [lo_a]])
        out = np.zeros((2, new.size))
        even = self.rows[:, even_start::2]
        out[:, base: base + even.shape[1]] += even
        odd = self.rows[:, odd_start::2]
        k = odd.shape[1]
        out[:, first_lo: first_lo + k] += odd * w_lo
        out[:, first_lo + 1: first_lo + 1 + k] += odd * w_hi
        # column sums 1 (the weights' rounding is relative): the absolute part is kept
        return SplitBuckets(new, out, self.a_inf, self.b_minf, self.error,
                            self.compositions, 0.0, _rounded_relative(self.relative))

    def scaled(self, ca: float, cb: float) -> "SplitBuckets":
        """The A row and ``a_inf`` times ``ca``, the B row and ``b_minf`` times ``cb``
        (positive floats): certifies the measures times exactly these numbers.  Each
        entry's rounding is relative; the atoms' rounding, and entries that may
        underflow (2^-1074 each), are absolute (pb_accountant/two_scale.py)."""
        c = _scale_factors(ca, cb)
        atoms = np.array([self.a_inf, self.b_minf]) * c
        rows = self.rows * c[:, None]
        check_finite("scaled split rows", rows)
        err = (self.error * c + 2.0 * _U * atoms + 5e-324 * self.grid.size) * (1.0 + 4 * _U)
        return SplitBuckets(self.grid, rows, float(atoms[0]), float(atoms[1]), err,
                            self.compositions, self.overflow * float(c.max()),
                            _rounded_relative(self.relative, 2))

    def with_relative_slack(self, tau: float) -> "SplitBuckets":
        """These buckets as a certificate of any measure within relative ``tau`` of the
        one they certify, entry by entry and atom by atom (|ref - m| <= tau m): the
        relative error gains about 2 tau, the absolute part 2 tau of itself and of the
        atoms (pb_accountant/two_scale.py)."""
        if not (0.0 <= tau <= 1e-3):
            raise ValueError(f"tau must be in [0, 1e-3], got {tau!r}")
        if tau == 0.0:
            return self
        atoms = np.array([self.a_inf, self.b_minf])
        err = (self.error * (1.0 + 2.0 * tau) + 2.0 * tau * atoms) * (1.0 + 4 * _U)
        rel = (self.relative + 2.0 * tau) * (1.0 + 2.0 * tau) * (1.0 + 4 * _U)
        return SplitBuckets(self.grid, self.rows, self.a_inf, self.b_minf, err,
                            self.compositions, self.overflow, rel)

    def plus(self, other: "SplitBuckets") -> "SplitBuckets":
        """The split pair of the union of two disjoint event sets, given theirs on the
        same grid: rows and atoms add (each row dominates its part, so the sum dominates
        the union).  The entries' rounding is relative, the atoms' absolute."""
        if other.grid != self.grid:
            raise ValueError(f"plus needs the same grid, got {self.grid!r} and {other.grid!r}")
        atoms = np.array([self.a_inf + other.a_inf, self.b_minf + other.b_minf])
        err = (self.error + other.error + 2.0 * _U * atoms) * (1.0 + 4 * _U)
        return SplitBuckets(self.grid, self.rows + other.rows, float(atoms[0]),
                            float(atoms[1]), err, max(self.compositions, other.compositions),
                            self.overflow + other.overflow,
                            _rounded_relative(np.maximum(self.relative, other.relative), 2))

    def loss_moments(self, row: int = 0):
        """Mean and standard deviation of the loss weighted by the A-row (0) or the
        B-row (1) (for grid choice)."""
        A = self.rows[row]
        t = self.grid.losses
        m = A.sum()
        if m <= 0:
            return 0.0, 0.0
        mean = _dot(A, t) / m
        var = _dot(A, t * t) / m - mean * mean
        return mean, math.sqrt(max(var, 0.0))

    def mean_loss(self, row: int = 0) -> float:
        """Mean loss weighted by the A-row (0) or the B-row (1)."""
        if row == 0:
            return self.loss_moments()[0]
        w = self.rows[1]
        m = w.sum()
        return _dot(w, self.grid.losses) / m if m > 0 else 0.0

    def needed_window(self, tail: float, focus: Optional[str] = None) -> Tuple[float, float]:
        """Loss interval outside which the A-mass above and the B-mass below are each at
        most ``tail`` (what folding into the infinity atoms may cost).

        ``focus`` "ab" ("ba"): the interval outside which the A-mass (B-mass) above and
        below are each at most ``tail``, for a composition that certifies that one
        direction (``Composer.compose``).  Any window is sound (``restricted`` keeps
        every mass); the other row then folds into its infinity atom or its edge, so its
        direction's bound becomes trivial."""
        A, B = self.rows
        g = self.grid
        size = len(A)

        def loss(i):                              # grid.losses[i]
            return float(float(i - g.number_of_buckets + g.offset) * g.log_factor)

        # A-mass at indices >= i is from_top[size - 1 - i]; the last i where it exceeds
        # tail is the first such position of from_top (B likewise, from the bottom)
        # (the arrays' own methods: numpy's function wrappers cost more than these
        # reductions of small grids)
        from_top = (B if focus == "ba" else A)[::-1].cumsum() > tail
        below = (A if focus == "ab" else B).cumsum() > tail   # mass at indices <= i
        j = int(from_top.argmax())
        hi = loss(size - 1 - j) if from_top[j] else loss(size // 2)
        k = int(below.argmax())
        lo = loss(k) if below[k] else loss(size // 2)
        return min(lo, hi), max(lo, hi)


# ------------------------------------------------------------------------- grouped
#: labels may lag a group's likelihood ratio by at most this many log-units before
#: the group is left out of a lower bound (keeps every error weight <= e^LABEL_SLACK)
LABEL_SLACK = 0.05


@dataclass(frozen=True, eq=False)
class GroupedBuckets(BucketRepresentation):
    """Groups of events with exact masses, for the lower bound of one or both directions.

    Rows, by direction: "ab" (A||B) keeps A and C = B f^i, "ba" (B||A) keeps B and
    D = A f^{-i}.  The label i of a group is only a name: the bound reads each group's
    exact masses (A_g, B_g = C_g f^{-i}).  Leaves label the events of each grid interval
    by its upper end (the split pair's masses), or, for pairs with loss atoms, by the
    nearest grid point (``leaves``); every restriction re-centres the kept window on the
    split pair's mean, so labels do not drift out of range however many steps are
    composed.  Events with loss +inf
    (-inf) form one more group each, kept as a scalar mass.
    """

    method: ClassVar[str] = "grouped"
    variants: ClassVar[Tuple[str, ...]] = ("grouped", "grouped-ab", "grouped-ba")
    relabels: ClassVar[bool] = True

    grid: Grid
    rows: np.ndarray          # (2 or 4, 2n+1), see ``kinds``
    error: np.ndarray         # l1 error bound per row
    compositions: int = 1
    a_inf: float = 0.0        # A-mass of the group of events with loss +inf (B = 0)
    b_minf: float = 0.0       # B-mass of the group of events with loss -inf (A = 0)
    directions: Tuple[str, ...] = ("ab", "ba")
    relative: Optional[np.ndarray] = None   # entrywise relative error per row
    #: per row, the row's true values are the stored ones times e^{log_scale}: C and D
    #: live at e^{label - ratio} times the A- (B-) mass, beyond floating-point range at
    #: epsilon of millions, and a re-labelling by s only adds s log f here (the error
    #: bounds are in stored units; docs/method.md §6)
    log_scale: Optional[np.ndarray] = None

    def __post_init__(self):
        if self.relative is None:
            object.__setattr__(self, "relative", np.zeros(len(self.rows)))
        if self.log_scale is None:
            object.__setattr__(self, "log_scale", np.zeros(len(self.rows)))

    @property
    def infinity_bucket(self) -> Tuple[float, float]:
        return self.a_inf, self.b_minf

    def row_errors(self) -> Dict[str, float]:
        """Absolute error bounds per row, in true units (inf where beyond range)."""
        if np.isnan(self.error).any() or np.isnan(self.log_scale).any():
            raise RuntimeError("internal error: NaN in a grouped row's error bound or scale")
        with np.errstate(over="ignore"):
            return {k: float(e * np.exp(ls)) if e > 0 else 0.0
                    for k, e, ls in zip(self.kinds, self.error, self.log_scale)}

    def upper_curves(self) -> Dict[str, ThresholdSum]:
        return {}

    def lower_curves(self) -> Dict[str, ThresholdSum]:
        """Theorem 2 over all groups, per direction: a group counts while eps stays below
        its likelihood ratio and below its label plus a cap k.

        The cap bounds what the second row's absolute error can cost: an included
        group's term weighs it by e^{eps - label} <= e^k.  After many compositions
        groups mix events whose losses differ by several units, so their likelihood
        ratios sit below their labels (by about 18 at epsilon 3e4, by 8,800 at 7e6),
        the more so the higher the label.  Each k of ``_label_caps`` (the largest gap
        log(ratio) - label over an upper tail of the groups, at most LABEL_SLACK) gives
        a valid bound; the largest is taken (docs/method.md §6)."""
        t = self.grid.losses
        for what, v in (("rows", self.rows), ("error bounds", self.error),
                        ("relative errors", self.relative), ("log-scales", self.log_scale),
                        ("infinity groups", (self.a_inf, self.b_minf))):
            if np.isnan(np.asarray(v, dtype=float)).any():
                raise RuntimeError(f"internal error: NaN in the grouped buckets' {what}")
        check_finite("grouped buckets' rows", self.rows)
        check_finite("grouped buckets' log-scales", self.log_scale)
        curves = {}
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            for direction, (p_kind, q_kind), sign, const in (
                    ("ab", ("A", "C"), 1.0, self.a_inf), ("ba", ("B", "D"), -1.0, self.b_minf)):
                if direction not in self.directions:
                    continue
                p, q = self.row(p_kind), self.row(q_kind)
                lq = float(self.log_scale[self.kinds.index(q_kind)])
                logq = _log(q)
                gap = _log(p) - logq - lq                  # log(ratio) - label, per group
                p_err = self.row_error(p_kind)
                q_err = float(self.error[self.kinds.index(q_kind)])
                big = float(np.max(np.abs(logq[q > 0]), initial=0.0)) + abs(lq) + 2.0
                parts = []
                for k in _label_caps(gap, p, p_err, sign * t):
                    curve, q_cost = self._lower_sum(
                        sign * t, p, logq, lq, gap, k, const, p_err, q_err, big,
                        self.row_relative(p_kind), self.row_relative(q_kind))
                    parts.append(curve)
                    if q_cost <= max(p_err, 1e-20):
                        break      # smaller caps only cut the C error's cost: no gain
                curves[direction] = parts[0] if len(parts) == 1 else MaxOfSums(tuple(parts))
        return curves

    @staticmethod
    def _lower_sum(labels, p, logq, lq, gap, k, const, p_err, q_err, big, rel_p, rel_q):
        """Theorem 2's sum for one label cap k (see ``lower_curves``), and what the second
        row's absolute error costs in it."""
        th = np.minimum(labels + k, labels + gap)
        # B-weights r e^{-u} with u = label + k: r = q_true e^k, formed in logs (its
        # rounding is relative, at most 8u times the exponents' size); a group whose r
        # would overflow is dropped (only lowers the bound), one that underflows is
        # covered by the absolute allowance below
        r = np.exp(logq + (lq + k))
        p = np.where(np.isfinite(r) & (r < 1e300), p, 0.0)
        r = np.where(p > 0, r, 0.0)
        # the weights' exponents u = label + k are rounded sums, within u |label + k| of
        # the exact ones: a relative error of e^{u |label + k|} - 1 in each B-weight (at
        # |label| 580 that is 6e-14, more than the sums' allowance on a few groups)
        u_exp = labels + k
        top = float(np.max(np.abs(u_exp), where=p > 0, initial=0.0))
        rel_r = 8.0 * _U * (big + abs(k)) + 2.0 * _U * top
        q_cost = 0.0                       # the second row's error, weighed by e^k
        if q_err > 0:
            arg = math.log(q_err) + lq + k
            rel_c = 8.0 * _U * (abs(math.log(q_err)) + abs(lq) + abs(k) + 2.0)
            q_cost = math.exp(arg) * (1.0 + rel_c) if arg < 709.0 else math.inf
        allowance = p_err + q_cost * (1.0 + 1e-9) + 1e-300 * len(labels)
        return ThresholdSum.build(np.nan_to_num(th, nan=-np.inf), p, r, u_exp,
                                  _lower_const(const - allowance), False,
                                  rel_p + _W * ((1.0 + rel_q) * (1.0 + rel_r) - 1.0)), q_cost

    @property
    def kinds(self) -> Tuple[str, ...]:
        return tuple(k for d in self.directions for k in _ROW_KINDS[d])

    @classmethod
    def leaves(cls, pair, grid: Grid, methods=("grouped",),
               split_masses=None) -> Tuple["GroupedBuckets", ...]:
        """The leaf groups of ``pair`` for the directions in ``methods`` ("grouped": both;
        "grouped-ab" / "grouped-ba": one).

        A pair without atoms at finite losses is grouped by the grid intervals
        (t_{i-1}, t_i], each labelled by its upper end: the masses the split pair reads
        (``split_masses``, ``leaf_masses`` on the grid points, computed here if not
        given), so one computation serves both.  A pair with such atoms (randomized
        response, Laplace's capped loss) is grouped around the grid points instead
        (labels: the nearest point): an atom's label then misses its loss by at most
        half a spacing either way, where the interval's upper end would miss the atoms
        of the two signs by different amounts, and composed labels would drift from the
        losses in proportion to how many steps took each atom (the bound's label cap
        then cuts the groups that decide delta; docs/method.md §6)."""
        directions = grouped_directions(methods)
        if not directions:
            return ()
        # lower bounds on the infinity groups' masses: the computed ones less their
        # certified error (relative and absolute, and 64u for the sum of the atoms); the
        # rest of an atom stays in the top (bottom) group, where it only lowers the bound
        # (a truncated Gaussian's, computed 6.7e-15 high, was a delta lower bound above
        # the exact delta)
        infinities = tuple(
            max(0.0, m * (1.0 - pair.mass_relative_error - 64 * _U) - pair.mass_absolute_error)
            for m in pair.infinity_masses())
        if not GroupedBuckets.reads_split_masses(pair):
            masses = leaf_masses(pair, cls.leaf_grid_points(grid), grid.log_factor)
            return (cls.from_masses(grid, *masses, infinities=infinities,
                                    directions=directions, labels="nearest"),)
        if split_masses is None:
            split_masses = leaf_masses(pair, grid.losses, grid.log_factor)
        return (cls.from_masses(grid, *split_masses, infinities=infinities,
                                directions=directions, labels="upper"),)

    @staticmethod
    def reads_split_masses(pair) -> bool:
        """Whether ``leaves`` groups ``pair`` by the split pair's buckets (no loss atoms)."""
        return not pair.has_loss_atoms()

    def one_direction(self, direction: str) -> "GroupedBuckets":
        """The rows and the infinity group of one of the directions held."""
        start = 0
        for d in self.directions:
            if d == direction:
                break
            start += len(_ROW_KINDS[d])
        else:
            raise ValueError(f"direction must be one of {self.directions!r}, got {direction!r}")
        part = slice(start, start + len(_ROW_KINDS[direction]))
        return GroupedBuckets(self.grid, self.rows[part].copy(), self.error[part].copy(),
                              self.compositions, self.a_inf if direction == "ab" else 0.0,
                              self.b_minf if direction == "ba" else 0.0, (direction,),
                              self.relative[part].copy(), self.log_scale[part].copy())

    @staticmethod
    def leaf_grid_points(grid: Grid) -> np.ndarray:
        """Cut points (i - 1/2) log f, i = -n+1..n: label i <=> nearest grid point."""
        n = grid.number_of_buckets
        return (np.arange(-n + 1, n + 1, dtype=float) + grid.offset - 0.5) * grid.log_factor

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb, shift=None, infinities=(0.0, 0.0),
                    directions: Tuple[str, ...] = ("ab", "ba"),
                    labels: str = "upper", cuts=None) -> "GroupedBuckets":
        """Groups from leaf masses (a, b with absolute error bounds ea, eb) on one of two
        sets of cut points, each cut displaced by at most ``shift`` (in loss, the end
        points' round-off; see ``SplitBuckets.from_masses``):

        * ``labels="upper"``: the grid points (K + 1 buckets for K points: bucket i the
          events with loss in (t_{i-1}, t_i], bucket 0 those at or below t_0, bucket K
          those above t_{K-1}), as the split pair reads them.  Group i is bucket i,
          labelled t_i; the last group also takes bucket K.
        * ``labels="nearest"``: ``leaf_grid_points`` (K buckets): group i holds the
          events nearest t_i.

        ``infinities`` = (A-mass at loss +inf, B-mass at loss -inf) become their own
        groups (they would otherwise be dropped with the range under composition).  Any
        partition of the events into groups gives a valid lower bound, so the
        displacements only enter the bounds used for underflowed masses below.

        ``cuts`` (``labels="upper"`` only): as ``SplitBuckets.from_masses``'s, the groups
        between the cuts labelled by their upper cut, the other labels empty."""
        t = grid.losses
        K = grid.size
        d = grid.log_factor
        pos = None
        if cuts is not None:
            if labels != "upper":
                raise ValueError(f"cuts need labels='upper', got {labels!r}")
            pos, widths = _cut_positions(grid, cuts)
            t = t[pos]
            K = len(t)
            d = widths                  # group i = 1..K-1: its width (group 0: below t_0)
        a_inf, b_minf = infinities
        if labels == "upper":
            # the last group takes buckets K - 1 and K: their errors plus the rounding of
            # the sum (u times the group's mass)
            a_top, b_top = max(a[K] - a_inf, 0.0), b[K]
            ea_top, eb_top = ea[K], eb[K]
            a, b, ea, eb = a[:K].copy(), b[:K].copy(), ea[:K].copy(), eb[:K].copy()
            a[-1] += a_top
            b[-1] += b_top
            ea[-1] = (ea[-1] + ea_top + _U * a[-1]) * (1.0 + 1e-9)
            eb[-1] = (eb[-1] + eb_top + _U * b[-1]) * (1.0 + 1e-9)
            cut_shift = np.zeros(K - 1) if shift is None else np.asarray(shift, float)[:-1]
            # group i lies above t_i - d and at or below t_i (its cuts t_{i-1}, t_i)
            below, above = d, 0.0
        elif labels == "nearest":
            a, b = a.copy(), b.copy()
            a[-1] = max(a[-1] - a_inf, 0.0)
            cut_shift = np.zeros(K - 1) if shift is None else np.asarray(shift, dtype=float)
            below = above = 0.5 * d         # group i lies within d/2 of t_i
        else:
            raise ValueError(f"labels must be 'upper' or 'nearest', got {labels!r}")
        b[0] = max(b[0] - b_minf, 0.0)
        et = np.exp(t)
        C, D = b * et, a / et
        # a mass below the normal range may have underflowed (lost to the relative
        # error model), and e^{+-t} would scale that loss up to 1e-4: there, use the
        # certified upper bounds C <= (A + e_A) e^{below + s} (group i > 0 holds events
        # above t_i - below - s, s the displacement of its lower cut) and
        # D <= (B + e_B) e^{above + s} (group i < K - 1: at or below t_i + above + s);
        # larger B-masses only lower the lower bound
        factor_c = np.exp(below + cut_shift) * (1 + 4 * _U)
        factor_d = (factor_c if labels == "nearest"          # (above == below)
                    else np.exp(above + cut_shift) * (1 + 4 * _U))
        tiny = 1e-290
        C[1:] = np.where(b[1:] < tiny, np.maximum(C[1:], (a[1:] + ea[1:]) * factor_c), C[1:])
        D[:-1] = np.where(a[:-1] < tiny, np.maximum(D[:-1], (b[:-1] + eb[:-1]) * factor_d),
                          D[:-1])
        eb_c = np.where(b < tiny, 0.0, eb)
        ea_d = np.where(a < tiny, 0.0, ea)
        eb_c[0], ea_d[-1] = eb[0], ea[-1]
        del factor_c, factor_d
        kinds = [k for d in directions for k in _ROW_KINDS[d]]
        full = {"A": a, "C": C, "B": b, "D": D}
        rows = np.vstack([full[k] for k in kinds])
        del full, C, D
        # the errors of the rows the directions keep (C's and D's formed only if kept)
        errs = []
        for k in kinds:
            e = (ea if k == "A" else eb if k == "B" else eb_c * et if k == "C"
                 else ea_d / et)
            errs.append(e * (1 + 1e-9))
        del eb_c, ea_d, et
        rel, error = _leaf_errors(rows, errs, [1e-300 * len(t)] * len(kinds))
        keep_a, keep_b = "ab" in directions, "ba" in directions
        if pos is not None:
            placed = np.zeros((len(rows), grid.size))
            placed[:, pos] = rows
            rows = placed
        return GroupedBuckets(grid, rows, error, 1, float(a_inf) if keep_a else 0.0,
                              float(b_minf) if keep_b else 0.0, tuple(directions), rel)

    def _with(self, grid, rows, error, compositions=None, infinities=None,
              relative=None, log_scale=None) -> "GroupedBuckets":
        a_inf, b_minf = infinities if infinities is not None else (self.a_inf, self.b_minf)
        return GroupedBuckets(grid, rows, error, self.compositions if compositions is None
                              else compositions, a_inf, b_minf, self.directions,
                              self.relative if relative is None else relative,
                              self.log_scale if log_scale is None else log_scale)

    def _product_infinities(self, other: "GroupedBuckets"):
        """Events with a +inf (-inf) component: A-mass a1 M2 + a2 M1 - a1 a2, M the
        operands' whole A-masses (B likewise), taken at certified lower bounds
        (``_whole_mass_low``; the formula increases in every argument).  With M = 1 this
        was a1 + a2 - a1 a2, which overstates the product where the masses sum to less
        than 1 (a DiscretePair's floats may: 200 steps of (p, 1 - p) against (0, 1) gave
        a delta lower bound 4.6e-15 above the exact one, and masses summing to 1 - 5e-10
        a lower epsilon of inf).  Its rounding is charged in the error (``_propagate``)."""
        out = []
        for kind, a1, a2 in (("A", self.a_inf, other.a_inf), ("B", self.b_minf, other.b_minf)):
            if a1 == 0.0 and a2 == 0.0:
                out.append(0.0)
                continue
            m1, m2 = self._whole_mass_low(kind, a1), other._whole_mass_low(kind, a2)
            out.append(max(a1 * m2 + a2 * m1 - a1 * a2, 0.0))
        return tuple(out)

    def _whole_mass_low(self, kind: str, atom: float) -> float:
        """A certified lower bound on the reference's whole mass of side ``kind`` ("A" or
        "B": the row, in true units, plus its infinity group ``atom``): the row's sum
        less its relative and absolute errors (which cover the atom too) and the sum's
        rounding (at most n u of it, whatever the order); 0 without that row."""
        if kind not in self.kinds:
            return 0.0
        i = self.kinds.index(kind)
        row = self.rows[i]
        total = (float(row.sum()) + atom) * (1.0 - (len(row) + 2) * _U * 1.01)
        return max(0.0, total * (1.0 - float(self.relative[i])) - float(self.error[i]))

    def row(self, kind: str) -> Optional[np.ndarray]:
        kinds = self.kinds
        return self.rows[kinds.index(kind)] if kind in kinds else None

    def row_error(self, kind: str) -> float:
        """Absolute error bound of a row in stored units (A and B: true units)."""
        return float(self.error[self.kinds.index(kind)])

    def row_relative(self, kind: str) -> float:
        return float(self.relative[self.kinds.index(kind)])

    def _atoms(self) -> np.ndarray:
        """Per row, the infinity group its error also covers (A: a_inf, B: b_minf)."""
        return np.array([self.a_inf if k == "A" else self.b_minf if k == "B" else 0.0
                         for k in self.kinds])

    def padded(self, n: int) -> "GroupedBuckets":
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        return self._with(self.grid.with_buckets(n), _widened(self.rows, k),
                          self.error)

    def compose_full(self, other: "GroupedBuckets", tolerance: float = 0.0) -> "GroupedBuckets":
        if not other.grid.compatible(self.grid) or other.directions != self.directions:
            raise ValueError("compose needs buckets of the same kind on compatible grids")
        return self.from_product(other, convolve_rows(
            self.rows, None if other is self else other.rows,
            self.row_tolerance(other, tolerance)))

    def row_tolerance(self, other: "GroupedBuckets", tolerance: float) -> np.ndarray:
        """A product row's true values are its stored ones times e^{s}, s the sum of
        the operands' log-scales, and its round-off costs the bound in true units (a C
        row's error weighs at most e^k there, ``lower_curves``).  Where the row is
        stored above its true size (s < 0) the tolerance is raised to true units: it
        used to be compared in stored units, so a C row re-labelled far down (stored
        e^183 times its true size after 376,486 steps at epsilon 39,300) asked for the
        most parts a convolution may take.  It is not lowered where s > 0: the widths
        met their target with the stored-units rule there, and the stricter one made
        1.9 million steps at epsilon 367,890 take 12 s instead of 9 s for a lower bound
        5e-6 tighter."""
        if tolerance <= 0.0:
            return np.zeros(len(self.rows))
        with np.errstate(over="ignore"):
            return float(tolerance) * np.maximum(np.exp(-(self.log_scale + other.log_scale)),
                                                 1.0)

    def from_product(self, other: "GroupedBuckets", product: RowProduct) -> "GroupedBuckets":
        n = self.grid.number_of_buckets
        z, fft_err, conv_rel = product
        ax, ay = self._atoms(), other._atoms()
        err = _propagate(self.error, self.relative, self.rows.sum(axis=1) + ax, other.error,
                         other.relative, other.rows.sum(axis=1) + ay, fft_err,
                         np.zeros((len(self.rows), 1)), ax + ay, conv_rel)
        grid = Grid(self.grid.log_factor, 2 * n, self.grid.offset + other.grid.offset)
        # the scales add; their sum's rounding is a relative error of the whole row
        log_scale = self.log_scale + other.log_scale
        rel = _compose_relative(self.relative, other.relative, conv_rel) * (1.0 + 4 * _U) \
            + _scale_rounding(log_scale, self.log_scale, other.log_scale)
        z, err, log_scale, rel = _normalised(z, err, log_scale, rel,
                                             [k in ("C", "D") for k in self.kinds])
        return self._with(grid, z, err, self.compositions + other.compositions,
                          self._product_infinities(other), rel, log_scale)

    def scaled(self, ca: float, cb: float) -> "GroupedBuckets":
        """The rows holding A-masses (A, D) and ``a_inf`` times ``ca``, those holding
        B-masses (B, C) and ``b_minf`` times ``cb``: every group's masses times exactly
        these numbers (``SplitBuckets.scaled``; errors in stored units)."""
        c = _scale_factors(ca, cb)
        w = np.array([c[0] if k in ("A", "D") else c[1] for k in self.kinds])
        atoms = np.array([self.a_inf * c[0], self.b_minf * c[1]])
        rows = self.rows * w[:, None]
        check_finite("scaled grouped rows", rows)
        err = (self.error * w + 2.0 * _U * self._atoms() * w + 5e-324 * self.grid.size) \
            * (1.0 + 4 * _U)
        return self._with(self.grid, rows, err, infinities=(float(atoms[0]), float(atoms[1])),
                          relative=_rounded_relative(self.relative, 2))

    def with_relative_slack(self, tau: float) -> "GroupedBuckets":
        """``SplitBuckets.with_relative_slack`` for groups (errors in stored units)."""
        if not (0.0 <= tau <= 1e-3):
            raise ValueError(f"tau must be in [0, 1e-3], got {tau!r}")
        if tau == 0.0:
            return self
        err = (self.error * (1.0 + 2.0 * tau) + 2.0 * tau * self._atoms()) * (1.0 + 4 * _U)
        rel = (self.relative + 2.0 * tau) * (1.0 + 2.0 * tau) * (1.0 + 4 * _U)
        return self._with(self.grid, self.rows, err, relative=rel)

    def plus(self, other: "GroupedBuckets") -> "GroupedBuckets":
        """Groups of two disjoint event sets on the same grid, those with the same label
        merged (any grouping bounds from below): each row is brought to a common
        log-scale (C and D: the larger of the two rows' true peaks; A and B stay in true
        units), by e^{gap} (formed as the
        engine forms every scale: within 4u (|gap| + |scales| + 2) of itself,
        ``_scale_rounding``), then the rows add; entries below 2^-1074 that underflow
        are absolute error."""
        if other.grid != self.grid or other.directions != self.directions:
            raise ValueError("plus needs groups of the same directions on the same grid")
        # the common scale: the larger true peak of each row (stored rows then peak near
        # 1, so neither operand's entries are pushed out of range by the other's scale)
        with np.errstate(divide="ignore"):
            peaks = [np.where(g.rows.max(axis=1) > 0, g.log_scale + np.log(g.rows.max(axis=1)),
                              -np.inf) for g in (self, other)]
        top = np.maximum(peaks[0], peaks[1])
        top = np.where(np.isfinite(top), top, np.maximum(self.log_scale, other.log_scale))
        top = np.maximum(top, np.maximum(self.log_scale, other.log_scale) - 700.0)
        # the A and B rows hold true masses (the bounds read them unscaled)
        masses = np.array([k in ("A", "B") for k in self.kinds])
        if np.any((self.log_scale != 0.0) & masses) or np.any((other.log_scale != 0.0) & masses):
            raise RuntimeError("internal error: a grouped A or B row carries a log-scale")
        top = np.where(masses, 0.0, top)
        rows = np.zeros_like(self.rows)
        err = np.zeros(len(self.rows))
        rel = np.zeros(len(self.rows))
        for g in (self, other):
            gap = g.log_scale - top                      # at most 700: e^gap is finite
            with np.errstate(under="ignore"):
                f = np.exp(gap)
                rows += g.rows * f[:, None]
            rel_f = np.where(gap != 0, 4.0 * _U * (np.abs(gap) + np.abs(g.log_scale)
                                                    + np.abs(top) + 2.0), 0.0) * (1.0 + 1e-9)
            # where e^gap leaves the normal range (the smaller operand's scale far below
            # the other's), neither it nor the products keep their relative accuracy:
            # every scaled entry, true or computed, lies in [0, x 2^-1021 + 2^-1074], so
            # the row's whole mass and error at that factor are charged as absolute
            near = g.error * f * (1.0 + 2.0 * rel_f + 4.0 * _U)
            far = gap < LEAST_NORMAL_LOG
            if far.any():
                near = np.where(far, ((g.rows.sum(axis=1) + g.error) * (2.0 * LEAST_NORMAL)
                                      + LEAST_SUBNORMAL * g.rows.shape[1]) * (1.0 + 1e-9),
                                near)
            err += near
            rel = np.maximum(rel, (g.relative + 2.0 * rel_f) * (1.0 + 2.0 * rel_f))
        atoms = (self.a_inf + other.a_inf, self.b_minf + other.b_minf)
        err = (err + 2.0 * _U * (self._atoms() + other._atoms()) + 1e-323 * self.grid.size) \
            * (1.0 + 8 * _U)
        return self._with(self.grid, rows, err, max(self.compositions, other.compositions),
                          atoms, _rounded_relative(rel, 3), top)

    def restricted(self, grid: Grid, mean_loss: Optional[Tuple[float, float]] = None) -> "GroupedBuckets":
        """Move the groups onto ``grid`` (same factor), re-labelled so that their mean
        label (weighted by the first mass row) sits at the mean loss of the first
        direction (``mean_loss``: under A, under B; None keeps the labels).  Groups
        outside the grid's labels are merged into the nearest kept group on the side
        each direction's bound reads (``_folded``: A||B's high labels, B||A's low ones)
        and dropped on the other side, where they count for little.  Re-labelling by s
        multiplies C by f^s and D by f^-s (B_g = C_g f^-label is unchanged): only their
        log-scales move, so the stored rows and error bounds stay as they are at any s."""
        if grid.log_factor != self.grid.log_factor:
            raise ValueError(f"restricted needs a grid of the same factor, got {grid!r}")
        d = self.grid.log_factor
        s = 0
        if mean_loss is not None:
            centre = mean_loss[0 if self.directions[0] == "ab" else 1]
            weights = self.rows[0]
            labels = self.grid.indices.astype(float)
            mass = weights.sum()
            mean = _dot(weights, labels) / mass if mass > 0 else 0.0
            s = int(round(centre / d - mean))
        start = grid.offset - grid.number_of_buckets - s - self.grid.offset \
            + self.grid.number_of_buckets                 # old position of the first new label
        lo, hi = max(start, 0), min(start + grid.size, self.grid.size)
        rows = np.zeros((len(self.rows), grid.size))
        error = self.error
        if hi > lo:
            rows[:, lo - start: hi - start] = self.rows[:, lo:hi]
            error = self._folded(rows, lo, hi, start)
        if not s:
            return self._with(grid, rows, error)
        # the rows and their error bounds stay as they are: only the scales move
        # (C = B f^label by f^s, D by f^-s), and their rounding is relative
        shift = np.array([s * d if k == "C" else -s * d if k == "D" else 0.0
                          for k in self.kinds])
        log_scale = self.log_scale + shift
        rel = self.relative * (1.0 + 4 * _U) + _scale_rounding(log_scale, self.log_scale, shift)
        return self._with(grid, rows, error, relative=rel, log_scale=log_scale)

    def _folded(self, rows, lo: int, hi: int, start: int) -> np.ndarray:
        """Merge the groups at old positions >= ``hi`` into the top kept group in the
        A and C rows, and those below ``lo`` into the bottom one in the B and D rows
        (``rows``: the kept groups, position i at i - ``start``, added to in place);
        returns the error bounds with the merges' rounding.

        Any grouping bounds from below (docs/method.md §6), so merging is sound, and it
        keeps what dropping would lose: a window's tail mass (up to the infinity budget)
        from the lower bound.  A group m positions away keeps its A- (B-) mass and its
        C (D) entry takes the weight f^-m (C = B f^label, D = A f^-label at the merged
        group's label).  The merged entry keeps the row's relative and absolute error
        (weights at most 1); its rounding is added to the absolute part: the sum's n
        additions, exp to 2u and the exponent m d's rounding, relative to the terms'
        magnitudes, the last addition's relative to the merged entry, plus subnormal
        products.  Groups beyond m d = 700 are dropped from both rows of their
        direction."""
        d = self.grid.log_factor
        error = self.error.copy()
        size = self.grid.size
        for j, kind in enumerate(self.kinds):
            if kind in ("A", "C"):
                tail, at = self.rows[j, hi:], hi - 1 - start
                m = np.arange(1, size - hi + 1, dtype=float)
            else:
                tail, at = self.rows[j, :lo], lo - start
                m = np.arange(lo, 0, -1, dtype=float)
            # the same groups in both rows of a direction (a group is merged whole or
            # dropped whole: A-mass without its B-mass would overstate the bound)
            near = m * d <= 700.0
            tail, m = tail[near], m[near]
            if kind in ("C", "D"):
                tail = tail * np.exp(-(m * d))
            if not tail.size or not tail.any():
                continue
            total = float(tail.sum())
            magnitude = float(np.abs(tail).sum())
            rows[j, at] += total
            reach = float(m.max()) * d if kind in ("C", "D") else 0.0
            # the sum's and the weights' rounding, relative to the terms, and the last
            # addition's, relative to the merged entry
            rounding = ((tail.size + 6.0 + 1.01 * reach) * _U * magnitude * 1.01
                        + 1.01 * _U * abs(float(rows[j, at])) + 5e-324 * tail.size)
            error[j] = (error[j] + rounding * (1.0 + float(self.relative[j]))) * (1.0 + 1e-9)
        return error

    def squared(self) -> "GroupedBuckets":
        """Merge pairs of groups (paper Def. 4); C's odd groups gain a factor f, D's lose
        one.  At a factor far from 1 (epsilon of millions: f up to 1e222) the weights
        are written 2^m w and 2^m goes to the row's log-scale, so that the stored rows
        stay in range and their convolutions cannot overflow (docs/floating-point.md)."""
        f = self.grid.factor
        if not (math.isfinite(f) and f > 0):
            raise OverflowError(f"grid factor {f!r} beyond floating-point range")
        if 2.0 ** -_WEIGHT_EXP <= f <= 2.0 ** _WEIGHT_EXP:
            weight = {"A": 1.0, "B": 1.0, "C": f, "D": 1.0 / f}
            kinds = self.kinds
            rows = np.vstack([_merged(r, self.grid, weight[k])
                              for r, k in zip(self.rows, kinds)])
            growth = np.array([max(weight[k], 1.0) for k in kinds])
            err = self.error * growth * (1.0 + 4 * _U)
            if "D" in kinds:
                # D's odd entries times 1/f may underflow (at most 2^-1075 each): charged
                # only where an entry is small enough for it, so other rows keep their bits
                i = kinds.index("D")
                r = self.rows[i]
                if np.any((r > 0.0) & (r < _SMALLEST_NORMAL * f)):
                    err = err.copy()
                    err[i] += 5e-324 * (1.0 + 1e-9) * rows.shape[1]
            return self._with(self.grid.squared(), rows, err,
                              relative=_rounded_relative(self.relative))
        return self._squared_scaled()

    def _squared_scaled(self) -> "GroupedBuckets":
        """``squared`` at a factor beyond 2^+-_WEIGHT_EXP.  The merged C row (weight
        W = f on odd groups; D: W = 1/f) is stored times 2^-M, M the binary exponent of
        its largest entry, and M log 2 is added to its log-scale: even 2^-M +
        (odd w) 2^(e - M) with W = w 2^e, w in [0.5, 1) (``ldexp``: exact but for
        underflow, at most 2^-1074 an entry in all, charged as absolute error).  The
        product odd * w is the one rounding of ``_merged``'s odd * W."""
        f = self.grid.factor
        weights = {"C": math.frexp(f), "D": math.frexp(1.0 / f)}
        even_start, odd_start, _, new = _parity_slices(self.grid)
        rows = np.empty((len(self.rows), new.size))
        err = self.error.copy()
        log_scale = self.log_scale.copy()
        rel = _rounded_relative(self.relative)
        for i, (r, k) in enumerate(zip(self.rows, self.kinds)):
            if k not in weights:
                rows[i] = _merged(r, self.grid, 1.0)
                err[i] = self.error[i] * (1.0 + 4 * _U)
                continue
            w, e = weights[k]
            even, odd = r[even_start::2], r[odd_start::2]
            top_even = math.frexp(float(even.max(initial=0.0)))[1]
            top_odd = math.frexp(float(odd.max(initial=0.0)))[1] + e
            live = [t for t, x in ((top_even, even), (top_odd, odd)) if x.max(initial=0.0) > 0]
            m = max(live) if live else 0
            # scaling down after the product, up before it: either way an underflow
            # costs at most 2^-1075 in the new stored units
            odd_part = np.ldexp(odd * w, e - m) if e <= m else np.ldexp(odd, e - m) * w
            rows[i] = _merged_parts(np.ldexp(even, -m), odd_part, self.grid)
            # true error <= max(W, 1) times the old one; in the new stored units times 2^-m
            grown = math.ldexp(self.error[i] * w, e - m) if e > 0 \
                else math.ldexp(self.error[i], -m)
            err[i] = grown * (1.0 + 4 * _U) + 5e-324 * (1.0 + 1e-9) * 2 * new.size
            if not math.isfinite(err[i]):
                raise OverflowError(f"grouped {k} row's error bound beyond floating-point "
                                    f"range after squaring at factor {f!r}")
            if m:
                old = log_scale[i]
                log_scale[i] = old + m * math.log(2.0)
                rel[i] = rel[i] * (1.0 + 4 * _U) + float(_scale_rounding(
                    np.array([log_scale[i]]), np.array([old]),
                    np.array([m * math.log(2.0)]))[0])
        return self._with(new, rows, err, relative=rel, log_scale=log_scale)


#: the label caps tried: the largest gap among groups whose labels carry at most this
#: much of the first row's mass above them (1: all groups)
_CAP_TAILS = (1.0, 1e-3, 1e-7, 1e-11)


def _label_caps(gap: np.ndarray, p: np.ndarray, error: float, labels: np.ndarray):
    """Distinct label caps k for ``GroupedBuckets.lower_curves``: per tail fraction in
    _CAP_TAILS, the largest gap log(ratio) - label of a group in that upper tail whose
    mass exceeds the row's absolute error, at most LABEL_SLACK.  The groups that decide
    a small delta at large epsilon sit in the upper tail, where the gaps are the most
    negative; every k gives a valid bound and the largest is taken."""
    live = (p > error) & np.isfinite(gap)
    if not np.any(live):
        return (LABEL_SLACK,)
    order = np.argsort(labels, kind="stable")
    above = np.cumsum(p[order][::-1])[::-1]               # mass at labels >= this one
    total = above[0]
    caps = []
    for tail in _CAP_TAILS:
        sel = order[(above <= tail * total) | (tail >= 1.0)]
        sel = sel[live[sel]]
        if len(sel):
            k = float(min(LABEL_SLACK, float(np.max(gap[sel]))))
            if k not in caps:
                caps.append(k)
    return tuple(caps) or (LABEL_SLACK,)


def _scale_factors(ca: float, cb: float) -> np.ndarray:
    c = np.array([ca, cb], dtype=float)
    if not (np.all(np.isfinite(c)) and np.all(c > 0)):
        raise ValueError(f"scaled needs finite positive factors, got {ca!r} and {cb!r}")
    return c


def _scale_rounding(total: np.ndarray, *parts: np.ndarray) -> np.ndarray:
    """Relative error from rounding a sum of log-scales: the stored ``total`` differs
    from the exact sum by at most u |total| + u sum |parts| (each part itself exact or
    one rounded product), so e^{total} is within 4u (|total| + sum |parts|) of itself."""
    size = np.abs(total) + sum(np.abs(p) for p in parts)
    return np.where(size > 0, 4.0 * _U * size, 0.0) * (1.0 + 1e-9)


#: ``GroupedBuckets.squared`` moves C's and D's weights f^+-1 into the log-scales once
#: f leaves [2^-_WEIGHT_EXP, 2^_WEIGHT_EXP] (rows at most 2^_NORMAL_EXP times 2^64 keep
#: their convolutions' scales 2^(ex + ey) in range)
_WEIGHT_EXP = 64
_SMALLEST_NORMAL = 2.2250738585072014e-308

#: stored rows are rescaled by a power of two once their largest entry leaves
#: [2^-_NORMAL_EXP, 2^_NORMAL_EXP] (keeps the convolution's scale factors finite)
_NORMAL_EXP = 256


def _normalised(rows, err, log_scale, rel, movable):
    """Rows whose largest entry left [2^-256, 2^256] multiplied by 2^-m (exact but for
    underflow, below 2^-1074 per entry, added to the error) with m log 2 added to their
    scale (its rounding is relative); only the rows marked ``movable`` (C and D).  The A
    and B rows keep their true masses, as the bounds and ``plus`` read them: a mass row
    below 2^-256 (a two-scale part stored at a scale its infinity atom sets) stays as it
    is, and what its products lose to underflow only lowers the lower bound."""
    peak = rows.max(axis=1) if rows.shape[1] else np.zeros(len(rows))
    copied = False
    check_finite("a grouped product's rows", peak)
    for i, top in enumerate(peak):
        if not (top > 0 and movable[i]):
            continue
        m = math.frexp(top)[1]
        if abs(m) <= _NORMAL_EXP:
            continue
        if not copied:
            rows, err, log_scale, rel = rows.copy(), err.copy(), log_scale.copy(), rel.copy()
            copied = True
        rows[i] = np.ldexp(rows[i], -m)
        err[i] = math.ldexp(err[i], -m) + 5e-324 * rows.shape[1]
        old = log_scale[i]
        log_scale[i] = old + m * math.log(2.0)
        rel[i] = rel[i] * (1.0 + 4 * _U) + float(
            _scale_rounding(np.array([log_scale[i]]), np.array([old]),
                            np.array([m * math.log(2.0)]))[0])
    return rows, err, log_scale, rel

#: rows kept per direction of the grouped lower bound
_ROW_KINDS = {"ab": ("A", "C"), "ba": ("B", "D")}
#: the representations of one group direction each (composed separately: a query
#: composes only the directions it reads)
GROUPED_DIRECTIONS = ("grouped-ab", "grouped-ba")


def grouped_directions(methods) -> Tuple[str, ...]:
    """Directions of the grouped lower bound that ``methods`` asks for."""
    if "grouped" in methods or ("grouped-ab" in methods and "grouped-ba" in methods):
        return ("ab", "ba")
    if "grouped-ab" in methods:
        return ("ab",)
    if "grouped-ba" in methods:
        return ("ba",)
    return ()


# --------------------------------------------------------------------------- paper
@dataclass(frozen=True, eq=False)
class PaperBuckets(BucketRepresentation):
    """One direction of the paper's buckets: rows B(i), virtual and real EC, u_T.

    Rows are A = B_T(i), V = (B_T(i)/f^i + l~(i)) f^i and R = (B_T(i)/f^i + l(i)) f^i
    (Definitions 4 and 7); composition is a convolution of each row because
    V-formula sums telescope (docs/method.md §5).  The virtual term of the bottom bucket
    -n cannot be certified in floating point after a composition (it is a tiny
    difference of huge B-masses), so there it is replaced by its upper bound
    B-mass <= 1, which only lowers the lower bound.
    """

    method: ClassVar[str] = "paper"
    variants: ClassVar[Tuple[str, ...]] = ("paper",)
    forms_exponentials: ClassVar[bool] = True
    batchable: ClassVar[bool] = False       # operands are ``tamed`` before convolving

    grid: Grid
    rows: np.ndarray          # (3, 2n+1): A, V, R
    a_inf: float              # the infinity bucket (A-mass of loss > t_n, incl. +inf)
    u: int
    error: np.ndarray         # (3,) absolute parts: (A, a_inf), V, R
    compositions: int = 1
    direction: str = "ab"     # the neighbouring direction: pair (A||B) or mirrored (B||A)
    relative: Optional[np.ndarray] = None   # (3,) entrywise relative error of the rows

    def __post_init__(self):
        if self.relative is None:
            object.__setattr__(self, "relative", np.zeros(len(self.rows)))

    @property
    def infinity_bucket(self) -> Tuple[float, float]:
        """(a_inf, 0.0): one direction per object; the mirrored object holds the other."""
        return self.a_inf, 0.0

    def row_errors(self) -> Dict[str, float]:
        """Row errors; the A error also covers ``a_inf``."""
        return {k: float(e) for k, e in zip("AVR", self.error)}

    def upper_curves(self) -> Dict[str, PaperUpper]:
        """Definition 9 (u_T misplacement, real EC terms)."""
        A, _, R = self.rows
        const = _upper_const(self.a_inf + self.error[0] + self.error[2])
        rel = float(max(self.relative[0], self.relative[2]))
        return {self.direction: PaperUpper(self.grid, A, R, const, self.u, rel)}

    def lower_curves(self) -> Dict[str, ThresholdSum]:
        """Theorem 2 with the virtual EC terms."""
        t = self.grid.losses
        pA, pV, _ = self.rows
        with np.errstate(invalid="ignore", divide="ignore"):
            th = np.nan_to_num(np.minimum(t, t + _log(pA) - _log(pV)), nan=-np.inf)
        return {self.direction: ThresholdSum.build(
            th, pA, pV, t, _lower_const(-(self.error[0] + self.error[1])), False,
            float(self.relative[0] + _W * self.relative[1]))}

    @classmethod
    def leaves(cls, pair, grid: Grid, methods=("paper",)) -> Tuple["PaperBuckets", ...]:
        """Both directions: the pair (A||B) and its mirror (B||A)."""
        if "paper" not in methods:
            return ()
        t = grid.losses
        return (cls.from_masses(grid, *pair.bucket_masses_with_error(t)),
                cls.from_masses(grid, *pair.mirrored().bucket_masses_with_error(t),
                                direction="ba"))

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb, direction: str = "ab") -> "PaperBuckets":
        t = grid.losses
        A = a[:-1].copy()
        et = np.exp(t)
        V = b[:-1] * et
        R = V.copy()
        R[0] = A[0]                                  # l(-n) = 0
        rows = np.vstack([A, V, R])
        eV = eb[:-1] * et * (1 + 1e-9)
        eR = eV.copy()
        eR[0] = ea[0]
        rel, error = _leaf_errors(rows, (ea[:-1], eV, eR),
                                  (float(ea[-1]) + 1e-300 * len(t), 1e-300 * len(t),
                                   1e-300 * len(t)))
        return PaperBuckets(grid, rows, float(a[-1]), 1, error, 1, direction, rel)

    def padded(self, n: int) -> "PaperBuckets":
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        return PaperBuckets(self.grid.with_buckets(n), _widened(self.rows, k),
                            self.a_inf, self.u, self.error, self.compositions, self.direction,
                            self.relative)

    def tamed(self) -> "PaperBuckets":
        """Keep the EC rows inside floating-point range.

        Misplacement drifts indices upward (u grows with every composition), so after
        many steps f^i B-masses can overflow.  Then the real term falls back to l = 0
        (Definition 5 for those buckets: still sound, Lemma 12 holds trivially) and
        the virtual term to its bound f^i (B-mass <= 1), which only lowers the bound.
        """
        A, V, R = self.rows
        if max(float(V.max()), float(R.max())) < 1e100:
            return self
        rows = np.vstack([A, np.minimum(np.maximum(V, A), np.exp(np.minimum(
            self.grid.losses, 600.0))), A])
        rows[1] = np.where(V > 1e100, np.exp(np.minimum(self.grid.losses, 600.0)), rows[1])
        # max(V, A) is within |dV| + |dA| of the exact one
        err = np.array([self.error[0], self.error[0] + self.error[1], self.error[0]])
        r0, r1 = float(self.relative[0]), float(self.relative[1])
        rel = np.array([r0, max(r0, r1), r0])
        return PaperBuckets(self.grid, rows, self.a_inf, self.u, err, self.compositions,
                            self.direction, rel)

    def compose_full(self, other: "PaperBuckets", tolerance: float = 0.0) -> "PaperBuckets":
        """T1 x T2 with all indices kept; both operands are ``tamed`` first."""
        if not other.grid.compatible(self.grid) or other.direction != self.direction:
            raise ValueError("compose needs buckets of one direction on grids of the same "
                             "factor and size")
        x, y = self.tamed(), other.tamed()
        return x.from_product(y, convolve_rows(x.rows, None if y is x else y.rows,
                                               tolerance))

    def from_product(self, other: "PaperBuckets", product: RowProduct) -> "PaperBuckets":
        """The full product given the convolved rows (of ``tamed`` operands)."""
        n = self.grid.number_of_buckets
        z, fft_err, conv_rel = product
        a_inf = self.a_inf + other.a_inf - self.a_inf * other.a_inf
        mx = self.rows.sum(axis=1) + np.array([self.a_inf, 0, 0])
        my = other.rows.sum(axis=1) + np.array([other.a_inf, 0, 0])
        atoms = np.array([self.a_inf + other.a_inf, 0.0, 0.0])
        err = _propagate(self.error, self.relative, mx, other.error, other.relative, my,
                         fft_err, np.zeros((3, 1)), atoms, conv_rel)
        grid = Grid(self.grid.log_factor, 2 * n, self.grid.offset + other.grid.offset)
        return PaperBuckets(grid, z, a_inf, self.u + other.u, err,
                            self.compositions + other.compositions, self.direction,
                            _compose_relative(self.relative, other.relative, conv_rel))

    def restricted(self, grid: Grid, mean_loss: Optional[Tuple[float, float]] = None) -> "PaperBuckets":
        """Corner rules of Definitions 4 and 7 on ``grid`` (a ``Grid.window``): above
        it to infinity, below it into the bottom bucket (whose real EC term is 0)."""
        if grid == self.grid:
            return self
        m, n = self.grid.number_of_buckets, grid.number_of_buckets
        lo, hi = _window(self.grid, grid)
        rows = self.rows[:, lo: hi + 1].copy()
        top = float(self.rows[0, hi + 1:].sum())
        bottom = self.rows[0, : lo + 1].sum()
        rows[0, 0] = bottom
        rows[1, 0] = math.exp(grid.losses[0])  # certified bound on the virtual term (class doc)
        rows[2, 0] = bottom                    # l(bottom) = 0
        # (_times: an empty top carries no relative error, even where the rows' relative
        # error has grown to inf: inf * 0 made the A error NaN, and the next product
        # raised an internal error, Gaussian(1) composed 10^15 times by the paper method)
        err = (self.error + 4.0 * max(m - n, 1) * _U * np.array([top + bottom, 0.0, bottom])
               + np.array([_times(top, self.relative[0] + 4 * _U), 0.0, 0.0])) * (1.0 + 1e-12)
        rel = self.relative.copy()
        rel[2] = max(rel[2], rel[0])                 # the bottom R entry is an A sum
        return PaperBuckets(grid, rows, self.a_inf + top, self.u, err, self.compositions,
                            self.direction, rel)

    def squared(self) -> "PaperBuckets":
        f = self.grid.factor
        A, V, R = self.rows
        new = self.grid.squared()
        newA = _merged(A, self.grid)
        newV = _merged(V, self.grid, f)
        newR = _merged(R, self.grid, f)
        bottom = _ceil_half(int(self.grid.indices[0])) - new.offset + new.number_of_buckets
        newR[bottom] = newA[bottom]                  # l = 0 where the old bottom lands
        err = self.error * np.array([1.0, f, f]) * (1.0 + 4 * _U)
        rel = _rounded_relative(self.relative)
        rel[2] = max(rel[2], rel[0])                 # one R entry is an A entry
        return PaperBuckets(new, np.vstack([newA, newV, newR]), self.a_inf,
                            -(-self.u // 2) + 1, err, self.compositions, self.direction, rel)
