"""Registers "pb" with Opacus without importing torch at ``import pb_accountant`` time.

If opacus.accountants is already imported we register at once; otherwise a meta-path
finder waits for its first import and registers right after it has executed.

Registration also wraps Opacus's ``get_noise_multiplier`` (and the name
``opacus.privacy_engine`` imported, which ``make_private_with_epsilon`` calls): for
``accountant="pb"`` a bounded search replaces Opacus's bisection, which loops forever
if the epsilon curve jumps across its tolerance window.  The search returns a sigma
whose *certified* epsilon is <= the target, or raises a ValueError saying why no sigma
can be certified.  Other accountants go to Opacus's own function unchanged.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_TARGET = "opacus.accountants"


def register(module=None) -> bool:
    """Register the accountant with an imported ``opacus.accountants``; True on success."""
    from .accountant import MECHANISM, PrivacyBucketsAccountant

    module = module or sys.modules.get(_TARGET)
    if module is None:
        return False
    iaccountant = getattr(module, "IAccountant", None)
    if iaccountant is not None and not issubclass(PrivacyBucketsAccountant, iaccountant):
        iaccountant.register(PrivacyBucketsAccountant)
    registry = sys.modules.get(_TARGET + ".registry")
    table = getattr(registry, "_ACCOUNTANTS", None)
    if table is not None:
        table[MECHANISM] = PrivacyBucketsAccountant
    elif hasattr(module, "register_accountant"):
        module.register_accountant(MECHANISM, PrivacyBucketsAccountant, force=True)
    _wrap_get_noise_multiplier()
    return True


#: bisection steps at most, and the relative sigma width at which it stops
_MAX_BISECTIONS = 80
_SIGMA_RTOL = 1e-7


def calibrated_noise_multiplier(*, target_epsilon: float, target_delta: float,
                                sample_rate: float, steps: int,
                                epsilon_tolerance: float = 0.01,
                                max_sigma: float = 1e6) -> float:
    """Smallest sigma found (within ``epsilon_tolerance`` or a relative sigma width of
    1e-7) whose certified epsilon after ``steps`` steps is <= ``target_epsilon``.

    Doubles sigma from 20 as Opacus does, then bisects at most 80 times; every sigma
    returned was evaluated and its certified upper epsilon found <= the target, so the
    result is safe even where the curve is not continuous.  Terminates in bounded time:
    the doubling stops (ValueError) at ``max_sigma`` or when the certified floor
    (infinity mass plus round-off, which more noise cannot lower) stays above
    ``target_delta`` over three doublings.
    """
    from ._validation import check_count, check_delta, check_real
    from .accountant import PrivacyBucketsAccountant
    from .engine import PrivacyBuckets
    from .mechanisms import MIN_NOISE

    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_delta(target_delta, "target_delta")
    q = check_real("sample_rate", sample_rate, low=0.0, high=1.0, low_open=True)
    steps = check_count("steps", steps, minimum=1)
    tol = check_real("epsilon_tolerance", epsilon_tolerance, low=0.0)
    acc = PrivacyBucketsAccountant()

    def certified(sigma: float):
        """(certified upper epsilon, infinity mass plus round-off, notes): what
        ``acc.get_epsilon`` computes, bit for bit."""
        acc.history = [(sigma, q, steps)]
        engine = PrivacyBuckets(acc._composer.compose(acc._pairs(acc.history), delta,
                                                      ("split",)), delta)
        bounds = engine.epsilon_bounds(delta)
        return bounds.upper, engine.infinity_mass, bounds.notes

    sigma_low, sigma_high = 0.0, 10.0
    eps_high, floors, notes = float("inf"), [], ()
    while eps_high > target:
        sigma_high *= 2.0
        stuck = (len(floors) >= 3 and all(f >= delta for f in floors[-3:])
                 and floors[-1] > 0.5 * floors[-3])
        if sigma_high > max_sigma or stuck:
            why = "; ".join(notes) if notes else f"epsilon at sigma={sigma_high / 2:g} is {eps_high:g}"
            if stuck:
                why = (f"the certified floor (infinity mass plus round-off, {floors[-1]:.3g}) "
                       f"stays above target_delta as sigma doubles from {sigma_high / 8:g} to "
                       f"{sigma_high / 2:g}; " + why)
            raise ValueError(
                f"The privacy budget is too low: target_epsilon={target!r} at "
                f"target_delta={delta!r} cannot be certified: {why}")
        eps_high, floor, notes = certified(sigma_high)
        floors.append(floor)
    for _ in range(_MAX_BISECTIONS):
        if target - eps_high <= tol or sigma_high - sigma_low <= _SIGMA_RTOL * sigma_high:
            break
        sigma = 0.5 * (sigma_low + sigma_high)
        if sigma < MIN_NOISE:
            sigma_low = sigma                 # below the smallest noise pb accepts
            continue
        eps = certified(sigma)[0]
        if eps < target:
            sigma_high, eps_high = sigma, eps
        else:
            sigma_low = sigma
    return float(sigma_high)


def _wrap_get_noise_multiplier() -> None:
    utils = sys.modules.get("opacus.accountants.utils")
    if utils is None:
        try:
            import importlib
            utils = importlib.import_module("opacus.accountants.utils")
        except ImportError:          # pragma: no cover - an opacus without utils
            return
    original = getattr(utils, "get_noise_multiplier", None)
    if original is None or getattr(original, "_pb_wrapped", False):
        return

    def get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, epochs=None,
                             steps=None, accountant="rdp", epsilon_tolerance=0.01,
                             **kwargs):
        if accountant != "pb":
            return original(target_epsilon=target_epsilon, target_delta=target_delta,
                            sample_rate=sample_rate, epochs=epochs, steps=steps,
                            accountant=accountant, epsilon_tolerance=epsilon_tolerance,
                            **kwargs)
        if (steps is None) == (epochs is None):
            raise ValueError("get_noise_multiplier takes as input EITHER a number of steps "
                             "or a number of epochs")
        if steps is None:
            steps = int(epochs / sample_rate)
        return calibrated_noise_multiplier(
            target_epsilon=target_epsilon, target_delta=target_delta,
            sample_rate=sample_rate, steps=steps, epsilon_tolerance=epsilon_tolerance,
            max_sigma=getattr(utils, "MAX_SIGMA", 1e6))

    get_noise_multiplier._pb_wrapped = True
    get_noise_multiplier.__wrapped__ = original
    get_noise_multiplier.__doc__ = (original.__doc__ or "") + (
        "\n    With accountant=\"pb\": pb_accountant's bounded, certified search "
        "(pb_accountant._opacus_hook.calibrated_noise_multiplier).\n")
    utils.get_noise_multiplier = get_noise_multiplier
    engine = sys.modules.get("opacus.privacy_engine")
    if engine is not None and getattr(engine, "get_noise_multiplier", None) is original:
        engine.get_noise_multiplier = get_noise_multiplier


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                register(module)
            finally:
                uninstall()

        loader.exec_module = exec_module
        return spec


_finder = _RegisterOnImport()


def uninstall() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def install() -> None:
    """Register now if opacus is loaded, else on its first import."""
    if _TARGET in sys.modules:
        register()
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
