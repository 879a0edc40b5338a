"""Comparison bounds: the prior-work bounds the paper compares privacy buckets with.

Every function returns a certified UPPER bound (on delta for a given epsilon, or on
epsilon for a given delta) in the result objects of :mod:`pb_accountant.results`, with
the trivially valid lower bound 0.  Numbers refer to "Tight on Budget?" (Meiser &
Mohammadi; "paper"), the Dwork-Rothblum CDP paper ("DR16"), Dwork & Roth's book
("DR14") and the works named in each docstring.  See ``docs/comparison-bounds.md``.

* composition theorems for an (eps, delta) pair: naive (paper Lemma 2), adaptive
  (paper Lemma 3), advanced (paper Lemma 4; DR14 Theorem 3.20; DR16 Theorem 1.1), and
  the optimal Kairouz-Oh-Viswanath composition (paper Theorem 3, §5.6) evaluated in
  log space for up to 10**7 compositions;
* Renyi DP (paper §5.7): Renyi divergences of a discrete privacy-loss distribution,
  the RDP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019) and the
  standard and improved (Balle et al. 2020) RDP -> (eps, delta) conversions;
* concentrated DP: zCDP (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020) and the
  Dwork-Rothblum (mu, tau)-CDP with its composition rule.

Only numpy and scipy are used; nothing here imports torch or opacus.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from scipy import optimize, special

from .results import DeltaBounds, EpsilonBounds, PrivacyCurve

__all__ = [
    "CDPParams",
    "naive_composition",
    "adaptive_composition",
    "advanced_composition",
    "advanced_composition_epsilon",
    "kov_delta",
    "kov_epsilon",
    "kov_curve",
    "renyi_divergence",
    "rdp_to_epsilon",
    "rdp_to_delta",
    "subsampled_gaussian_rdp",
    "zcdp_epsilon",
    "zcdp_delta",
    "gaussian_zcdp",
    "cdp_delta",
    "cdp_epsilon",
    "compose_cdp",
    "gaussian_cdp",
    "pure_dp_cdp",
    "randomized_response_cdp",
    "laplace_cdp",
]

_ULP = 2.0 ** -52
_TINY = float(np.nextafter(0.0, 1.0))   # smallest positive double
_MAX_KOV_COMPOSITIONS = 10 ** 7


# --------------------------------------------------------------------------------------
# input validation (self-contained; messages name parameter, value and valid range)
# --------------------------------------------------------------------------------------

def _range_text(low, high, low_open, high_open) -> str:
    lo_b = "(" if low_open else "["
    hi_b = ")" if high_open else "]"
    lo = "-inf" if low is None else repr(low)
    hi = "inf" if high is None else repr(high)
    return f"{lo_b}{lo}, {hi}{hi_b}"


def _real(name, value, *, low=None, high=None, low_open=False, high_open=False,
          allow_inf=False) -> float:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    rng = _range_text(low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number in {rng}, got {value!r}")
    x = float(value)
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{name} must be a finite number in {rng}, got {value!r}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    return x


def _count(name, value, *, minimum=1, maximum=None) -> int:
    rng = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {rng}, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        raise ValueError(f"{name} must be {rng}, got {value!r}")
    if v < minimum or (maximum is not None and v > maximum):
        raise ValueError(f"{name} must be {rng}, got {value!r}")
    return v


def _array(name, values, *, low=None, high=None, low_open=False, high_open=False,
           allow_inf=False, allow_neg_inf=False, nonempty=True) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers, got {values!r}") from None
    rng = _range_text(low, high, low_open, high_open)
    if nonempty and arr.size == 0:
        raise ValueError(f"{name} must be a non-empty array of numbers in {rng}, got {values!r}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN (valid range {rng}), got {values!r}")
    bad_inf = (np.isposinf(arr) & (not allow_inf)) | (np.isneginf(arr) & (not allow_neg_inf))
    if bad_inf.any():
        raise ValueError(f"{name} must be finite and in {rng}, got {values!r}")
    fin = arr[np.isfinite(arr)]
    if low is not None and ((fin < low).any() or (low_open and (fin == low).any())):
        raise ValueError(f"{name} must lie in {rng}, got {values!r}")
    if high is not None and ((fin > high).any() or (high_open and (fin == high).any())):
        raise ValueError(f"{name} must lie in {rng}, got {values!r}")
    return arr


def _choice(name, value, options):
    if value not in options:
        raise ValueError(f"{name} must be one of {options!r}, got {value!r}")
    return value


# --------------------------------------------------------------------------------------
# small numerical helpers
# --------------------------------------------------------------------------------------

def _up(x, ulps: float = 4.0):
    """Inflate a non-negative float (array) by a few ulps: covers rounding in x."""
    return np.asarray(x, dtype=float) * (1.0 + ulps * _ULP)


def _two_prod(a, b):
    """Dekker's error-free product: p = fl(a*b), err = a*b - p exactly (finite inputs)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    p = a * b
    split = 134217729.0  # 2**27 + 1

    def _split(x):
        c = split * x
        hi = c - (c - x)
        return hi, x - hi

    ah, al = _split(a)
    bh, bl = _split(b)
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, err


def _mul_up(a, b):
    """Smallest double >= the exact product a*b (non-negative finite inputs)."""
    p, err = _two_prod(a, b)
    return np.where(err > 0, np.nextafter(p, np.inf), p)


def _product_le(m, x, y):
    """Exact test m*x <= y for integer-valued m, finite x >= 0 and y (inf allowed)."""
    m = np.asarray(m, dtype=float)
    y = np.asarray(y, dtype=float)
    p, err = _two_prod(m, x)
    return np.isposinf(y) | (p < y) | ((p == y) & (err <= 0))


