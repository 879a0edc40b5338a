"""Closed-form bucket masses: accuracy against mpmath, mass conservation, validation."""

import math

import numpy as np
import pytest

from pb_accountant import DiscretePair, Gaussian, Laplace, RandomizedResponse, SubsampledGaussian
from pb_accountant import mechanisms
from pb_accountant.mechanisms import (_GL_RULES, UNDERFLOW_FLOOR, gauss_legendre, laplace_interval_mass,
                                      laplace_relative_error, normal_interval_error,
                                      normal_interval_mass, normal_interval_mass_and_error,
                                      normal_x_interval_mass)

try:
    import mpmath
    mpmath.mp.dps = 60
except ImportError:                   # the mpmath references skip; the rest still runs
    mpmath = None


def need_mpmath():
    if mpmath is None:
        pytest.skip("mpmath is not installed")


def mp_mass(lo, hi):
    if lo >= 0:                       # upper tail: avoid cancellation against 1
        return mpmath.ncdf(-lo) - mpmath.ncdf(-hi)
    return mpmath.ncdf(hi) - mpmath.ncdf(lo)


@pytest.mark.parametrize("lo,hi", [(-1.0, 1.0), (0.1, 0.1000001), (5.0, 5.0000003),
                                   (-30.0, -29.999), (12.0, 14.0), (-0.5, 1e-9),
                                   (37.0, 37.001), (-3.0, 3.0), (0.0, 1e-12)])
def test_normal_interval_mass_accuracy(lo, hi):
    need_mpmath()
    m = normal_interval_mass(lo, hi)
    exact = mp_mass(mpmath.mpf(lo), mpmath.mpf(hi))
    err = normal_interval_error(lo, hi, m)
    assert abs(mpmath.mpf(float(m)) - exact) <= mpmath.mpf(float(err))


def test_normal_interval_mass_random(rng):
    need_mpmath()
    lo = rng.normal(0, 6, 3000)
    hi = lo + np.exp(rng.uniform(-30, 2, 3000))
    m = normal_interval_mass(lo, hi)
    err = normal_interval_error(lo, hi, m)
    for a, b, v, e in zip(lo, hi, m, err):
        exact = mp_mass(mpmath.mpf(a), mpmath.mpf(b))
        assert abs(mpmath.mpf(float(v)) - exact) <= mpmath.mpf(float(e))



@pytest.mark.parametrize("seed", range(4))
def test_error_bounds_hold_where_masses_underflow(seed):
    """Near and past the underflow threshold (|z| 35 to 41: exp(-z^2/2) turns subnormal,
    then underflows from 38.6) the error bounds still cover the exact masses, with no
    tolerance: the absolute floor for subnormal results (docs/floating-point.md,
    "Underflow")."""
    need_mpmath()
    rng = np.random.default_rng(seed)
    n = 150
    side = rng.choice([-1.0, 1.0], n)
    a = rng.uniform(35.0, 41.0, n)
    width = np.exp(rng.uniform(np.log(1e-10), np.log(3.0), n))
    lo = np.where(side > 0, a, -a - width)
    hi = lo + width
    checked = 0
    m = normal_interval_mass(lo, hi)
    err = normal_interval_error(lo, hi, m)
    for l, h, v, e in zip(lo, hi, m, err):
        exact = mp_mass(mpmath.mpf(l), mpmath.mpf(h))
        assert abs(mpmath.mpf(float(v)) - exact) <= mpmath.mpf(float(e)), (l, h)
        checked += v == 0.0 and exact > 0
    # the same end points as x-intervals of N(mean, scale^2), narrow and wide branches
    scale = float(np.exp(rng.uniform(np.log(1e-3), np.log(30.0))))
    mean = float(rng.choice([0.0, 1.0, -1.0]))
    for l, h in zip(lo[:40], hi[:40]):
        x = np.array([mean + l * scale, mean + h * scale])
        if not x[1] > x[0]:
            continue
        v, e = normal_x_interval_mass(x, mean, scale)
        exact = mp_mass((mpmath.mpf(x[0]) - mean) / scale, (mpmath.mpf(x[1]) - mean) / scale)
        assert abs(mpmath.mpf(float(v[0])) - exact) <= mpmath.mpf(float(e[0])), (x, mean, scale)
    assert checked > 0           # some exact mass was flushed to 0 and still covered


