import math

import numpy as np
import pytest
from scipy import special


def gaussian_delta(eps, mu):
    """Exact delta(eps) of the Gaussian mechanism with mu = sqrt(sum r_i / sigma_i^2).

    Evaluated with log-CDFs, so tiny deltas keep their relative accuracy."""
    eps = np.asarray(eps, dtype=float)
    a = special.log_ndtr(-eps / mu + mu / 2.0)
    b = eps + special.log_ndtr(-eps / mu - mu / 2.0)
    return np.maximum(np.exp(a) - np.exp(b), 0.0)


def gaussian_epsilon(delta, mu):
    from scipy.optimize import brentq
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    return brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, 200.0, xtol=1e-13)


def product_pair(pairs):
    """Brute-force product distribution of a list of (pa, pb) discrete pairs."""
    pa = np.array([1.0])
    pb = np.array([1.0])
    for a, b in pairs:
        pa = np.outer(pa, a).ravel()
        pb = np.outer(pb, b).ravel()
    return pa, pb


def hockey_stick(pa, pb, eps):
    """max of both directions of sum max(0, P - e^eps Q), summed exactly."""
    e = math.exp(eps)
    ab = math.fsum(np.maximum(pa - e * pb, 0.0).tolist())
    ba = math.fsum(np.maximum(pb - e * pa, 0.0).tolist())
    return max(ab, ba)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
