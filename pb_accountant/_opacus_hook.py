"""Registers "pb" with Opacus without importing torch at ``import pb_accountant`` time.

If opacus.accountants is already imported we register at once; otherwise a meta-path
finder waits for its first import and registers right after it has executed.

Registration also wraps Opacus's ``get_noise_multiplier`` (and the name
``opacus.privacy_engine`` imported, which ``make_private_with_epsilon`` calls): for
``accountant="pb"`` a bounded search replaces Opacus's bisection, which loops forever
if the epsilon curve jumps across its tolerance window.  The search returns a sigma
whose *certified* epsilon is <= the target, or raises a ValueError saying why no sigma
can be certified; the search is ``pb_accountant.calibration.find_noise_multiplier``.
Other accountants go to Opacus's own function unchanged.
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


#: accountant evaluations of one search at most (doubling plus narrowing)
_MAX_EVALUATIONS = 120


def calibrated_noise_multiplier(*, target_epsilon: float, target_delta: float,
                                sample_rate: float, steps: int,
                                epsilon_tolerance: float = 0.01,
                                max_sigma: float = 1e6) -> float:
    """A sigma whose certified epsilon after ``steps`` steps is <= ``target_epsilon``
    and within ``epsilon_tolerance`` of it (or the smallest to a relative 1e-6).

    Opacus's signature over :func:`pb_accountant.calibration.find_noise_multiplier`, the
    package's one noise search: every sigma returned was evaluated and certified, and
    the search ends in bounded time.  ValueError ("The privacy budget is too low ...
    cannot be certified: why") when no sigma up to ``max_sigma`` certifies the target.
    """
    from ._validation import MAX_NOISE, MIN_NOISE, check_delta
    from .calibration import MIN_RELATIVE_TOLERANCE, find_noise_multiplier

    target_delta = check_delta(target_delta, "target_delta")     # Opacus's name
    result = find_noise_multiplier(
        target_epsilon, target_delta, sample_rate, steps, tol=MIN_RELATIVE_TOLERANCE,
        max_evaluations=_MAX_EVALUATIONS, min_noise_multiplier=MIN_NOISE,
        max_noise_multiplier=min(max(float(max_sigma), MIN_NOISE), MAX_NOISE),
        epsilon_tolerance=epsilon_tolerance)
    if result.noise_multiplier is None:
        raise ValueError(
            f"The privacy budget is too low: target_epsilon={result.target_epsilon!r} at "
            f"target_delta={result.delta!r} cannot be certified: {result.reason}")
    return float(result.noise_multiplier)


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
        "(pb_accountant.calibration.find_noise_multiplier).\n")
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