def test_a_flushed_end_point_is_covered():
    """A true 3e-313 at -37.82 (which scipy's ndtr flushed to 0, when wide intervals
    took its difference) is covered."""
    need_mpmath()
    x = np.array([-37.81917731947399, -37.32099905125662])
    v, e = normal_x_interval_mass(x, 0.0, 1.0)
    exact = mp_mass(mpmath.mpf(x[0]), mpmath.mpf(x[1]))
    assert abs(mpmath.mpf(float(v[0])) - exact) <= mpmath.mpf(float(e[0]))



U = 2.0 ** -53


def wide_intervals(rng, n):
    """Wide intervals (h (|z| + h) >= 1) of every kind: infinite ends, across 0, far
    tails on both sides, barely wide ones."""
    a = rng.uniform(-41.0, 41.0, n)
    kind = rng.integers(0, 4, n)
    width = np.where(kind == 0, np.inf, np.exp(rng.uniform(np.log(0.05), np.log(60.0), n)))
    lo = np.where(rng.random(n) < 0.5, a, -np.inf)
    lo = np.where(kind == 1, a, lo)
    hi = np.where(np.isfinite(lo), lo + width, a)
    # barely wide: h (|z| + h) just above 1
    reach = np.abs(a) + 1.0
    barely = kind == 2
    lo = np.where(barely, a, lo)
    hi = np.where(barely, a + 1.02 / reach, hi)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    fixed = [(-np.inf, np.inf), (-np.inf, 0.0), (0.0, np.inf), (-1.0, 1.0), (-3.0, 5.0),
             (2.9, 3.6), (3.0, 3.5), (2.99, 13.0), (8.0, np.inf), (-np.inf, -12.0),
             (38.95, np.inf), (-39.5, -38.0), (11.9, 12.2), (0.0, 1.1)]
    lo = np.concatenate((lo, [f[0] for f in fixed]))
    hi = np.concatenate((hi, [f[1] for f in fixed]))
    valid, narrow = mechanisms._classify(lo, hi)
    return lo[valid & ~narrow], hi[valid & ~narrow]


def mp_exact(lo, hi):
    lo = mpmath.mpf(lo) if np.isfinite(lo) else (mpmath.ninf if lo < 0 else mpmath.inf)
    hi = mpmath.mpf(hi) if np.isfinite(hi) else (mpmath.ninf if hi < 0 else mpmath.inf)
    if lo >= 0:
        return mpmath.ncdf(-lo) - mpmath.ncdf(-hi)
    if hi <= 0:
        return mpmath.ncdf(hi) - mpmath.ncdf(lo)
    return 1 - mpmath.ncdf(lo) - mpmath.ncdf(-hi)


@pytest.mark.parametrize("seed", range(3))
def test_wide_interval_masses_within_their_proven_bounds(seed):
    """Wide intervals are sums of narrow pieces and continued-fraction tails: within
    their bound of 60-digit mpmath, and the bound is tight (at most 200u of the mass
    plus the underflow floor's few multiples; it was u (16 + 14 z^2) on an ndtr
    difference, about 22,000u at z = 40)."""
    need_mpmath()
    lo, hi = wide_intervals(np.random.default_rng(seed), 400)
    assert len(lo) > 250
    m, e = normal_interval_mass_and_error(lo, hi)
    assert np.array_equal(m, normal_interval_mass(lo, hi))
    assert np.array_equal(e, normal_interval_error(lo, hi, m))
    assert m.max() <= 1.0 and normal_interval_mass(-np.inf, np.inf) == 1.0
    worst = 0.0
    for l, h, v, b in zip(lo, hi, m, e):
        exact = mp_exact(l, h)
        assert abs(mpmath.mpf(float(v)) - exact) <= mpmath.mpf(float(b)), (l, h)
        if exact > 1e-290:
            worst = max(worst, float(b / exact) / U)
    assert worst < 200.0


