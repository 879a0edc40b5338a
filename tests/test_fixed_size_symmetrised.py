"""fixed_size under replace_one: the upper bound composes the symmetrised pair.

One step is C(f)-DP with C(f) = min(f, f^-1)** for f = T(P, Q), P = (1-g) N(0) + g N(2),
Q = N(0) (Dong, Roth, Su 2022; Zhu, Dong, Wang 2022): its hockey-stick curve is
max(delta_{P||Q}, delta_{Q||P}), delta_{P||Q} at eps >= 0, and the pair realising it
(P||Q's losses > 0, their mirror images, an atom at 0) is
``SymmetrisedSubsampledGaussian`` (``IntegerNoise.symmetrised`` for the brute-force
base).  Checked here: the pair's curve against closed forms, its composition against
exact rational values and brute force, its certified bracket's width, the symmetric run
that broke the pair alone, and the fallback where integer noise cannot be symmetrised.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import special

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.engine import compose_history, epsilon_bounds
from pb_accountant.mechanisms import SubsampledGaussian
from pb_accountant.sampled_pairs import SymmetrisedSubsampledGaussian
from pb_accountant.samplers import (FIXED_SIZE_MIRRORED_NOTE, FIXED_SIZE_REPLACE_NOTE,
                                    IntegerNoise, delta_bounds, own_mirror, sampled_pairs)

from test_samplers_bruteforce import (COMPOSER, EPSILONS, compose_atoms, noise_pmf,
                                      pld_atoms, worst_exact_delta)


def _gauss_hockey(mu: float, c: float) -> float:
    """H_c(N(mu, 1) || N(0, 1)) = H_c(N(0, 1) || N(mu, 1)), c >= 1 (closed form)."""
    lc = math.log(c)
    return (0.5 * special.erfc(-(mu / 2 - lc / mu) / math.sqrt(2))
            - c * 0.5 * special.erfc((mu / 2 + lc / mu) / math.sqrt(2)))


def _both_directions(s: float, q: float, eps: float):
    """(delta_{P||Q}, delta_{Q||P}) at eps >= 0 for P = (1-q) N(0, s^2) + q N(1, s^2),
    Q = N(0, s^2): q H_c(P'||Q'), c = 1 + (e^eps - 1)/q, and w H_{c2}(Q'||P'),
    w = 1 - e^eps (1-q), c2 = q e^eps / w (0 where w <= 0)."""
    u = math.exp(eps)
    ab = q * _gauss_hockey(1.0 / s, 1.0 + (u - 1.0) / q)
    w = 1.0 - u * (1.0 - q)
    ba = w * _gauss_hockey(1.0 / s, q * u / w) if w > 0 else 0.0
    return ab, ba


@pytest.mark.parametrize("s,q", [(0.5, 0.3), (0.3, 0.9), (2.0, 0.5), (0.5, 0.02)])
def test_one_step_is_the_larger_direction(s, q):
    """The pair's certified curve brackets max(delta_{P||Q}, delta_{Q||P}) = delta_{P||Q}
    at eps >= 0 (closed forms), tightly; the reverse direction is below it (the lemma
    of docs/method.md section 10), and the pair is its own mirror."""
    pair = SymmetrisedSubsampledGaussian(s, q)
    eps = np.array([0.0, 0.1, 0.5, 1.0, 2.0])
    db = epsilon_free_delta_bounds([(pair, 1)], eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        ab, ba = _both_directions(s, q, float(e))
        assert ab >= ba * (1 - 1e-12)
        assert lo <= ab * (1 + 1e-9) and up >= ab * (1 - 1e-9), (e, lo, up, ab)
        assert up <= ab * (1 + 2e-3) + 1e-12, (e, up, ab)
    mirror = epsilon_free_delta_bounds([(pair.mirrored(), 1)], eps)
    np.testing.assert_allclose(mirror.upper, db.upper, rtol=1e-9)
    assert own_mirror(pair)


def epsilon_free_delta_bounds(history, eps):
    return compose_history(COMPOSER, history, None, ("split", "grouped")).delta_bounds(eps)


def _exact_symmetrised(pmf, k, q, T):
    """Exact (rational) delta of T compositions of the symmetrised integer-noise pair,
    both directions, at EPSILONS."""
    S = IntegerNoise(pmf, -k).symmetrised(q, 2)
    assert S is not None and own_mirror(S)
    a = {i: Fraction(x) for i, x in enumerate(S.probabilities_a)}
    b = {i: Fraction(x) for i, x in enumerate(S.probabilities_b)}
    step = pld_atoms(a, b)
    atoms = {Fraction(1): (Fraction(1), Fraction(1))}
    for _ in range(T):
        atoms = compose_atoms(atoms, step)
    A = np.array([float(v[0]) for v in atoms.values()])
    B = np.array([float(v[1]) for v in atoms.values()])
    e = np.exp(EPSILONS)[:, None]
    return (np.maximum(A[None] - e * B[None], 0).sum(1),
            np.maximum(B[None] - e * A[None], 0).sum(1))


@pytest.mark.parametrize("n,b,k,c,T", [(3, 1, 1, 0.5, 1), (3, 2, 1, 0.5, 3), (4, 3, 2, 0.8, 1),
                                       (4, 3, 2, 0.8, 2), (3, 2, 2, 1.5, 2)])
def test_integer_noise_upper_is_the_symmetrised_composition(n, b, k, c, T):
    """Integer noise, exact rationals: the certified upper bound brackets the exact
    delta of the symmetrised pair's composition (within 0.1%), which holds the brute-force
    worst case over every dataset pair and equals it for one step (the pair is tight for
    one step); the mirrored product it replaces was above it."""
    pmf, q = noise_pmf(k, c), b / n
    ab, ba = _exact_symmetrised(pmf, k, q, T)
    np.testing.assert_allclose(ab, ba, rtol=1e-12)          # its own mirror
    brute = worst_exact_delta(n, "fixed_size", "replace_one", b, q, T, 0, 0, pmf, k)
    assert np.all(brute <= ab * (1 + 1e-9)), (brute, ab)
    if T == 1:
        np.testing.assert_allclose(brute, ab, rtol=1e-9)
    sp = sampled_pairs([(1.0, q, T)], "fixed_size", "replace_one", dataset_size=n,
                       batch_size=b, noise=lambda s: IntegerNoise(pmf, -k))
    assert FIXED_SIZE_REPLACE_NOTE in sp.notes and FIXED_SIZE_MIRRORED_NOTE not in sp.notes
    assert len(sp.upper) == 1
    lower, upper = delta_bounds(COMPOSER, sp, EPSILONS)
    assert np.all(upper >= ab * (1 - 1e-9)), (upper, ab)
    assert np.all(upper <= ab * (1 + 1e-3) + 1e-12), (upper, ab)
    assert np.all(lower <= brute * (1 + 1e-9))
    P = IntegerNoise(pmf, -k).subsampled(q, 2)
    old = compose_history(COMPOSER, [(P, T), (P.mirrored(), T)], None,
                          ("split",)).delta_bounds(EPSILONS).upper
    assert np.all(upper <= np.asarray(old) * (1 + 1e-9))


def test_integer_noise_without_order_falls_back_to_the_mirrored_product():
    """An asymmetric noise law (1/2, 1/4, 1/4) at g = 3/4: delta_{Q||P} exceeds
    delta_{P||Q} at some eps >= 0, so no symmetrised pair is formed and the pair is
    composed with its mirror, with a note.  (Only the structure is checked: for
    asymmetric noise the shift-2 pair is not the worst case of a step to begin with, the
    brute-force delta exceeds even the mirrored product at eps 2; the integer bases of
    the tests are symmetric, and production noise is Gaussian.)"""
    pmf, k, n, b, T = (0.5, 0.25, 0.25), 1, 4, 3, 2
    assert IntegerNoise(pmf, -k).symmetrised(b / n, 2) is None
    sp = sampled_pairs([(1.0, b / n, T)], "fixed_size", "replace_one", dataset_size=n,
                       batch_size=b, noise=lambda s: IntegerNoise(pmf, -k))
    assert FIXED_SIZE_MIRRORED_NOTE in sp.notes and len(sp.upper) == 2
    P = IntegerNoise(pmf, -k).subsampled(b / n, 2)
    assert sp.upper == ((P, T), (P.mirrored(), T))


def _symmetric_run_delta(g: float, sigmas, eps: float) -> float:
    """Exact delta (both directions equal) of the run whose steps are
    (1-g) N(0, s^2) + g N(1, s^2) vs (1-g) N(0, s^2) + g N(-1, s^2), two steps, by a
    2-D Riemann sum on a fine grid (error far below the margins checked)."""
    x = np.linspace(-14.0, 14.0, 5601)
    h = x[1] - x[0]

    def side(s, sign):
        phi = lambda m: np.exp(-0.5 * ((x - m) / s) ** 2) / (s * math.sqrt(2 * math.pi))
        return ((1 - g) * phi(0.0) + g * phi(sign)) * h

    (s1, s2) = sigmas
    a = np.outer(side(s1, 1.0), side(s2, 1.0))
    b = np.outer(side(s1, -1.0), side(s2, -1.0))
    return float(np.maximum(a - math.exp(eps) * b, 0.0).sum())


def test_holds_the_symmetric_run_that_broke_the_pair_alone():
    """n 10, b 9, sigma 1, two steps: the symmetric run's exact delta at eps 0 is 0.7763
    (the pair alone had certified 0.7709); the symmetrised upper bound holds it, below
    the mirrored product's."""
    exact = _symmetric_run_delta(0.9, (1.0, 1.0), 0.0)
    assert abs(exact - 0.776277) < 1e-5
    acc = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one",
                                   dataset_size=10, batch_size=9)
    acc.history = [(1.0, 0.9, 2)]
    upper = float(np.asarray(acc.get_delta_bounds(np.array([0.0])).upper)[0])
    assert upper >= exact
    P = SubsampledGaussian(0.5, 0.9)
    old = float(np.asarray(compose_history(COMPOSER, [(P, 2), (P.mirrored(), 2)], None,
                                           ("split",)).delta_bounds(np.array([0.0])).upper)[0])
    assert upper < old


