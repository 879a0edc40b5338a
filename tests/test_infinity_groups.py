"""The lower bound's infinity groups (events only one side can produce) against exact
values: they must never exceed the reference's.

An independent review found two ways they did: the product of two compositions' groups
was a1 + a2 - a1 a2, exact only where each side's masses sum to 1, and a DiscretePair's
floats may sum to less (masses summing to 1 - 5e-10: a delta lower bound 2.4e-9 above
the exact delta and a lower epsilon of inf; 200 steps of (p, 1 - p) against (0, 1):
4.6e-15 above); and a truncated Gaussian's computed group mass was taken without its
error (6.7e-15 above the exact delta).  References: exact fractions of the doubles, and
50-digit mpmath for the normal masses.
"""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from _optional import given, settings, st
from pb_accountant import DiscretePair, Gaussian, compose, epsilon_bounds

mp = pytest.importorskip("mpmath")


def _distinguishing_delta(p: float, q: float, r: int, eps: float) -> Fraction:
    """Exact delta(eps) of r steps of A = (p, q), B = (0, 1) on the very doubles: A||B is
    every outcome with an event B cannot produce, (p + q)^r - q^r (the outcome of r
    second events has A-mass q^r <= 1 <= e^eps B-mass); B||A is 1 - e^eps q^r where
    positive (exp rounded down, so the value is at most the exact one... compared below
    with the bound's float, far from it)."""
    P, Q = Fraction(p), Fraction(q)
    ab = (P + Q) ** r - Q ** r
    ba = 1 - Fraction(math.exp(eps)) * Q ** r
    return max(ab, ba, Fraction(0))


def test_masses_summing_below_one_keep_the_delta_lower_bound_below_the_exact_delta():
    p, q = 0.5, 0.4999999995                       # accepted: within 1e-9 of summing to 1
    for r in (1, 2, 4, 5, 6):
        pb = compose([(DiscretePair((p, q), (0.0, 1.0)), r)], delta=1e-6)
        eps = np.array([0.0, 0.5, 3.0, 10.0])
        low = pb.delta_bounds(eps).lower
        for e, lo in zip(eps, low):
            assert Fraction(float(lo)) <= _distinguishing_delta(p, q, r, e), (r, e, lo)
    # the review's: the doubles p and 1 - p sum to 1 - 4.5e-17
    p = 1.2261944677322437e-07
    low = compose([(DiscretePair((p, 1.0 - p), (0.0, 1.0)), 200)],
                  delta=1e-6).delta_bounds(np.array([0.5])).lower[0]
    assert Fraction(float(low)) <= _distinguishing_delta(p, 1.0 - p, 200, 0.5)
    p, q = 0.5, 0.4999999995
    # the lower epsilon at a delta just below the distinguishing mass is finite and
    # below the exact epsilon (about 3.7e-8), where it was inf
    bounds = compose([(DiscretePair((p, q), (0.0, 1.0)), 5)],
                     delta=1e-6).epsilon_bounds(0.968749999)
    assert 0.0 < bounds.lower < 3.8e-8


@settings(max_examples=60, deadline=None)
@given(p=st.floats(1e-9, 0.5), r=st.integers(1, 300))
def test_a_distinguishing_event_of_float_masses_is_bracketed_exactly(p, r):
    """(p, 1 - p) against (0, 1): the two doubles may sum to 1 - 5e-17; both bounds
    bracket the exact delta on the doubles given, at epsilons 0 to 5."""
    q = 1.0 - p
    pb = compose([(DiscretePair((p, q), (0.0, 1.0)), r)], delta=1e-8)
    eps = np.array([0.0, 0.1, 1.0, 5.0])
    db = pb.delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = _distinguishing_delta(p, q, r, e)
        assert Fraction(float(lo)) <= exact, (p, r, e, lo, float(exact))
        assert Fraction(float(up)) >= exact * (1 - Fraction(1, 10 ** 12)), (p, r, e, up)


@pytest.mark.parametrize("sigma,sensitivity,truncation", [
    (8.81084495138684, 0.5, 45.32866807261563),       # the review's case
    (2.0, 1.0, 3.0), (0.7, 1.0, 1.5), (5.0, 2.0, 20.0)])
def test_truncated_gaussian_lower_bound_stays_below_its_distinguishing_mass(
        sigma, sensitivity, truncation):
    """Far above the finite losses, delta is exactly the mass of the events only A can
    produce, [Q((T - s)/sigma) - Q(T/sigma)] / (1 - 2 Q(T/sigma)) (Q the normal tail):
    the delta lower bound is at most it, and the lower epsilon just above it finite."""
    mp.mp.dps = 50
    s, T, sd = mp.mpf(sensitivity), mp.mpf(truncation), mp.mpf(sigma)
    tail = lambda z: mp.erfc(z / mp.sqrt(2)) / 2           # noqa: E731
    mass = (tail((T - s) / sd) - tail(T / sd)) / (1 - 2 * tail(T / sd))
    # the largest finite loss, (2 x s - s^2) / (2 sigma^2) at x = T
    top = float((2 * T * s - s * s) / (2 * sd * sd))
    pair = Gaussian(sigma, sensitivity, truncation)
    pb = compose([(pair, 1)], delta=1e-3)
    lo = pb.delta_bounds(np.array([top * 1.01 + 0.01, top * 2 + 1.0])).lower
    assert all(mp.mpf(float(v)) <= mass for v in lo), (lo, mass)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = epsilon_bounds([(pair, 1)], float(mass * (1 + mp.mpf("1e-12"))))
    assert b.lower <= top * 1.01 + 0.01 and math.isfinite(b.lower)
