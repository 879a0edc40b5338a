"""Input checks of the comparison bounds: a ValueError naming parameter, value and range."""
from __future__ import annotations

import math
import numbers

import numpy as np

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


