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
fixed_size     replace_one   upper: its symmetrisation (losses > 0, mirror    bracket
                             images, atom at 0; Dong et al. 2022); lower:
                             the same pair alone (Balle et al. 2018)
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
from fractions import Fraction
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ._validation import MIN_NOISE, check_choice, check_count
from .composition import Composer
from .engine import adaptive_epsilon_bounds, compose_history
from .mechanisms import DiscretePair, Gaussian, MechanismPair, SubsampledGaussian
from .sampled_pairs import (MaxOfBatches, SymmetricSubsampledGaussian,
                            SymmetrisedSubsampledGaussian, max_of_batches_pair)

__all__ = ["SAMPLERS", "NEIGHBOURING", "Assumptions", "SampledPairs", "check_assumptions",
           "sampled_pairs", "step_pairs", "shuffle_layout", "ShuffleLayout",
           "shuffle_upper_pairs", "shuffle_lower_pairs", "epochs", "available_samplers",
           "SHUFFLE_NOTE", "SHUFFLE_PASSES_NOTE", "ACCUMULATED_POISSON_NOTE",
           "ACCUMULATED_FIXED_SIZE_NOTE", "ACCUMULATED_SHUFFLE_NOTE",
           "AccumulatedBatchesWarning", "MAX_DATASET_SIZE", "GaussianNoise",
           "IntegerNoise", "gaussian_noise", "lower_correction", "bracket_lower_epsilon",
           "bracket_lower_delta", "delta_bounds", "FIXED_SIZE_REPLACE_NOTE",
           "FIXED_SIZE_MIRRORED_NOTE", "own_mirror"]

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


#: the largest dataset and batch sizes: every size and ratio of sizes the samplers form
#: is then exact or correctly rounded in floating point (1 / ceil(n/b) overflowed beyond
#: about 1.8e308)
MAX_DATASET_SIZE = 2 ** 53


def check_assumptions(sampler="poisson", neighbouring="add_remove", dataset_size=None,
                      batch_size=None) -> Assumptions:
    """Validated :class:`Assumptions` (ValueError naming the parameter and the range)."""
    sampler = check_choice("sampler", sampler, SAMPLERS)
    neighbouring = check_choice("neighbouring", neighbouring, NEIGHBOURING)
    n = None if dataset_size is None else check_count("dataset_size", dataset_size, minimum=1,
                                                      maximum=MAX_DATASET_SIZE)
    b = None if batch_size is None else check_count("batch_size", batch_size, minimum=1,
                                                    maximum=MAX_DATASET_SIZE)
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
                "neighbouring='replace_special' (x replaced by a zero contribution: Chua "
                "et al. 2024's one-batch shift by 1) or 'replace_one'")
    return Assumptions(sampler, neighbouring, n, b)


@dataclass(frozen=True)
class SampledPairs:
    """The pairs to compose for one history under one set of assumptions.

    ``upper`` certifies the upper bound; ``lower`` (None: the same pairs) the lower
    bound.  ``lower_relative_error`` bounds the relative error of every mass of every
    lower pair, ``lower_count`` how many lower pairs are composed (the composed lower
    bound is corrected for both); ``notes`` say what the bound assumes.
    """

    upper: Tuple[Tuple[MechanismPair, int], ...]
    lower: Optional[Tuple[Tuple[MechanismPair, int], ...]] = None
    lower_relative_error: float = 0.0
    lower_count: int = 0
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: every pair is its own mirror (B||A has the A||B curve): one lower direction suffices
    symmetric: bool = False


# -- base noise: the pairs are generic over it -------------------------------------------

@dataclass(frozen=True)
class GaussianNoise:
    """N(0, sigma^2) added to the sum of contributions clipped to norm 1 (DP-SGD).

    Every method returns the pair in closed form; sigma = 0 is the point mass
    (:class:`IntegerNoise` with one atom), whose pairs are histograms.
    """

    sigma: float

    def _point(self) -> "IntegerNoise":
        return IntegerNoise((1.0,), 0)

    def resolves(self, shift: float) -> bool:
        """Whether the closed forms handle sigma / shift (>= MIN_NOISE, or sigma = 0)."""
        return self.sigma == 0.0 or self.sigma / shift >= MIN_NOISE

    def subsampled(self, q: float, shift: float) -> MechanismPair:
        """A = (1-q) N(0) + q N(shift), B = N(0)."""
        if self.sigma == 0.0:
            return self._point().subsampled(q, shift)
        return SubsampledGaussian(self.sigma / shift, q)     # scaled by 1/shift

    def symmetric(self, q: float) -> MechanismPair:
        """A = (1-q) N(0) + q N(1), B = (1-q) N(0) + q N(-1)."""
        if self.sigma == 0.0:
            return self._point().symmetric(q)
        return SymmetricSubsampledGaussian(self.sigma, q)

    def symmetrised(self, q: float, shift: float) -> MechanismPair:
        """The symmetrisation of ``subsampled(q, shift)``: its losses > 0, their mirror
        images and an atom at 0 (``SymmetrisedSubsampledGaussian``; at q = 1 the
        Gaussian pair, its own mirror)."""
        if self.sigma == 0.0:
            return self._point().symmetrised(q, shift)
        if q == 1.0:
            return SubsampledGaussian(self.sigma / shift, 1.0)
        return SymmetrisedSubsampledGaussian(self.sigma / shift, q)

    def shifted(self, shift: float) -> MechanismPair:
        """A = N(shift), B = N(0)."""
        if self.sigma == 0.0:
            return self._point().shifted(shift)
        return Gaussian(self.sigma, shift)

    def max_of_batches(self, batches: int, shift: float) -> MechanismPair:
        """The binned max over B batch sums, one of them shifted (Chua et al. 2024)."""
        if self.sigma == 0.0:
            return self._point().max_of_batches(batches, shift)
        return max_of_batches_pair(batches, self.sigma, shift)


