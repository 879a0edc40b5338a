"""FFT convolution of bucket vectors with a certified bound on its round-off.

Round-off of a plain FFT convolution is absolute (relative to the vectors' norms) and
a composition of r steps carries an early error about r times, so a plain FFT cannot
certify deltas near 1e-6 after 10^5 steps.  Each row is therefore split
x = hi + lo, hi holding the top ``b`` bits relative to the row's largest entry.  The
exact hi * hi has entries on a known grid g = s_x s_y; the FFT's error bound is kept
below g/4 by the choice of b, so rounding the transform to that grid recovers it
exactly.  Only the small hi*lo + lo*hi + lo*lo part carries round-off.

Error model (docs/floating-point.md): for a radix-2 FFT of length N, Higham (Accuracy
and Stability of Numerical Algorithms, 2nd ed., Thm 24.2) gives
||fl(Fx) - Fx||_2 <= rho ||Fx||_2, rho = L eta / (1 - L eta), L = log2 N,
eta = mu + gamma_4 (sqrt 2 + mu).  Transform lengths are 5-smooth (N = 2^a 3^b 5^c,
``fft_length``: a power of two wastes up to half the transform on padding); a radix-3
pass is charged as two radix-2 stages and a radix-5 pass as three (L = a + 2b + 3c,
``fft_stages``, at least log2 N).  Propagated through the transforms and the product,

    ||fl(x * y) - x * y||_2 <= (3 rho + 5 u) (||x||_1 ||y||_2 + ||y||_1 ||x||_2)

to first order, and ||e||_1 <= sqrt(N) ||e||_2.  We take twiddle accuracy mu = 4u and
a safety factor of 4; tests compare the bounds with exact rational convolutions.
"""
from __future__ import annotations

import bisect
import functools
import math
import os
from typing import NamedTuple, Optional, Tuple

import numpy as np
from scipy import fft as _fft

# (UNIT_ROUNDOFF is also re-exported here for older imports)
from ._fp import LEAST_SUBNORMAL, LEAST_SUBNORMAL_EXPONENT, UNIT_ROUNDOFF

#: threads for the batched transforms (pocketfft, the same algorithm numpy uses)
_WORKERS = max(1, min(4, os.cpu_count() or 1))

_SAFETY = 4.0
#: entrywise relative round-off of the recombined product: z_k carries at most this
#: times (x * y)_k plus the absolute bound ``convolve_rows`` returns.  The parts of a
#: row satisfy |p_j| <= 2x entrywise, so an exact level l has |L_l| <= 4(l+1) x*y; the
#: levels are added finest first, so the partial sums before the last four additions
#: are at most (25, 13, 5, 1) x*y plus the rest: 44u, rounded up.  Additions of finer
#: levels (l >= 4, when a row is split into more than 5 parts) are charged as absolute
#: (docs/floating-point.md)
CONVOLUTION_RELATIVE_ERROR = 48.0 * UNIT_ROUNDOFF
#: levels whose additions are covered by CONVOLUTION_RELATIVE_ERROR (levels 0..3)
_RELATIVE_LEVELS = 4
#: entries below this are flushed to zero (their sum is added to the error bound)
_TINY = 1e-280


def _smooth_lengths(limit: int) -> np.ndarray:
    """The 5-smooth numbers 2^a 3^b 5^c up to ``limit``, sorted."""
    out = []
    p5 = 1
    while p5 <= limit:
        p35 = p5
        while p35 <= limit:
            m = p35
            while m <= limit:
                out.append(m)
                m *= 2
            p35 *= 3
        p5 *= 5
    return np.array(sorted(out), dtype=np.int64)


#: the transform lengths (5-smooth, the lengths pocketfft's real transforms take in
#: radix-2, 3, 4 and 5 passes), up to 2^50
_SMOOTH = _smooth_lengths(1 << 50)
#: the same, as Python ints (looked up by ``bisect``: a scalar search in a numpy array
#: costs more than the small transforms it sizes)
_SMOOTH_INTS = tuple(int(v) for v in _SMOOTH)


def smooth_length(n: int) -> int:
    """The least 5-smooth integer at least ``n`` (n at most 2^50)."""
    if not 0 <= n <= _SMOOTH_INTS[-1]:
        raise ValueError(f"transform length must be in [0, 2^50], got {n!r}")
    return _SMOOTH_INTS[bisect.bisect_left(_SMOOTH_INTS, max(int(n), 1))]


def fft_length(length: int) -> int:
    """The transform length of a full linear convolution of two vectors of ``length``
    entries: the least 5-smooth integer at least 2 length - 1."""
    return smooth_length(max(2 * length - 1, 2))


def fft_stages(n_fft: int) -> int:
    """L = a + 2b + 3c for N = 2^a 3^b 5^c: the radix-2 stages the error model charges
    a length-N transform (a radix-3 pass as two stages, a radix-5 pass as three; at
    least log2 N, the radix-2 count)."""
    n, stages = int(n_fft), 0
    for p, cost in ((2, 1), (3, 2), (5, 3)):
        while n % p == 0:
            n //= p
            stages += cost
    if n != 1 or n_fft < 1:
        raise RuntimeError(f"internal error: transform length {n_fft} is not 5-smooth")
    return stages


