"""Worst-case pairs of distributions (A, B) and their exact privacy-loss bucket masses.

A pair describes one mechanism on neighbouring inputs.  The only thing the engine needs
from it is, for a grid of loss values t_0 < ... < t_{K-1}, the A- and B-mass of the
events whose privacy loss L = log(P_A / P_B) falls in each interval

    (-inf, t_0], (t_0, t_1], ..., (t_{K-2}, t_{K-1}], (t_{K-1}, +inf]

(paper Definition 4, the sets S_i; events with P_B = 0 have L = +inf and are the
distinguishing events, events with P_A = 0 have L = -inf).  Continuous pairs compute these
masses in closed form as interval integrals (paper §5.1, §5.2, §5.4), never by
histogramming; discrete pairs (paper §4.6, §5.5) sum their atoms.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from scipy import special

from ._fp import UNIT_ROUNDOFF as _U, two_prod, two_square, two_sum
from ._validation import (MAX_NOISE, MIN_NOISE, check_noise_multiplier,  # noqa: F401
                          check_real, check_sample_rate)

# MIN_NOISE, MAX_NOISE (imported above, re-exported): the noise multipliers the closed
# forms handle (sigma^2 and 1/sigma^2 stay finite); the noise rule is in _validation.py

#: Gauss-Legendre nodes and weights on [0, 1] (the rules are symmetric), correctly
#: rounded from 60-digit values (mpmath; numpy's ``leggauss`` weights are off by up to
#: 60 ulp at 12 nodes, more than the error bounds below allow for):
#: ``tests/test_mechanisms.py::test_gauss_legendre_rules_are_correctly_rounded``
_GL_HALF_RULES = {
    4: ((0.33998104358485626, 0.8611363115940526),
        (0.6521451548625461, 0.34785484513745385)),
    6: ((0.2386191860831969, 0.6612093864662645, 0.932469514203152),
        (0.46791393457269104, 0.3607615730481386, 0.17132449237917036)),
    8: ((0.1834346424956498, 0.525532409916329, 0.7966664774136267, 0.9602898564975363),
        (0.362683783378362, 0.31370664587788727, 0.22238103445337448, 0.10122853629037626)),
    12: ((0.1252334085114689, 0.3678314989981802, 0.5873179542866175, 0.7699026741943047,
          0.9041172563704749, 0.9815606342467192),
         (0.24914704581340277, 0.2334925365383548, 0.20316742672306592,
          0.16007832854334622, 0.10693932599531843, 0.04717533638651183)),
}


def gauss_legendre(n: int) -> Tuple[np.ndarray, np.ndarray]:
    """The n-point Gauss-Legendre rule on [-1, 1] (n in 4, 6, 8, 12), nodes ascending."""
    nodes, weights = (np.array(v) for v in _GL_HALF_RULES[n])
    return (np.concatenate((-nodes[::-1], nodes)), np.concatenate((weights[::-1], weights)))


_GL_NODES, _GL_WEIGHTS = gauss_legendre(12)
#: Gauss-Legendre rules for x-interval masses: (nodes n, largest s = h (|m| + h) in z
#: units it is used for, nodes, weights).  With g(v) = exp(-a v - b v^2), a = m h,
#: b = h^2 / 2, the n-point rule's error c_n g^(2n)(xi) (Davis & Rabinowitz 2.7.8,
#: c_n = 2^(2n+1) (n!)^4 / ((2n+1) ((2n)!)^3)) is bounded by Cauchy's estimate on a
#: circle of radius r, c_n (2n)! r^-2n exp(|a| (1+r) + b (1+r)^2), against the integral
#: >= 2 exp(-|a| - b); at |a| + 2b = s below these limits (90% of where the bound, with
#: the best r, reaches u / 16) the truncation is at most u / 16 of the mass
#: (docs/floating-point.md)
_GL_RULES = tuple((n, limit) + gauss_legendre(n)
                  for n, limit in ((4, 4.7e-4), (6, 1.7e-2), (8, 0.1), (12, 0.54)))
#: (each limit is at most 90% of where the bound reaches u / 16:
#: ``tests/test_mechanisms.py::test_gauss_legendre_truncation_limits``; in a leaf most
#: intervals take 6 nodes, where 12 would cost twice the exponentials).  The rules'
#: truncation bound, relative to the mass:
_GL_TRUNCATION = _U / 16.0
_GL_LIMITS = np.array([limit for _, limit, _, _ in _GL_RULES])
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


#: Absolute error floor of every computed normal mass.  Relative bounds say nothing
#: below the normal range: each operation whose result is subnormal (or flushed to 0) is
#: off by up to 2^-1075 absolutely, a mass takes fewer than 32 such operations and each
#: is scaled by a factor below 4 afterwards (docs/floating-point.md, "Underflow").
UNDERFLOW_FLOOR = 2.0 ** -1067

#: A wide interval's mass is computed on each side of 0 without a library CDF (only exp
#: is trusted, as for narrow intervals): a sum of narrow pieces near 0, whose ends z_j
#: (from the end nearer 0) satisfy z_j^2 = z_0^2 + 2 j PIECE_STEP, so that each piece has
#: |m| h = PIECE_STEP (m, h a piece's midpoint and width), at most 18 pieces below
#: _CF_FROM, each integrated by ``_gl12_masses``; from _CF_FROM on, a difference of
#: tails Phi(-z) = phi(z) R(z), the Mills ratio R by its continued fraction, whose
#: consecutive convergents bracket it (docs/floating-point.md, "Leaf masses")
_PIECE_STEP = 0.25
_CF_FROM = 3.0
#: ends beyond which a standard normal tail is below 2^-1074 (Phi(-39) < 1e-333)
_NORMAL_TAIL_ZERO_FROM = 39.0


def _classify(lo, hi):
    """Which intervals (lo, hi] are non-empty and which are narrow (h (|z| + h) < 1,
    integrated by 12-point Gauss-Legendre; the others are ``_wide_intervals``)."""
    valid = hi > lo
    finite = valid & np.isfinite(lo) & np.isfinite(hi)
    with np.errstate(invalid="ignore"):
        width = np.where(finite, hi - lo, np.inf)
    reach = np.maximum(np.abs(np.where(np.isfinite(lo), lo, 0.0)),
                       np.abs(np.where(np.isfinite(hi), hi, 0.0)))
    narrow = finite & (width * (reach + width) < 1.0)
    return valid, narrow


#: from here on the Mills ratio is taken from its asymptotic series (``_mills_ratio``)
_ASYMPTOTIC_FROM = 12.0
#: terms of that series: the first one left out, 31!! / z^32, is below u / 16 at z >= 12
_ASYMPTOTIC_TERMS = 16


#: continued-fraction terms by the smallest z they serve (a bracket below u / 8 at
#: that z, measured against mpmath; the bound uses the bracket actually found)
_CF_TERMS = ((8.0, 20), (6.5, 24), (5.0, 31), (4.0, 41), (3.0, 62))
#: fewer z than this in one call are evaluated one by one (and remembered); more, as
#: arrays (the same operations, so the same values)
_CF_ARRAY_FROM = 16


def _cf_bracket(z, terms: int):
    """(R_n, relative error bound) from the convergents n = ``terms`` and n + 1 of the
    continued fraction, for a float or an array z (``_mills_ratio``)."""
    u = _U
    if np.ndim(z) == 0:
        # one float: plain Python arithmetic (the same IEEE operations, without numpy's
        # per-call cost)
        conv = []
        for n in (terms, terms + 1):
            v = z
            d = 0.0
            for k in range(n - 1, 0, -1):
                t = k / v
                v = z + t
                d = u + (t / v) * (u + d) * (1.0 + 1e-10)
            conv.append((1.0 / v, (d + u) * (1.0 + 1e-10)))
        (r0, d0), (r1, d1) = conv
        return r0, (abs(r0 - r1) + 2.0 * d0 * r0 + d1 * r1) * (1.0 + 1e-9) / r0
    zz = np.asarray(z, dtype=float).reshape(-1)
    # both convergents in one pass (rows 0: n = terms, 1: n = terms + 1, the latter's
    # first step k = terms taken alone); every entry sees the operations it would alone
    t = terms / zz
    v1 = zz + t
    d1 = u + (t / v1) * (u + 0.0 * zz) * (1.0 + 1e-10)
    v = np.stack((zz, v1))
    d = np.stack((0.0 * zz, d1))
    zs = np.stack((zz, zz))
    for k in range(terms - 1, 0, -1):
        t = k / v
        v = zs + t
        d = u + (t / v) * (u + d) * (1.0 + 1e-10)
    r = 1.0 / v
    d = (d + u) * (1.0 + 1e-10)
    (r0, r1), (d0, d1) = r, d
    return r0, (np.abs(r0 - r1) + 2.0 * d0 * r0 + d1 * r1) * (1.0 + 1e-9) / r0


def _asymptotic(z):
    """(R, relative error bound) by the asymptotic series (``_mills_ratio``), for a float
    or an array z >= _ASYMPTOTIC_FROM."""
    w = 1.0 / (z * z)
    sk = 1.0 + 0.0 * z
    for k in range(_ASYMPTOTIC_TERMS - 1, -1, -1):
        sk = 1.0 - (2 * k + 1) * w * sk
    return sk / z, 8.0 * _U + _U / 16.0


@functools.lru_cache(maxsize=4096)
def _mills_one(z: float):
    """``_mills_ratio`` of one float (the same operations as the arrays', so the same
    values; remembered: a leaf's grids repeat their end points)."""
    if z >= _ASYMPTOTIC_FROM:
        return _asymptotic(z)
    terms = next(n for zmin, n in _CF_TERMS if z >= zmin)
    return _cf_bracket(z, terms)


def _mills_ratio(z):
    """(R, relative error bound) for the Mills ratio R(z) = Phi(-z) / phi(z), z >= _CF_FROM.

    z >= _ASYMPTOTIC_FROM: R = (1/z) (1 - 1/z^2 + 3/z^4 - 15/z^6 + ...), whose remainder
    is below the first term left out (Abramowitz & Stegun 7.1.24), u / 16 here;
    evaluated as s_k = 1 - (2k + 1) w s_{k+1}, w = 1/z^2 <= 1/144, where every s_k lies
    in [0.78, 1] and (2k + 1) w <= 0.22 damps the roundings: 8u in all.
    Below: the continued fraction 1/(z + 1/(z + 2/(z + 3/(z + ...)))), whose elements
    are positive, so consecutive convergents bracket R: |R - R_n| <= |R_n - R_{n+1}|
    (n from _CF_TERMS).  A convergent is evaluated backwards, v_k = z + k / v_{k+1};
    its relative error d_k <= u + (k / v_{k+1}) / v_k (u + d_{k+1}) (the factor is below
    1; computed, with 1e-10 of room for its own rounding), and 1 / v_1 adds u."""
    z = np.asarray(z, dtype=float)
    # z = _CF_FROM, where every interval reaching past it from below is cut, and short
    # calls: one by one (remembered)
    one = z == _CF_FROM
    if len(z) - int(one.sum()) < _CF_ARRAY_FROM:
        out = np.array([_mills_one(x) for x in z.tolist()]).reshape(len(z), 2)
        return out[:, 0], out[:, 1]
    r = np.empty(len(z))
    rel = np.empty(len(z))
    if one.any():
        r[one], rel[one] = _mills_one(_CF_FROM)
    big = z >= _ASYMPTOTIC_FROM
    if big.any():
        r[big], rel[big] = _asymptotic(z[big])
    upper = _ASYMPTOTIC_FROM
    for zmin, terms in _CF_TERMS:
        cls = (z >= zmin) & (z < upper) & ~one
        upper = zmin
        if cls.any():
            r[cls], rel[cls] = _cf_bracket(z[cls], terms)
    return r, rel


def _upper_tails(z):
    """(Phi(-z), error bound) for z >= _CF_FROM (+inf allowed: 0, 0), each distinct z
    once: phi(z), its exponent z^2 formed exactly as P + Pe (``two_square``), exp to
    one ulp, (1 - Pe/2) for exp(-Pe/2), three products and the constant: 7u; times the
    Mills ratio (``_mills_ratio``); plus the UNDERFLOW_FLOOR where phi(z) leaves the
    normal range."""
    z = np.asarray(z, dtype=float)
    val = np.zeros(len(z))
    err = np.zeros(len(z))
    live = np.isfinite(z) & (z < _NORMAL_TAIL_ZERO_FROM)
    err[~live & np.isfinite(z)] = UNDERFLOW_FLOOR
    if not live.any():
        return val, err
    zs = z[live]
    where = slice(None)
    if len(zs) >= _CF_ARRAY_FROM:        # each distinct end point once
        zs, where = np.unique(zs, return_inverse=True)
    P, Pe = two_square(zs)
    with np.errstate(under="ignore"):
        phi = np.exp(-0.5 * P) * (1.0 - 0.5 * Pe) * _INV_SQRT_2PI
    r, rel = _mills_ratio(zs)
    v = phi * r
    bound = (v * (7.0 * _U + rel + 7.0 * _U * rel + _U)) * (1.0 + 1e-9) + UNDERFLOW_FLOOR
    val[live] = v[where]
    err[live] = bound[where]
    return val, err


def _one_sided(a, b):
    """(P(a < Z <= b), error bound) for 0 <= a < b <= inf, a below
    _NORMAL_TAIL_ZERO_FROM: narrow pieces (``_pieces``) below c = max(a, _CF_FROM),
    Phi(-c) - Phi(-b) (``_upper_tails``) above it.  A wide interval starting at or above
    _CF_FROM has b^2 - a^2 >= 1, so Phi(-b) <= e^-1/2 Phi(-a) and the difference cancels
    by a factor below 2.6; one starting below holds at least the pieces' mass."""
    c = np.maximum(a, _CF_FROM)
    mass = np.zeros(len(a))
    err = np.zeros(len(a))
    near = a < _CF_FROM
    if near.any():
        mass[near], err[near] = _pieces(a[near], np.minimum(b[near], _CF_FROM))
    far = b > c
    if far.any():
        k = int(far.sum())
        tails, errs = _upper_tails(np.concatenate((c[far], b[far])))
        hi_c, hi_b, e_c, e_b = tails[:k], tails[k:], errs[:k], errs[k:]
        d = np.maximum(hi_c - hi_b, 0.0)
        both = mass[far] + d
        err[far] = (err[far] + e_c + e_b + _U * d + _U * both) * (1.0 + 1e-9)
        mass[far] = both
    return mass, err


def _gl12_masses(lo, hi):
    """P(lo < Z <= hi) for narrow intervals (h (|z| + h) < 1) by 12-point Gauss-Legendre
    quadrature, with the error bound u (16 + 14 z^2) times the mass plus the
    UNDERFLOW_FLOOR (``normal_interval_error``)."""
    m = _gauss_legendre_masses(lo, hi, _GL_NODES, _GL_WEIGHTS)
    reach = np.maximum(np.abs(lo), np.abs(hi))
    return m, _U * (16.0 + 14.0 * reach * reach) * m + UNDERFLOW_FLOOR


def _gauss_legendre_masses(lo, hi, nodes, weights):
    """P(lo < Z <= hi) of narrow intervals by the Gauss-Legendre rule (nodes, weights)."""
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    z = mid[:, None] + half[:, None] * nodes[None, :]
    with np.errstate(under="ignore"):
        m = half * np.einsum("ij,j->i", np.exp(-0.5 * z * z), weights) * _INV_SQRT_2PI
    return np.maximum(m, 0.0)


#: the rule ``_sizing_interval_mass`` integrates narrow intervals by: 4 points, a third
#: of the 12-point rule's exponentials.  Its truncation on narrow intervals is at most
#: 8e-5 of the mass by the Cauchy estimate of ``_GL_RULES`` (loose: against the 12-point
#: rule it measured at most 6.3e-9, ``tests/test_mechanisms.py``); the spreads it feeds
#: moved by at most 1.2e-9 relative on 2,000 random pairs (sigma 0.4-20, q 1e-5 to 1,
#: delta 1e-15 to 1e-2, up to 1e7 steps), and on 3,000 more no leaf grid changed at six
#: leaf resolutions.  Nothing certified reads these masses
_SIZING_NODES, _SIZING_WEIGHTS = gauss_legendre(4)


def _pieces(a, b):
    """(P(a < Z <= b), error bound) for 0 <= a < b < inf as a sum of narrow pieces (at
    most (b^2 - a^2) / (2 PIECE_STEP) + 1 of them, each with h (|z| + h) <= 2
    PIECE_STEP, ``_gl12_masses``), added in order: the pieces' bounds and the sum's
    rounding, (n - 1) u of the pieces' sum."""
    count = np.maximum(np.ceil((b - a) * (b + a) / (2.0 * _PIECE_STEP)), 1.0).astype(np.intp)
    entry = np.repeat(np.arange(len(a)), count)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    j = np.arange(len(entry)) - first[entry] + 1           # piece j's upper end
    upper = np.where(j == count[entry], b[entry],
                     np.sqrt(a[entry] * a[entry] + 2.0 * _PIECE_STEP * j))
    upper = np.minimum(upper, b[entry])
    lower = np.empty_like(upper)
    lower[1:] = upper[:-1]
    lower[first] = a
    upper = np.maximum(upper, lower)                        # (rounding: never decreasing)
    m, e = _gl12_masses(lower, upper)
    m = np.where(upper > lower, m, 0.0)
    e = np.where(upper > lower, e, 0.0)
    total = np.bincount(entry, weights=m, minlength=len(a))
    n = count.astype(float)
    err = (np.bincount(entry, weights=e, minlength=len(a))
           + (n - 1.0) * _U * total / (1.0 - n * _U)) * (1.0 + 1e-9)
    return total, err


def _wide_intervals(lo, hi):
    """(P(lo < Z <= hi), error bound) for wide intervals: each side of 0 by
    ``_one_sided`` (the left side mirrored, exactly; both sides in one pass), summed
    (u); a side starting beyond _NORMAL_TAIL_ZERO_FROM holds less than 2^-1074
    (UNDERFLOW_FLOOR)."""
    k = len(lo)
    a = np.concatenate((np.maximum(lo, 0.0), np.maximum(-hi, 0.0)))
    b = np.concatenate((np.maximum(hi, 0.0), np.maximum(-lo, 0.0)))
    nonempty = b > a
    live = nonempty & (a < _NORMAL_TAIL_ZERO_FROM)
    mass = np.zeros(2 * k)
    err = np.where(nonempty & ~live, UNDERFLOW_FLOOR, 0.0)
    if live.any():
        mass[live], err[live] = _one_sided(a[live], b[live])
    total = mass[:k] + mass[k:]
    return total, (err[:k] + err[k:] + _U * total) * (1.0 + 1e-9)


def normal_interval_error(lo, hi, mass) -> np.ndarray:
    """Bound on the absolute error of ``normal_interval_mass`` (whose result ``mass``
    is; the bound is that of ``normal_interval_mass_and_error``, which gives both in one
    pass and is what the pairs call).

    Narrow intervals (12-point Gauss-Legendre, ``_gl12_masses``): u (16 + 14 z^2) times
    the mass plus the ``UNDERFLOW_FLOOR``: z^2 carries 4u relative, so exp(-z^2/2) loses
    at most 2u z^2 + 2u; the 12 weighted terms and their sum add at most ~13u; the
    rule's truncation is below rounding for h (|z| + h) < 1.  Wide intervals: sums of
    such pieces and continued-fraction tails (``_wide_intervals``), so scipy's ndtr is
    not trusted anywhere here.  tests/test_mechanisms.py and
    tests/test_adversarial_extremes.py check both against 60-digit mpmath.
    """
    return normal_interval_mass_and_error(lo, hi)[1]


def endpoint_mass(z, dz) -> np.ndarray:
    """Bound on the standard-normal mass within ``dz`` of each end point ``z``.

    An interval whose computed end points are within dz of the exact ones differs from
    the exact interval by at most this mass at each end: 2 dz times the density's
    largest value there, phi(max(|z| - dz, 0)) (with 1e-3 of room for its own rounding).
    """
    z = np.asarray(z, dtype=float)
    dz = np.asarray(dz, dtype=float)
    live = np.isfinite(z) & (dz > 0)
    near = np.maximum(np.abs(np.where(live, z, 0.0)) - np.where(live, dz, 0.0), 0.0)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = 2.0 * dz * np.exp(-0.5 * near * near) * _INV_SQRT_2PI * 1.001
    return np.where(live, np.minimum(out, 1.0), 0.0)


def normal_interval_mass(lo, hi) -> np.ndarray:
    """P(lo < Z <= hi) for a standard normal Z, with the error ``normal_interval_error``
    bounds.

    Narrow intervals (where a CDF difference would cancel) are integrated by 12-point
    Gauss-Legendre quadrature; wide ones are sums of such pieces on each side of 0 and
    continued-fraction tails (``_wide_intervals``), so no library CDF is trusted.
    """
    return normal_interval_mass_and_error(lo, hi, errors=False)[0]


def normal_interval_mass_and_error(lo, hi, errors: bool = True):
    """(``normal_interval_mass``, ``normal_interval_error``) in one pass (the error None
    with ``errors=False``)."""
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    lo, hi = np.broadcast_arrays(lo, hi)
    out = np.zeros(lo.shape)
    err = np.zeros(lo.shape) if errors else None
    valid, narrow = _classify(lo, hi)
    if narrow.any():
        m, e = _gl12_masses(lo[narrow], hi[narrow])
        out[narrow] = m
        if errors:
            err[narrow] = e
    wide = valid & ~narrow
    if wide.any():
        m, e = _wide_intervals(lo[wide], hi[wide])
        out[wide] = m
        if errors:
            err[wide] = e
    # a mass is at most 1 (the pieces of the whole line add up to 1 + 2u): clipping only
    # moves it toward the true mass
    return np.clip(out, 0.0, 1.0), err


#: 0.5 log(2 pi) rounded to the nearest double (its rounding, below u of it, is charged)
_HALF_LOG_2PI = 0.91893853320467274178
#: relative error allowed to numpy's log and log1p (docs/floating-point.md: the library
#: functions are taken to be accurate to a few ulp)
_LOG_RELATIVE = 4.0 * _U
#: |x| beyond which x^2 is not formed (log Phi(x) is then answered as -inf, with an
#: infinite error bound, for x < 0, and 0 for x > 0)
_LOG_CDF_REACH = 1e150


def normal_log_cdf_and_error(x):
    """(log Phi(x), absolute error bound) for a standard normal, elementwise, from the
    proven masses above (no library CDF):

    * x >= 0: log1p(-T), T = Phi(-x) with its error e (``normal_interval_mass_and_error``,
      or ``_upper_tails`` from _CF_FROM on): |log1p(-T') - log1p(-T)| <= e / (1 - T' - e);
    * -_CF_FROM < x < 0: log m, m = Phi(x) >= Phi(-3) with its error e: at most
      e / (m - e);
    * x <= -_CF_FROM: -x^2/2 - log sqrt(2 pi) + log R(-x), x^2 exact as P + Pe
      (``two_square``), R the Mills ratio bracketed by ``_mills_ratio`` (relative r:
      log R is off by at most r / (1 - r)), three sums rounded (u each) and the
      constant's rounding; this never underflows (log Phi(-38) is about -727).

    log and log1p add _LOG_RELATIVE of the result.  x = -inf gives (-inf, 0); |x| above
    _LOG_CDF_REACH gives (0, UNDERFLOW_FLOOR) right of 0 and (-inf, inf) left of it.
    """
    x = np.asarray(x, dtype=float)
    shape = x.shape
    x = x.reshape(-1)
    if np.isnan(x).any():
        raise ValueError("normal_log_cdf_and_error: x must be a number or +-inf, got NaN "
                         f"(entry {int(np.flatnonzero(np.isnan(x))[0])})")
    val = np.zeros(len(x))
    err = np.zeros(len(x))
    u = _U
    right = (x >= 0.0) & (x <= _LOG_CDF_REACH)
    if right.any():
        xr = x[right]
        t = np.empty(len(xr))
        e = np.empty(len(xr))
        tail = xr >= _CF_FROM              # Phi(-x) = phi(x) R(x) directly
        t[tail], e[tail] = _upper_tails(xr[tail])
        t[~tail], e[~tail] = normal_interval_mass_and_error(xr[~tail], np.inf)
        v = np.log1p(-t)
        val[right] = v
        err[right] = (e / (1.0 - t - e) + _LOG_RELATIVE * np.abs(v)) * (1.0 + 1e-9)
    beyond = x > _LOG_CDF_REACH
    err[beyond] = UNDERFLOW_FLOOR
    mid = (x < 0.0) & (x > -_CF_FROM)
    if mid.any():
        m, e = normal_interval_mass_and_error(-np.inf, x[mid])
        v = np.log(m)
        val[mid] = v
        err[mid] = (e / (m - e) + _LOG_RELATIVE * np.abs(v)) * (1.0 + 1e-9)
    far = (x <= -_CF_FROM) & (x >= -_LOG_CDF_REACH)
    if far.any():
        z = -x[far]
        P, Pe = two_square(z)
        r, rel = _mills_ratio(z)
        s1 = -0.5 * P - _HALF_LOG_2PI
        s2 = s1 - 0.5 * Pe
        lr = np.log(r)
        v = s2 + lr
        val[far] = v
        err[far] = (u * (np.abs(s1) + np.abs(s2) + np.abs(v) + _HALF_LOG_2PI)
                    + rel / (1.0 - rel) + _LOG_RELATIVE * np.abs(lr)) * (1.0 + 1e-9)
    gone = x < -_LOG_CDF_REACH
    val[gone] = -np.inf
    err[gone & np.isfinite(x)] = np.inf
    return val.reshape(shape), err.reshape(shape)


#: widenings ``normal_quantile_bracket`` tries (each quadruples the half-width), and
#: bisections it then takes back down where the centre was off
_QUANTILE_TRIES = 30
_QUANTILE_BISECTIONS = 120


def normal_quantile_bracket(p):
    """(lo, hi) with Phi(lo) <= p <= Phi(hi), elementwise: a certified bracket of the
    standard normal quantile Phi^-1(p) for p in [0, 1].

    scipy's ndtri only proposes the centre z0; each end is checked with the proven log
    Phi (``normal_log_cdf_and_error``): log Phi(lo) plus its error at most log p minus
    _LOG_RELATIVE of it, log Phi(hi) minus its error at least log p plus that (sums
    rounded outward).  The half-width starts at 2^-42 (1 + |z0|) and is quadrupled where
    an end fails (then bisected back, each midpoint checked the same way); an end still
    unproven after _QUANTILE_TRIES is -inf or inf (valid).
    p = 0 gives (-inf, -inf), p = 1 (inf, inf).
    """
    p = np.asarray(p, dtype=float)
    shape = p.shape
    p = p.reshape(-1)
    bad = np.flatnonzero(~((p >= 0.0) & (p <= 1.0)))
    if len(bad):
        raise ValueError("normal_quantile_bracket: p must lie in [0, 1], got "
                         f"{float(p[bad[0]])!r} (entry {int(bad[0])})")
    lo = np.where(p < 1.0, -np.inf, np.inf)
    hi = np.where(p > 0.0, np.inf, -np.inf)
    inner = (p > 0.0) & (p < 1.0)
    if inner.any():
        q = p[inner]
        lq = np.log(q)
        room = _LOG_RELATIVE * np.abs(lq) * (1.0 + 1e-9)
        below = np.nextafter(lq - room, -np.inf)      # <= log p
        above = np.nextafter(lq + room, np.inf)       # >= log p
        z0 = special.ndtri(q)
        z0 = np.where(np.isfinite(z0), z0, 0.0)      # (a proposal only)
        half = 2.0 ** -42 * (1.0 + np.abs(z0))
        got_lo = np.full(len(q), -np.inf)
        got_hi = np.full(len(q), np.inf)
        need_lo = np.ones(len(q), dtype=bool)
        need_hi = np.ones(len(q), dtype=bool)
        for _ in range(_QUANTILE_TRIES):
            if need_lo.any():
                cand = z0[need_lo] - half[need_lo]
                v, e = normal_log_cdf_and_error(cand)
                ok = np.nextafter(v + e, np.inf) <= below[need_lo]
                idx = np.flatnonzero(need_lo)
                got_lo[idx[ok]] = cand[ok]
                need_lo[idx[ok]] = False
            if need_hi.any():
                cand = z0[need_hi] + half[need_hi]
                v, e = normal_log_cdf_and_error(cand)
                ok = np.nextafter(v - e, -np.inf) >= above[need_hi]
                idx = np.flatnonzero(need_hi)
                got_hi[idx[ok]] = cand[ok]
                need_hi[idx[ok]] = False
            if not (need_lo.any() or need_hi.any()):
                break
            half = np.where(need_lo | need_hi, 4.0 * half, half)
        # where the centre was off (the bracket had to widen), bisect back down to about
        # the first width, each midpoint checked like the ends
        aim = 2.0 ** -42 * (1.0 + np.minimum(np.abs(got_lo), np.abs(got_hi)))
        for _ in range(_QUANTILE_BISECTIONS):
            wide = np.flatnonzero(np.isfinite(got_lo) & np.isfinite(got_hi)
                                  & (got_hi - got_lo > 4.0 * aim))
            if not len(wide):
                break
            mid = 0.5 * (got_lo[wide] + got_hi[wide])
            v, e = normal_log_cdf_and_error(mid)
            up = np.nextafter(v + e, np.inf) <= below[wide]
            down = np.nextafter(v - e, -np.inf) >= above[wide]
            got_lo[wide[up]] = mid[up]
            got_hi[wide[down]] = mid[down]
            aim[wide[~(up | down)]] = np.inf        # mid lies in the unresolved zone
        lo[inner] = got_lo
        hi[inner] = got_hi
    return lo.reshape(shape), hi.reshape(shape)


def normal_cdf_upper(x):
    """Certified upper bounds on Phi(x), elementwise: exp of log Phi plus its error
    (``normal_log_cdf_and_error``), exp's rounding (one ulp) and one more ulp."""
    x = np.asarray(x, dtype=float)
    v, e = normal_log_cdf_and_error(x)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.exp(np.nextafter(v + e, np.inf)) * (1.0 + 4.0 * _U)
    out = np.where(np.isnan(out), 1.0, out)       # (-inf + inf: an unbounded error)
    return np.minimum(np.nextafter(out, np.inf), 1.0)


def _sizing_interval_mass(lo, hi) -> np.ndarray:
    """``normal_interval_mass`` for sizing grids only (``MechanismPair.loss_spread``):
    narrow intervals take a 4-point rule (``_SIZING_NODES``) and wide ones scipy's ndtr
    difference on the tail side, which are cheaper and keep the leaf spacings what they
    were; nothing certified reads these masses."""
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    lo, hi = np.broadcast_arrays(lo, hi)
    out = np.zeros(lo.shape)
    valid, narrow = _classify(lo, hi)
    if narrow.any():
        out[narrow] = _gauss_legendre_masses(lo[narrow], hi[narrow], _SIZING_NODES,
                                             _SIZING_WEIGHTS)
    wide = valid & ~narrow
    if wide.any():
        l, h = lo[wide], hi[wide]
        right = l >= 0.0
        left = h <= 0.0
        mid = ~(right | left)
        res = np.empty(l.shape)
        res[right] = special.ndtr(-l[right]) - special.ndtr(-h[right])
        res[left] = special.ndtr(h[left]) - special.ndtr(l[left])
        res[mid] = 1.0 - special.ndtr(-h[mid]) - special.ndtr(l[mid])
        out[wide] = res
    return np.maximum(out, 0.0)


def normal_x_interval_mass(x, mean: float, scale: float):
    """N(mean, scale^2) masses of the x-intervals (x_k, x_{k+1}] cut by the increasing
    end points ``x`` (+-inf allowed), with entrywise error bounds.

    The masses are those of exactly these x-intervals, so two components (two means)
    evaluated on the same ``x`` describe the same events: a narrow interval is
    integrated from its midpoint and half-width in x, whose rounding moves the
    integrand by a relative exp(R dm) - 1 (R the reach in z, dm the midpoint's error)
    instead of moving mass across an end point; a wide one is integrated between the
    standardised end points (``normal_interval_mass_and_error``) and counts the mass
    within their rounding (``endpoint_mass``), small next to a wide interval's mass
    (docs/floating-point.md).
    """
    mass, err = normal_x_interval_masses(x, (mean,), scale)
    return mass[0], err[0]


def _standardised(lo, hi, mean, scale: float):
    """End points in z units, which intervals are non-empty, and which are narrow
    (h (|z| + h) < 1, integrated by quadrature; the others by ``_wide_masses``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        zl, zh = (lo - mean) / scale, (hi - mean) / scale
        valid = hi > lo
        finite = valid & np.isfinite(lo) & np.isfinite(hi)
        width = np.where(finite, zh - zl, np.inf)
        reach = np.maximum(np.abs(np.where(np.isfinite(zl), zl, 0.0)),
                           np.abs(np.where(np.isfinite(zh), zh, 0.0)))
        narrow = finite & (width * (reach + width) < 1.0)
    return zl, zh, valid, narrow


def _wide_masses(zl, zh, xl, xh, mean, scale: float):
    """Masses of wide intervals between the standardised end points ``zl``, ``zh`` (of
    ``xl``, ``xh``; ``normal_interval_mass_and_error``), with their error bounds: the
    end points carry 3u (|x| + |mean|) / scale, and the mass within that of each end
    may belong to the neighbouring interval (``endpoint_mass``)."""
    u = _U
    m, e = normal_interval_mass_and_error(zl, zh)
    dl = 3.03 * u * (np.abs(np.where(np.isfinite(xl), xl, 0.0)) + np.abs(mean)) / scale
    dh = 3.03 * u * (np.abs(np.where(np.isfinite(xh), xh, 0.0)) + np.abs(mean)) / scale
    return m, (e + endpoint_mass(zl, dl)
               + endpoint_mass(zh, dh)) * (1 + 1e-9)


#: relative error bound of ``_narrow_masses`` besides the rule's truncation and the
#: (tiny) terms of the midpoint's double-double error: half-width 2u, its use in the
#: node factors' exponents 8u (|a| + b) <= 4.4u, each node's exp 2u, weight and product
#: 5u, the sum (n - 1)u <= 11u, phi(mid) 4u, the constant and three products 4u: 32.4u,
#: rounded up
_NARROW_RELATIVE = 36.0 * _U


def _narrow_masses(l, h, mean: float, scale: float):
    """N(mean, scale^2) masses of narrow x-intervals (l, h] and their error bounds.

    With mid and half the interval's centre and half-width in z units, the mass is
    half phi(mid) * integral over [-1, 1] of g(v) = exp(-a v - b v^2), a = mid half,
    b = half^2 / 2, by Gauss-Legendre (the rule's truncation is below u / 16,
    ``_GL_RULES``).  phi(mid) is where precision is lost far out (an error dm in mid
    moves it by |mid| dm relative, and mid^2 rounded moves it by u mid^2), so mid and
    mid^2 are formed in double-double arithmetic (``two_sum``, ``two_prod``): the bound
    stays near 36u at any reach instead of growing like u mid^2.
    """
    u = _U
    # (the operations of the formulas in the comments, in that order, most of them in
    # place on temporaries no longer needed: the same values, fewer allocations)
    l, h = np.asarray(l, dtype=float), np.asarray(h, dtype=float)
    # centre in z units as q_hi + q_lo: (l + h) / 2 - mean exactly, then divided
    s_hi, s_lo = two_sum(l, h)
    s_hi *= 0.5
    d_hi, d_lo = two_sum(s_hi, -np.asarray(mean, dtype=float))   # (mean: scalar or per entry)
    s_lo *= 0.5
    d_lo += s_lo                                  # d_lo + 0.5 s_lo
    q_hi = d_hi / scale
    p, e = two_prod(q_hi, float(scale))
    q_lo = d_hi - p
    q_lo -= e
    q_lo += d_lo
    q_lo /= scale                                 # (((d_hi - p) - e) + d_lo) / scale
    del s_hi, s_lo, d_hi, p, e       # (temporaries freed as soon as they are dead: the
                                     # later ones reuse their memory)
    abs_q_lo = np.abs(q_lo)
    # |mid - (q_hi + q_lo)|: roundings of d_lo and q_lo, each u |term| (+ tiny):
    # 4u (|d_lo| / scale + |q_lo|) + 1e-300
    dmid = np.abs(d_lo)
    dmid /= scale
    dmid += abs_q_lo
    dmid *= 4.0 * u
    dmid += 1e-300
    del d_lo
    half = h - l
    half *= 0.5
    half /= scale                                 # 0.5 (h - l) / scale
    reach = np.abs(q_hi)
    reach += abs_q_lo
    reach += half                                 # |q_hi| + |q_lo| + half
    del abs_q_lo
    # phi(mid) = exp(-(P + lo) / 2), mid^2 = P + lo + (q_lo^2, dropped: counted below)
    P, Pe = two_square(q_hi)
    lo2 = 2.0 * q_hi
    lo2 *= q_lo
    np.add(Pe, lo2, out=lo2)                      # Pe + 2 q_hi q_lo
    phi = P
    phi *= -0.5
    with np.errstate(under="ignore"):
        np.exp(phi, out=phi)
        tmp = 0.5 * lo2
        np.subtract(1.0, tmp, out=tmp)
        phi *= tmp                                # exp(-P / 2) (1 - lo2 / 2)
    del P
    # the node factors
    a = q_hi + q_lo              # the whole midpoint: q_lo is not small next to q_hi
    a *= half                    # where x is near a nonzero mean at a tiny scale
    b = 0.5 * half
    b *= half                                     # half^2 / 2
    size = half * reach
    size *= 1.0 + 1e-6
    if np.any(size > _GL_RULES[-1][1]):
        raise RuntimeError("internal error: a narrow interval beyond the quadrature rules")
    # the midpoint's error moves phi by (|mid| + dmid) dmid relative; the exponent's
    # low part: its rounding (2u), the dropped q_lo^2 and the first-order exp (lo2^2):
    # y = (reach + dmid) dmid 1.01, extra = y + y^2 + 2u (|Pe| + 2 |q_hi q_lo|) + q_lo^2
    # + lo2^2 / 4 (subnormal results: the callers' UNDERFLOW_FLOOR); formed before the
    # quadrature, so that its inputs' memory is free again for the node sums
    y = reach
    y += dmid
    y *= dmid
    y *= 1.01
    del dmid
    if np.any(y > 1.0):
        raise RuntimeError("internal error: a narrow interval's midpoint error is not small")
    np.multiply(q_hi, q_lo, out=tmp)
    np.abs(tmp, out=tmp)
    tmp *= 2.0
    low = np.abs(Pe)
    low += tmp
    low *= 2.0 * u
    del Pe
    extra = y * y
    np.add(y, extra, out=extra)
    extra += low
    del y, low
    np.multiply(q_lo, q_lo, out=tmp)
    extra += tmp
    np.multiply(0.25, lo2, out=tmp)
    tmp *= lo2
    extra += tmp
    del q_hi, q_lo, lo2, tmp
    # the fewest nodes whose limit holds (sizes beyond every limit were refused above):
    # the number of limits below each size, by comparisons (cheaper than searchsorted)
    rule = (size > _GL_LIMITS[0]).view(np.int8).astype(np.intp)
    for limit in _GL_LIMITS[1:-1].tolist():
        rule += size > limit
    del size
    # sizes change slowly along a leaf's intervals, so each rule serves a few runs of
    # consecutive ones: those are sliced (no gathering); many runs, by index sets
    edges = np.flatnonzero(rule[1:] != rule[:-1]) + 1
    g = np.empty(len(l))
    if len(l) and len(edges) < _NODE_RUNS_UP_TO:
        ends = edges.tolist() + [len(l)]
        starts = [0] + ends[:-1]
        for i, j, k in zip(starts, ends, rule[starts].tolist()):
            _, _, nodes, weights = _GL_RULES[k]
            g[i:j] = _node_sum(a[i:j], b[i:j], nodes, weights)
    else:
        used = np.flatnonzero(np.bincount(rule, minlength=len(_GL_LIMITS)))
        for k in used.tolist():
            _, _, nodes, weights = _GL_RULES[k]
            pick = np.flatnonzero(rule == k)
            g[pick] = _node_sum(a[pick], b[pick], nodes, weights)
    del a, b, rule
    m = half * _INV_SQRT_2PI
    m *= phi
    m *= g
    np.maximum(m, 0.0, out=m)
    del half, phi, g
    # the bound: (_NARROW_RELATIVE + _GL_TRUNCATION + extra) m (1 + 1e-9) + UNDERFLOW_FLOOR
    rel = extra
    rel += _NARROW_RELATIVE + _GL_TRUNCATION
    rel *= m
    rel *= 1 + 1e-9
    rel += UNDERFLOW_FLOOR
    return m, rel


#: runs of one rule up to which ``_narrow_masses`` slices them (beyond: index sets)
_NODE_RUNS_UP_TO = 32


def _node_sum(a, b, nodes, weights):
    """sum_j w_j exp(-a v_j - b v_j^2): one contiguous pass per node, in place.  The
    exponent is formed as a (-v_j) + b (-v_j^2), which is -(a v_j + b v_j^2) bit for bit
    (rounding to nearest is symmetric; exp(-0) = exp(+0)); the first term is stored, not
    added to 0 (the same value: no term is -0)."""
    acc = np.empty(len(a))
    term = np.empty(len(a))
    quad = np.empty(len(a))
    for j, (v, w) in enumerate(zip(nodes.tolist(), weights.tolist())):
        np.multiply(a, -v, out=term)
        np.multiply(b, -(v * v), out=quad)
        term += quad
        np.exp(term, out=term)
        if j == 0:
            np.multiply(term, w, out=acc)
        else:
            term *= w
            acc += term
    return acc


#: end points up to which ``normal_x_interval_masses`` treats several means in one pass
_BATCHED_MEANS_UP_TO = 4096
#: intervals per call of ``_narrow_masses`` on long rows: its thirty-odd temporaries then
#: stay in cache (twice as fast at 10^5 intervals; every entry is computed alone, so the
#: numbers do not depend on it)
_NARROW_BLOCK = 16384


def _narrow_in_blocks(l, h, mean: float, scale: float):
    """``_narrow_masses`` in blocks of _NARROW_BLOCK intervals."""
    if len(l) <= _NARROW_BLOCK:
        return _narrow_masses(l, h, mean, scale)
    mass = np.empty(len(l))
    err = np.empty(len(l))
    for i in range(0, len(l), _NARROW_BLOCK):
        block = slice(i, i + _NARROW_BLOCK)
        mass[block], err[block] = _narrow_masses(l[block], h[block], mean, scale)
    return mass, err


def _one_run(mask):
    """The slice of ``mask``'s True entries where they are consecutive (at least one),
    else None."""
    if not mask.size:
        return None
    first = int(mask.argmax())
    if not mask[first]:
        return None
    last = len(mask) - int(mask[::-1].argmax())
    if last - first != int(np.count_nonzero(mask)):
        return None
    return slice(first, last)


def normal_x_interval_masses(x, means, scale: float):
    """``normal_x_interval_mass`` for several means on the same end points at once:
    arrays (len(means), len(x) - 1) of masses and error bounds.  Every entry goes
    through the operations it would alone (all of them elementwise), so the numbers are
    those of one call per mean; the batch only saves the calls' fixed costs."""
    x = np.asarray(x, dtype=float)
    lo, hi = x[:-1], x[1:]
    if len(means) == 1 or len(x) > _BATCHED_MEANS_UP_TO:
        # long rows: the narrow intervals one mean at a time (the calls' fixed costs
        # are small, batched indexing is not), the few wide ones of all means together
        mass = np.zeros((len(means), len(lo)))
        err = np.zeros((len(means), len(lo)))
        wide_rows = []
        for k, mean in enumerate(means):
            zl, zh, valid, narrow = _standardised(lo, hi, mean, scale)
            run = _one_run(narrow)
            if run is not None:
                # (a leaf's narrow intervals are consecutive: sliced, not gathered)
                mass[k, run], err[k, run] = _narrow_in_blocks(lo[run], hi[run], mean, scale)
            elif narrow.any():
                mass[k, narrow], err[k, narrow] = _narrow_in_blocks(lo[narrow], hi[narrow],
                                                                    mean, scale)
            wide = valid & ~narrow
            if wide.any():
                wide_rows.append((k, wide, zl[wide], zh[wide], float(mean)))
        if wide_rows:
            sel = [np.flatnonzero(w) for _, w, _, _, _ in wide_rows]
            m, e = _wide_masses(np.concatenate([r[2] for r in wide_rows]),
                                np.concatenate([r[3] for r in wide_rows]),
                                np.concatenate([lo[i] for i in sel]),
                                np.concatenate([hi[i] for i in sel]),
                                np.concatenate([np.full(len(i), r[4])
                                                for i, r in zip(sel, wide_rows)]), scale)
            start = 0
            for (k, _, _, _, _), i in zip(wide_rows, sel):
                mass[k, i], err[k, i] = m[start:start + len(i)], e[start:start + len(i)]
                start += len(i)
        return mass, err
    mu = np.asarray(means, dtype=float)[:, None]
    shape = (len(mu), len(lo))
    zl, zh, valid, narrow = _standardised(lo, hi, mu, scale)
    mass = np.zeros(shape)
    err = np.zeros(shape)
    if narrow.any():
        l = np.broadcast_to(lo, shape)[narrow]
        h = np.broadcast_to(hi, shape)[narrow]
        mean = np.broadcast_to(mu, shape)[narrow]
        mass[narrow], err[narrow] = _narrow_masses(l, h, mean, scale)
    wide = valid & ~narrow
    if wide.any():
        mass[wide], err[wide] = _wide_masses(
            zl[wide], zh[wide], np.broadcast_to(lo, shape)[wide],
            np.broadcast_to(hi, shape)[wide], np.broadcast_to(mu, shape)[wide], scale)
    return mass, err


def _near_the_least_loss(t, q: float, below) -> np.ndarray:
    """Which end points t set to -inf (``below``: t <= log1p(-q) as computed) may lie
    above the exact least loss log(1 - q) of a subsampled Gaussian (each then takes that
    threshold's rounding, 4u (|t| + 1), as its displacement).  log1p is good to an ulp,
    at most 2u |log(1 - q)| <= 2u |t|, and the band's own arithmetic rounds by at most
    2u (|t| + 1), so every t outside the band 8u (|t| + 1) lies below log(1 - q): its
    event set is exactly empty and needs no displacement.  (A displacement there sends
    a share of the lowest bucket's B-mass to the -inf atom: about 1e-16 a step, where a
    leaf grid's lowest point lies just below log(1 - q), which kept a history of 177,116
    such steps from any upper bound at delta 2.5e-14.)"""
    with np.errstate(invalid="ignore"):
        return below & (t > math.log1p(-q) - 8.0 * _U * (np.abs(t) + 1.0))


def _monotone_end_points(x, dx):
    """x made non-decreasing (rounding may break monotonicity) and the error bounds of
    the result: an end point replaced by an earlier, larger one is within the larger of
    the two bounds of its exact value (the exact end points increase)."""
    fixed = np.maximum.accumulate(x)
    changed = fixed != x
    if changed.any():
        dx = np.where(changed, np.maximum.accumulate(dx), dx)
    return fixed, dx


def laplace_interval_mass(lo, hi, mean: float, scale: float) -> np.ndarray:
    """Lap(mean, scale) mass of (lo, hi], with no cancellation: on one side of the mean
    0.5 e^{-z} (1 - e^{-(hi - lo)/scale}) (z the nearer end's distance to the mean in
    scales; the width is taken from the end points themselves, not from their distances
    to the mean, which would cancel), across the mean the sum of the two sides'
    -expm1 terms.  Relative error at most ``laplace_relative_error(z)``."""
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        zl = (lo - mean) / scale
        zh = (hi - mean) / scale
        right = zl >= 0
        left = zh <= 0
        shrink = -np.expm1(-(hi - lo) / scale)        # 1 - e^{-width}
        one_side = 0.5 * np.exp(-np.where(right, zl, np.where(left, -zh, 0.0))) * shrink
        across = 0.5 * -np.expm1(np.minimum(zl, 0.0)) + 0.5 * -np.expm1(-np.maximum(zh, 0.0))
    out = np.where(right | left, one_side, across)
    out = np.where(hi > lo, out, 0.0)
    return np.maximum(np.nan_to_num(out, nan=0.0), 0.0)


def laplace_relative_error(z) -> np.ndarray:
    """Relative error bound of ``laplace_interval_mass`` for intervals whose nearer end
    lies at most ``z`` scales from the mean (z >= 0), given exp and expm1 within one ulp
    (2u): the distance carries 2u relative, which e^{-z} turns into 2u z; the width 2u,
    which 1 - e^{-w} passes on at most as is; the two functions 4u; the products and the
    sum 2u (docs/floating-point.md, "Laplace masses").  Masses below the normal range
    need ``UNDERFLOW_FLOOR`` besides."""
    return _U * (2.02 * np.asarray(z, dtype=float) + 12.0)


def _atoms_to_buckets(t, losses, a, b, *, swapped: bool, exact=None, counts: bool = False):
    """Sum atoms into the K+1 right-closed loss intervals of grid ``t`` by their computed
    loss (``_straddling_atoms`` finds those whose exact loss may lie in another one), or
    by ``exact`` ({atom index: interval}) where their exact loss was placed.  Returns
    (a, b), and with ``counts`` the number of atoms summed into each interval (a sum of
    c of them rounds by at most (c - 1) u of itself)."""
    losses = np.asarray(losses, dtype=float)
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if swapped:
        losses, a, b = -losses, b, a
    idx = np.searchsorted(t, losses, side="left")  # L <= t_k  -> interval k
    if exact:
        idx[list(exact)] = list(exact.values())
    out_a = np.bincount(idx, weights=a, minlength=len(t) + 1).astype(float)
    out_b = np.bincount(idx, weights=b, minlength=len(t) + 1).astype(float)
    if counts:
        return out_a, out_b, np.bincount(idx, minlength=len(t) + 1)
    return out_a, out_b


def _straddling_atoms(t, losses, loss_error, *, swapped: bool):
    """The atoms whose exact loss may lie in another interval of grid ``t`` than their
    computed loss: (atom indices, computed interval, lowest and highest interval the
    exact loss may fall in, loss error), or None when there are none.

    The exact loss lies within ``loss_error`` of the computed one; the ends of that
    range are rounded outwards (``nextafter``), so the intervals found contain every
    loss within the error (docs/floating-point.md, "Atoms")."""
    losses = np.asarray(losses, dtype=float)
    err = np.asarray(loss_error, dtype=float)
    if swapped:
        losses = -losses
    live = np.isfinite(losses) & (err > 0)       # +-inf losses are exact
    if not live.any():
        return None
    i = np.flatnonzero(live)
    L, e = losses[i], err[i]
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.searchsorted(t, np.nextafter(L - e, -np.inf), side="left")
        hi = np.searchsorted(t, np.nextafter(L + e, np.inf), side="left")
    at = np.searchsorted(t, L, side="left")
    keep = hi > lo
    if not keep.any():
        return None
    return i[keep], at[keep], lo[keep], hi[keep], e[keep]


def store_floats(pair, **values) -> None:
    """Store each checked parameter of a frozen ``pair`` as the Python float its check
    returned.  A numpy scalar kept as given made the pair's arithmetic run in its
    precision (numpy 2: a Python float meets an np.float16 as float16): a
    SubsampledLaplace of np.float16(0.5) and np.float16(0.25) certified [2.86230,
    2.86230] where the pair of the same doubles has epsilon in [2.86311, 2.86338]; a
    Laplace of an np.float32, a 0-d array or a Fraction raised TypeError in every
    query."""
    for name, value in values.items():
        object.__setattr__(pair, name, value)


class MechanismPair:
    """A worst-case pair (A, B); subclasses describe atoms and a continuous part."""

    #: relative error bound of the masses this pair returns
    mass_relative_error: float = 0.0
    #: absolute error bound of each atom bucket besides (masses that may underflow)
    mass_absolute_error: float = 0.0
    #: True for the mixture-vs-Gaussian "remove" orientation and its mirror
    swapped: bool = False

    # -- to be provided by subclasses -------------------------------------------------
    def _atoms(self):
        """Atoms as (losses, A-masses, B-masses); losses may be +-inf."""
        return np.zeros(0), np.zeros(0), np.zeros(0)

    def _atom_loss_error(self, losses) -> np.ndarray:
        """Bound on |computed loss - exact loss| of each atom of ``_atoms`` (``losses``,
        in that order).  +-inf losses are exact (one side's probability is exactly 0);
        a pair with finite atoms must derive its own bound."""
        losses = np.asarray(losses, dtype=float)
        if np.any(np.isfinite(losses)):
            raise NotImplementedError(
                f"internal error: {type(self).__name__} has finite atoms but no bound on "
                "their losses' round-off (_atom_loss_error)")
        return np.zeros(losses.shape)

    def _atom_loss_side(self, i: int, v: float):
        """Sign (+1 or -1) of atom i's exact loss minus the grid point ``v`` where it can
        be decided exactly or in 60-digit arithmetic with a proven margin, 0 where the
        exact loss is ``v`` itself (proven exactly), else None (the atom then keeps its
        computed loss and the allowance for its error)."""
        return None

    def _continuous(self, t) -> Tuple[np.ndarray, np.ndarray]:
        """Masses of the atom-free part on the K+1 intervals of ``t``."""
        k = len(t) + 1
        return np.zeros(k), np.zeros(k)

    def _continuous_with_error(self, t):
        """(a, b, error of a, error of b) of the atom-free part."""
        a, b = self._continuous(t)
        return a, b, self.mass_relative_error * a, self.mass_relative_error * b

    def _continuous_with_displacement(self, t):
        """(a, b, error of a, error of b, displacement) of the atom-free part: the masses
        of event sets whose losses lie within the displacement of their grid interval
        (``bucket_masses_with_displacement``).  By default the end points' round-off is
        in the mass errors already and the displacement is 0."""
        a, b, ea, eb = self._continuous_with_error(t)
        return a, b, ea, eb, np.zeros(len(t))

    def _loss_range(self, tail: float) -> Tuple[float, float]:
        """(t_lo, t_hi) with P_B(L < t_lo) <= tail and P_A(t_hi < L < inf) <= tail."""
        raise NotImplementedError

    # -- public -----------------------------------------------------------------------
    def bucket_masses(self, t) -> Tuple[np.ndarray, np.ndarray]:
        """A- and B-masses of the K+1 loss intervals cut by the increasing grid ``t``:
        ``bucket_masses_with_error``'s, without the error bounds, except that every atom
        is binned by its computed loss (the certified path places an atom whose exact
        loss may straddle a grid point exactly, ``_with_atoms``).  Uncertified: the
        engine does not read it (tests compare the masses with it)."""
        t = np.asarray(t, dtype=float)
        losses, a_at, b_at = self._atoms()
        a, b = _atoms_to_buckets(t, losses, a_at, b_at, swapped=self.swapped)
        if self.swapped:
            cb, ca = self._continuous_masses(-t[::-1])
            ca, cb = ca[::-1], cb[::-1]
        else:
            ca, cb = self._continuous_masses(t)
        return a + ca, b + cb

    def _continuous_masses(self, t) -> Tuple[np.ndarray, np.ndarray]:
        """(a, b) of the atom-free part: the masses ``_continuous_with_error`` returns
        (a pair may compute them without the error bounds)."""
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _sizing_masses(self, t, with_b: bool = False):
        """The A-masses of ``bucket_masses`` as ``loss_spread`` reads them to size a leaf
        (``with_b``: and the B-masses): the atom-free part from
        ``_continuous_sizing_masses``, which a pair may compute by a cheaper, uncertified
        formula (nothing certified reads these)."""
        t = np.asarray(t, dtype=float)
        losses, a_at, b_at = self._atoms()
        a, b = _atoms_to_buckets(t, losses, a_at, b_at, swapped=self.swapped)
        if self.swapped:
            cb, ca = self._continuous_sizing_masses(-t[::-1])
            ca, cb = ca[::-1], cb[::-1]
        else:
            ca, cb = self._continuous_sizing_masses(t)
        return (a + ca, b + cb) if with_b else a + ca

    def _continuous_sizing_masses(self, t) -> Tuple[np.ndarray, np.ndarray]:
        """``_continuous_masses`` for ``_sizing_masses`` (by default the same)."""
        return self._continuous_masses(t)

    def bucket_masses_with_error(self, t):
        """Masses as in ``bucket_masses`` plus absolute error bounds for each entry."""
        return self._with_atoms(t, self._continuous_with_error)

    def bucket_masses_with_displacement(self, t):
        """(a, b, ea, eb, shift): the A- and B-masses of K+1 event sets, entry k holding
        the events whose loss lies in (t_{k-1} - shift_{k-1}, t_k + shift_k] (t_{-1} =
        -inf, t_K = +inf), with absolute error bounds.  The sets partition the outcomes
        exactly, so an end point's round-off moves a bucket's border by ``shift`` (in
        loss) instead of costing the mass next to it (docs/floating-point.md); the split
        pair and the grouped buckets take it from here."""
        a, b, ea, eb, sh = self._with_atoms(t, self._continuous_with_displacement,
                                            displaced=True)
        return a, b, ea, eb, np.asarray(sh, dtype=float)

    def _with_atoms(self, t, continuous, displaced: bool = False):
        """The atoms' masses plus ``continuous(t)`` = (a, b, ea, eb, *per-point extras)
        of the atom-free part, in this orientation (mirrored: on -t reversed, A and B
        exchanged, extras reversed), with 2u of each sum's rounding.

        An atom is binned by its computed loss; one whose exact loss may lie across a
        grid point (``_straddling_atoms``) is covered, with ``displaced`` (the extras are
        the per-point shifts), by widening the shifts of the borders of its interval that
        its loss error reaches to at least that error, otherwise by counting its mass as
        error in every interval its exact loss may fall in, as the continuous parts do
        with ``endpoint_mass`` (docs/floating-point.md, "Atoms")."""
        t = np.asarray(t, dtype=float)
        losses, a_at, b_at = self._atoms()
        straddle = _straddling_atoms(t, losses, self._atom_loss_error(losses),
                                     swapped=self.swapped)
        exact = {}
        if straddle is not None:
            straddle, exact = self._place_straddling_atoms(t, straddle)
        a, b, n_at = _atoms_to_buckets(t, losses, a_at, b_at, swapped=self.swapped,
                                       exact=exact, counts=True)
        # the sums of several atoms in one interval round by (c - 1) u of themselves
        # (gamma_{c-1} of the exact sum, which is at most 1.01 times the computed one)
        summed = np.maximum(n_at - 1, 0) * _U * 1.01
        ea = self.mass_relative_error * a + self.mass_absolute_error + summed * a
        eb = self.mass_relative_error * b + self.mass_absolute_error + summed * b
        if self.swapped:
            ca, cb, eca, ecb, *extra = continuous(-t[::-1])
            ca, cb, eca, ecb = cb[::-1], ca[::-1], ecb[::-1], eca[::-1]
            extra = [e[::-1] for e in extra]
        else:
            ca, cb, eca, ecb, *extra = continuous(t)
        out = [a + ca, b + cb, ea + eca + 2 * _U * (a + ca), eb + ecb + 2 * _U * (b + cb),
               *extra]
        if straddle is not None:
            self._cover_straddling_atoms(out, straddle, a_at, b_at, displaced)
        return tuple(out)

    def _place_straddling_atoms(self, t, straddle):
        """Atoms of ``straddle`` whose side of every grid point their loss error reaches
        ``_atom_loss_side`` decides go to their exact interval ({atom: interval}); the
        others are returned (as ``straddle``, None if none) for the allowance."""
        idx, at, lo, hi, err = straddle
        exact, rest = {}, []
        for n, (i, l, h) in enumerate(zip(idx.tolist(), lo.tolist(), hi.tolist())):
            # mirrored: the oriented loss -L exceeds t_c where L < -t_c.  An exact loss
            # equal to the grid point (side 0; it was answered as undecided, so an atom
            # on a grid point, Laplace's +-eps0 = 1 on a grid of spacing 2^-k, cost its
            # whole mass as error in two buckets: the paper method's upper bound was the
            # trivial 1 for every such Laplace) lies in the right-closed interval
            # (t_{c-1}, t_c] in either orientation: not above t_c.
            sides = []
            for c in range(l, h):
                side = self._atom_loss_side(i, -float(t[c]) if self.swapped else float(t[c]))
                sides.append(0 if side is None else
                             (-1 if side == 0 else (-1 if self.swapped else 1) * side))
            if all(sides):
                exact[i] = l + sum(1 for v in sides if v > 0)
            else:
                rest.append(n)
        if not rest:
            return None, exact
        keep = np.array(rest)
        return (idx[keep], at[keep], lo[keep], hi[keep], err[keep]), exact

    def _cover_straddling_atoms(self, out, straddle, a_at, b_at, displaced):
        """``_with_atoms``'s allowance for atoms whose exact loss may lie in another
        interval than their computed one (``straddle``: ``_straddling_atoms``), in place
        on ``out`` = [a, b, ea, eb, *extras].

        Displaced: the interval at of computed loss L (t_{at-1} < L <= t_at) with the
        exact loss within e of L needs borders displaced by e only where e reaches past
        them (the exact loss is then in (t_{at-1} - e, t_at + e]).  Otherwise each
        interval from lo to hi may hold the atom or wrongly hold it: each gets the
        atom's largest exact mass, m (1 + relative error) + absolute error, as error."""
        idx, at, lo, hi, err = straddle
        if displaced:
            shift = np.array(out[4], dtype=float)
            left, right = lo < at, hi > at
            np.maximum.at(shift, at[left] - 1, err[left])
            np.maximum.at(shift, at[right], err[right])
            out[4] = shift
            return
        ma = np.asarray(a_at, dtype=float)[idx]
        mb = np.asarray(b_at, dtype=float)[idx]
        if self.swapped:
            ma, mb = mb, ma
        rel, ab = self.mass_relative_error, self.mass_absolute_error
        cells = np.concatenate([np.arange(l, h + 1) for l, h in zip(lo.tolist(), hi.tolist())])
        reps = hi - lo + 1
        ea, eb = np.array(out[2], dtype=float), np.array(out[3], dtype=float)
        np.add.at(ea, cells, np.repeat((ma * (1.0 + rel) + ab) * (1.0 + 4 * _U), reps))
        np.add.at(eb, cells, np.repeat((mb * (1.0 + rel) + ab) * (1.0 + 4 * _U), reps))
        out[2], out[3] = ea * (1.0 + 4 * _U), eb * (1.0 + 4 * _U)

    def loss_range(self, tail: float) -> Tuple[float, float]:
        """Loss interval outside which less than ``tail`` of the relevant mass lies."""
        lo, hi = self._loss_range(tail)
        if self.swapped:
            lo, hi = -hi, -lo
        return lo, hi

    def loss_spread(self, reach: float) -> float:
        """A-weighted standard deviation of the finite loss (sizes the leaf spacing)."""
        return self.loss_probe(reach)[0]

    def loss_probe(self, reach: float):
        """(``loss_spread``, ((mean, sd) of the finite loss under A, (mean, sd) under
        B)), from one set of masses on a 4,001-point grid across ``reach``: the spread
        sizes the leaf spacing, the moments predict a composition's loss ranges
        (``Composer.predicted_spans``).  Estimates, uncertified: nothing certified
        reads them."""
        step = reach / 2000.0
        t = np.arange(-2000, 2001) * step
        a, b = self._sizing_masses(t, with_b=True)
        mids = np.concatenate(([t[0]], t[:-1] + 0.5 * step, [t[-1]]))
        moments = []
        for masses in (a, b):
            w = masses / max(masses.sum(), 1e-300)
            mean = float(np.einsum("i,i->", w, mids))
            moments.append((mean, float(math.sqrt(max(
                float(np.einsum("i,i->", w, (mids - mean) ** 2)), 0.0)))))
        return moments[0][1], tuple(moments)

    def mirrored(self) -> "MechanismPair":
        """The same pair with A and B exchanged (the other neighbouring direction)."""
        import dataclasses
        return dataclasses.replace(self, swapped=not self.swapped)

    def loss_bounds(self) -> Tuple[float, float]:
        """(lo, hi), certified, in this orientation: every outcome A can produce has a
        privacy loss of at most hi, every outcome B can produce one of at least lo.  Then
        delta of A||B is 0 from epsilon hi on and delta of B||A from -lo on: a history
        of such pairs is pure DP (``engine.history_loss_cap``).  (-inf, inf) where the
        loss is unbounded or no bound is derived (the default)."""
        return -math.inf, math.inf

    def has_loss_atoms(self) -> bool:
        """True where some finite loss value has positive probability (randomized
        response, Laplace's capped loss): the grouped leaf then groups events around the
        grid points (``GroupedBuckets.leaves``)."""
        losses, a, b = self._atoms()
        losses = np.asarray(losses, dtype=float)
        return bool(np.any(np.isfinite(losses)
                           & ((np.asarray(a, dtype=float) > 0) | (np.asarray(b, dtype=float) > 0))))

    def infinity_masses(self) -> Tuple[float, float]:
        """(A-mass with L = +inf, B-mass with L = -inf) in this orientation."""
        losses, a, b = self._atoms()
        losses = np.asarray(losses, dtype=float)
        pos = float(np.sum(np.asarray(a)[losses == np.inf]))
        neg = float(np.sum(np.asarray(b)[losses == -np.inf]))
        if self.swapped:
            pos = float(np.sum(np.asarray(b)[losses == -np.inf]))
            neg = float(np.sum(np.asarray(a)[losses == np.inf]))
        return pos, neg


@dataclass(frozen=True)
class SubsampledGaussian(MechanismPair):
    """One DP-SGD step: Poisson sampling with rate q, Gaussian noise sigma (paper §5.4).

    remove direction (default): A = (1-q) N(0, s^2) + q N(1, s^2), B = N(0, s^2);
    ``mirrored()`` gives the add direction.  The loss
    L(x) = log(1 - q + q exp((2x - 1) / (2 s^2))) is increasing in x, so each loss
    interval is an x-interval with end points x(t) = s^2 log((e^t - (1-q)) / q) + 1/2.
    """

    noise_multiplier: float
    sample_rate: float
    swapped: bool = False

    def __post_init__(self):
        # a pair needs a real Gaussian: sigma = 0 is DiscretePair((1-q, q), (1, 0)), which
        # the accountant builds itself (step_pair); q = 0 is no pair at all
        store_floats(self,
                     noise_multiplier=check_noise_multiplier(self.noise_multiplier,
                                                             allow_zero=False),
                     sample_rate=check_sample_rate(self.sample_rate, allow_zero=False))

    def _x_of_loss(self, t, _inner=None):
        """End point x(t); ``_inner``: ``_inner_parts(t)`` if already computed."""
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        if q == 1.0:
            return s2 * t + 0.5
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inner = (self._inner_parts(t) if _inner is None else _inner)[0]
            x = s2 * inner + 0.5
        return np.where(t <= math.log1p(-q), -np.inf, x)

    def _inner(self, t):
        """log((e^t - (1-q)) / q): log1p(expm1(t) / q) (no subtraction of log q, whose
        rounding would cost u |log q| at every end point), and for t > 30, where
        expm1(t) / q could overflow, t - log q + log1p((q-1) e^{-t})."""
        return self._inner_parts(t)[0]

    def _inner_parts(self, t):
        """(``_inner(t)``, expm1(t) / q with t > 30 read as 0): the second is reused by
        ``_x_error``."""
        q = self.sample_rate
        big = t > 30.0
        small_t = np.where(big, 0.0, t)
        y_raw = np.expm1(small_t) / q
        y = np.maximum(y_raw, -1.0)
        return np.where(big, t - math.log(q) + np.log1p((q - 1.0) * np.exp(-np.where(big, t, 30.0))),
                        np.log1p(y)), y_raw

    def _loss_of_x(self, x):
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        z = (2.0 * x - 1.0) / (2.0 * s2)
        if q == 1.0:
            return z
        return np.logaddexp(math.log1p(-q), math.log(q) + z)

    def _continuous(self, t):
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _x_error(self, t, x, _inner=None):
        """Bound on |x(t) computed - x(t)| (the end points' own round-off), from the
        condition of each step of ``_x_of_loss`` with exp/expm1/log/log1p good to one
        ulp and 2u of room per step (docs/floating-point.md); ``_inner``:
        ``_inner_parts(t)`` if already computed."""
        u = _U
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        ax = np.abs(np.where(np.isfinite(x), x, 0.0))
        if q == 1.0:
            return 4.0 * u * (s2 * np.abs(t) + ax)
        lq = abs(math.log(q))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            big = t > 30.0
            raw, y = self._inner_parts(t) if _inner is None else _inner
            inner = np.abs(raw)
            # t <= 30: y = expm1(t) / q carries 3u (expm1, the division), log1p turns
            # that into 3u |y| / (1 + y) and adds its own ulp; t > 30: each of the
            # three terms and two sums costs an ulp of t + |log q| + 1
            d_small = 3.03 * u * np.abs(y) / (1.0 + y) + 2.0 * u * inner
            d_big = 4.0 * u * (np.abs(t) + lq + 1.0)
            dinner = np.where(big, d_big, d_small)
            dx = (s2 * (dinner + 2.0 * u * inner) + 2.0 * u * ax) * 1.01
        return np.where(np.isfinite(x), dx, 0.0)

    def _inner_once(self, t):
        """``_inner_parts(t)`` where the end points need it (q < 1), else None."""
        if self.sample_rate == 1.0:
            return None
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._inner_parts(t)

    def _continuous_masses(self, t, interval_mass=normal_interval_mass):
        """The masses of ``_continuous_with_error`` without their error bounds."""
        s = self.noise_multiplier
        q = self.sample_rate
        x = np.concatenate(([-np.inf], self._x_of_loss(t), [np.inf]))
        x = np.maximum.accumulate(x)
        n = len(x) - 1
        both = interval_mass(np.concatenate((x[:-1] / s, (x[:-1] - 1.0) / s)),
                             np.concatenate((x[1:] / s, (x[1:] - 1.0) / s)))
        b, a1 = both[:n], both[n:]
        if q == 1.0:
            return a1, b
        return (1.0 - q) * b + q * a1, b

    def _continuous_sizing_masses(self, t):
        return self._continuous_masses(t, _sizing_interval_mass)

    def _continuous_with_error(self, t):
        s = self.noise_multiplier
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        inner = self._inner_once(t)
        xt = self._x_of_loss(t, inner)
        dx = np.concatenate(([0.0], self._x_error(t, xt, inner), [0.0]))
        x = np.concatenate(([-np.inf], xt, [np.inf]))
        x = np.maximum.accumulate(x)  # guards against rounding making it non-monotone
        z0l, z0h = x[:-1] / s, x[1:] / s
        z1l, z1h = (x[:-1] - 1.0) / s, (x[1:] - 1.0) / s
        b, e0 = normal_interval_mass_and_error(z0l, z0h)
        a1, e1 = normal_interval_mass_and_error(z1l, z1h)
        # events within the end points' error may belong to the neighbouring bucket:
        # their mass joins each bucket's error (z = x / s adds its own rounding)
        ax = np.abs(np.where(np.isfinite(x), x, 0.0))
        dz0 = (dx / s + 4.0 * _U * ax / s) * 1.01
        dz1 = ((dx + 2.0 * _U * (ax + 1.0)) / s + 4.0 * _U * (ax + 1.0) / s) * 1.01
        m0 = endpoint_mass(x / s, dz0)
        with np.errstate(invalid="ignore"):
            m1 = endpoint_mass((x - 1.0) / s, dz1)
        eb = e0 + m0[:-1] + m0[1:]
        ea1 = e1 + m1[:-1] + m1[1:]
        if q == 1.0:
            return a1, b, ea1, eb
        a = (1.0 - q) * b + q * a1
        return a, b, (1.0 - q) * eb + q * ea1 + 2 * _U * a, eb

    def _continuous_with_displacement(self, t):
        """Masses of the x-intervals between the computed end points (exact event sets,
        ``normal_x_interval_mass``); each end point's round-off dx moves its loss by at
        most dx / s^2 (dL/dx <= 1 / s^2)."""
        s = self.noise_multiplier
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        inner = self._inner_once(t)
        xt = self._x_of_loss(t, inner)
        x, dx = _monotone_end_points(np.concatenate(([-np.inf], xt, [np.inf])),
                                     np.concatenate(([0.0], self._x_error(t, xt, inner),
                                                     [0.0])))
        shift = dx[1:-1] / (s * s) * 1.01
        if q < 1.0:
            shift = np.where(_near_the_least_loss(t, q, np.isneginf(x[1:-1])),
                             shift + 4.0 * _U * (np.abs(t) + 1.0), shift)
        (b, a1), (eb, ea1) = normal_x_interval_masses(x, (0.0, 1.0), s)
        if q == 1.0:
            return a1, b, ea1, eb, shift
        a = (1.0 - q) * b + q * a1
        return a, b, (1.0 - q) * eb + q * ea1 + 2 * _U * a, eb, shift

    def _loss_range(self, tail):
        z = float(-special.ndtri(max(tail, 1e-300)))
        s = self.noise_multiplier
        hi = float(self._loss_of_x(1.0 + s * z))
        lo = float(self._loss_of_x(-s * z))
        return lo, hi


#: largest sensitivity, and sensitivity / sigma, of the Gaussian mechanism (their squares
#: stay finite with room for the grid's arithmetic)
MAX_SENSITIVITY = 1e100


@dataclass(frozen=True)
class Gaussian(MechanismPair):  # noqa: D101 - documented below
    """Gaussian mechanism: A = N(sensitivity, sigma^2), B = N(0, sigma^2) (paper §5.2).

    With ``truncation`` T both are truncated to mean +- T and renormalised; outcomes only
    one of them can produce have loss +-inf.
    """

    sigma: float
    sensitivity: float = 1.0
    truncation: "float | None" = None
    swapped: bool = False

    def __post_init__(self):
        store_floats(self, sigma=check_real("sigma", self.sigma, low=MIN_NOISE * 1e-6,
                                            high=MAX_NOISE * 1e6))
        # sensitivity^2 and (sensitivity / sigma)^2 stay finite (the loss grid and the
        # end points square them)
        store_floats(self, sensitivity=check_real("sensitivity", self.sensitivity, low=0.0,
                                                  low_open=True, high=MAX_SENSITIVITY))
        check_real("sensitivity / sigma", self.sensitivity / self.sigma,
                   high=MAX_SENSITIVITY)
        if self.truncation is not None:
            store_floats(self, truncation=check_real("truncation", self.truncation,
                                                     low=self.sensitivity, low_open=True))

    def _norm(self):
        if self.truncation is None:
            return 1.0
        z = self.truncation / self.sigma
        return float(normal_interval_mass(-z, z))

    def _norm_relative_error(self) -> float:
        """Relative error bound of Z = P(|X| <= T) and of dividing by it: the mass's
        ``normal_interval_error`` over Z, the rounding of z = T / sigma (the mass within
        u z of each end, 2 u z phi(z) / Z <= u) and the division (u)."""
        if self.truncation is None:
            return 0.0
        z = self.truncation / self.sigma
        Z = self._norm()
        return float(normal_interval_error(-z, z, Z)) / Z * 1.001 + 3.0 * _U

    @property
    def mass_relative_error(self) -> float:
        """Truncated: the larger of the two atoms' relative error bounds (their interval
        masses' ``normal_interval_error`` and the mass within their end points' two
        roundings, ``endpoint_mass``) plus Z's; untruncated there are no atoms."""
        if self.truncation is None:
            return 0.0
        s, T, sd = self.sensitivity, self.truncation, self.sigma
        zl = np.array([-T / sd, (T - s) / sd])
        zh = np.array([(s - T) / sd, T / sd])
        m, err = normal_interval_mass_and_error(zl, zh)
        err = (err + endpoint_mass(zl, 2.02 * _U * np.abs(zl))
               + endpoint_mass(zh, 2.02 * _U * np.abs(zh)))
        ratio = np.where(m > 0, err / np.where(m > 0, m, 1.0), 0.0)
        return float(np.max(ratio)) * 1.001 + self._norm_relative_error() + 2.0 * _U

    @property
    def mass_absolute_error(self) -> float:
        """Truncated: atoms that underflowed to 0 (their bounds' absolute terms, over Z)."""
        return 0.0 if self.truncation is None else 16.0 * UNDERFLOW_FLOOR

    def _atoms(self):
        if self.truncation is None:
            return super()._atoms()
        s, T, sd = self.sensitivity, self.truncation, self.sigma
        Z = self._norm()
        # B-only outcomes x in [-T, s-T) and A-only outcomes x in (T, s+T]
        only_b = float(normal_interval_mass(-T / sd, (s - T) / sd)) / Z
        only_a = float(normal_interval_mass((T - s) / sd, T / sd)) / Z
        return np.array([-np.inf, np.inf]), np.array([0.0, only_a]), np.array([only_b, 0.0])

    def _continuous(self, t):
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _continuous_sizing_masses(self, t):
        s, sd = self.sensitivity, self.sigma
        x = (sd * sd * np.asarray(t, dtype=float) + 0.5 * s * s) / s
        x = np.concatenate(([-np.inf], x, [np.inf]))
        if self.truncation is not None:
            x = np.clip(x, s - self.truncation, self.truncation)
        Z = self._norm()
        b = _sizing_interval_mass(x[:-1] / sd, x[1:] / sd)
        a = _sizing_interval_mass((x[:-1] - s) / sd, (x[1:] - s) / sd)
        return a / Z, b / Z

    def _continuous_with_error(self, t):
        s, sd = self.sensitivity, self.sigma
        x = (sd * sd * np.asarray(t, dtype=float) + 0.5 * s * s) / s
        x = np.concatenate(([-np.inf], x, [np.inf]))
        if self.truncation is not None:
            T = self.truncation
            x = np.clip(x, s - T, T)
        Z = self._norm()
        zb = (x[:-1] / sd, x[1:] / sd)
        za = ((x[:-1] - s) / sd, (x[1:] - s) / sd)
        b, eb_mass = normal_interval_mass_and_error(*zb)
        a, ea_mass = normal_interval_mass_and_error(*za)
        rel_z = self._norm_relative_error()
        # events within the end points' round-off (six roundings of x, then the
        # standardisation) may belong to the neighbouring bucket: their mass joins both
        # buckets' errors (the split pair and the groups use displaced borders instead,
        # ``_continuous_with_displacement``)
        t = np.asarray(t, dtype=float)
        ax = np.abs(np.where(np.isfinite(x), x, 0.0))
        dx = np.concatenate(([0.0], 6.0 * _U * (sd * sd * np.abs(t) + 0.5 * s * s) / s, [0.0]))
        dzb = (dx + 3.0 * _U * ax) / sd * 1.01
        dza = (dx + 3.0 * _U * (ax + s)) / sd * 1.01
        with np.errstate(invalid="ignore"):
            mb = endpoint_mass(x / sd, dzb)
            ma = endpoint_mass((x - s) / sd, dza)
        return (a / Z, b / Z,
                (ea_mass + ma[:-1] + ma[1:]) / Z + rel_z * a,
                (eb_mass + mb[:-1] + mb[1:]) / Z + rel_z * b)

    def _continuous_with_displacement(self, t):
        """Masses of the x-intervals between the computed end points (exact event sets);
        an end point's round-off dx moves its loss by dx s / sigma^2."""
        s, sd = self.sensitivity, self.sigma
        t = np.asarray(t, dtype=float)
        xt = (sd * sd * t + 0.5 * s * s) / s
        # five roundings, each at most u of |sigma^2 t| + s^2 / 2, then the division
        dxt = 6.0 * _U * (sd * sd * np.abs(t) + 0.5 * s * s) / s * 1.01
        x = np.concatenate(([-np.inf], xt, [np.inf]))
        if self.truncation is not None:
            T = self.truncation
            x = np.clip(x, s - T, T)       # clipping only moves end points inwards
        x, dx = _monotone_end_points(x, np.concatenate(([0.0], dxt, [0.0])))
        shift = dx[1:-1] * s / (sd * sd) * 1.01
        Z = self._norm()
        (b, a), (eb, ea) = normal_x_interval_masses(x, (0.0, s), sd)
        rel_z = self._norm_relative_error()
        return a / Z, b / Z, ea / Z + rel_z * a, eb / Z + rel_z * b, shift

    def _loss_range(self, tail):
        z = float(-special.ndtri(max(tail, 1e-300)))
        s, sd = self.sensitivity, self.sigma
        hi = (s * (s + sd * z) - 0.5 * s * s) / (sd * sd)
        if self.truncation is not None:
            hi = min(hi, (s * self.truncation - 0.5 * s * s) / (sd * sd))
        return -hi, hi


@dataclass(frozen=True)
class Laplace(MechanismPair):
    """Laplace mechanism: A = Lap(sensitivity, scale), B = Lap(0, scale) (paper §5.1).

    The loss is -eps0 left of 0, linear in between, +eps0 right of the sensitivity
    (eps0 = sensitivity / scale).  With ``truncation`` T each is truncated to its
    mean +- T and renormalised.
    """

    scale: float
    sensitivity: float = 1.0
    truncation: "float | None" = None
    swapped: bool = False
    #: the atoms (and the truncated pair's far atoms) may underflow
    mass_absolute_error = 4 * UNDERFLOW_FLOOR

    def __post_init__(self):
        store_floats(self, scale=check_real("scale", self.scale, low=0.0, low_open=True),
                     sensitivity=check_real("sensitivity", self.sensitivity, low=0.0,
                                            low_open=True))
        if self.truncation is not None:
            store_floats(self, truncation=check_real("truncation", self.truncation,
                                                     low=self.sensitivity, low_open=True))
        if not math.isfinite(self.sensitivity / self.scale):
            # (a subnormal scale: eps0 = inf made every mass NaN, an internal error)
            raise ValueError(f"scale must be > 0 with sensitivity / scale finite, got "
                             f"scale={self.scale!r}, sensitivity={self.sensitivity!r}")

    @property
    def epsilon0(self) -> float:
        return self.sensitivity / self.scale

    @property
    def mass_relative_error(self) -> float:
        """Every mass is of an interval whose nearer end lies within eps0 scales of its
        mean (max(eps0, T / scale) truncated; ``laplace_relative_error``); dividing by
        the normalisation Z = 1 - e^{-T/scale} adds 4u, the atoms' sums 4u more."""
        reach = self.epsilon0 if self.truncation is None else max(self.epsilon0,
                                                                  self.truncation / self.scale)
        return float(laplace_relative_error(reach * 1.001)) + 8.0 * _U

    def _cdf_mass(self, lo, hi, mean):
        """Laplace(mean, scale) mass of (lo, hi] (``laplace_interval_mass``)."""
        return laplace_interval_mass(lo, hi, mean, self.scale)

    def _bounds(self):
        s = self.sensitivity
        if self.truncation is None:
            return -np.inf, np.inf, 1.0
        T = self.truncation
        Z = float(-np.expm1(-T / self.scale))
        return s - T, T, Z  # common support [s-T, T]; outside it one side is zero

    def _atoms(self):
        s = self.sensitivity
        lo, hi, Z = self._bounds()
        e0 = self.epsilon0
        a_left = float(self._cdf_mass(lo, 0.0, s)) / Z
        b_left = float(self._cdf_mass(lo, 0.0, 0.0)) / Z
        a_right = float(self._cdf_mass(s, hi, s)) / Z
        b_right = float(self._cdf_mass(s, hi, 0.0)) / Z
        losses = [-e0, e0]
        a = [a_left, a_right]
        b = [b_left, b_right]
        if self.truncation is not None:
            T = self.truncation
            losses += [-np.inf, np.inf]
            a += [0.0, float(self._cdf_mass(T, s + T, s)) / Z]
            b += [float(self._cdf_mass(-T, s - T, 0.0)) / Z, 0.0]
        return np.array(losses), np.array(a), np.array(b)

    def _atom_loss_side(self, i: int, v: float):
        """Exact: the atoms' losses +-sensitivity / scale are rational (``fractions``)."""
        from fractions import Fraction
        if i > 1:
            return None                                  # the +-inf atoms never straddle
        e0 = Fraction(self.sensitivity) / Fraction(self.scale)
        d = (e0 if i == 1 else -e0) - Fraction(v)
        return 1 if d > 0 else (-1 if d < 0 else 0)

    def _atom_loss_error(self, losses) -> np.ndarray:
        """The atoms at +-eps0: eps0 = sensitivity / scale is one correctly rounded
        division, within u eps0 of the exact loss (the densities' ratio beyond the
        sensitivity, also truncated: both normalisations are the same Z); the truncated
        pair's atoms at +-inf are exact."""
        losses = np.asarray(losses, dtype=float)
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(losses), _U * np.abs(losses) * 1.01, 0.0)

    def _continuous(self, t):
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _end_points(self, t):
        """(x, dx): 0, the outcomes (b t + s) / 2 of the losses ``t`` clipped to [0, s],
        then s; and bounds on their round-off (three roundings; an end point clipped by
        more than its round-off is exact, dx 0)."""
        s, b = self.sensitivity, self.scale
        t = np.asarray(t, dtype=float)
        raw = (b * t + s) / 2.0
        d = 3.0 * _U * (b * np.abs(t) + s) / 2.0 * 1.01
        inside = (raw > -d) & (raw < s + d)
        return (np.concatenate(([0.0], np.clip(raw, 0.0, s), [s])),
                np.concatenate(([0.0], np.where(inside, d, 0.0), [0.0])))

    def _masses(self, x):
        """A- and B-masses of the intervals between the points ``x`` (normalised)."""
        _, _, Z = self._bounds()
        s = self.sensitivity
        return self._cdf_mass(x[:-1], x[1:], s) / Z, self._cdf_mass(x[:-1], x[1:], 0.0) / Z

    def _continuous_with_error(self, t):
        b = self.scale
        _, _, Z = self._bounds()
        x, dx = self._end_points(t)
        # open interval (0, s): the end atoms are counted in _atoms
        ma, mb = self._masses(x)
        # events within an end point's round-off (three roundings of (b t + s) / 2) may
        # belong to the neighbouring bucket: both densities are at most 1 / (2 b Z)
        edge = 2.0 * dx / (2.0 * b * Z) * 1.001 + UNDERFLOW_FLOOR
        rel = self.mass_relative_error
        return ma, mb, rel * ma + edge[:-1] + edge[1:], rel * mb + edge[:-1] + edge[1:]

    def loss_bounds(self) -> Tuple[float, float]:
        """-+eps0 (either orientation): the loss is -eps0 left of 0 and +eps0 right of
        the sensitivity, linear between; eps0 = sensitivity / scale rounded up, from the
        exact quotient.  Truncated, the supports differ (A reaches T + sensitivity, B
        -T): losses of -+inf, unbounded."""
        if self.truncation is not None:
            return -math.inf, math.inf
        from fractions import Fraction
        e0 = Fraction(self.sensitivity) / Fraction(self.scale)
        up = float(e0)
        if Fraction(up) < e0:
            up = math.nextafter(up, math.inf)
        return -up, up

    def _continuous_with_displacement(self, t):
        """Masses of the x-intervals between the computed end points (exact event sets;
        relative error only).  The loss (2x - s) / b, extended linearly beyond (0, s), is
        2/b-Lipschitz, so an end point's round-off d moves its loss by at most 2d / b;
        an end point clipped to 0 or s (its exact x(t) outside (0, s)) bounds a set whose
        losses all lie on one side of t.  (``_continuous_with_error`` charges the mass
        within d of each end point instead, at the densities' maximum 1 / (2b): at a loss
        near -eps0 that is e^{eps0} times the A-mass there, and the split leaf passes it
        on to the B row times e^{eps0}, which kept every delta below about
        1e-13 e^{eps0} from an upper bound.)"""
        x, dx = _monotone_end_points(*self._end_points(t))
        shift = dx[1:-1] * (2.0 / self.scale) * 1.01
        # open interval (0, s): the end atoms are counted in _atoms
        ma, mb = self._masses(x)
        rel = self.mass_relative_error
        floor = 2.0 * UNDERFLOW_FLOOR
        return ma, mb, rel * ma + floor, rel * mb + floor, shift

    def _loss_range(self, tail):
        return -self.epsilon0, self.epsilon0