def test_wide_interval_masses_trust_no_library_cdf(monkeypatch):
    """The certified masses never call scipy's ndtr: with it broken, every pair's
    certified buckets still come out (and equal what they were)."""
    rng = np.random.default_rng(5)
    lo, hi = wide_intervals(rng, 200)
    before = normal_interval_mass_and_error(lo, hi)
    pairs = [SubsampledGaussian(0.8, 0.01), SubsampledGaussian(3.0, 1e-4).mirrored(),
             Gaussian(1.5), Gaussian(2.0, truncation=5.0)]
    t = np.linspace(-2.0, 4.0, 301)
    masses = [(p.bucket_masses_with_error(t), p.bucket_masses_with_displacement(t))
              for p in pairs]

    def broken(*args, **kwargs):
        raise AssertionError("scipy.special.ndtr called by a certified mass")
    monkeypatch.setattr(mechanisms.special, "ndtr", broken)
    after = normal_interval_mass_and_error(lo, hi)
    assert all(np.array_equal(x, y) for x, y in zip(before, after))
    for p, (with_error, with_shift) in zip(pairs, masses):
        for x, y in zip(with_error, p.bucket_masses_with_error(t)):
            assert np.array_equal(x, y)
        for x, y in zip(with_shift, p.bucket_masses_with_displacement(t)):
            assert np.array_equal(x, y)


def test_mills_ratio_brackets_the_exact_one():
    """R(z) = Phi(-z) / phi(z) by the continued fraction (3 <= z < 12) and the
    asymptotic series (z >= 12): within the relative bound of 40-digit mpmath, the
    bound below 10u, and one z at a time gives the same bits as an array of them."""
    need_mpmath()
    z = np.concatenate((np.linspace(3.0, 39.0, 361), [3.0, 3.0, 4.0, 4.999999, 6.5, 8.0,
                                                      11.999999, 12.0]))
    r, rel = mechanisms._mills_ratio(z)
    for zi, ri, ei in zip(z, r, rel):
        exact = mpmath.ncdf(-mpmath.mpf(zi)) / mpmath.npdf(mpmath.mpf(zi))
        assert abs(mpmath.mpf(float(ri)) - exact) <= mpmath.mpf(float(ei)) * exact, zi
    assert float(np.max(rel)) < 10 * U
    one = np.array([mechanisms._mills_ratio(np.array([zi])) for zi in z])[:, :, 0]
    assert np.array_equal(one[:, 0], r) and np.array_equal(one[:, 1], rel)


def test_sizing_reads_the_same_masses_up_to_round_off():
    """``loss_spread`` sizes leaves from ``_sizing_masses`` (a 4-point rule for narrow
    intervals and an ndtr difference for wide ones, cheaper and what the spacings were
    chosen with), which agree with the certified A-masses to the 4-point rule's
    truncation (below 1e-8 relative here; 6.3e-9 at worst)."""
    t = np.linspace(-1.0, 3.0, 801)
    for p in (SubsampledGaussian(1.1, 0.01), SubsampledGaussian(0.6, 1e-5).mirrored(),
              Gaussian(2.0)):
        a = p.bucket_masses(t)[0]
        s = p._sizing_masses(t)
        assert np.array_equal(s == 0.0, a == 0.0)
        assert np.allclose(s, a, rtol=1e-8, atol=1e-300)


