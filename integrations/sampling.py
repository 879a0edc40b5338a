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
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from pb_accountant._validation import check_real

from ._cli_render import down, up

__all__ = ["SampleRateWarning", "check_sample_rate", "loader_sample_rate",
           "SamplerMismatchWarning", "LoaderSampling", "loader_sampling", "SamplerCheck",
           "sampler_check", "accountant_assumptions", "sibling_accountant"]

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
      accounts, Opacus issue #813), or ``sample_rate`` differs from the loader's rate;
    * for a shuffled loader whose ``drop_last`` leaves examples out: ``sample_rate`` is
      not ``1/len(loader)``, the only rate a shuffle accountant reads as that loader.

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
    elif data_loader is not None and 0.0 < q <= 1.0:
        # a shuffled loader with drop_last leaving examples out has floor(n/b) batches
        # per epoch; a shuffle accountant reads that only from the rate 1/len(loader)
        # Opacus records, and any other rate (b/n given by hand) as ceil(n/b) batches
        # per epoch, counting too few epochs (n 3, b 2, rate 2/3, two steps: certified
        # delta 0.0015 at eps 3, the run's 0.0057)
        sampling = loader_sampling(data_loader)
        try:
            batches = len(_single_loader(data_loader))
        except TypeError:
            batches = 0
        if (sampling is not None and sampling.sampler == "shuffle"
                and sampling.drop_last_of is not None and batches
                and _differs(q, 1.0 / batches)):
            problems.append(
                f"the accountant is told sample_rate={q!r} but the shuffled data loader "
                f"drops the last partial batch and has {batches} batches per epoch: a "
                f"shuffle accountant reads a rate other than 1/len(loader)={1.0 / batches!r} "
                f"as ceil(n/b) batches per epoch (drop_last=False) and its bounds would "
                f"not hold for this loader; pass sample_rate=1/len(loader)")
    for message in problems:
        warnings.warn(message, SampleRateWarning, stacklevel=stacklevel)
    return problems


# --------------------------------------------------------------------------------------
# which sampler feeds training? (issue 13: no silent sampler mismatch)
# --------------------------------------------------------------------------------------

#: what :func:`loader_sampling` can find; "poisson", "shuffle" and "fixed_size" are
#: accountant samplers (``pb_accountant.samplers.SAMPLERS``), "sequential" (the same
#: batches every epoch) and "unknown" are not
FOUND = ("poisson", "shuffle", "fixed_size", "sequential", "unknown")

DEFAULT_SAMPLER, DEFAULT_NEIGHBOURING = "poisson", "add_remove"


class SamplerMismatchWarning(UserWarning):
    """The data loader that feeds training is not the sampler the accountant assumes."""


@dataclass(frozen=True)
class LoaderSampling:
    """How a data loader forms its batches, as far as duck typing can tell.

    ``sampler``: one of :data:`FOUND`; ``source``: what was seen (class names);
    ``dataset_size``: the examples one epoch uses (all of them, or fewer when the last
    partial batch is dropped); ``batch_size``: the batch of one step (over all replicas
    of a ``DistributedSampler``); None when not readable.  ``upper_only``: each example is
    in at most one batch per epoch, but not in a uniformly random one of them (fixed
    order, or examples left out), so only the shuffle bracket's upper bound holds.
    """

    sampler: str
    source: str
    dataset_size: Optional[int] = None
    batch_size: Optional[int] = None
    upper_only: bool = False
    #: the dataset's size n where ``drop_last`` alone leaves examples out of each epoch
    #: (``dataset_size`` is then n - n mod b): an accountant with ``dataset_size=n``
    #: reads the rate 1/floor(n/b) Opacus records as this loader (floor(n/b) batches per
    #: epoch, shuffle lower bound 0); one with ``dataset_size`` n - n mod b would read
    #: whole epochs, every example in a batch, and its lower bound would not hold
    drop_last_of: Optional[int] = None


def _names(obj: Any) -> set:
    return {cls.__name__ for cls in type(obj).__mro__}


