"""A delta query's answer at one epsilon is a function of the history and that epsilon
alone: an entry of an array query (or of a privacy curve that goes through it) is
bitwise the scalar query's, whatever other epsilons are asked with it.

(It used to be tightened on the grids of the smallest answer in the array: at
sigma 1, q 0.01, 200 steps and sigma 1.5, q 0.02, 30 steps, get_delta_bounds(0.5)
gave upper 0x1.634ab2cf621f3p-10 alone and 0x1.634ab2cf5a633p-10 beside 4.0.)
"""
import math

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant

HISTORY = [(1.0, 0.01, 200), (1.5, 0.02, 30)]
EPSILONS = [0.5, 1.0, 2.0, 4.0]


def _fresh(**kwargs):
    acc = PrivacyBucketsAccountant(**kwargs)
    acc.history = list(HISTORY)
    return acc


def _bits(x):
    return float(x).hex()


def test_array_entries_equal_scalar_queries():
    together = _fresh().get_delta_bounds(np.array(EPSILONS))
    for i, eps in enumerate(EPSILONS):
        alone = _fresh().get_delta_bounds(eps)
        assert _bits(together.upper[i]) == _bits(alone.upper), eps
        assert _bits(together.lower[i]) == _bits(alone.lower), eps
        assert _bits(_fresh().get_delta(eps)) == _bits(alone.upper)


@pytest.mark.parametrize("others", [[4.0], [2.0, 4.0], [0.0, 3.0]])
def test_an_entry_does_not_depend_on_its_companions(others):
    alone = _fresh().get_delta_bounds(np.array([0.5]))
    mixed = _fresh().get_delta_bounds(np.array([0.5] + others))
    assert _bits(mixed.upper[0]) == _bits(alone.upper[0])
    assert _bits(mixed.lower[0]) == _bits(alone.lower[0])


@pytest.mark.parametrize("kwargs", [
    {},
    {"sampler": "fixed_size", "neighbouring": "replace_one", "dataset_size": 1000,
     "batch_size": 10},
])
def test_a_privacy_curve_is_the_delta_query_at_each_epsilon(kwargs):
    # (a Poisson curve used to be read off one composition for the default delta class:
    # at sigma 1, q 0.01, 200 steps and sigma 1.5, q 0.02, 30 steps its upper bound
    # stayed on that class's floor, near 1e-14, where get_delta_bounds certifies ~1e-16
    # and below)
    eps = np.array(EPSILONS + [6.0, 8.0])
    curve = _fresh(**kwargs).get_privacy_curve(eps)
    direct = _fresh(**kwargs).get_delta_bounds(eps)
    assert [_bits(x) for x in curve.delta_upper] == [_bits(x) for x in direct.upper]
    assert [_bits(x) for x in curve.delta_lower] == [_bits(x) for x in direct.lower]
    assert curve.sampler == kwargs.get("sampler", "poisson")
    assert curve.neighbouring == kwargs.get("neighbouring", "add_remove")
    if not kwargs:
        assert curve.delta_upper[-1] < 1e-15       # below the default class's floor


def test_a_default_privacy_curve_reaches_delta_1e_10():
    curve = _fresh().get_privacy_curve(num=20)
    assert curve.epsilons[0] == 0.0 and len(curve.epsilons) == 20
    assert curve.delta_upper[-1] <= 1e-10 < curve.delta_upper[-2]
    assert np.all(np.diff(curve.delta_upper) <= 0.0)


@pytest.mark.parametrize("kwargs", [{}, {"neighbouring": "replace_one"},
                                    {"sampler": "fixed_size", "dataset_size": 10,
                                     "batch_size": 10}])
def test_a_two_dimensional_epsilon_array_keeps_its_shape(kwargs):
    """A 2-D epsilon array is answered entry by entry in its own shape (the accountant
    used to raise TypeError 'only 0-dimensional arrays can be converted to Python
    scalars' where compose()'s delta_bounds took it); every entry is bitwise its scalar
    query and brackets the exact Gaussian delta (q 1: mu = sqrt(T) * shift / sigma)."""
    from _closed_form import gaussian_delta
    sigma, steps = 2.0, 50
    acc = PrivacyBucketsAccountant(**kwargs)
    acc.history = [(sigma, 1.0, steps)]
    shift = 1.0 if not kwargs else 2.0        # replace_one and fixed_size move the sum by 2
    mu = np.sqrt(steps) * shift / sigma
    eps = np.array([[0.0, 1.0, 3.0], [7.0, 20.0, 40.0]])
    together = acc.get_delta_bounds(eps)
    assert np.shape(together.epsilon) == np.shape(together.lower) == eps.shape
    assert np.shape(together.upper) == eps.shape
    curve = acc.get_privacy_curve(eps)
    for i in range(2):
        for j in range(3):
            alone = acc.get_delta_bounds(float(eps[i, j]))
            assert _bits(together.upper[i, j]) == _bits(alone.upper)
            assert _bits(together.lower[i, j]) == _bits(alone.lower)
            assert _bits(curve.delta_upper[i, j]) == _bits(alone.upper)
            exact = gaussian_delta(eps[i, j], mu)
            assert together.lower[i, j] <= exact <= together.upper[i, j]