@pytest.mark.parametrize("seed", [0, 1])
def test_sizing_rule_keeps_the_leaf_grids(seed):
    """The 4-point rule of the sizing masses moves a leaf's spread by far less than what
    would move its grid: on random pairs the leaf grids and graded-tail caps at six leaf
    resolutions are those the 12-point rule gives (which chose them before)."""
    from pb_accountant import composition as C, graded_leaves
    rng = np.random.default_rng(seed)
    rules = ((mechanisms._GL_NODES, mechanisms._GL_WEIGHTS),
             (mechanisms._SIZING_NODES, mechanisms._SIZING_WEIGHTS))
    for _ in range(40):
        s = float(np.exp(rng.uniform(np.log(0.4), np.log(20.0))))
        q = float(np.exp(rng.uniform(np.log(1e-5), 0.0)))
        steps = int(np.exp(rng.uniform(0.0, np.log(1e7))))
        budget = C.per_step_infinity_budget(C.delta_class(10 ** rng.uniform(-15, -2)),
                                            C.planned_steps(steps))
        pair = SubsampledGaussian(round(s, 6), round(q, 8)) if q < 0.9 else Gaussian(s)
        seen = []
        for nodes, weights in rules:
            try:
                mechanisms._SIZING_NODES, mechanisms._SIZING_WEIGHTS = nodes, weights
                spread = C.leaf_probe(pair, budget)[0]
            finally:
                mechanisms._SIZING_NODES, mechanisms._SIZING_WEIGHTS = rules[1]
            grids = [C.leaf_grid(pair, budget, C.BucketOptions(leaf_resolution=r),
                                 spread=spread) for r in (0.16, 0.08, 0.04, 0.03, 0.02, 0.01)]
            seen.append((spread, grids, [graded_leaves.ratio_cap(g.log_factor, spread, 0.015,
                                                                 C.planned_steps(steps))
                                         for g in grids]))
        (s12, g12, c12), (s4, g4, c4) = seen
        assert abs(s4 / s12 - 1.0) < 1e-7
        assert g4 == g12 and c4 == c12


@pytest.mark.parametrize("n", [4, 6, 8, 12])
def test_gauss_legendre_rules_are_correctly_rounded(n):
    """The quadrature's error bound counts the weights as correctly rounded (u/2)."""
    need_mpmath()
    nodes, weights = gauss_legendre(n)
    for x, w in zip(nodes, weights):
        r = mpmath.mpf(float(x))
        for _ in range(8):                    # Newton on P_n from the rounded node
            p, dp = mpmath.legendre(n, r), mpmath.diff(lambda v: mpmath.legendre(n, v), r)
            r -= p / dp
        dp = mpmath.diff(lambda v: mpmath.legendre(n, v), r)
        exact_w = 2 / ((1 - r * r) * dp * dp)
        assert float(r) == x and float(exact_w) == w
    assert len(nodes) == n and np.all(np.diff(nodes) > 0)


@pytest.mark.parametrize("rule", _GL_RULES, ids=lambda r: f"{r[0]}-nodes")
def test_gauss_legendre_truncation_limits(rule):
    """Each rule's limit s = |a| + 2b is at most 90% of where the truncation bound reaches
    u/16 of the mass: c_n (2n)! r^-2n exp(|a| (1+r) + b (1+r)^2) (Cauchy's estimate on
    a circle of radius r) over the integral's lower bound 2 exp(-|a| - b), at the worst
    split of s between |a| and 2b, minimised over r."""
    need_mpmath()
    n, limit = rule[0], rule[1]
    mpmath.mp.dps = 30
    c_n = (mpmath.mpf(2) ** (2 * n + 1) * mpmath.factorial(n) ** 4
           / ((2 * n + 1) * mpmath.factorial(2 * n) ** 3))

    def bound(s):
        def at(r):
            # |a| (2 + r) + b ((1 + r)^2 + 1), with |a| + 2b = s, is largest at an end
            worst = s * max(2 + r, 1 + r + r * r / 2)
            return c_n * mpmath.factorial(2 * n) * r ** (-2 * n) * mpmath.exp(worst) / 2
        return min(at(mpmath.mpf(10) ** (k / 100)) for k in range(-100, 300))

    assert bound(mpmath.mpf(limit) / mpmath.mpf("0.9")) <= mpmath.mpf(2) ** -53 / 16


