"""Steps over k accumulated batches (review by helper 49).

* fixed-size batches: each of the k batches is its own draw, so an example may be in
  several of them; the fixed-size bound charges one batch per step, and
  ``step_accumulated`` now warns (``AccumulatedBatchesWarning``) as it does for Poisson
  batches (n 4, b 2, sigma 1, k 2, one step: certified delta 0.2105 at eps 1, the run's
  at least 0.4476).
* shuffled batches: a summed rate that is not k/len(loader) (b/n given by hand) is read
  as one batch per step; ``step_accumulated`` now warns.
* the rate 1 where b < n < 2b is one batch of the drop_last loader or two of the other,
  which may straddle two epochs: beside steps of the other loader it is read as two
  (the bound had read three drop_last epochs, below the run's exact delta).
* near 10^6 batches per epoch k/ceil(n/b) and k/floor(n/b) both lie within RATE_MATCH:
  the closer is read (the first had been, and a drop_last loader's straddling steps
  were read as aligned with epochs of ceil(n/b) batches).
* a shuffled loader whose drop_last leaves examples out, given a sample rate other than
  1/len(loader), is warned about (the accountant reads ceil(n/b) batches per epoch).
"""
from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import optimize, special

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.mechanisms import Gaussian
from pb_accountant.samplers import (AccumulatedBatchesWarning, IntegerNoise, delta_bounds,
                                   sampled_pairs)

pytest.importorskip("hypothesis")
from test_samplers_bruteforce import (COMPOSER, EPSILONS, add_noise, exact_delta,  # noqa: E402
                                      neighbour_pairs, noise_pmf)


def mixture_delta(eps, weights, shifts):
    """Exact delta(P||Q) at eps of P = sum w N(shift, 1) vs Q = N(0, 1), shifts >= 0
    (the likelihood ratio increases in the outcome: the region is y > y*)."""
    ratio = lambda y: sum(w * math.exp(s * y - s * s / 2) for w, s in zip(weights, shifts))
    y = optimize.brentq(lambda t: math.log(ratio(t)) - eps, -50.0, 50.0, xtol=1e-14)
    return (sum(w * special.ndtr(s - y) for w, s in zip(weights, shifts))
            - math.exp(eps) * special.ndtr(-y))


def test_accumulated_fixed_size_batches_are_flagged():
    """n 4, b 2, k 2 fixed-size batches under one noise draw: the larger dataset with x
    = +1 and every other example -1 against the smaller one (all -1) moves the sum by
    2 J, J ~ Binomial(2, 1/2); the fixed-size bound charges one batch, below it."""
    acc = PrivacyBucketsAccountant(sampler="fixed_size", dataset_size=4, batch_size=2)
    with pytest.warns(AccumulatedBatchesWarning, match="2 accumulated fixed-size batches"):
        acc.step_accumulated(noise_multiplier=1.0, sample_rate=0.5, batches=2)
    run = mixture_delta(1.0, (0.25, 0.5, 0.25), (0.0, 2.0, 4.0))
    assert 0.4475 < run < 0.4477
    assert acc.get_delta(1.0) < 0.2106 < run          # (what the warning is about)
    one = PrivacyBucketsAccountant(sampler="fixed_size", dataset_size=4, batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccumulatedBatchesWarning)
        one.step_accumulated(noise_multiplier=1.0, sample_rate=0.5, batches=1)
    assert one.history == [(1.0, 0.5, 1)]


def test_accumulated_shuffled_batches_at_a_rate_not_read_are_flagged():
    """n 10, b 3: len(loader) is 4 (3 with drop_last).  The rate 2 x 0.3 (b/n given by
    hand) names no loader and is read as one batch per step: warned.  2 x 1/4 reads as
    two batches; 3 x 1/3 = 1 (a drop_last epoch per step) reads as 4/4, a whole epoch
    of the other loader, which counts as many epochs: neither is warned."""
    def make():
        return PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_one",
                                        dataset_size=10, batch_size=3)
    acc = make()
    with pytest.warns(AccumulatedBatchesWarning, match=r"not 2/len\(loader\)"):
        acc.step_accumulated(noise_multiplier=1.0, sample_rate=0.3, batches=2)
    for q, k in ((0.25, 2), (1 / 3, 3), (0.25, 4), (0.25, 1)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", AccumulatedBatchesWarning)
            make().step_accumulated(noise_multiplier=1.0, sample_rate=q, batches=k)
    # n 3, b 2: two batches per epoch, both accumulated (rate 2/2 = 1, also one batch of
    # the drop_last loader): read as two where it matters, not warned
    small = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_one",
                                     dataset_size=3, batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccumulatedBatchesWarning)
        small.step_accumulated(noise_multiplier=1.0, sample_rate=0.5, batches=2)
    with pytest.warns(AccumulatedBatchesWarning, match=r"not 3/len\(loader\)"):
        small.step_accumulated(noise_multiplier=1.0, sample_rate=1 / 3, batches=3)