def test_a_wide_delta_bracket_is_computed_again_on_finer_grids():
    """sigma 1, q 1e-3, 600,000 steps: a delta query starts on grids two halvings
    coarser (large leaves) and had answered [9.355e-7, 1.105e-6] at epsilon 5, 15% wide,
    where its own epsilon query at delta 1e-6 certifies delta(5) <= 1e-6.  A bracket
    with a positive lower bound wider than DELTA_TARGET_WIDTH is computed once more on
    the level its width predicts: about 1% wide now, inside the first bracket, on the
    right side of 1e-6, between dp_accounting's optimistic and pessimistic PLD, and an
    array entry (beside a narrow one and one of a smaller class) bitwise its scalar
    query."""
    pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    from pb_accountant.engine import DELTA_TARGET_WIDTH
    history = [(1.0, 1e-3, 600_000)]
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    b = acc.get_delta_bounds(5.0)
    assert 9.35e-7 <= b.lower <= b.upper <= 1.105e-6
    assert (b.upper - b.lower) / b.upper <= 1.1 * DELTA_TARGET_WIDTH
    eps = acc.get_epsilon_bounds(1e-6)
    assert eps.upper < 5.0 and b.lower <= 1e-6           # delta(5) <= delta(eps.upper)
    plds = [pld_lib.from_gaussian_mechanism(1.0, sampling_prob=1e-3,
                                            value_discretization_interval=1e-3,
                                            pessimistic_estimate=p).self_compose(600_000)
            for p in (False, True)]
    optimistic, pessimistic = (p.get_delta_for_epsilon(5.0) for p in plds)
    assert b.lower <= pessimistic and optimistic <= b.upper
    values = [5.0, 2.0, 12.0]
    together = acc.get_delta_bounds(np.array(values))
    for i, e in enumerate(values):
        fresh = PrivacyBucketsAccountant()
        fresh.history = list(history)
        alone = fresh.get_delta_bounds(e)
        assert _bits(together.upper[i]) == _bits(alone.upper), e
        assert _bits(together.lower[i]) == _bits(alone.lower), e


@pytest.mark.parametrize("steps,sigma", [(30, 1.0), (300, 4.0), (20_000, 30.0)])
def test_refined_delta_brackets_hold_the_exact_gaussian_delta(monkeypatch, steps, sigma):
    """The refinement pass returns certified bounds: with DELTA_TARGET_WIDTH made tiny,
    every bracket with a positive lower bound is computed again on finer grids (q = 1
    histories start on the default grids), and the refined brackets still hold the
    exact Gaussian delta (mu = sqrt(T) / sigma, 60 digits), each no wider than the first
    grids' and bitwise its scalar query inside an array."""
    from _closed_form import gaussian_delta
    import pb_accountant.engine as engine
    mu = math.sqrt(steps) / sigma
    eps = np.array([0.25, 1.0, 2.5]) * mu * mu / 2 + np.array([0.0, 0.5, 1.0]) * mu
    first = _at(sigma, steps).get_delta_bounds(eps)
    monkeypatch.setattr(engine, "DELTA_TARGET_WIDTH", 1e-9)
    refined = _at(sigma, steps).get_delta_bounds(eps)
    for i, e in enumerate(eps):
        exact = float(gaussian_delta(e, mu))
        assert refined.lower[i] <= exact <= refined.upper[i], (e, exact)
        assert refined.upper[i] - refined.lower[i] <= first.upper[i] - first.lower[i]
        alone = _at(sigma, steps).get_delta_bounds(float(e))
        assert _bits(alone.upper) == _bits(refined.upper[i])
        assert _bits(alone.lower) == _bits(refined.lower[i])
    assert np.any(refined.upper - refined.lower < first.upper - first.lower)


def _at(sigma, steps):
    acc = PrivacyBucketsAccountant()
    acc.history = [(sigma, 1.0, steps)]
    return acc
