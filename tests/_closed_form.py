"""Exact references shared by the tests: the Gaussian composition's delta(eps) and
epsilon(delta) (mu = sqrt(T) / sigma), evaluated with 60-digit mpmath."""
import math

import mpmath

mp = mpmath.mp


def atoms_delta(atoms, eps):
    """Exact delta(eps), both directions, of a composition given as its outcomes'
    (A-mass, B-mass) in mpmath (the larger of A||B and B||A)."""
    e = mp.exp(mp.mpf(float(eps)))
    return max(sum(max(mp.mpf(0), p - e * q) for p, q in atoms),
               sum(max(mp.mpf(0), q - e * p) for p, q in atoms))


def multinomial_atoms(stay, other, rest, r):
    """The outcomes' (A-mass, B-mass) of r steps of three-event randomized response
    (A = (stay, other, rest), B = (other, stay, rest), mpmath numbers): the counts of
    each event, weighted by the multinomial coefficient (an event of mass 0 left out)."""
    atoms = []
    for i in range(r + 1):
        for j in range(r + 1 - i):
            m = r - i - j
            if m and rest == 0:
                continue
            c = mp.factorial(r) / (mp.factorial(i) * mp.factorial(j) * mp.factorial(m))
            atoms.append((c * stay ** i * other ** j * rest ** m,
                          c * other ** i * stay ** j * rest ** m))
    return atoms


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


def _subsampled_gaussian(s, q):
    """(a, b, cdf_a, cdf_b, sf_a, sf_b, l, inverse) of one Poisson-subsampled Gaussian
    step (add/remove, A the mixture): densities, distribution and survival functions
    (the latter without 1 - cdf's cancellation at small delta), the loss
    l(x) = log(1 - q + q e^{(2x - 1) / (2 s^2)}), increasing in x, and its inverse
    (-inf where l never gets below the target)."""
    def b(x):
        return mp.npdf(x, 0, s)

    def a(x):
        return (1 - q) * b(x) + q * mp.npdf(x, 1, s)

    def cdf_b(c):
        return mp.ncdf(c / s)

    def cdf_a(c):
        return (1 - q) * mp.ncdf(c / s) + q * mp.ncdf((c - 1) / s)

    def sf_b(c):                  # 1 - cdf_b, without the cancellation far out
        return mp.ncdf(-c / s)

    def sf_a(c):
        return (1 - q) * mp.ncdf(-c / s) + q * mp.ncdf((1 - c) / s)

    def loss(x):
        return mp.log(1 - q + q * mp.exp((2 * x - 1) / (2 * s * s)))

    def inverse(target):
        y = mp.exp(target) - (1 - q)
        return s * s * mp.log(y / q) + mp.mpf(1) / 2 if y > 0 else -mp.inf

    return a, b, cdf_a, cdf_b, sf_a, sf_b, loss, inverse


def subsampled_gaussian_one_step_delta(sigma, q, eps):
    """delta(eps) of one Poisson-subsampled Gaussian step, (A||B, B||A), to 30 digits:
    the loss increases with the outcome, so each direction's events are a half-line
    (60 digits: the difference of the two survival masses cancels at small delta)."""
    with mp.workdps(60):
        s, q, eps = mp.mpf(sigma), mp.mpf(q), mp.mpf(eps)
        _, _, cdf_a, cdf_b, sf_a, sf_b, _, inverse = _subsampled_gaussian(s, q)
        c = inverse(eps)
        ab = sf_a(c) - mp.exp(eps) * sf_b(c)
        c = inverse(-eps)
        ba = mp.mpf(0) if c == -mp.inf else cdf_b(c) - mp.exp(eps) * cdf_a(c)
        return float(ab), float(ba)


def subsampled_gaussian_two_step_delta(sigma, q, eps):
    """delta(eps) of two Poisson-subsampled Gaussian steps (add/remove), both directions,
    to 30 digits: for each first outcome x the second is integrated in closed form (the
    loss increases with the outcome, so the events where the pair's loss passes +-eps
    are a half-line in the second outcome)."""
    with mp.workdps(30):
        s, q, eps = mp.mpf(sigma), mp.mpf(q), mp.mpf(eps)
        a, b, cdf_a, cdf_b, sf_a, sf_b, loss, inverse = _subsampled_gaussian(s, q)

        def ab(x):                # the second outcome above c: a a - e^eps b b > 0
            c = inverse(eps - loss(x))
            return a(x) * sf_a(c) - mp.exp(eps) * b(x) * sf_b(c)

        def ba(x):                # below c': b b - e^eps a a > 0
            c = inverse(-eps - loss(x))
            if c == -mp.inf:
                return mp.mpf(0)
            return b(x) * cdf_b(c) - mp.exp(eps) * a(x) * cdf_a(c)

        # the kinks: where the half-line starts to exist
        k_ab = inverse(eps - mp.log(1 - q))
        k_ba = inverse(-eps - mp.log(1 - q))
        pts = sorted({-mp.inf, -20 * s, 0, mp.mpf(1) / 2, 1, 1 + 20 * s, mp.inf}
                     | {k for k in (k_ab, k_ba) if k != -mp.inf})
        return (float(mp.quad(ab, pts)), float(mp.quad(ba, pts)))


def assert_two_steps_bracketed(buckets, sigma, q, eps):
    """Both bounds of ``buckets`` (two Poisson-subsampled Gaussian steps) bracket
    ``subsampled_gaussian_two_step_delta`` at every eps (relative 1e-12, either
    direction's max); returns (eps, lower, exact, upper) for further checks."""
    from pb_accountant.engine import PrivacyBuckets
    d = PrivacyBuckets(buckets, None).delta_bounds(eps)
    out = []
    for e, lo, up in zip(eps, d.lower, d.upper):
        exact = max(subsampled_gaussian_two_step_delta(sigma, q, e))
        assert lo <= exact * (1 + 1e-12) and exact <= up * (1 + 1e-12), (e, lo, exact, up)
        out.append((e, lo, exact, up))
    return out


def subsampled_gaussian_pair_delta(first, second, eps):
    """delta(eps) of one step of each of two Poisson-subsampled Gaussian pairs,
    ``first`` and ``second`` each (sigma, q), both directions, to 30 digits
    (``subsampled_gaussian_two_step_delta`` with the second outcome from the second
    pair)."""
    with mp.workdps(30):
        eps = mp.mpf(eps)
        a, b, _, _, _, _, loss, inverse1 = _subsampled_gaussian(*map(mp.mpf, first))
        _, _, cdf_a, cdf_b, sf_a, sf_b, _, inverse = _subsampled_gaussian(*map(mp.mpf,
                                                                             second))
        s, q2 = mp.mpf(first[0]), mp.mpf(second[1])

        def ab(x):
            c = inverse(eps - loss(x))
            return a(x) * sf_a(c) - mp.exp(eps) * b(x) * sf_b(c)

        def ba(x):
            c = inverse(-eps - loss(x))
            if c == -mp.inf:
                return mp.mpf(0)
            return b(x) * cdf_b(c) - mp.exp(eps) * a(x) * cdf_a(c)

        # the kinks: where the second outcome's half-line starts to exist
        kinks = (inverse1(eps - mp.log(1 - q2)), inverse1(-eps - mp.log(1 - q2)))
        pts = sorted({-mp.inf, -20 * s, 0, mp.mpf(1) / 2, 1, 1 + 20 * s, mp.inf}
                     | {k for k in kinks if k != -mp.inf})
        return (float(mp.quad(ab, pts)), float(mp.quad(ba, pts)))
