"""Exact references shared by the tests: the Gaussian composition's delta(eps) and
epsilon(delta) (mu = sqrt(T) / sigma), evaluated with 60-digit mpmath."""
import math

import mpmath

mp = mpmath.mp


def gaussian_delta(eps, mu):
    """Exact delta(eps) of the Gaussian composition with mu = sqrt(T) / sigma."""
    with mp.workdps(60):
        eps, mu = mp.mpf(eps), mp.mpf(mu)
        return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)


def gaussian_epsilon(delta, mu):
    """The exact smallest epsilon with delta(epsilon) <= delta: a double-precision
    estimate (log-CDFs), then 60-digit bisection on a bracket around it."""
    from scipy import optimize, special

    def approx(e):
        a = special.log_ndtr(-e / mu + mu / 2.0)
        b = e + special.log_ndtr(-e / mu - mu / 2.0)
        return math.log(max(math.exp(a) - math.exp(b), 1e-300)) - math.log(delta)

    guess = optimize.brentq(approx, 0.0, 10.0 * (mu * mu + 10.0 * mu + 10.0), xtol=1e-14)
    with mp.workdps(60):
        lo, hi = mp.mpf(guess) * (1 - mp.mpf(1e-6)), mp.mpf(guess) * (1 + mp.mpf(1e-6))
        assert gaussian_delta(lo, mu) > delta >= gaussian_delta(hi, mu)
        for _ in range(60):
            mid = (lo + hi) / 2
            if gaussian_delta(mid, mu) > delta:
                lo = mid
            else:
                hi = mid
        return float(hi)