def _size(obj: Any) -> Optional[int]:
    try:
        n = len(obj)
    except Exception:
        return None
    return int(n) if isinstance(n, numbers.Integral) and n > 0 else None


def _single_loader(data_loader: Any) -> Any:
    """Lightning's ``CombinedLoader`` / a one-element list or dict: the one loader inside."""
    inner = getattr(data_loader, "iterables", None)
    if inner is not None and not hasattr(data_loader, "batch_sampler"):
        data_loader = inner
    if isinstance(data_loader, dict) and len(data_loader) == 1:
        data_loader = next(iter(data_loader.values()))
    if isinstance(data_loader, (list, tuple)) and len(data_loader) == 1:
        data_loader = data_loader[0]
    return data_loader


def loader_sampling(data_loader: Any) -> Optional[LoaderSampling]:
    """How ``data_loader`` samples its batches (None when no loader is given).

    By duck typing, without importing torch: Opacus's ``DPDataLoader`` /
    ``UniformWithReplacementSampler`` (a ``sample_rate``) is "poisson"; a
    ``BatchSampler`` over a ``RandomSampler`` (``DataLoader(shuffle=True)``, the Hugging
    Face Trainer's and Lightning's default training loader), a ``SubsetRandomSampler``
    or a ``DistributedSampler(shuffle=True)`` is "shuffle" (one permutation per epoch
    cut into batches); a ``SequentialSampler`` or ``DistributedSampler(shuffle=False)``
    is "sequential"; anything else is "unknown".
    """
    if data_loader is None:
        return None
    data_loader = _single_loader(data_loader)
    dataset = getattr(data_loader, "dataset", None)
    n = _size(dataset)
    batch_sampler = getattr(data_loader, "batch_sampler", None)
    seen = set()
    # accelerate's BatchSamplerShard and similar wrappers keep the original inside
    while (batch_sampler is not None and id(batch_sampler) not in seen
           and getattr(batch_sampler, "sampler", None) is None
           and getattr(batch_sampler, "batch_sampler", None) is not None):
        seen.add(id(batch_sampler))
        batch_sampler = batch_sampler.batch_sampler
    rate = loader_sample_rate(data_loader)
    if rate is not None or (batch_sampler is not None and _names(batch_sampler) & {
            "UniformWithReplacementSampler", "DistributedUniformWithReplacementSampler"}):
        b = None if rate is None or n is None else int(round(rate * n))
        name = type(batch_sampler if batch_sampler is not None else data_loader).__name__
        return LoaderSampling("poisson", f"Opacus {name} (Poisson sampling)", n, b)
    b = getattr(batch_sampler, "batch_size", None)
    if b is None:
        b = getattr(data_loader, "batch_size", None)
    b = int(b) if isinstance(b, numbers.Integral) and not isinstance(b, bool) and b > 0 else None
    sampler = getattr(batch_sampler, "sampler", None) if batch_sampler is not None else None
    if sampler is None:
        sampler = getattr(data_loader, "sampler", None)
    if sampler is None:
        return LoaderSampling("unknown", f"{type(data_loader).__name__} without a sampler", n, b)
    names = _names(sampler)
    where = type(sampler).__name__ + ("" if batch_sampler is None
                                      else f" in a {type(batch_sampler).__name__}")
    drop_last = bool(getattr(batch_sampler, "drop_last", getattr(data_loader, "drop_last", False)))
    if "RandomSampler" in names:
        if getattr(sampler, "replacement", False):
            return LoaderSampling("unknown", where + " (drawing with replacement)", n, b)
        m = getattr(sampler, "num_samples", n)
        if n is not None and isinstance(m, numbers.Integral) and m > n:
            return LoaderSampling("unknown", where + f" (num_samples={m} > {n} examples: "
                                  "some examples twice per epoch)", n, b)
        return _epoch_sampling("shuffle", where + " (shuffled once per epoch)", n, m, b,
                               drop_last)
    if "SubsetRandomSampler" in names:
        m = _size(getattr(sampler, "indices", None))
        return _epoch_sampling("shuffle", where + " (shuffled once per epoch)", m, m, b,
                               drop_last)
    if "DistributedSampler" in names:
        kind = "shuffle" if getattr(sampler, "shuffle", False) else "sequential"
        replicas = getattr(sampler, "num_replicas", 1)
        replicas = int(replicas) if isinstance(replicas, numbers.Integral) and replicas > 0 else 1
        text = where + (" (shuffled once per epoch" if kind == "shuffle"
                        else " (the same order every epoch") + f", {replicas} replicas)"
        m = n
        if n is not None and n % replicas:
            if not getattr(sampler, "drop_last", False):
                return LoaderSampling("unknown", text + ": it pads by repeating examples, "
                                      "some twice per epoch", n, b)
            m = n // replicas * replicas
        return _epoch_sampling(kind, text, n, m, None if b is None else b * replicas,
                               drop_last)
    if "SequentialSampler" in names:
        return _epoch_sampling("sequential", where + " (the same batches every epoch)", n, n,
                               b, drop_last)
    return LoaderSampling("unknown", where, n, b)