@pytest.mark.parametrize("sigma,steps", [(1.0, 1960), (2.0, 19600), (0.8, 300)])
def test_gaussian_bracket_of_the_symmetrised_composition_is_tight(sigma, steps):
    """CIFAR-10-sized runs (n 50,000, b 256): the accountant's upper bound is the
    symmetrised pair's composition, whose own certified bracket is narrow (relative
    width < 1e-3), and it lies below the mirrored product's upper bound.  (The gap to
    the lower bound, the pair alone realised, is the symmetrisation's: no one-step
    dominating pair is tighter, and it is not realised by one dataset pair.)"""
    g = 256 / 50000
    acc = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one",
                                   dataset_size=50000, batch_size=256)
    acc.history = [(sigma, g, steps)]
    got = acc.get_epsilon_bounds(1e-5)
    own = epsilon_bounds([(SymmetrisedSubsampledGaussian(sigma / 2, g), steps)], 1e-5)
    # (the accountant composes the upper pairs once, without the adaptive refinement)
    assert own.lower <= got.upper <= own.upper * (1 + 1e-3)
    assert own.upper - own.lower <= 1e-3 * own.upper, own
    assert got.lower <= own.lower
    P = SubsampledGaussian(sigma / 2, g)
    old = epsilon_bounds([(P, steps), (P.mirrored(), steps)], 1e-5)
    assert own.upper < old.upper