@dataclass(frozen=True)
class IntegerNoise:
    """Integer noise with probabilities ``pmf`` on offset, offset+1, ... (exact pairs).

    The discrete base of the brute-force tests (tests/test_samplers_bruteforce.py): the
    same pairs as :class:`GaussianNoise`, computed as histograms; shifts are integers.
    """

    pmf: Tuple[float, ...]
    offset: int = 0

    def resolves(self, shift) -> bool:
        return True

    def _mixture(self, comps):
        out = {}
        for w, s in comps:
            for k, p in enumerate(self.pmf):
                key = k + self.offset + int(s)
                out[key] = out.get(key, Fraction(0)) + Fraction(w) * Fraction(p)
        return out

    def _pair(self, a, b) -> MechanismPair:
        keys = sorted(set(a) | set(b))
        pa = tuple(float(a.get(k, 0)) for k in keys)
        pb = tuple(float(b.get(k, 0)) for k in keys)
        return DiscretePair(pa, pb)

    def subsampled(self, q, shift):
        return self._pair(self._mixture([(1 - Fraction(q), 0), (Fraction(q), shift)]),
                          self._mixture([(1, 0)]))

    def symmetric(self, q):
        return self._pair(self._mixture([(1 - Fraction(q), 0), (Fraction(q), 1)]),
                          self._mixture([(1 - Fraction(q), 0), (Fraction(q), -1)]))

    def shifted(self, shift):
        return self._pair(self._mixture([(1, shift)]), self._mixture([(1, 0)]))

    def symmetrised(self, q, shift) -> Optional[MechanismPair]:
        """The symmetrisation of ``subsampled(q, shift)`` (P vs Q), exactly in rationals,
        where delta_{P||Q} >= delta_{Q||P} at every epsilon >= 0 (checked exactly at
        every breakpoint of the two piecewise-linear curves in e^eps and beyond the
        last, where both are constant): P||Q's atoms of loss > 0, their mirror images
        (A- and B-masses exchanged) and an atom at loss 0 holding the rest; None where
        the check fails (the caller then composes the pair with its mirror)."""
        a = self._mixture([(1 - Fraction(q), 0), (Fraction(q), shift)])
        b = self._mixture([(1, 0)])
        keys = sorted(set(a) | set(b))
        pa = [a.get(k, Fraction(0)) for k in keys]
        pb = [b.get(k, Fraction(0)) for k in keys]

        def hockey(x, y, u):
            return sum((xi - u * yi for xi, yi in zip(x, y) if xi > u * yi), Fraction(0))

        breaks = {Fraction(1)}
        breaks |= {x / y for x, y in zip(pa, pb) if y > 0 and x > y}
        breaks |= {y / x for x, y in zip(pa, pb) if x > 0 and y > x}
        if any(hockey(pa, pb, u) < hockey(pb, pa, u) for u in breaks):
            return None
        if (sum((x for x, y in zip(pa, pb) if y == 0), Fraction(0))
                < sum((y for x, y in zip(pa, pb) if x == 0), Fraction(0))):
            return None
        up = [(x, y) for x, y in zip(pa, pb) if x > y]
        rest = 1 - sum(x + y for x, y in up)
        if rest < 0:
            return None
        atoms = up + [(y, x) for x, y in up] + ([(rest, rest)] if rest > 0 else [])
        return DiscretePair(tuple(float(x) for x, _ in atoms),
                            tuple(float(y) for _, y in atoms))

    def max_of_batches(self, batches, shift):
        """Law of the max over B batch sums (exact rationals, then rounded: relative
        error <= 2^-53 per mass)."""
        base = self._mixture([(1, 0)])
        keys = sorted(set(base) | {k + int(shift) for k in base})
        cdf0, cdf1, acc0, acc1 = {}, {}, Fraction(0), Fraction(0)
        for k in keys:
            acc0 += base.get(k, 0)
            acc1 += base.get(k - int(shift), 0)
            cdf0[k], cdf1[k] = acc0, acc1
        a, b, prev_a, prev_b = {}, {}, Fraction(0), Fraction(0)
        for k in keys:
            fa = cdf0[k] ** (batches - 1) * cdf1[k]
            fb = cdf0[k] ** batches
            a[k], b[k] = fa - prev_a, fb - prev_b
            prev_a, prev_b = fa, fb
        pair = self._pair(a, b)
        return MaxOfBatches(pair.probabilities_a, pair.probabilities_b,
                            relative_error=2.0 ** -52)


def gaussian_noise(sigma: float) -> GaussianNoise:
    """The production base: Gaussian noise with multiplier ``sigma``."""
    return GaussianNoise(sigma)


NoiseOf = Callable[[float], "GaussianNoise | IntegerNoise"]