def _epoch_sampling(kind: str, source: str, n: Optional[int], used: Optional[int],
                    b: Optional[int], drop_last: bool) -> LoaderSampling:
    """A per-epoch sampler using ``used`` of the ``n`` examples in batches of ``b``
    (the last partial batch dropped with ``drop_last``)."""
    if used is None or b is None:
        return LoaderSampling(kind, source, used, b, upper_only=kind == "sequential")
    partial = used != n
    # examples left out by drop_last alone (an accountant given all n reads that loader)
    dropped_only = not partial and n is not None
    if drop_last and used % b:
        used = used // b * b
        partial = True
        source += f"; drop_last leaves {used} examples per epoch"
    else:
        dropped_only = False
    if used < 1:
        return LoaderSampling("unknown", source + ": no complete batch", n, b)
    if partial and kind == "shuffle":
        source += " (some examples left out of each epoch: upper bound only)"
    return LoaderSampling(kind, source, used, b,
                          upper_only=kind == "sequential" or partial,
                          drop_last_of=n if dropped_only else None)


def accountant_assumptions(accountant: Any) -> dict:
    """The sampler, neighbouring relation and sizes an accountant's bounds assume.

    ``accountant.assumptions`` when it has them (``PrivacyBucketsAccountant``); an
    accountant that predates samplers (or Opacus's own) assumes Poisson sampling with
    add/remove neighbours.
    """
    found = getattr(accountant, "assumptions", None)
    out = {"sampler": DEFAULT_SAMPLER, "neighbouring": DEFAULT_NEIGHBOURING,
           "dataset_size": None, "batch_size": None}
    if isinstance(found, dict):
        out.update({k: found.get(k, out[k]) for k in out})
    else:
        for key in out:
            value = getattr(accountant, key, None)
            if value is not None and isinstance(value, (str, int)):
                out[key] = value
    return out


def _options(accountant: Any) -> Optional[dict]:
    """The accountant's engine options (to build a sibling accountant), None if unknown."""
    try:
        state = accountant.state_dict()
    except Exception:
        return None
    options = state.get("options") if isinstance(state, dict) or hasattr(state, "get") else None
    if options is None:
        return {}
    return {k: v for k, v in dict(options).items()
            if k not in ("sampler", "neighbouring", "dataset_size", "batch_size")}


