"""Poisson-subsampled Laplace mechanism as a worst-case pair (paper §5.1 with §5.4's sampling).

remove direction (default): A = (1-q) Lap(0, b) + q Lap(1, b), B = Lap(0, b) (b the
noise multiplier, sensitivity 1); ``mirrored()`` gives the add direction.  With
l(x) = (|x| - |x-1|) / b the loss is L(x) = log(1 - q + q e^{l(x)}): constant
L_- = log(1 - q + q e^{-1/b}) for x <= 0, constant L_+ = log(1 - q + q e^{1/b}) for
x >= 1 (two atoms), and increasing on (0, 1), where each loss interval is an
x-interval with end points x(t) = (b log((e^t - (1-q)) / q) + 1) / 2.  The masses are
closed-form Laplace interval masses (exp/expm1 on the side of the mean), as for
:class:`pb_accountant.mechanisms.Laplace`, with the same relative error allowance, plus
the mass within the end points' own round-off of each end point (docs/floating-point.md).  This is the pair dp_accounting's ``LaplacePrivacyLoss``
with ``sampling_prob`` describes for the ADD_OR_REMOVE_ONE relation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._fp import UNIT_ROUNDOFF as _U
from ._validation import check_real, check_sample_rate
from .mechanisms import (UNDERFLOW_FLOOR, MechanismPair, _monotone_end_points,
                         laplace_interval_mass, store_floats,
                         laplace_relative_error)

__all__ = ["SubsampledLaplace"]


@dataclass(frozen=True)
class SubsampledLaplace(MechanismPair):
    """One Poisson-sampled Laplace step: rate q, Laplace noise of scale b (sensitivity 1).

    remove direction (default) A = (1-q) Lap(0, b) + q Lap(1, b), B = Lap(0, b);
    ``mirrored()`` is the add direction.  q = 1 is the plain Laplace mechanism.
    """

    noise_multiplier: float
    sample_rate: float
    swapped: bool = False
    #: the atoms may underflow (e^{-1/b} at small b)
    mass_absolute_error = 4 * UNDERFLOW_FLOOR

    def __post_init__(self):
        store_floats(self, noise_multiplier=check_real("noise_multiplier",
                                                       self.noise_multiplier, low=1e-3,
                                                       high=1e12),
                     sample_rate=check_sample_rate(self.sample_rate, allow_zero=False))

    @property
    def mass_relative_error(self) -> float:
        """Every Laplace mass is of an interval whose nearer end lies within 1/b scales of
        its mean (means 0 and 1, outcomes in [0, 1] or an atom's half-line;
        ``laplace_relative_error``); the atoms' mixtures (1-q) b + q a1 of non-negative
        terms and their sums add 8u (the continuous part's mixture: 4u, counted there)."""
        return float(laplace_relative_error(1.001 / self.noise_multiplier)) + 8.0 * _U

    # -- the loss and its inverse ---------------------------------------------------
    def _mixed_loss(self, ell):
        """log(1 - q + q e^ell), without overflow."""
        q = self.sample_rate
        if q == 1.0:
            return float(ell)
        return float(np.logaddexp(math.log1p(-q), math.log(q) + ell))

    @property
    def loss_low(self) -> float:
        """L_-: the loss of every outcome x <= 0."""
        return self._mixed_loss(-1.0 / self.noise_multiplier)

    @property
    def loss_high(self) -> float:
        """L_+: the loss of every outcome x >= 1."""
        return self._mixed_loss(1.0 / self.noise_multiplier)

    def _inner(self, t):
        """log((e^t - (1-q)) / q) as log1p(expm1(t) / q) (no subtraction of log q), and
        for t > 30, where expm1(t) / q could overflow, t - log q + log1p((q-1) e^{-t});
        -inf at and below log(1 - q)."""
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        if q == 1.0:
            return t
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            big = t > 30.0
            y = np.maximum(np.expm1(np.where(big, 0.0, t)) / q, -1.0)
            out = np.where(big, t - math.log(q) + np.log1p((q - 1.0) * np.exp(-np.where(big, t, 30.0))),
                           np.log1p(y))
        return np.where(t <= math.log1p(-q), -np.inf, out)

    def _x_of_loss(self, t):
        """x(t) on (0, 1): the outcome whose loss is t (clipped to [0, 1])."""
        ell = self._inner(t)
        with np.errstate(invalid="ignore", over="ignore"):
            x = (self.noise_multiplier * ell + 1.0) / 2.0
        return np.clip(np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)

    def _x_error(self, t):
        """Bound on |x(t) computed - x(t)| (before clipping, which only moves it closer):
        each step of ``_inner`` with exp/expm1/log/log1p good to one ulp and 2u of room
        per step (as for SubsampledGaussian's end points, docs/floating-point.md)."""
        u = _U
        b = self.noise_multiplier
        q = self.sample_rate
        t = np.asarray(t, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inner = self._inner(t)
            ainner = np.abs(np.where(np.isfinite(inner), inner, 0.0))
            if q == 1.0:
                dinner = 0.0 * ainner
            else:
                big = t > 30.0
                y = np.expm1(np.where(big, 0.0, t)) / q
                d_small = 3.03 * u * np.abs(y) / np.maximum(1.0 + y, 1e-300) + 2.0 * u * ainner
                d_big = 4.0 * u * (np.abs(t) + abs(math.log(q)) + 1.0)
                dinner = np.where(big, d_big, d_small)
            dx = (b * (dinner + 2.0 * u * ainner) + 2.0 * u * (b * ainner + 1.0)) / 2.0 * 1.01
        # an end point computed at or below log(1 - q) (inner -inf) is set to 0; its exact
        # x(t) is at most ``_threshold_reach(t)`` (0 unless t is next to log(1 - q))
        return np.where(np.isfinite(inner) & np.isfinite(dx), dx, self._threshold_reach(t))

    def _threshold_reach(self, t) -> np.ndarray:
        """Bound on the exact end point x(t) (before clipping) where the computed inner
        log is -inf, i.e. on how far the end point set to 0 may be off.

        Either t <= fl(log1p(-q)), which is within 2u |log(1-q)| of log(1-q) (log1p to
        one ulp), so e^t - (1-q) <= (1-q) expm1(t - fl(log1p(-q)) + 2.03u |log1p(-q)|)
        (0 further below); or t is above it and fl(fl(expm1(t)) / q) <= -1, so
        expm1(t) <= -q (1 - 3u) and e^t - (1-q) <= 3.01u q.  With rho the bound on
        (e^t - (1-q)) / q (1% of room), x(t) <= (b log(rho) + 1) / 2; at or below 0 the
        end point 0 is exact, above it the stretch (0, x(t)) may belong to the bucket
        below (the loss is flat there: b < 1 / |log rho|, about 1/36)."""
        b, q = self.noise_multiplier, self.sample_rate
        t = np.asarray(t, dtype=float)
        if q == 1.0:
            return np.zeros(t.shape)
        thr = math.log1p(-q)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            excess = np.maximum((t - thr) + 2.03 * _U * abs(thr), 0.0)
            rho = np.where(t <= thr, (1.0 - q) * np.expm1(excess) / q, 3.01 * _U) * 1.01
            reach = (b * np.log(rho) + 1.0) / 2.0
            return np.where(reach > -4.0 * _U, np.minimum(reach * 1.01 + 4.0 * _U, 1.0), 0.0)

    # -- the MechanismPair interface --------------------------------------------------
    def _atoms(self):
        b, q = self.noise_multiplier, self.sample_rate
        b_left = float(laplace_interval_mass(-np.inf, 0.0, 0.0, b))
        a1_left = float(laplace_interval_mass(-np.inf, 0.0, 1.0, b))
        b_right = float(laplace_interval_mass(1.0, np.inf, 0.0, b))
        a1_right = float(laplace_interval_mass(1.0, np.inf, 1.0, b))
        a_left = (1.0 - q) * b_left + q * a1_left
        a_right = (1.0 - q) * b_right + q * a1_right
        return (np.array([self.loss_low, self.loss_high]), np.array([a_left, a_right]),
                np.array([b_left, b_right]))

    def _atom_loss_side(self, i: int, v: float):
        """L_-, L_+ = ln(1 - q + q e^{-+1/b}) minus v in 60-digit ``decimal`` arithmetic
        (exp, ln correctly rounded, the doubles converted exactly, |1/b| <= 1000): the
        computed difference is within 1e-55 of (1 + |L| + |v|) of the exact one, so one
        beyond 1e-50 of that is decided; q = 1: exact (``fractions``)."""
        from decimal import Context, Decimal
        from fractions import Fraction
        b, q = self.noise_multiplier, self.sample_rate
        if q == 1.0:
            ell = Fraction(1) / Fraction(b) * (1 if i == 1 else -1)
            d = ell - Fraction(v)
            return 1 if d > 0 else (-1 if d < 0 else 0)
        ctx = Context(prec=60)
        ell = ctx.divide(Decimal(1 if i == 1 else -1), Decimal(b))
        Q = Decimal(q)
        L = ctx.ln(ctx.add(ctx.subtract(Decimal(1), Q), ctx.multiply(Q, ctx.exp(ell))))
        dv = Decimal(v)
        d = ctx.subtract(L, dv)
        margin = ctx.multiply(Decimal("1e-50"), abs(L) + abs(dv) + 1)
        return 1 if d > margin else (-1 if d < -margin else None)

    def _atom_loss_error(self, losses) -> np.ndarray:
        """Bounds on |L_-| and |L_+| computed minus exact (``_mixed_loss``), with
        log/log1p/exp good to one ulp (2u relative), first order (the inputs' errors are
        below 1e-11, which the 1% of room covers).  The inputs: x = log1p(-q) carries
        2u |x|; y = log q + ell (ell = +-1/b, one division: u |ell|) carries 2u |log q|,
        u |ell| and its sum's u |y|.  logaddexp(x, y) has partial derivatives
        w_x = 1 / (1 + e^{y - x}) and w_y = 1 - w_x, so it passes on w_x dx + w_y dy.  Its
        own: with d = |x - y| and E = e^{-d}, max(x, y) + log1p(E): d rounded (u d),
        which E turns into u d E; exp's 2u E; log1p's 2u log1p(E) <= 2u E; the final
        sum's u |L|.  q = 1: L = ell, u |ell|."""
        b, q = self.noise_multiplier, self.sample_rate
        u = _U
        out = []
        for ell in (-1.0 / b, 1.0 / b):
            if q == 1.0:
                out.append(u * abs(ell) * 1.01)
                continue
            x = math.log1p(-q)
            y = math.log(q) + ell
            L = self._mixed_loss(ell)
            d = abs(x - y)
            wy = 1.0 / (1.0 + math.exp(min(x - y, 700.0)))
            wx = 1.0 / (1.0 + math.exp(min(y - x, 700.0)))
            passed = wx * 2.0 * u * abs(x) + wy * u * (2.0 * abs(math.log(q)) + abs(ell)
                                                       + abs(y))
            own = u * (math.exp(-d) * (d + 4.0) + abs(L))
            out.append((passed + own) * 1.01)
        return np.array(out)

    def _continuous(self, t):
        a, b, _, _ = self._continuous_with_error(t)
        return a, b

    def _continuous_with_error(self, t):
        scale, q = self.noise_multiplier, self.sample_rate
        x = self._x_of_loss(t)
        dx = np.concatenate(([0.0], np.minimum(self._x_error(t), 1.0), [0.0]))
        x = np.concatenate(([0.0], x, [1.0]))
        x = np.maximum.accumulate(x)   # guards against rounding making it non-monotone
        # open interval (0, 1): the end atoms are counted in _atoms
        bm = laplace_interval_mass(x[:-1], x[1:], 0.0, scale)
        a1 = laplace_interval_mass(x[:-1], x[1:], 1.0, scale)
        a = (1.0 - q) * bm + q * a1
        rel = self.mass_relative_error
        # events within an end point's error may belong to the neighbouring bucket: their
        # mass (both densities are at most 1 / (2 scale)) joins each bucket's error
        # (at most 1: the masses are probabilities)
        m = np.minimum(2.0 * dx / (2.0 * scale) * 1.001, 1.0) + UNDERFLOW_FLOOR
        edge = m[:-1] + m[1:]
        return a, bm, rel * a + 4 * _U * a + edge, rel * bm + edge

    def loss_bounds(self):
        """L_- and L_+ (every outcome at or left of 0 has loss L_-, at or right of 1 L_+,
        the loss increasing between), each widened by its round-off
        (``_atom_loss_error``) and rounded outward."""
        err = self._atom_loss_error([self.loss_low, self.loss_high])
        lo = math.nextafter(self.loss_low - float(err[0]), -math.inf)
        hi = math.nextafter(self.loss_high + float(err[1]), math.inf)
        return (-hi, -lo) if self.swapped else (lo, hi)

    def _continuous_with_displacement(self, t):
        """Masses of the x-intervals between the computed end points (exact event sets;
        relative error only).  The loss log(1 - q + q e^{(2x - 1)/b}), extended beyond
        (0, 1) by the same formula, is 2/b-Lipschitz (its slope is 2/b times a weight in
        (0, 1)), so an end point within dx of its exact x(t) (``_x_error``) has a loss
        within 2 dx / b of t; clipping to [0, 1] only moves it closer.  (The mass within
        dx of each end point, at the densities' maximum, was charged instead: e^{1/b}
        times the A-mass near the least loss, which the split leaf passes on to the B
        row.)"""
        scale, q = self.noise_multiplier, self.sample_rate
        x, dx = _monotone_end_points(
            np.concatenate(([0.0], self._x_of_loss(t), [1.0])),
            np.concatenate(([0.0], np.minimum(self._x_error(t), 1.0), [0.0])))
        shift = dx[1:-1] * (2.0 / scale) * 1.01
        # open interval (0, 1): the end atoms are counted in _atoms
        bm = laplace_interval_mass(x[:-1], x[1:], 0.0, scale)
        a1 = laplace_interval_mass(x[:-1], x[1:], 1.0, scale)
        a = (1.0 - q) * bm + q * a1
        rel = self.mass_relative_error
        floor = 2.0 * UNDERFLOW_FLOOR
        return a, bm, rel * a + 4 * _U * a + floor, rel * bm + floor, shift

    def _loss_range(self, tail):
        return self.loss_low, self.loss_high