def _log1mexp(x):
    """log(1 - exp(x)) for x <= 0, accurate in both regimes."""
    x = np.minimum(np.asarray(x, dtype=float), 0.0)
    with np.errstate(divide="ignore"):
        return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _exp_upper(log_value):
    """exp of a log-space upper bound, never rounding a positive bound down to 0."""
    log_value = np.asarray(log_value, dtype=float)
    with np.errstate(over="ignore"):
        out = np.exp(log_value)
    out = np.where(np.isfinite(log_value) & (out == 0.0), _TINY, out)
    return np.minimum(out, 1.0)


def _scalar_or_array(x, scalar):
    x = np.asarray(x, dtype=float)
    return float(x) if scalar else x


# --------------------------------------------------------------------------------------
# 1. naive, adaptive and advanced composition (paper Lemmas 2-4)
# --------------------------------------------------------------------------------------

def _check_pair(epsilon, delta):
    eps = _real("epsilon", epsilon, low=0.0)
    dlt = _real("delta", delta, low=0.0, high=1.0)
    return eps, dlt


def naive_composition(epsilon, delta, compositions) -> EpsilonBounds:
    """Paper Lemma 2 (naive composition): r-fold (eps, delta)-DP is (r eps, r delta)-DP.

    Returns ``EpsilonBounds(delta=min(1, r delta), lower=0, upper=r eps, method="naive")``.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    eps_out = float(_mul_up(float(r), eps))
    delta_out = min(1.0, float(_mul_up(float(r), dlt)))
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="naive")


def adaptive_composition(epsilon, delta, compositions) -> EpsilonBounds:
    """Paper Lemma 3 (adaptive composition): (r eps, 1 - (1 - delta)^r)-DP.

    delta' = -expm1(r log1p(-delta)), accurate for tiny delta and huge r.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    eps_out = float(_mul_up(float(r), eps))
    delta_out = 1.0 if dlt == 1.0 else float(-np.expm1(r * np.log1p(-dlt)))
    delta_out = min(1.0, float(_up(delta_out)))
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="adaptive")


def _advanced_eps(eps, r, delta_slack, variant):
    growth = math.expm1(eps) if eps < 709.0 else math.inf
    drift = r * eps * growth
    if variant == "dr16":
        drift /= 2.0
    return float(_up(math.sqrt(2.0 * r * -math.log(delta_slack)) * eps + drift, 8.0))


def advanced_composition(epsilon, delta, compositions, delta_slack,
                         variant: str = "drv10") -> EpsilonBounds:
    """Advanced composition (paper Lemma 4; DR14 Theorem 3.20, Dwork-Rothblum-Vadhan).

    r-fold adaptive composition of (eps, delta)-DP mechanisms is (eps', r delta + delta_slack)-DP
    with eps' = sqrt(2 r ln(1/delta_slack)) eps + r eps (e^eps - 1).  ``variant="dr16"``
    uses DR16 Theorem 1.1, which halves the drift term: r eps (e^eps - 1) / 2.

    The book chapter's simplified form eps' = 2 eps sqrt(2 r ln(1/delta_slack)) (its
    Theorems 5 and 6) holds only in the regime of DR14 Corollary 3.21 (eps' < 1) and is
    NOT implemented: outside that regime it is not a valid bound.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    ds = _real("delta_slack", delta_slack, low=0.0, high=1.0, low_open=True)
    _choice("variant", variant, ("drv10", "dr16"))
    eps_out = _advanced_eps(eps, r, ds, variant)
    delta_out = min(1.0, float(_up(r * dlt + ds)))
    notes = ()
    if math.isinf(eps_out):
        notes = ("epsilon' overflows: e^epsilon is not representable",)
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="advanced",
                         notes=notes)


def advanced_composition_epsilon(epsilon, delta, compositions, target_delta,
                                 variant: str = "drv10") -> EpsilonBounds:
    """Smallest eps' from advanced composition (paper Lemma 4) with delta' <= target_delta.

    eps' decreases in delta_slack, so the best split of target_delta gives all of
    target_delta - r delta to delta_slack.  Naive composition (paper Lemma 2) is also
    certified at this delta and is returned instead when it is smaller (noted).
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    target = _real("target_delta", target_delta, low=0.0, high=1.0)
    _choice("variant", variant, ("drv10", "dr16"))
    spent = float(_up(r * dlt))
    naive = float(_mul_up(float(r), eps))
    if spent > target:
        return EpsilonBounds(delta=target, lower=0.0, upper=math.inf, method="advanced",
                             notes=("compositions * delta exceeds target_delta: neither "
                                    "naive nor advanced composition certifies it",))
    slack = (target - spent) * (1.0 - 4.0 * _ULP)
    if slack <= 0.0:
        return EpsilonBounds(delta=target, lower=0.0, upper=naive, method="advanced",
                             notes=("no slack left for advanced composition; naive "
                                    "composition (paper Lemma 2) used",))
    adv = _advanced_eps(eps, r, slack, variant)
    if naive <= adv:
        return EpsilonBounds(delta=target, lower=0.0, upper=naive, method="advanced",
                             notes=("naive composition (paper Lemma 2) was tighter",))
    return EpsilonBounds(delta=target, lower=0.0, upper=adv, method="advanced",
                         notes=(f"delta_slack = {slack!r}",))


# --------------------------------------------------------------------------------------
# 2. Kairouz-Oh-Viswanath optimal composition (paper Theorem 3, §5.6), in log space
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


