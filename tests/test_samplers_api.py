"""The accountant's sampler API (issue 13): validation, state, results, contract.

The pairs themselves are proven by tests/test_samplers_bruteforce.py and bracketed
against dp_accounting in tests/test_samplers_dp_accounting.py.
"""
from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest

from _pb_contract import PbAccountantContract
from pb_accountant import (NEIGHBOURING, SAMPLERS, PrivacyBucketsAccountant,
                           find_noise_multiplier, find_steps)
from pb_accountant.mechanisms import normal_log_cdf_and_error
from pb_accountant.sampled_pairs import (SymmetricSubsampledGaussian, _log_cdfs,
                                         max_of_batches_masses)
from pb_accountant.samplers import SHUFFLE_NOTE, epochs

CIFAR = dict(dataset_size=50_000, batch_size=256)


# -- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,names", [
    (dict(sampler="poison"), ["sampler", "poison"]),
    (dict(sampler=None), ["sampler"]),
    (dict(neighbouring="replace"), ["neighbouring", "replace"]),
    (dict(sampler="shuffle", neighbouring="replace_one"), ["shuffle", "dataset_size"]),
    (dict(sampler="shuffle", **CIFAR), ["shuffle", "add_remove", "replace_special"]),
    (dict(sampler="fixed_size", dataset_size=10, batch_size=11), ["batch_size", "11", "10"]),
    (dict(sampler="fixed_size", dataset_size=0, batch_size=1), ["dataset_size", "0"]),
    (dict(sampler="fixed_size", dataset_size=10, batch_size=2.5), ["batch_size", "2.5"]),
    (dict(sampler="fixed_size", dataset_size=True, batch_size=1), ["dataset_size"]),
    (dict(sampler="fixed_size", dataset_size=100), ["dataset_size", "batch_size"]),
    (dict(sampler="shuffle", neighbouring="replace_one", dataset_size=100, batch_size=-1),
     ["batch_size", "-1"]),
    # beyond 2^53 (1 / ceil(n/b) overflowed into an OverflowError past about 1.8e308)
    (dict(sampler="shuffle", neighbouring="replace_one", dataset_size=10 ** 400,
          batch_size=1), ["dataset_size", "9007199254740992"]),
    (dict(sampler="fixed_size", dataset_size=2 ** 53 + 1, batch_size=1),
     ["dataset_size", "9007199254740993"]),
])
def test_bad_assumptions_raise_naming_parameter_and_value(kwargs, names):
    with pytest.raises(ValueError) as info:
        PrivacyBucketsAccountant(**kwargs)
    for name in names:
        assert name in str(info.value)


def test_choices_and_defaults():
    assert SAMPLERS == ("poisson", "fixed_size", "shuffle")
    assert NEIGHBOURING == ("add_remove", "replace_one", "replace_special")
    acc = PrivacyBucketsAccountant()
    assert (acc.sampler, acc.neighbouring) == ("poisson", "add_remove")
    assert acc.assumptions == {"sampler": "poisson", "neighbouring": "add_remove",
                               "dataset_size": None, "batch_size": None}
    with pytest.raises(AttributeError):
        acc.sampler = "shuffle"
    with pytest.raises(AttributeError):
        acc.neighbouring = "replace_one"
    acc.assumptions["sampler"] = "shuffle"          # a copy
    assert acc.sampler == "poisson"


def test_options_still_validated_beside_the_sampler_arguments():
    with pytest.raises(ValueError, match="bogus"):
        PrivacyBucketsAccountant(sampler="fixed_size", bogus=1)
    acc = PrivacyBucketsAccountant("fixed_size", "replace_one", 100, 10, resolution=0.02)
    assert acc.options.resolution == 0.02 and acc.assumptions["batch_size"] == 10


# -- state ---------------------------------------------------------------------------------

def shuffled(history=((1.0, 0.1, 25),), **kw):
    acc = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_one",
                                   dataset_size=100, batch_size=10, **kw)
    acc.history = list(history)
    return acc


def test_state_dict_round_trip_carries_the_assumptions():
    acc = shuffled()
    state = acc.state_dict()
    assert state["assumptions"] == acc.assumptions
    again = shuffled(history=[])
    again.load_state_dict(state)
    assert again.history == acc.history
    assert again.get_epsilon_bounds(1e-5) == acc.get_epsilon_bounds(1e-5)