@pytest.mark.parametrize("rule", _GL_RULES, ids=lambda r: f"{r[0]}-nodes")
@pytest.mark.parametrize("mid", [0.3, 5.0, 20.0])
def test_each_quadrature_rule_brackets_the_exact_mass(monkeypatch, rule, mid):
    """An interval just inside each rule's limit (where its truncation is largest) is
    integrated by that rule, and the certified error covers the 60-digit mass."""
    need_mpmath()
    import pb_accountant.mechanisms as mech
    n, limit = rule[0], rule[1]
    # s = h (|m| + h) in z units; the 12-node rule's limit lies beyond the narrow
    # intervals (2h (|m| + 3h) < 1), so it is tried at 0.2, still beyond the 8-node one
    s = 0.99 * limit if n < 12 else 0.2
    h = (-mid + math.sqrt(mid * mid + 4.0 * s)) / 2.0
    assert 2.0 * h * (mid + 3.0 * h) < 1.0          # narrow: integrated by quadrature
    used = []
    real = mech._node_sum
    monkeypatch.setattr(mech, "_node_sum",
                        lambda a, b, nodes, w: used.append(len(nodes)) or real(a, b, nodes, w))
    x = np.array([mid - h, mid + h])
    v, e = normal_x_interval_mass(x, 0.0, 1.0)
    assert used == [n]
    exact = mp_mass(mpmath.mpf(x[0]), mpmath.mpf(x[1]))
    assert abs(mpmath.mpf(float(v[0])) - exact) <= mpmath.mpf(float(e[0]))
    assert float(e[0]) <= 1e-13 * float(exact)


PAIRS = [SubsampledGaussian(1.1, 0.01), SubsampledGaussian(0.5, 0.3), SubsampledGaussian(2.0, 1.0),
         Gaussian(1.5), Gaussian(200 * 2 ** 0.5, truncation=2500.0), Laplace(2.0),
         Laplace(200.0, truncation=2500.0), RandomizedResponse(0.6),
         DiscretePair((0.1, 0.6, 0.3), (0.5, 0.5, 0.0))]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: type(p).__name__)
@pytest.mark.parametrize("mirrored", [False, True])
def test_bucket_masses_sum_to_one(pair, mirrored):
    if mirrored:
        pair = pair.mirrored()
    t = np.linspace(-3, 3, 1201)
    a, b = pair.bucket_masses(t)
    assert a.sum() == pytest.approx(1.0, abs=1e-12)
    assert b.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(a >= 0) and np.all(b >= 0)


@pytest.mark.parametrize("pair", PAIRS[:5], ids=lambda p: type(p).__name__)
def test_bucket_losses_lie_in_their_intervals(pair):
    """B-mass of each interval bucket lies between e^{-t_k} A and e^{-t_{k-1}} A."""
    t = np.linspace(-2, 2, 401)
    a, b = pair.bucket_masses(t)
    lo = a[1:-1] * np.exp(-t[1:])
    hi = a[1:-1] * np.exp(-t[:-1])
    assert np.all(b[1:-1] >= lo * (1 - 1e-9) - 1e-300)
    assert np.all(b[1:-1] <= hi * (1 + 1e-9) + 1e-300)


def test_mirrored_is_the_add_direction():
    sg = SubsampledGaussian(1.0, 0.1)
    t = np.linspace(-1, 1, 101)
    a, b = sg.bucket_masses(t)
    ma, mb = sg.mirrored().bucket_masses(-t[::-1])
    assert np.allclose(a, mb[::-1], atol=1e-15) and np.allclose(b, ma[::-1], atol=1e-15)


