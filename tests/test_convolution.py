"""The certified FFT round-off bounds hold against exact convolutions.

``convolve_rows`` certifies |z_k - (x*y)_k| <= CONVOLUTION_RELATIVE_ERROR (x*y)_k plus an
absolute part of l1 norm <= err (docs/floating-point.md); ``beyond_relative`` measures
that absolute part exactly.
"""
from fractions import Fraction

import numpy as np
import pytest

from pb_accountant.convolution import (CONVOLUTION_RELATIVE_ERROR, convolution_l1_error,
                                       convolve_rows, fft_length)


def exact_convolution(x, y):
    """Exact rational convolution, rounded once to float."""
    fx = [Fraction(v) for v in x]
    fy = [Fraction(v) for v in y]
    out = [Fraction(0)] * (len(x) + len(y) - 1)
    for i, a in enumerate(fx):
        if a:
            for j, b in enumerate(fy):
                if b:
                    out[i + j] += a * b
    return out


def l1_distance(z, exact):
    return float(sum(abs(Fraction(float(v)) - e) for v, e in zip(z, exact)))


def beyond_relative(z, exact):
    """l1 norm of the part of z's error not covered by the relative allowance."""
    r = Fraction(CONVOLUTION_RELATIVE_ERROR)
    return float(sum(max(abs(Fraction(float(v)) - e) - r * e, Fraction(0))
                     for v, e in zip(z, exact)))


def vectors(rng, kind, m):
    if kind == "peaked":
        x = np.zeros(m)
        x[m // 2] = 0.9
        x[m // 2 + 1] = 0.1 - 1e-6
        x[rng.integers(0, m, 20)] += rng.random(20) * 1e-7
    elif kind == "spread":
        x = rng.random(m)
    elif kind == "dynamic":
        x = np.exp(-rng.random(m) * 60.0)        # masses from 1 down to 1e-26
    else:
        x = np.exp(-0.5 * ((np.arange(m) - m / 2) / (m / 10)) ** 2)
    return x / x.sum()


@pytest.mark.parametrize("kind", ["peaked", "spread", "dynamic", "gaussian"])
@pytest.mark.parametrize("m", [17, 200])
def test_certified_bound_holds(rng, kind, m):
    x = vectors(rng, kind, m)
    y = vectors(rng, "dynamic", m)
    for rows_y in (None, y[None, :]):
        z, err = convolve_rows(x[None, :], rows_y)
        exact = exact_convolution(x, x if rows_y is None else y)
        dist = beyond_relative(z[0], exact)
        assert dist <= err[0], (dist, err[0])
        assert err[0] < 1e-12


def test_plain_fft_bound_holds(rng):
    """The Higham-based bound for a plain FFT convolution (no hi/lo split)."""
    for kind in ("peaked", "spread", "dynamic"):
        x = vectors(rng, kind, 300)
        y = vectors(rng, "gaussian", 300)
        n = fft_length(300)
        z = np.fft.irfft(np.fft.rfft(x, n) * np.fft.rfft(y, n), n)[:599]
        exact = exact_convolution(x, y)
        dist = l1_distance(z, exact)
        bound = convolution_l1_error(n, np.abs(x).sum(), np.linalg.norm(x),
                                     np.abs(y).sum(), np.linalg.norm(y))
        assert dist <= bound


def test_hi_lo_split_is_much_tighter_than_plain_fft(rng):
    x = vectors(rng, "peaked", 2000)
    z, err = convolve_rows(x[None, :])
    n = fft_length(2000)
    plain = convolution_l1_error(n, 1.0, np.linalg.norm(x), 1.0, np.linalg.norm(x))
    assert err[0] < plain / 100


def test_zero_rows_and_scaling():
    x = np.zeros((2, 9))
    x[1, 4] = 1e-200
    z, err = convolve_rows(x)
    assert np.all(z[0] == 0) and err[0] == 0
    # 1e-200 squared is 1e-400, below the smallest subnormal (4.9e-324): it rounds to 0
    assert np.all(z[1] == 0.0)
    # scaled rows keep tiny products: 1e-150 squared is 1e-300 (normal), 1e-160 squared
    # is 1e-320 (subnormal, spacing 4.9e-324), each to its own precision
    for a, exact, slack in [(1e-150, 1e-300, 1e-12 * 1e-300), (1e-160, 1e-320, 4 * 5e-324)]:
        x[1, 4] = a
        z, err = convolve_rows(x)
        assert z[1, 8] > 0.0
        assert abs(z[1, 8] - exact) <= slack + err[1], (a, z[1, 8], err[1])
        assert np.all(np.abs(np.delete(z[1], 8)) <= slack + err[1])


@pytest.mark.parametrize("tolerance", [0.0, 1.0])
def test_two_and_three_way_splits_are_certified(rng, tolerance):
    """tolerance 0 forces the three-way split, 1 keeps the two-way one."""
    x = vectors(rng, "peaked", 150)
    y = vectors(rng, "dynamic", 150)
    for rows_y in (None, y[None, :]):
        z, err = convolve_rows(x[None, :], rows_y, tolerance)
        exact = exact_convolution(x, x if rows_y is None else y)
        assert beyond_relative(z[0], exact) <= err[0]


@pytest.mark.parametrize("tolerance", [0.0, 1e-30])
def test_tail_entries_near_1e_15_are_relatively_accurate(rng, tolerance):
    """A tail of ~1e-15 total mass keeps a relative error: the relative allowance is
    4u of each entry and the certified absolute part (the FFT's round-off on the small
    rest of the split) is far below the tail (compared with exact rational arithmetic).
    Before issue 12 the bound on this product was 8u ~ 1e-15 absolute, as large as
    the whole tail."""
    m = 120
    k = np.arange(m)
    x = np.exp(-0.5 * ((k - 20) / 4.0) ** 2) + 1e-14 * np.exp(-k / 30.0)
    x /= x.sum()
    z, err = convolve_rows(x[None, :], None, tolerance)
    exact = exact_convolution(x, x)
    assert beyond_relative(z[0], exact) <= err[0]
    tail = slice(100, 2 * m - 1)
    tail_exact = sum(exact[tail])
    assert 1e-16 < float(tail_exact) < 1e-13
    certified = float(err[0]) + CONVOLUTION_RELATIVE_ERROR * float(tail_exact)
    assert certified < 1e-5 * float(tail_exact)
    got = Fraction(float(np.sum(z[0, tail])))
    assert abs(got - tail_exact) <= Fraction(certified) + Fraction(1e-14) * tail_exact