@functools.lru_cache(maxsize=256)
def fft_relative_error(n_fft: int) -> float:
    """rho(N) of Higham Thm 24.2 with L = ``fft_stages(N)`` stages."""
    u = UNIT_ROUNDOFF
    mu = 4.0 * u
    gamma4 = 4.0 * u / (1.0 - 4.0 * u)
    eta = mu + gamma4 * (math.sqrt(2.0) + mu)
    le = fft_stages(n_fft) * eta
    return le / (1.0 - le)


def convolution_l2_error(n_fft: int, l1_x, l2_x, l1_y, l2_y):
    """Certified bound on the l2 norm (hence every entry) of one FFT convolution's error."""
    rho = fft_relative_error(n_fft)
    return _SAFETY * (3.0 * rho + 5.0 * UNIT_ROUNDOFF) * (l1_x * l2_y + l1_y * l2_x) * (1 + 1e-6)


def convolution_l1_error(n_fft: int, l1_x, l2_x, l1_y, l2_y):
    """Certified bound on the l1 norm of one plain FFT convolution's round-off."""
    return math.sqrt(n_fft) * convolution_l2_error(n_fft, l1_x, l2_x, l1_y, l2_y)


def _exact_bits(n_fft: int, l1, l2):
    """Per row, the largest b with the hi*hi error bound below a quarter of its grid.

    Rows are scaled so that their maximum lies in [0.5, 1), so hi lives on 2^-b and
    hi * hi on 2^-2b; we need 2^-2b >= 4 * bound.
    """
    bound = convolution_l2_error(n_fft, l1, l2, l1, l2)
    b = np.floor(-np.log2(4.0 * np.maximum(bound, 1e-300)) / 2.0) - 1
    return np.minimum(np.maximum(b, 1.0), 24.0)     # np.clip, without its wrapper


def _scaled(rows):
    """Rows times 2^-e (exact) so that each row's maximum lies in [0.5, 1).

    The power of two is applied as a product (exact, and correctly rounded where an
    entry lands among the subnormals, like ``ldexp``) unless 2^-e itself would leave
    the normal range, where ``ldexp`` is used."""
    tops = rows.max(axis=1)
    live = tops > 0
    e = np.zeros(len(rows), dtype=int)
    e[live] = np.frexp(tops[live])[1]
    if len(e) and -1000 <= e.min() and e.max() <= 1000:
        return rows * np.ldexp(1.0, -e)[:, None], e, live
    return np.ldexp(rows, -e[:, None]), e, live


def _row_norms(v, mag=None):
    """(l1, l2) norm of every row (last axis) of an array, flattened over the others;
    ``mag``: |v|, where the caller has it.  Each row's l1 sum is reduced alone, so the
    layout around it does not change it; einsum's buffered loop may split a row longer
    than its buffer (8192) by the whole array's shape, so the l2 norms are taken on the
    shapes they always were."""
    if mag is None:
        mag = np.abs(v)
    return mag.sum(axis=-1).reshape(-1), _row_l2(v)


def _row_l2(v):
    """The l2 half of ``_row_norms``."""
    return np.sqrt(np.einsum("...i,...i->...", v, v)).reshape(-1)


def _round_into(v, step, part, rest=None, flush: bool = True):
    """v = part + rest exactly, part on the grid ``step`` (a power of two per row),
    written into ``part`` (and into ``rest``, if given; else a new array); returns the
    rest.  Entries of the rest below _TINY are flushed to zero (``flush`` False: the
    caller knows there are none, ``_coarse``)."""
    np.divide(v, step, out=part)
    np.rint(part, out=part)
    part *= step
    rest = np.subtract(v, part, out=rest)
    if flush:
        tiny = np.abs(rest) < _TINY
        if tiny.any():
            rest[tiny] = 0.0
    return rest


#: rows whose non-zero entries are all at least this large have no rest below _TINY
#: in any split (``_coarse``)
_COARSE = 2.0 ** -860


def _coarse(rows, magnitude: bool = False) -> bool:
    """True when every non-zero |entry| is at least _COARSE: each is then a multiple of
    2^-912 (53 bits below its exponent), the split's grids are powers of two far above
    that (at least s0 step^(_MAX_PARTS - 2) >= 2^-24 2^-400 = 2^-424), so every part and
    every rest is a multiple of 2^-912 too, and a non-zero rest is never below _TINY
    (about 2^-930): ``_round_into`` need not look for one (``magnitude``: ``rows`` holds
    the |entries| already)."""
    a = rows if magnitude else np.abs(rows)
    return bool(np.min(a, where=a > 0.0, initial=np.inf) >= _COARSE)


