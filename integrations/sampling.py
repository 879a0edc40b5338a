"""Sanity checks on the sample rate an accountant is told about.

DP-SGD's privacy analysis assumes that every example is in a batch independently with
probability ``sample_rate`` (Poisson sampling).  Two silent mistakes are common:

* a rate above 1 (for example a batch size passed where a rate was expected);
* with Opacus, ``PrivacyEngine.make_private`` tells the accountant ``1/len(data_loader)``,
  while a ``DPDataLoader`` samples with its own ``sample_rate`` and has
  ``len() == int(1/sample_rate)`` batches.  The two differ whenever 1/sample_rate is
  not an integer, and even when it is, floating point can make ``int(1/(1/n))``
  equal ``n - 1`` (n = 93, 99, 105, ...; Opacus issue #813).  The accounted rate is
  then not the rate the data were sampled with.

``check_sample_rate`` warns with :class:`SampleRateWarning` in these cases.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, List, Optional

from pb_accountant._validation import check_real

__all__ = ["SampleRateWarning", "check_sample_rate", "loader_sample_rate"]

_REL_TOL = 1e-9


class SampleRateWarning(UserWarning):
    """The sample rate given to the accountant looks wrong."""


def loader_sample_rate(data_loader: Any) -> Optional[float]:
    """The Poisson rate an Opacus DP loader samples with (None for other loaders).

    Recognises ``DPDataLoader`` (attribute ``sample_rate``) and any loader whose
    ``batch_sampler`` has a ``sample_rate`` (``UniformWithReplacementSampler`` and its
    distributed variant), by duck typing so that opacus need not be imported.
    """
    if data_loader is None:
        return None
    for obj in (getattr(data_loader, "batch_sampler", None), data_loader,
                getattr(data_loader, "sampler", None)):
        rate = getattr(obj, "sample_rate", None)
        if isinstance(rate, numbers.Real) and not isinstance(rate, bool):
            return float(rate)
    return None


def _differs(a: float, b: float) -> bool:
    return not math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=0.0)


def check_sample_rate(sample_rate: float, data_loader: Any = None, *,
                      stacklevel: int = 2) -> List[str]:
    """Warn (:class:`SampleRateWarning`) when ``sample_rate`` looks wrong; return the problems.

    * ``sample_rate`` > 1 is not a probability (a batch size passed by mistake?);
    * for an Opacus DP loader (``DPDataLoader`` / ``UniformWithReplacementSampler``):
      the loader's own rate differs from ``1/len(loader)`` (what ``make_private``
      accounts, Opacus issue #813), or ``sample_rate`` differs from the loader's rate.

    ValueError for a value that is not a number >= 0.  Returns the messages warned.
    """
    # > 1 only warns here (the accountant refuses it when the step is recorded)
    q = check_real("sample_rate", sample_rate, low=0.0)
    problems: List[str] = []
    if q > 1.0:
        problems.append(
            f"sample_rate={q!r} is greater than 1: it must be the probability that an "
            "example is in a batch (batch_size / dataset size), not a batch size")
    loader_q = loader_sample_rate(data_loader)
    if loader_q is not None:
        try:
            n = len(data_loader)
        except TypeError:
            n = 0
        if n and _differs(loader_q, 1.0 / n):
            problems.append(
                f"the DP data loader samples with sample_rate={loader_q!r} but has "
                f"{n} batches, so Opacus's make_private accounts 1/len(loader)={1.0 / n!r} "
                "(opacus issue #813): pass the loader's own sample_rate to the accountant")
        if _differs(q, loader_q):
            problems.append(
                f"the accountant is told sample_rate={q!r} but the DP data loader samples "
                f"with sample_rate={loader_q!r}")
    for message in problems:
        warnings.warn(message, SampleRateWarning, stacklevel=stacklevel)
    return problems