def test_distinguishing_events_go_to_infinity():
    pair = DiscretePair((0.5, 0.5), (1.0, 0.0))
    a, b = pair.bucket_masses(np.linspace(-1, 1, 11))
    assert a[-1] == 0.5 and b[-1] == 0.0
    assert pair.infinity_masses() == (0.5, 0.0)


@pytest.mark.parametrize("kwargs,name", [
    (dict(noise_multiplier=0.0, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=-1.0, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=float("nan"), sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=float("inf"), sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=0.0), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=1.5), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=float("nan")), "sample_rate"),
])
def test_subsampled_gaussian_validation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SubsampledGaussian(**kwargs)


def test_other_validation():
    with pytest.raises(ValueError, match="sigma"):
        Gaussian(0.0)
    with pytest.raises(ValueError, match="scale"):
        Laplace(-1.0)
    with pytest.raises(ValueError, match="p"):
        RandomizedResponse(1.2)
    with pytest.raises(ValueError, match="sum to 1"):
        DiscretePair((0.5, 0.4), (0.5, 0.5))
    with pytest.raises(ValueError, match="same length"):
        DiscretePair((0.5, 0.5), (1.0,))


def _mp_subsampled_delta(sigma, q, eps):
    """Exact delta(eps) of one subsampled-Gaussian step (max of both directions), from
    the loss's end points x(t) in 60 digits."""
    mp = mpmath.mp
    s, q, eps = mp.mpf(sigma), mp.mpf(q), mp.mpf(eps)

    def x_of(t):
        return s * s * mp.log((mp.exp(t) - (1 - q)) / q) + mp.mpf(1) / 2

    x = x_of(eps)
    ab = ((1 - q) * mp.ncdf(-x / s) + q * mp.ncdf(-(x - 1) / s)
          - mp.exp(eps) * mp.ncdf(-x / s))
    ba = mp.mpf(0)
    if -eps > mp.log(1 - q):
        xm = x_of(-eps)
        ba = mp.ncdf(xm / s) - mp.exp(eps) * ((1 - q) * mp.ncdf(xm / s)
                                             + q * mp.ncdf((xm - 1) / s))
    return max(ab, ba)


@pytest.mark.parametrize("sigma,q", [(1.0, 0.1), (0.7, 0.02), (2.0, 1.0)])
def test_leaf_bounds_bracket_exact_delta_at_1e_15_sized_masses(sigma, q):
    """One step's certified delta bounds against 60-digit mpmath where delta is
    1e-10 .. 1e-16: the leaves' error bounds are relative to the tail (issue 12), so
    the bounds bracket it within a few percent *relative* (they used to carry ~1e-14
    of absolute round-off, a hundred times such a delta)."""
    need_mpmath()
    from pb_accountant import compose
    pb = compose([(SubsampledGaussian(sigma, q), 1)], delta=1e-16)
    checked = 0
    for eps in np.linspace(0.5, 40.0, 400):
        exact = _mp_subsampled_delta(sigma, q, eps)
        if not mpmath.mpf(1e-16) < exact < mpmath.mpf(1e-10):
            continue
        db = pb.delta_bounds(float(eps))
        exact = float(exact)
        assert db.lower <= exact * (1 + 1e-12) and exact <= db.upper * (1 + 1e-12), (eps, db)
        assert db.upper <= 1.05 * exact and db.lower >= exact / 1.05, (eps, db, exact)
        checked += 1
    assert checked >= 3


# -- Laplace masses: proven relative bounds, no cancellation --------------------------
def _mp_laplace_cdf(x, mean, scale):
    x = mpmath.mpf(x)
    if x == mpmath.inf:
        return mpmath.mpf(1)
    if x == -mpmath.inf:
        return mpmath.mpf(0)
    if x < mean:
        return mpmath.exp((x - mean) / scale) / 2
    return 1 - mpmath.exp(-(x - mean) / scale) / 2