def step_pairs(noise, q: float, sampler: str, neighbouring: str
               ) -> Tuple[Optional[MechanismPair], Optional[MechanismPair]]:
    """(upper pair, lower pair) of one Poisson or fixed-size step; None costs nothing.

    ``q`` is the Poisson rate, or for fixed_size the batch fraction g = b/n.

    * Poisson, add_remove / replace_special: (1-q) N(0) + q N(1) vs N(0) (paper §5.4;
      the special element contributes 0, so removing x and replacing it by the special
      element give the same outputs).
    * Poisson, replace_one: (1-q) N(0) + q N(1) vs (1-q) N(0) + q N(-1), the pair of
      dp_accounting's REPLACE_ONE (Zhu, Dong, Wang 2022): the rest of the batch is
      independent of x and the same under both datasets.
    * fixed_size (any relation): (1-g) N(0) + g N(2) vs N(0), g = b/n (Zhu, Dong, Wang
      2022, sampling without replacement; Balle, Barthe, Gaboardi 2018): when x is
      drawn it takes the place of another example y, so the sum moves by x - y, up to
      2; realised by every other example contributing -1 and x +1 (replace_one: x' =
      -1; add_remove: x removed), hence tight for one step.  Under replace_special the
      lower pair is (1-g) N(0) + g N(1) vs N(0) (others contribute 0).  Under
      replace_one and replace_special that pair bounds a step at e^eps >= 1 only, and
      the upper pair is its symmetrisation (``noise.symmetrised``: the pair's losses
      > 0, their mirror images and an atom at 0; tight, FIXED_SIZE_REPLACE_NOTE);
      where that is not available (integer noise whose two directions are not
      ordered) the pair itself is returned and ``sampled_pairs`` composes it with its
      mirror.
    """
    if q == 0.0:
        return None, None
    if sampler == "poisson":
        pair = noise.symmetric(q) if neighbouring == "replace_one" else noise.subsampled(q, 1)
        return pair, pair
    if sampler == "fixed_size":
        if not noise.resolves(2):
            # sigma / 2 below the closed forms' range: the noiseless pair is an upper
            # bound (noise is post-processing), the shift-1 pair a realised lower one
            point = IntegerNoise((1.0,))
            upper = point.subsampled(q, 2)
            if neighbouring != "add_remove":
                upper = point.symmetrised(q, 2) or upper
            return upper, noise.subsampled(q, 1)
        pair = noise.subsampled(q, 2)
        if neighbouring == "add_remove":
            return pair, pair
        sym = noise.symmetrised(q, 2)
        upper = pair if sym is None or sym == pair else sym
        return upper, noise.subsampled(q, 1) if neighbouring == "replace_special" else pair
    raise ValueError(f"step_pairs is for 'poisson' and 'fixed_size', got sampler={sampler!r}")


