"""Registers "pb" with Opacus without importing torch at ``import pb_accountant`` time.

If opacus.accountants is already imported we register at once; otherwise a meta-path
finder waits for its first import and registers right after it has executed.

Registration also wraps Opacus's ``get_noise_multiplier`` (and the name
``opacus.privacy_engine`` imported, which ``make_private_with_epsilon`` calls): for
``accountant="pb"`` a bounded search replaces Opacus's bisection, which loops forever
if the epsilon curve jumps across its tolerance window.  The search returns a sigma
whose *certified* epsilon is <= the target, or raises a ValueError saying why no sigma
can be certified; the search is ``pb_accountant.calibration.find_noise_multiplier``.
Other accountants go to Opacus's own function unchanged.  ``make_private_with_epsilon``
is wrapped too, so that with a ``PrivacyBucketsAccountant`` the search calibrates for
that accountant (its sampler, neighbouring relation, sizes and engine options) and, with
Poisson sampling, for what ``make_private`` will record: steps at 1/len(DPDataLoader),
len(DPDataLoader) of them per epoch (one fewer than the original loader's batches where
1 / fl(1/n) < n, opacus issue #813).

It also wraps ``PrivacyEngine.make_private`` (detection only, issue 13): with
``accountant="pb"`` the loader it returns is compared with the accountant's sampler
(``make_private(poisson_sampling=False)`` keeps a shuffled loader while the default
accountant assumes Poisson sampling) and a mismatch is warned about with the epsilon
the loader implies (``pb_accountant.integrations.sampling.sampler_check``).  The loader
is remembered on the optimizer (``_pb_data_loader``) for the budget tracker and the
callbacks.
"""
from __future__ import annotations

import contextvars
import importlib.abc
import importlib.machinery
import math
import sys
from fractions import Fraction

_TARGET = "opacus.accountants"
_ENGINE = "opacus.privacy_engine"


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
    _wrap_make_private()
    return True


#: delta of the make_private warning when make_private_with_epsilon gave none
_WARN_DELTA = 1e-5


