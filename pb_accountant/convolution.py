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
eta = mu + gamma_4 (sqrt 2 + mu).  Propagated through the transforms and the product,

    ||fl(x * y) - x * y||_2 <= (3 rho + 5 u) (||x||_1 ||y||_2 + ||y||_1 ||x||_2)

to first order, and ||e||_1 <= sqrt(N) ||e||_2.  We take twiddle accuracy mu = 4u and
a safety factor of 4; tests compare the bounds with exact rational convolutions.
"""
from __future__ import annotations

import math
import os

import numpy as np
from scipy import fft as _fft

#: threads for the batched transforms (pocketfft, the same algorithm numpy uses)
_WORKERS = max(1, min(4, os.cpu_count() or 1))

UNIT_ROUNDOFF = np.finfo(float).eps / 2.0
_SAFETY = 4.0
#: entries below this are flushed to zero (their sum is added to the error bound)
_TINY = 1e-280


def fft_length(length: int) -> int:
    """Power-of-two transform length holding a full linear convolution of two vectors."""
    return 1 << int(math.ceil(math.log2(max(2 * length - 1, 2))))


def fft_relative_error(n_fft: int) -> float:
    """rho(N) of Higham Thm 24.2 for a length-N radix-2 FFT."""
    u = UNIT_ROUNDOFF
    mu = 4.0 * u
    gamma4 = 4.0 * u / (1.0 - 4.0 * u)
    eta = mu + gamma4 * (math.sqrt(2.0) + mu)
    le = math.log2(n_fft) * eta
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
    bound = np.array([convolution_l2_error(n_fft, a, b, a, b) for a, b in zip(l1, l2)])
    b = np.floor(-np.log2(4.0 * np.maximum(bound, 1e-300)) / 2.0) - 1
    return np.clip(b, 1, 24)


def _scaled(rows):
    """Rows times 2^-e (exact) so that each row's maximum lies in [0.5, 1)."""
    tops = rows.max(axis=1)
    live = tops > 0
    e = np.zeros(len(rows), dtype=int)
    e[live] = np.frexp(tops[live])[1]
    return np.ldexp(rows, -e[:, None]), e, live


def _row_norms(v):
    return np.abs(v).sum(axis=1), np.sqrt(np.einsum("ij,ij->i", v, v))


def convolve_rows(x: np.ndarray, y: np.ndarray | None = None):
    """Full linear convolution of matching rows of ``x`` and ``y`` (``y=None``: x with x).

    Returns (z, l1_error): z has shape (rows, 2m-1), l1_error[k] bounds the l1 norm of
    the round-off of row k.  All rows go through one batched, multi-threaded transform.
    """
    rows, m = x.shape
    n_fft = fft_length(m)
    same = y is None
    xs, ex, live_x = _scaled(x)
    if same:
        ys, ey, live = xs, ex, live_x
    else:
        ys, ey, live_y = _scaled(y)
        live = live_x & live_y
    l1x, l2x = _row_norms(xs)
    l1y, l2y = (l1x, l2x) if same else _row_norms(ys)
    bits = np.minimum(_exact_bits(n_fft, l1x, l2x), _exact_bits(n_fft, l1y, l2y))
    step = np.ldexp(1.0, -bits.astype(int))[:, None]
    hx = np.round(xs / step) * step
    lx = xs - hx
    lx[np.abs(lx) < _TINY] = 0.0
    if same:
        hy, ly = hx, lx
        spectra = _rfft(np.stack([hx, lx]), n_fft)
        fh, fl = spectra
        products = np.stack([fh * fh, fl * (2.0 * fh + fl)])
    else:
        hy = np.round(ys / step) * step
        ly = ys - hy
        ly[np.abs(ly) < _TINY] = 0.0
        fhx, flx, fhy, fly = _rfft(np.stack([hx, lx, hy, ly]), n_fft)
        products = np.stack([fhx * fhy, fhx * fly + flx * (fhy + fly)])
    zhh, zc = _irfft(products, n_fft)[:, :, : 2 * m - 1]
    n_hx, n_lx = _row_norms(hx), _row_norms(lx)
    n_hy, n_ly = (n_hx, n_lx) if same else (_row_norms(hy), _row_norms(ly))
    grid = (step * step)[:, 0]
    out = np.zeros((rows, 2 * m - 1))
    errors = np.zeros(rows)
    for k in range(rows):
        if not live[k]:
            continue
        bound_hh = convolution_l2_error(n_fft, n_hx[0][k], n_hx[1][k], n_hy[0][k], n_hy[1][k])
        zk = zhh[k]
        exact = bound_hh < 0.25 * grid[k]
        if exact:
            zk = np.round(zk / grid[k]) * grid[k]
        l2_err = (convolution_l2_error(n_fft, n_hx[0][k], n_hx[1][k], n_ly[0][k], n_ly[1][k])
                  + convolution_l2_error(n_fft, n_lx[0][k], n_lx[1][k], n_hy[0][k], n_hy[1][k])
                  + convolution_l2_error(n_fft, n_lx[0][k], n_lx[1][k], n_ly[0][k], n_ly[1][k])
                  ) * 1.5
        if not exact:
            l2_err += bound_hh
        z = zk + zc[k]
        z[z < _TINY] = 0.0          # negatives and would-be subnormals (slow arithmetic)
        l1_err = (math.sqrt(n_fft) * l2_err + 4.0 * UNIT_ROUNDOFF * float(z.sum())
                  + _TINY * z.size)
        scale = 2.0 ** (int(ex[k]) + int(ey[k]))
        out[k] = z * scale
        errors[k] = l1_err * scale
    return out, errors


def _rfft(a, n):
    return _fft.rfft(a, n=n, axis=-1, workers=_WORKERS)


def _irfft(a, n):
    return _fft.irfft(a, n=n, axis=-1, workers=_WORKERS)
