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

import numpy as np

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


def _norms(v):
    return float(np.abs(v).sum()), float(math.sqrt(float(np.dot(v, v))))


def _split(row: np.ndarray, bits: int):
    """row = hi + lo exactly, hi on the grid s = 2^(e - bits), e = exponent of max|row|."""
    top = float(np.max(row)) if row.size else 0.0
    if top <= 0.0:
        return row * 0.0, row.copy(), 1.0
    e = math.frexp(top)[1]
    s = math.ldexp(1.0, e - bits)
    hi = np.round(row / s) * s
    lo = row - hi
    lo[np.abs(lo) < _TINY] = 0.0     # exact enough: the flushed part is < 1e-280 each
    return hi, lo, s


def _exact_bits(n_fft: int, l1: float, l2: float, top: float) -> int:
    """Largest b with the hi*hi error bound below a quarter of its grid."""
    bound = convolution_l2_error(n_fft, l1, l2, l1, l2)
    e = math.frexp(top)[1]
    # need 2^(2(e-b)) >= 4 bound  <=>  b <= e - log2(4 bound)/2
    b = int(math.floor(e - math.log2(4.0 * bound) / 2.0)) - 1
    return max(1, min(b, 24))


def convolve_rows(x: np.ndarray, y: np.ndarray | None = None):
    """Full linear convolution of matching rows of ``x`` and ``y`` (``y=None``: x with x).

    Returns (z, l1_error): z has shape (rows, 2m-1), l1_error[k] bounds the l1 norm of
    the round-off of row k.  Entries are clipped at 0, which only reduces the error.
    """
    rows, m = x.shape
    n_fft = fft_length(m)
    same = y is None
    out = np.empty((rows, 2 * m - 1))
    errors = np.empty(rows)
    for k in range(rows):
        xr = x[k]
        yr = xr if same else y[k]
        tx, ty = float(np.max(xr)), float(np.max(yr))
        if tx <= 0.0 or ty <= 0.0:
            out[k] = 0.0
            errors[k] = 0.0
            continue
        # scale by powers of two (exact) so both maxima lie in [0.5, 1)
        ex, ey = math.frexp(tx)[1], math.frexp(ty)[1]
        xs = np.ldexp(xr, -ex)
        ys = xs if same else np.ldexp(yr, -ey)
        l1x, l2x = _norms(xs)
        l1y, l2y = (l1x, l2x) if same else _norms(ys)
        bits = min(_exact_bits(n_fft, l1x, l2x, 1.0), _exact_bits(n_fft, l1y, l2y, 1.0))
        hx, lx, sx = _split(xs, bits)
        hy, ly, sy = (hx, lx, sx) if same else _split(ys, bits)
        n_hx = _norms(hx)
        n_hy = n_hx if same else _norms(hy)
        bound_hh = convolution_l2_error(n_fft, *n_hx, *n_hy)
        g = sx * sy
        fhx = np.fft.rfft(hx, n=n_fft)
        flx = np.fft.rfft(lx, n=n_fft)
        if same:
            fhy, fly = fhx, flx
            cross = flx * (2.0 * fhx + flx)
        else:
            fhy = np.fft.rfft(hy, n=n_fft)
            fly = np.fft.rfft(ly, n=n_fft)
            cross = fhx * fly + flx * (fhy + fly)
        zhh = np.fft.irfft(fhx * fhy, n=n_fft)[: 2 * m - 1]
        exact = bound_hh < 0.25 * g
        if exact:
            zhh = np.round(zhh / g) * g
        zc = np.fft.irfft(cross, n=n_fft)[: 2 * m - 1]
        n_lx = _norms(lx)
        n_ly = n_lx if same else _norms(ly)
        l2_err = (convolution_l2_error(n_fft, *n_hx, *n_ly)
                  + convolution_l2_error(n_fft, *n_lx, *n_hy)
                  + convolution_l2_error(n_fft, *n_lx, *n_ly)) * 1.5
        if not exact:
            l2_err += bound_hh
        z = zhh + zc
        z[z < _TINY] = 0.0          # negatives and would-be subnormals (slow arithmetic)
        l1_err = (math.sqrt(n_fft) * l2_err + 4.0 * UNIT_ROUNDOFF * float(z.sum())
                  + _TINY * z.size)
        scale = math.ldexp(1.0, ex + ey)
        out[k] = z * scale
        errors[k] = l1_err * scale
    return out, errors