def _mp_laplace_mass(lo, hi, mean, scale):
    lo, hi, mean, scale = (mpmath.mpf(v) for v in (lo, hi, mean, scale))
    if lo >= mean:           # upper tail: no cancellation against 1
        far = mpmath.exp(-(hi - mean) / scale) if hi != mpmath.inf else 0
        return (mpmath.exp(-(lo - mean) / scale) - far) / 2
    return _mp_laplace_cdf(hi, mean, scale) - _mp_laplace_cdf(lo, mean, scale)


@pytest.mark.parametrize("seed", range(3))
def test_laplace_interval_masses_within_their_proven_bound(seed):
    """Narrow intervals far from the mean used to lose up to 4e-5 relative to the
    cancellation of (hi - mean) - (lo - mean), against a 1e-13 allowance; the width is
    now taken from the end points and the bound is u (2.02 z + 12)."""
    need_mpmath()
    rng = np.random.default_rng(seed)
    u = 2.0 ** -53
    worst = 0.0
    for _ in range(700):
        scale = float(np.exp(rng.uniform(np.log(1e-3), np.log(10.0))))
        mean = float(rng.choice([0.0, 1.0, -3.0]))
        lo = float(rng.uniform(-2.0, 2.0) * rng.choice([1.0, 100.0]))
        hi = lo + float(np.exp(rng.uniform(np.log(1e-14), np.log(3.0))))
        if rng.uniform() < 0.05:
            hi = np.inf
        if rng.uniform() < 0.05:
            lo = -np.inf
        m = float(laplace_interval_mass(lo, hi, mean, scale))
        exact = _mp_laplace_mass(lo, hi, mean, scale)
        z = 0.0 if lo < mean < hi else min(abs(lo - mean), abs(hi - mean)) / scale
        bound = float(laplace_relative_error(z)) * m * (1 + 1e-9) + UNDERFLOW_FLOOR
        assert abs(mpmath.mpf(m) - exact) <= bound, (lo, hi, mean, scale)
        if exact > 1e-300:
            worst = max(worst, float(abs(mpmath.mpf(m) - exact) / exact) / u)
    assert 0.0 < worst < 2000.0


@pytest.mark.parametrize("scale,sensitivity,truncation", [
    (1.0, 1.0, None), (0.05, 1.0, None), (3.0, 2.0, None), (0.5, 1.0, 4.0)])
@pytest.mark.parametrize("mirrored", [False, True])
def test_laplace_bucket_errors_cover_the_exact_buckets(scale, sensitivity, truncation,
                                                      mirrored):
    """Each bucket of the Laplace pair against 60-digit masses of the exact x(t)
    intervals: the entrywise bounds (relative part, end points' rounding, atoms) cover
    the difference with no tolerance."""
    need_mpmath()
    pair = Laplace(scale, sensitivity=sensitivity, truncation=truncation)
    if mirrored:
        pair = pair.mirrored()
    e0 = sensitivity / scale
    t = np.linspace(-e0, e0, 4001)[1:-1] * (1 - 1e-9)
    a, b, ea, eb = pair.bucket_masses_with_error(t)
    s = mpmath.mpf(sensitivity)
    T = None if truncation is None else mpmath.mpf(truncation)

    def cdf(x, mean):
        if T is None:
            return _mp_laplace_cdf(x, mean, scale)
        lo_, hi_ = mean - T, mean + T
        x = min(max(mpmath.mpf(x), lo_), hi_)
        z = 1 - mpmath.exp(-T / scale)
        return (_mp_laplace_cdf(x, mean, scale) - _mp_laplace_cdf(lo_, mean, scale)) / z

    sign = -1 if mirrored else 1
    # exact end points in x of the loss grid (x in [0, s], loss (2x - s) / scale)
    cuts = [(mpmath.mpf(scale) * sign * mpmath.mpf(v) + s) / 2 for v in (t if not mirrored
                                                                        else t[::-1])]
    xs = [-mpmath.inf] + cuts + [mpmath.inf]
    for k in range(len(xs) - 1):
        exact_a = cdf(xs[k + 1], s) - cdf(xs[k], s)
        exact_b = cdf(xs[k + 1], 0) - cdf(xs[k], 0)
        j = k if not mirrored else len(xs) - 2 - k
        got_a, got_b = (a[j], b[j]) if not mirrored else (b[j], a[j])
        err_a, err_b = (ea[j], eb[j]) if not mirrored else (eb[j], ea[j])
        assert abs(mpmath.mpf(float(got_a)) - exact_a) <= mpmath.mpf(float(err_a)), k
        assert abs(mpmath.mpf(float(got_b)) - exact_b) <= mpmath.mpf(float(err_b)), k