def _kov_log_delta_prime(log_di, log_keep0, delta0_zero):
    """log of delta' = 1 - (1 - delta0)^r (1 - delta_i) (paper Theorem 3)."""
    if delta0_zero:
        return log_di
    return _log1mexp(log_keep0 + _log1mexp(log_di))


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
                chord = np.logaddexp(np.log(lam) + log_dp[i_f[inner]],
                                     np.log1p(-lam) + log_dp[i_f[inner] - 1])
            result = result.copy()
            result[inner] = np.minimum(result[inner], chord)
        outer = ~feasible
        if outer.any():
            # r odd and eps < eps0: chord between e^eps = 0 (delta <= 1) and e^eps0.
            top = log_dp[half]
            shift = np.minimum(targets[outer] - eps0, 0.0)
            frac = np.exp(shift) * (1.0 - 8.0 * _ULP)
            result = result.copy()
            result[outer] = np.log1p(-frac * -np.expm1(top))
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
    this is exactly the optimal KOV curve.  ``interpolate=False`` gives the paper §5.6
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
# 3. Renyi DP (paper §5.7)
# --------------------------------------------------------------------------------------

def renyi_divergence(losses, probabilities_a, orders, infinity_mass=0.0
                     ) -> "float | np.ndarray":
    """Renyi divergence D_alpha(A || B) of a discrete privacy-loss distribution.

    ``losses[i]`` = log(P_A(i) / P_B(i)) of atom i, ``probabilities_a[i]`` = P_A(i);
    ``infinity_mass`` is the A-mass of events with P_B = 0 (the paper's infinity bucket).
    D_alpha = 1/(alpha - 1) log sum_i P_A(i) e^{(alpha - 1) L_i}, computed with logsumexp.
    The paper (§5.7) writes the same quantity as D_{alpha+1} = (1/alpha) log sum_i
    B(i) f^{alpha i}: its alpha is our alpha - 1.  Order 1 is the KL divergence
    sum_i P_A(i) L_i, order inf the largest loss.  For alpha >= 1 a positive
    infinity_mass gives inf; for alpha < 1 those events contribute 0.
    """
    L = _array("losses", losses, allow_inf=True, allow_neg_inf=True).ravel()
    p = _array("probabilities_a", probabilities_a, low=0.0, high=1.0).ravel()
    if L.shape != p.shape:
        raise ValueError(f"losses and probabilities_a must have the same length, got "
                         f"{L.size} and {p.size}")
    scalar = np.ndim(orders) == 0
    a = _array("orders", orders, low=0.0, low_open=True, allow_inf=True)
    inf_mass = _real("infinity_mass", infinity_mass, low=0.0, high=1.0)
    pos = p > 0
    if (pos & np.isneginf(L)).any():
        raise ValueError(f"losses must be > -inf where probabilities_a > 0 (a loss of -inf "
                         f"means P_A = 0), got losses={losses!r}")
    inf_mass = inf_mass + float(p[pos & np.isposinf(L)].sum())
    keep = pos & np.isfinite(L)
    L, p = L[keep], p[keep]
    total = float(p.sum()) + inf_mass
    if total > 1.0 + 1e-9:
        raise ValueError(f"probabilities_a plus infinity_mass must sum to at most 1 "
                         f"(within 1e-9), got {total!r}")
    logp = np.log(p)
    out = np.empty(a.shape, dtype=float)
    for idx, alpha in np.ndenumerate(a):
        if alpha >= 1.0 and inf_mass > 0.0:
            out[idx] = math.inf
        elif math.isinf(alpha):
            out[idx] = float(L.max()) if L.size else 0.0
        elif alpha == 1.0:
            out[idx] = float(np.dot(p, L))
        elif L.size == 0:
            out[idx] = 0.0 if alpha > 1.0 else math.inf
        else:
            lse = float(special.logsumexp(logp + (alpha - 1.0) * L))
            out[idx] = lse / (alpha - 1.0)
    return float(out) if scalar else out


def _check_rdp_curve(orders, rdp):
    a = _array("orders", orders, low=1.0, low_open=True, allow_inf=True).ravel()
    d = _array("rdp", rdp, low=0.0, allow_inf=True).ravel()
    if a.shape != d.shape:
        raise ValueError(f"orders and rdp must have the same length, got {a.size} and {d.size}")
    return a, d


def _rdp_eps_terms(a, d, log_delta, conversion):
    finite = np.isfinite(a) & np.isfinite(d)
    a_f, d_f = a[finite], d[finite]
    if conversion == "standard":     # Mironov 2017 Proposition 3 / paper §5.7
        eps = d_f - log_delta / (a_f - 1.0)
    else:                            # Balle et al. 2020 Theorem 21 (as in Opacus)
        eps = d_f + np.log1p(-1.0 / a_f) - (log_delta + np.log(a_f)) / (a_f - 1.0)
    return eps, a_f


