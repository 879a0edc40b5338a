"""Pairs for samplers and neighbouring relations beyond Poisson add/remove.

* :class:`SymmetricSubsampledGaussian` -- Poisson sampling under replace-one
  (substitution): A = (1-q) N(0, s^2) + q N(1, s^2), B = (1-q) N(0, s^2) + q N(-1, s^2),
  the pair dp_accounting's ``GaussianPrivacyLoss(..., sampling_prob=q,
  adjacency_type=REPLACE)`` uses (Zhu, Dong, Wang, AISTATS 2022).
* :class:`SymmetrisedSubsampledGaussian` -- fixed-size batches under replace-one: the
  symmetrisation of (1-q) N(0, s^2) + q N(1, s^2) vs N(0, s^2) (its losses > 0, their
  mirror images, an atom at 0), whose curve is the larger of the pair's two directions
  at every epsilon (Dong, Roth, Su 2022; Zhu, Dong, Wang 2022).
* :class:`MaxOfBatches` -- the shuffle lower-bound pair: the maximum over the B noisy
  batch sums of one epoch (Chua et al., ICML 2024), binned into intervals (binning is
  post-processing), with certified relative errors of its masses.

See docs/method.md, "Samplers and neighbouring relations".
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ._fp import LEAST_NORMAL
from ._fp import UNIT_ROUNDOFF as _U
from ._validation import check_count, check_noise_multiplier, check_real, check_sample_rate
from .mechanisms import (DiscretePair, MechanismPair, SubsampledGaussian, endpoint_mass,
                         normal_interval_mass_and_error, normal_log_cdf_and_error,
                         normal_x_interval_mass, store_floats)

#: 1 / sqrt(2 pi) (for a bound on phi, with 0.1% of room for its rounding)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class SymmetricSubsampledGaussian(MechanismPair):
    """Poisson-sampled Gaussian under replace-one (substitution).

    A = (1-q) N(0, s^2) + q N(1, s^2), B = (1-q) N(0, s^2) + q N(-1, s^2) (contributions
    clipped to norm 1, so the substituted example moves the sum by up to 2).  The loss
    L(x) = log((1-q) + q c e^{x/s^2}) - log((1-q) + q c e^{-x/s^2}), c = e^{-1/(2 s^2)},
    is increasing and odd, so every loss interval is an x-interval.  The pair is its own
    mirror (L(-x) = -L(x)).
    """

    noise_multiplier: float
    sample_rate: float
    swapped: bool = False

    def __post_init__(self):
        store_floats(self,
                     noise_multiplier=check_noise_multiplier(self.noise_multiplier,
                                                             allow_zero=False),
                     sample_rate=check_sample_rate(self.sample_rate, allow_zero=False))

    def _x_of_loss(self, t):
        """x with L(x) = t, in log space (no overflow for small s or large |t|)."""
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        log_c = -0.5 / s2
        if q == 1.0:
            # L(x) = 2x/s^2
            return 0.5 * s2 * t
        log_q = math.log(q)
        log_1mq = math.log1p(-q)
        # u = e^{x/s^2} solves q c u^2 + b u - e^t q c = 0 with b = (1-q)(1 - e^t)
        log_x4 = math.log(4.0) + 2.0 * log_q + 2.0 * log_c + t       # log(4 q^2 c^2 e^t)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            pos = t >= 0.0
            tp = np.where(pos, t, 0.0)
            tn = np.where(pos, -1.0, t)
            log_absb = np.where(pos, log_1mq + np.log(np.expm1(tp)),
                                log_1mq + np.log(-np.expm1(tn)))
            log_root = 0.5 * np.logaddexp(2.0 * log_absb, log_x4)
            # t >= 0: u = (|b| + root) / (2qc); t < 0: u = 2 e^t q c / (b + root)
            log_u_pos = np.logaddexp(log_absb, log_root) - (math.log(2.0) + log_q + log_c)
            log_u_neg = (math.log(2.0) + t + log_q + log_c) - np.logaddexp(log_absb, log_root)
            log_u = np.where(pos, log_u_pos, log_u_neg)
        x = s2 * log_u
        # near the centre the log-space roots cancel (x / s^2 = log u is the difference of
        # numbers near log(1/(2 q c))): there solve for w - 1 = e^{x/s^2} - 1 directly,
        # in the odd form x(t) = -x(-t), where no term cancels:
        # w - 1 = (b + (b^2 + 4 a^2 expm1(t)) / (R + 2a)) / (2a), a = alpha,
        # b = (1 - a) expm1(t), R = sqrt(b^2 + 4 a^2 e^t)
        a = self._alpha()
        if a > 0.0:
            # (at small s, alpha = q c / (1 - q + q c) is tiny or underflows to 0: then
            # b / (2 alpha) overflows, and where it does the log-space root, which has
            # nothing to cancel against there, is kept)
            ta = np.minimum(np.abs(np.where(np.isfinite(t), t, 0.0)), self._SMALL_Y)
            with np.errstate(over="ignore", invalid="ignore"):
                em = np.expm1(ta)
                b = (1.0 - a) * em
                root = np.sqrt(b * b + 4.0 * a * a * (em + 1.0))
                w1 = (b + (b * b + 4.0 * a * a * em) / (root + 2.0 * a)) / (2.0 * a)
                near = np.copysign(s2 * np.log1p(w1), t)
            x = np.where((np.abs(t) <= self._SMALL_Y) & np.isfinite(near), near, x)
        return np.where(np.isneginf(t), -np.inf, np.where(np.isposinf(t), np.inf, x))

    #: |x| / s^2 up to which the loss is evaluated through expm1 (no cancellation)
    _SMALL_Y = 30.0

    def _alpha(self) -> float:
        """q c / (1 - q + q c): L(x) = log1p(alpha expm1(y)) - log1p(alpha expm1(-y)),
        y = x / s^2 (1 at q = 1, also where q c underflows to 0)."""
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        if q == 1.0:
            return 1.0
        qc = q * math.exp(-0.5 / s2)
        return qc / ((1.0 - q) + qc)

    def _loss_of_x(self, x):
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        x = np.asarray(x, dtype=float)
        if q == 1.0:
            return 2.0 * x / s2
        y = x / s2
        small = np.abs(y) <= self._SMALL_Y
        ys = np.where(small, y, 0.0)
        alpha = self._alpha()
        near = np.log1p(alpha * np.expm1(ys)) - np.log1p(alpha * np.expm1(-ys))
        log_c = -0.5 / s2
        l1 = math.log1p(-q)
        lq = math.log(q) + log_c
        with np.errstate(over="ignore"):
            far = np.logaddexp(l1, lq + y) - np.logaddexp(l1, lq - y)
        return np.where(small, near, far)

    def _loss_error(self, x, loss):
        """Bound on |_loss_of_x(x) computed - L(x)|.  Near the centre (|y| <= 30, y =
        x / s^2) the two log1p terms have opposite signs, so the bound is relative to
        them: v = alpha expm1(+-y) carries u (13 + 4 |y| + 2 / s^2) relative (y's two
        roundings amplified by y e^y / expm1(y) <= 1 + |y|, expm1's ulp, alpha's five
        roundings and exp(-1/(2 s^2))'s argument, the product), which log1p turns into
        |v| eps / (1 + v) absolutely, plus its own ulp and the difference's.  Far out,
        each logaddexp input carries a few ulp of |log q| + |log c| + |y| and each
        logaddexp and the difference an ulp of their results, doubled."""
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        x = np.asarray(x, dtype=float)
        y = np.abs(x) / s2
        if q == 1.0:
            return 4.0 * _U * np.abs(loss)
        l1 = abs(math.log1p(-q))
        lq = abs(math.log(q)) + 0.5 / s2
        far = 16.0 * _U * (l1 + lq + y + 1.0) + 2.0 * _U * np.abs(loss)
        small = y <= self._SMALL_Y
        ys = np.where(small, y, 0.0)
        alpha = self._alpha()
        eps_v = _U * (13.0 + 4.0 * ys + 2.0 / s2)
        with np.errstate(over="ignore", invalid="ignore"):
            v1 = alpha * np.expm1(ys)              # >= 0
            v2 = alpha * np.expm1(-ys)             # in (-alpha, 0]
            t1, t2 = np.log1p(v1), np.log1p(v2)
            near = (v1 * eps_v / (1.0 + v1) + np.abs(v2) * eps_v / (1.0 + v2) * 1.01
                    + 2.0 * _U * (t1 - t2) + 2.0 * _U * np.abs(loss)) * 1.01
        return np.where(small, near, far)

    def _continuous(self, t):
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _min_slope(self) -> float:
        """A lower bound on L'(x) over the real line: s^2 L' = sigma(x) + sigma(-x) for
        the logistic sigma(x) = q c e^{x/s^2} / (1 - q + q c e^{x/s^2}), which is at
        least min(2 sigma(0), 1) (its minimum is at 0 when sigma's centre is right of 0,
        its infimum 1 at +-inf otherwise), with 1% of room for rounding.  At q = 1,
        sigma = 1 everywhere (qc may underflow to 0 there: 0/0 is not evaluated)."""
        s2 = self.noise_multiplier ** 2
        q = self.sample_rate
        qc = q * math.exp(-0.5 / s2)
        at_zero = 1.0 if q == 1.0 else qc / (1.0 - q + qc)
        return min(2.0 * at_zero, 1.0) / s2 * 0.99

    def _end_point_shift(self, t, xe):
        """(finite, shift): which computed end points ``xe`` of the grid ``t`` are finite,
        and each one's loss displacement measured a posteriori, |L(xe) - t| plus the
        round-off of evaluating L there (meaningless where not finite)."""
        finite = np.isfinite(xe)
        with np.errstate(invalid="ignore", over="ignore"):
            at = np.where(finite, xe, 0.0)
            loss = self._loss_of_x(at)
            shift = np.abs(loss - t) * (1.0 + 2.0 * _U) + self._loss_error(at, loss)
        return finite, shift

    def _continuous_with_error(self, t):
        """Masses of the x-intervals between the computed end points, with the mass
        within each end point's distance to the exact one counted as error in both
        buckets: that distance is at most the end point's loss displacement (measured
        as in ``_continuous_with_displacement``) over the least slope of L."""
        s = self.noise_multiplier
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        x = np.concatenate(([-np.inf], self._x_of_loss(t), [np.inf]))
        x = np.maximum.accumulate(x)
        z0l, z0h = x[:-1] / s, x[1:] / s
        zpl, zph = (x[:-1] - 1.0) / s, (x[1:] - 1.0) / s
        zml, zmh = (x[:-1] + 1.0) / s, (x[1:] + 1.0) / s
        m0, e0 = normal_interval_mass_and_error(z0l, z0h)
        mp, ep = normal_interval_mass_and_error(zpl, zph)
        mm, em = normal_interval_mass_and_error(zml, zmh)
        # the end points' distance to the exact ones, in z units (plus the rounding of
        # standardising them: 2u of |x| + 1, over s)
        xe = x[1:-1]
        finite, shift = self._end_point_shift(t, xe)
        # (a zero least slope, where q e^{-1/(2 s^2)} underflows, or an overflowing
        # quotient makes dz inf: the end point's mass is then all of its interval's)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            dx = shift / self._min_slope() * 1.01 + 2.02 * _U * (np.abs(xe) + 1.0)
            dz = np.concatenate(([0.0], np.where(finite, dx / s * 1.01, 0.0), [0.0]))

        def edges(mean):
            with np.errstate(invalid="ignore"):
                m = endpoint_mass((x - mean) / s, dz)
            return m[:-1] + m[1:]

        ep = ep + edges(1.0)
        em = em + edges(-1.0)
        if q == 1.0:
            return mp, mm, ep, em
        e0 = e0 + edges(0.0)
        a = (1.0 - q) * m0 + q * mp
        b = (1.0 - q) * m0 + q * mm
        return (a, b, (1.0 - q) * e0 + q * ep + 2 * _U * a,
                (1.0 - q) * e0 + q * em + 2 * _U * b)

    def _continuous_with_displacement(self, t):
        """Masses of the x-intervals between the computed end points (exact event sets,
        the three components on the same x); each end point's displacement is measured
        a posteriori: |L(x computed) - t| plus the round-off of evaluating L there."""
        s = self.noise_multiplier
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        x = np.maximum.accumulate(np.concatenate(([-np.inf], self._x_of_loss(t), [np.inf])))
        finite, shift = self._end_point_shift(t, x[1:-1])
        shift = np.where(finite, shift, np.inf)     # inf: the leaf falls back
        m0, e0 = normal_x_interval_mass(x, 0.0, s)
        mp, ep = normal_x_interval_mass(x, 1.0, s)
        mm, em = normal_x_interval_mass(x, -1.0, s)
        if q == 1.0:
            return mp, mm, ep, em, shift
        a = (1.0 - q) * m0 + q * mp
        b = (1.0 - q) * m0 + q * mm
        return (a, b, (1.0 - q) * e0 + q * ep + 2 * _U * a,
                (1.0 - q) * e0 + q * em + 2 * _U * b, shift)

    def _loss_range(self, tail):
        z = float(-special.ndtri(max(tail, 1e-300)))
        s = self.noise_multiplier
        hi = float(self._loss_of_x(1.0 + s * z))
        return -hi, hi


# -- the shuffle lower-bound pair -------------------------------------------------------

def max_of_batches_masses(batches: int, shift: float, *, resolution: float = 0.02,
                          floor: float = -600.0, max_bins: int = 20_000):
    """Binned distribution of max_j Y_j / s over one epoch's B batches (z = x / s).

    B-side ("without"): all B batch sums are N(0, s^2): CDF Phi(z)^B.  A-side ("with"):
    one batch is shifted by ``shift`` = sensitivity / s: CDF Phi(z)^(B-1) Phi(z - shift).
    Returns (edges, a, b, rel_err): the masses of (-inf, e_0], (e_0, e_1], ...,
    (e_{K-1}, inf) and a bound on the relative error of every mass (each mass is
    exp(G(hi)) * (-expm1(G(lo) - G(hi))) with G = log CDF, whose absolute error
    ``_log_cdfs`` bounds from the proven log Phi, ``normal_log_cdf_and_error``).
    """
    B = check_count("batches", batches, minimum=1)
    d = check_real("shift", shift, low=0.0, low_open=True)
    # left end: both log-CDFs >= floor (every mass a normal float), searched in steps
    # of 0.25 from -40; right end: at most z = 37, where the upper tails 1 - F are
    # still normal floats (relative accuracy)
    hi = min(12.0 + d, 37.0)
    starts = -40.0 + 0.25 * np.arange(400)
    ga, _, gb, _ = _log_cdfs(starts, B, d)
    ok = (np.minimum(ga, gb) >= floor) | (starts >= hi - 1.0)
    lo = float(starts[np.argmax(ok)]) if ok.any() else -40.0 + 0.25 * 400
    h = max(min(resolution, resolution / d), (hi - lo) / max_bins)
    n = int(math.ceil((hi - lo) / h))
    fine = lo + (hi - lo) * np.arange(n + 1) / n
    ga, ea, gb, eb = _log_cdfs(fine, B, d)
    # the first edge: the first point where both log-CDFs reach the floor (the search
    # above may have stopped at hi - 1 without it, at shifts above ~70), so that every
    # mass is a normal float with the relative accuracy below
    reach = np.flatnonzero(np.minimum(ga, gb) >= floor)
    if not len(reach):
        raise FloatingPointError("max-of-batches masses not representable; "
                                 f"batches={B}, shift={d}")
    # keep only edges where both computed log-CDFs strictly increase: merging bins is
    # post-processing, and no kept bin has a zero or cancelled mass
    keep = [int(reach[0])]
    for k in range(keep[0] + 1, n + 1):
        if ga[k] > ga[keep[-1]] and gb[k] > gb[keep[-1]]:
            keep.append(k)
    edges = fine[keep]
    out = []
    errs = []
    for G, eG in ((ga[keep], ea[keep]), (gb[keep], eb[keep])):
        delta = G[:-1] - G[1:]                       # log F(lo) - log F(hi) < 0
        inner = np.exp(G[1:]) * -np.expm1(delta)
        first = np.exp(G[0])
        last = -np.expm1(G[-1])
        rel_inner = eG[1:] + (eG[:-1] + eG[1:] + _U * np.abs(delta)) / np.abs(delta) + 4 * _U
        rel_first = eG[0] + 2 * _U
        rel_last = eG[-1] / abs(G[-1]) + 2 * _U
        masses = np.concatenate(([first], inner, [last]))
        rel = np.concatenate(([rel_first], rel_inner, [rel_last]))
        # (below the least normal double a mass loses its relative accuracy)
        if not (np.all(masses >= LEAST_NORMAL) and np.all(np.isfinite(rel))):
            raise FloatingPointError("max-of-batches masses not representable; "
                                     f"batches={B}, shift={d}")
        out.append(masses)
        errs.append(rel)
    a, b = out
    rel = float(np.max(np.concatenate(errs)))
    return edges, a, b, 1.02 * rel


def _log_cdfs(z, B, d):
    """(G_a, its error bound, G_b, its error bound) at z for the max's log-CDFs:
    G_a = (B - 1) log Phi(z) + log Phi(z - d), G_b = B log Phi(z), z exact (the bin
    edges); absolute error bounds.

    log Phi comes with its proven error (``normal_log_cdf_and_error``).  z - d is
    rounded, and d = sensitivity / s was too (relative u each), so the argument is off
    by at most D = 1.01 u (|d| + |z - d|).  log Phi's slope phi / Phi is at most |x| + 2
    (Gordon's inequality R(t) >= t / (t^2 + 1) for x = -t <= -1/2, and below 1.2
    elsewhere) and, right of 0, at most 2 phi(x) (Phi >= 1/2, phi falling): D costs
    (|x| + D + 2.5) D, or 2 phi(x - D) D where x - D > 0.  The products by B - 1 and B
    and the sum round by at most 2u |G| (the terms share their sign)."""
    lp, ep = normal_log_cdf_and_error(z)
    gb = B * lp
    eb = (B * ep + 2 * _U * np.abs(gb)) * (1.0 + 1e-9)
    x = z - d
    lq, eq = normal_log_cdf_and_error(x)
    moved = 1.01 * _U * (abs(d) + np.abs(x))
    near = np.maximum(x - moved, 0.0)
    with np.errstate(under="ignore"):
        slope = np.where(x - moved > 0.0, 2.002 * _INV_SQRT_2PI * np.exp(-0.5 * near * near),
                         np.abs(x) + moved + 2.5)
    eq = eq + slope * moved
    ga = (B - 1) * lp + lq
    return ga, ((B - 1) * ep + eq + 2 * _U * np.abs(ga)) * (1.0 + 1e-9), gb, eb


@dataclass(frozen=True)
class MaxOfBatches(DiscretePair):
    """Chua et al.'s (ICML 2024) shuffle lower-bound pair for one epoch, binned.

    A = law of the binned max over the B batches when one batch carries the shift,
    B = the same without it.  ``relative_error`` bounds the relative error of every
    stored mass (see :func:`max_of_batches_masses`); the accountant corrects the
    composed lower bound for it (docs/method.md, "Samplers and neighbouring relations").
    """

    relative_error: float = 0.0

    def loss_bounds(self):
        """None derived: the stored masses are approximations (a mass stored as 0 may
        not be 0), and the true pair's loss is unbounded."""
        return -math.inf, math.inf