@pytest.mark.parametrize("other", [
    dict(sampler="fixed_size", neighbouring="replace_one", dataset_size=100, batch_size=10),
    dict(sampler="shuffle", neighbouring="replace_special", dataset_size=100, batch_size=10),
    dict(sampler="shuffle", neighbouring="replace_one", dataset_size=101, batch_size=10),
    dict(sampler="shuffle", neighbouring="replace_one", dataset_size=100, batch_size=11),
])
def test_loading_another_sampler_or_relation_raises_and_changes_nothing(other):
    acc = PrivacyBucketsAccountant(**other)
    acc.history = [(2.0, 0.1, 3)]
    state = shuffled().state_dict()
    with pytest.raises(ValueError) as info:
        acc.load_state_dict(state)
    changed = [k for k in other if other[k] != state["assumptions"][k]]
    assert all(k in str(info.value) for k in changed)
    assert acc.history == [(2.0, 0.1, 3)]


def test_old_states_mean_poisson_add_remove():
    old = {"history": [(1.0, 0.01, 10)], "mechanism": "pb"}
    acc = PrivacyBucketsAccountant()
    acc.load_state_dict(dict(old))
    assert acc.history == [(1.0, 0.01, 10)]
    with pytest.raises(ValueError, match="sampler"):
        shuffled(history=[]).load_state_dict(dict(old))
    with pytest.raises(ValueError, match="neighbouring"):
        PrivacyBucketsAccountant(neighbouring="replace_one").load_state_dict(dict(old))


def test_bad_assumptions_in_a_state_raise():
    state = shuffled().state_dict()
    state["assumptions"] = dict(state["assumptions"], colour="red")
    with pytest.raises(ValueError, match="colour"):
        shuffled(history=[]).load_state_dict(state)
    state["assumptions"] = "shuffle"
    with pytest.raises(ValueError, match="assumptions"):
        shuffled(history=[]).load_state_dict(state)


def test_pickle_and_deepcopy_keep_the_assumptions():
    acc = shuffled()
    for clone in (pickle.loads(pickle.dumps(acc)), copy.deepcopy(acc)):
        assert clone.assumptions == acc.assumptions
        assert clone.get_epsilon_bounds(1e-6) == acc.get_epsilon_bounds(1e-6)


# -- results -------------------------------------------------------------------------------

def test_results_name_their_sampler_relation_and_assumption():
    acc = shuffled()
    eb, db = acc.get_epsilon_bounds(1e-5), acc.get_delta_bounds(1.0)
    for r in (eb, db):
        assert (r.sampler, r.neighbouring) == ("shuffle", "replace_one")
        assert SHUFFLE_NOTE in r.notes
    assert SHUFFLE_NOTE == ("upper bound without amplification by shuffling; lower bound "
                            "from the max-of-batches statistic (Chua et al. 2024)")
    plain = PrivacyBucketsAccountant()
    plain.history = [(1.0, 0.01, 10)]
    r = plain.get_epsilon_bounds(1e-5)
    assert (r.sampler, r.neighbouring) == ("poisson", "add_remove")
    assert PrivacyBucketsAccountant().get_epsilon_bounds(1e-5).sampler == "poisson"


def test_by_sampler_keeps_poisson_beside_the_others():
    acc = PrivacyBucketsAccountant(**CIFAR)
    acc.history = [(1.0, 256 / 50_000, 196 * 5)]
    by = acc.get_epsilon_bounds_by_sampler(1e-5)
    assert list(by) == ["poisson", "fixed_size", "shuffle"]
    assert by["poisson"] == acc.get_epsilon_bounds(1e-5)
    assert by["shuffle"].neighbouring == "replace_special"       # shuffle has no add_remove
    assert by["fixed_size"].neighbouring == "add_remove"
    for b in by.values():
        assert 0.0 <= b.lower <= b.upper < math.inf
    # without sizes: no shuffle; fixed_size from the history's sample_rate
    bare = PrivacyBucketsAccountant(neighbouring="replace_one")
    bare.history = [(1.0, 0.01, 100)]
    by = bare.get_epsilon_bounds_by_sampler(1e-5)
    assert list(by) == ["poisson", "fixed_size"]
    assert any("sample_rate" in n for n in by["fixed_size"].notes)


def test_get_epsilon_is_the_certified_upper_bound_of_the_sampler():
    acc = shuffled()
    assert acc.get_epsilon(1e-5) == acc.get_epsilon_bounds(1e-5).upper
    assert acc.get_delta(2.0) == acc.get_delta_bounds(2.0).upper