def rdp_to_epsilon(orders, rdp, delta, conversion: str = "improved") -> EpsilonBounds:
    """Convert an RDP curve (orders alpha > 1, D_alpha) to an epsilon at ``delta``.

    ``conversion="standard"``: eps = min_alpha D_alpha + log(1/delta)/(alpha - 1)
    (Mironov 2017 Prop. 3; the moments accountant of paper §5.7 with its alpha = ours - 1).
    ``conversion="improved"`` (default, never larger): eps = min_alpha D_alpha +
    log((alpha-1)/alpha) - (log delta + log alpha)/(alpha - 1) (Balle et al. 2020
    Theorem 21; Opacus's ``get_privacy_spent``).  Clamped at 0; inf (noted) if no order
    gives a finite value or delta = 0.
    """
    a, d = _check_rdp_curve(orders, rdp)
    dlt = _real("delta", delta, low=0.0, high=1.0)
    _choice("conversion", conversion, ("improved", "standard"))
    if dlt >= 1.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=0.0, method="rdp",
                             notes=(f"conversion: {conversion}", "delta >= 1"))
    if dlt == 0.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="rdp",
                             notes=(f"conversion: {conversion}",
                                    "delta = 0 cannot be certified from finite orders"))
    eps, a_f = _rdp_eps_terms(a, d, math.log(dlt), conversion)
    if eps.size == 0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="rdp",
                             notes=(f"conversion: {conversion}",
                                    "every order has infinite RDP"))
    k = int(np.argmin(eps))
    value = max(float(_up(eps[k], 8.0)) if eps[k] > 0 else float(eps[k]), 0.0)
    return EpsilonBounds(delta=dlt, lower=0.0, upper=value, method="rdp",
                         notes=(f"conversion: {conversion}", f"order: {float(a_f[k])!r}"))


def rdp_to_delta(orders, rdp, epsilon, conversion: str = "improved") -> DeltaBounds:
    """Convert an RDP curve to a delta bound at ``epsilon`` (scalar or array).

    standard: delta = min_alpha exp((alpha - 1)(D_alpha - eps));
    improved (default): delta = min_alpha exp((alpha - 1)(D_alpha - eps)
    + (alpha - 1) log(1 - 1/alpha) - log alpha)  (Balle et al. 2020 Theorem 21,
    Canonne-Kamath-Steinke 2020 Prop. 12).  Capped at 1.
    """
    a, d = _check_rdp_curve(orders, rdp)
    scalar = np.ndim(epsilon) == 0
    eps = _array("epsilon", epsilon, low=0.0, allow_inf=True)
    _choice("conversion", conversion, ("improved", "standard"))
    finite = np.isfinite(a) & np.isfinite(d)
    a_f, d_f = a[finite], d[finite]
    if a_f.size == 0:
        up = np.ones(eps.shape)
    else:
        e = eps.reshape(-1, 1)
        with np.errstate(invalid="ignore"):
            log_d = (a_f - 1.0) * (d_f - e)
            if conversion == "improved":
                log_d = log_d + (a_f - 1.0) * np.log1p(-1.0 / a_f) - np.log(a_f)
        log_d = np.where(np.isposinf(e), -np.inf, log_d)
        low = log_d.min(axis=1)
        with np.errstate(invalid="ignore"):
            best = np.where(np.isfinite(low), low + 8.0 * _ULP * (1.0 + np.abs(low)), low)
        up = _exp_upper(np.where(np.isnan(best), -np.inf, best)).reshape(eps.shape)
    return DeltaBounds(epsilon=_scalar_or_array(eps, scalar),
                       lower=_scalar_or_array(np.zeros_like(up), scalar),
                       upper=_scalar_or_array(up, scalar), method="rdp",
                       notes=(f"conversion: {conversion}",))


def _weighted_magnitude(log_terms, magnitudes, log_total):
    """sum_i w_i M_i with w_i = exp(log_terms_i - log_total): the scale of rounding."""
    with np.errstate(under="ignore"):
        w = np.exp(log_terms - log_total)
    return float(np.dot(w, magnitudes))


def _sgm_log_a_int(q, sigma, alpha):
    """(log A_alpha, rounding allowance) by the binomial expansion (integer alpha)."""
    i = np.arange(alpha + 1, dtype=float)
    if alpha <= 1000:
        log_binom = np.log(special.binom(alpha, i))   # accurate to a few ulps
    else:
        log_binom = (special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0)
                     - special.gammaln(alpha - i + 1.0))
    parts = (log_binom, i * math.log(q), (alpha - i) * math.log1p(-q),
             (i * i - i) / (2.0 * sigma ** 2))
    terms = parts[0] + parts[1] + parts[2] + parts[3]
    log_a = float(special.logsumexp(terms))
    scale = np.abs(parts[0]) + np.abs(parts[1]) + np.abs(parts[2]) + parts[3]
    if alpha > 1000:
        scale = scale + 2.0 * special.gammaln(alpha + 1.0)
    margin = 8.0 * _ULP * (_weighted_magnitude(terms, scale, log_a) + 1.0 + abs(log_a))
    return log_a, margin