def epochs(history: Sequence[Tuple[float, float, int]], steps_per_epoch: int
           ) -> List[Tuple[float, bool, int]]:
    """Run-length list of epochs ``(smallest sigma, complete with one sigma, count)``.

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


def shuffle_upper_pairs(history, neighbouring: str, steps_per_epoch: int,
                        noise: NoiseOf = gaussian_noise) -> Tuple[Tuple[MechanismPair, int], ...]:
    """One unamplified Gaussian per epoch, at the epoch's smallest sigma.

    In one epoch the differing example is in exactly one batch; revealing the
    permutation (more information: the divergence can only grow) leaves an adaptive
    composition in which one step's sum moves by at most the sensitivity, 1 under
    replace_special (x versus a zero contribution), 2 under replace_one; a partial
    epoch counts as one.
    """
    sens = 2 if neighbouring == "replace_one" else 1
    return tuple((noise(sigma).shifted(sens), count)
                 for sigma, _, count in epochs(history, steps_per_epoch))


def shuffle_lower_pairs(history, neighbouring: str, steps_per_epoch: int,
                        noise: NoiseOf = gaussian_noise) -> Tuple[Tuple[MechanismPair, int], ...]:
    """Chua et al.'s (ICML 2024) max-of-batches pair for every complete one-sigma epoch.

    Realised by: every other example contributes 0 (replace_special) or -1
    (replace_one, the known baseline subtracted), x contributes +1 (x' = -1); the
    maximum over the epoch's B batch sums is a post-processing of the run, whatever
    batch x falls in (the max is symmetric in the batches).  Partial epochs and
    epochs whose sigma varies are left out (dropping outputs is post-processing too).
    """
    sens = 2 if neighbouring == "replace_one" else 1
    out = []
    for sigma, full, count in epochs(history, steps_per_epoch):
        if not full or sigma == 0.0:
            continue
        try:
            out.append((noise(sigma).max_of_batches(steps_per_epoch, sens), count))
        except FloatingPointError:
            continue          # masses not representable: leave these epochs out
    return tuple(out)


#: a history's sample_rate within this relative distance of a rate the sizes give matches
RATE_MATCH = 1e-6


def rate_mismatch_notes(history, a: Assumptions, used: Optional[str] = None
                        ) -> Tuple[str, ...]:
    """A note where the sizes are known and a step's sample_rate is none of the rates
    they give (b/n; 1/ceil(n/b) and 1/floor(n/b), Opacus's rate for a loader without
    and with drop_last): the bound then rests on a rate the run may not have used
    (``used``: what the bound uses instead, where the sampler's default text is not it)."""
    n, b = a.dataset_size, a.batch_size
    if n is None or b is None:
        return ()
    rates = (b / n, 1.0 / -(-n // b), 1.0 / (n // b))
    odd = sorted({q for _, q, count in history if count and q > 0.0
                  and not any(abs(q - r) <= RATE_MATCH * r for r in rates)})
    if not odd:
        return ()
    used = used or {"poisson": "the history's sample_rate",
                    "fixed_size": f"b/n = {b / n:.6g}",
                    "shuffle": f"{-(-n // b)} batches per epoch"}[a.sampler]
    shown = ", ".join(f"{q:.6g}" for q in odd[:3]) + (", ..." if len(odd) > 3 else "")
    return (f"sample_rate {shown} in the history differs from batch_size/dataset_size = "
            f"{b}/{n} = {b / n:.6g} (and from 1/ceil(n/b), 1/floor(n/b)); the {a.sampler} "
            f"bound uses {used}: check that the sizes and the rates describe the same run",)


SHUFFLE_DROP_LAST_NOTE = (
    "upper bound without amplification by shuffling; the history's sample_rate is "
    "1/floor(n/b), a loader with drop_last=True: floor(n/b) batches per epoch and n mod b "
    "examples left out of each, so the upper bound counts epochs of floor(n/b) steps and "
    "the lower bound is 0 (the max-of-batches statistic assumes every example in a batch)")
SHUFFLE_BOUNDED_NOTE = (
    "upper bound without amplification by shuffling; the history's sample rates read as "
    "both loaders (1/floor(n/b): drop_last=True, other rates: drop_last=False), so the "
    "upper bound charges {charged} unamplified Gaussians at the smallest sigma (at most "
    "ceil(T / floor(n/b)) epochs in T steps) and the lower bound is 0")
#: what a shuffled bound cannot read from a rate that names no loader
SHUFFLE_UNREAD = ("; a rate k/len(loader) (k batches accumulated per recorded step) is "
                  "read as k batches, any other as one batch per step (steps of several "
                  "batches at another rate are not modelled, and the shuffle bound does "
                  "not hold for such a run)")


class AccumulatedBatchesWarning(UserWarning):
    """A step over several accumulated Poisson batches was recorded at their summed rate
    (Opacus's convention), which does not model an example drawn into more than one."""


#: why a step over k > 1 accumulated Poisson batches, recorded at rate k q, is not
#: certified: each batch is its own Poisson draw, so an example is in Binomial(k, q) of
#: them and moves the noised sum by up to k, where the recorded pair moves it by at most
#: 1 with probability k q (sigma 1, q 0.5, k 2, one step: recorded 4.38 at delta 1e-5,
#: the step's own epsilon at least 7.99)
ACCUMULATED_POISSON_NOTE = (
    "a step over {k} accumulated Poisson batches is recorded at rate {k} x sample_rate "
    "(Opacus's convention), but each batch is its own Poisson draw: an example may be in "
    "several of them and move the noised sum by up to {k}, which that rate does not "
    "model, so the bounds are not certified for this training (they are for one batch of "
    "that rate per step). Form large batches with Opacus's BatchMemoryManager (one "
    "Poisson draw per step, split into physical batches) instead of accumulating "
    "separately drawn batches")
#: the same for fixed-size batches: each of the k batches is its own draw of b of the n
#: examples, so an example is in Binomial(k, b/n) of them, while the fixed-size bound
#: charges one batch per step (b/n from the sizes, or the recorded rate k b/n as g):
#: n 4, b 2, sigma 1, k 2, one step under add_remove certified delta 0.2105 at eps 1
#: where the run with every other example at -1 has 0.4476
ACCUMULATED_FIXED_SIZE_NOTE = (
    "a step over {k} accumulated fixed-size batches is recorded at rate {k} x sample_rate "
    "(Opacus's convention), but each batch is its own draw of batch_size examples: an "
    "example may be in several of them and move the noised sum by up to {k} times the "
    "sensitivity, which the fixed_size bound (one batch per step) does not model, so the "
    "bounds are not certified for this training. Draw one batch of {k} x batch_size per "
    "step (split into physical batches) instead")
#: a shuffled run's accumulated step whose summed rate the shuffle bound cannot read as
#: k batches (``_accumulated``): it is then read as one batch per step (n 10, b 3,
#: sample_rate b/n = 0.3 given by hand, k 2, 8 steps, replace_one, sigma 1: upper
#: epsilon 15.46 at delta 1e-5, the run's delta there about 3.7e-3)
ACCUMULATED_SHUFFLE_NOTE = (
    "a step over {k} accumulated shuffled batches is recorded at rate {k} x {q!r} = "
    "{rate!r}, which is not {k}/len(loader) for dataset_size {n} and batch_size {b} "
    "(len(loader) {lengths}): the shuffle bound reads such a rate as one batch per step, "
    "so the bounds are not certified for this training. Give the sample rate Opacus "
    "records, 1/len(loader) (not batch_size/dataset_size)")


def accumulated_step_note(a: Assumptions, sample_rate: float, batches: int,
                          rate: float) -> Optional[str]:
    """Why a step over ``batches`` accumulated batches of ``sample_rate``, recorded at
    ``rate`` (their sum), is not certified under ``a``; None where it is (one batch, or
    a shuffled run whose rate reads as at least that many batches)."""
    if batches <= 1:
        return None
    if a.sampler == "poisson":
        return ACCUMULATED_POISSON_NOTE.format(k=batches)
    if a.sampler == "fixed_size":
        return ACCUMULATED_FIXED_SIZE_NOTE.format(k=batches)
    # (a rate read as k' >= k batches is counted soundly: k' > k only where the rate is
    # 1, every step a whole epoch of either loader)
    lengths = _epoch_lengths(a)
    read, length = _accumulated(rate, lengths)
    if lengths == (2, 1) and (read, length) == (1, 1):
        read = 2         # (the rate 1 of 2/2: _shuffle_pairs reads it as two where needed)
    if read >= batches:
        return None
    return ACCUMULATED_SHUFFLE_NOTE.format(
        k=batches, q=sample_rate, rate=rate, n=a.dataset_size, b=a.batch_size,
        lengths=" or ".join(str(L) for L in lengths))


#: what every shuffled bound assumes of the recorded steps, which it cannot see
SHUFFLE_PASSES_NOTE = (
    "shuffle: the recorded steps are taken as consecutive batches of whole passes over "
    "the data from the run's start, the last pass possibly partial (a pass cut short and "
    "restarted, as by a new iterator mid-epoch, is not modelled)")


def _shuffle_assumed_note(per_epoch: int) -> str:
    return (f"shuffle: ceil(n/b) = {per_epoch} batches per epoch are assumed (a loader "
            "with drop_last=False, PyTorch's default): the history's sample rates do not "
            "say which loader ran (Opacus records 1/len(loader), 1/floor(n/b) for one "
            "with drop_last=True, which is counted as such); a rate b/n is also what a "
            "loader of batches b/k records with k batches accumulated per step, which is "
            "not modelled")


def _epoch_lengths(a: Assumptions) -> Tuple[int, ...]:
    """The batches per epoch of a shuffled loader: ceil(n/b) (drop_last=False), then
    floor(n/b) (drop_last=True) where it differs."""
    full, short = -(-a.dataset_size // a.batch_size), a.dataset_size // a.batch_size
    return (full,) if full == short else (full, short)


def _shuffle_reading(q: float, lengths) -> Optional[int]:
    """The epoch length L whose rate 1/L (Opacus records 1/len(loader)) a recorded rate
    q is, the closer of the ``lengths`` where both are within RATE_MATCH (near 10^6
    batches per epoch both are); None where neither is."""
    best = None
    for L in lengths:
        gap = abs(q - 1.0 / L)
        if gap <= RATE_MATCH * q and (best is None or gap < best[0]):
            best = (gap, L)
    return None if best is None else best[1]


@dataclass(frozen=True)
class ShuffleLayout:
    """How a shuffled run's recorded steps fall into epochs (``shuffle_layout``)."""

    kind: str               # "full", "assumed", "drop_last" or "bounded"
    steps_per_epoch: int    # the epochs counted
    charged: int = 0        # "bounded": unamplified Gaussians the upper bound charges


def shuffle_layout(history, a: Assumptions) -> ShuffleLayout:
    """How the recorded steps of a shuffled run fall into epochs, read from their rates
    (Opacus records 1/len(loader) per step).

    "full": every rate is 1/ceil(n/b) (drop_last=False), epochs of ceil(n/b) steps.
    "drop_last": every rate is 1/floor(n/b), n/b not whole: epochs of floor(n/b) steps,
    n mod b examples left out of each (lower bound 0).  "assumed": rates that name no
    loader (b/n, given by hand) among 1/ceil(n/b) ones: ceil(n/b) is assumed, and a note
    says so.  "bounded": 1/floor(n/b) among other rates: every epoch has at least
    floor(n/b) steps, so T steps touch at most ceil(T / floor(n/b)) epochs, each at most
    one unamplified Gaussian at the smallest sigma (lower bound 0).  Counting epochs of
    ceil(n/b) steps in a run of floor(n/b)-step epochs would charge too few of them."""
    full, short = -(-a.dataset_size // a.batch_size), a.dataset_size // a.batch_size
    lengths = _epoch_lengths(a)
    readings = [(_shuffle_reading(q, lengths), int(c)) for _, q, c in history
                if c and q > 0.0]
    if all(r == full for r, _ in readings):
        return ShuffleLayout("full", full)
    if all(r == short for r, _ in readings):
        return ShuffleLayout("drop_last", short)
    if all(r != short for r, _ in readings):
        return ShuffleLayout("assumed", full)
    steps = sum(c for _, c in readings)
    return ShuffleLayout("bounded", short, -(-steps // short))


#: said with every fixed-size replace_one (or replace_special) bound.  The pair
#: P = (1-g) N(0) + g N(2) vs Q = N(0) bounds one step's hockey-stick divergence at
#: e^eps >= 1 in either direction, but not at e^eps < 1: a step may be the symmetric
#: pair (others contributing 0, x = +1 against x' = -1), whose two directions are equal,
#: and under composition the pair alone fell below such a run (n 10, b 9, sigma 1, two
#: steps: delta at eps 0 certified 0.7709, the run's 0.7763).  Each step is
#: C(f)-DP, C(f) = min(f, f^-1)** for f = T(P, Q) (Dong, Roth, Su 2022, subsampling
#: theorem; Zhu, Dong, Wang 2022): its hockey-stick curve is max(delta_{P||Q},
#: delta_{Q||P}), which is delta_{P||Q} at eps >= 0 (N(2) vs N(0) is symmetric), so the
#: symmetrised pair (P||Q's losses > 0, their mirror images, an atom at 0) is tight and
#: its composition bounds every run (docs/method.md, "Samplers and neighbouring
#: relations")
FIXED_SIZE_REPLACE_NOTE = (
    "fixed_size under replace_one (and replace_special, whose upper bound is replace_one's): "
    "the upper bound composes each step's symmetrised pair, the losses > 0 of "
    "(1-g) N(0) + g N(2) vs N(0) with their mirror images (tight for one step, C(f) = "
    "min(f, f^-1)**: Dong, Roth, Su 2022; Zhu, Dong, Wang 2022); under replace_one the "
    "lower bound is the pair's own composition, realised by every other example "
    "contributing -1")
#: said where some step could not be symmetrised (integer noise whose two directions are
#: not ordered at eps >= 0): that step's pair is composed with its mirror, (A x B, B x A),
#: symmetric and an upper bound on both directions at every eps, looser
FIXED_SIZE_MIRRORED_NOTE = (
    "fixed_size under replace_one: a step whose pair could not be symmetrised is composed "
    "together with its mirror (sound, looser than the symmetrised pair)")


def own_mirror(pair: MechanismPair) -> bool:
    """Whether ``pair`` is its own mirror (B||A has the A||B curve), by construction:
    the symmetric and symmetrised Gaussian pairs, the Gaussian pair (rate 1), and a
    histogram whose (A-mass, B-mass) atoms are the same multiset exchanged."""
    if isinstance(pair, (SymmetricSubsampledGaussian, SymmetrisedSubsampledGaussian)):
        return True
    if isinstance(pair, SubsampledGaussian):
        return pair.sample_rate == 1.0
    if type(pair) is DiscretePair:
        atoms = list(zip(pair.probabilities_a, pair.probabilities_b))
        return sorted(atoms) == sorted((b, a) for a, b in atoms)
    return False


def sampled_pairs(history, sampler: str = "poisson", neighbouring: str = "add_remove",
                  dataset_size: Optional[int] = None, batch_size: Optional[int] = None,
                  noise: NoiseOf = gaussian_noise) -> SampledPairs:
    """The pairs to compose for ``history`` (validated entries) under the assumptions.

    ``noise(sigma)`` gives the base (:class:`GaussianNoise` in production; the tests
    pass an :class:`IntegerNoise`).
    """
    a = check_assumptions(sampler, neighbouring, dataset_size, batch_size)
    if a.sampler == "shuffle":
        return _shuffle_pairs(history, a, noise)
    notes: Tuple[str, ...] = rate_mismatch_notes(history, a)
    fraction = a.batch_fraction if a.sampler == "fixed_size" else None
    if a.sampler == "fixed_size" and fraction is None:
        notes += ("fixed_size: the batch fraction b/n is taken from the history's "
                 "sample_rate (give dataset_size and batch_size to use b/n)",)
    upper, lower = [], []
    tight = True
    # fixed-size batches under replace_one (and replace_special, whose upper pairs are
    # replace_one's): every step's upper pair is the symmetrised one, its own mirror;
    # where step_pairs could not symmetrise, the pair is composed in both orientations
    # (FIXED_SIZE_REPLACE_NOTE)
    both_orientations = (a.sampler == "fixed_size"
                         and a.neighbouring in ("replace_one", "replace_special"))
    mirrored = False
    for sigma, q, count in history:
        if not count or q == 0.0:
            continue
        base = noise(sigma)
        up, lo = step_pairs(base, fraction if fraction is not None else q,
                            a.sampler, a.neighbouring)
        upper.append((up, count))
        mirror = both_orientations and not own_mirror(up)
        if mirror:
            upper.append((up.mirrored(), count))
        lower.append((lo, count))
        tight = tight and lo is up and not mirror
        mirrored = mirrored or mirror
    if both_orientations and upper:
        notes += (FIXED_SIZE_REPLACE_NOTE,)
    if mirrored:
        notes += (FIXED_SIZE_MIRRORED_NOTE,)
    if a.sampler == "fixed_size" and a.neighbouring == "replace_special":
        notes += ("fixed_size under replace_special: upper bound from the replace_one "
                  "pair, lower bound from the zero-contribution pair",)
    symmetric = bool(upper) and all(isinstance(p, SymmetricSubsampledGaussian) for p, _ in upper)
    return SampledPairs(tuple(upper), None if tight else tuple(lower), 0.0, 0, notes,
                        symmetric)


def _accumulated(q: float, lengths) -> Tuple[int, Optional[int]]:
    """(k, L): k >= 2 where a rate q that names no loader is k/L for a loader length L
    (Opacus records k/len(loader) for a step over k accumulated batches), within
    RATE_MATCH, the closer of the lengths where both are (near 10^6 batches per epoch
    k/ceil(n/b) and k/floor(n/b) both lie within RATE_MATCH: the first had been taken,
    reading a drop_last loader's steps as aligned with epochs of ceil(n/b) batches);
    else (1, the length q reads as, None where it names none)."""
    L = _shuffle_reading(q, lengths)
    if L is not None:
        return 1, L
    best = None
    for L in lengths:
        k = round(q * L)
        gap = abs(q - k / L)
        if k >= 2 and gap <= RATE_MATCH * q and (best is None or gap < best[0]):
            best = (gap, k, L)
    return (1, None) if best is None else best[1:]


#: said where some recorded step accumulated k >= 2 batches (rate k/len(loader))
SHUFFLE_ACCUMULATED_NOTE = (
    "upper bound without amplification by shuffling; some recorded steps are k/len(loader), "
    "k >= 2 batches accumulated per step: the {batches} batches touch at most {charged} "
    "epochs, {straddle}so the upper bound charges {charged} unamplified Gaussians at the "
    "smallest sigma with {factor} the sensitivity; the lower bound is 0")


def _accumulated_pairs(history, a: Assumptions, noise: NoiseOf, notes, steps
                       ) -> SampledPairs:
    """A shuffled run with steps of k accumulated batches (``steps``: (k, L, count) per
    sampled entry, ``_accumulated``).  The T steps' batches, sum(k count), touch at most
    E = ceil(sum / floor(n/b)) epochs (every epoch has at least floor(n/b) batches,
    passes from the run's start); revealing the permutations leaves an adaptive
    composition in which a step moves by c sens, c the epochs whose batch holding x it
    contains: c <= 2 (k <= ceil(n/b) batches straddle at most two epochs) and sum c <=
    E.  Each step is then dominated by a shift of 2 sens and at most E steps move: E
    pairs of shift 2 sens.  For Gaussian noise the steps compose to a Gaussian with
    mu^2 = sum (c sens / sigma)^2 <= 2 E (sens / sigma_min)^2: E pairs of shift
    sqrt(2) sens.  Where every entry reads as one loader length L and no step straddles
    two epochs (each k divides L and each entry starts on a multiple of its k), c <= 1
    and E = ceil(sum / L): E pairs of shift sens."""
    lengths = {L for _, L, _ in steps}
    aligned = len(lengths) == 1 and None not in lengths
    if aligned:
        (L,) = lengths
        position = 0
        for k, _, count in steps:
            aligned = aligned and L % k == 0 and position % k == 0
            position += k * count
    per_epoch = L if aligned else a.dataset_size // a.batch_size
    batches = sum(k * c for k, _, c in steps)
    charged = -(-batches // per_epoch)
    sens = 2 if a.neighbouring == "replace_one" else 1
    sigma = min(s for s, q, c in history if c and q > 0.0)
    base = noise(sigma)
    gaussian = isinstance(base, GaussianNoise) and base.sigma > 0.0
    if aligned:
        shift, factor = sens, "1 times"
        straddle = (f"{per_epoch} batches each, and no step straddles two of them "
                    "(the example is in at most one batch of a step), ")
    else:
        shift = sens * math.sqrt(2.0) if gaussian else 2 * sens
        factor = "sqrt(2) times" if gaussian else "2 times"
        straddle = (f"at most ceil({batches} / floor(n/b)), and a step may straddle two "
                    "epochs (the example at most twice in it), ")
    note = SHUFFLE_ACCUMULATED_NOTE.format(batches=batches, charged=charged,
                                           straddle=straddle, factor=factor)
    return SampledPairs(((base.shifted(shift), charged),), (), 0.0, 0, notes + (note,))


def _shuffle_pairs(history, a: Assumptions, noise: NoiseOf) -> SampledPairs:
    """``sampled_pairs`` of a shuffled run, by its layout (``shuffle_layout``)."""
    layout = shuffle_layout(history, a)
    B = layout.steps_per_epoch
    lengths = _epoch_lengths(a)
    steps = [_accumulated(q, lengths) + (int(c),) for _, q, c in history if c and q > 0.0]
    if lengths == (2, 1) and any(L != 1 for _, L, _ in steps):
        # b < n < 2b: the rate 1 is one batch of the drop_last loader (one batch per
        # epoch) or two of the other (2/2), and beside steps of the other loader it is
        # read as the latter, which may straddle two epochs (n 4, b 3, steps of 1, 2, 2
        # batches, integer noise: read as three drop_last epochs, the certified delta
        # at eps 2 was 0.3721 against the run's exact 0.3793 under replace_special)
        steps = [(2, 2, c) if (k, L) == (1, 1) else (k, L, c) for k, L, c in steps]
    if any(k > 1 for k, _, _ in steps):
        # (a rate k/len(loader) is read as k batches; other rates as in the layouts.
        # Only the rates read neither way are noted: a note on a rate read as k batches
        # had said that the bound did not hold for the run it certifies)
        odd = [e for e in history if e[2] and e[1] > 0.0
               and _shuffle_reading(e[1], lengths) is None
               and _accumulated(e[1], lengths)[0] == 1]
        used = "k batches per step where a rate is k/len(loader), one batch otherwise"
        notes = tuple(n + SHUFFLE_UNREAD for n in rate_mismatch_notes(odd, a, used))
        return _accumulated_pairs(history, a, noise, notes + (SHUFFLE_PASSES_NOTE,), steps)
    unread = [e for e in history if e[2] and e[1] > 0.0
              and _shuffle_reading(e[1], lengths) is None]
    used = (f"{B} batches per epoch" if layout.kind != "bounded"
            else f"{layout.charged} unamplified Gaussians")
    notes = tuple(n + SHUFFLE_UNREAD for n in rate_mismatch_notes(unread, a, used))
    notes += (SHUFFLE_PASSES_NOTE,)
    if layout.kind == "bounded":
        sens = 2 if a.neighbouring == "replace_one" else 1
        sigma = min(s for s, q, c in history if c and q > 0.0)
        upper = ((noise(sigma).shifted(sens), layout.charged),)
        note = SHUFFLE_BOUNDED_NOTE.format(charged=layout.charged)
        return SampledPairs(upper, (), 0.0, 0, notes + (note,))
    upper = shuffle_upper_pairs(history, a.neighbouring, B, noise)
    if layout.kind == "drop_last":
        return SampledPairs(upper, (), 0.0, 0, notes + (SHUFFLE_DROP_LAST_NOTE,))
    notes += (SHUFFLE_NOTE,)
    if layout.kind == "assumed" and a.dataset_size % a.batch_size:
        notes += (_shuffle_assumed_note(B),)
    lower = shuffle_lower_pairs(history, a.neighbouring, B, noise)
    rel = max((p.relative_error for p, _ in lower), default=0.0)
    count = sum(c for _, c in lower)
    total = sum(c for _, c in upper)
    if count < total:
        notes += (f"shuffle lower bound from {count} of {total} epochs (partial epochs, "
                  "epochs whose noise varies and epochs at sigma 0 or whose max-of-batches "
                  "masses are beyond the float range are left out)",)
    return SampledPairs(upper, lower, rel, count, notes)


# -- bounds from SampledPairs (the accountant wraps these) -------------------------------

def lower_correction(sp: SampledPairs) -> Tuple[float, float]:
    """(factor, shift) for lower pairs whose masses carry relative error eta, r of them
    composed: the computed pairs' divergence at eps is at most factor times the exact
    pairs' divergence at eps - shift, factor = (1+eta)^r, shift = r log((1+eta)/(1-eta))
    (docs/method.md, "Samplers and neighbouring relations")."""
    eta, r = sp.lower_relative_error, sp.lower_count
    if eta == 0.0 or r == 0:
        return 1.0, 0.0
    if eta >= 0.5:
        return math.inf, math.inf
    factor = math.exp(r * math.log1p(eta)) * (1.0 + 1e-12)
    shift = r * (math.log1p(eta) - math.log1p(-eta)) * (1.0 + 1e-12)
    return factor, shift


def bracket_lower_epsilon(composer: Composer, sp: SampledPairs, delta: float) -> float:
    """Certified lower epsilon at ``delta`` from ``sp.lower`` (corrected)."""
    if not sp.lower:
        return 0.0
    factor, shift = lower_correction(sp)
    target = delta * factor
    if not target < 1.0:
        return 0.0
    # (the lower bound alone is read: every refinement computes it)
    low = adaptive_epsilon_bounds(composer, list(sp.lower), target, split_first=False).lower
    return max(0.0, low - shift)


def bracket_lower_delta(composer: Composer, sp: SampledPairs, eps) -> np.ndarray:
    """Certified lower delta at ``eps`` (array) from ``sp.lower`` (corrected)."""
    eps = np.asarray(eps, dtype=float)
    if not sp.lower:
        return np.zeros(eps.shape)
    factor, shift = lower_correction(sp)
    if math.isinf(factor):
        return np.zeros(eps.shape)
    engine = compose_history(composer, list(sp.lower), None, ("split", "grouped"))
    low = np.asarray(engine.delta_lower(np.atleast_1d(eps) + shift), dtype=float)
    return low.reshape(eps.shape) / factor


def delta_bounds(composer: Composer, sp: SampledPairs, eps) -> Tuple[np.ndarray, np.ndarray]:
    """(lower, upper) certified delta at the array ``eps`` for ``sp``."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    if sp.lower is None:
        engine = compose_history(composer, list(sp.upper), None, ("split", "grouped"))
        db = engine.delta_bounds(eps)
        return np.asarray(db.lower), np.asarray(db.upper)
    up = compose_history(composer, list(sp.upper), None, ("split",))
    upper = np.asarray(up.delta_bounds(eps).upper)
    return np.minimum(bracket_lower_delta(composer, sp, eps), upper), upper


def available_samplers(assumptions: Assumptions) -> List[Assumptions]:
    """The assumptions under every sampler that the known sizes allow (the accountant's
    relation; shuffle, undefined under add_remove, under replace_special, which for
    Poisson gives the same pair as add_remove)."""
    out = []
    n, b = assumptions.dataset_size, assumptions.batch_size
    both = n is not None and b is not None
    for s in SAMPLERS:
        rel = assumptions.neighbouring
        if s == "shuffle":
            if not both:
                continue
            if rel == "add_remove":
                rel = "replace_special"
        # (fixed-size batches with one size alone: the rates of the history, as with
        # neither; Poisson keeps what it was given)
        sizes = (n, b) if both or s == "poisson" else (None, None)
        out.append(Assumptions(s, rel, *sizes))
    return out
