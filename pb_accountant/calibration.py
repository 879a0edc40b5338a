"""Calibration: the noise multiplier (or number of steps) that meets a target epsilon.

Both searches ask only the public accountant (:class:`PrivacyBucketsAccountant`) for its
certified upper bound on epsilon, and return a value whose certified epsilon is
``<= target`` -- or say, in ``reason``, why none could be certified.  They always
terminate: the number of evaluations is bounded, the tolerance is floored at
:data:`MIN_RELATIVE_TOLERANCE`, and an upper bound that is ``inf`` (nothing certified)
or not monotone in the noise (the grid of docs/method.md changes with sigma) only
slows the search down: every answer is a point that was evaluated and certified.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Callable, Optional, Tuple

from ._validation import MAX_STEPS, check_count, check_delta, check_real
from .accountant import ENGINE_LIMITS, PrivacyBucketsAccountant
from .mechanisms import MAX_NOISE, MIN_NOISE
from .samplers import check_assumptions, sampled_pairs

__all__ = ["NoiseCalibration", "StepsCalibration", "find_noise_multiplier", "find_steps",
           "MIN_RELATIVE_TOLERANCE"]

#: Finer relative tolerances on sigma are floored to this (the certified epsilon is
#: itself only resolved to about 1e-4 relative, docs/floating-point.md).
MIN_RELATIVE_TOLERANCE = 1e-6

Progress = Optional[Callable[[int, str], None]]


@dataclass(frozen=True)
class NoiseCalibration:
    """Result of :func:`find_noise_multiplier`.

    ``noise_multiplier`` certifies ``epsilon_upper <= target_epsilon`` (None when no
    noise multiplier up to ``max_noise_multiplier`` does); ``rejected_noise_multiplier``
    is the largest sigma evaluated that did not certify the target (None when even
    ``min_noise_multiplier`` does).  ``reason`` is None when ``noise_multiplier`` is the
    smallest certified sigma to within ``relative_tolerance``; otherwise it says why not.
    ``notes`` say what the bounds assume where the sampler's sizes and the sample rate
    disagree or the sampler changes what is calibrated (``samplers.sampled_pairs``).
    """

    target_epsilon: float
    delta: float
    sample_rate: float
    steps: int
    noise_multiplier: Optional[float]
    epsilon_upper: float
    rejected_noise_multiplier: Optional[float]
    rejected_epsilon_upper: Optional[float]
    relative_tolerance: float
    evaluations: int
    reason: Optional[str] = None
    notes: Tuple[str, ...] = ()

    @property
    def certified(self) -> bool:
        """True when ``noise_multiplier`` certifies the target."""
        return self.noise_multiplier is not None


@dataclass(frozen=True)
class StepsCalibration:
    """Result of :func:`find_steps`: the largest ``steps`` (0 if none) whose certified
    ``epsilon_upper <= target_epsilon``; ``reason`` says why the search stopped short."""

    target_epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    epsilon_upper: float
    evaluations: int
    reason: Optional[str] = None


def _check_progress(progress: Progress) -> Progress:
    """None or a callable (ValueError before any evaluation: a non-callable had raised a
    TypeError only after the first, possibly long, evaluation)."""
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be None or a callable progress(evaluations, text), "
                         f"got {progress!r}")
    return progress


def _upper(delta: float, sigma: float, q: float, steps: int,
           accountant: Optional[PrivacyBucketsAccountant] = None) -> Tuple[float, Optional[str]]:
    """Certified eps_upper of ``steps`` steps of (sigma, q); with the reason when inf."""
    acc = accountant if accountant is not None else PrivacyBucketsAccountant()
    with warnings.catch_warnings():
        # an engine limit is answered with inf and the reason in notes (kept below)
        warnings.simplefilter("ignore", RuntimeWarning)
        bounds = acc.epsilon_after(delta, noise_multiplier=sigma, sample_rate=q,
                                   num_steps=steps)
    if math.isinf(bounds.upper):
        why = bounds.notes[-1] if bounds.notes else "no epsilon could be certified"
        return math.inf, why
    return float(bounds.upper), None


def _certified_floor(delta: float, sigma: float, q: float, steps: int,
                     acc: PrivacyBucketsAccountant) -> float:
    """Infinity mass plus certified round-off of ``steps`` steps (what more noise cannot
    lower; docs/floating-point.md): above delta, eps_upper is inf whatever sigma is.
    ``acc`` answered :func:`_upper` for the same point, so its composition is cached."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            engine = acc._engine(delta, lower=False, history=[(sigma, q, steps)])
        except ENGINE_LIMITS:
            return math.inf
    return float(engine.infinity_mass)