def _sgm_log_a_frac(q, sigma, alpha):
    """(log A_alpha, allowance): Mironov-Talwar-Zhang 2019 §3.3 series (fractional alpha).

    For i > alpha the terms alternate in sign and (eventually) decrease, so once the
    last terms are 33 nats below the running total the remainder is bounded by the last
    computed term; that bound is added to the positive part to keep an upper bound.
    (Opacus stops at an absolute e^-30 and drops the remainder.)
    """
    z0 = sigma ** 2 * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    two_s2 = 2.0 * sigma ** 2
    pos_terms, pos_scale, neg_terms, neg_scale = [], [], [], []
    log_running = -math.inf
    start, chunk = 0, 64
    while True:
        i = np.arange(start, start + chunk, dtype=float)
        coef = special.binom(alpha, i)
        with np.errstate(divide="ignore"):
            log_coef = np.log(np.abs(coef))
        j = alpha - i
        log_e0 = special.log_ndtr((z0 - i) / sigma)
        log_e1 = special.log_ndtr((j - z0) / sigma)
        quad0 = (i * i - i) / two_s2
        quad1 = (j * j - j) / two_s2
        log_s0 = log_coef + i * log_q + j * log_1mq + quad0 + log_e0
        log_s1 = log_coef + j * log_q + i * log_1mq + quad1 + log_e1
        base = np.where(np.isfinite(log_coef), np.abs(log_coef), 0.0)
        m0 = base + np.abs(i * log_q) + np.abs(j * log_1mq) + np.abs(quad0) + np.abs(log_e0)
        m1 = base + np.abs(j * log_q) + np.abs(i * log_1mq) + np.abs(quad1) + np.abs(log_e1)
        sign = coef > 0
        pos_terms += [log_s0[sign], log_s1[sign]]
        pos_scale += [m0[sign], m1[sign]]
        neg_terms += [log_s0[~sign], log_s1[~sign]]
        neg_scale += [m0[~sign], m1[~sign]]
        if sign.any():
            log_running = float(np.logaddexp(
                log_running, special.logsumexp(np.concatenate([log_s0[sign], log_s1[sign]]))))
        start += chunk
        chunk = min(2 * chunk, 1 << 16)
        last = float(np.logaddexp(log_s0[-1], log_s1[-1]))
        decreasing = log_s0[-1] <= log_s0[-2] and log_s1[-1] <= log_s1[-2]
        if i[-1] > alpha + 2 and decreasing and last < log_running - 33.0:
            tail = last
            break
        if start > 10 ** 7:  # pragma: no cover - the series converges far sooner
            tail = last + math.log(float(start))
            break
    p_terms, p_scale = np.concatenate(pos_terms), np.concatenate(pos_scale)
    n_terms, n_scale = np.concatenate(neg_terms), np.concatenate(neg_scale)
    log_pos = float(special.logsumexp(np.append(p_terms, tail)))
    log_neg = float(special.logsumexp(n_terms)) if n_terms.size else -math.inf
    scale = _weighted_magnitude(p_terms, p_scale, log_pos)
    if log_neg == -math.inf:
        return log_pos, 8.0 * _ULP * (scale + 1.0 + abs(log_pos))
    scale += _weighted_magnitude(n_terms, n_scale, log_pos)
    log_a = log_pos + float(_log1mexp(log_neg - log_pos))
    amplification = math.exp(log_pos - log_a)       # pos / (pos - neg)
    return log_a, 8.0 * _ULP * (scale + 1.0 + abs(log_pos)) * amplification


def subsampled_gaussian_rdp(noise_multiplier, sample_rate, orders) -> "float | np.ndarray":
    """RDP of one step of the Poisson-subsampled Gaussian mechanism (sensitivity 1).

    Mironov, Talwar & Zhang 2019 ("Renyi DP of the Sampled Gaussian Mechanism") §3.3,
    as in Opacus ``analysis/rdp.py``: for integer alpha the binomial expansion
    log A_alpha = logsumexp_i [log C(alpha,i) + i log q + (alpha-i) log(1-q)
    + (i^2 - i)/(2 sigma^2)], for fractional alpha the two-sided series; RDP is
    log A_alpha / (alpha - 1).  q = 1 gives alpha/(2 sigma^2), q = 0 gives 0, sigma = 0
    gives inf.  Multiply by the number of steps for composition.  Orders must be > 1.
    """
    sigma = _real("noise_multiplier", noise_multiplier, low=0.0)
    q = _real("sample_rate", sample_rate, low=0.0, high=1.0)
    scalar = np.ndim(orders) == 0
    a = _array("orders", orders, low=1.0, low_open=True, allow_inf=True)
    out = np.empty(a.shape, dtype=float)
    for idx, alpha in np.ndenumerate(a):
        if q == 0.0:
            out[idx] = 0.0
        elif sigma == 0.0 or math.isinf(alpha):
            out[idx] = math.inf
        elif q == 1.0:
            out[idx] = alpha / (2.0 * sigma ** 2)
        else:
            if float(alpha).is_integer():
                log_a, margin = _sgm_log_a_int(q, sigma, int(alpha))
            else:
                log_a, margin = _sgm_log_a_frac(q, sigma, float(alpha))
            out[idx] = (log_a + margin) / (alpha - 1.0)   # with the rounding allowance
    out = np.maximum(out, 0.0)
    return float(out) if scalar else out


# --------------------------------------------------------------------------------------
# 4. Concentrated DP: zCDP (Bun-Steinke) and (mu, tau)-CDP (Dwork-Rothblum)
# --------------------------------------------------------------------------------------

def _affine_rdp_log_delta(xi, rho, eps, alpha):
    """Improved conversion (Balle et al. 2020 Thm 21) for D_alpha <= xi + rho alpha."""
    return ((alpha - 1.0) * (xi + rho * alpha - eps) + (alpha - 1.0) * np.log1p(-1.0 / alpha)
            - np.log(alpha))


def _affine_rdp_eps(xi, rho, log_delta, alpha):
    return (xi + rho * alpha + np.log1p(-1.0 / alpha)
            - (log_delta + np.log(alpha)) / (alpha - 1.0))


_ORDER_GRID = 1.0 + np.logspace(-9.0, 9.0, 1441)