#: the direct sum's cost model, in nanoseconds on 2 cores: _DIRECT_NS[0] per call,
#: [1] per block of a row (``_DIRECT_BLOCK``), [2] per entry of the blocks' products and
#: [3] per entry and term of its dot product; the transform _TRANSFORM_NS[0] per call,
#: [1] per row and [2] N log2 N per row of length N.  Fitted
#: (``benchmarks/bench_direct.py --settings``) to both paths' times on every product
#: of random-suite settings, benchmarks/results/bench_direct.txt.  A product is summed
#: directly only where that is predicted to cost less: a narrow bulk times a wide tail
#: (a two-scale fold's B R'), or a small grid.
_DIRECT_NS = (51e3, 3.8e3, 3.6, 0.35)
_TRANSFORM_NS = (60e3, 120e3, 3.8)
#: the most columns of the shorter operand a direct sum may take
_DIRECT_MOST_TERMS = 8192
#: the shorter operand is summed in blocks of this many columns, one numpy convolve per
#: block (each entry a BLAS dot product of at most this many terms: OpenBLAS computes
#: dots of up to 10,000 terms on one thread, so the order of summation does not depend
#: on the thread count), the blocks' products then added pairwise: every entry carries
#: gamma_{B + ceil(log2 blocks)} <= gamma_40 < CONVOLUTION_RELATIVE_ERROR (48u), never
#: more than the transform.  A relative error c of one product grows to about T c over
#: the squarings of T steps: one dot product of k terms (gamma_k, 9.1e-13 at k = 8,192)
#: made 10^10 steps' brackets 2.4 times wider and lost 10^13 steps' lower bound (an
#: independent review); blocks of 256 (gamma_261) still held 5.5 times the transform's.
_DIRECT_BLOCK = 32
#: the operands' non-zero entries must lie in [2^-465, 2^480]: every product of two is
#: then a normal float in [2^-930, 2^960] and every sum of up to _DIRECT_MOST_TERMS of
#: them stays below 2^974 (no underflow, whose error is absolute, no entry below the
#: transform's flush _TINY, and no overflow)
_DIRECT_RANGE = (2.0 ** -465, 2.0 ** 480)