def sibling_accountant(accountant: Any, sampling: LoaderSampling) -> Tuple[Any, str]:
    """(an accountant for the loader's sampler with ``accountant``'s history, or None; why not).

    The relation is the accountant's, except that shuffling under add_remove (not
    defined: adding an example moves every later batch) is accounted under
    replace_special, whose Poisson pair is add_remove's.  Only a ``PrivacyBucketsAccountant`` whose class accepts ``sampler=`` (issue 13) and
    a loader whose sampler it knows ("shuffle"; "sequential" uses the shuffle
    accountant's upper bound, which assumes no amplification) can be mirrored.
    """
    if sampling.sampler not in ("shuffle", "sequential"):
        return None, f"no accountant sampler matches a {sampling.sampler} loader"
    if sampling.dataset_size is None or sampling.batch_size is None:
        return None, "the loader's dataset size or batch size is unknown"
    options = _options(accountant)
    if options is None or not all(hasattr(accountant, name) for name in
                                  ("get_epsilon_bounds", "epsilon_bounds_of")):
        return None, f"{type(accountant).__name__} cannot be configured for another sampler"
    target = "shuffle" if sampling.sampler == "sequential" else sampling.sampler
    relation = accountant_assumptions(accountant)["neighbouring"]
    if target == "shuffle" and relation == "add_remove":
        # add/remove is not defined for shuffling (it moves every later batch); its
        # analogue is replace_special, which for Poisson has add/remove's very pair
        relation = "replace_special"
    try:
        sibling = type(accountant)(sampler=target, neighbouring=relation,
                                   dataset_size=sampling.dataset_size,
                                   batch_size=sampling.batch_size, **options)
        sibling.history = list(getattr(accountant, "history", []) or [])
    except (TypeError, ValueError) as exc:
        return None, f"this pb_accountant cannot account sampler={target!r}: {exc}"
    return sibling, ""