def _minimise_over_order(fun, extra=()):
    """min over alpha > 1 of fun(alpha): dense log grid, then a bounded Brent step.

    Any alpha > 1 gives a valid bound, so the result is certified whatever the
    optimiser's accuracy; it is the value at an alpha that was actually evaluated.
    """
    grid = np.concatenate([_ORDER_GRID, np.asarray(extra, dtype=float)])
    grid = np.unique(grid[np.isfinite(grid) & (grid > 1.0)])
    with np.errstate(all="ignore"):
        vals = fun(grid)
    vals = np.where(np.isnan(vals), np.inf, vals)
    k = int(np.argmin(vals))
    best_val, best_a = float(vals[k]), float(grid[k])
    if np.isfinite(best_val):
        lo = math.log(grid[max(k - 1, 0)] - 1.0)
        hi = math.log(grid[min(k + 1, grid.size - 1)] - 1.0)
        if hi > lo:
            def along(t):
                return float(fun(np.array([1.0 + math.exp(t)]))[0])

            with np.errstate(all="ignore"):
                res = optimize.minimize_scalar(along, bounds=(lo, hi), method="bounded",
                                               options={"xatol": 1e-10})
            a_opt = 1.0 + math.exp(float(res.x))
            if a_opt > 1.0:
                with np.errstate(all="ignore"):
                    v = float(fun(np.array([a_opt]))[0])
                if v < best_val:
                    best_val, best_a = v, a_opt
    return best_val, best_a


def _zcdp_eps(xi, rho, delta, method):
    """(eps, notes) for D_alpha <= xi + rho alpha (all alpha > 1) at delta in (0, 1)."""
    log_delta = math.log(delta)
    bs = xi + rho + 2.0 * math.sqrt(rho * -log_delta)          # Bun-Steinke 2016 Prop 1.3
    if method == "bun-steinke":
        return float(_up(bs, 8.0)), ("conversion: Bun-Steinke 2016 Prop. 1.3",)
    a_bs = 1.0 + math.sqrt(-log_delta / rho)
    cks_val, a = _minimise_over_order(lambda al: _affine_rdp_eps(xi, rho, log_delta, al),
                                      extra=(a_bs,))
    cks_val = float(_up(cks_val, 16.0)) if cks_val > 0 else cks_val
    if method == "cks":
        return cks_val, (f"conversion: Canonne-Kamath-Steinke 2020 Prop. 12, alpha = {a!r}",)
    if bs <= cks_val:
        return float(_up(bs, 8.0)), ("conversion: Bun-Steinke 2016 Prop. 1.3 (tightest)",)
    return cks_val, (f"conversion: Canonne-Kamath-Steinke 2020 Prop. 12 (tightest), "
                     f"alpha = {a!r}",)


def _zcdp_delta(xi, rho, eps, method):
    """delta bound for D_alpha <= xi + rho alpha (all alpha > 1) at eps."""
    if math.isinf(eps):
        return 0.0
    gap = eps - xi - rho
    if rho == 0.0:
        bs = 0.0 if gap >= 0.0 else 1.0
    else:
        bs = math.exp(-gap * gap / (4.0 * rho)) if gap > 0.0 else 1.0
    if method == "bun-steinke":
        return min(1.0, float(_up(bs, 8.0)))
    if rho == 0.0:
        cks = 0.0 if xi <= eps else 1.0
    else:
        a_bs = 1.0 + max(gap, 0.0) / (2.0 * rho)
        log_cks, _ = _minimise_over_order(lambda al: _affine_rdp_log_delta(xi, rho, eps, al),
                                          extra=(a_bs,) if a_bs > 1.0 else ())
        cks = float(_exp_upper(log_cks + 16.0 * _ULP * (1.0 + abs(log_cks))))
    if method == "cks":
        return min(1.0, cks)
    return min(1.0, float(_up(bs, 8.0)), cks)


def zcdp_epsilon(rho, delta, method: str = "best", *, xi=0.0) -> EpsilonBounds:
    """epsilon at ``delta`` for (xi, rho)-zCDP, i.e. D_alpha <= xi + rho alpha for all alpha > 1.

    ``method="bun-steinke"``: eps = xi + rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke
    2016 Prop. 1.3); ``"cks"``: min over alpha of the improved conversion (Canonne,
    Kamath & Steinke 2020 Prop. 12; a 1-D minimisation, every evaluated alpha is
    certified); ``"best"`` (default): the smaller.  The paper (§5.7) calls
    (xi, rho)-zCDP "(xi, rho)-Concentrated DP".
    """
    r = _real("rho", rho, low=0.0, allow_inf=True)
    x = _real("xi", xi, low=0.0)
    dlt = _real("delta", delta, low=0.0, high=1.0)
    _choice("method", method, ("best", "bun-steinke", "cks"))
    if dlt >= 1.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=0.0, method="zcdp",
                             notes=("delta >= 1",))
    if dlt == 0.0 and (r > 0.0 or math.isinf(r)):
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="zcdp",
                             notes=("delta = 0 cannot be certified from zCDP with rho > 0",))
    if math.isinf(r):
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="zcdp",
                             notes=("rho = inf",))
    if r == 0.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=x, method="zcdp",
                             notes=("rho = 0: D_alpha <= xi for all alpha, i.e. (xi, 0)-DP",))
    value, notes = _zcdp_eps(x, r, dlt, method)
    return EpsilonBounds(delta=dlt, lower=0.0, upper=max(value, 0.0), method="zcdp",
                         notes=notes)