@dataclass(frozen=True)
class DiscretePair(MechanismPair):
    """A pair of histograms over the same events (paper §4.6, e.g. CoverUp's timings).

    Events with P_B = 0 < P_A are distinguishing events (loss +inf, the infinity
    bucket); events with P_A = 0 < P_B have loss -inf.
    """

    probabilities_a: Tuple[float, ...]
    probabilities_b: Tuple[float, ...]
    swapped: bool = False

    def __post_init__(self):
        a = np.asarray(self.probabilities_a, dtype=float)
        b = np.asarray(self.probabilities_b, dtype=float)
        if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape or a.size == 0:
            raise ValueError(
                "probabilities_a and probabilities_b must be non-empty 1-D sequences of the "
                f"same length, got shapes {a.shape} and {b.shape}")
        for name, p in (("probabilities_a", a), ("probabilities_b", b)):
            if not np.all(np.isfinite(p)) or np.any(p < 0):
                raise ValueError(f"{name} must be finite and >= 0, got {p.tolist()!r}")
            total = math.fsum(p.tolist())
            if abs(total - 1.0) > 1e-9:
                raise ValueError(f"{name} must sum to 1 (within 1e-9), got sum {total!r}")
        object.__setattr__(self, "probabilities_a", tuple(float(v) for v in a))
        object.__setattr__(self, "probabilities_b", tuple(float(v) for v in b))

    def _atoms(self):
        a = np.asarray(self.probabilities_a)
        b = np.asarray(self.probabilities_b)
        keep = (a > 0) | (b > 0)
        a, b = a[keep], b[keep]
        with np.errstate(divide="ignore"):
            losses = np.log(a) - np.log(b)
        return losses, a, b

    def _atom_loss_side(self, i: int, v: float):
        """ln(a) - ln(b) - v in 60-digit ``decimal`` arithmetic (ln correctly rounded, the
        doubles converted exactly): each of the three terms and two differences is off by
        at most 1e-59 of the magnitudes, so a difference beyond 1e-50 of them is decided
        (log(a / b) = v exactly only for a = b, v = 0: a rational e^v needs v = 0)."""
        from decimal import Context, Decimal
        a = np.asarray(self.probabilities_a)
        b = np.asarray(self.probabilities_b)
        keep = (a > 0) | (b > 0)
        ai, bi = float(a[keep][i]), float(b[keep][i])
        if ai == 0.0 or bi == 0.0:
            return None
        ctx = Context(prec=60)
        la, lb, dv = ctx.ln(Decimal(ai)), ctx.ln(Decimal(bi)), Decimal(v)
        d = ctx.subtract(ctx.subtract(la, lb), dv)
        margin = ctx.multiply(Decimal("1e-50"), abs(la) + abs(lb) + abs(dv) + 1)
        return 1 if d > margin else (-1 if d < -margin else None)

    def _atom_loss_error(self, losses) -> np.ndarray:
        """log(a) - log(b) of the (exact, double) probabilities: each log within one ulp,
        2u |log p|, and the difference rounded, u |L| (with 1% of room for taking the
        computed values' magnitudes); equal probabilities give exactly 0, an event one
        side cannot produce exactly +-inf."""
        a = np.asarray(self.probabilities_a)
        b = np.asarray(self.probabilities_b)
        keep = (a > 0) | (b > 0)
        a, b = a[keep], b[keep]
        finite = (a > 0) & (b > 0) & (a != b)
        la = np.log(np.where(finite, a, 1.0))
        lb = np.log(np.where(finite, b, 1.0))
        return np.where(finite, (2.0 * _U * (np.abs(la) + np.abs(lb)) + _U * np.abs(la - lb))
                        * 1.01, 0.0)

    def loss_bounds(self) -> Tuple[float, float]:
        """The largest loss of an event A can produce (inf for a distinguishing event)
        and the least of one B can produce, each widened by its round-off
        (``_atom_loss_error``) and rounded outward; the probabilities are exact, so an
        event of probability 0 is impossible.  A subclass, whose masses may be
        approximations (a mass stored as 0 need not be 0), gets none unless it derives
        its own."""
        if type(self) is not DiscretePair:
            return super().loss_bounds()
        return self._certified_loss_bounds()

    def _certified_loss_bounds(self) -> Tuple[float, float]:
        """``loss_bounds`` of the stored masses as the exact ones (no mass stored as 0
        may be positive), each atom's loss widened by ``_atom_loss_error``."""
        losses, a, b = self._atoms()
        err = self._atom_loss_error(losses)
        hi = float(np.max(np.nextafter(losses[a > 0] + err[a > 0], np.inf)))
        lo = float(np.min(np.nextafter(losses[b > 0] - err[b > 0], -np.inf)))
        return (-hi, -lo) if self.swapped else (lo, hi)

    def loss_spread(self, reach: float) -> float:
        return self.loss_probe(reach)[0]

    def loss_probe(self, reach: float):
        """Exact moments of the finite atoms (see ``MechanismPair.loss_probe``); the
        spread is the unmirrored pair's A-weighted one in either orientation (as it
        always was: it only sizes the leaf spacing)."""
        losses, a, b = self._atoms()
        moments = [_atom_moments(losses, a), _atom_moments(losses, b)]
        spread = moments[0][1]
        if self.swapped:
            moments = [(-mean, sd) for mean, sd in moments[::-1]]
        return spread, tuple(moments)

    def _loss_range(self, tail):
        losses, _, _ = self._atoms()
        finite = losses[np.isfinite(losses)]
        if finite.size == 0:
            return 0.0, 0.0
        return float(finite.min()), float(finite.max())


