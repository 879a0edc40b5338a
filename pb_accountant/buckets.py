"""Privacy buckets on a grid of loss values t_i = i log f, i = -n..n (paper §3-4).

Three representations of the same composition, all stored as rows of masses so that
composition is one batched FFT convolution per row (indices add, paper Definition 4):

* ``SplitBuckets``: the tight *upper* bound.  Every event is split into two atoms on
  the neighbouring grid points, preserving its A- and B-mass (DESIGN.md §3, the
  privacy-buckets counterpart of "Connect the Dots").  The split pair dominates the
  true pair in both neighbouring directions at once, and corner atoms beyond t_n
  (t_{-n}) are split between t_n and +inf (t_{-n} and -inf) the same way.
* ``GroupedBuckets``: the *lower* bound.  Events are grouped by index; grouping is
  post-processing, so sum over groups of max(0, A_g - e^eps B_g) never exceeds the
  true hockey-stick divergence (paper Theorem 2, virtual EC terms).
* ``PaperBuckets``: the paper's buckets with real and virtual error-correction terms
  and u_T, one direction per object (Definitions 4, 7, 9).

B-masses are stored scaled to A units (C_i = B_i f^i, paper's A/f^i + EC term) where
a query weighs them by e^{eps - t_i} <= 1, so each row carries a certified l1 bound on
its accumulated floating-point error (``error``), folded into every reported bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .convolution import UNIT_ROUNDOFF, convolve_rows

_U = UNIT_ROUNDOFF

#: Largest |t| a grid may reach: e^{t} must stay far inside floating-point range.
MAX_LOSS_RANGE = 700.0


@dataclass(frozen=True)
class Grid:
    """Bucket factor f = e^{log_factor} and an even number of buckets n (Definition 3)."""

    log_factor: float
    number_of_buckets: int

    def __post_init__(self):
        n = self.number_of_buckets
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n % 2:
            raise ValueError(f"number_of_buckets must be an even integer >= 2, got {n!r}")
        d = self.log_factor
        if not (isinstance(d, (int, float, np.floating)) and math.isfinite(d) and d > 0):
            raise ValueError(f"log(factor) must be finite and > 0, got {d!r}")
        if n * d > MAX_LOSS_RANGE:
            raise ValueError(
                f"factor**number_of_buckets = exp({n * d:.4g}) exceeds exp({MAX_LOSS_RANGE}); "
                "choose a smaller factor or fewer buckets")

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)

    @property
    def size(self) -> int:
        return 2 * self.number_of_buckets + 1

    @property
    def losses(self) -> np.ndarray:
        n = self.number_of_buckets
        return np.arange(-n, n + 1, dtype=float) * self.log_factor

    def squared(self) -> "Grid":
        """Grid after the squaring operation T (f -> f^2, n unchanged)."""
        return Grid(2.0 * self.log_factor, self.number_of_buckets)


def _fold_weights(n: int, log_factor: float):
    """e^{-k log f} and 1 - e^{-k log f} for k = 1..n (corner splits)."""
    k = np.arange(1, n + 1, dtype=float) * log_factor
    return np.exp(-k), -np.expm1(-k)


def _propagate(err_x, mass_x, err_y, mass_y, fft_err, folded):
    """l1 error of a product: Young's inequality, FFT round-off and the corner sums
    (``folded``: mass summed into the corners, each sum of <= n terms)."""
    with np.errstate(over="ignore"):       # an overflowing bound is inf: still a bound
        return (err_x * mass_y + err_y * mass_x + err_x * err_y + fft_err
                + 4.0 * folded.shape[-1] * _U * folded.sum(axis=-1)
                + 4.0 * _U * mass_x * mass_y)


def _merge_pairs(row: np.ndarray, n: int, odd_weight: float = 1.0) -> np.ndarray:
    """Squaring by grouping: new index j collects old 2j-1 (times odd_weight) and 2j."""
    out = np.zeros_like(row)
    even = row[0::2]                       # old i = -n, -n+2, ..., n -> j = -n/2..n/2
    odd = row[1::2]                        # old i = -n+1, ..., n-1 -> j = -n/2+1..n/2
    mid = out[n // 2: n // 2 + n + 1]
    mid += even
    mid[1:] += odd * odd_weight
    return out


# --------------------------------------------------------------------------- split
@dataclass(frozen=True, eq=False)
class SplitBuckets:
    """Atoms on grid points (A-masses, B-masses) plus atoms at +inf (A) and -inf (B)."""

    grid: Grid
    rows: np.ndarray          # (2, 2n+1): A-mass and B-mass of the atom at t_i
    a_inf: float              # A-mass of loss +inf (distinguishing events)
    b_minf: float             # B-mass of loss -inf
    error: np.ndarray         # (2,) l1 error bounds of (A row, a_inf) and (B row, b_minf)
    compositions: int = 1
    overflow: float = 0.0     # mass the last composition moved into the infinity atoms

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb) -> "SplitBuckets":
        """Split bucket masses (K+1 intervals of ``grid.losses``, with absolute error
        bounds ``ea``, ``eb``) onto the grid points."""
        n = grid.number_of_buckets
        t = grid.losses
        d = grid.log_factor
        fm1 = math.expm1(d)
        f = fm1 + 1.0
        A = np.zeros(grid.size)
        B = np.zeros(grid.size)
        ai, bi = a[1:-1], b[1:-1]                      # bucket (t_{k-1}, t_k], k = 1..2n
        ti = t[1:]
        et = np.exp(ti)
        ci = bi * et                                   # B-mass scaled to A units at t_k
        beta = (ai * f - ci) / fm1                     # A-mass sent up to t_k
        slack = ((ea[1:-1] * f + eb[1:-1] * et) + 8.0 * _U * (ai * f + ci)) / fm1
        beta_up = np.clip(beta + slack, 0.0, ai)       # rounded toward the higher loss
        alpha = ai - beta_up
        A[:-1] += alpha
        A[1:] += beta_up
        B[:-1] += alpha * np.exp(-t[:-1])
        B[1:] += beta_up / et
        # B-mass the upward rounding removed goes to the -inf atom (keeps domination)
        deficit = float(np.sum(np.minimum(2.0 * slack, ai) / et * fm1))
        # corner buckets: L <= t_{-n} and L > t_n (paper's S_{-n} and S_inf)
        edge = math.exp(n * d)
        A[0] += a[0]
        B[0] += a[0] * edge
        b_minf = max(0.0, b[0] - a[0] * edge) + eb[0] + ea[0] * edge + deficit
        B[-1] += b[-1]
        A[-1] += b[-1] * edge
        a_inf = max(0.0, a[-1] - b[-1] * edge) + ea[-1] + eb[-1] * edge
        error = np.array([float(np.sum(ea)) + 8 * _U, float(np.sum(eb)) * f + 8 * _U])
        return SplitBuckets(grid, np.vstack([A, B]), float(a_inf), float(b_minf), error)

    def masses(self) -> np.ndarray:
        return self.rows.sum(axis=1) + np.array([self.a_inf, self.b_minf])

    def padded(self, n: int) -> "SplitBuckets":
        """The same atoms on a grid with more buckets (exact)."""
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        rows = np.pad(self.rows, ((0, 0), (k, k)))
        return SplitBuckets(Grid(self.grid.log_factor, n), rows, self.a_inf, self.b_minf,
                            self.error, self.compositions, self.overflow)

    def restricted(self, n: int) -> "SplitBuckets":
        """Keep indices -n..n; atoms beyond are split between the edge and +-inf."""
        m = self.grid.number_of_buckets
        if n >= m:
            return self
        k = m - n
        d = self.grid.log_factor
        A, B = self.rows
        w_keep, w_out = _fold_weights(k, d)
        a_top, a_bot = A[m + n + 1:], A[:k]
        b_top, b_bot = B[m + n + 1:], B[:k][::-1]
        newA = A[k: k + 2 * n + 1].copy()
        newB = B[k: k + 2 * n + 1].copy()
        newA[-1] += a_top @ w_keep
        a_over = float(a_top @ w_out)
        newA[0] += a_bot.sum()
        newB[-1] += b_top.sum()
        newB[0] += b_bot @ w_keep
        b_over = float(b_bot @ w_out)
        folded = np.array([a_top.sum() + a_bot.sum(), b_top.sum() + b_bot.sum()])
        err = self.error + 4.0 * k * _U * folded
        return SplitBuckets(Grid(d, n), np.vstack([newA, newB]), self.a_inf + a_over,
                            self.b_minf + b_over, err, self.compositions,
                            self.overflow + max(a_over, b_over))

    def compose_full(self, other: "SplitBuckets", tolerance: float = 0.0) -> "SplitBuckets":
        """T1 x T2 with all 4n+1 indices kept (no corner folding yet)."""
        if other.grid != self.grid:
            raise ValueError("compose needs buckets on the same grid")
        z, fft_err = convolve_rows(self.rows, None if other is self else other.rows,
                                   tolerance)
        return self.from_product(other, z, fft_err)

    def from_product(self, other: "SplitBuckets", z, fft_err) -> "SplitBuckets":
        """The full product given the convolved rows ``z`` and their round-off bounds."""
        n = self.grid.number_of_buckets
        a_inf = self.a_inf + other.a_inf - self.a_inf * other.a_inf
        b_minf = self.b_minf + other.b_minf - self.b_minf * other.b_minf
        err = _propagate(self.error, self.masses(), other.error, other.masses(), fft_err,
                         np.zeros((2, 1)))
        return SplitBuckets(Grid(self.grid.log_factor, 2 * n), z, a_inf, b_minf, err,
                            self.compositions + other.compositions, 0.0)

    def loss_moments(self):
        """A-weighted mean and standard deviation of the loss (for grid choice)."""
        cached = self.__dict__.get("_moments")
        if cached is not None:
            return cached
        A = self.rows[0]
        t = self.grid.losses
        m = A.sum()
        if m <= 0:
            return 0.0, 0.0
        mean = float(A @ t / m)
        var = float(A @ (t * t) / m - mean * mean)
        result = (mean, math.sqrt(max(var, 0.0)))
        self.__dict__["_moments"] = result
        return result

    def mean_loss(self, row: int = 0) -> float:
        """Mean loss weighted by the A-row (0) or the B-row (1)."""
        if row == 0:
            return self.loss_moments()[0]
        w = self.rows[1]
        m = w.sum()
        return float(w @ self.grid.losses / m) if m > 0 else 0.0

    def needed_reach(self, tail: float) -> float:
        """Smallest R with A-mass above R and B-mass below -R each at most ``tail``."""
        A, B = self.rows
        t = self.grid.losses
        above = np.cumsum(A[::-1])[::-1]          # A-mass at indices >= i
        below = np.cumsum(B)                      # B-mass at indices <= i
        hi_idx = np.nonzero(above > tail)[0]
        lo_idx = np.nonzero(below > tail)[0]
        hi = t[hi_idx[-1]] if len(hi_idx) else 0.0
        lo = t[lo_idx[0]] if len(lo_idx) else 0.0
        return float(max(abs(hi), abs(lo), self.grid.log_factor))

    def compose(self, other: "SplitBuckets") -> "SplitBuckets":
        """T1 x T2 (Definition 4 on the split pair): one convolution per row."""
        if other.grid != self.grid:
            raise ValueError("compose needs buckets on the same grid")
        n = self.grid.number_of_buckets
        z, fft_err = convolve_rows(self.rows, None if other is self else other.rows)
        w_keep, w_out = _fold_weights(n, self.grid.log_factor)
        A = z[0, n: 3 * n + 1].copy()
        B = z[1, n: 3 * n + 1].copy()
        a_top, a_bot = z[0, 3 * n + 1:], z[0, :n]
        b_top, b_bot = z[1, 3 * n + 1:], z[1, :n][::-1]   # b_bot[k-1] is index -n-k
        A[-1] += a_top @ w_keep
        a_over = float(a_top @ w_out)
        A[0] += a_bot.sum()
        B[-1] += b_top.sum()
        B[0] += b_bot @ w_keep
        b_over = float(b_bot @ w_out)
        a_inf = self.a_inf + other.a_inf - self.a_inf * other.a_inf + a_over
        b_minf = self.b_minf + other.b_minf - self.b_minf * other.b_minf + b_over
        mx, my = self.masses(), other.masses()
        folded = np.vstack([np.concatenate((a_top, a_bot)), np.concatenate((b_top, b_bot))])
        err = _propagate(self.error, mx, other.error, my, fft_err, folded)
        return SplitBuckets(self.grid, np.vstack([A, B]), a_inf, b_minf, err,
                            self.compositions + other.compositions, max(a_over, b_over))

    def squared(self) -> "SplitBuckets":
        """T: f -> f^2; odd points split between their even neighbours, masses kept."""
        n = self.grid.number_of_buckets
        g = math.exp(-self.grid.log_factor)
        lo_a, hi_a = g / (1.0 + g), 1.0 / (1.0 + g)      # A weights to j-1 and j
        rows = np.zeros_like(self.rows)
        for r, (w_lo, w_hi) in enumerate(((lo_a, hi_a), (hi_a, lo_a))):
            row = self.rows[r]
            mid = rows[r, n // 2: n // 2 + n + 1]
            mid += row[0::2]
            odd = row[1::2]
            mid[:-1] += odd * w_lo
            mid[1:] += odd * w_hi
        err = self.error + 4.0 * _U * self.masses()
        return SplitBuckets(self.grid.squared(), rows, self.a_inf, self.b_minf, err,
                            self.compositions, 0.0)


# ------------------------------------------------------------------------- grouped
#: labels may lag a group's likelihood ratio by at most this many log-units before
#: the group is left out of a lower bound (keeps every error weight <= e^LABEL_SLACK)
LABEL_SLACK = 0.05


@dataclass(frozen=True, eq=False)
class GroupedBuckets:
    """Groups of events with exact masses, for the lower bound of one or both directions.

    Rows, by direction: "ab" (A||B) keeps A and C = B f^i, "ba" (B||A) keeps B and
    D = A f^{-i}.  The label i of a group is only a name: the bound reads each group's
    exact masses (A_g, B_g = C_g f^{-i}).  Leaves label events by the nearest grid point
    and every restriction re-centres the kept window on the split pair's mean, so labels
    do not drift out of range however many steps are composed.  Events with loss +inf
    (-inf) form one more group each, kept as a scalar mass.
    """

    grid: Grid
    rows: np.ndarray          # (2 or 4, 2n+1), see ``kinds``
    error: np.ndarray         # l1 error bound per row
    compositions: int = 1
    a_pinf: float = 0.0       # A-mass of the group of events with loss +inf (B = 0)
    b_minf: float = 0.0       # B-mass of the group of events with loss -inf (A = 0)
    directions: Tuple[str, ...] = ("ab", "ba")

    @property
    def kinds(self) -> Tuple[str, ...]:
        return tuple(k for d in self.directions for k in _ROW_KINDS[d])

    @staticmethod
    def leaf_grid_points(grid: Grid) -> np.ndarray:
        """Cut points (i - 1/2) log f, i = -n+1..n: label i <=> nearest grid point."""
        n = grid.number_of_buckets
        return (np.arange(-n + 1, n + 1, dtype=float) - 0.5) * grid.log_factor

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb, infinities=(0.0, 0.0),
                    directions: Tuple[str, ...] = ("ab", "ba")) -> "GroupedBuckets":
        """From masses on the K+1 = 2n+1 intervals cut by ``leaf_grid_points``;
        ``infinities`` = (A-mass at loss +inf, B-mass at loss -inf) become their own
        groups (they would otherwise be dropped with the range under composition)."""
        t = grid.losses
        a = a.copy()
        b = b.copy()
        a_pinf, b_minf = infinities
        a[-1] = max(a[-1] - a_pinf, 0.0)
        b[0] = max(b[0] - b_minf, 0.0)
        et = np.exp(t)
        full = {"A": a, "C": b * et, "B": b, "D": a / et}
        full_err = {"A": ea.sum(), "C": (eb * et).sum(), "B": eb.sum(), "D": (ea / et).sum()}
        kinds = [k for d in directions for k in _ROW_KINDS[d]]
        rows = np.vstack([full[k] for k in kinds])
        error = np.array([full_err[k] for k in kinds]) * (1 + 1e-9) + 8 * _U * rows.sum(axis=1)
        keep_a, keep_b = "ab" in directions, "ba" in directions
        return GroupedBuckets(grid, rows, error, 1, float(a_pinf) if keep_a else 0.0,
                              float(b_minf) if keep_b else 0.0, tuple(directions))

    def _with(self, grid, rows, error, compositions=None, infinities=None) -> "GroupedBuckets":
        a_pinf, b_minf = infinities if infinities is not None else (self.a_pinf, self.b_minf)
        return GroupedBuckets(grid, rows, error, self.compositions if compositions is None
                              else compositions, a_pinf, b_minf, self.directions)

    def _product_infinities(self, other: "GroupedBuckets"):
        """Events with a +inf (-inf) component: A-mass a1 + a2 - a1 a2 (B likewise)."""
        return (self.a_pinf + other.a_pinf - self.a_pinf * other.a_pinf,
                self.b_minf + other.b_minf - self.b_minf * other.b_minf)

    def row(self, kind: str) -> Optional[np.ndarray]:
        kinds = self.kinds
        return self.rows[kinds.index(kind)] if kind in kinds else None

    def row_error(self, kind: str) -> float:
        return float(self.error[self.kinds.index(kind)])

    def padded(self, n: int) -> "GroupedBuckets":
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        return self._with(Grid(self.grid.log_factor, n), np.pad(self.rows, ((0, 0), (k, k))),
                          self.error)

    def compose_full(self, other: "GroupedBuckets", tolerance: float = 0.0) -> "GroupedBuckets":
        if other.grid != self.grid or other.directions != self.directions:
            raise ValueError("compose needs buckets of the same kind on the same grid")
        z, fft_err = convolve_rows(self.rows, None if other is self else other.rows,
                                   tolerance)
        return self.from_product(other, z, fft_err)

    def from_product(self, other: "GroupedBuckets", z, fft_err) -> "GroupedBuckets":
        n = self.grid.number_of_buckets
        err = _propagate(self.error, self.rows.sum(axis=1), other.error,
                         other.rows.sum(axis=1), fft_err, np.zeros((len(self.rows), 1)))
        return self._with(Grid(self.grid.log_factor, 2 * n), z, err,
                          self.compositions + other.compositions,
                          self._product_infinities(other))

    def restricted(self, n: int, centre: float = 0.0) -> "GroupedBuckets":
        """Keep 2n+1 labels around ``centre`` (a loss value, matched against the mean
        label weighted by the first mass row); groups outside are dropped."""
        m = self.grid.number_of_buckets
        d = self.grid.log_factor
        weights = self.rows[0]
        labels = np.arange(-m, m + 1, dtype=float)
        mass = weights.sum()
        mean = float(weights @ labels / mass) if mass > 0 else 0.0
        shift = int(round(mean - centre / d))
        shift = max(-(m - n), min(m - n, shift))
        start = m - n + shift
        rows = self.rows[:, start: start + 2 * n + 1].copy()
        err = self.error.copy()
        if shift:
            scale = math.exp(shift * d)
            for i, kind in enumerate(self.kinds):
                if kind == "C":
                    rows[i] /= scale
                    err[i] *= 1.0 + 4 * _U
                elif kind == "D":
                    rows[i] *= scale
                    err[i] *= 1.0 + 4 * _U
        return self._with(Grid(d, n), rows, err)

    def squared(self) -> "GroupedBuckets":
        n = self.grid.number_of_buckets
        f = self.grid.factor
        weight = {"A": 1.0, "B": 1.0, "C": f, "D": 1.0 / f}
        kinds = self.kinds
        rows = np.vstack([_merge_pairs(r, n, weight[k]) for r, k in zip(self.rows, kinds)])
        growth = np.array([max(weight[k], 1.0) for k in kinds])
        err = self.error * growth + 4.0 * _U * self.rows.sum(axis=1)
        return self._with(self.grid.squared(), rows, err)


#: rows kept per direction of the grouped lower bound
_ROW_KINDS = {"ab": ("A", "C"), "ba": ("B", "D")}


# --------------------------------------------------------------------------- paper
@dataclass(frozen=True, eq=False)
class PaperBuckets:
    """One direction of the paper's buckets: rows B(i), virtual and real EC, u_T.

    Rows are A = B_T(i), V = (B_T(i)/f^i + l~(i)) f^i and R = (B_T(i)/f^i + l(i)) f^i
    (Definitions 4 and 7); composition is a convolution of each row because
    V-formula sums telescope (DESIGN.md §2).  The virtual term of the bottom bucket
    -n cannot be certified in floating point after a composition (it is a tiny
    difference of huge B-masses), so there it is replaced by its upper bound
    B-mass <= 1, which only lowers the lower bound.
    """

    grid: Grid
    rows: np.ndarray          # (3, 2n+1): A, V, R
    a_inf: float
    u: int
    error: np.ndarray         # (3,) l1 error bounds of (A, a_inf), V, R
    compositions: int = 1

    @staticmethod
    def from_masses(grid: Grid, a, b, ea, eb) -> "PaperBuckets":
        t = grid.losses
        A = a[:-1].copy()
        et = np.exp(t)
        V = b[:-1] * et
        R = V.copy()
        R[0] = A[0]                                  # l(-n) = 0
        rows = np.vstack([A, V, R])
        ev = float((eb[:-1] * et).sum())
        error = np.array([float(ea.sum()), ev, ev]) * (1 + 1e-9) + 8 * _U * rows.sum(axis=1)
        return PaperBuckets(grid, rows, float(a[-1]), 1, error)

    def compose(self, other: "PaperBuckets") -> "PaperBuckets":
        if other.grid != self.grid:
            raise ValueError("compose needs buckets on the same grid")
        n = self.grid.number_of_buckets
        z, fft_err = convolve_rows(self.rows, None if other is self else other.rows)
        rows = z[:, n: 3 * n + 1].copy()
        over = float(z[0, 3 * n + 1:].sum())
        rows[0, 0] += z[0, :n].sum()
        rows[1, 0] = math.exp(-n * self.grid.log_factor)   # certified bound, see class doc
        rows[2, 0] = rows[0, 0]
        a_inf = self.a_inf + other.a_inf - self.a_inf * other.a_inf + over
        mx = self.rows.sum(axis=1) + np.array([self.a_inf, 0, 0])
        my = other.rows.sum(axis=1) + np.array([other.a_inf, 0, 0])
        folded = np.vstack([np.concatenate((z[0, 3 * n + 1:], z[0, :n])),
                            np.zeros(2 * n), np.zeros(2 * n)])
        err = _propagate(self.error, mx, other.error, my, fft_err, folded)
        return PaperBuckets(self.grid, rows, a_inf, self.u + other.u, err,
                            self.compositions + other.compositions)

    def padded(self, n: int) -> "PaperBuckets":
        k = n - self.grid.number_of_buckets
        if k == 0:
            return self
        return PaperBuckets(Grid(self.grid.log_factor, n), np.pad(self.rows, ((0, 0), (k, k))),
                            self.a_inf, self.u, self.error, self.compositions)

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
        err = np.array([self.error[0], self.error[1], self.error[0]])
        return PaperBuckets(self.grid, rows, self.a_inf, self.u, err, self.compositions)

    def compose_full(self, other: "PaperBuckets", tolerance: float = 0.0) -> "PaperBuckets":
        if other.grid != self.grid:
            raise ValueError("compose needs buckets on the same grid")
        n = self.grid.number_of_buckets
        self, other = self.tamed(), other.tamed()
        z, fft_err = convolve_rows(self.rows, None if other is self else other.rows,
                                   tolerance)
        a_inf = self.a_inf + other.a_inf - self.a_inf * other.a_inf
        mx = self.rows.sum(axis=1) + np.array([self.a_inf, 0, 0])
        my = other.rows.sum(axis=1) + np.array([other.a_inf, 0, 0])
        err = _propagate(self.error, mx, other.error, my, fft_err, np.zeros((3, 1)))
        return PaperBuckets(Grid(self.grid.log_factor, 2 * n), z, a_inf, self.u + other.u,
                            err, self.compositions + other.compositions)

    def restricted(self, n: int) -> "PaperBuckets":
        """Corner rules of Definitions 4 and 7: above n to infinity, below -n into -n."""
        m = self.grid.number_of_buckets
        if n >= m:
            return self
        k = m - n
        d = self.grid.log_factor
        rows = self.rows[:, k: k + 2 * n + 1].copy()
        top = float(self.rows[0, k + 2 * n + 1:].sum())
        bottom = self.rows[0, : k + 1].sum()
        rows[0, 0] = bottom
        rows[1, 0] = math.exp(-n * d)        # certified bound on the virtual term, see class doc
        rows[2, 0] = bottom                  # l(-n) = 0
        err = self.error + 4.0 * k * _U * np.array([top + bottom, 0.0, bottom])
        return PaperBuckets(Grid(d, n), rows, self.a_inf + top, self.u, err, self.compositions)

    def squared(self) -> "PaperBuckets":
        n = self.grid.number_of_buckets
        f = self.grid.factor
        A, V, R = self.rows
        newA = _merge_pairs(A, n)
        newV = _merge_pairs(V, n, f)
        newR = _merge_pairs(R, n, f)
        newR[n // 2] = newA[n // 2]                  # l(-n/2) = 0 after squaring
        err = self.error * np.array([1.0, f, f]) + 4.0 * _U * self.rows.sum(axis=1)
        return PaperBuckets(self.grid.squared(), np.vstack([newA, newV, newR]), self.a_inf,
                            -(-self.u // 2) + 1, err, self.compositions)