def zcdp_delta(rho, epsilon, method: str = "best", *, xi=0.0) -> DeltaBounds:
    """delta bound at ``epsilon`` (scalar or array) for (xi, rho)-zCDP.

    Bun-Steinke: delta = exp(-(eps - xi - rho)^2 / (4 rho)) for eps > xi + rho;
    CKS 2020 Prop. 12: delta = min_alpha exp((alpha-1)(xi + alpha rho - eps))
    (1 - 1/alpha)^(alpha-1) / alpha.  ``"best"`` takes the smaller.
    """
    r = _real("rho", rho, low=0.0, allow_inf=True)
    x = _real("xi", xi, low=0.0)
    scalar = np.ndim(epsilon) == 0
    eps = _array("epsilon", epsilon, low=0.0, allow_inf=True)
    _choice("method", method, ("best", "bun-steinke", "cks"))
    up = np.empty(eps.shape)
    for idx, e in np.ndenumerate(eps):
        up[idx] = 1.0 if math.isinf(r) else _zcdp_delta(x, r, float(e), method)
    return DeltaBounds(epsilon=_scalar_or_array(eps, scalar),
                       lower=_scalar_or_array(np.zeros_like(up), scalar),
                       upper=_scalar_or_array(up, scalar), method="zcdp",
                       notes=(f"method: {method}",))


def gaussian_zcdp(noise_multiplier, sensitivity=1.0) -> float:
    """rho = sensitivity^2 / (2 sigma^2) for the Gaussian mechanism (Bun-Steinke 2016
    Prop. 1.6); zCDP composes additively.  sigma = 0 gives inf."""
    sigma = _real("noise_multiplier", noise_multiplier, low=0.0)
    s = _real("sensitivity", sensitivity, low=0.0)
    if s == 0.0:
        return 0.0
    if sigma == 0.0:
        return math.inf
    return s * s / (2.0 * sigma * sigma)


@dataclass(frozen=True)
class CDPParams:
    """(mu, tau)-CDP of Dwork & Rothblum (DR16 Definition 3.3): privacy loss with mean
    <= mu whose centred part is tau-subgaussian (DR16 Definition 3.2)."""

    mu: float
    tau: float
    notes: Tuple[str, ...] = ()

    def __iter__(self):
        yield self.mu
        yield self.tau


def _check_cdp(mu, tau):
    m = _real("mu", mu, low=0.0, allow_inf=True)
    t = _real("tau", tau, low=0.0, allow_inf=True)
    return m, t


def cdp_delta(mu, tau, epsilon, method: str = "best") -> DeltaBounds:
    """delta(eps) bound for (mu, tau)-CDP (DR16 Definition 3.3).

    ``method="tail"``: delta(eps) <= Pr[L > eps] <= exp(-(eps - mu)^2 / (2 tau^2)) for
    eps > mu, from the subgaussian tail (DR16 Lemma 2.1, Corollary 3.1) and
    delta(eps) = E[(1 - e^{eps - L})_+] <= Pr[L > eps].  ``"best"`` (default) also uses
    the implied Renyi bound D_alpha <= mu + (alpha - 1) tau^2 / 2 (the subgaussian MGF at
    lambda = alpha - 1) with the improved RDP conversion, and returns the smaller.
    tau = 0 gives (1 - e^{eps - mu})_+.
    """
    m, t = _check_cdp(mu, tau)
    scalar = np.ndim(epsilon) == 0
    eps = _array("epsilon", epsilon, low=0.0, allow_inf=True)
    _choice("method", method, ("best", "tail"))
    up = np.empty(eps.shape)
    for idx, e in np.ndenumerate(eps):
        e = float(e)
        if math.isinf(e):
            up[idx] = 0.0
        elif math.isinf(m) or math.isinf(t):
            up[idx] = 1.0
        elif t == 0.0:
            up[idx] = min(1.0, float(_up(max(0.0, -math.expm1(e - m)), 8.0)))
        else:
            tail = math.exp(-(e - m) ** 2 / (2.0 * t * t)) if e > m else 1.0
            tail = min(1.0, float(_up(tail, 8.0)))
            if method == "best":
                tail = min(tail, _zcdp_delta(m - t * t / 2.0, t * t / 2.0, e, "cks"))
            up[idx] = tail
    return DeltaBounds(epsilon=_scalar_or_array(eps, scalar),
                       lower=_scalar_or_array(np.zeros_like(up), scalar),
                       upper=_scalar_or_array(up, scalar), method="cdp",
                       notes=(f"method: {method}",))


def cdp_epsilon(mu, tau, delta, method: str = "best") -> EpsilonBounds:
    """epsilon at ``delta`` for (mu, tau)-CDP: tail bound eps = mu + tau sqrt(2 log(1/delta))
    (DR16 Corollary 3.1); ``"best"`` also tries the implied-RDP improved conversion."""
    m, t = _check_cdp(mu, tau)
    dlt = _real("delta", delta, low=0.0, high=1.0)
    _choice("method", method, ("best", "tail"))
    if dlt >= 1.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=0.0, method="cdp",
                             notes=("delta >= 1",))
    if math.isinf(m) or math.isinf(t):
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="cdp",
                             notes=("mu or tau is infinite",))
    if t == 0.0:
        # L <= mu almost surely: delta(eps) = 0 for eps >= mu.
        return EpsilonBounds(delta=dlt, lower=0.0, upper=m, method="cdp",
                             notes=("tau = 0: privacy loss is at most mu",))
    if dlt == 0.0:
        return EpsilonBounds(delta=dlt, lower=0.0, upper=math.inf, method="cdp",
                             notes=("delta = 0 cannot be certified from CDP with tau > 0",))
    tail = float(_up(m + t * math.sqrt(-2.0 * math.log(dlt)), 8.0))
    notes = ("method: tail (DR16 Corollary 3.1)",)
    value = tail
    if method == "best":
        alt, alt_notes = _zcdp_eps(m - t * t / 2.0, t * t / 2.0, dlt, "cks")
        if alt < value:
            value, notes = alt, ("method: implied RDP, improved conversion",) + alt_notes
    return EpsilonBounds(delta=dlt, lower=0.0, upper=max(value, 0.0), method="cdp",
                         notes=notes)