def _exact_buckets(s, q, t):
    import mpmath
    with mpmath.workdps(80):
        A, B = _exact_buckets_at(s, q, t)
        return [float(v) for v in A], [float(v) for v in B]


def _exact_buckets_at(s, q, t):
    """S's exact A- and B-masses on the K+1 intervals of grid t (80-digit mpmath): the
    inner pair's x-intervals, x(l) = s^2 log((e^l - (1-q)) / q) + 1/2 for l > 0, mirrored
    below 0, and the atom at 0."""
    import mpmath
    s, q = mpmath.mpf(s), mpmath.mpf(q)

    def x_of(l):                     # l >= 0 (inf allowed)
        if l == mpmath.inf:
            return mpmath.inf
        return s ** 2 * mpmath.log((mpmath.e ** l - (1 - q)) / q) + mpmath.mpf(1) / 2

    def mass(xl, xh, m):             # N(m, s^2) mass of (xl, xh], upper tails direct
        zl, zh = (xl - m) / s, (xh - m) / s
        if zl >= 0:
            return mpmath.ncdf(-zl) - (mpmath.ncdf(-zh) if zh != mpmath.inf else 0)
        return mpmath.ncdf(zh) - mpmath.ncdf(zl)

    def inner(lo, hi):               # (A, B) masses of losses in (lo, hi], 0 <= lo < hi
        xl, xh = x_of(lo), x_of(hi)
        b = mass(xl, xh, 0)
        a = (1 - q) * b + q * mass(xl, xh, 1)
        return a, b

    edges = [-mpmath.inf] + [mpmath.mpf(float(v)) for v in t] + [mpmath.inf]
    atom = (1 - q) * (mpmath.ncdf(1 / (2 * s)) - mpmath.ncdf(-1 / (2 * s)))
    A, B = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        a = b = mpmath.mpf(0)
        if hi > 0:                                   # losses > 0
            pa, pb = inner(max(lo, mpmath.mpf(0)), hi)
            a, b = a + pa, b + pb
        if lo < 0:                                   # mirror images of losses in [-hi, -lo)
            pa, pb = inner(max(-hi, mpmath.mpf(0)), -lo)
            a, b = a + pb, b + pa
        if lo < 0 <= hi:
            a, b = a + atom, b + atom
        A.append(a)
        B.append(b)
    return A, B