@functools.lru_cache(maxsize=64)
def max_of_batches_pair(batches: int, noise_multiplier: float, sensitivity: float) -> MaxOfBatches:
    """The binned max-of-batches pair for B batches, noise s, shift ``sensitivity``
    (cached: an immutable value of its arguments)."""
    s = check_noise_multiplier(noise_multiplier, allow_zero=False)
    _, a, b, rel = max_of_batches_masses(batches, sensitivity / s)
    # both sums are 1 within rel (DiscretePair checks 1e-9); the masses are stored as
    # computed and the accountant corrects for ``rel``
    return MaxOfBatches(tuple(a.tolist()), tuple(b.tolist()), relative_error=rel)


# -- fixed-size batches under replace-one: the symmetrised pair ----------------------------

@dataclass(frozen=True)
class SymmetrisedSubsampledGaussian(MechanismPair):
    """The symmetrisation S of P = (1-q) N(0, s^2) + q N(1, s^2) vs Q = N(0, s^2): the
    tight one-step pair of fixed-size batches under replace-one (Dong, Roth, Su 2022,
    subsampling theorem, C(f) = min(f, f^-1)**; Zhu, Dong, Wang 2022).

    S's hockey-stick curve is max(delta_{P||Q}, delta_{Q||P}) at every epsilon, which is
    delta_{P||Q} at epsilon >= 0 (docs/method.md, "Samplers and neighbouring
    relations": true for any base pair whose two directions agree at epsilon >= 0, as
    N(1, s^2) vs N(0, s^2) do), and S is its own mirror.  Its privacy-loss distribution
    is P||Q's on losses > 0 (the A-masses P(L in I), B-masses Q(L in I)), that part
    mirrored onto losses < 0 (A-masses Q(L in -I), B-masses P(L in -I)), and an atom
    at loss 0 holding the rest, 1 - P(L > 0) - Q(L > 0) = (1-q) P(|N(0,1)| <= 1/(2s))
    on both sides (L > 0 is x > 1/2).

    Fields as :class:`SubsampledGaussian`'s (``noise_multiplier`` is sigma / shift);
    every mass comes from that pair's certified masses, on a grid that holds 0 and the
    grid's absolute values, or from the atom's closed form.
    """

    noise_multiplier: float
    sample_rate: float
    swapped: bool = False

    def __post_init__(self):
        store_floats(self,
                     noise_multiplier=check_noise_multiplier(self.noise_multiplier,
                                                             allow_zero=False),
                     sample_rate=check_sample_rate(self.sample_rate, allow_zero=False))
        if self.sample_rate == 1.0:
            raise ValueError("SymmetrisedSubsampledGaussian needs sample_rate < 1 (at 1 "
                             "the Gaussian pair is its own mirror)")

    @property
    def inner(self) -> SubsampledGaussian:
        """P vs Q, whose losses > 0 S keeps."""
        return SubsampledGaussian(self.noise_multiplier, self.sample_rate)

    def _zero_atom(self):
        """(mass, relative error bound) of the atom at loss 0: (1-q) m, m the standard
        normal mass of (-z, z], z = 1/(2s).  z = 0.5 / s carries u of itself, which moves
        m by at most 2 phi(0) u z; m carries its proven error; 1 - q and the product
        round by u each."""
        return _symmetrised_zero_atom(self.noise_multiplier, self.sample_rate)

    @property
    def mass_relative_error(self) -> float:
        return self._zero_atom()[1]

    def _atoms(self):
        m = self._zero_atom()[0]
        return np.zeros(1), np.array([m]), np.array([m])

    def _atom_loss_error(self, losses) -> np.ndarray:
        """The one atom's loss is 0, exactly."""
        return np.zeros(np.shape(losses))

    def _map(self, t):
        """(inner grid G, inner bucket -> S bucket for the losses > 0, the same for their
        mirror images < 0).  G = {0} and the finite |t_k| > 0, sorted: inner bucket j
        >= 1 is (G_{j-1}, G_j] (the last (G_m, inf)), and no point of t lies strictly
        inside it or its mirror image [-G_j, -G_{j-1}), so each lies in one S bucket:
        the first t_k >= G_j, and the first t_k >= -G_{j-1}."""
        t = np.asarray(t, dtype=float)
        a = np.abs(t[np.isfinite(t)])
        G = np.unique(np.concatenate(([0.0], a[a > 0.0])))
        upper = np.concatenate((G[1:], [np.inf]))
        lower = G
        pos = np.searchsorted(t, upper, side="left")
        neg = np.searchsorted(t, -lower, side="left")
        return G, pos, neg

    def _gather(self, t, a, b, G, pos, neg):
        """S's A- and B-masses on the K+1 buckets of t (losses != 0) from the inner
        pair's (a, b) on G (bucket 0, the losses <= 0, is not read), and how many inner
        masses each sums."""
        k = len(t) + 1
        idx = np.concatenate((pos, neg))
        sa = np.bincount(idx, weights=np.concatenate((a[1:], b[1:])), minlength=k)
        sb = np.bincount(idx, weights=np.concatenate((b[1:], a[1:])), minlength=k)
        return sa.astype(float), sb.astype(float), np.bincount(idx, minlength=k)

    def _continuous_with_error(self, t):
        """Sums of the inner pair's certified masses, their error bounds summed, plus
        the rounding of the sums (c terms: (c - 1) u of the sum), with 1% of room."""
        t = np.asarray(t, dtype=float)
        G, pos, neg = self._map(t)
        a, b, ea, eb = self.inner._continuous_with_error(G)
        sa, sb, count = self._gather(t, a, b, G, pos, neg)
        esa, esb, _ = self._gather(t, ea, eb, G, pos, neg)
        summed = np.maximum(count - 1, 0) * _U
        return (sa, sb, (esa + summed * sa) * (1.0 + (count + 2) * _U) * 1.01,
                (esb + summed * sb) * (1.0 + (count + 2) * _U) * 1.01)

    def _continuous_with_displacement(self, t):
        """The inner pair's exact event sets (``SubsampledGaussian``'s displaced
        borders), gathered as in ``_continuous_with_error``.  Its end point at loss 0 is
        x = 1/2 exactly (s^2 log1p(expm1(0) / q) + 1/2 rounds to nothing), so its
        buckets j >= 1 hold exactly the events of loss > 0 and S's sets partition S's
        outcomes; S's border t_k takes the displacement of the inner border |t_k| (the
        events next to t_k > 0 are of the loss > 0 side, those next to t_k < 0 their
        mirror images), 0 at t_k = 0.  Where x(0) were not 1/2 the borders are not
        displaced (the default)."""
        t = np.asarray(t, dtype=float)
        if float(self.inner._x_of_loss(np.zeros(1))[0]) != 0.5:
            return super()._continuous_with_displacement(t)
        G, pos, neg = self._map(t)
        a, b, ea, eb, sh = self.inner._continuous_with_displacement(G)
        sa, sb, count = self._gather(t, a, b, G, pos, neg)
        esa, esb, _ = self._gather(t, ea, eb, G, pos, neg)
        summed = np.maximum(count - 1, 0) * _U
        finite = np.isfinite(t) & (t != 0.0)
        at = np.searchsorted(G, np.abs(np.where(finite, t, 0.0)))
        shift = np.where(finite, np.asarray(sh, dtype=float)[np.minimum(at, len(G) - 1)], 0.0)
        return (sa, sb, (esa + summed * sa) * (1.0 + (count + 2) * _U) * 1.01,
                (esb + summed * sb) * (1.0 + (count + 2) * _U) * 1.01, shift)

    def _continuous_masses(self, t):
        t = np.asarray(t, dtype=float)
        G, pos, neg = self._map(t)
        a, b = self.inner._continuous_masses(G)
        return self._gather(t, np.asarray(a), np.asarray(b), G, pos, neg)[:2]

    def _continuous_sizing_masses(self, t):
        t = np.asarray(t, dtype=float)
        G, pos, neg = self._map(t)
        a, b = self.inner._continuous_sizing_masses(G)
        return self._gather(t, np.asarray(a), np.asarray(b), G, pos, neg)[:2]

    def _loss_range(self, tail):
        hi = max(float(self.inner._loss_range(tail)[1]), 0.0)
        return -hi, hi


@functools.lru_cache(maxsize=256)
def _symmetrised_zero_atom(s: float, q: float):
    z = 0.5 / s
    m, e = normal_interval_mass_and_error(np.array([-z]), np.array([z]))
    m, e = float(m[0]), float(e[0])
    if not m >= LEAST_NORMAL:
        raise FloatingPointError(f"symmetrised pair: the zero atom's mass underflows (s={s})")
    moved = 2.0 * _INV_SQRT_2PI * _U * z * 1.01          # z's rounding
    atom = (1.0 - q) * m
    rel = (e + moved) / m * 1.01 + 3.0 * _U
    return atom, rel
