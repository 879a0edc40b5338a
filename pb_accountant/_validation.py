"""Input checks shared by every layer: a ValueError naming parameter, value and range."""
from __future__ import annotations

import math
import numbers


def _describe(value) -> str:
    return repr(value)


def check_real(name: str, value, *, low=None, high=None, low_open=False, high_open=False,
               allow_inf=False) -> float:
    """Return ``value`` as a float after checking it lies in the stated interval."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            import numpy as np  # numpy scalars and 0-d arrays
            if isinstance(value, np.ndarray) and value.shape == ():
                value = value.item()
            elif isinstance(value, np.generic):
                value = value.item()
        except Exception:  # pragma: no cover - numpy is a hard dependency
            pass
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {_describe(value)}")
    x = float(value)
    lo_b = "(" if low_open else "["
    hi_b = ")" if high_open else "]"
    rng = f"{lo_b}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi_b}"
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{name} must be finite and in {rng}, got {_describe(value)}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be in {rng}, got {_describe(value)}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be in {rng}, got {_describe(value)}")
    return x


def check_count(name: str, value, *, minimum: int = 0) -> int:
    """Return ``value`` as an int after checking it is an integer >= minimum."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():
        v = int(value)
    else:
        try:
            import numpy as np
            if isinstance(value, np.generic) and float(value).is_integer():
                v = int(value)
            else:
                raise TypeError
        except TypeError:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return v


def check_delta(value, name: str = "delta") -> float:
    return check_real(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def check_epsilon(value, name: str = "epsilon") -> float:
    return check_real(name, value, low=0.0)


def check_epsilons(epsilon):
    """A non-negative finite real epsilon or a numeric array of them (no bools, strings)."""
    import numpy as np

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