def direct_relative_error(terms: int) -> float:
    """gamma_d = d u / (1 - d u), the relative round-off of ``_direct``'s sums of
    ``terms`` non-negative products: d = min(terms, _DIRECT_BLOCK) + ceil(log2 blocks).
    Within a block each term passes through one product and at most d_b - 1 additions
    in any order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq.
    3.5), then through one addition per level of the blocks' pairwise sum; every
    rounding is relative, and no term of the other sign cancels."""
    k = max(int(terms), 1)
    blocks = -(-k // _DIRECT_BLOCK)
    d = min(k, _DIRECT_BLOCK) + (blocks - 1).bit_length()
    return d * UNIT_ROUNDOFF / (1.0 - d * UNIT_ROUNDOFF)


def _span(rows) -> Tuple[int, int]:
    """[lo, hi): the columns holding every non-zero entry of ``rows`` ((0, 0) if none)."""
    cols = np.flatnonzero(rows.any(axis=0))
    return (int(cols[0]), int(cols[-1]) + 1) if cols.size else (0, 0)


def _in_direct_range(rows) -> bool:
    if rows.min(initial=0.0) < 0.0:
        return False
    low = rows.min(where=rows > 0.0, initial=np.inf)
    return bool(rows.max(initial=0.0) <= _DIRECT_RANGE[1]
                and (low == np.inf or low >= _DIRECT_RANGE[0]))


def direct_is_cheaper(rows: int, m: int, span_x: int, span_y: int) -> bool:
    """Whether summing ``rows`` products of operands spanning ``span_x`` and ``span_y``
    columns directly is predicted to cost less than the transform of rows of length
    ``m`` (the cost model above)."""
    terms = min(span_x, span_y)
    if terms == 0 or terms > _DIRECT_MOST_TERMS:
        return False
    blocks = -(-terms // _DIRECT_BLOCK)
    per_block = min(terms, _DIRECT_BLOCK)
    entries = blocks * (max(span_x, span_y) + per_block - 1)
    n_fft = fft_length(m)
    direct = _DIRECT_NS[0] + rows * (blocks * _DIRECT_NS[1] + entries * (
        _DIRECT_NS[2] + _DIRECT_NS[3] * per_block))
    transform = _TRANSFORM_NS[0] + rows * (_TRANSFORM_NS[1]
                                           + _TRANSFORM_NS[2] * n_fft * math.log2(n_fft))
    return direct < transform


def _direct(x: np.ndarray, y: Optional[np.ndarray]):
    """``convolve_rows`` summed directly where that is predicted cheaper
    (``direct_is_cheaper``) and both operands are non-negative within _DIRECT_RANGE;
    else None.

    Each row's product is numpy's convolve of the operands' spans (the columns holding
    their non-zero entries), in blocks of _DIRECT_BLOCK columns of the shorter one
    (k columns) added pairwise: every term non-negative and normal, so each entry
    carries at most ``direct_relative_error(k)`` of its exact value and no absolute
    error (every entry is 0, no term, or at least 2^-930, above the _TINY the
    transform's path flushes).  Each row is summed alone, so the bits do not depend on
    the other rows."""
    rows, m = x.shape
    if m == 0 or rows == 0:
        return None
    lx, hx = _span(x)
    ly, hy = (lx, hx) if y is None else _span(y)
    if hx == lx or hy == ly:
        # an operand of zeros: the product is exactly zero
        return RowProduct(np.zeros((rows, 2 * m - 1)), np.zeros(rows), np.zeros(rows))
    if not direct_is_cheaper(rows, m, hx - lx, hy - ly):
        return None
    xs = x[:, lx:hx]
    ys = xs if y is None else y[:, ly:hy]
    if not (_in_direct_range(xs) and (y is None or _in_direct_range(ys))):
        return None
    z = np.zeros((rows, 2 * m - 1))
    out = z[:, lx + ly:hx + hy - 1]
    short, wide = (xs, ys) if xs.shape[1] <= ys.shape[1] else (ys, xs)
    k = short.shape[1]
    for r in range(rows):
        # (offset into the product, block product), merged pairwise in a fixed order
        parts = [(start, np.convolve(short[r, start:start + _DIRECT_BLOCK], wide[r]))
                 for start in range(0, k, _DIRECT_BLOCK)]
        while len(parts) > 1:
            merged = []
            for (a0, a), (b0, b) in zip(parts[::2], parts[1::2]):
                c = np.zeros(max(a0 + len(a), b0 + len(b)) - a0)
                c[:len(a)] = a
                c[b0 - a0:b0 - a0 + len(b)] += b
                merged.append((a0, c))
            if len(parts) % 2:
                merged.append(parts[-1])
            parts = merged
        out[r] = parts[0][1]
    relative = np.full(rows, direct_relative_error(k))
    return RowProduct(z, np.zeros(rows), relative)


class RowProduct(NamedTuple):
    """``convolve_rows``' answer: the product's rows, and per row the l1 norm of its
    absolute round-off and its entrywise relative round-off: every entry z_k is within
    relative[r] (x*y)_k of the exact product plus an absolute part whose l1 norm over
    the row is at most l1_error[r]."""

    values: np.ndarray
    l1_error: np.ndarray
    relative: np.ndarray


def _pair_bound(n_fft, na, nb):
    return convolution_l2_error(n_fft, na[0], na[1], nb[0], nb[1])


def convolve_rows(x: np.ndarray, y: np.ndarray | None = None, tolerance: float = 0.0):
    """Full linear convolution of matching rows of ``x`` and ``y`` (``y=None``: x with x).

    Returns a ``RowProduct`` (z, l1_error, relative): z has shape (rows, 2m-1); the
    round-off of row k is at most relative[k] (CONVOLUTION_RELATIVE_ERROR through the
    transform) times the exact product entrywise plus an absolute part whose l1 norm is
    at most l1_error[k] (the FFT's error on the small rest).  All rows go through one
    batched, multi-threaded transform.  Each row is split exactly into hi + lo, or into
    up to ``_MAX_PARTS`` parts when the two-way bound would exceed ``tolerance``
    (``_split_plan`` checks before the transform that every level of the split is
    recovered exactly); the products of the leading parts are recovered exactly by
    rounding to their grids, only the rest carries round-off.  Where summing the rows
    directly costs less (an operand spanning few columns, or a small grid:
    ``direct_is_cheaper``) they are summed directly instead (``_direct``), with a
    relative bound alone.

    The rows of x and y are scaled, split and measured together (one stacked array: the
    scaling and splitting are entrywise and each row's l1 norm is summed alone, so those
    are the numbers of separate passes; a row longer than einsum's buffer (8192) may get
    an l2 norm a few ulp from a separate pass's, far inside the bounds' 1e-6 allowance).
    """
    rows, m = x.shape
    same = y is None
    check_finite("convolve_rows' first operand", x)
    if not same:
        check_finite("convolve_rows' second operand", y)
    direct = _direct(x, y)
    if direct is not None:
        return direct
    n_fft = fft_length(m)
    both = x if same else np.concatenate((x, y))
    bs, eb, live_b = _scaled(both)
    if same:
        ex = ey = eb
        live = live_b
    else:
        ex, ey = eb[:rows], eb[rows:]
        live = live_b[:rows] & live_b[rows:]
    mag = np.abs(bs)        # (for the l1 norms, and ``_coarse`` if the rows are split)
    l1b, l2b = _row_norms(bs, mag)
    eb_bits = _exact_bits(n_fft, l1b, l2b)
    bits = eb_bits if same else np.minimum(eb_bits[:rows], eb_bits[rows:])
    s0 = np.ldexp(1.0, -bits.astype(int))[:, None]
    # the two-way split: [g, 0] the hi part, [g, 1] the rest of the rows of operand g
    # (x, then y), the layout the transform's input is copied from
    groups = 1 if same else 2
    split2 = np.empty((groups, 2, rows, m))
    hb = split2[:, 0]
    rb = _round_into(bs.reshape(groups, rows, m), s0[None], hb, split2[:, 1])
    del bs
    l1h, l2h = _row_norms(hb)
    l1r, l2r = _row_norms(rb)
    if same:
        n_hx = n_hy = (l1h, l2h)
        n_rx = n_ry = (l1r, l2r)
    else:
        n_hx, n_hy = (l1h[:rows], l2h[:rows]), (l1h[rows:], l2h[rows:])
        n_rx, n_ry = (l1r[:rows], l2r[:rows]), (l1r[rows:], l2r[rows:])
    pb_hxry = _pair_bound(n_fft, n_hx, n_ry)
    pb_rxhy = _pair_bound(n_fft, n_rx, n_hy)
    pb_rr = _pair_bound(n_fft, n_rx, n_ry)
    two_way = (pb_hxry + pb_rxhy + pb_rr) * 1.5 * math.sqrt(n_fft)
    if (ex + ey).max(initial=0) > 1023:
        # the product's scale 2^(ex + ey) itself is beyond range (it would turn the
        # product's zeros into NaN)
        raise OverflowError("convolve_rows' product beyond floating-point range "
                            f"(scale 2^{int((ex + ey).max())})")
    scale = np.ldexp(1.0, (ex + ey).astype(int))
    three_way = bool((two_way * scale > tolerance).any())
    if three_way:
        # more parts on grids s0 2^{-j b}: the products p_i * q_j with i + j = l all
        # lie on the grid s0^2 2^{-l b}; levels whose certified FFT error stays below a
        # quarter of their grid are recovered exactly, only the rest carries round-off
        pb_hr = pb_hxry + pb_rxhy
        s0v = s0[:, 0]
        b1 = np.floor(np.log2(s0v ** 2 / np.maximum(8.0 * pb_hr, 1e-300)))
        b2 = np.floor(np.log2(s0v ** 2 / np.maximum(8.0 * pb_rr, 1e-300)) / 2.0)
        b = np.clip(np.minimum(b1, b2) - 3, 1, 40)      # room for the sums of a level
        step = np.ldexp(1.0, -b.astype(int))
        k = 3
        while k < _MAX_PARTS and (two_way * scale * step ** (k - 2) > tolerance).any():
            k += 1
        flush = not _coarse(mag, magnitude=True)
        del mag
        parts, k, grids, bounds, rest = _split_plan(hb, rb, s0v, b, k, n_fft, same, scale,
                                                    tolerance, flush, l1h)
        # (dead arrays are dropped at once: a smaller peak of memory, fewer page faults)
        del split2, hb, rb
        spectra = _rfft(parts.reshape((-1,) + parts.shape[2:]), n_fft)   # (zero-padded)
        del parts
        products = _level_products(spectra, k, same)
        del spectra
    else:
        # order of the transform's input: hx, rx (, hy, ry)
        del mag
        spectra = _rfft(split2.reshape((-1,) + split2.shape[2:]), n_fft)
        del split2, hb, rb
        products = np.empty((2,) + spectra.shape[1:], dtype=spectra.dtype)
        if same:
            fh, fr = spectra
            np.multiply(fh, fh, out=products[0])
            np.multiply(fh, 2.0, out=products[1])
            products[1] += fr
            products[1] *= fr
            del fh, fr
        else:
            fhx, frx, fhy, fry = spectra
            np.multiply(fhx, fhy, out=products[0])
            np.add(fhy, fry, out=products[1])
            products[1] *= frx
            products[1] += np.multiply(fhx, fry, out=fhx)    # (fhx is read last here)
            del fhx, frx, fhy, fry
        del spectra
        grids = [(s0 * s0)[:, 0]]
        bounds = [_pair_bound(n_fft, n_hx, n_hy)]
        rest = two_way / math.sqrt(n_fft)
    results = _irfft(products, n_fft)
    del products
    width = 2 * m - 1
    z = results[-1, :, :width].copy()
    # the rest carries the FFT's absolute round-off; adding the exact parts to it
    # rounds relative to each entry (CONVOLUTION_RELATIVE_ERROR) plus twice the rest's
    # magnitude per addition, which is absolute (its l1 norm: |rest| is written over
    # the rest, which nothing else reads)
    rest_abs = results[-1, :, :width]
    rest_l1 = np.abs(rest_abs, out=rest_abs).sum(axis=1)
    del rest_abs
    l2_err = np.asarray(rest, dtype=float).copy()
    fine_l1 = np.zeros(rows)
    exact = [bound < 0.25 * grid for grid, bound in zip(grids, bounds)]
    for j in range(len(grids) - 1, -1, -1):    # (the levels' order, finest first)
        if not exact[j].all():
            l2_err += np.where(exact[j], 0.0, bounds[j])
    # finest level first: every partial sum is then x*y minus the coarser levels; in
    # blocks of columns (every entry is summed alone) unless a level beyond the last
    # four needs the partial sums' norms
    blocks = ([slice(0, width)] if len(grids) > _RELATIVE_LEVELS
              else _column_blocks(width, _PART_BLOCK))
    for cols in blocks:
        for j in range(len(grids) - 1, -1, -1):
            _add_level(z[:, cols], results[j, :, cols], grids[j][:, None], exact[j])
            if j >= _RELATIVE_LEVELS:
                # a level beyond the last four: its addition's rounding, at most u times
                # the partial sum, is charged as absolute (the fine parts hold little
                # mass), so the relative allowance stays that of the last four additions
                fine_l1 += np.abs(z).sum(axis=1)
    del results
    z[z < _TINY] = 0.0          # negatives and would-be subnormals (slow arithmetic)
    fft_l1 = math.sqrt(n_fft) * l2_err
    fine = fine_l1 * (UNIT_ROUNDOFF * (1.0 + 1e-6))
    l1_err = ((fft_l1 + fine + 4.0 * len(grids) * UNIT_ROUNDOFF * (rest_l1 + fft_l1 + fine))
              * (1 + 1e-9) + _TINY * z.shape[1])
    shift = (ex + ey).astype(int)
    if shift.min(initial=0) >= LEAST_SUBNORMAL_EXPONENT:
        z *= scale[:, None]
    else:
        # 2^shift is below the least subnormal (its float is 0): ldexp scales each entry
        # and rounds it once instead
        z = np.ldexp(z, shift[:, None])
    if not live.all():
        z[~live] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        # scaling back is exact unless an entry lands among the subnormals, where it
        # rounds by at most 2^-1075, and so does the bound's own product; where the
        # scale's float is 0 the bound's share l1_err 2^shift is below 2^-1075 too
        # (l1_err is far below the row length: a few u m^2 of rows scaled into [0.5, 1))
        errors = np.where(live, l1_err * scale + LEAST_SUBNORMAL * z.shape[1], 0.0)
    check_finite("convolve_rows' product", z)
    if np.isnan(errors).any():
        raise RuntimeError("internal error: convolve_rows produced a NaN error bound")
    return RowProduct(z, errors, np.full(rows, CONVOLUTION_RELATIVE_ERROR))


def _add_level(z, part, g, exact) -> None:
    """z += level ``part`` (overwritten: it is read once), its rows marked ``exact``
    rounded to their grids ``g`` (the FFT's error is below a quarter of the grid)."""
    if exact.all():
        np.divide(part, g, out=part)
        np.rint(part, out=part)
        part *= g
        z += part
    elif not exact.any():
        z += part
    else:
        z += np.where(exact[:, None], np.rint(part / g) * g, part)      # exact rows


def check_finite(what: str, a) -> None:
    """Raise unless every entry of ``a`` is finite: NaN is an internal error (no valid
    input produces it), inf an engine limit (``OverflowError``, a number beyond
    floating-point range, answered by the accountant with a valid looser bound)."""
    a = np.asarray(a, dtype=float)
    if a.size and not np.isfinite(a).all():
        if np.isnan(a).any():
            raise RuntimeError(f"internal error: NaN in {what}")
        raise OverflowError(f"{what} beyond floating-point range")


#: frequency bins per block of ``_level_products`` (a block's operands stay in cache)
_PRODUCT_BLOCK = 4096


def _column_blocks(n: int, size: int):
    """Slices covering 0..n-1: one, where n is at most four blocks (a short row gains
    nothing from blocks), else blocks of ``size``."""
    if n <= 4 * size:
        return [slice(0, n)]
    return [slice(c, min(c + size, n)) for c in range(0, n, size)]


def _level_products(spectra, k: int, same: bool):
    """Per exact level l = 0..k-2 the sum of the spectra's products p_i q_j with
    i + j = l (i, j < k - 1), then the sum of all other products, each sum taken in the
    order i = 0..k-1, j = 0..k-1 (``same``: j >= i, the mixed products doubled).  Every
    bin is computed alone, so blocks of bins (``_PRODUCT_BLOCK``) give the same numbers."""
    blocks = _column_blocks(spectra.shape[-1], _PRODUCT_BLOCK)
    if len(blocks) == 1:
        return _block_products(spectra, k, same)
    # every block written in place, through one scratch product
    products = np.empty((k,) + spectra.shape[1:], dtype=spectra.dtype)
    pair = np.empty(spectra.shape[1:-1] + (_PRODUCT_BLOCK,), dtype=spectra.dtype)
    for block in blocks:
        _block_products(spectra[..., block], k, same, products[..., block],
                        pair[..., :block.stop - block.start])
    return products


def _block_products(spectra, k: int, same: bool, products=None, pair=None):
    """``_level_products`` of one block of bins (written into ``products``, if given,
    with ``pair`` a scratch array of a product's shape)."""
    fx = spectra[:k]
    fy = fx if same else spectra[k:]
    levels = k - 1
    if products is None:
        products = np.empty((levels + 1,) + spectra.shape[1:], dtype=spectra.dtype)
    started = [False] * (levels + 1)
    if pair is None:
        pair = np.empty(spectra.shape[1:], dtype=spectra.dtype)
    for i in range(k):
        for j in range(k):
            if same and j < i:
                continue
            l = i + j
            slot = l if (l < levels and i < k - 1 and j < k - 1) else levels
            # a sum's first term is written, not added to zeros: 0 + p = p but for the
            # sign of a zero, which no output reads (the same bits as adding)
            target = pair if started[slot] else products[slot]
            np.multiply(fx[i], fy[j], out=target)
            if same and i != j:
                target *= 2.0
            if started[slot]:
                products[slot] += pair
            started[slot] = True
    return products


#: most parts a row is split into (hi, mids, rest): each further part recovers about
#: b more bits of every product exactly, at one more forward and inverse transform.
#: Parts are added only while the rest's certified error exceeds the tolerance; 8 (the
#: limit before) left the finer levels' 2^18-bucket leaves' products 4000 times above
#: it at small delta (docs/method.md §3)
_MAX_PARTS = 12


#: columns per block where ``convolve_rows`` splits long rows into parts (``_parts``)
#: and adds the levels back (a block's arrays stay in cache)
_PART_BLOCK = 4096


def _parts(hi, rest, s0, step, k, flush: bool = True, fewer=None):
    """hi + k - 2 parts on the grids s0 step^j (j = 1..k-2) + the remainder (exact).

    ``hi``, ``rest``: (groups, rows, m), the two-way split of the rows of each operand;
    ``s0``, ``step``: per row; ``flush``: see ``_round_into``; ``fewer``: the parts of
    the same split (s0, step) into fewer than k parts, whose leading parts are these
    (only its remainder is split further).  Returns the parts as (groups, k, rows,
    m)."""
    groups, rows, m = hi.shape
    parts = np.empty((groups, k, rows, m))
    if k == 2:
        parts[:, 0] = hi
        parts[:, 1] = rest
        return parts
    first = 1
    if fewer is None:
        parts[:, 0] = hi
    else:
        first = fewer.shape[1] - 1
        parts[:, :first] = fewer[:, :first]
        rest = fewer[:, first]
    grids = []
    grid = s0
    for j in range(1, k - 1):
        grid = grid * step
        grids.append(grid[None, :, None])
    # in blocks of columns, whose parts stay in cache (every entry is split alone); each
    # rest is written over the one before, in the remainder's place
    for cols in _column_blocks(m, _PART_BLOCK):
        left = rest[..., cols]
        last = parts[:, k - 1, :, cols]
        for j in range(first, k - 1):
            left = _round_into(left, grids[j - 1], parts[:, j, :, cols], last, flush)
    return parts


@functools.lru_cache(maxsize=64)
def _level_terms(k: int, same: bool):
    """Index arrays (i, j) and weights of the products of each exact level 0..k-2 and of
    the rest, in the order i = 0..k-1, j = 0..k-1 (``same``: j >= i, mixed ones x2)."""
    levels = k - 1
    terms = [[] for _ in range(levels + 1)]
    for i in range(k):
        for j in range(k):
            if same and j < i:
                continue
            weight = 1.0 if (not same or i == j) else 2.0
            l = i + j
            terms[l if (l < levels and i < k - 1 and j < k - 1) else levels].append(
                (i, j, weight))
    out = []
    for group in terms:
        ii = np.array([t[0] for t in group], dtype=np.intp)
        jj = np.array([t[1] for t in group], dtype=np.intp)
        w = np.array([t[2] for t in group])[:, None]
        for a in (ii, jj, w):
            a.setflags(write=False)            # shared through the cache
        out.append((ii, jj, w))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _level_index(k: int, same: bool):
    """``_level_terms`` of all levels in one: the flat index i * k + j and weights of
    every term, level after level, and the end of each level's run of terms."""
    groups = _level_terms(k, same)
    flat = np.concatenate([ii * k + jj for ii, jj, _ in groups])
    w = np.concatenate([w for _, _, w in groups])
    ends = tuple(int(e) for e in np.cumsum([len(ii) for ii, _, _ in groups]))
    for a in (flat, w):
        a.setflags(write=False)                # shared through the cache
    return flat, w, ends


def _level_bounds(n_fft, l1x, l2x, l1y, l2y, k, same):
    """Certified l2 bounds of the FFT error of each exact level 0..k-2 (times 1.5 for
    the sum of its products) and of the rest (times 2), from the parts' norms (arrays
    (k, rows): part i of x has norms l1x[i], l2x[i]).

    Each pair's bound is ``convolution_l2_error`` of its norms, and each level's sum is
    taken in the order i = 0..k-1, j = 0..k-1 (a running sum, ``np.cumsum``)."""
    c = _SAFETY * (3.0 * fft_relative_error(n_fft) + 5.0 * UNIT_ROUNDOFF)
    pair = c * (l1x[:, None, :] * l2y[None, :, :] + l1y[None, :, :] * l2x[:, None, :]) \
        * (1 + 1e-6)
    # every level's terms gathered at once (the products pair[i, j] * w, level after
    # level), each level's run then summed alone
    flat, w, ends = _level_index(k, same)
    terms = pair.reshape(k * k, -1)[flat] * w
    sums = np.empty((len(ends), terms.shape[1]))
    start = 0
    for level, end in enumerate(ends):
        # (a single term is its own running sum)
        sums[level] = (terms[start] if end - start == 1
                       else np.cumsum(terms[start:end], axis=0)[-1])
        start = end
    return list(sums[:-1] * 1.5), sums[-1] * 2.0


#: most (b, k) choices ``_split_plan`` tries per convolution (each costs k roundings of
#: the rows and their norms, no transform)
_PLAN_TRIES = 16


def _split_plan(hb, rb, s0, b, k, n_fft, same, scale, tolerance, flush: bool = True,
                l1_hi=None):
    """Parts and certified level bounds for a split into k parts of b bits (per row).

    ``hb``, ``rb``: (groups, rows, m), the two-way split of the rows of x and (``same``
    False) of y; the parts are returned as (groups, k, rows, m) (``flush``: see
    ``_round_into``; ``l1_hi``: the l1 norms of the rows of hb, where known).
    The first guess for b comes from the two-way split's norms, but a deep level
    p_0 * p_{k-2} can hold a row's whole tail (every entry below the grid s0 step^{j-1}
    lands in part j or later), so its bound may exceed a quarter of its grid and the
    level would be charged in full.  Each level's bound is checked here, before any
    transform: rows with a level that would not be recovered exactly take one bit less,
    and when every level is exact but the rest's bound is above ``tolerance``, one more
    part is taken (up to ``_MAX_PARTS``).  Of the plans tried, the first that meets both
    is used, else the one with the smallest certified error.
    """
    rows = len(s0)
    b = np.array(b, dtype=float)
    best = None
    if l1_hi is None:
        l1_hi = np.abs(hb).sum(axis=-1).reshape(-1)
    fewer = None        # the last try's parts and l1 norms, where only k grew since
    mag = np.empty(hb.shape)        # |part| of one part at a time
    for _ in range(_PLAN_TRIES):
        step = np.ldexp(1.0, -b.astype(int))
        # norms per (part, row), the rows of x then those of y; the l1 norms of parts
        # already measured (hi, and those of a smaller k) are taken over, the l2 norms
        # are taken on the whole array (``_row_norms``)
        l1 = np.empty((k, len(l1_hi)))
        if fewer is None:
            parts = _parts(hb, rb, s0, step, k, flush)
            l1[0] = l1_hi
            known = 1
        else:
            parts = _parts(hb, rb, s0, step, k, flush, fewer[0])
            known = fewer[0].shape[1] - 1
            l1[:known] = fewer[1][:known]
        for j in range(known, k):
            l1[j] = np.abs(parts[:, j], out=mag).sum(axis=-1).reshape(-1)
        l2 = _row_l2(parts.transpose(1, 0, 2, 3)).reshape(k, -1)
        if same:
            bounds, rest = _level_bounds(n_fft, l1, l2, l1, l2, k, True)
        else:
            bounds, rest = _level_bounds(n_fft, l1[:, :rows], l2[:, :rows], l1[:, rows:],
                                         l2[:, rows:], k, False)
        grids = [s0 * s0 * step ** l for l in range(k - 1)]
        inexact = np.zeros(len(b), dtype=bool)
        total = np.asarray(rest, dtype=float).copy()
        for bd, g in zip(bounds, grids):
            miss = ~(bd < 0.25 * g)
            if miss.any():
                inexact |= miss
                total += np.where(miss, bd, 0.0)
        err = math.sqrt(n_fft) * total * scale
        score = float(np.max(err))
        if best is None or score < best[0]:
            best = (score, (parts, k, grids, bounds, rest))
        fewer = None
        if (inexact & (b > 1)).any():
            b = np.where(inexact, np.maximum(b - 1, 1), b)
        elif (err > tolerance).any() and k < _MAX_PARTS:
            fewer = (parts, l1)
            k += 1
        else:
            break
    return best[1]


#: transforms of fewer values than this run on one thread (starting threads costs
#: more than it saves; the transform of a row does not depend on the thread count)
_THREADED_SIZE = 2 ** 18


def _workers(a, n: int) -> int:
    """Threads for transforms of length n of the rows of ``a``."""
    return _WORKERS if (a.size // a.shape[-1]) * n >= _THREADED_SIZE else 1


def _threaded(transform, a, n):
    """``transform`` of the rows of ``a`` (length n), on _WORKERS threads where the rows
    are large, else one.  Where the threads cannot be started (pocketfft raises a
    RuntimeError, as under an address-space limit) the rows are transformed on one:
    each row's transform is computed alone either way, so the bits are the same."""
    workers = _workers(a, n)
    if workers == 1:
        return transform(a, n=n, axis=-1, workers=1)
    try:
        return transform(a, n=n, axis=-1, workers=workers)
    except RuntimeError:
        return transform(a, n=n, axis=-1, workers=1)


def _rfft(a, n):
    return _threaded(_fft.rfft, a, n)


def _irfft(a, n):
    return _threaded(_fft.irfft, a, n)
