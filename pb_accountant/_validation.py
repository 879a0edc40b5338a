"""Input checks shared by every layer: a ValueError naming parameter, value and range.

The one home of validation (engine, comparison bounds, calibration, integrations and
CLI).  Every check raises before any state changes, with a message of the form
"NAME must be ... in RANGE, got VALUE"; a CLI passes its option name (``--delta``) as
NAME.  Validation never uses ``assert``.

The noise rule (one rule, here): a *training step* may have noise_multiplier 0 or one
in [MIN_NOISE, MAX_NOISE].  Zero is a step without noise (Opacus allows it): the
accountant models it as the pair with distinguishing mass q (docs/method.md), so its
epsilon is inf below delta = q -- a valid, honest answer.  Between 0 and MIN_NOISE the
closed forms (sigma^2, 1/sigma^2) leave the floating-point range, so those are refused.  A
``SubsampledGaussian`` *pair* needs a real Gaussian and therefore sigma >= MIN_NOISE
(``allow_zero=False``); calibration searches positive noise only.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["MIN_NOISE", "MAX_NOISE", "check_real", "check_count", "check_array",
           "check_choice", "check_flag", "check_delta", "check_epsilon", "check_epsilons",
           "check_noise_multiplier", "check_sample_rate"]

#: smallest positive and largest noise multiplier (sigma) the buckets can represent
MIN_NOISE, MAX_NOISE = 1e-6, 1e12


def _number_text(x) -> str:
    """Shortest exact text of an endpoint: 0, 1, 0.5, 1e-06, 1e+12 (repr if %g rounds)."""
    if isinstance(x, float):
        short = f"{x:g}"
        return short if float(short) == x else repr(x)
    return repr(x)


def _range_text(low, high, low_open=False, high_open=False, allow_inf=False) -> str:
    lo_b = "(" if low_open or low is None else "["
    hi_b = ")" if high_open or (high is None and not allow_inf) else "]"
    lo = "-inf" if low is None else _number_text(low)
    hi = "inf" if high is None else _number_text(high)
    return f"{lo_b}{lo}, {hi}{hi_b}"


def _scalar(value):
    """numpy scalars and 0-d arrays as Python numbers; anything else unchanged."""
    if isinstance(value, np.ndarray) and value.shape == ():
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def check_real(name: str, value, *, low=None, high=None, low_open=False, high_open=False,
               allow_inf=False) -> float:
    """Return ``value`` as a float after checking it lies in the stated interval."""
    value = _scalar(value)
    rng = _range_text(low, high, low_open, high_open, allow_inf)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number in {rng}, got {value!r}")
    try:
        x = float(value)
    except OverflowError:                    # an int or Fraction past the float range
        x = math.inf if value > 0 else -math.inf
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{name} must be a finite number in {rng}, got {value!r}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    return x


def check_count(name: str, value, *, minimum: int = 0, maximum=None) -> int:
    """Return ``value`` as an int after checking minimum <= value (<= maximum)."""
    rng = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    value = _scalar(value)
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


def check_array(name, values, *, low=None, high=None, low_open=False, high_open=False,
                allow_inf=False, allow_neg_inf=False, nonempty=True) -> np.ndarray:
    """A float array whose finite entries lie in the interval (no NaN; inf if allowed)."""
    rng = _range_text(low, high, low_open, high_open, allow_inf)
    try:
        arr = np.asarray(values, dtype=float)
    except OverflowError:
        # (an integer beyond the floating-point range, such as 10**400)
        raise ValueError(f"{name} must be an array of numbers in {rng} within the "
                         f"floating-point range, got {values!r}") from None
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers, got {values!r}") from None
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


def check_choice(name, value, options):
    """``value`` if it is one of ``options``."""
    if value not in options:
        raise ValueError(f"{name} must be one of {options!r}, got {value!r}")
    return value


def check_flag(name: str, value) -> bool:
    """``value`` as a bool: True or False (numpy's too).  Anything else is refused, since
    a truthy stand-in such as the string "False" would read as the opposite."""
    value = _scalar(value)
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_delta(value, name: str = "delta") -> float:
    """delta in the open interval (0, 1)."""
    return check_real(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def check_epsilon(value, name: str = "epsilon") -> float:
    """A finite epsilon >= 0."""
    return check_real(name, value, low=0.0)


def check_sample_rate(value, name: str = "sample_rate", *, allow_zero: bool = True) -> float:
    """q in [0, 1] (a step with q = 0 never touches the data); (0, 1] without zero."""
    return check_real(name, value, low=0.0, high=1.0, low_open=not allow_zero)


def check_noise_multiplier(value, name: str = "noise_multiplier", *,
                           allow_zero: bool = True) -> float:
    """sigma = 0 (a step without noise, if ``allow_zero``) or in [MIN_NOISE, MAX_NOISE].

    See the module docstring for why each layer accepts what it accepts.
    """
    if not allow_zero:
        return check_real(name, value, low=MIN_NOISE, high=MAX_NOISE)
    rng = f"0 or in {_range_text(MIN_NOISE, MAX_NOISE)}"
    scalar = _scalar(value)
    if isinstance(scalar, bool) or not isinstance(scalar, numbers.Real):
        raise ValueError(f"{name} must be a real number, {rng}, got {value!r}")
    sigma = check_real(name, value, allow_inf=True) if scalar == scalar else math.nan
    if not (sigma == 0.0 or MIN_NOISE <= sigma <= MAX_NOISE):      # (NaN too)
        raise ValueError(f"{name} must be {rng}, got {value!r}")
    return sigma


def check_epsilons(epsilon):
    """A non-negative finite real epsilon or a numeric array of them (no bools, strings)."""
    if np.ndim(epsilon) == 0 and not isinstance(epsilon, np.ndarray):
        return check_epsilon(epsilon)
    arr = np.asarray(epsilon)
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise ValueError(f"epsilon must be a real number or a non-empty array of real "
                         f"numbers in [0, inf), got {epsilon!r}")
    arr = arr.astype(float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"epsilon must be finite and in [0, inf), got {epsilon!r}")
    return arr if arr.ndim else float(arr)


# the comparison bounds' historical names (their counts start at 1)
_real = check_real
_array = check_array
_choice = check_choice


def _count(name, value, *, minimum=1, maximum=None) -> int:
    return check_count(name, value, minimum=minimum, maximum=maximum)


#: most optimisation steps one history entry (or one query) may hold: far beyond any
#: training run, and small enough that every count stays exact in a float
MAX_STEPS = 10 ** 15
