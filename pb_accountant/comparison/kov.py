"""Kairouz-Oh-Viswanath optimal composition (paper Theorem 3, §5.6), in log space, for
(eps0, delta0) pairs and for the certified one-step bucket curve of a mechanism pair."""
from __future__ import annotations

import functools
import math
from typing import Tuple

import numpy as np
from scipy import special

from ..mechanisms import MechanismPair
from ..results import DeltaBounds, EpsilonBounds, PrivacyCurve
from .._validation import _array, _count, _real
from ._common import _ULP, _exp_upper, _log1mexp, _mul_up, _product_le, _scalar_or_array

#: largest number of compositions the log-space evaluation accepts
_MAX_KOV_COMPOSITIONS = 10 ** 7


# --------------------------------------------------------------------------------------
# Kairouz-Oh-Viswanath optimal composition (paper Theorem 3, §5.6), in log space
# --------------------------------------------------------------------------------------
#
# With q = 1/(1 + e^eps0) and pmf(l) = C(r, l) q^l (1 - q)^(r - l), the paper's
#   delta_i = sum_{l<i} C(r,l) (e^{(r-l)eps0} - e^{(r-2i+l)eps0}) / (1 + e^eps0)^r
#           = sum_{l<i} pmf(l) (1 - e^{-2(i-l)eps0}).
# Writing h_j = sum_{l<=j} pmf(l) e^{-2(j-l)eps0} one gets the cancellation-free form
#   delta_i = (1 - e^{-2 eps0}) sum_{j<i} h_j,
# a double cumulative sum of positive terms, done with logaddexp.accumulate.

def _kov_log_binom(r: int, n: int) -> np.ndarray:
    """log C(r, l) for l = 0..n-1 (betaln is accurate for large arguments)."""
    l = np.arange(n, dtype=float)
    return -math.log(r + 1.0) - special.betaln(r - l + 1.0, l + 1.0)


def _kov_margin(r: int, eps0: float, n: int) -> float:
    """Log-space allowance for rounding in the table (50x the error measured vs mpmath)."""
    return _ULP * (16.0 * (r * math.log(r + 1.0) + 2.0 * r * eps0) + 4.0 * n + 64.0)


def _kov_log_delta_i(log_binom, eps0, r, i_max) -> np.ndarray:
    """log delta_i (paper Theorem 3) for i = 0..i_max, rounding allowance included."""
    out = np.full(i_max + 1, -np.inf)
    if i_max == 0 or eps0 == 0.0:
        return out
    l = np.arange(i_max, dtype=float)
    b = log_binom[:i_max] + l * eps0 - r * math.log1p(math.exp(-eps0))  # log pmf + 2 l eps0
    log_h = np.logaddexp.accumulate(b) - 2.0 * eps0 * l
    log_s = np.logaddexp.accumulate(log_h)
    out[1:] = math.log(-math.expm1(-2.0 * eps0)) + log_s + _kov_margin(r, eps0, i_max)
    return np.minimum(out, 0.0)