@pytest.mark.parametrize("s,q,t", [
    (0.5, 0.3, np.linspace(-3.0, 3.0, 13)),
    (0.5, 0.02, np.array([-2.0, -0.7, -0.01, 0.003, 0.5, 0.51, 4.0])),
    (2.0, 0.5, np.array([-1.0, -0.25, 0.1, 0.2, 0.3, 1.5])),
    (0.3, 0.9, np.array([0.0, 1.0, 2.5])),
    (1.0, 1e-4, np.array([-5.0, -1e-5, 0.0, 1e-5, 3e-4, 6.0]))])
def test_bucket_masses_bracket_the_exact_masses(s, q, t):
    """Both orientations: the certified masses (error variant) lie within their error
    bounds of the exact masses, and the displaced ones within theirs of the exact masses
    of the sets between displaced borders (checked through the shifts: every shift is
    that of the inner pair's border |t_k|, 0 at t_k = 0)."""
    pair = SymmetrisedSubsampledGaussian(s, q)
    A, B = _exact_buckets(s, q, t)
    A, B = np.array(A), np.array(B)
    for p in (pair, pair.mirrored()):
        a, b, ea, eb = p.bucket_masses_with_error(t)
        assert np.all(np.abs(a - A) <= ea), (a - A, ea)
        assert np.all(np.abs(b - B) <= eb), (b - B, eb)
        a, b, ea, eb, sh = p.bucket_masses_with_displacement(t)
        assert np.all(sh >= 0) and np.all(sh[t == 0.0] == 0.0)
        # (the displaced sets differ from the exact intervals by events within sh of a
        # border: here the shifts are ulps, far below the grid's spacing, and the
        # masses agree with the exact ones within the errors plus 1e-12 relative)
        assert np.all(np.abs(a - A) <= ea + 1e-12 * A), (a - A, ea)
        assert np.all(np.abs(b - B) <= eb + 1e-12 * B), (b - B, eb)


def test_lower_pair_engine_limit_keeps_the_certified_upper_bound():
    """sigma 0.0664, g 0.0127, 392,983 steps: the lower pair's composition (the pair
    alone) reaches an engine limit (its grouped rows overflow at factor ~4e55) where the
    symmetrised upper composition does not.  The limit costs the lower bound only (0,
    with the reason and a warning): get_epsilon_bounds had answered [0, inf] while
    get_epsilon certified 2.39e6 (the two must agree), and get_delta_bounds [0, 1]."""
    acc = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one",
                                   dataset_size=10000, batch_size=127)
    acc.history = [(0.0664, 0.0127, 392983)]
    with pytest.warns(RuntimeWarning, match="could not certify the lower epsilon"):
        got = acc.get_epsilon_bounds(1e-5)
    assert math.isfinite(got.upper) and got.upper == acc.get_epsilon(1e-5)
    assert got.lower == 0.0 and any("engine limit" in n for n in got.notes)
    assert FIXED_SIZE_REPLACE_NOTE in got.notes
    with pytest.warns(RuntimeWarning, match="could not certify the lower delta"):
        db = acc.get_delta_bounds(np.array([3e6, 1e7]))
    assert np.all(np.asarray(db.lower) == 0.0)
    assert np.all(np.asarray(db.upper) < 1e-5), db.upper
    with pytest.warns(RuntimeWarning, match="could not certify the lower delta"):
        one = acc.get_delta_bounds(3e6)
    assert one.lower == 0.0 and one.upper == float(np.asarray(db.upper)[0])
