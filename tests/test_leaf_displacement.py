"""Leaf masses of exact event sets with displaced borders (docs/floating-point.md,
docs/method.md §4): the x-interval masses against mpmath, the displacement bound against
the exact loss of each computed end point, and the split pair's domination of buckets
whose events reach past their grid interval by up to the displacement."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pb_accountant import Gaussian, SubsampledGaussian
from pb_accountant.buckets import Grid, SplitBuckets, leaf_masses
from pb_accountant.composition import Composer
from pb_accountant.mechanisms import _monotone_end_points, normal_x_interval_mass

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 60


def _mp_mass(lo, hi, mean, scale):
    """Exact N(mean, scale^2) mass of the real interval (lo, hi] of two doubles."""
    zl = (mpmath.mpf(lo) - mean) / mpmath.mpf(scale) if math.isfinite(lo) else -mpmath.inf
    zh = (mpmath.mpf(hi) - mean) / mpmath.mpf(scale) if math.isfinite(hi) else mpmath.inf
    if zl >= 0:
        return mpmath.ncdf(-zl) - mpmath.ncdf(-zh)
    return mpmath.ncdf(zh) - mpmath.ncdf(zl)


def test_x_interval_masses_are_those_of_the_x_intervals(rng):
    """Narrow intervals far from 0 (where a CDF difference of rounded end points would
    cost u |x| / width relative) and wide ones, both components on the same x."""
    for _ in range(6):
        scale = float(np.exp(rng.uniform(np.log(0.3), np.log(20.0))))
        start = float(rng.normal(0.0, 8.0 * scale))
        widths = np.exp(rng.uniform(np.log(1e-9), np.log(2.0 * scale), 60)) * scale
        x = np.concatenate(([-np.inf], start + np.cumsum(widths), [np.inf]))
        for mean in (0.0, 1.0):
            m, err = normal_x_interval_mass(x, mean, scale)
            for k in range(len(m)):
                exact = _mp_mass(x[k], x[k + 1], mean, scale)
                assert abs(mpmath.mpf(float(m[k])) - exact) <= mpmath.mpf(float(err[k])) + 1e-300
                if exact > 1e-200:
                    # relative, not an end-point mass: tight at every width
                    assert err[k] <= 1e-11 * float(exact)


@pytest.mark.parametrize("sigma,q,d,offset", [
    (1.0, 1e-5, 2.0 ** -20, 36811), (0.694, 1.48e-4, 2.0 ** -14, 49580),
    (1.1, 0.01, 2.0 ** -10, 0), (3.0, 0.5, 2.0 ** -8, 3), (0.5, 1.0, 2.0 ** -9, -40),
    (15.0, 3e-3, 2.0 ** -16, 100)])
def test_displacement_bounds_the_loss_of_each_end_point(sigma, q, d, offset):
    """|L(x computed) - t| <= shift at every grid point, with L evaluated exactly."""
    pair = SubsampledGaussian(sigma, q)
    grid = Grid(d, 2000, offset)
    t = grid.losses
    *_, shift = pair.bucket_masses_with_displacement(t)
    xt = pair._x_of_loss(t)
    x, _ = _monotone_end_points(np.concatenate(([-np.inf], xt, [np.inf])),
                                np.concatenate(([0.0], pair._x_error(t, xt), [0.0])))
    s2 = mpmath.mpf(sigma) ** 2
    for k in range(0, len(t), 7):
        xk = x[k + 1]
        if not math.isfinite(xk):
            # -inf: t_k is at or below log(1 - q) up to that threshold's rounding
            assert mpmath.mpf(t[k]) - mpmath.log(1 - mpmath.mpf(q)) <= shift[k]
            continue
        z = (2 * mpmath.mpf(xk) - 1) / (2 * s2)
        loss = mpmath.log(1 - mpmath.mpf(q) + mpmath.mpf(q) * mpmath.exp(z))
        assert abs(loss - mpmath.mpf(t[k])) <= mpmath.mpf(float(shift[k]))
    # and the displacement is tiny next to the spacing (the leaf takes it)
    assert np.all(shift <= 0.01 * d)


def test_gaussian_displacement_bounds_the_loss():
    pair = Gaussian(1.7, sensitivity=0.8)
    grid = Grid(2.0 ** -12, 4000, 200)
    t = grid.losses
    *_, shift = pair.bucket_masses_with_displacement(t)
    s, sd = mpmath.mpf(0.8), mpmath.mpf(1.7)
    xt = (1.7 * 1.7 * t + 0.5 * 0.8 * 0.8) / 0.8
    for k in range(0, len(t), 11):
        loss = (s * mpmath.mpf(xt[k]) - s * s / 2) / (sd * sd)
        assert abs(loss - mpmath.mpf(t[k])) <= mpmath.mpf(float(shift[k]))


def _exact_delta(a, b, eps, direction):
    """delta of a discrete pair given by its events, exactly enough (fsum)."""
    if direction == "ab":
        return math.fsum(max(ai - math.exp(eps) * bi, 0.0) for ai, bi in zip(a, b))
    return math.fsum(max(bi - math.exp(eps) * ai, 0.0) for ai, bi in zip(a, b))


def _displaced_events(rng, grid, shift, per_bucket=3):
    """Events whose losses reach past their bucket's grid interval by up to ``shift``,
    with the bucket masses they sum to (corner buckets included)."""
    t = grid.losses
    K = len(t)
    losses, a, bucket = [], [], []
    for k in range(K + 1):
        lo = t[k - 1] - shift[k - 1] if k > 0 else t[0] - 3.0
        hi = t[k] + shift[k] if k < K else t[-1] + 3.0
        for _ in range(per_bucket):
            # favour the displaced borders: that is where a wrong split would show
            r = rng.uniform()
            x = hi - (hi - lo) * 1e-3 * r if r < 0.5 else lo + (hi - lo) * 1e-3 * r
            losses.append(x)
            a.append(float(rng.uniform(0.1, 1.0)))
            bucket.append(k)
    losses = np.array(losses)
    a = np.array(a) / (1.01 * sum(a))
    b = a * np.exp(-losses)
    scale = max(1.0, 1.01 * b.sum())     # sub-probability measures, ratios kept
    a, b = a / scale, b / scale
    bucket = np.array(bucket)
    ma = np.bincount(bucket, weights=a, minlength=K + 1)
    mb = np.bincount(bucket, weights=b, minlength=K + 1)
    return losses, a, b, ma, mb


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), d=st.sampled_from([0.05, 0.2, 0.7]),
       n=st.sampled_from([4, 8]), rel=st.floats(0.0, 0.01))
def test_split_pair_dominates_buckets_with_displaced_borders(seed, d, n, rel):
    """Both directions' split upper bounds are at least the exact delta of the events,
    alone and composed with themselves (the product events enumerated)."""
    rng = np.random.default_rng(seed)
    grid = Grid(d, n, int(rng.integers(-3, 4)))
    shift = rel * d * rng.uniform(0.5, 1.0, grid.size)
    losses, a, b, ma, mb = _displaced_events(rng, grid, shift)
    zeros = np.zeros_like(ma)
    leaf = SplitBuckets.from_masses(grid, ma, mb, zeros, zeros, shift)
    two = leaf.compose_full(leaf)
    a2, b2 = np.outer(a, a).ravel(), np.outer(b, b).ravel()
    for rep, (ea, eb) in ((leaf, (a, b)), (two, (a2, b2))):
        curves = rep.upper_curves()
        for eps in np.concatenate(([0.0], np.linspace(0.0, 2.5 * d * n, 25))):
            for direction in ("ab", "ba"):
                exact = _exact_delta(ea, eb, eps, direction)
                assert float(curves[direction](eps)) >= exact * (1 - 1e-12) - 1e-300


def test_without_the_displacement_the_split_can_fail():
    """Control: the same kind of buckets split as if their borders were exact fall below
    the exact delta (so the test above would catch a missing displacement)."""
    rng = np.random.default_rng(7)
    grid = Grid(0.2, 4, 0)
    shift = 0.01 * 0.2 * np.ones(grid.size)
    worst = 0.0
    for _ in range(30):
        losses, a, b, ma, mb = _displaced_events(rng, grid, shift)
        zeros = np.zeros_like(ma)
        naive = SplitBuckets.from_masses(grid, ma, mb, zeros, zeros, None).upper_curves()
        for eps in np.linspace(0.0, 1.5, 61):
            for direction in ("ab", "ba"):
                exact = _exact_delta(a, b, eps, direction)
                worst = max(worst, exact - float(naive[direction](eps)))
    assert worst > 0.0


def test_long_runs_keep_the_leaf_relative_error_small():
    """1e7 steps at q 1e-5 (a leaf spacing near 1e-6): the relative error of the rows
    stays far below what would move delta (it was 5.6e-3 when end points cost mass)."""
    c = Composer()
    x = c.compose([(SubsampledGaussian(1.0, 1e-5), 10 ** 7)], 1e-5, ("split",))
    assert float(max(x.split.relative)) < 1e-5
    leaf = leaf_masses(SubsampledGaussian(1.0, 1e-5), np.linspace(-1e-3, 1e-3, 2049), 2 ** -20)
    a, ea = leaf[0], leaf[2]
    live = a > 1e-200
    assert np.max(ea[live] / a[live]) < 1e-12


@pytest.mark.parametrize("sigma,q,d", [(1.0, 0.01, 2.0 ** -12), (0.7, 0.3, 2.0 ** -9),
                                       (5.0, 1e-4, 2.0 ** -18), (2.0, 1.0, 2.0 ** -10)])
def test_replace_one_pair_displacement_bounds_the_loss(sigma, q, d):
    """SymmetricSubsampledGaussian: the a-posteriori displacement bounds |L(x) - t| with
    L evaluated in 60 digits, and its masses are those of its x-intervals."""
    from pb_accountant.sampled_pairs import SymmetricSubsampledGaussian
    pair = SymmetricSubsampledGaussian(sigma, q)
    grid = Grid(d, 1500, 7)
    t = grid.losses
    a, b, ea, eb, shift = pair.bucket_masses_with_displacement(t)
    assert np.all(shift <= 0.01 * d)
    x = np.maximum.accumulate(pair._x_of_loss(t))
    s2 = mpmath.mpf(sigma) ** 2
    qq = mpmath.mpf(q)
    c = mpmath.exp(-1 / (2 * s2))
    for k in range(0, len(t), 13):
        xk = mpmath.mpf(x[k])
        loss = (mpmath.log(1 - qq + qq * c * mpmath.exp(xk / s2))
                - mpmath.log(1 - qq + qq * c * mpmath.exp(-xk / s2)))
        assert abs(loss - mpmath.mpf(t[k])) <= mpmath.mpf(float(shift[k]))
    xs = np.concatenate(([-np.inf], x, [np.inf]))
    for k in range(0, len(a), 97):
        if q == 1.0:
            exact_b = _mp_mass(xs[k], xs[k + 1], -1, sigma)
        else:
            exact_b = ((1 - qq) * _mp_mass(xs[k], xs[k + 1], 0, sigma)
                       + qq * _mp_mass(xs[k], xs[k + 1], -1, sigma))
        assert abs(mpmath.mpf(float(b[k])) - exact_b) <= mpmath.mpf(float(eb[k])) + 1e-300


@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_two_sum_and_two_prod_are_error_free(a, b):
    from fractions import Fraction
    from pb_accountant._fp import two_prod, two_square, two_sum
    s, e = two_sum(a, b)
    assert Fraction(s) + Fraction(e) == Fraction(a) + Fraction(b)
    p, e = two_prod(a, b)
    if a == 0.0 or b == 0.0 or abs(a * b) > 1e-250:   # no underflow in the low part
        assert Fraction(p) + Fraction(e) == Fraction(a) * Fraction(b)
    p, e = two_square(np.float64(a))
    if a == 0.0 or a * a > 1e-250:
        assert Fraction(float(p)) + Fraction(float(e)) == Fraction(a) ** 2


def test_narrow_masses_far_out_stay_within_a_few_dozen_ulp(rng):
    """Double-double midpoints: narrow intervals at |z| up to 37 (small sampling rates at
    small delta put whole leaves there) are bounded by ~36u of their mass, not u z^2."""
    u = 2.0 ** -53
    worst = 0.0
    for _ in range(12):
        scale = float(np.exp(rng.uniform(np.log(0.3), np.log(20.0))))
        mean = float(rng.choice([0.0, 1.0]))
        zc = float(rng.choice([-1.0, 1.0]) * rng.uniform(4.0, 37.0))
        widths = np.exp(rng.uniform(np.log(1e-9), np.log(0.3), 25)) * scale / abs(zc)
        x = np.concatenate(([-np.inf], mean + zc * scale + np.cumsum(widths), [np.inf]))
        m, err = normal_x_interval_mass(x, mean, scale)
        for k in range(1, len(m) - 1):
            exact = _mp_mass(x[k], x[k + 1], mean, scale)
            if exact < 1e-290:
                continue
            assert abs(mpmath.mpf(float(m[k])) - exact) <= mpmath.mpf(float(err[k]))
            assert err[k] <= 40 * u * float(exact)
            worst = max(worst, float(abs(mpmath.mpf(float(m[k])) - exact) / exact) / u)
    assert worst > 0.0        # the check measured something


def test_narrow_mass_near_a_nonzero_mean_at_a_tiny_scale():
    """The midpoint's low part enters the node exponent (x near mean 1, scale 1e-4)."""
    x = np.array([1.000158748908037, 1.000199735473434])
    m, err = normal_x_interval_mass(x, 1.0, 1e-4)
    exact = _mp_mass(x[0], x[1], 1.0, 1e-4)
    assert abs(mpmath.mpf(float(m[0])) - exact) <= mpmath.mpf(float(err[0]))


