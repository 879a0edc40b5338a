"""Small deltas (1e-12 to 1e-15) are bracketed tightly (issue 12).

Round-off is certified relative to the mass in the region that decides delta
(docs/floating-point.md), so the bounds stay finite and about as tight as at 1e-5.
References are exact: the closed-form Gaussian composition and r-fold randomized
response evaluated with 60-digit mpmath, and brute-force products of discrete pairs
summed with exact rationals.  Tolerances are relative; an absolute 1e-15 would check
nothing at these sizes.
"""
import math
from fractions import Fraction

import pytest

from pb_accountant import (DiscretePair, PrivacyBucketsAccountant, RandomizedResponse,
                           SubsampledGaussian, compose)

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp

from _closed_form import gaussian_delta, gaussian_epsilon  # noqa: E402

#: a relative allowance for the references' own 60-digit evaluation
REF = 1e-40


# (sigma, steps): mu from 0.63 to 31.6, up to 10^6 steps
GAUSSIAN_CASES = [(5.0, 1000), (50.0, 10 ** 6), (1.0, 1000), (0.8, 20), (5.0, 10)]


@pytest.mark.parametrize("sigma,steps", GAUSSIAN_CASES)
@pytest.mark.parametrize("delta", [1e-12, 1e-13, 1e-15])
def test_gaussian_composition_epsilon_is_bracketed_at_small_delta(sigma, steps, delta):
    mu = math.sqrt(steps) / sigma
    exact = gaussian_epsilon(delta, mu)
    b = compose([(SubsampledGaussian(sigma, 1.0), steps)], delta=delta).epsilon_bounds(delta)
    assert math.isfinite(b.upper)
    assert b.lower <= exact * (1 + 1e-12) and exact <= b.upper * (1 + 1e-12), (b, exact)
    # as tight as at delta = 1e-5 (0.01-0.05 %; the grid's resolution, not round-off)
    assert (b.upper - b.lower) <= 1e-3 * b.upper, b


@pytest.mark.parametrize("sigma,steps", [(5.0, 1000), (50.0, 10 ** 6)])
def test_gaussian_composition_delta_is_bracketed_relatively(sigma, steps):
    """delta bounds at epsilons where the exact delta is 1e-12 .. 1e-15: within a few
    percent *relative* of it (an absolute tolerance of 1e-15 would check nothing)."""
    mu = math.sqrt(steps) / sigma
    eps = [gaussian_epsilon(d, mu) for d in (1e-12, 1e-13, 1e-14, 1e-15)]
    pb = compose([(SubsampledGaussian(sigma, 1.0), steps)], delta=1e-15)
    db = pb.delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = float(gaussian_delta(e, mu))
        assert 0.0 < lo <= exact * (1 + REF) and exact <= up * (1 + REF), (e, lo, exact, up)
        assert up <= 1.2 * exact and lo >= exact / 1.2, (e, lo, exact, up)


class ExactRR:
    """r-fold randomized response, exactly: outcome k (number of ones) has
    A_k = C(r,k) p^k q^(r-k), B_k = C(r,k) q^k p^(r-k) and loss (2k - r) log(p/q); both
    directions are equal.  delta(eps) = sum over losses > eps of A_k - e^eps B_k, from
    60-digit suffix sums."""

    def __init__(self, p, r):
        with mp.workdps(60):
            p = mp.mpf(p)
            q = 1 - p
            self.step = mp.log(p / q)
            self.r = r
            a = [mp.binomial(r, k) * p ** k * q ** (r - k) for k in range(r + 1)]
            b = [mp.binomial(r, k) * q ** k * p ** (r - k) for k in range(r + 1)]
            self.sa, self.sb = [mp.mpf(0)] * (r + 2), [mp.mpf(0)] * (r + 2)
            for k in range(r, -1, -1):
                self.sa[k] = self.sa[k + 1] + a[k]
                self.sb[k] = self.sb[k + 1] + b[k]

    def delta(self, eps):
        with mp.workdps(60):
            eps = mp.mpf(eps)
            k = int(mp.floor((eps / self.step + self.r) / 2)) + 1   # first loss > eps
            k = max(k, 0)
            if k > self.r:
                return mp.mpf(0)
            return self.sa[k] - mp.exp(eps) * self.sb[k]

    def epsilon(self, delta):
        with mp.workdps(60):
            lo, hi = mp.mpf(0), self.r * self.step
            for _ in range(90):
                mid = (lo + hi) / 2
                if self.delta(mid) > delta:
                    lo = mid
                else:
                    hi = mid
            return float(hi)


@pytest.mark.parametrize("p,r", [(0.6, 400), (0.55, 2000)])
def test_randomized_response_brackets_small_deltas(p, r):
    ref = ExactRR(p, r)
    pb = compose([(RandomizedResponse(p), r)], delta=1e-15)
    for delta in (1e-12, 1e-13, 1e-15):
        exact = ref.epsilon(delta)
        b = pb.epsilon_bounds(delta)
        assert math.isfinite(b.upper)
        assert b.lower <= exact * (1 + 1e-12) and exact <= b.upper * (1 + 1e-12), (delta, b, exact)
        assert b.upper - b.lower <= 2e-3 * b.upper, (delta, b)
        db = pb.delta_bounds(exact)
        value = float(ref.delta(exact))
        assert db.lower <= value * (1 + REF) and value <= db.upper * (1 + REF), (delta, db, value)


