"""Comparison bounds computed for the same mechanism pairs the buckets use.

:mod:`pb_accountant.comparison` implements the prior-work bounds from their parameters
(an (eps0, delta0) pair, an RDP curve, (mu, tau)).  This module feeds them the
*mechanism pairs* of :mod:`pb_accountant.mechanisms`, so that every bound of the paper's
figures ("Tight on Budget?", §5.6-§5.8) is computed for exactly the pair the buckets
compose, and answers with the same result objects (``DeltaBounds``, ``EpsilonBounds``,
``PrivacyCurve``):

* **RDP** (paper §5.7): :func:`rdp_from_pair` computes Renyi divergences of one step
  from the *split leaf buckets*.  The split pair dominates the true pair in both
  neighbouring directions (it is a pair the true one is a post-processing of), so its
  divergences are certified upper bounds.  :func:`rdp_for_sequence` composes them
  additively; :func:`rdp_delta_for_sequence` / :func:`rdp_epsilon_for_sequence`
  convert with the improved conversion (Balle et al. 2020, Thm 21).
* **KOV** (paper Theorem 3, §5.6): :func:`kov_for_sequence` / :func:`kov_epsilon_for_pair`
  take the certified one-step upper curve of ``compose([(pair, 1)])`` on a fine epsilon
  grid as the base (eps0_j, delta0_j) points and apply the optimal composition theorem.
* **CDP** (Dwork-Rothblum (mu, tau)-CDP): :func:`cdp_for_pair` gives (mu, tau) where a
  statement exists (Gaussian, Laplace, discrete pairs such as randomized response);
  :func:`cdp_delta_for_sequence` / :func:`cdp_epsilon_for_sequence` compose (DR16 Thm 3.4).

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

Rounding: every log-space quantity gets a small upward allowance; bounds are capped at 1
and never NaN.  See ``docs/comparison-bounds.md``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

from .buckets import MAX_LOSS_RANGE, Grid
from .comparison import (CDPParams, _array, _choice, _count, _real, cdp_delta, kov_curve,
                         kov_epsilon, laplace_cdp)
from .composition import BucketSet, canonical_history
from .mechanisms import (DiscretePair, Gaussian, Laplace, MechanismPair, SubsampledGaussian)
from .results import DeltaBounds, EpsilonBounds, PrivacyCurve

__all__ = [
    "DEFAULT_ORDERS",
    "RenyiProfile",
    "rdp_from_pair",
    "rdp_for_sequence",
    "rdp_delta_for_sequence",
    "rdp_epsilon_for_sequence",
    "one_step_curve",
    "kov_for_sequence",
    "kov_epsilon_for_pair",
    "PairCDP",
    "cdp_for_pair",
    "cdp_for_sequence",
    "cdp_delta_for_sequence",
    "cdp_epsilon_for_sequence",
]

_U = 2.0 ** -53
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


def _sequence(sequence):
    """Accept a pair, or [(pair, count), ...] as compose() does."""
    if isinstance(sequence, MechanismPair):
        return ((sequence, 1),)
    return canonical_history(sequence)


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


def _bisect_epsilon(delta_fn, delta, method, notes=()) -> EpsilonBounds:
    target = _real("delta", delta, low=0.0, high=1.0, low_open=True)
    if delta_fn(np.array([0.0]))[0] <= target:
        return EpsilonBounds(target, 0.0, 0.0, method, notes=notes)
    hi = 1.0
    while delta_fn(np.array([hi]))[0] > target:
        hi *= 2.0
        if hi > 1e4:
            return EpsilonBounds(target, 0.0, math.inf, method,
                                 notes=notes + ("delta is below what this bound certifies "
                                                "at any epsilon (e.g. the distinguishing "
                                                "mass exceeds it)",))
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi or hi - lo <= 1e-12 * hi:
            break
        if delta_fn(np.array([mid]))[0] <= target:
            hi = mid
        else:
            lo = mid
    return EpsilonBounds(target, 0.0, float(hi), method, notes=notes)


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
    ab = _direction_values(t, A, split.a_inf, float(split.error[0]), orders)
    ba = _direction_values(-t, B, split.b_minf, float(split.error[1]), orders)
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
    from .engine import compose   # local import: engine does not depend on this module

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