def test_privacy_curve_brackets_and_is_ordered():
    curve = shuffled().get_privacy_curve(num=20)
    assert np.all(curve.delta_lower <= curve.delta_upper)
    assert np.all(np.diff(curve.delta_upper) <= 0)
    assert SHUFFLE_NOTE in curve.notes


def test_shuffle_is_a_function_of_the_history_alone():
    """Stepping one at a time (with queries) or assigning the history: same bits."""
    a = shuffled(history=[])
    for i in range(37):
        a.step(noise_multiplier=1.0 if i < 20 else 1.5, sample_rate=0.1)
        if i % 9 == 0:
            a.get_epsilon_bounds(1e-5)
    b = shuffled(history=[(1.0, 0.1, 20), (1.5, 0.1, 17)])
    assert a.get_epsilon_bounds(1e-5) == b.get_epsilon_bounds(1e-5)
    assert a.get_delta_bounds(1.0) == b.get_delta_bounds(1.0)


# -- epochs ----------------------------------------------------------------------------------

def test_epochs_run_length_partial_and_varying_sigma():
    assert epochs([(1.0, 0.1, 25)], 10) == [(1.0, True, 2), (1.0, False, 1)]
    # sigma changes inside the second epoch: charged with its smallest sigma
    assert epochs([(2.0, 0.1, 15), (1.0, 0.1, 15)], 10) == [
        (2.0, True, 1), (1.0, False, 1), (1.0, True, 1)]
    assert epochs([(2.0, 0.1, 15), (1.0, 0.1, 5)], 10) == [(2.0, True, 1), (1.0, False, 1)]
    assert epochs([(1.0, 0.0, 50), (1.0, 0.1, 10)], 10) == [(1.0, True, 1)]
    assert epochs([(1.0, 0.1, 10 ** 15)], 7) == [(1.0, True, 10 ** 15 // 7),
                                                 (1.0, False, 1)]


def test_shuffle_upper_charges_each_epoch_its_smallest_sigma():
    varying = shuffled(history=[(2.0, 0.1, 5), (1.0, 0.1, 5)])
    small = shuffled(history=[(1.0, 0.1, 10)])
    assert varying.get_epsilon_bounds(1e-5).upper == small.get_epsilon_bounds(1e-5).upper
    # the varying epoch is left out of the lower bound (only complete one-sigma epochs)
    assert varying.get_epsilon_bounds(1e-5).lower == 0.0


# -- the numerical pieces --------------------------------------------------------------------

def test_symmetric_pair_inverts_its_loss():
    for s, q in [(0.05, 0.3), (0.5, 0.01), (1.0, 0.5), (20.0, 0.9), (1.0, 1.0)]:
        pair = SymmetricSubsampledGaussian(s, q)
        t = np.linspace(-30, 30, 121)
        lo, hi = pair._loss_of_x(-1e300), pair._loss_of_x(1e300)
        t = t[(t > lo) & (t < hi)]
        back = pair._loss_of_x(pair._x_of_loss(t))
        np.testing.assert_allclose(back, t, rtol=1e-9, atol=1e-9)


def test_log_cdf_and_max_of_batches_masses_meet_their_error_bounds():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    rng = np.random.default_rng(3)
    xs = np.concatenate((np.linspace(-38, 37, 1201), rng.uniform(-3.2, 3.2, 200),
                         -np.exp(rng.uniform(1.0, 9.0, 100)),
                         [-1e-3, 1e-3, 0.0, -3.0, np.nextafter(-3.0, 0.0), -12.0, -50.0,
                          -300.0, -1e4, 39.0, 60.0]))
    got, bound = normal_log_cdf_and_error(xs)
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(bound))
    for x, g, b in zip(xs, got, bound):
        mx = mpmath.mpf(float(x))
        exact = mpmath.log1p(-mpmath.ncdf(-mx)) if x > 0 else mpmath.log(mpmath.ncdf(mx))
        assert abs(mpmath.mpf(float(g)) - exact) <= b, x
        if exact < -1e-300:
            # the bound is relative-sized: under 120u of |log Phi| wherever it is normal
            assert b <= 120 * 2.0 ** -53 * abs(float(exact)), x
    mpmath.mp.dps = 120

    def log_phi(z):
        return mpmath.log1p(-mpmath.ncdf(-z)) if z > 0 else mpmath.log(mpmath.ncdf(z))

    def interval(log_f, lo, hi):
        """F(hi) - F(lo), as a difference of upper tails where F is near 1."""
        if lo is None:
            return mpmath.exp(log_f(hi))
        if hi is None:
            return -mpmath.expm1(log_f(lo))
        if log_f(lo) > -1:
            return mpmath.expm1(log_f(hi)) - mpmath.expm1(log_f(lo))
        return mpmath.exp(log_f(hi)) - mpmath.exp(log_f(lo))

    for B, shift in [(1, 1.0), (7, 0.5), (196, 1.0 / 1.1), (50, 4.0), (3, 60.0)]:
        edges, a, b, rel = max_of_batches_masses(B, shift)
        assert rel < 1e-6 and len(a) == len(b) == len(edges) + 1
        d = mpmath.mpf(shift)

        def log_fa(z):
            return (B - 1) * log_phi(z) + log_phi(z - d)

        def log_fb(z):
            return B * log_phi(z)

        bounds = [None] + [mpmath.mpf(float(e)) for e in edges] + [None]
        step = max(1, len(a) // 150)
        for k in sorted(set(range(0, len(a), step)) | {len(a) - 1}):
            ea = interval(log_fa, bounds[k], bounds[k + 1])
            eb = interval(log_fb, bounds[k], bounds[k + 1])
            assert abs(a[k] - ea) <= rel * ea, (B, shift, k)
            assert abs(b[k] - eb) <= rel * eb, (B, shift, k)


def test_max_of_batches_log_cdf_brackets_the_exact_shift():
    """G's bound covers the rounding of d = sensitivity / sigma and of z - d: the exact
    log-CDF of the true shift lies within it."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    z = np.concatenate((np.linspace(-40, 37, 78), [-3.0, 0.0, 2.9, 12.5]))
    for B, sigma, sens in [(1, 0.7, 1), (7, 1.1, 2), (196, 3.0, 1), (50, 0.05, 2)]:
        d = sens / sigma
        g, e, gb, eb = _log_cdfs(z, B, d)
        exact_d = mpmath.mpf(sens) / mpmath.mpf(sigma)

        def log_phi(x):
            return mpmath.log1p(-mpmath.ncdf(-x)) if x > 0 else mpmath.log(mpmath.ncdf(x))

        for zk, gk, ek in zip(z, g, e):
            mz = mpmath.mpf(float(zk))
            exact = (B - 1) * log_phi(mz) + log_phi(mz - exact_d)
            assert abs(mpmath.mpf(float(gk)) - exact) <= ek, (B, sigma, zk)
        for zk, gk, ek in zip(z, gb, eb):
            exact = B * log_phi(mpmath.mpf(float(zk)))
            assert abs(mpmath.mpf(float(gk)) - exact) <= ek, (B, zk)


@pytest.mark.parametrize("shift", [70.5, 72.0, 73.8, 74.2, 74.366, 80.0])
def test_max_of_batches_masses_are_normal_floats_or_refused(shift):
    """Above shift ~70 no edge reaches the floor: the first masses used to be subnormal,
    with relative errors up to 0.95 against a claimed 1.8e-10; now every mass is a
    normal float or the pair is refused (the accountant then drops the epoch, noted)."""
    try:
        edges, a, b, rel = max_of_batches_masses(1, shift)
    except FloatingPointError:
        return
    assert np.all(a >= 2.0 ** -1022) and np.all(b >= 2.0 ** -1022) and rel < 1e-9


def test_max_of_batches_masses_trust_no_library_cdf(monkeypatch):
    import scipy.special

    def refuse(*args, **kwargs):
        raise AssertionError("a library normal CDF was called")

    for name in ("ndtr", "log_ndtr", "erf", "erfc", "ndtri"):
        monkeypatch.setattr(scipy.special, name, refuse)
    edges, a, b, rel = max_of_batches_masses(196, 1.0 / 1.1)
    assert 0 < rel < 1e-9 and np.all(a > 0) and np.all(b > 0)


def test_shuffle_target_size_under_two_seconds_is_a_benchmark_not_a_test():
    """100 CIFAR-10-sized epochs: checked by benchmarks/bench_samplers.py; here only
    that the bracket is proper and the lower bound is informative."""
    acc = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special", **CIFAR)
    acc.history = [(1.0, 256 / 50_000, 196 * 100)]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0.5 < b.lower < b.upper < math.inf


# -- calibration -----------------------------------------------------------------------------

def test_calibration_takes_the_sampler_arguments():
    kw = dict(sampler="fixed_size", neighbouring="replace_one", dataset_size=1000, batch_size=10)
    cal = find_noise_multiplier(2.0, 1e-5, 0.01, 200, **kw)
    assert cal.certified
    acc = PrivacyBucketsAccountant(**kw)
    acc.history = [(cal.noise_multiplier, 0.01, 200)]
    assert acc.get_epsilon(1e-5) <= 2.0
    poisson = find_noise_multiplier(2.0, 1e-5, 0.01, 200)
    assert cal.noise_multiplier > poisson.noise_multiplier
    steps = find_steps(2.0, 1e-5, cal.noise_multiplier, 0.01, max_steps=400, **kw)
    assert 200 <= steps.steps < 400
    with pytest.raises(ValueError, match="sampler"):
        find_noise_multiplier(2.0, 1e-5, 0.01, 200, sampler="bogus")


# -- the accountant contract for each sampler --------------------------------------------------

class _SamplerContract(PbAccountantContract):
    """The contract under one sampler/relation (SENS, STEPS_PER_GAUSSIAN: the full-batch
    closed form it must bracket)."""


class TestPoissonReplaceOneContract(_SamplerContract):
    KW = dict(neighbouring="replace_one")
    SENS = 2.0


class TestFixedSizeContract(_SamplerContract):
    KW = dict(sampler="fixed_size", neighbouring="replace_one")
    SENS = 2.0


class TestShuffleFullBatchContract(_SamplerContract):
    """n = b: one batch per epoch, so the bracket meets the Gaussian closed form."""
    KW = dict(sampler="shuffle", neighbouring="replace_special", dataset_size=64, batch_size=64)


class TestShuffleContract(_SamplerContract):
    KW = dict(sampler="shuffle", neighbouring="replace_one", dataset_size=100, batch_size=10)
    SENS = 2.0
    # (a rate 1 is 10/len(loader): all ten batches of an epoch accumulated in each step,
    # one Gaussian per step; counted before as one batch per step, one per ten steps)
    STEPS_PER_GAUSSIAN = 1


ALL_CONFIGS = [dict(), dict(neighbouring="replace_one"), dict(neighbouring="replace_special"),
               dict(sampler="fixed_size", neighbouring="replace_one"),
               dict(sampler="fixed_size", neighbouring="add_remove", dataset_size=100,
                    batch_size=10),
               dict(sampler="fixed_size", neighbouring="replace_special", dataset_size=100,
                    batch_size=10),
               dict(sampler="shuffle", neighbouring="replace_one", dataset_size=100,
                    batch_size=10),
               dict(sampler="shuffle", neighbouring="replace_special", dataset_size=100,
                    batch_size=30)]


@pytest.mark.parametrize("kw", ALL_CONFIGS)
@pytest.mark.parametrize("sigma", [0.0, 1.5e-6, 1e12])
def test_extreme_noise_gives_valid_bounds_never_nan(kw, sigma):
    """sigma = 0, sigma just above the smallest noise (sigma / 2 below it) and huge
    sigma, with data-free steps (q = 0) mixed in: ordered, in range, never NaN."""
    acc = PrivacyBucketsAccountant(**kw)
    acc.history = [(sigma, 0.1, 30), (1.0, 0.0, 5)]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= b.lower <= b.upper and not math.isnan(b.upper)
    d = acc.get_delta_bounds([0.0, 1.0])
    assert np.all((0.0 <= d.lower) & (d.lower <= d.upper) & (d.upper <= 1.0))
    if sigma == 0.0:
        assert b.upper == math.inf
    if sigma == 1e12:
        assert b.upper < 1e-6


def test_replace_one_at_tiny_noise_keeps_a_finite_upper_bound():
    """At sigma <= 0.03, alpha = q e^{-1/(2 sigma^2)} / (...) underflows to 0; the end
    points then come from the log-space root alone (the near-centre form divided by
    alpha and returned NaN, which made every leaf error unbounded and epsilon inf).
    With a distinguishing mass 1 - (1 - q)^30 ~ 3e-6 below delta, epsilon is 0."""
    for sigma in (1e-3, 0.01, 0.0264, 0.027, 0.03):
        acc = PrivacyBucketsAccountant(neighbouring="replace_one")
        acc.history = [(sigma, 1e-7, 30)]
        b = acc.get_epsilon_bounds(1e-5)
        assert b.lower == 0.0 and b.upper == 0.0
        d = acc.get_delta_bounds([0.0])
        # 1 - (1 - q erf)^30 in log1p / expm1 (a few ulp: 1 - x^30 itself loses about
        # 1e-10 relative here, more than the lower bound's distance to the true value)
        exact = -math.expm1(30 * math.log1p(-1e-7 * math.erf(1.0 / sigma / math.sqrt(2.0))))
        assert d.lower[0] <= exact * (1 + 1e-13)
        assert exact <= d.upper[0] <= exact * 1.02


@pytest.mark.parametrize("sigma,q,steps", [(0.0268, 1e-3, 5), (0.0262, 0.99, 2),
                                           (0.026389, 0.805, 1079), (0.0265, 0.5, 1)])
def test_replace_one_where_alpha_is_tiny_gives_bounds_not_errors(sigma, q, steps):
    """Where alpha is tiny but not 0 (sigma 0.026-0.0275), b / (2 alpha) overflowed and
    made end points inf, then an internal error (a NaN in a product's error bound)."""
    acc = PrivacyBucketsAccountant(neighbouring="replace_one")
    acc.history = [(sigma, q, steps)]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= b.lower <= b.upper
    d = acc.get_delta_bounds([0.0])
    exact = 1.0 - (1.0 - q * math.erf(1.0 / sigma / math.sqrt(2.0))) ** steps
    assert d.lower[0] <= exact * (1 + 1e-12) and exact <= d.upper[0] * (1 + 1e-12)


def test_threads_get_the_single_threaded_bits_for_every_sampler():
    import threading
    configs = [dict(neighbouring="replace_one"),
               dict(sampler="fixed_size", neighbouring="add_remove", dataset_size=100,
                    batch_size=10),
               dict(sampler="shuffle", neighbouring="replace_special", dataset_size=100,
                    batch_size=10)]
    for kw in configs:
        reference = PrivacyBucketsAccountant(**kw)
        reference.history = [(1.2, 0.1, 45)]
        expected = reference.get_epsilon_bounds(1e-5)
        shared = PrivacyBucketsAccountant(**kw)
        shared.history = [(1.2, 0.1, 45)]
        answers = []

        def ask():
            answers.append(shared.get_epsilon_bounds(1e-5))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [expected] * 4


@pytest.mark.parametrize("sizes", [{"dataset_size": 1000}, {"batch_size": 10}])
def test_by_sampler_with_one_size_known_answers_like_neither(sizes):
    """One size alone cannot fix b/n: fixed_size takes the history's rates (with its
    note) and shuffle is left out, as with neither (it raised a ValueError)."""
    acc = PrivacyBucketsAccountant(**sizes)
    acc.history = [(1.0, 0.01, 100)]
    bare = PrivacyBucketsAccountant()
    bare.history = [(1.0, 0.01, 100)]
    by, ref = acc.get_epsilon_bounds_by_sampler(1e-5), bare.get_epsilon_bounds_by_sampler(1e-5)
    assert list(by) == ["poisson", "fixed_size"]
    assert by["fixed_size"] == ref["fixed_size"] and by["poisson"] == ref["poisson"]


@pytest.mark.parametrize("sampler,neighbouring", [("poisson", "add_remove"),
                                                  ("fixed_size", "add_remove"),
                                                  ("shuffle", "replace_special")])
def test_a_sample_rate_the_sizes_contradict_is_noted(sampler, neighbouring):
    """With both sizes known, a step's sample_rate that is none of b/n, 1/ceil(n/b),
    1/floor(n/b) is flagged (the bound rests on one of the two; the run used one)."""
    acc = PrivacyBucketsAccountant(sampler=sampler, neighbouring=neighbouring,
                                   dataset_size=1005, batch_size=10)
    for q in (10 / 1005, 1 / 101, 1 / 100):                 # b/n, ceil, floor: no note
        acc.history = [(1.0, q, 101)]
        assert not any("differs" in n for n in acc.get_epsilon_bounds(1e-5).notes)
    # (0.0537 names no loader: 0.05 = 5/100 would be read under shuffle as five batches
    # of the drop_last loader accumulated per step, which its own note describes)
    acc.history = [(1.0, 0.0537, 101), (1.0, 1 / 101, 101)]
    notes = [n for n in acc.get_epsilon_bounds(1e-5).notes if "differs" in n]
    assert len(notes) == 1 and "0.0537" in notes[0] and sampler in notes[0]