def _wrap_make_private(module=None) -> bool:
    """Wrap ``PrivacyEngine.make_private`` once (True when it is wrapped)."""
    module = module or sys.modules.get(_ENGINE)
    engine_cls = getattr(module, "PrivacyEngine", None)
    original = getattr(engine_cls, "make_private", None)
    if original is None:
        return False
    if getattr(original, "_pb_wrapped", False):
        _wrap_make_private_with_epsilon(engine_cls)
        return True

    def make_private(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            _check_loader(self, result, kwargs)
        except Exception as exc:         # detection never breaks make_private
            import warnings
            warnings.warn(f"pb_accountant could not check the data loader's sampler: {exc!r}",
                          RuntimeWarning, stacklevel=2)
        return result

    make_private._pb_wrapped = True
    make_private.__wrapped__ = original
    make_private.__doc__ = original.__doc__
    engine_cls.make_private = make_private
    _wrap_make_private_with_epsilon(engine_cls)
    return True


#: the PrivacyBucketsAccountant whose make_private_with_epsilon is calibrating (read by
#: the wrapped get_noise_multiplier, which Opacus calls with the mechanism name only)
_CALIBRATING = contextvars.ContextVar("pb_accountant_calibrating", default=None)


def _wrap_make_private_with_epsilon(engine_cls) -> None:
    """Wrap ``PrivacyEngine.make_private_with_epsilon`` once: with a
    ``PrivacyBucketsAccountant`` the noise is calibrated for *that* accountant (its
    sampler, neighbouring relation, sizes and engine options), not for a default one:
    a shuffle or fixed-size accountant's epsilon after the planned epochs would
    otherwise exceed the target (Opacus passes get_noise_multiplier only "pb")."""
    original = getattr(engine_cls, "make_private_with_epsilon", None)
    if original is None or getattr(original, "_pb_wrapped", False):
        return
    from .accountant import PrivacyBucketsAccountant

    def make_private_with_epsilon(self, *args, **kwargs):
        accountant = getattr(self, "accountant", None)
        if not isinstance(accountant, PrivacyBucketsAccountant):
            return original(self, *args, **kwargs)
        # Poisson sampling (the default): make_private replaces the loader by a
        # DPDataLoader of int(1 / (1 / len(loader))) batches and accounts each step at
        # 1 / that length, which is len(loader) - 1 where 1 / fl(1 / n) < n (n = 93,
        # ...; opacus issue #813): the search is told what will be recorded
        token = _CALIBRATING.set((accountant, bool(kwargs.get("poisson_sampling", True))))
        try:
            return original(self, *args, **kwargs)
        finally:
            _CALIBRATING.reset(token)

    make_private_with_epsilon._pb_wrapped = True
    make_private_with_epsilon.__wrapped__ = original
    make_private_with_epsilon.__doc__ = original.__doc__
    engine_cls.make_private_with_epsilon = make_private_with_epsilon


def _check_loader(engine, result, kwargs) -> None:
    """With accountant "pb": warn when the returned loader is not the sampler it assumes."""
    from .accountant import PrivacyBucketsAccountant

    accountant = getattr(engine, "accountant", None)
    if not isinstance(accountant, PrivacyBucketsAccountant) or not isinstance(result, tuple):
        return
    optimizer, data_loader = result[1], result[2] if len(result) == 3 else result[-1]
    try:
        optimizer._pb_data_loader = data_loader
    except Exception:
        pass
    from .integrations.sampling import sampler_check
    sigma = getattr(optimizer, "noise_multiplier", kwargs.get("noise_multiplier"))
    try:
        q = 1.0 / len(data_loader)              # what make_private accounts
    except Exception:
        q = None
    sampler_check(accountant, data_loader, _WARN_DELTA, pending=(sigma, q), stacklevel=4)


#: accountant evaluations of one search at most (doubling plus narrowing)
_MAX_EVALUATIONS = 120


def calibrated_noise_multiplier(*, target_epsilon: float, target_delta: float,
                                sample_rate: float, steps: int,
                                epsilon_tolerance: float = 0.01,
                                max_sigma: float = 1e6, accountant=None) -> float:
    """A sigma whose certified epsilon after ``steps`` steps is <= ``target_epsilon``
    and within ``epsilon_tolerance`` of it (or the smallest to a relative 1e-6).

    Opacus's signature over :func:`pb_accountant.calibration.find_noise_multiplier`, the
    package's one noise search: every sigma returned was evaluated and certified, and
    the search ends in bounded time.  ValueError ("The privacy budget is too low ...
    cannot be certified: why") when no sigma up to ``max_sigma`` certifies the target.
    ``accountant``: the ``PrivacyBucketsAccountant`` that will report the run (its
    sampler, neighbouring relation, sizes and engine options are calibrated for);
    default: a default one (Poisson, add/remove).
    """
    from ._validation import MAX_NOISE, MIN_NOISE, check_delta
    from .calibration import MIN_RELATIVE_TOLERANCE, find_noise_multiplier

    target_delta = check_delta(target_delta, "target_delta")     # Opacus's name
    setup = {}
    if accountant is not None:
        from .accountant import _options_dict
        setup = dict(accountant.assumptions, options=_options_dict(accountant.options))
    result = find_noise_multiplier(
        target_epsilon, target_delta, sample_rate, steps, tol=MIN_RELATIVE_TOLERANCE, **setup,
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
        calibrating, poisson = _CALIBRATING.get() or (None, False)
        if steps is None:
            # checked here, before the division (0, inf, NaN and strings would raise
            # ZeroDivisionError, OverflowError or a ValueError naming no parameter)
            from ._validation import MAX_STEPS, check_real
            sample_rate = check_real("sample_rate", sample_rate, low=0.0, high=1.0,
                                     low_open=True)
            epochs = check_real("epochs", epochs, low=0.0, low_open=True)
            total = epochs / sample_rate
            if not 1.0 <= total <= MAX_STEPS:
                raise ValueError(f"epochs / sample_rate must give 1 to {MAX_STEPS} steps, "
                                 f"got epochs={epochs!r} / sample_rate={sample_rate!r} = "
                                 f"{total!r}")
            if poisson:
                # (make_private_with_epsilon with Poisson sampling: what it will record)
                sample_rate, per_epoch = poisson_accounting(sample_rate)
                steps = max(1, math.ceil(Fraction(epochs) * per_epoch))
            else:
                steps = steps_of_epochs(epochs, sample_rate)
            if steps > MAX_STEPS:
                raise ValueError(f"epochs / sample_rate must give 1 to {MAX_STEPS} steps, "
                                 f"got epochs={epochs!r} / sample_rate={sample_rate!r}: "
                                 f"{steps} steps")
        return calibrated_noise_multiplier(
            target_epsilon=target_epsilon, target_delta=target_delta,
            sample_rate=sample_rate, steps=steps, epsilon_tolerance=epsilon_tolerance,
            max_sigma=getattr(utils, "MAX_SIGMA", 1e6), accountant=calibrating)

    get_noise_multiplier._pb_wrapped = True
    get_noise_multiplier.__wrapped__ = original
    get_noise_multiplier.__doc__ = (original.__doc__ or "") + (
        "\n    With accountant=\"pb\": pb_accountant's bounded, certified search "
        "(pb_accountant.calibration.find_noise_multiplier).\n")
    utils.get_noise_multiplier = get_noise_multiplier
    engine = sys.modules.get("opacus.privacy_engine")
    if engine is not None and getattr(engine, "get_noise_multiplier", None) is original:
        engine.get_noise_multiplier = get_noise_multiplier


def poisson_accounting(sample_rate: float):
    """(the rate each step is accounted at, steps per epoch) of Opacus's Poisson run
    whose loader make_private builds with ``sample_rate`` (= 1/len(original loader)): its
    ``UniformWithReplacementSampler`` yields int(1 / sample_rate) batches per epoch
    and ``make_private`` accounts 1/len(DPDataLoader) per step.  Where floating point
    makes int(1 / fl(1/n)) = n - 1 (n = 93, 99, ...), that is n - 1 steps at 1/(n - 1)."""
    per_epoch = max(1, int(1.0 / sample_rate))       # (sample_rate <= 1: >= 1 already)
    return 1.0 / per_epoch, per_epoch


def steps_of_epochs(epochs: float, sample_rate: float) -> int:
    """The steps of ``epochs`` epochs at ``sample_rate``.  Opacus passes 1/len(loader),
    and the float quotient epochs / rate may fall just below the whole number of steps
    the run takes (1 / fl(1/93) = 92.99...: int() calibrated one step too few, and the
    run's certified epsilon exceeded the target), so a rate that is the float of 1/n
    counts n steps per epoch exactly; a fraction of a step is rounded up (more steps
    is the conservative side)."""
    inverse = 1.0 / sample_rate                # (inf for a subnormal rate)
    n = round(inverse) if math.isfinite(inverse) else 0
    exact = (Fraction(epochs) * n if n >= 1 and 1.0 / n == sample_rate
             else Fraction(epochs) / Fraction(sample_rate))
    return max(1, math.ceil(exact))


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in (_TARGET, _ENGINE):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            if fullname == _ENGINE:             # PrivacyEngine exists only now
                _wrap_make_private(module)
                if _TARGET in sys.modules:
                    uninstall()
                return
            try:
                register(module)
            finally:
                if _ENGINE in sys.modules and _wrap_make_private():
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
        if not _wrap_make_private() and _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)        # wrap PrivacyEngine when it comes
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
