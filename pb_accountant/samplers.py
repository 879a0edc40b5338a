"""Samplers and neighbouring relations: the pairs each one composes (pure functions).

The accountant's history stays Opacus's ``(noise_multiplier, sample_rate, num_steps)``;
what a sampler needs besides (``dataset_size`` n, ``batch_size`` b) are constructor
arguments.  :func:`sampled_pairs` turns a history into the pairs whose composition
bounds the run: one list for the certified upper bound and, where the upper pair is not
also a realisable worst case, another for the certified lower bound.  Units: every
per-example contribution is clipped to norm 1 (Opacus's C), the noise has standard
deviation sigma.  docs/method.md, "Samplers and neighbouring relations", gives the
arguments.

=============  ============  ===============================================  =========
sampler        relation      pair per step (or per epoch)                     bracket
=============  ============  ===============================================  =========
poisson        add_remove    (1-q) N(0) + q N(1)  vs  N(0), both directions   tight
poisson        replace_spec  the same (the special element contributes 0)     tight
poisson        replace_one   (1-q) N(0) + q N(1)  vs  (1-q) N(0) + q N(-1)    tight
fixed_size     add_remove    (1-g) N(0) + g N(2)  vs  N(0), g = b/n            tight
fixed_size     replace_one   the same (Zhu et al. 2022; Balle et al. 2018)    tight
fixed_size     replace_spec  upper: replace_one's; lower: (1-g)N(0)+gN(1)     bracket
shuffle        replace_one   upper: N(2) vs N(0) per epoch; lower: max stat   bracket
shuffle        replace_spec  upper: N(1) vs N(0) per epoch; lower: max stat   bracket
shuffle        add_remove    not defined (adding an element shifts the        ValueError
                             permutation's batches)
=============  ============  ===============================================  =========
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ._validation import check_choice, check_count
from .mechanisms import DiscretePair, Gaussian, MechanismPair, SubsampledGaussian
from .sampled_pairs import SymmetricSubsampledGaussian, max_of_batches_pair

__all__ = ["SAMPLERS", "NEIGHBOURING", "Assumptions", "SampledPairs", "check_assumptions",
           "sampled_pairs", "step_pairs", "shuffle_upper_pairs", "shuffle_lower_pairs",
           "epochs", "available_samplers", "SHUFFLE_NOTE"]

SAMPLERS = ("poisson", "fixed_size", "shuffle")
NEIGHBOURING = ("add_remove", "replace_one", "replace_special")

SHUFFLE_NOTE = ("upper bound without amplification by shuffling; lower bound from the "
                "max-of-batches statistic (Chua et al. 2024)")


@dataclass(frozen=True)
class Assumptions:
    """What a bound assumes: the sampler, the neighbouring relation and the sizes."""

    sampler: str = "poisson"
    neighbouring: str = "add_remove"
    dataset_size: Optional[int] = None
    batch_size: Optional[int] = None

    def as_dict(self) -> dict:
        return {"sampler": self.sampler, "neighbouring": self.neighbouring,
                "dataset_size": self.dataset_size, "batch_size": self.batch_size}

    @property
    def batches_per_epoch(self) -> Optional[int]:
        """ceil(n / b): a DataLoader with drop_last=False (PyTorch's default)."""
        if self.dataset_size is None or self.batch_size is None:
            return None
        return -(-self.dataset_size // self.batch_size)

    @property
    def batch_fraction(self) -> Optional[float]:
        """b / n, the probability that one example is in a fixed-size batch."""
        if self.dataset_size is None or self.batch_size is None:
            return None
        return self.batch_size / self.dataset_size


def check_assumptions(sampler="poisson", neighbouring="add_remove", dataset_size=None,
                      batch_size=None) -> Assumptions:
    """Validated :class:`Assumptions` (ValueError naming the parameter and the range)."""
    sampler = check_choice("sampler", sampler, SAMPLERS)
    neighbouring = check_choice("neighbouring", neighbouring, NEIGHBOURING)
    n = None if dataset_size is None else check_count("dataset_size", dataset_size, minimum=1)
    b = None if batch_size is None else check_count("batch_size", batch_size, minimum=1)
    if n is not None and b is not None and b > n:
        raise ValueError(f"batch_size must be an integer >= 1 and <= dataset_size={n}, "
                         f"got {batch_size!r}")
    if (n is None) != (b is None) and sampler != "poisson":
        raise ValueError(f"sampler={sampler!r} needs both dataset_size and batch_size or "
                         f"neither, got dataset_size={dataset_size!r}, batch_size={batch_size!r}")
    if sampler == "shuffle":
        if n is None:
            raise ValueError("sampler='shuffle' needs dataset_size and batch_size (an integer "
                             ">= 1 each, batch_size <= dataset_size): they fix the batches "
                             "per epoch, got dataset_size=None, batch_size=None")
        if neighbouring == "add_remove":
            raise ValueError(
                "sampler='shuffle' with neighbouring='add_remove' is not supported: adding "
                "an element shifts the permutation and changes every later batch; use "
                "neighbouring='replace_special' (zeroing-out, the relation Chua et al. "
                "2024 use) or 'replace_one'")
    return Assumptions(sampler, neighbouring, n, b)


@dataclass(frozen=True)
class SampledPairs:
    """The pairs to compose for one history under one set of assumptions.

    ``upper`` certifies the upper bound; ``lower`` (None: the same pairs) the lower
    bound.  ``lower_relative_error`` is a bound on the relative error of every mass of
    every lower pair (the composed lower bound is corrected for it); ``notes`` say what
    the bound assumes.
    """

    upper: Tuple[Tuple[MechanismPair, int], ...]
    lower: Optional[Tuple[Tuple[MechanismPair, int], ...]] = None
    lower_relative_error: float = 0.0
    lower_count: int = 0
    notes: Tuple[str, ...] = field(default_factory=tuple)


def _no_noise_pair(q: float) -> MechanismPair:
    """sigma = 0: the sampled example is revealed with probability q."""
    return DiscretePair((1.0 - q, q), (1.0, 0.0))


def step_pairs(sigma: float, q: float, sampler: str, neighbouring: str
               ) -> Tuple[Optional[MechanismPair], Optional[MechanismPair]]:
    """(upper pair, lower pair) of one Poisson or fixed-size step; None costs nothing.

    ``q`` is the Poisson rate, or for fixed_size the batch fraction g = b/n.
    """
    if q == 0.0:
        return None, None
    if sampler == "poisson":
        if neighbouring == "replace_one":
            if sigma == 0.0:
                # the two substituted examples differ whenever one is sampled
                pair = DiscretePair((1.0 - q, q, 0.0), (1.0 - q, 0.0, q))
                return pair, pair
            pair = SymmetricSubsampledGaussian(sigma, q)
            return pair, pair
        pair = _no_noise_pair(q) if sigma == 0.0 else SubsampledGaussian(sigma, q)
        return pair, pair
    if sampler == "fixed_size":
        if sigma == 0.0:
            pair = _no_noise_pair(q)
            return pair, pair
        upper = SubsampledGaussian(sigma / 2.0, q)       # (1-g) N(0) + g N(2) vs N(0)
        if neighbouring == "replace_special":
            return upper, SubsampledGaussian(sigma, q)   # realised: others contribute 0
        return upper, upper
    raise ValueError(f"step_pairs is for 'poisson' and 'fixed_size', got sampler={sampler!r}")


def epochs(history: Sequence[Tuple[float, float, int]], steps_per_epoch: int
           ) -> List[Tuple[float, bool, int]]:
    """Run-length list of epochs ``(smallest sigma, complete and constant sigma, count)``.

    Steps with sample_rate 0 never touch the data and are not batches of the
    permutation; a trailing partial epoch counts as one (incomplete) epoch.
    """
    B = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    out: List[Tuple[float, bool, int]] = []

    def add(sig, full, count):
        if count <= 0:
            return
        if out and out[-1][0] == sig and out[-1][1] == full:
            out[-1] = (sig, full, out[-1][2] + count)
        else:
            out.append((sig, full, count))

    cur_min = math.inf          # smallest sigma in the open epoch
    cur_len = 0                 # steps in the open epoch
    cur_const = True
    for sigma, q, count in history:
        if q == 0.0 or count == 0:
            continue
        count = int(count)
        if cur_len:
            take = min(count, B - cur_len)
            cur_const = cur_const and sigma == cur_min
            cur_min = min(cur_min, sigma)
            cur_len += take
            count -= take
            if cur_len == B:
                add(cur_min, cur_const, 1)
                cur_len, cur_min, cur_const = 0, math.inf, True
        if count >= B:
            add(sigma, True, count // B)
            count %= B
        if count:
            cur_min, cur_len, cur_const = sigma, count, True
    if cur_len:
        add(cur_min, False, 1)
    return out


def shuffle_upper_pairs(history, neighbouring: str, steps_per_epoch: int
                        ) -> Tuple[Tuple[MechanismPair, int], ...]:
    """One unamplified Gaussian per epoch, at the epoch's smallest sigma.

    In one epoch the differing example is in exactly one batch; revealing the
    permutation (post-processing the other way: more information) leaves an adaptive
    composition of Gaussians in which one step moves by at most the sensitivity: 1 for
    replace_special (x versus a zero contribution), 2 for replace_one.
    """
    sens = 2.0 if neighbouring == "replace_one" else 1.0
    out = []
    for sigma, _, count in epochs(history, steps_per_epoch):
        if sigma == 0.0:
            pair: MechanismPair = DiscretePair((1.0, 0.0), (0.0, 1.0))
        else:
            pair = Gaussian(sigma, sens)
        out.append((pair, count))
    return tuple(out)


def shuffle_lower_pairs(history, neighbouring: str, steps_per_epoch: int
                        ) -> Tuple[Tuple[MechanismPair, int], ...]:
    """Chua et al.'s max-of-batches pair for every complete constant-sigma epoch.

    Realised by: every other example contributes 0 (replace_special) or -1
    (replace_one, the baseline subtracted), x contributes +1; the maximum over the
    epoch's B batch sums is a post-processing of the run.  Partial epochs and epochs
    whose sigma varies are left out (dropping outputs is post-processing too).
    """
    sens = 2.0 if neighbouring == "replace_one" else 1.0
    out = []
    for sigma, full, count in epochs(history, steps_per_epoch):
        if not full or sigma == 0.0:
            continue
        out.append((max_of_batches_pair(steps_per_epoch, sigma, sens), count))
    return tuple(out)


def sampled_pairs(history, sampler: str = "poisson", neighbouring: str = "add_remove",
                  dataset_size: Optional[int] = None, batch_size: Optional[int] = None
                  ) -> SampledPairs:
    """The pairs to compose for ``history`` (validated entries) under the assumptions."""
    a = check_assumptions(sampler, neighbouring, dataset_size, batch_size)
    notes: Tuple[str, ...] = ()
    if a.sampler == "shuffle":
        B = a.batches_per_epoch
        upper = shuffle_upper_pairs(history, a.neighbouring, B)
        lower = shuffle_lower_pairs(history, a.neighbouring, B)
        rel = max((p.relative_error for p, _ in lower), default=0.0)
        count = sum(c for _, c in lower)
        return SampledPairs(upper, lower, rel, count, (SHUFFLE_NOTE,))
    fraction = a.batch_fraction if a.sampler == "fixed_size" else None
    if a.sampler == "fixed_size":
        if fraction is None:
            notes = ("fixed_size: the batch fraction b/n is taken from the history's "
                     "sample_rate (give dataset_size and batch_size to use b/n)",)
    upper, lower = [], []
    tight = True
    for sigma, q, count in history:
        if not count or q == 0.0:
            continue
        g = fraction if fraction is not None else q
        up, lo = step_pairs(sigma, g, a.sampler, a.neighbouring)
        if up is None:
            continue
        upper.append((up, count))
        lower.append((lo, count))
        tight = tight and lo is up
    if a.sampler == "fixed_size" and a.neighbouring == "replace_special":
        notes += ("fixed_size under replace_special: upper bound from the replace_one pair, "
                  "lower bound from the zero-contribution pair",)
    return SampledPairs(tuple(upper), None if tight else tuple(lower), 0.0, 0, notes)


def available_samplers(assumptions: Assumptions) -> List[Assumptions]:
    """The assumptions under every sampler that the known sizes allow (the accountant's
    relation; shuffle, undefined under add_remove, under replace_special, which for
    Poisson gives the same pair as add_remove)."""
    out = []
    for s in SAMPLERS:
        rel = assumptions.neighbouring
        if s == "shuffle":
            if assumptions.dataset_size is None:
                continue
            if rel == "add_remove":
                rel = "replace_special"
        out.append(Assumptions(s, rel, assumptions.dataset_size, assumptions.batch_size))
    return out