def sampler_check(accountant: Any, data_loader: Any, delta: Optional[float] = None, *,
                  pending: Optional[Tuple[float, float]] = None,
                  warn: bool = True, stacklevel: int = 2) -> Optional["SamplerCheck"]:
    """Compare the loader that feeds training with the sampler the accountant assumes.

    On a mismatch, warn (:class:`SamplerMismatchWarning`) naming the sampler found,
    the epsilon it implies (the shuffle bracket of ``pb_accountant``'s accountant at the
    current history, or for one epoch of this loader at the ``pending`` (sigma, q)
    while the history is empty) and how to switch.  Returns the :class:`SamplerCheck`
    (None when no loader is given).
    """
    sampling = loader_sampling(data_loader)
    if sampling is None:
        return None
    assumed = accountant_assumptions(accountant)
    if sampling.sampler == assumed["sampler"]:
        # a drop_last loader is the accountant's with the dataset's own size n (it reads
        # the rate 1/floor(n/b) as drop_last); given the n - n mod b examples an epoch
        # uses, its lower bound would assume every example in a batch of every epoch
        n_found = (sampling.drop_last_of if sampling.drop_last_of is not None
                   else sampling.dataset_size)
        sizes = [f"{key}={assumed[key]!r} but the loader has {found!r}"
                 for key, found in (("dataset_size", n_found),
                                    ("batch_size", sampling.batch_size))
                 if assumed[key] is not None and found is not None and assumed[key] != found]
        message = ""
        if sizes:
            message = (f"the accountant assumes sampler={assumed['sampler']!r} with "
                       + " and ".join(sizes) + ": its epsilon is for another loader")
            if sampling.drop_last_of is not None:
                message += (f" (the loader drops the last partial batch: give "
                            f"dataset_size={sampling.drop_last_of}, the dataset's size, "
                            "and the accountant reads the rate 1/len(loader) as drop_last, "
                            "with lower bound 0)")
        elif sampling.upper_only and sampling.drop_last_of is None:
            # examples left out of each epoch in a way no accountant reads (num_samples
            # below the dataset, a DistributedSampler trimming it): the upper bound (one
            # unamplified Gaussian per epoch of the loader's batches) holds, the lower
            # bound (max of batches) assumes every example in a batch of every epoch
            message = (f"the data loader feeding training leaves examples out of each "
                       f"epoch ({sampling.source}): the accountant's {assumed['sampler']} "
                       "lower bound assumes every example in a batch of every epoch and "
                       "is not certified for this loader; only its upper bound holds")
        if message and warn:
            warnings.warn(message, SamplerMismatchWarning, stacklevel=stacklevel)
        return SamplerCheck(sampling, assumed, not message, None, None, message)
    sibling, why = sibling_accountant(accountant, sampling)
    implied, when = None, ""
    if sibling is not None and delta is not None:
        history = list(getattr(accountant, "history", []) or [])
        steps = sum(int(e[2]) for e in history)
        if not steps and pending is not None and all(v is not None for v in pending):
            per_epoch = -(-sampling.dataset_size // sampling.batch_size)
            sibling.history = [(float(pending[0]), float(pending[1]), int(per_epoch))]
            when = f"after one epoch ({per_epoch} steps) at noise_multiplier={pending[0]:g}"
        else:
            when = f"after the {steps} steps taken so far"
        try:
            implied = sibling.get_epsilon_bounds(delta)
        except Exception as exc:          # never stops training: the reason is said instead
            implied, why = None, f"the {sampling.sampler} bracket failed: {exc!r}"
    message = _mismatch_message(sampling, assumed, implied, delta, when, why)
    if warn:
        warnings.warn(message, SamplerMismatchWarning, stacklevel=stacklevel)
    return SamplerCheck(sampling, assumed, False, implied, sibling, message)


@dataclass(frozen=True)
class SamplerCheck:
    """The outcome of :func:`sampler_check`: the loader's ``sampling``, the accountant's
    ``assumed`` sampler and relation, whether they ``match``, the ``implied`` bounds
    for the loader's sampler (None if they could not be computed), the ``sibling``
    accountant that computes them, and the warning ``message`` ("" on a match)."""

    sampling: LoaderSampling
    assumed: dict
    match: bool
    implied: Any
    sibling: Any
    message: str

    @property
    def loader_sampler(self) -> str:
        return self.sampling.sampler


def _mismatch_message(sampling: LoaderSampling, assumed: dict, implied: Any,
                      delta: Optional[float], when: str, why: str) -> str:
    n, b = sampling.dataset_size, sampling.batch_size
    found = ("could not be recognised as any sampler" if sampling.sampler == "unknown"
             else f"samples by {sampling.sampler}")
    head = (f"the data loader feeding training {found} "
            f"({sampling.source}), but the accountant's bounds assume "
            f"sampler={assumed['sampler']!r}, neighbouring={assumed['neighbouring']!r}: "
            f"its epsilon is not certified for this loader.")
    if implied is not None:
        if sampling.upper_only:
            body = (f" Each example is in at most one batch per epoch: epsilon <= "
                    f"{up(implied.upper)} at delta={delta:g} {when} (one unamplified "
                    f"Gaussian per epoch, neighbouring="
                    f"{getattr(implied, 'neighbouring', '?')!r}; no lower bound is certified "
                    "for this loader).")
        else:
            body = (f" For {sampling.sampler} batches epsilon is in "
                    f"[{down(implied.lower)}, {up(implied.upper)}] at delta={delta:g} {when} "
                    f"(certified bracket for sampler={sampling.sampler!r}, "
                    f"neighbouring={getattr(implied, 'neighbouring', '?')!r}).")
    else:
        body = f" The {sampling.sampler} epsilon could not be computed here ({why})." if why else ""
    if sampling.drop_last_of is not None:
        n = sampling.drop_last_of          # the accountant reads drop_last given all n
    size = "..." if n is None else str(n)
    batch = "..." if b is None else str(b)
    if sampling.sampler == "poisson":
        return head + (" To match them, use PrivacyBucketsAccountant(sampler=\"poisson\") "
                       "(the default).")
    fix = (" To match them, sample with Poisson (Opacus make_private(..., "
           "poisson_sampling=True), i.e. a DPDataLoader), or account for the loader with "
           f"PrivacyBucketsAccountant(sampler=\"shuffle\", neighbouring=\"replace_special\", "
           f"dataset_size={size}, batch_size={batch}).")
    return head + body + fix