def _kov_index(r, eps0, targets):
    """Smallest i in {0..} with (r - 2i) eps0 <= target exactly (may exceed floor(r/2))."""
    if eps0 == 0.0:
        return np.zeros(targets.shape, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = targets / eps0
    ratio = np.where(np.isfinite(ratio), ratio, float(r))
    i = np.ceil((r - np.minimum(ratio, float(r))) / 2.0)
    i = np.clip(i, 0, r // 2 + 1).astype(np.int64)
    for _ in range(2):  # correct the float estimate with an exact test, both ways
        bad = ~_product_le(r - 2 * i, eps0, targets) & (i <= r // 2)
        i = i + bad
    for _ in range(2):
        im = np.maximum(i - 1, 0)
        better = (i > 0) & _product_le(r - 2 * im, eps0, targets)
        i = np.where(better, im, i)
    return i


def _log_margin(*terms, absolute: float = 1.0):
    """Rounding allowance of a log-space value computed from ``terms`` by a few roundings
    each (log1p, expm1, log, exp, products and sums, each within 2 ulps of its result):
    8 ulps of ``absolute`` plus the finite terms' magnitudes.  With ``absolute`` 1,
    added to a log it also covers the final ``exp`` (within an ulp or two of its value)
    of ``_exp_upper``: a relative 8 ulps."""
    total = absolute
    for t in terms:
        t = np.asarray(t, dtype=float)
        total = total + np.where(np.isfinite(t), np.abs(t), 0.0)
    return 8.0 * _ULP * total


def _kov_log_delta_prime(log_di, log_keep0, delta0_zero):
    """log of an upper bound on delta' = 1 - (1 - delta0)^r (1 - delta_i) (paper
    Theorem 3).  log((1 - delta0)^r (1 - delta_i)) is lowered by its rounding allowance
    before 1 - e^y is taken (a lower y only raises delta'), and the result is raised by
    its own: computed as written, delta' came out up to a few ulps below the exact
    1 - (1 - delta0)^r (e.g. 1 - 2^-53 for 1 - 1e-49), below the exact KOV curve."""
    if delta0_zero:
        return log_di
    keep_i = _log1mexp(log_di)
    y = log_keep0 + keep_i
    # r log1p(-delta0) and log(1 - delta_i) are each within a few ulps of themselves
    # (log1mexp's two branches both are: docs in _log_margin), the sum within one ulp:
    # relative errors, so no absolute part (which would double a delta0 near 1e-15)
    y = y - _log_margin(log_keep0, keep_i, y, absolute=0.0)
    out = _log1mexp(y)
    return np.minimum(out + _log_margin(out), 0.0)


def _kov_base_log_delta(log_binom, r, eps0, delta0, targets, interpolate):
    """log upper bound on delta(target) from one base pair, and the mask of targets
    below every grid point (left at delta = 1 when not interpolating)."""
    half = r // 2
    if delta0 >= 1.0:
        return np.zeros(targets.shape), np.ones(targets.shape, dtype=bool)
    log_keep0 = r * math.log1p(-delta0)
    i_star = _kov_index(r, eps0, targets)
    feasible = i_star <= half
    i_f = np.where(feasible, i_star, half)
    i_max = int(i_f.max()) if i_f.size else 0
    log_di = _kov_log_delta_i(log_binom, eps0, r, i_max)
    log_dp = _kov_log_delta_prime(log_di, log_keep0, delta0 == 0.0)
    result = log_dp[i_f]
    uncertified = np.zeros(targets.shape, dtype=bool)
    if interpolate and eps0 > 0.0:
        # delta(eps) is convex in e^eps (a supremum of affine functions of e^eps), so it
        # lies below the chord between the certified grid points (r-2i)eps0 <= eps and
        # (r-2i+2)eps0 > eps; this is exactly the KOV/randomized-response curve.
        inner = feasible & (i_f >= 1)
        if inner.any():
            hi_eps = (r - 2 * (i_f[inner] - 1)) * eps0
            gap = targets[inner] - hi_eps                      # in [-2 eps0, 0)
            lam = np.expm1(gap) / math.expm1(-2.0 * eps0)      # weight of the lower point
            slack = (4.0 * np.spacing(np.maximum(np.abs(hi_eps), np.abs(targets[inner])))
                     / -math.expm1(-2.0 * eps0))
            lam = np.clip(lam * (1.0 + 8.0 * _ULP) + slack, 0.0, 1.0)
            with np.errstate(divide="ignore"):
                left = np.log(lam) + log_dp[i_f[inner]]
                right = np.log1p(-lam) + log_dp[i_f[inner] - 1]
                chord = np.logaddexp(left, right)
            # the logs, sums and logaddexp round: without this allowance the chord of
            # two values near 1 came out at 1 - 2^-53 (kov_delta(0.0196, 0.6796, 100,
            # 0.1), whose exact value exceeds 1 - 1e-49)
            chord = chord + _log_margin(left, right, chord)
            result = result.copy()
            result[inner] = np.minimum(result[inner], chord)
        outer = ~feasible
        if outer.any():
            # r odd and eps < eps0: chord between e^eps = 0 (delta <= 1) and e^eps0.
            top = log_dp[half]
            shift = np.minimum(targets[outer] - eps0, 0.0)
            frac = np.exp(shift) * (1.0 - 8.0 * _ULP)
            result = result.copy()
            value = np.log1p(-frac * -np.expm1(top))
            result[outer] = value + _log_margin(value, top)
    else:
        uncertified = ~feasible
        result = np.where(feasible, result, 0.0)
    return np.minimum(result, 0.0), uncertified


def _kov_curve_impl(eps0s, delta0s, r, targets, interpolate):
    shape = targets.shape
    flat = targets.ravel()
    best = np.zeros(flat.shape)          # log of the best upper bound so far (log 1 = 0)
    n_need = r // 2 + 1
    log_binom = _kov_log_binom(r, n_need)
    uncertified = np.ones(flat.shape, dtype=bool)
    for eps0, delta0 in zip(eps0s.tolist(), delta0s.tolist()):
        if delta0 >= 1.0:
            continue
        if delta0 > 0.0 and flat.size and _log1mexp(r * math.log1p(-delta0)) >= best.max():
            continue   # 1 - (1 - delta0)^r is already above every current bound
        log_d, unc = _kov_base_log_delta(log_binom, r, eps0, delta0, flat, interpolate)
        uncertified &= unc
        best = np.minimum(best, log_d)
    # delta(eps) is non-increasing: a bound certified at a smaller eps holds at larger eps.
    if flat.size:
        order = np.argsort(flat, kind="stable")
        best_sorted = np.minimum.accumulate(best[order])
        best = np.empty_like(best)
        best[order] = best_sorted
    notes = ()
    if uncertified.any() and not interpolate:
        notes = ("some targets lie below every (r - 2i) eps0 grid point: delta = 1 there",)
    return _exp_upper(best).reshape(shape), notes


def _check_kov_base(epsilon0, delta0):
    e0 = _real("epsilon0", epsilon0, low=0.0)
    d0 = _real("delta0", delta0, low=0.0, high=1.0)
    return e0, d0


def kov_delta(epsilon0, delta0, compositions, epsilon, *, interpolate: bool = True
              ) -> DeltaBounds:
    """Kairouz-Oh-Viswanath optimal composition (paper Theorem 3) as a delta(eps) bound.

    For r compositions of an (eps0, delta0)-DP mechanism, every i in {0..floor(r/2)}
    certifies (eps', delta') with eps' = (r - 2i) eps0 and
    delta' = 1 - (1 - delta0)^r (1 - delta_i).  The smallest delta' with eps' <= epsilon
    is returned (delta_i grows with i).  With ``interpolate`` (default) the bound between
    two grid points is the chord in e^eps, valid because delta(eps) is convex in e^eps;
    this is exactly the optimal KOV curve for eps at or above the smallest grid point.
    Below it (odd r, eps < eps0) the value is a valid but looser bound: r = 1, eps0 =
    log(0.51/0.49), eps = 0 gives 0.0392 where r-fold randomized response, the optimal
    curve, has 0.02.  ``interpolate=False`` gives the paper §5.6
    grid values (delta = 1, with a note, below the smallest grid point).

    Computed in log space (log-binomials via betaln, logaddexp.accumulate, log1p/expm1)
    with a rounding allowance, for r up to 10**7 and any finite eps0.
    """
    e0, d0 = _check_kov_base(epsilon0, delta0)
    r = _count("compositions", compositions, maximum=_MAX_KOV_COMPOSITIONS)
    scalar = np.ndim(epsilon) == 0
    eps = _array("epsilon", epsilon, low=0.0, allow_inf=True)
    up, notes = _kov_curve_impl(np.array([e0]), np.array([d0]), r, eps, interpolate)
    return DeltaBounds(epsilon=_scalar_or_array(eps, scalar),
                       lower=_scalar_or_array(np.zeros_like(up), scalar),
                       upper=_scalar_or_array(up, scalar), method="kov", notes=notes)


def kov_epsilon(epsilon0, delta0, compositions, delta, *, interpolate: bool = True
                ) -> EpsilonBounds:
    """Smallest epsilon certified by KOV (paper Theorem 3) at the target delta.

    The largest i with delta'_i <= delta gives eps = (r - 2i) eps0; with ``interpolate``
    the chord to the next grid point is solved for delta and the result is re-checked
    with :func:`kov_delta` before it is returned.  eps = inf (noted) when even i = 0,
    i.e. adaptive composition's delta' = 1 - (1 - delta0)^r, exceeds delta.
    """
    e0, d0 = _check_kov_base(epsilon0, delta0)
    r = _count("compositions", compositions, maximum=_MAX_KOV_COMPOSITIONS)
    target = _real("delta", delta, low=0.0, high=1.0)
    half = r // 2
    if d0 >= 1.0:
        if target >= 1.0:
            return EpsilonBounds(delta=target, lower=0.0, upper=0.0, method="kov")
        return EpsilonBounds(delta=target, lower=0.0, upper=math.inf, method="kov",
                             notes=("delta0 = 1: nothing can be certified",))
    log_binom = _kov_log_binom(r, half + 1)
    log_di = _kov_log_delta_i(log_binom, e0, r, half)
    log_dp = _kov_log_delta_prime(log_di, r * math.log1p(-d0), d0 == 0.0)
    dp = _exp_upper(log_dp)
    ok = np.nonzero(dp <= target)[0]
    if ok.size == 0:
        return EpsilonBounds(delta=target, lower=0.0, upper=math.inf, method="kov",
                             notes=("delta is below 1 - (1 - delta0)^r: no KOV pair "
                                    "certifies it",))
    i = int(ok.max())
    eps_grid = float(_mul_up(float(r - 2 * i), e0))
    best = eps_grid
    if interpolate and i < half and e0 > 0.0:
        y_lo, y_hi = dp[i + 1], dp[i]            # values at (r-2i-2)eps0 and (r-2i)eps0
        if y_lo > y_hi:
            lam = (target - y_hi) / (y_lo - y_hi)
            cand = eps_grid + math.log1p(lam * math.expm1(-2.0 * e0))
            cand = max(cand, 0.0)
            for _ in range(8):   # return only a value whose bound has been evaluated
                if cand >= eps_grid:
                    break
                if float(kov_delta(e0, d0, r, cand).upper) <= target:
                    best = cand
                    break
                cand = cand + max(1e-12 * abs(cand), 4.0 * float(np.spacing(cand)), 1e-300)
    return EpsilonBounds(delta=target, lower=0.0, upper=max(best, 0.0), method="kov")


def kov_curve(base_epsilons, base_deltas, compositions, epsilons, *,
              interpolate: bool = True) -> PrivacyCurve:
    """KOV composition (paper Theorem 3) of a whole base privacy curve, as in paper §5.6.

    The base pair is (eps0_j, delta0_j)-DP for every point j of its curve; each point
    certifies its own KOV bound, so the returned upper curve is, for every target eps,
    the minimum over base points j and i.  A value certified at a smaller target also
    holds at larger ones (delta is non-increasing), so the curve is monotone.
    ``delta_lower`` is the trivial 0.  Runs in O(#base * r) with vectorised log-space
    cumulative sums.
    """
    e0 = _array("base_epsilons", base_epsilons, low=0.0).ravel()
    d0 = _array("base_deltas", base_deltas, low=0.0, high=1.0).ravel()
    if e0.shape != d0.shape:
        raise ValueError(f"base_epsilons and base_deltas must have the same length, got "
                         f"{e0.size} and {d0.size}")
    r = _count("compositions", compositions, maximum=_MAX_KOV_COMPOSITIONS)
    eps = _array("epsilons", epsilons, low=0.0, allow_inf=True)
    up, notes = _kov_curve_impl(e0, d0, r, eps, interpolate)
    return PrivacyCurve(epsilons=eps, delta_lower=np.zeros_like(up), delta_upper=up,
                        method="kov", notes=notes)


# --------------------------------------------------------------------------------------
# KOV from the one-step bucket curve
# --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _default_one_step(pair: MechanismPair, points: int, delta: float):
    base, d0 = _one_step(pair, None, points, delta)
    base.setflags(write=False)
    d0.setflags(write=False)
    return base, d0


def one_step_curve(pair: MechanismPair, base_epsilons=None, points: int = 400,
                   delta: float = 1e-12) -> Tuple[np.ndarray, np.ndarray]:
    """(eps0_j, delta0_j): the certified upper curve of one step, both directions.

    By default eps0 runs over 0, a geometric grid of ``points`` values from 1e-6 times
    the largest finite loss of the leaf up to it, and that largest loss itself (where
    delta0 is only the distinguishing mass), i.e. the paper's fine grid (§5.6).
    """
    if base_epsilons is None:
        return _default_one_step(pair, int(points), float(delta))
    return _one_step(pair, base_epsilons, points, delta)


def _one_step(pair, base_epsilons, points, delta):
    from ..engine import compose   # local import: engine does not depend on this module

    pb = compose([(pair, 1)], delta=delta)
    if base_epsilons is None:
        s = pb.buckets.split
        t = s.grid.losses
        A, B = s.rows
        top = max(float(t[A > 0].max()) if (A > 0).any() else 0.0,
                  float((-t)[B > 0].max()) if (B > 0).any() else 0.0, 1e-12)
        base = np.unique(np.concatenate([[0.0], np.geomspace(top * 1e-6, top, points), [top]]))
    else:
        base = np.unique(_array("base_epsilons", base_epsilons, low=0.0).ravel())
    return base, np.asarray(pb.delta_upper(base), dtype=float)


def kov_for_sequence(pair: MechanismPair, compositions, epsilons, *, base_epsilons=None
                     ) -> PrivacyCurve:
    """KOV (paper Theorem 3) for ``compositions`` steps of ``pair``: delta upper curve.

    The base (eps0_j, delta0_j) points are the certified one-step bucket curve
    (:func:`one_step_curve`), as in paper §5.6; the result is the minimum over base points
    and i of Theorem 3, interpolated in e^eps (see :func:`comparison.kov_curve`).
    """
    r = _count("compositions", compositions)
    base, d0 = one_step_curve(pair, base_epsilons)
    return kov_curve(base, d0, r, epsilons)


def kov_epsilon_for_pair(pair: MechanismPair, compositions, delta, *, base_epsilons=None
                         ) -> EpsilonBounds:
    """KOV epsilon at ``delta`` for ``compositions`` steps: min over the base points."""
    r = _count("compositions", compositions)
    target = _real("delta", delta, low=0.0, high=1.0, low_open=True)
    base, d0 = one_step_curve(pair, base_epsilons)
    best, at = math.inf, None
    for e0, dd in zip(base.tolist(), d0.tolist()):
        if dd >= target or e0 * (r % 2) >= best:
            continue
        up = kov_epsilon(e0, dd, r, target).upper
        if up < best:
            best, at = up, (e0, dd)
    notes = () if at is None else (f"base point eps0={at[0]!r}, delta0={at[1]!r}",)
    return EpsilonBounds(target, 0.0, best, "kov", notes=notes)
