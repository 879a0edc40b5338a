"""The premises the certificates rest on (docs/floating-point.md, "What is proved and
what is assumed"): the elementary functions of numpy (vectorised, on this machine's SIMD
paths) and of Python's math module are as accurate as the bounds take them to be:
one ulp (2u relative) each.  exp enters the normal and Laplace masses, expm1 the Laplace
masses, the split leaf and the end points, log and log1p the end points, the atoms'
losses and the log-CDFs (which take them to 4u, more than this).  Measured against 120-bit mpmath on random arguments over the ranges
the engine uses; results whose exact value is subnormal are left out (the bounds charge
those with the UNDERFLOW_FLOOR instead)."""
import math

import numpy as np
import pytest

mpmath = pytest.importorskip("mpmath")

U = 2.0 ** -53
#: relative accuracy each function is taken to have, in units of u
ASSUMED = {"exp": 2.0, "expm1": 2.0, "log": 2.0, "log1p": 2.0}
N = 20000


def _args(name, rng):
    if name == "exp":
        return np.concatenate((rng.uniform(-708.0, 709.0, N), rng.uniform(-40.0, 1.0, N)))
    if name == "expm1":
        small = rng.uniform(-1.0, 1.0, N) * 10.0 ** rng.uniform(-12.0, 0.0, N)
        return np.concatenate((rng.uniform(-40.0, 700.0, N), small))
    if name == "log":
        return np.concatenate((10.0 ** rng.uniform(-307.0, 307.0, N), rng.uniform(0.25, 4.0, N)))
    small = rng.uniform(-1.0, 1.0, N) * 10.0 ** rng.uniform(-14.0, 0.0, N)
    return np.concatenate((small, 10.0 ** rng.uniform(-6.0, 100.0, N)))


def _worst(name, computed, xs):
    mpmath.mp.prec = 120
    exact_fn = getattr(mpmath, name)
    worst = 0.0
    for x, v in zip(xs, computed):
        exact = exact_fn(mpmath.mpf(float(x)))
        if exact == 0 or abs(exact) < 2.2250738585072014e-308:
            continue
        worst = max(worst, float(abs(mpmath.mpf(float(v)) - exact) / abs(exact)) / U)
    return worst


@pytest.mark.parametrize("name", sorted(ASSUMED))
def test_numpy_elementary_functions_meet_the_assumed_accuracy(name):
    xs = _args(name, np.random.default_rng(11))
    worst = _worst(name, getattr(np, name)(xs), xs)
    assert worst <= ASSUMED[name], f"numpy.{name}: {worst:.2f}u"


@pytest.mark.parametrize("name", sorted(ASSUMED))
def test_math_module_functions_meet_the_assumed_accuracy(name):
    xs = _args(name, np.random.default_rng(12))[::6]
    worst = _worst(name, [getattr(math, name)(float(x)) for x in xs], xs)
    assert worst <= ASSUMED[name], f"math.{name}: {worst:.2f}u"