def straddling_run(data, b, ks):
    """The sums of steps of ks[i] consecutive batches each over independent
    permutations of ``data`` cut into batches of b (drop_last=False)."""
    n = len(data)
    L = -(-n // b)
    epochs = -(-sum(ks) // L)
    perms = list(itertools.permutations(range(n)))
    out = {}
    for chosen in itertools.product(perms, repeat=epochs):
        batches = [perm[i:i + b] for perm in chosen for i in range(0, n, b)]
        sums, pos = [], 0
        for k in ks:
            sums.append(sum(data[j] for bt in batches[pos:pos + k] for j in bt))
            pos += k
        key = tuple(sums)
        out[key] = out.get(key, 0) + Fraction(1, len(perms) ** epochs)
    return out


@pytest.mark.parametrize("relation", ["replace_special", "replace_one"])
@pytest.mark.parametrize("n,b,ks", [(4, 3, (1, 2, 2)), (4, 3, (2, 1, 2)), (3, 2, (1, 2, 2))])
def test_rate_one_beside_the_other_loader_holds_the_exact_delta(relation, n, b, ks):
    """b < n < 2b, drop_last=False (2 batches per epoch): a step of one batch (rate 1/2)
    then steps of two (rate 2/2 = 1, also one batch of the drop_last loader).  The steps
    of two straddle epochs; read as drop_last epochs the bound had been below the exact
    delta (n 4, b 3, (1, 2, 2), replace_special: 0.3721 at eps 2 against 0.3793)."""
    kk, c = 2, 0.15
    pmf = noise_pmf(kk, c)
    history = []
    for k in ks:
        q = k / 2
        if history and history[-1][1] == q:
            history[-1] = (1.0, q, history[-1][2] + 1)
        else:
            history.append((1.0, q, 1))
    sp = sampled_pairs(history, "shuffle", relation, noise=lambda s: IntegerNoise(pmf, -kk),
                       dataset_size=n, batch_size=b)
    lower, upper = delta_bounds(COMPOSER, sp, EPSILONS)
    exact = np.zeros(len(EPSILONS))
    for d1, d2 in neighbour_pairs(n, "shuffle", relation, b):
        fa = add_noise(straddling_run(d1, b, ks), pmf, kk)
        fb = add_noise(straddling_run(d2, b, ks), pmf, kk)
        exact = np.maximum(exact, exact_delta([(fa, 1)], [(fb, 1)]))
    assert exact[-1] > 0.3
    assert np.all(upper >= exact * (1 - 1e-9)), (exact, upper)
    assert np.all(lower <= exact * (1 + 1e-9)), (exact, lower)


def test_rate_one_alone_keeps_its_reading():
    """Only rate-1 steps (n 3, b 2): every step is one epoch of either loader, one
    Gaussian each, as before."""
    sp = sampled_pairs([(1.0, 1.0, 3)], "shuffle", "replace_special", dataset_size=3,
                       batch_size=2)
    ((pair, count),) = sp.upper
    assert count == 3 and isinstance(pair, Gaussian) and pair.sensitivity == 1


def test_near_a_million_batches_the_closer_loader_is_read():
    """n 2,000,001, b 2: 1,000,000 batches with drop_last, 1,000,001 without, and
    101/1,000,000 lies within RATE_MATCH of 101/1,000,001.  9,901 steps of 101 batches of
    the drop_last loader are 1,000,001 batches: two epochs, the last step straddling
    them.  Read as the other loader (whose length 101 divides) they had been one aligned
    epoch, one plain Gaussian."""
    q = (1.0 / 1_000_000) * 101
    sp = sampled_pairs([(1.0, q, 9901)], "shuffle", "replace_special", dataset_size=2_000_001,
                       batch_size=2)
    ((pair, count),) = sp.upper
    assert count == 2 and pair.sensitivity == math.sqrt(2.0)
    q = (1.0 / 1_000_001) * 101                     # the other loader: aligned, plain
    sp = sampled_pairs([(1.0, q, 9901)], "shuffle", "replace_special", dataset_size=2_000_001,
                       batch_size=2)
    ((pair, count),) = sp.upper
    assert count == 1 and pair.sensitivity == 1


def test_a_drop_last_loader_given_another_rate_is_warned_about():
    """n 3, b 2, drop_last: one batch per epoch.  Given the rate b/n = 2/3 the shuffle
    accountant reads two batches per epoch: two steps (two epochs) certified delta
    0.0015 at eps 3 where the run (every other example 0) has 0.0057."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from pb_accountant.integrations.sampling import SampleRateWarning, check_sample_rate
    data = TensorDataset(torch.zeros(3, 1))
    dropping = DataLoader(data, batch_size=2, shuffle=True, drop_last=True)
    with pytest.warns(SampleRateWarning, match=r"1/len\(loader\)"):
        assert check_sample_rate(2 / 3, dropping)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SampleRateWarning)
        assert check_sample_rate(1.0, dropping) == []
        assert check_sample_rate(2 / 3, DataLoader(data, batch_size=2, shuffle=True)) == []
    acc = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                   dataset_size=3, batch_size=2)
    acc.history = [(1.0, 2 / 3, 2)]
    # the run (every other example 0): two epochs, x in the one batch with probability
    # 2/3 each, the composition of (1/3) N(0) + (2/3) N(1) vs N(0) twice; the inner
    # integral over the second output is closed-form (its likelihood ratio increases)
    E = math.exp(3.0)
    y = np.linspace(-14.0, 16.0, 300001)
    a = 1 / 3 + 2 / 3 * np.exp(y - 0.5)
    need = E / a
    t = np.where(need > 1 / 3, 0.5 + np.log(np.maximum(need - 1 / 3, 1e-300) / (2 / 3)),
                 -np.inf)
    inner = a * (special.ndtr(-t) / 3 + 2 / 3 * special.ndtr(1.0 - t)) - E * special.ndtr(-t)
    run = float(np.trapezoid(np.maximum(inner, 0.0) * np.exp(-y * y / 2) / math.sqrt(2 * math.pi),
                         y))
    assert 0.0055 < run < 0.0060
    assert acc.get_delta(3.0) < 0.0016 < run         # (what the warning is about)


def test_a_step_rate_above_one_names_batches_and_sample_rate():
    """batches x sample_rate above 1 is refused naming both (step() had named only the
    product, "sample_rate ... got 1.2"), before the history changes."""
    acc = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match=r"batches x sample_rate .* 2 x 0\.6 = 1\.2"):
        acc.step_accumulated(noise_multiplier=1.0, sample_rate=0.6, batches=2)
    assert acc.history == []
    with pytest.warns(AccumulatedBatchesWarning):          # (rate 1: Poisson, warned)
        acc.step_accumulated(noise_multiplier=1.0, sample_rate=0.5, batches=2)
    assert acc.history == [(1.0, 1.0, 1)]


def test_a_rate_read_as_k_batches_is_not_noted_as_a_mismatch_and_others_are():
    """n 10, b 3 (len(loader) 4): steps at 2/4 are read as two batches each and certified,
    so no note says the bound does not hold for them (one had: the rate-mismatch note on
    every rate other than 1/len(loader)); a rate 0.45 beside them names no loader and is
    still noted."""
    a = dict(dataset_size=10, batch_size=3)
    read = sampled_pairs([(1.0, 0.5, 8)], "shuffle", "replace_one", **a)
    assert any("accumulated per step" in n for n in read.notes)
    assert not any("does not hold" in n or "differs from" in n for n in read.notes)
    mixed = sampled_pairs([(1.0, 0.5, 8), (1.0, 0.45, 2)], "shuffle", "replace_one", **a)
    odd = [n for n in mixed.notes if "differs from" in n]
    assert len(odd) == 1 and "0.45" in odd[0] and "0.5," not in odd[0]
    assert "does not hold" in odd[0]
