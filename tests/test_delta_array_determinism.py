"""A delta query's answer at one epsilon is a function of the history and that epsilon
alone: an entry of an array query (or of a privacy curve that goes through it) is
bitwise the scalar query's, whatever other epsilons are asked with it.

(It used to be tightened on the grids of the smallest answer in the array: at
sigma 1, q 0.01, 200 steps and sigma 1.5, q 0.02, 30 steps, get_delta_bounds(0.5)
gave upper 0x1.634ab2cf621f3p-10 alone and 0x1.634ab2cf5a633p-10 beside 4.0.)
"""
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
