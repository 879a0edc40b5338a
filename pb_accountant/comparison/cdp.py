"""Concentrated DP: zCDP (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020) and the
Dwork-Rothblum (mu, tau)-CDP with its composition rule, for parameters and for the
conditional pair of a mechanism pair (DR16 Theorem 3.4).
Distinguishing events are handled as in :mod:`.rdp` (its docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from scipy import optimize

from ..mechanisms import DiscretePair, Gaussian, Laplace, MechanismPair, SubsampledGaussian
from ..results import DeltaBounds, EpsilonBounds
from .._validation import _array, _choice, _count, _real
from ._common import (_TINY, _U, _ULP, _bisect_epsilon, _exp_upper, _scalar_or_array,
                      _sequence, _up)


# --------------------------------------------------------------------------------------
# Concentrated DP: zCDP (Bun-Steinke) and (mu, tau)-CDP (Dwork-Rothblum)
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
        # (_exp_upper: an exponent below the double range gives the least positive
        # double, not 0, which lay below the bound and below the true delta)
        bs = float(_exp_upper(-gap * gap / (4.0 * rho))) if gap > 0.0 else 1.0
    if method == "bun-steinke":
        return max(min(1.0, float(_up(bs, 8.0))), _TINY if rho > 0.0 else 0.0)
    if rho == 0.0:
        cks = 0.0 if xi <= eps else 1.0
    else:
        a_bs = 1.0 + max(gap, 0.0) / (2.0 * rho)
        log_cks, _ = _minimise_over_order(lambda al: _affine_rdp_log_delta(xi, rho, eps, al),
                                          extra=(a_bs,) if a_bs > 1.0 else ())
        # (a minimum of -inf, an order's exponent past the double range at eps near
        # 1e300, gave NaN here and so the bound 1)
        cks = (float(_exp_upper(log_cks + 16.0 * _ULP * (1.0 + abs(log_cks))))
               if math.isfinite(log_cks) else (0.0 if log_cks < 0.0 else 1.0))
    # rho > 0: every bound is positive at a finite eps; one below the double range (or
    # an exponent that overflowed to -inf, eps near 1e154 and beyond) is the least
    # positive double, never 0
    floor = _TINY if rho > 0.0 else 0.0
    if method == "cks":
        return max(min(1.0, cks), floor)
    return max(min(1.0, float(_up(bs, 8.0)), cks), floor)


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
            # (1 - e^{eps - mu})_+ is 0 from eps = mu on (expm1 of eps - mu past 709
            # raised OverflowError: cdp_delta(0, 0, 800), and every bisection of
            # cdp_epsilon_for_sequence over a pair whose conditional pair is tau = 0)
            up[idx] = min(1.0, float(_up(max(0.0, -math.expm1(min(e - m, 0.0))), 8.0)))
        else:
            # ((e - m) * (e - m), not ** 2, which raised OverflowError past e ~ 1e154)
            tail = float(_exp_upper(-((e - m) * (e - m)) / (2.0 * t * t))) if e > m else 1.0
            tail = max(min(1.0, float(_up(tail, 8.0))), _TINY)   # tau > 0: positive
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
    """Randomized response with bias p (paper §5.5): DR16 gives no CDP statement for it, so
    it is derived: loss +-eps0 with eps0 = |log(p/(1-p))|, exact mean (KL)
    mu = (2p - 1) log(p/(1-p)) = eps0 tanh(eps0/2) <= eps0 (e^eps0 - 1)/2 (DR16 Thm 3.5),
    tau = eps0 (Hoeffding)."""
    pp = _real("p", p, low=0.0, high=1.0, low_open=True, high_open=True)
    eps0 = abs(math.log(pp) - math.log1p(-pp))
    return _bounded_loss_cdp(eps0 * math.tanh(eps0 / 2.0), eps0,
                             "randomized response: exact KL mean")


def laplace_cdp(scale, sensitivity=1.0) -> CDPParams:
    """Laplace mechanism Lap(scale), sensitivity s: pure eps0 = s/scale DP; DR16 gives
    no Laplace statement, so derived: exact mean (KL) mu = eps0 + e^{-eps0} - 1
    (<= eps0 (e^eps0 - 1)/2, DR16 Thm 3.5), tau = eps0 (bounded loss, Hoeffding)."""
    b = _real("scale", scale, low=0.0, low_open=True)
    s = _real("sensitivity", sensitivity, low=0.0)
    eps0 = s / b
    if math.isinf(eps0):
        return CDPParams(mu=math.inf, tau=math.inf, notes=("sensitivity/scale overflows",))
    return _bounded_loss_cdp(eps0 + math.expm1(-eps0), eps0, "Laplace: exact KL mean")


# --------------------------------------------------------------------------------------
# (mu, tau)-CDP of the conditional pair
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairCDP:
    """(mu, tau)-CDP of a pair's conditional part, per direction.

    ``directions[k] = (mu, tau, log m_num, log m_den)``; ``params`` is the larger (mu, tau)
    of the two as a :class:`CDPParams`; ``distinguishing_mass`` = 1 - min m_num.
    """

    directions: Tuple[Tuple[float, float, float, float], Tuple[float, float, float, float]]
    notes: Tuple[str, ...] = ()

    @property
    def params(self) -> CDPParams:
        mu = max(d[0] for d in self.directions)
        tau = max(d[1] for d in self.directions)
        return CDPParams(mu, tau, self.notes)

    @property
    def distinguishing_mass(self) -> float:
        return float(max(-math.expm1(d[2]) for d in self.directions))


def _discrete_direction(num, den):
    both = (num > 0) & (den > 0)
    if not both.any():
        return math.inf, math.inf, -math.inf, -math.inf
    m_num = math.fsum(num[both].tolist())
    m_den = math.fsum(den[both].tolist())
    p = num[both] / m_num
    loss = np.log(num[both]) - np.log(den[both]) - math.log(m_num) + math.log(m_den)
    kl = math.fsum((p * loss).tolist())
    mag = math.fsum((p * np.abs(loss)).tolist())
    mu = max(kl + 64.0 * _U * (mag + 1e-300) * both.sum(), 0.0)
    tau = (float(loss.max()) - float(loss.min())) / 2.0 * (1.0 + 16.0 * _U)
    slack = 8.0 * both.sum() * _U
    return mu, tau, math.log(m_num) - slack, math.log(m_den) - slack


def cdp_for_pair(pair: MechanismPair) -> PairCDP:
    """(mu, tau)-CDP (DR16 Def. 3.3) of the pair conditioned on its common events.

    * Gaussian, sensitivity s: (s^2/(2 sigma^2), s/sigma) (DR16 Thm 3.2).  Truncated to
      mean +- T, the conditional pair is a Gaussian restricted to [s - T, T], still
      (s/sigma)-subgaussian in the (linear) loss (a Gaussian restricted to an interval
      is strongly log-concave: Bakry-Emery log-Sobolev plus Herbst), with a mean no larger
      than s^2/(2 sigma^2) (restricting a Gaussian to an interval around both means pulls
      the mean loss toward 0), so the same (mu, tau) holds.
    * Laplace, eps0 = s/scale: untruncated :func:`comparison.laplace_cdp`; truncated, the
      conditional pair is still eps0-DP, so mu = eps0 tanh(eps0/2) (the KL of randomized
      response, the largest for any eps0-DP pair) and tau = eps0 (Hoeffding).
    * discrete pairs (randomized response, histograms): exact KL of the conditional pair
      and tau = half its loss range (Hoeffding, DR16 Lemma 3.6).
    * subsampled Gaussian: no (mu, tau) statement is available (its loss is not
      subgaussian with a useful tau); raises ValueError.
    """
    if isinstance(pair, SubsampledGaussian):
        raise ValueError("no (mu, tau)-CDP statement for SubsampledGaussian: its privacy "
                         "loss has no useful subgaussian constant; use the RDP bounds")
    inf_a, inf_b = pair.infinity_masses()
    log_ma = math.log1p(-min(inf_a, 1.0)) - 8.0 * _U if inf_a < 1.0 else -math.inf
    log_mb = math.log1p(-min(inf_b, 1.0)) - 8.0 * _U if inf_b < 1.0 else -math.inf
    if isinstance(pair, Gaussian):
        s, sd = pair.sensitivity, pair.sigma
        tau = float(s / sd * (1.0 + 4.0 * _U))
        mu = float(s * s / (2.0 * sd * sd) * (1.0 + 8.0 * _U))
        note = ("Gaussian: DR16 Thm 3.2" + ("" if pair.truncation is None else
                "; truncated: conditional pair, log-concave restriction"),)
        # the conditional loss is log(A/B) + log(m_B/m_A): its mean moves by that constant
        c = log_mb - log_ma
        return PairCDP(((mu + max(c, 0.0), tau, log_ma, log_mb),
                        (mu + max(-c, 0.0), tau, log_mb, log_ma)), note)
    if isinstance(pair, Laplace):
        e0 = pair.epsilon0
        if pair.truncation is None:
            c = laplace_cdp(pair.scale, pair.sensitivity)
            mu, tau, note = c.mu, c.tau, ("Laplace: exact KL, Hoeffding",)
        else:
            mu = float(e0 * math.tanh(e0 / 2.0) * (1.0 + 16.0 * _U))
            tau, note = e0, ("truncated Laplace: conditional pair is eps0-DP; "
                             "mu = eps0 tanh(eps0/2), tau = eps0",)
        c = abs(log_mb - log_ma)     # normalisation shift of the conditional loss
        if c > 0.0:
            mu, tau = float(mu + c), float((e0 + c) * (1.0 + 4.0 * _U))
            if pair.truncation is not None:
                mu = float((e0 + c) * math.tanh((e0 + c) / 2.0) * (1.0 + 16.0 * _U))
        return PairCDP(((mu, tau, log_ma, log_mb), (mu, tau, log_mb, log_ma)), note)
    if isinstance(pair, DiscretePair):
        losses, a, b = pair._atoms()
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        if pair.swapped:
            a, b = b, a
        return PairCDP((_discrete_direction(a, b), _discrete_direction(b, a)),
                       ("discrete pair: exact KL of the conditional pair, Hoeffding",))
    raise ValueError(f"no (mu, tau)-CDP statement is implemented for {type(pair).__name__}")


@dataclass(frozen=True)
class _CDPSequence:
    """Composed per-direction (mu, tau, log m_num, log m_den)."""

    directions: Tuple[Tuple[float, float, float, float], ...]
    notes: Tuple[str, ...] = ()

    def _delta(self, eps: np.ndarray, method: str = "best") -> np.ndarray:
        out = np.zeros(eps.shape)
        for mu, tau, lmn, lmd in self.directions:
            if not (math.isfinite(mu) and math.isfinite(tau)) or lmn == -math.inf:
                return np.ones(eps.shape)
            e1 = eps + (lmd - lmn)
            cond = np.asarray(cdp_delta(mu, tau, np.maximum(e1, 0.0), method).upper,
                              dtype=float)
            cond = np.where(e1 < 0.0, np.minimum(cond - np.expm1(np.minimum(e1, 0.0)), 1.0),
                            cond)
            m = math.exp(lmn)
            junk = -math.expm1(lmn) * (1.0 + 16.0 * _U)
            out = np.maximum(out, np.minimum(junk + m * cond * (1.0 + 8.0 * _U), 1.0))
        return out

    @property
    def params(self) -> CDPParams:
        return CDPParams(max(d[0] for d in self.directions), max(d[1] for d in self.directions),
                         self.notes)

    def delta(self, epsilon, method: str = "best") -> DeltaBounds:
        """delta bound; ``method``: "best" or "tail" as in :func:`comparison.cdp_delta`."""
        _choice("method", method, ("best", "tail"))
        scalar = np.ndim(epsilon) == 0
        eps = np.atleast_1d(_array("epsilon", epsilon, low=0.0)).astype(float).ravel()
        up = self._delta(eps, method)
        notes = self.notes + (f"method: {method}",)
        if scalar:
            return DeltaBounds(float(eps[0]), 0.0, float(up[0]), "cdp", notes=notes)
        up = up.reshape(np.shape(epsilon))
        return DeltaBounds(np.asarray(epsilon, dtype=float), np.zeros_like(up), up, "cdp",
                           notes=notes)

    def epsilon(self, delta, method: str = "best") -> EpsilonBounds:
        _choice("method", method, ("best", "tail"))
        return _bisect_epsilon(lambda e: self._delta(e, method), delta, "cdp",
                               self.notes + (f"method: {method}",))


def cdp_for_sequence(sequence) -> _CDPSequence:
    """Compose the conditional (mu, tau) of every pair (DR16 Thm 3.4), per direction."""
    hist = _sequence(sequence)
    dirs = [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    notes = []
    for pair, count in hist:
        c = cdp_for_pair(pair)
        notes += list(c.notes)
        for k in range(2):
            mu, tau, lmn, lmd = c.directions[k]
            dirs[k][0] += count * mu
            dirs[k][1] += count * tau * tau
            dirs[k][2] += count * lmn
            dirs[k][3] += count * lmd
    out = tuple((float(mu * (1.0 + 16.0 * _U)), float(math.sqrt(t2) * (1.0 + 16.0 * _U)),
                 lmn, lmd) for mu, t2, lmn, lmd in dirs)
    return _CDPSequence(out, tuple(dict.fromkeys(notes)))


def cdp_delta_for_sequence(sequence, epsilons, method: str = "best") -> DeltaBounds:
    """(mu, tau)-CDP delta bound (DR16; :func:`comparison.cdp_delta`) for ``sequence``."""
    return cdp_for_sequence(sequence).delta(epsilons, method)


def cdp_epsilon_for_sequence(sequence, delta, method: str = "best") -> EpsilonBounds:
    """(mu, tau)-CDP epsilon bound for ``sequence`` at ``delta`` (method "cdp")."""
    return cdp_for_sequence(sequence).epsilon(delta, method)