def test_narrow_masses_in_blocks_give_the_same_bits(monkeypatch):
    """Long rows of narrow intervals are integrated in blocks (``_NARROW_BLOCK``: the
    temporaries stay in cache); every interval is computed alone, so the masses and
    their error bounds are bitwise those of one call."""
    import pb_accountant.mechanisms as mech
    x = np.sort(np.random.default_rng(5).normal(0.0, 3.0, 50001))
    blocked = mech.normal_x_interval_masses(x, (0.0, 1.0), 0.8)
    monkeypatch.setattr(mech, "_NARROW_BLOCK", 10 ** 9)
    whole = mech.normal_x_interval_masses(x, (0.0, 1.0), 0.8)
    for a, b in zip(blocked, whole):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("mirrored", [False, True])
def test_the_probe_moments_bracket_the_gaussian_closed_form(sigma, mirrored):
    """``loss_probe``'s moments (they predict a composition's loss ranges): for the
    Gaussian mechanism the loss is N(mu, 2 mu) under A and N(-mu, 2 mu) under B,
    mu = 1/(2 sigma^2), in either orientation; the probe's spread is ``loss_spread``."""
    pair = Gaussian(sigma)
    pair = pair.mirrored() if mirrored else pair
    reach = 12 / sigma + 1 / sigma ** 2
    spread, ((mean_a, sd_a), (mean_b, sd_b)) = pair.loss_probe(reach)
    mu = 1 / (2 * sigma ** 2)
    # the probe puts each interval's mass at its midpoint: Sheppard's correction h^2/12
    h = reach / 2000
    assert mean_a == pytest.approx(mu, rel=1e-3, abs=1e-6)
    assert mean_b == pytest.approx(-mu, rel=1e-3, abs=1e-6)
    for sd in (sd_a, sd_b):
        assert sd == pytest.approx(math.sqrt(2 * mu + h * h / 12), rel=1e-3)
    assert spread == pair.loss_spread(reach) == sd_a


@pytest.mark.parametrize("mirrored", [False, True])
def test_the_probe_moments_of_atoms_are_exact(mirrored):
    """A DiscretePair's probe moments are its atoms' exact moments, oriented with the
    pair (mirrored: A and B exchanged, losses negated); its spread stays the unmirrored
    A-weighted one, which sized its leaves before the probe existed."""
    a, b = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
    pair = DiscretePair(tuple(a), tuple(b))
    pair = pair.mirrored() if mirrored else pair
    losses = np.log(a / b)

    def moments(w, x):
        m = float(np.sum(w * x))
        return m, math.sqrt(float(np.sum(w * (x - m) ** 2)))

    want_a, want_b = moments(a, losses), moments(b, losses)
    if mirrored:
        want_a, want_b = (-want_b[0], want_b[1]), (-want_a[0], want_a[1])
    spread, (got_a, got_b) = pair.loss_probe(1.0)
    assert got_a == pytest.approx(want_a, rel=1e-12)
    assert got_b == pytest.approx(want_b, rel=1e-12)
    assert spread == pytest.approx(moments(a, losses)[1], rel=1e-12)