def _atom_moments(losses, masses) -> Tuple[float, float]:
    """(mean, sd) of the finite losses weighted by ``masses`` ((0, 0) if none)."""
    keep = np.isfinite(losses) & (masses > 0)
    if not np.any(keep):
        return 0.0, 0.0
    w = masses[keep] / masses[keep].sum()
    mean = float(w @ losses[keep])
    return mean, float(math.sqrt(max(float(w @ (losses[keep] - mean) ** 2), 0.0)))


@functools.lru_cache(maxsize=64)
def _kary_masses(p: float, k: int):
    """The exact masses (Fractions) of k-ary randomized response's three events, the
    output being the first input's value, the second's, or another: 1 - p + p/k, p/k
    and p (k - 2)/k, of the double ``p``."""
    from fractions import Fraction
    q = Fraction(p)
    return 1 - q + q / k, q / k, q * (k - 2) / k


@dataclass(frozen=True)
class KaryRandomizedResponse(DiscretePair):
    """k-ary randomized response under replace-one (dp_accounting's
    ``RandomizedResponseDpEvent``): with probability ``noise_parameter`` p the output is
    uniform over ``num_buckets`` k values, else the true one.  Build it with
    :meth:`of`.

    The stored masses are the exact ones (``_kary_masses``) correctly rounded, so every
    bound is certified for the exact mechanism, not only for the stored doubles: each
    mass is within ``mass_relative_error`` of itself (2u; u for a correctly rounded
    double) plus ``mass_absolute_error`` (a subnormal's round-off), and each atom's loss
    error adds the exact distance between the stored and the exact loss.  A mass that
    would round to 0 (p / k at most 2^-1075) is refused: the stored pair would then
    have a distinguishing event the mechanism does not have."""

    noise_parameter: float = 1.0
    num_buckets: int = 2

    mass_relative_error = 2.0 * _U
    mass_absolute_error = 2.0 ** -1074

    @classmethod
    def of(cls, noise_parameter: float, num_buckets: int) -> "KaryRandomizedResponse":
        """The pair of p = ``noise_parameter`` in (0, 1] and k = ``num_buckets`` >= 2."""
        stay, other, rest = cls._stored_masses(noise_parameter, num_buckets)
        return cls((stay, other, rest), (other, stay, rest),
                   noise_parameter=float(noise_parameter), num_buckets=int(num_buckets))

    @staticmethod
    def _stored_masses(p, k) -> Tuple[float, float, float]:
        """The correctly rounded exact masses, after checking p and k."""
        p = check_real("noise_parameter", p, low=0.0, high=1.0, low_open=True)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
            raise ValueError(f"num_buckets must be an integer >= 2, got {k!r}")
        stay, other, rest = (float(m) for m in _kary_masses(p, int(k)))
        if other == 0.0:
            raise ValueError(f"noise_parameter / num_buckets must be above 2^-1075 (the "
                             f"mass p/k must not round to 0), got noise_parameter={p!r}, "
                             f"num_buckets={k!r}")
        return stay, other, rest

    def __post_init__(self):
        stay, other, rest = self._stored_masses(self.noise_parameter, self.num_buckets)
        if (tuple(self.probabilities_a), tuple(self.probabilities_b)) != (
                (stay, other, rest), (other, stay, rest)):
            raise ValueError("probabilities_a and probabilities_b must be the rounded masses "
                             "of noise_parameter and num_buckets (build the pair with "
                             "KaryRandomizedResponse.of)")
        super().__post_init__()

    def _exact_atoms(self):
        """The exact (A, B) masses of the atoms ``_atoms`` keeps, in its order."""
        stay, other, rest = _kary_masses(self.noise_parameter, self.num_buckets)
        atoms = [(stay, other), (other, stay), (rest, rest)]
        return atoms if rest else atoms[:2]

    def _atom_loss_error(self, losses) -> np.ndarray:
        """DiscretePair's (the stored doubles' log round-off) plus |ln R|, R the exact
        loss ratio over the stored one, bounded by |R - 1| / min(R, 1) in exact
        fractions and rounded up; the other event's loss stays exactly 0."""
        from fractions import Fraction
        base = super()._atom_loss_error(losses)
        stored = zip(self.probabilities_a, self.probabilities_b)
        extra = []
        for (ea, eb), (a, b) in zip(self._exact_atoms(), stored):
            ratio = (ea * Fraction(b)) / (eb * Fraction(a))
            bound = abs(ratio - 1) / min(ratio, Fraction(1))
            up = float(bound)
            extra.append(up if Fraction(up) >= bound else math.nextafter(up, math.inf))
        return np.nextafter(base + np.array(extra), np.inf)

    def _atom_loss_side(self, i: int, v: float):
        """The sign of atom i's exact loss ln(a/b) minus ``v``, the exact masses' ratio
        in 60-digit ``decimal`` arithmetic with DiscretePair's margin (exact for the
        other event, whose loss is 0)."""
        from decimal import Context, Decimal
        ea, eb = self._exact_atoms()[i]
        if ea == eb:
            return 0 if v == 0.0 else (1 if v < 0.0 else -1)
        ratio = ea / eb
        ctx = Context(prec=60)
        loss = ctx.ln(ctx.divide(Decimal(ratio.numerator), Decimal(ratio.denominator)))
        d = ctx.subtract(loss, Decimal(v))
        margin = ctx.multiply(Decimal("1e-50"), abs(loss) + abs(Decimal(v)) + 1)
        return 1 if d > margin else (-1 if d < -margin else None)

    def loss_bounds(self) -> Tuple[float, float]:
        """DiscretePair's: a mass stored as 0 is exactly 0 (the other event for k = 2),
        and ``_atom_loss_error`` covers the exact losses."""
        return self._certified_loss_bounds()


def RandomizedResponse(p: float) -> DiscretePair:
    """Randomized response with bias p (paper §5.5): A = (p, 1-p), B = (1-p, p)."""
    p = check_real("p", p, low=0.5, high=1.0, high_open=True)
    return DiscretePair((p, 1.0 - p), (1.0 - p, p))
