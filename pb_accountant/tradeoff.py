"""Certified bounds on the f-DP trade-off curve, the attacker's TPR at FPR, and GDP mu.

For neighbouring outputs A (with the record) and B (without), a test of H0 against H1
with type-I error alpha has type-II error at least T(H0, H1)(alpha).  By the Neyman-
Pearson lemma and convex duality (docs/attack-risk.md; Dong, Roth & Su, "Gaussian
differential privacy", Prop. 2.12) T is determined by the hockey-stick divergences
delta_ab(eps) = H_{e^eps}(A||B) and delta_ba(eps) = H_{e^eps}(B||A), eps >= 0:

    T(B, A)(alpha) = max(0, sup_eps [1 - delta_ab(eps) - e^eps alpha],
                            sup_eps e^-eps [1 - delta_ba(eps) - alpha])

(the second family is H_gamma for gamma = e^-eps < 1, rewritten with
H_gamma(P||Q) = 1 - gamma + gamma H_{1/gamma}(Q||P)), and T(A, B) the same with ab and ba
exchanged.  The curve reported is f = min(T(B, A), T(A, B)) (both neighbouring orders,
as f-DP requires); an attacker's best true-positive rate at false-positive rate alpha is
1 - f(alpha).

Certification.  *Lower* bound on f: every term with a certified delta_up in place of
delta is a valid lower bound, at any eps, so any finite eps grid gives one.  *Upper*
bound on f: the sup runs over all eps; delta is non-increasing, so on
[eps_k, eps_{k+1}] the term 1 - delta(eps) - e^eps alpha is at most
1 - delta_low(eps_{k+1}) - e^{eps_k} alpha, and e^-eps (1 - delta(eps) - alpha) at most
e^{-eps_k} max(0, 1 - delta_low(eps_{k+1}) - alpha); beyond the last grid point the
terms are at most max(0, 1 - e^{eps_K} alpha) and e^{-eps_K} (1 - alpha).  Every
arithmetic result is widened by a relative allowance and a final ``np.nextafter`` in
the safe direction.  f always lies in [0, 1 - alpha].

GDP: the smallest mu with f(alpha) >= G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu) on
alpha in [alpha_min, 1 - alpha_min] is bracketed: the lower end from f's upper bound at grid points
(each gives mu >= Phi^-1(1 - alpha) - Phi^-1(f_up(alpha))), the upper end by bisection on
mu: on each cell [alpha_j, alpha_{j+1}] of a grid, f is above the minimum of the two
orders' best lower-bound lines at alpha_{j+1} (each line bounds T at every alpha; their
minimum is concave) and the convex G_mu is below its chord, so checking both ends of
every cell covers every alpha in between.  ``inf``
when no mu passes (for example when f_low is 0 below alpha = 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

import numpy as np
from scipy import special

from ._fp import UNIT_ROUNDOFF as _U, two_sum
from ._validation import check_array, check_count, check_real
from .mechanisms import normal_cdf_upper, normal_quantile_bracket

__all__ = ["DEFAULT_FPR", "TradeoffBounds", "tradeoff_bounds", "tradeoff_from_curves",
           "trivial_tradeoff", "gaussian_tradeoff"]

#: the false-positive rates reported by default
DEFAULT_FPR = (1e-3, 1e-2, 0.1)
#: relative allowance for a handful of float operations (exp, products, sums)
_SLACK = 16.0 * _U


@dataclass(frozen=True)
class TradeoffBounds:
    """Certified bounds on f(alpha) (type-II error) and the attacker's TPR = 1 - f.

    ``fpr`` are the false-positive rates alpha; ``beta_lower <= f(alpha) <= beta_upper``
    and ``tpr_lower <= 1 - f(alpha) <= tpr_upper``, for the worst of both neighbouring
    orders.  ``mu_lower <= mu* <= mu_upper`` for the smallest GDP mu that the curve
    satisfies on alpha in [``mu_alpha_min``, 1 - ``mu_alpha_min``] (``inf`` where none is certified).
    """

    fpr: np.ndarray
    beta_lower: np.ndarray
    beta_upper: np.ndarray
    tpr_lower: np.ndarray
    tpr_upper: np.ndarray
    mu_lower: float = 0.0
    mu_upper: float = math.inf
    mu_alpha_min: float = 1e-6
    notes: Tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        """JSON-ready: lists of floats (inf written as the string "inf")."""
        def num(x):
            x = float(x)
            return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")
        return {"fpr": [num(v) for v in self.fpr],
                "tpr_lower": [num(v) for v in self.tpr_lower],
                "tpr_upper": [num(v) for v in self.tpr_upper],
                "beta_lower": [num(v) for v in self.beta_lower],
                "beta_upper": [num(v) for v in self.beta_upper],
                "gdp_mu": {"lower": num(self.mu_lower), "upper": num(self.mu_upper),
                           "alpha_min": num(self.mu_alpha_min)},
                "notes": list(self.notes)}


def _down(x):
    return np.nextafter(np.asarray(x, dtype=float), -np.inf)


def _up(x):
    return np.nextafter(np.asarray(x, dtype=float), np.inf)


#: smallest false-positive rate (and mu_alpha_min) accepted: below it e^eps at the
#: matching loss leaves double range (and 1/alpha overflows for subnormals)
MIN_FPR = 1e-300


def _check_fpr(fpr, name="fpr") -> np.ndarray:
    if fpr is None:
        fpr = DEFAULT_FPR
    kind = np.asarray(fpr).dtype.kind if not isinstance(fpr, (str, bytes)) else "U"
    if kind not in "iuf":
        raise ValueError(f"{name} must be a false-positive rate in [{MIN_FPR}, 1] or an array "
                         f"of them, got {fpr!r}")
    arr = check_array(name, np.atleast_1d(fpr), low=MIN_FPR, high=1.0)
    return arr.ravel()


def _one_minus(b, up: bool):
    """1 - b rounded down (``up`` False) or up, moved by an ulp only where the
    subtraction rounded the other way (its exact error from ``two_sum``): at FPR 1, where
    f = 0, the TPR is then exactly 1 (an ulp below it before, always)."""
    t, err = two_sum(1.0, -np.asarray(b, dtype=float))        # t + err = 1 - b exactly
    if up:
        return np.where(err > 0.0, np.nextafter(t, np.inf), t)
    return np.where(err < 0.0, np.nextafter(t, -np.inf), t)


def _one_minus_alpha_up(alpha):
    return np.minimum(_one_minus(alpha, up=True), 1.0)


def _best_lines(alpha, eps, d_up_fwd, d_up_rev):
    """For each alpha, the line c - s x (a valid lower bound on T at every x) that is
    largest at alpha among the grid's two term families, certified delta_up plugged in.
    t1: c = 1 - d_fwd, s = e^eps; t2: c = e^-eps (1 - d_rev), s = e^-eps.  Returned as
    (c, s, second, d): ``second`` marks t2 lines, d is the delta each line subtracts
    (``_line_value_down`` evaluates a t2 line as s ((1 - x) - d), which keeps its
    relative accuracy as x nears 1)."""
    e = np.exp(eps)
    em = np.exp(-eps)
    c1, s1 = 1.0 - d_up_fwd, e
    c2, s2 = em * (1.0 - d_up_rev), em
    cs = np.concatenate((c1, c2))
    ss = np.concatenate((s1, s2))
    ds = np.concatenate((d_up_fwd, d_up_rev))
    best = np.zeros(alpha.shape, dtype=np.int64)
    for k in range(0, len(alpha), 16):
        a = alpha[k:k + 16, None]
        best[k:k + 16] = np.argmax(cs[None, :] - ss[None, :] * a, axis=1)
    return cs[best], ss[best], best >= len(c1), ds[best]


def _line_value_down(lines, x):
    """A line of ``_best_lines`` at x, rounded down.  t1: c - s x, widened by 16u of the
    magnitudes and 16u (c, s carry a few roundings of their own).  t2: s ((1 - x) - d),
    where 1 - x is exact for x >= 1/2 (Sterbenz) and rounded once below, then a
    difference and a product, s = e^-eps to one ulp: widened by 16u of s ((1 - x) + d),
    relative to the terms, so near x = 1 (where f is tiny, as for Gaussian curves at
    alpha = 1 - 1e-6) the bound keeps its digits instead of an absolute 16u."""
    c, s, second, d = lines
    one = c - s * x
    one = one - _SLACK * (np.abs(c) + s * x + 1.0)
    rest = 1.0 - x
    two = s * (rest - d)
    two = two - _SLACK * s * (rest + d) - 1e-300
    return _down(np.where(second, two, one))


def _beta_lower_one_order(alpha, eps, d_up_fwd, d_up_rev):
    """max over the eps grid of the two term families, certified delta_up plugged in,
    rounded down."""
    lines = _best_lines(alpha, eps, d_up_fwd, d_up_rev)
    return np.clip(_line_value_down(lines, alpha), 0.0, None)


def _beta_upper_one_order(alpha, eps, d_low_fwd, d_low_rev):
    """sup over all eps >= 0, bounded on each grid cell [eps_k, eps_{k+1}] by the
    endpoint that keeps each factor valid (delta non-increasing), plus the tail."""
    e_left = np.exp(eps[:-1])
    em_left = np.exp(-eps[:-1])
    dl_f = d_low_fwd[1:]
    dl_r = d_low_rev[1:]
    out = np.zeros(alpha.shape)
    for s in range(0, len(alpha), 16):
        a = alpha[s:s + 16, None]
        t1 = 1.0 - dl_f[None, :] - e_left[None, :] * a
        t1 = t1 + _SLACK * (1.0 + dl_f[None, :] + e_left[None, :] * a)
        x = np.maximum(1.0 - dl_r[None, :] - a, 0.0)
        t2 = em_left[None, :] * x + _SLACK * em_left[None, :] * (1.0 + dl_r[None, :] + a)
        out[s:s + 16] = np.maximum(t1.max(axis=1), t2.max(axis=1))
    # beyond the last grid point: delta >= 0
    last = eps[-1]
    tail1 = np.maximum(1.0 - math.exp(last) * alpha + _SLACK * (1.0 + math.exp(last) * alpha), 0.0)
    tail2 = math.exp(-last) * (1.0 - alpha) * (1.0 + _SLACK)
    out = np.maximum(out, np.maximum(tail1, tail2))
    out = np.maximum(out, 0.0)
    return np.minimum(_up(out), _one_minus_alpha_up(alpha))


#: doublings of the eps grid's end ``_eps_grid`` may take (each where delta_up is still
#: above alpha_min / 2 there)
_GRID_DOUBLINGS = 6
#: the grid never goes beyond this eps (e^eps stays a finite double)
_GRID_END = 700.0


def _eps_grid(alpha_min: float, eps_step: float, max_points: int,
              delta_up: Optional[Callable] = None) -> np.ndarray:
    """0 .. top in steps of eps_step (coarser beyond max_points), top = log(1 / alpha_min)
    + 5, where e^eps alpha_min passes 1 (the first term family); then, where the
    certified delta_up of either direction is still above alpha_min / 2 there, an
    extension to the first doubling of top (up to _GRID_DOUBLINGS, at most _GRID_END)
    where it is not, in at most max_points / 2 further steps: the second family's lines
    at alpha = 1 - alpha_min are positive only where delta has fallen below 1 - alpha
    (for a Gaussian curve with mu = 4, at eps of about 27, beyond the first end, 18.8,
    so that no mu above about 3.3 was certified before).  The first part is the grid
    used before, so the extension only adds lines and cells."""
    top = -math.log(alpha_min) + 5.0          # not log(1/alpha): 1/alpha overflows for subnormals
    step = max(eps_step, top / max_points)
    n = int(math.ceil(top / step))
    grid = np.linspace(0.0, n * step, n + 1)
    if delta_up is None:
        return grid
    first = float(grid[-1])
    ends = np.minimum(first * 2.0 ** np.arange(_GRID_DOUBLINGS + 1), _GRID_END)
    worst = np.maximum(*[np.asarray(delta_up(d, ends), dtype=float) for d in ("ab", "ba")])
    reached = np.flatnonzero(worst <= 0.5 * alpha_min)
    # none reached (a distinguishing event holds delta up at every eps): no extension
    if not len(reached) or reached[0] == 0:
        return grid
    end = float(ends[reached[0]])
    step2 = max(eps_step, (end - first) / max(max_points // 2, 1))
    m = int(math.ceil((end - first) / step2))
    return np.concatenate((grid, first + (end - first) * np.arange(1, m + 1) / m))


def tradeoff_from_curves(delta_up: Callable[[str, np.ndarray], np.ndarray],
                         delta_low: Callable[[str, np.ndarray], np.ndarray],
                         fpr=None, *, mu_alpha_min: float = 1e-6, eps_step: float = 1e-3,
                         max_points: int = 50_000, mu_points: int = 400,
                         notes: Tuple[str, ...] = ()) -> TradeoffBounds:
    """Certified trade-off bounds from per-direction delta bounds.

    ``delta_up(direction, eps)`` / ``delta_low(direction, eps)`` return certified upper /
    lower bounds on H_{e^eps}(A||B) (direction "ab") or H_{e^eps}(B||A) ("ba") for an
    array of eps >= 0; the upper one must be non-increasing (the engine's are).
    """
    alpha = _check_fpr(fpr)
    mu_alpha_min = check_real("mu_alpha_min", mu_alpha_min, low=MIN_FPR, high=0.25)
    eps_step = check_real("eps_step", eps_step, low=1e-6, high=1.0)
    max_points = check_count("max_points", max_points, minimum=100, maximum=10_000_000)
    mu_points = check_count("mu_points", mu_points, minimum=2, maximum=100_000)
    alpha_min = float(min(alpha.min(), mu_alpha_min))
    delta_up = _checked_curve("delta_up", delta_up)
    delta_low = _checked_curve("delta_low", delta_low)
    eps = _eps_grid(alpha_min, eps_step, max_points, delta_up)
    up = {d: np.clip(np.asarray(delta_up(d, eps), dtype=float), 0.0, 1.0) for d in ("ab", "ba")}
    low = {d: np.clip(np.asarray(delta_low(d, eps), dtype=float), 0.0, 1.0) for d in ("ab", "ba")}
    for d in ("ab", "ba"):
        if np.isnan(up[d]).any() or np.isnan(low[d]).any():
            raise RuntimeError(f"tradeoff: the engine returned NaN deltas ({d})")
        above = np.flatnonzero(low[d] > up[d])
        if above.size:
            # bounds of one pair never cross: one of the two is not a bound
            i = int(above[0])
            raise ValueError(f"delta_low({d!r}, eps) must not exceed delta_up({d!r}, eps): "
                             f"at eps={float(eps[i])!r} they are {float(low[d][i])!r} > "
                             f"{float(up[d][i])!r}")

    def beta_lower(a):
        # f = min over the two orders: T(B, A) uses ab first, T(A, B) uses ba first
        return np.minimum(_beta_lower_one_order(a, eps, up["ab"], up["ba"]),
                          _beta_lower_one_order(a, eps, up["ba"], up["ab"]))

    def cell_lower(a_left, a_right):
        # on [a_left, a_right] f >= min(line_BA, line_AB) (concave), lines chosen at a_right
        lines = [_best_lines(a_right, eps, up["ab"], up["ba"]),
                 _best_lines(a_right, eps, up["ba"], up["ab"])]
        left = np.minimum(*[_line_value_down(line, a_left) for line in lines])
        right = np.minimum(*[_line_value_down(line, a_right) for line in lines])
        return left, right

    def beta_upper(a):
        return np.minimum(_beta_upper_one_order(a, eps, low["ab"], low["ba"]),
                          _beta_upper_one_order(a, eps, low["ba"], low["ab"]))

    b_lo = np.minimum(beta_lower(alpha), _one_minus_alpha_up(alpha))
    # (f(alpha) <= 1 - alpha for every pair, the test that ignores its input: at FPR 1,
    # f = 0 and the TPR is 1)
    b_up = np.maximum(np.minimum(beta_upper(alpha), _one_minus_alpha_up(alpha)), b_lo)
    tpr_lo = np.clip(_one_minus(b_up, up=False), 0.0, 1.0)
    tpr_up = np.clip(_one_minus(b_lo, up=True), 0.0, 1.0)

    # GDP mu on [mu_alpha_min, 1 - mu_alpha_min]: geometric in alpha near 0 and in
    # 1 - alpha near 1 (f and G_mu both vanish at alpha = 1)
    half = max(mu_points // 2, 2)
    low_half = np.geomspace(mu_alpha_min, 0.5, half)
    grid = np.unique(np.concatenate((low_half, 1.0 - low_half[::-1])))
    f_up = beta_upper(grid)
    mu_lo = _mu_lower(grid, f_up)
    mu_up = _mu_upper(grid, *cell_lower(grid[:-1], grid[1:]), mu_lo)
    return TradeoffBounds(alpha, b_lo, b_up, tpr_lo, tpr_up, mu_lo, mu_up, mu_alpha_min,
                          tuple(notes))


def _checked_curve(name: str, curve: Callable) -> Callable:
    """``curve`` returning a float array of the shape of its eps (a number broadcast):
    a ValueError naming it otherwise (a list of another length failed in broadcasting,
    a number in ``np.concatenate``, with numpy's words only)."""
    if not callable(curve):
        raise ValueError(f"{name} must be a function (direction, eps) -> deltas, "
                         f"got {curve!r}")

    def checked(direction, eps):
        eps = np.asarray(eps, dtype=float)
        raw = curve(direction, eps)
        try:
            out = np.asarray(raw, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name}({direction!r}, eps) must return numbers (an array "
                             f"of the shape of eps, {eps.shape}), got {raw!r}") from None
        if out.shape == eps.shape:
            return out
        if out.ndim == 0:
            return np.full(eps.shape, float(out))
        raise ValueError(f"{name}({direction!r}, eps) must return an array of the shape "
                         f"of eps, {eps.shape}, got shape {out.shape}")

    return checked


def _z_upper_tail(alpha):
    """Certified bracket (lo, hi) of Phi^-1(1 - alpha) = -Phi^-1(alpha) (no cancellation;
    ``normal_quantile_bracket``)."""
    lo, hi = normal_quantile_bracket(alpha)
    return -hi, -lo


def _mu_lower(alpha, f_up) -> float:
    """max_alpha Phi^-1(1 - alpha) - Phi^-1(f_up(alpha)), rounded down: the lower end of
    the first quantile's certified bracket minus the upper end of the second's."""
    z1, _ = _z_upper_tail(alpha)
    _, z2 = normal_quantile_bracket(np.clip(f_up, 0.0, 1.0))
    with np.errstate(invalid="ignore"):
        val = _down(z1 - z2)
    val = np.where(np.isnan(val), 0.0, val)
    if np.any(np.isposinf(val)):
        return math.inf
    return float(max(0.0, float(np.max(val)))) if val.size else 0.0


def gaussian_tradeoff(alpha, mu):
    """G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu), the mu-GDP curve (no rounding)."""
    alpha = np.asarray(alpha, dtype=float)
    return special.ndtr(-special.ndtri(alpha) - mu)


def _mu_upper(grid, f_left, f_right, mu_start: float) -> float:
    """Smallest mu (bisection) such that on every cell [alpha_j, alpha_{j+1}] a concave
    lower bound of f (f_left, f_right at the ends) stays above the chord of the convex
    G_mu, i.e. f_left >= G_mu(alpha_j) and f_right >= G_mu(alpha_{j+1}).

    The bisection is steered by scipy's ndtr (an estimate); the mu returned passes the
    certified check (``normal_cdf_upper`` at the quantiles' certified upper ends); where
    the estimate was optimistic it is moved up in growing steps, then bisected back with
    certified checks."""
    z_left = _z_upper_tail(grid[:-1])[1]
    z_right = _z_upper_tail(grid[1:])[1]

    def ok(mu, certified=True):
        # G_mu(alpha) <= Phi(z - mu) for z >= Phi^-1(1 - alpha), the argument rounded up
        def g(z):
            return normal_cdf_upper(_up(z - mu)) if certified else special.ndtr(z - mu)
        return bool(np.all(f_left >= g(z_left)) and np.all(f_right >= g(z_right)))

    if not math.isfinite(mu_start):
        return math.inf
    hi = max(mu_start, 0.5)
    while not ok(hi, False):
        hi *= 2.0
        if hi > 1e3:
            return math.inf
    lo = mu_start
    if ok(lo, False):
        hi = lo
    else:
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if ok(mid, False):
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-9 * hi:
                break
    if ok(hi):
        return float(hi)
    # the estimate was optimistic: step up until the certified check passes, then bisect
    # (certified) between the last failure and that pass
    bad, step = hi, 1e-12 * max(hi, 1.0)
    while True:
        good = bad + step
        if good > 1e3:
            return math.inf
        if ok(good):
            break
        bad, step = good, 4.0 * step
    for _ in range(60):
        if good - bad <= 1e-9 * good:
            break
        mid = 0.5 * (bad + good)
        if ok(mid):
            good = mid
        else:
            bad = mid
    return float(good)


def trivial_tradeoff(fpr=None, note: str = "", mu_alpha_min: float = 1e-6) -> TradeoffBounds:
    """The bounds that hold for any mechanism: 0 <= f(alpha) <= 1 - alpha."""
    alpha = _check_fpr(fpr)
    mu_alpha_min = check_real("mu_alpha_min", mu_alpha_min, low=MIN_FPR, high=0.25)
    notes = (note,) if note else ()
    return TradeoffBounds(alpha, np.zeros_like(alpha), _one_minus_alpha_up(alpha),
                          _down(alpha).clip(0.0, 1.0), np.ones_like(alpha), 0.0, math.inf,
                          mu_alpha_min, notes)


def _engine_curves(engine) -> Tuple[Callable, Callable]:
    """Per-direction certified delta bounds of a PrivacyBuckets (smallest upper, largest
    lower), as functions of (direction, eps)."""
    def delta_up(direction, eps):
        if engine.buckets is None:
            return np.zeros_like(eps)
        best = np.ones_like(eps)
        for name in engine._upper:
            curves = engine.upper_curves(name, direction)
            if curves:
                best = np.minimum(best, np.maximum.reduce([np.asarray(c(eps)) for c in curves]))
        return best

    def delta_low(direction, eps):
        if engine.buckets is None:
            return np.zeros_like(eps)
        best = np.zeros_like(eps)
        for name in engine._lower:
            for c in engine.lower_curves(name, direction):
                best = np.maximum(best, np.asarray(c(eps)))
        return best

    return delta_up, delta_low


def tradeoff_bounds(engine, fpr=None, **kwargs) -> TradeoffBounds:
    """Certified trade-off / TPR-at-FPR / GDP-mu bounds of a ``PrivacyBuckets``.

    Without lower curves (only "split" composed) the upper bound on f is the trivial
    1 - alpha, i.e. the TPR lower bound is alpha.  An engine limit of an ``engine``
    from :func:`pb_accountant.compose` gives the trivial bounds with the reason in
    ``notes`` (``PrivacyBuckets``' limits).
    """
    _check_fpr(fpr)                                     # user errors raise first
    _check_options(**kwargs)
    return engine._answer("the trade-off curve",
                          lambda: _tradeoff_bounds(engine, fpr, **kwargs),
                          lambda reason: trivial_tradeoff(
                              fpr, note=reason,
                              mu_alpha_min=kwargs.get("mu_alpha_min", 1e-6)))


#: the keyword options of ``tradeoff_bounds`` (``tradeoff_from_curves``' own)
OPTIONS = ("mu_alpha_min", "eps_step", "max_points", "mu_points")


def _check_options(**options) -> None:
    """``tradeoff_from_curves``' options checked as it checks them (ValueErrors naming
    them), for an answer that does not reach it; an unknown name is a ValueError naming
    it and the options (a TypeError naming this function before)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown!r} for the trade-off bounds; the "
                         f"options are {list(OPTIONS)!r}")
    _check_known_options(**options)


def _check_known_options(*, mu_alpha_min: float = 1e-6, eps_step: float = 1e-3,
                         max_points: int = 50_000, mu_points: int = 400) -> None:
    check_real("mu_alpha_min", mu_alpha_min, low=MIN_FPR, high=0.25)
    check_real("eps_step", eps_step, low=1e-6, high=1.0)
    check_count("max_points", max_points, minimum=100, maximum=10_000_000)
    check_count("mu_points", mu_points, minimum=2, maximum=100_000)


def _tradeoff_bounds(engine, fpr=None, **kwargs) -> TradeoffBounds:
    """``tradeoff_bounds`` of an ``engine`` within the engine's limits."""
    delta_up, delta_low = _engine_curves(engine)
    notes = tuple(engine.notes()) if engine.buckets is not None else ()
    if engine.buckets is not None and not engine._lower:
        notes += ("no lower curves were composed: the TPR lower bound is the trivial FPR",)
    if engine.buckets is None:
        notes += ("empty history: f(alpha) = 1 - alpha",)
    return tradeoff_from_curves(delta_up, delta_low, fpr, notes=notes, **kwargs)
