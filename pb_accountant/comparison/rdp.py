"""Renyi DP (paper §5.7): divergences of privacy-loss distributions and of the split
leaf buckets of a mechanism pair, the subsampled Gaussian's RDP (Mironov, Talwar & Zhang
2019), and the standard and improved (Balle et al. 2020) conversions to (eps, delta).

**Distinguishing events (truncation).**  A truncated Laplace or Gauss pair has events
only one side can produce (loss +-inf), so its Renyi divergences of order > 1 are
infinite and it is not CDP.  Both are handled the way approximate RDP/zCDP are: write
A = m_A A' + (A-only part) and B >= m_B B', with (A', B') the pair conditioned on the
common events.  For r-fold (or any sequence) composition, for every event S,

    A^r(S) - e^eps B^r(S) <= m_A^r [A'^r(S) - e^eps' B'^r(S)] + (1 - m_A^r),
    eps' = eps + r log(m_B / m_A),

so delta(eps) <= (1 - m_A^r) + m_A^r delta'(eps'), where delta' is the RDP (or CDP) bound
of the conditional pair.  For an untruncated pair m_A = m_B = 1 (up to the grid's
certified round-off, which is carried the same way) and nothing changes.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np
from scipy import special

from ..buckets import MAX_LOSS_RANGE, Grid
from ..composition import BucketSet
from ..mechanisms import MechanismPair
from ..results import DeltaBounds, EpsilonBounds
from .._validation import _array, _choice, _count, _real
from ._common import (_U, _ULP, _bisect_epsilon, _exp_upper, _log1mexp, _scalar_or_array, _sequence, _up)


# --------------------------------------------------------------------------------------
# Renyi DP (paper §5.7)
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


#: Renyi orders used when none are given: dense near 1 (large compositions, large
#: delta), integers up to 64 (Opacus's range) and a geometric tail for tiny delta.
DEFAULT_ORDERS = np.unique(np.concatenate([
    [1.01, 1.02, 1.05], 1.0 + np.arange(1, 20) / 10.0, np.arange(3.0, 10.0, 0.5),
    np.arange(10.0, 65.0), [72.0, 80.0, 96.0, 112.0, 128.0, 160.0, 192.0, 256.0, 320.0, 384.0,
                            512.0, 768.0, 1024.0, 1536.0, 2048.0, 4096.0, 8192.0]]))
#: Leaf buckets used for the Renyi divergences of one step.
RDP_BUCKETS = 2 ** 16 - 2
#: share of sum_i A_i^a B_i^(1-a) allowed in the outer quarter of the grid before the
#: grid is widened for that order (tightness only; any grid gives a certified value)
_EDGE_SHARE = 1e-13




def _junk(log_m, log_mj):
    """(m + j)^r - m^r from log m^r and log (m + j)^r, rounded up."""
    log_m = np.asarray(log_m, dtype=float)
    log_mj = np.asarray(log_mj, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = np.maximum(log_mj - log_m, 0.0)
        out = np.exp(log_m) * np.expm1(gap)
    out = np.where(np.isneginf(log_m), np.exp(np.minimum(log_mj, 0.0)), out)
    return np.minimum(np.nan_to_num(out, nan=1.0, posinf=1.0) * (1.0 + 64.0 * _U) + 1e-300,
                      1.0)


# --------------------------------------------------------------------------------------
# Renyi divergences from the split leaf buckets
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Direction:
    """One neighbouring direction (numerator || denominator), per order.

    ``rdp``: D_alpha of the conditional pair (A', B'); ``log_m_num``/``log_m_den``: log of
    the masses m of the common part (times the composition counts); ``log_mj_num``: log of
    (m + junk) with junk the numerator's distinguishing mass plus its certified round-off.
    ``log_m_num`` is rounded down and ``log_m_num_hi`` up (each is conservative where used).
    """

    rdp: np.ndarray
    log_m_num: np.ndarray
    log_m_den: np.ndarray
    log_mj_num: np.ndarray
    log_m_num_hi: np.ndarray

    def scaled(self, k: int) -> "_Direction":
        return _Direction(self.rdp * k, self.log_m_num * k, self.log_m_den * k,
                          self.log_mj_num * k, self.log_m_num_hi * k)

    def __add__(self, other: "_Direction") -> "_Direction":
        return _Direction(self.rdp + other.rdp, self.log_m_num + other.log_m_num,
                          self.log_m_den + other.log_m_den, self.log_mj_num + other.log_mj_num,
                          self.log_m_num_hi + other.log_m_num_hi)

    def log_delta(self, orders, eps, conversion="improved"):
        """log of the certified delta bound, shape (len(eps),): min over orders.

        ``conversion="improved"``: Balle et al. 2020 Thm 21; ``"standard"``: Mironov 2017
        Prop. 3, delta = exp((alpha - 1)(D_alpha - eps)), the moments accountant's
        conversion the paper (§5.7) uses."""
        a = orders[None, :]
        e = eps[:, None]
        shift = (self.log_m_den - self.log_m_num_hi)[None, :]
        e1 = e + shift
        e1c = np.maximum(e1, 0.0)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            conv = (a - 1.0) * (self.rdp[None, :] - e1c)
            if conversion == "improved":
                conv = conv + (a - 1.0) * np.log1p(-1.0 / a) - np.log(a)
            conv = np.minimum(conv, 0.0)
            conv = conv + 16.0 * _U * (1.0 + np.abs(conv) + (a - 1.0) * (
                np.abs(self.rdp[None, :]) + np.abs(e1c)))
            # eps' < 0: H_{e^eps'} <= H_1 + (1 - e^eps')
            neg = e1 < 0.0
            conv = np.where(neg, np.logaddexp(conv, np.log(-np.expm1(np.minimum(e1, 0.0)))
                                              + 8.0 * _U), conv)
        conv = np.where(np.isfinite(self.rdp)[None, :], conv, 0.0)
        junk = _junk(self.log_m_num, self.log_mj_num)[None, :]
        with np.errstate(divide="ignore"):
            total = np.logaddexp(np.log(junk), self.log_m_num[None, :] + conv)
        total = np.nan_to_num(total, nan=0.0)
        return np.minimum(total.min(axis=1), 0.0)


@dataclass(frozen=True)
class RenyiProfile:
    """Certified Renyi-divergence profile of one step or of a composed sequence.

    ``rdp`` is the larger of the two directions' divergences D_alpha of the conditional
    pair (the pair restricted to events both sides can produce).  For pairs without
    distinguishing events this is the RDP curve itself, an upper bound on the true
    Renyi divergences; ``distinguishing_mass`` is then 0 up to certified round-off.
    Use :meth:`delta` / :meth:`epsilon` for (eps, delta) bounds: they account for the
    distinguishing mass as described in the module docstring.
    """

    orders: np.ndarray
    directions: Tuple[_Direction, _Direction]
    compositions: int = 1
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: per order: False where the order's tilted mass reached beyond the widest grid (or
    #: beyond floating-point range), so the value is certified but may be far from tight
    tight: Optional[np.ndarray] = None

    @property
    def rdp(self) -> np.ndarray:
        return np.maximum(self.directions[0].rdp, self.directions[1].rdp)

    @property
    def distinguishing_mass(self) -> float:
        """Largest mass (over orders and directions) moved out of the conditional pair."""
        return float(max(np.max(_junk(d.log_m_num, d.log_mj_num)) for d in self.directions))

    def composed(self, count: int) -> "RenyiProfile":
        k = _count("count", count)
        return RenyiProfile(self.orders, tuple(d.scaled(k) for d in self.directions),
                            self.compositions * k, self.notes, self.tight)

    def __add__(self, other: "RenyiProfile") -> "RenyiProfile":
        if self.orders.shape != other.orders.shape or not np.array_equal(self.orders,
                                                                         other.orders):
            raise ValueError("Renyi profiles can only be added for the same orders")
        return RenyiProfile(self.orders, (self.directions[0] + other.directions[0],
                                          self.directions[1] + other.directions[1]),
                            self.compositions + other.compositions,
                            tuple(dict.fromkeys(self.notes + other.notes)),
                            None if self.tight is None or other.tight is None
                            else self.tight & other.tight)

    def _delta(self, eps: np.ndarray, conversion: str = "improved") -> np.ndarray:
        logs = [d.log_delta(self.orders, eps, conversion) for d in self.directions]
        return np.minimum(np.exp(np.maximum(*logs)), 1.0)

    def delta(self, epsilon, conversion: str = "improved") -> DeltaBounds:
        """Certified upper bound on delta(eps), both directions, scalar or array eps.

        ``conversion``: "improved" (default; Balle et al. 2020 Thm 21) or "standard"
        (Mironov 2017 Prop. 3, the paper's moments-accountant conversion)."""
        _choice("conversion", conversion, ("improved", "standard"))
        scalar = np.ndim(epsilon) == 0
        eps = np.atleast_1d(_array("epsilon", epsilon, low=0.0)).astype(float).ravel()
        up = self._delta(eps, conversion).reshape(np.shape(epsilon))
        notes = self.notes + (f"conversion: {conversion}",)
        if scalar:
            return DeltaBounds(float(np.ravel(epsilon)[0]), 0.0, float(up), "rdp", notes=notes)
        return DeltaBounds(np.asarray(epsilon, dtype=float), np.zeros_like(up), up, "rdp",
                           notes=notes)

    def epsilon(self, delta, conversion: str = "improved") -> EpsilonBounds:
        """Smallest eps (found by bisection) at which :meth:`delta` certifies ``delta``."""
        _choice("conversion", conversion, ("improved", "standard"))
        return _bisect_epsilon(lambda e: self._delta(e, conversion), delta, "rdp",
                               self.notes + (f"conversion: {conversion}",))


def _tilted_logsumexp(ln, t, orders, outer, block: int = 8):
    """log sum_i exp(ln_i + (a - 1) t_i) for every order a, and the same over ``outer``."""
    lse = np.empty(orders.size)
    lse_outer = np.full(orders.size, -np.inf)
    for start in range(0, orders.size, block):
        a1 = orders[start:start + block, None] - 1.0
        T = ln[None, :] + a1 * t[None, :]
        mx = T.max(axis=1, keepdims=True)
        w = np.exp(T - mx)
        lse[start:start + block] = mx[:, 0] + np.log(w.sum(axis=1))
        if outer.any():
            with np.errstate(divide="ignore"):
                lse_outer[start:start + block] = mx[:, 0] + np.log(w[:, outer].sum(axis=1))
    return lse, lse_outer


def _direction_values(losses, num, num_extra, err_num, orders):
    """D_alpha of the conditional pair of one direction on one grid, with edge shares.

    On the split grid the denominator atom at t_i is exactly num_i e^{-t_i} (docs/method.md §4;
    the engine's queries use the same identity), so only the numerator row and its
    certified l1 error ``err_num`` enter: the hockey-stick integrand (1 - e^{eps - T})_+
    is at most 1, so an l1 error e on each factor costs at most (m + e)^r - m^r.
    """
    keep = num > 0
    ln = np.log(num[keep])
    t = losses[keep]
    n = orders.size
    if not keep.any():
        return (np.zeros(n), np.full(n, -math.inf), np.zeros(n),
                np.full(n, math.log(min(max(num_extra + err_num, 1e-300), 1.0))),
                np.full(n, -math.inf), np.zeros(n))
    m_num = math.fsum(num[keep].tolist())                    # correctly rounded sums
    m_den = math.fsum(np.exp(ln - t).tolist())
    rel = 4.0 * _U + 4.0 * _U * (1.0 + float(np.max(np.abs(t))))   # exp/log rounding
    log_m_num = math.log(m_num) - 4.0 * _U
    log_m_den = math.log(m_den) - rel
    reach = float(np.max(np.abs(losses)))
    outer = np.abs(t) > 0.75 * reach
    mag = float(np.max(np.abs(ln))) + float(np.max(np.abs(t)))
    lse, lse_outer = _tilted_logsumexp(ln, t, orders, outer)
    with np.errstate(over="ignore", invalid="ignore"):
        share = np.where(np.isfinite(lse_outer), np.exp(lse_outer - lse), 0.0)
        val = (lse - orders * math.log(m_num) - (1.0 - orders) * math.log(m_den)) / (orders - 1.0)
        slack = 32.0 * _U * (orders * mag + 2.0 * math.log(max(ln.size, 2)) + np.abs(lse)) / (
            orders - 1.0)
        slack += (orders * 8.0 * _U + (orders - 1.0) * rel) / (orders - 1.0)
    rdp = np.maximum(val + slack, 0.0)
    junk = (num_extra + err_num) * (1.0 + 4.0 * _U)
    log_mj = math.log(m_num + junk) + 4.0 * _U if junk > 0 else log_m_num + 8.0 * _U
    return (rdp, np.full(n, log_m_num), np.full(n, log_m_den), np.full(n, log_mj),
            np.full(n, math.log(m_num) + 4.0 * _U), share)


def _grid_values(pair, grid, orders):
    split = BucketSet.leaf(pair, grid, frozenset({"split"})).split
    A, B = split.rows
    t = grid.losses
    errors = split.row_errors()
    ab = _direction_values(t, A, split.a_inf, errors["A"], orders)
    ba = _direction_values(-t, B, split.b_minf, errors["B"], orders)
    return ab, ba


def _default_reach(pair, tail):
    lo, hi = pair.loss_range(tail)
    reach = max(abs(float(lo)), abs(float(hi)))
    if not math.isfinite(reach) or reach <= 0.0:
        reach = 1e-9
    return reach


@functools.lru_cache(maxsize=32)
def _cached_profile(pair: MechanismPair, orders: Optional[tuple], number_of_buckets: int):
    return _rdp_from_pair(pair, None if orders is None else np.array(orders),
                          None, number_of_buckets)


def rdp_from_pair(pair: MechanismPair, orders=None, grid: Optional[Grid] = None,
                  number_of_buckets: int = RDP_BUCKETS) -> RenyiProfile:
    """Certified Renyi divergences of one step of ``pair``, both directions.

    Computed from the split leaf buckets (paper §5.7: D_alpha = 1/(alpha-1) log
    sum_i A_i^alpha B_i^(1-alpha) over the bucket atoms).  The split pair dominates the
    true pair in both directions, so each value is an upper bound on the true divergence
    of the conditional pair (see the module docstring; for untruncated pairs that is the
    pair itself).  ``grid`` fixes the leaf grid; by default a grid of
    ``number_of_buckets`` covering the pair's loss range is used and, for orders whose
    tilted mass reaches the edge of the grid (e.g. high orders of the subsampled
    Gaussian), widened up to four times (4x reach each); every grid gives a certified
    value, the widening only makes high orders tight.  ``orders`` must be > 1.
    """
    if grid is None:
        key = None if orders is None else tuple(
            np.atleast_1d(_array("orders", orders, low=1.0, low_open=True)).astype(float)
            .ravel().tolist())
        try:
            return _cached_profile(pair, key, number_of_buckets)
        except TypeError:   # an unhashable pair: compute without the cache
            pass
    return _rdp_from_pair(pair, orders, grid, number_of_buckets)


def _rdp_from_pair(pair, orders, grid, number_of_buckets) -> RenyiProfile:
    orders = DEFAULT_ORDERS if orders is None else orders
    a = np.atleast_1d(_array("orders", orders, low=1.0, low_open=True)).astype(float).ravel()
    if not isinstance(pair, MechanismPair):
        raise ValueError(f"pair must be a MechanismPair, got {pair!r}")
    n = _count("number_of_buckets", number_of_buckets, minimum=2)
    if n % 2:
        raise ValueError(f"number_of_buckets must be even, got {number_of_buckets!r}")
    if grid is not None:
        ab, ba = _grid_values(pair, grid, a)
        covered = grid.number_of_buckets * grid.log_factor >= _default_reach(pair, 1e-300)
        tight = covered | ((ab[5] <= _EDGE_SHARE) & (ba[5] <= _EDGE_SHARE))
        return RenyiProfile(a, (_Direction(*ab[:5]), _Direction(*ba[:5])), 1, (),
                            np.broadcast_to(tight, a.shape).copy())
    reach0 = _default_reach(pair, 1e-40) * (1.0 + 1e-9) + 1e-300
    reach_max = max(_default_reach(pair, 1e-300) * (1.0 + 1e-9), reach0)
    limit = 0.99 * MAX_LOSS_RANGE
    chosen_ab = chosen_ba = None
    done = np.zeros(a.size, dtype=bool)
    reach = min(reach0, limit)
    notes = ()
    loose = np.zeros(a.size, dtype=bool)
    for level in range(5):
        ab, ba = _grid_values(pair, Grid(reach / n, n), a)
        if chosen_ab is None:
            chosen_ab = [np.array(v, dtype=float) for v in ab[:5]]
            chosen_ba = [np.array(v, dtype=float) for v in ba[:5]]
        else:
            take = ~done
            for k in range(5):
                chosen_ab[k][take] = ab[k][take]
                chosen_ba[k][take] = ba[k][take]
        covered = reach >= reach_max or reach >= limit
        ok = (ab[5] <= _EDGE_SHARE) & (ba[5] <= _EDGE_SHARE)
        if covered:
            loose |= ~done & ~ok
        done |= ok | covered
        if done.all():
            break
        reach = min(reach * 4.0, limit)
    loose |= ~done
    if loose.any():
        notes = (f"orders {a[loose].tolist()} tilt their mass beyond the widest loss grid "
                 "(or beyond floating-point range): certified for the conditional pair, "
                 "the rest is counted as distinguishing mass, but not tight",)
    tight = ~loose
    for arr in chosen_ab + chosen_ba + [tight]:
        arr.setflags(write=False)
    a.setflags(write=False)
    return RenyiProfile(a, (_Direction(*chosen_ab), _Direction(*chosen_ba)), 1, notes, tight)


def rdp_for_sequence(sequence, orders=None, grid: Optional[Grid] = None) -> RenyiProfile:
    """Renyi profile of a composed sequence ``[(pair, count), ...]`` (additive, per
    direction; the conditional masses multiply)."""
    hist = _sequence(sequence)
    if not hist:
        raise ValueError("sequence must contain at least one (pair, count) with count >= 1")
    total = None
    cache = {}
    for pair, count in hist:
        if count == 0:
            continue
        if pair not in cache:
            cache[pair] = rdp_from_pair(pair, orders, grid)
        prof = cache[pair].composed(count)
        total = prof if total is None else total + prof
    if total is None:
        raise ValueError("sequence must contain at least one (pair, count) with count >= 1")
    return total


def rdp_delta_for_sequence(sequence, epsilons, orders=None, conversion: str = "improved"
                           ) -> DeltaBounds:
    """RDP (paper §5.7) delta bound for ``sequence`` at ``epsilons`` (method "rdp")."""
    return rdp_for_sequence(sequence, orders).delta(epsilons, conversion)


def rdp_epsilon_for_sequence(sequence, delta, orders=None, conversion: str = "improved"
                             ) -> EpsilonBounds:
    """RDP (paper §5.7) epsilon bound for ``sequence`` at ``delta`` (method "rdp")."""
    return rdp_for_sequence(sequence, orders).epsilon(delta, conversion)
