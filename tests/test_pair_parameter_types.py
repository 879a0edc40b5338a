"""A pair's parameters given as numpy scalars, 0-d arrays or Fractions are stored as the
Python floats their checks return (``mechanisms.store_floats``).

Kept as given, an np.float16 made SubsampledLaplace's arithmetic run in half precision
(numpy 2: a Python float meets an np.float16 as float16), and its bounds missed the
exact curve: one step of q 0.25 at noise 0.5 (both exact in float16) certified epsilon
<= 0.95410 at delta 1e-6 where the exact epsilon is above 0.9544, and delta lower bounds
above the exact delta (0.158090 > 0.158030 at eps 0); a Laplace of an np.float32, a 0-d
array or a Fraction raised TypeError in every query."""
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from pb_accountant import (Gaussian, Laplace, SubsampledGaussian, SubsampledLaplace, compose,
                           epsilon_bounds)
from pb_accountant.sampled_pairs import (SymmetricSubsampledGaussian,
                                         SymmetrisedSubsampledGaussian)

mp = mpmath.mp

# values every type below holds exactly (float16 included)
PAIRS = [
    (SubsampledLaplace, (0.5, 0.25)),
    (SubsampledLaplace, (1.0, 0.5)),
    (Laplace, (0.5,)),
    (Laplace, (0.5, 2.0, 3.0)),
    (Gaussian, (0.5,)),
    (Gaussian, (1.0, 2.0, 4.0)),
    (SubsampledGaussian, (1.0, 0.5)),
    (SymmetricSubsampledGaussian, (1.0, 0.5)),
    (SymmetrisedSubsampledGaussian, (1.0, 0.5)),
]
TYPES = [np.float16, np.float32, np.float64, np.longdouble, np.array,
         lambda v: Fraction(v)]


@pytest.mark.parametrize("cls, args", PAIRS)
@pytest.mark.parametrize("kind", TYPES)
def test_parameters_are_stored_as_python_floats(cls, args, kind):
    pair = cls(*[kind(v) for v in args])
    plain = cls(*args)
    fields = [f for f in pair.__dataclass_fields__ if f != "swapped"]
    assert all(type(getattr(pair, f)) in (float, type(None)) for f in fields), pair
    assert pair == plain and hash(pair) == hash(plain)
    assert pair.mirrored() == plain.mirrored()


@pytest.mark.parametrize("cls, args", [PAIRS[0], PAIRS[2], PAIRS[7]])
@pytest.mark.parametrize("kind", [np.float16, np.array, lambda v: Fraction(v)])
def test_bounds_are_those_of_the_float_pair(cls, args, kind):
    got = compose([(cls(*[kind(v) for v in args]), 3)], delta=1e-6)
    want = compose([(cls(*args), 3)], delta=1e-6)
    assert got.epsilon_bounds(1e-6) == want.epsilon_bounds(1e-6)
    eps = np.array([0.0, 0.5, 2.0])
    g, w = got.delta_bounds(eps), want.delta_bounds(eps)
    assert np.array_equal(g.lower, w.lower) and np.array_equal(g.upper, w.upper)
    tb = got.tradeoff_bounds([1e-3, 0.1])
    assert np.array_equal(tb.tpr_upper, want.tradeoff_bounds([1e-3, 0.1]).tpr_upper)


def _subsampled_laplace_delta(b, q, eps):
    """Exact delta(eps) of one Poisson-subsampled Laplace step (both directions): the
    integral of (P - e^eps Q)_+ in 30-digit mpmath, split where the loss crosses eps."""
    with mp.workdps(30):
        b, q, eps = mp.mpf(b), mp.mpf(q), mp.mpf(eps)

        def lap(x, m):
            return mp.exp(-abs(x - m) / b) / (2 * b)

        def mix(x):
            return (1 - q) * lap(x, 0) + q * lap(x, 1)

        def cross(e):
            # x in (0, 1) with log(1 - q + q e^{(2x - 1) / b}) = e, if any
            v = (mp.exp(e) - (1 - q)) / q
            x = (b * mp.log(v) + 1) / 2 if v > 0 else None
            return x if x is not None and 0 < x < 1 else None

        out = []
        for first, second, at in ((mix, lambda x: lap(x, 0), cross(eps)),
                                  (lambda x: lap(x, 0), mix, cross(-eps))):
            pts = [-mp.inf, 0] + ([at] if at is not None else []) + [1, mp.inf]
            out.append(mp.quad(lambda x: max(mp.mpf(0), first(x) - mp.exp(eps) * second(x)),
                               pts))
        return max(out)


def test_float16_subsampled_laplace_brackets_the_exact_curve():
    pb = compose([(SubsampledLaplace(np.float16(0.5), np.float16(0.25)), 1)], delta=1e-6)
    eps = np.array([0.0, 0.5, 0.9, 0.95])
    db = pb.delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        exact = _subsampled_laplace_delta(0.5, 0.25, e)
        assert lo <= exact <= up, (e, lo, exact, up)
    b = pb.epsilon_bounds(1e-6)
    assert _subsampled_laplace_delta(0.5, 0.25, b.upper) <= 1e-6
    assert _subsampled_laplace_delta(0.5, 0.25, math.nextafter(b.lower, 0.0)) > 1e-6


@pytest.mark.parametrize("kind", [np.float32, np.array, lambda v: Fraction(v)])
def test_laplace_of_numpy_scalars_brackets_the_closed_form(kind):
    # one Laplace step: delta(eps) = 1 - e^{(eps - eps0) / 2}, eps(delta) = eps0 + 2 log(1 - delta)
    delta = 1e-3
    b = epsilon_bounds([(Laplace(kind(0.5)), 1)], delta)
    exact = 2.0 + 2.0 * math.log1p(-delta)
    assert b.lower <= exact <= b.upper and b.upper - b.lower < 1e-3


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("steps", [10 ** 9])
def test_engine_limits_keep_the_pure_dp_bound(steps):
    """A pure-DP history past the engine's range (randomized response 0.8, 10^9 steps:
    an OverflowError in the grouped rows) keeps its largest total loss r log 4 as the
    upper bound, as the dp_accounting adapter answers (it had been inf), and delta 0
    from there on."""
    from pb_accountant import RandomizedResponse
    cap = steps * math.log(4.0)
    pair = RandomizedResponse(0.8)
    for b in (epsilon_bounds([(pair, steps)], 1e-6),
              compose([(pair, steps)], delta=1e-6).epsilon_bounds(1e-6)):
        assert b.lower == 0.0 and cap <= b.upper <= cap * (1 + 1e-12), b
    pb = compose([(pair, steps)], delta=1e-6)
    db = pb.delta_bounds([0.0, cap * (1 + 1e-12)])
    # (every outcome's loss is at most r log 4: the exact delta is 0 there)
    assert list(db.upper) == [1.0, 0.0]