def test_end_points_below_the_least_loss_carry_only_the_thresholds_rounding():
    """End points below log(1 - q) (x = -inf: an exactly empty event set) take the
    threshold's rounding as their displacement only within 8u (|t| + 1) of it, and there
    it covers t - log(1 - q) in 60 digits (on a grid of spacing 2^-50 straddling the
    threshold); farther below they take none, so the lowest bucket's B-mass stays on the
    grid: the leaf of sigma 0.85869, q 0.02963489 on its composed grid, whose lowest
    point lies 0.0012 below the threshold, used to put 1.4e-16 into its -inf atom."""
    q = 0.3
    d = 2.0 ** -50
    centre = int(round(math.log1p(-q) / d))
    pair = SubsampledGaussian(1.0, q)
    grid = Grid(d, 400, centre)
    t = grid.losses
    *_, shift = pair.bucket_masses_with_displacement(t)
    x = pair._x_of_loss(t)
    least = mpmath.log(1 - mpmath.mpf(q))
    below = np.isneginf(x)
    assert 0 < below.sum() < len(t)
    for k in np.flatnonzero(below):
        assert mpmath.mpf(t[k]) - least <= mpmath.mpf(float(shift[k]))
    far = below & (t < math.log1p(-q) - 1e-13)
    assert far.any() and np.all(shift[far] == 0.0)
    assert (shift[below] > 0.0).any()          # (the band next to the threshold)

    pair = SubsampledGaussian(0.85869, 0.02963489)
    grid = Grid(2.0 ** -9, 2302, 2286)
    assert grid.losses[0] < math.log1p(-0.02963489) < grid.losses[1]
    *_, shift = pair.bucket_masses_with_displacement(grid.losses)
    assert shift[0] == 0.0
    leaf = SplitBuckets.leaves(pair, grid)[0]
    assert leaf.b_minf == 0.0