def _segment(a, b, n):
    """n copies of a discrete pair, exactly: {outcome counts: (A-mass, B-mass)}."""
    fa = [Fraction(v) for v in a]
    fb = [Fraction(v) for v in b]
    dist = {(): (Fraction(1), Fraction(1))}
    for _ in range(n):
        out = {}
        for key, (x, y) in dist.items():
            for j, (u, w) in enumerate(zip(fa, fb)):
                k = tuple(sorted(key + (j,)))
                px, py = out.get(k, (Fraction(0), Fraction(0)))
                out[k] = (px + x * u, py + y * w)
        dist = out
    return list(dist.values())


class ExactProduct:
    """Brute-force product of segments (pair, count), masses as exact rationals;
    delta(eps) = max over both directions of sum max(0, P - e^eps Q) in 60 digits."""

    def __init__(self, segments):
        atoms = [(Fraction(1), Fraction(1))]
        for a, b, n in segments:
            seg = _segment(a, b, n)
            atoms = [(x * u, y * w) for x, y in atoms for u, w in seg]
        with mp.workdps(60):
            self.atoms = [(mp.mpf(x.numerator) / x.denominator,
                           mp.mpf(y.numerator) / y.denominator) for x, y in atoms]
            self.losses = sorted({float(mp.log(x / y)) for x, y in self.atoms})

    def delta(self, eps):
        with mp.workdps(60):
            e = mp.exp(mp.mpf(eps))
            ab = mp.fsum(x - e * y for x, y in self.atoms if x > e * y)
            ba = mp.fsum(y - e * x for x, y in self.atoms if y > e * x)
            return max(ab, ba)


def test_brute_force_product_with_delta_near_1e_14():
    """A rare-event pair (loss log 10 with A-mass 1e-3) composed 6 times and 10-fold
    randomized response (308 atoms, exact rationals): at every midpoint between
    consecutive atom losses where the exact delta is 1e-12 .. 1e-16, all bounds bracket
    it (relative tolerance 1e-40 for the reference), the best within 10% relative
    (the grid's discretisation; round-off is far below)."""
    segments = [((0.5, 0.499, 0.001), (0.5, 0.4999, 0.0001), 6),
                ((0.55, 0.45), (0.45, 0.55), 10)]
    ref = ExactProduct(segments)
    pb = compose([(DiscretePair(a, b), n) for a, b, n in segments], delta=1e-15,
                 methods=("split", "grouped", "paper"))
    losses = ref.losses
    checked = 0
    for lo, hi in zip(losses[:-1], losses[1:]):
        if hi - lo < 1e-6:
            continue
        eps = 0.5 * (lo + hi)
        exact = float(ref.delta(eps))
        if not 1e-16 < exact < 1e-12:
            continue
        db = pb.delta_bounds(eps)
        assert db.lower <= exact * (1 + REF) and exact <= db.upper * (1 + REF), (eps, db, exact)
        assert db.upper <= 1.1 * exact and db.lower >= exact / 1.1, (eps, db, exact)
        up_paper = float(pb.delta_upper(eps, "paper")[0])
        lo_paper = float(pb.delta_lower(eps, "paper")[0])
        assert up_paper >= exact * (1 - REF) and lo_paper <= exact * (1 + REF), eps
        checked += 1
    assert checked >= 20


# the four settings of issue 12 and what they gave before (inf, or a 1.7e-11 floor)
@pytest.mark.parametrize("history,delta,reference", [
    ([(2.0, 0.05, 5000)], 1e-12, 14.9),        # PLD and PRV: ~14.9 (before: inf)
    ([(3.0, 0.001, 100000)], 1e-9, 0.584),     # PLD: 0.584 (before: inf)
])
def test_issue_settings_are_finite_and_tight(history, delta, reference):
    acc = PrivacyBucketsAccountant()
    acc.history = history
    b = acc.get_epsilon_bounds(delta)
    assert math.isfinite(b.upper) and b.notes == ()
    assert b.upper - b.lower <= 1e-3 * b.upper, b
    assert abs(b.upper - reference) <= 0.01 * reference, b


def test_delta_has_no_round_off_floor():
    """sigma 1.1, q 0.01, 1000 steps: delta_up fell to a 1.7e-11 floor for every
    epsilon from 5 to 200; dp_accounting's PLD puts delta below 1e-14 there."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.01, 1000)]
    for eps in (5.0, 20.0, 200.0):
        db = acc.get_delta_bounds(eps)
        assert 0.0 <= db.lower <= db.upper < 1e-14, db


def test_deltas_below_the_composed_round_off_floor_use_its_grids():
    """After a composition of these steps the certified round-off is above 1e-32, so
    no smaller delta gets a finite upper bound: such a query is sized for
    COMPOSED_DELTA_FLOOR (its grids grew to 10^5 buckets, 20 s at 1,000 steps and
    minutes elsewhere), says why the upper bound is inf, and keeps a valid lower bound.  One step composes
    nothing: its bounds stay finite and bracket the closed form far below the floor."""
    from pb_accountant.composition import COMPOSED_DELTA_FLOOR
    acc = PrivacyBucketsAccountant()
    acc.history = [(5.0, 1.0, 100)]               # Gaussian composition, mu = 2
    floor = acc.get_epsilon_bounds(COMPOSED_DELTA_FLOOR)
    for delta in (1e-50, 1e-120, 1e-300):
        b = acc.get_epsilon_bounds(delta)
        assert b.grid == floor.grid and b.upper == math.inf
        assert any("round-off" in n for n in b.notes) and 0.0 < b.lower
        if delta > 1e-200:                        # (the closed form's own range)
            assert b.lower <= float(gaussian_epsilon(delta, 2.0))
    single = PrivacyBucketsAccountant()
    single.history = [(1.0, 1.0, 1)]
    b = single.get_epsilon_bounds(1e-100)
    exact = float(gaussian_epsilon(1e-100, 1.0))
    assert b.lower <= exact <= b.upper <= exact * (1 + 1e-3)