def compose_cdp(mu, tau, compositions=1) -> CDPParams:
    """Composition of CDP (DR16 Theorem 3.4): mu' = sum mu, tau' = sqrt(sum tau^2).

    ``mu`` and ``tau`` may be arrays (heterogeneous mechanisms); the whole sequence is
    repeated ``compositions`` times (k-fold: mu' = k mu, tau' = sqrt(k) tau).
    """
    m = _array("mu", mu, low=0.0, allow_inf=True).ravel()
    t = _array("tau", tau, low=0.0, allow_inf=True).ravel()
    if m.shape != t.shape:
        raise ValueError(f"mu and tau must have the same length, got {m.size} and {t.size}")
    k = _count("compositions", compositions)
    mu_out = float(_up(k * float(np.sum(m)), 4.0))
    tau_out = float(_up(math.sqrt(k * float(np.sum(t * t))), 4.0))
    return CDPParams(mu=mu_out, tau=tau_out, notes=("DR16 Theorem 3.4",))


def gaussian_cdp(noise_multiplier, sensitivity=1.0) -> CDPParams:
    """Gaussian mechanism: (s^2 / (2 sigma^2), s / sigma)-CDP (DR16 Theorem 3.2); the
    privacy loss is exactly N(mu, tau^2) with mu = tau^2 / 2."""
    sigma = _real("noise_multiplier", noise_multiplier, low=0.0)
    s = _real("sensitivity", sensitivity, low=0.0)
    if s == 0.0:
        return CDPParams(mu=0.0, tau=0.0, notes=("DR16 Theorem 3.2",))
    if sigma == 0.0:
        return CDPParams(mu=math.inf, tau=math.inf, notes=("sigma = 0: no privacy",))
    tau = s / sigma
    return CDPParams(mu=float(_up(tau * tau / 2.0)), tau=float(_up(tau)),
                     notes=("DR16 Theorem 3.2",))


def pure_dp_cdp(epsilon0) -> CDPParams:
    """Any eps0-DP mechanism is (eps0 (e^eps0 - 1)/2, eps0)-CDP (DR16 Theorem 3.5)."""
    e = _real("epsilon0", epsilon0, low=0.0)
    mu = e * math.expm1(e) / 2.0 if e < 709.0 else math.inf
    return CDPParams(mu=float(_up(mu)), tau=e, notes=("DR16 Theorem 3.5",))


def _bounded_loss_cdp(kl, eps0, source):
    # Centred loss lies in an interval of width 2 eps0: eps0-subgaussian by Hoeffding's
    # lemma (DR16 Lemma 3.6); the mean is the exact KL divergence (<= DR16 Lemma 3.8).
    return CDPParams(mu=float(_up(max(kl, 0.0), 16.0)), tau=eps0,
                     notes=(source, "tau from Hoeffding's lemma (DR16 Lemma 3.6)"))


def randomized_response_cdp(p) -> CDPParams:
    """Randomized response with bias p (paper §5.5): the seed gives no CDP statement, so it
    is derived: loss +-eps0 with eps0 = |log(p/(1-p))|, exact mean (KL)
    mu = (2p - 1) log(p/(1-p)) = eps0 tanh(eps0/2) <= eps0 (e^eps0 - 1)/2 (DR16 Thm 3.5),
    tau = eps0 (Hoeffding)."""
    pp = _real("p", p, low=0.0, high=1.0, low_open=True, high_open=True)
    eps0 = abs(math.log(pp) - math.log1p(-pp))
    return _bounded_loss_cdp(eps0 * math.tanh(eps0 / 2.0), eps0,
                             "randomized response: exact KL mean")


def laplace_cdp(scale, sensitivity=1.0) -> CDPParams:
    """Laplace mechanism Lap(scale), sensitivity s: pure eps0 = s/scale DP; the seed gives
    no Laplace statement, so derived: exact mean (KL) mu = eps0 + e^{-eps0} - 1
    (<= eps0 (e^eps0 - 1)/2, DR16 Thm 3.5), tau = eps0 (bounded loss, Hoeffding)."""
    b = _real("scale", scale, low=0.0, low_open=True)
    s = _real("sensitivity", sensitivity, low=0.0)
    eps0 = s / b
    if math.isinf(eps0):
        return CDPParams(mu=math.inf, tau=math.inf, notes=("sensitivity/scale overflows",))
    return _bounded_loss_cdp(eps0 + math.expm1(-eps0), eps0, "Laplace: exact KL mean")


# --------------------------------------------------------------------------------------
# 5. the same bounds for mechanism pairs (lazy re-export of pb_accountant.pair_bounds)
# --------------------------------------------------------------------------------------

_PAIR_BOUNDS = ("rdp_from_pair", "rdp_for_sequence", "rdp_delta_for_sequence",
                "rdp_epsilon_for_sequence", "RenyiProfile", "kov_for_sequence",
                "kov_epsilon_for_pair", "one_step_curve", "cdp_for_pair", "cdp_for_sequence",
                "cdp_delta_for_sequence", "cdp_epsilon_for_sequence", "PairCDP")


def __getattr__(name):
    """``comparison.rdp_from_pair`` etc.: the bounds computed for mechanism pairs live in
    :mod:`pb_accountant.pair_bounds` (it builds leaf buckets, so it is imported lazily)."""
    if name in _PAIR_BOUNDS:
        from . import pair_bounds
        return getattr(pair_bounds, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