def find_noise_multiplier(target_epsilon: float, delta: float, sample_rate: float,
                          steps: int, *, tol: float = 1e-3, max_evaluations: int = 80,
                          min_noise_multiplier: float = 1e-3,
                          max_noise_multiplier: float = 1e4,
                          epsilon_tolerance: Optional[float] = None,
                          progress: Progress = None, sampler: str = "poisson",
                          neighbouring: str = "add_remove",
                          dataset_size: Optional[int] = None,
                          batch_size: Optional[int] = None,
                          options: Optional[Mapping[str, Any]] = None) -> NoiseCalibration:
    """Smallest noise multiplier (to relative ``tol``) whose certified epsilon <= target.

    Brackets by factors of 2 from sigma = 1, then narrows [rejected, certified] by false
    position on log(eps_upper) against log(sigma) (Illinois variant), bisecting in log
    sigma wherever eps_upper is inf.  ``tol`` is floored at MIN_RELATIVE_TOLERANCE; the
    search also stops once a certified sigma is within ``epsilon_tolerance`` (absolute,
    Opacus's meaning) of the target, after ``max_evaluations`` accountant calls, or when
    the certified floor (infinity mass plus round-off, which more noise cannot lower)
    stays above delta over three doublings (``reason`` says which).  This is the one
    noise search of the package; Opacus's ``get_noise_multiplier(accountant="pb")``
    calls it (pb_accountant/_opacus_hook.py).  ``progress(evaluations, text)`` is
    called after each evaluation.  ``sampler``, ``neighbouring``, ``dataset_size`` and
    ``batch_size`` are the accountant's (pb_accountant.samplers; for shuffle the upper
    bound without amplification is what is calibrated).  ``options``: the accountant's
    engine options (``PrivacyBucketsAccountant(**options)``; default: the defaults), so
    that the sigma is certified by the very accountant that will report the run.
    """
    assumptions = check_assumptions(sampler, neighbouring, dataset_size, batch_size).as_dict()
    if options is not None:
        if not isinstance(options, Mapping):
            raise ValueError(f"options must be a mapping of PrivacyBucketsAccountant "
                             f"options, got {options!r}")
        from .accountant import _option_names
        unknown = sorted(set(options) - set(_option_names()), key=repr)
        if unknown:
            raise ValueError(f"options has unknown engine option(s) {unknown!r}; the options "
                             f"are {_option_names()!r} (the sampler is its own argument)")
        PrivacyBucketsAccountant(**dict(options))      # invalid values raise here
    setup = dict(assumptions, **dict(options or {}))    # the accountant that will report
    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_delta(delta)
    q = check_real("sample_rate", sample_rate, low=0.0, high=1.0, low_open=True)
    steps = check_count("steps", steps, minimum=1, maximum=MAX_STEPS)
    tol = check_real("tol", tol, low=0.0, high=1.0, low_open=True)
    tol = max(tol, MIN_RELATIVE_TOLERANCE)
    max_evaluations = check_count("max_evaluations", max_evaluations, minimum=2)
    progress = _check_progress(progress)
    # a search over Gaussian noise: sigma >= MIN_NOISE (sigma = 0, which a training step
    # may have, is never an answer: it certifies nothing below delta = q)
    s_min = check_real("min_noise_multiplier", min_noise_multiplier, low=MIN_NOISE,
                       high=MAX_NOISE)
    s_max = check_real("max_noise_multiplier", max_noise_multiplier, low=s_min,
                       high=MAX_NOISE)
    eps_tol = (None if epsilon_tolerance is None
               else check_real("epsilon_tolerance", epsilon_tolerance, low=0.0))

    def close_enough(e_ok: float) -> bool:
        return eps_tol is not None and target - e_ok <= eps_tol

    evaluations = 0
    last_reason: Optional[str] = None
    last_acc: dict = {}                         # sigma -> the accountant that evaluated it

    def eps_up(sigma: float) -> float:
        nonlocal evaluations, last_reason
        evaluations += 1
        acc = PrivacyBucketsAccountant(**setup)
        last_acc.clear()
        last_acc[sigma] = acc
        e, why = _upper(delta, sigma, q, steps, acc)
        if why is not None:
            last_reason = why
        if progress is not None:
            progress(evaluations, f"sigma={sigma:.6g} eps_upper={e:.6g}")
        return e

    # (what the bounds assume does not depend on sigma: one history's notes say it)
    notes = sampled_pairs([(1.0, q, steps)], **assumptions).notes

    def result(sigma_ok, e_ok, sigma_bad, e_bad, reason=None) -> NoiseCalibration:
        return NoiseCalibration(target, delta, q, steps, sigma_ok, e_ok, sigma_bad, e_bad,
                                tol, evaluations, reason, notes)

    # bracket: lo is rejected (eps_upper > target), hi is certified (eps_upper <= target)
    sigma = min(max(1.0, s_min), s_max)
    e = eps_up(sigma)
    lo = e_lo = hi = e_hi = None
    if e <= target:
        hi, e_hi = sigma, e
        while lo is None:
            if close_enough(e_hi):
                return result(hi, e_hi, None, None)
            s = max(hi / 2.0, s_min)
            if s >= hi:
                return result(hi, e_hi, None, None,
                              f"any noise multiplier >= {s_min:g} meets the target "
                              "(smaller ones were not searched)")
            if evaluations >= max_evaluations:
                return result(hi, e_hi, None, None, "stopped after max_evaluations")
            es = eps_up(s)
            if es <= target:
                hi, e_hi = s, es
            else:
                lo, e_lo = s, es
    else:
        lo, e_lo = sigma, e
        floors = []                            # certified floors at inf evaluations
        while hi is None:
            if math.isinf(e_lo):
                floors.append(_certified_floor(delta, lo, q, steps,
                                               last_acc.get(lo) or PrivacyBucketsAccountant(**setup)))
            else:
                floors = []
            stuck = (len(floors) >= 3 and all(f >= delta for f in floors[-3:])
                     and floors[-1] > 0.5 * floors[-3])
            s = min(lo * 2.0, s_max)
            if s <= lo or evaluations >= max_evaluations or stuck:
                bound = "inf" if math.isinf(e_lo) else f"{e_lo:.6g}"
                why = (f"no noise multiplier up to {lo:g} certifies epsilon <= {target:g} "
                       f"at delta = {delta:g} (eps_upper at {lo:g} is {bound})")
                if stuck:
                    why = (f"the certified floor (infinity mass plus round-off, "
                           f"{floors[-1]:.3g}) stays above delta as sigma doubles from "
                           f"{lo / 4:g} to {lo:g}; " + why)
                if math.isinf(e_lo) and last_reason:
                    why += f": {last_reason}"
                return result(None, math.inf, lo, e_lo, why)
            es = eps_up(s)
            if es <= target:
                hi, e_hi = s, es
            else:
                lo, e_lo = s, es

    def f(e):                                   # log(eps/target); None where eps is inf
        return math.log(e) - math.log(target) if math.isfinite(e) and e > 0 else None

    f_lo, f_hi = f(e_lo), f(e_hi)
    side = 0                                    # Illinois: which end moved last
    margin = 0.25 * math.log1p(tol)             # stay strictly inside: guaranteed progress
    stopped = False
    while hi / lo > 1.0 + tol and not close_enough(e_hi):
        if evaluations >= max_evaluations:
            stopped = True
            break
        x_lo, x_hi = math.log(lo), math.log(hi)
        if f_lo is not None and f_hi is not None and f_lo > 0 >= f_hi:
            x = x_lo + (x_hi - x_lo) * f_lo / (f_lo - f_hi)
        else:
            x = 0.5 * (x_lo + x_hi)
        x = min(max(x, x_lo + margin), x_hi - margin)
        s = math.exp(x)
        if not lo < s < hi:                     # the bracket cannot shrink further
            break
        es = eps_up(s)
        if es <= target:
            hi, e_hi, f_hi = s, es, f(es)
            if side == -1 and f_lo is not None:
                f_lo *= 0.5
            side = -1
        else:
            lo, e_lo, f_lo = s, es, f(es)
            if side == 1 and f_hi is not None:
                f_hi *= 0.5
            side = 1
    reason = None
    if math.isinf(e_lo):
        reason = (f"sigma = {lo:.6g}, just below, cannot be certified "
                  f"({last_reason or 'no epsilon could be certified'}); a smaller noise "
                  "multiplier may still meet the target")
    elif stopped:
        reason = (f"stopped after {max_evaluations} evaluations with sigma in "
                  f"[{lo:.6g}, {hi:.6g}]")
    return result(hi, e_hi, lo, e_lo, reason)


def find_steps(target_epsilon: float, delta: float, noise_multiplier: float,
               sample_rate: float, *, max_steps: int = 10 ** 9,
               max_evaluations: int = 80, progress: Progress = None,
               sampler: str = "poisson", neighbouring: str = "add_remove",
               dataset_size: Optional[int] = None,
               batch_size: Optional[int] = None) -> StepsCalibration:
    """Largest number of steps whose certified epsilon is <= target (0 if not even one).

    Doubling from one step, then integer bisection; one accountant is reused so that
    composed binary powers are cached.  Searches at most ``max_steps`` steps (at most
    10**15, the most one query may hold) and ``max_evaluations`` accountant calls
    (``reason`` says when either stopped it).
    The sampler arguments are the accountant's, as for :func:`find_noise_multiplier`.
    """
    assumptions = check_assumptions(sampler, neighbouring, dataset_size, batch_size).as_dict()
    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_delta(delta)
    sigma = check_real("noise_multiplier", noise_multiplier, low=MIN_NOISE, high=MAX_NOISE)
    q = check_real("sample_rate", sample_rate, low=0.0, high=1.0, low_open=True)
    # (at most MAX_STEPS: the most one query may ask for; a larger max_steps had failed
    # half-way through the search with a ValueError naming num_steps)
    max_steps = check_count("max_steps", max_steps, minimum=1, maximum=MAX_STEPS)
    max_evaluations = check_count("max_evaluations", max_evaluations, minimum=2)
    progress = _check_progress(progress)
    acc = PrivacyBucketsAccountant(**assumptions)
    evaluations = 0

    def eps_up(t: int) -> float:
        nonlocal evaluations
        evaluations += 1
        e, _why = _upper(delta, sigma, q, t, acc)
        if progress is not None:
            progress(evaluations, f"steps={t} eps_upper={e:.6g}")
        return e

    def result(t, e, reason=None):
        return StepsCalibration(target, delta, sigma, q, t, e, evaluations, reason)

    good, e_good = 0, 0.0
    bad = None
    t = 1
    while True:
        e = eps_up(t)
        if e > target:
            bad = t
            break
        good, e_good = t, e
        if t >= max_steps:
            return result(good, e_good, f"searched up to max_steps = {max_steps}")
        if evaluations >= max_evaluations:
            return result(good, e_good, "stopped after max_evaluations")
        t = min(2 * t, max_steps)
    while bad - good > 1:
        if evaluations >= max_evaluations:
            return result(good, e_good, f"stopped after {max_evaluations} evaluations "
                                        f"with steps in [{good}, {bad})")
        mid = (good + bad) // 2
        e = eps_up(mid)
        if e <= target:
            good, e_good = mid, e
        else:
            bad = mid
    return result(good, e_good)
