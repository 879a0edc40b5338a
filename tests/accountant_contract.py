"""The contract every accountant of this project keeps (as dp_accounting's test suite does).

Subclass :class:`AccountantContract` in a ``test_*.py`` file and implement the small
adapter methods; every test below then runs against that accountant.  The contract is
stated through public behaviour only: validation before mutation, monotonicity,
determinism, save/restore round trips and bracketing of closed forms.
"""
from __future__ import annotations

import copy
import math
import pickle

import pytest

from conftest import gaussian_delta, gaussian_epsilon


class AccountantContract:
    """Adapter methods to implement; the tests use nothing else."""

    #: the full-batch (q = 1) closed form: sensitivity of each Gaussian, and the steps one
    #: Gaussian covers (shuffling charges one per epoch)
    SENS = 1.0
    STEPS_PER_GAUSSIAN = 1

    def make(self):
        """A fresh accountant with default options."""
        raise NotImplementedError

    def add_steps(self, acc, noise_multiplier: float, sample_rate: float, count: int) -> None:
        """Record ``count`` DP-SGD steps through the accountant's public API."""
        raise NotImplementedError

    def epsilon_bounds(self, acc, delta: float):
        """(lower, upper) certified epsilon at ``delta``."""
        raise NotImplementedError

    def delta_bounds(self, acc, epsilon: float):
        """(lower, upper) certified delta at ``epsilon``."""
        raise NotImplementedError

    def save(self, acc):
        """A state the accountant can be rebuilt from (e.g. its state_dict)."""
        raise NotImplementedError

    def restore(self, state):
        """A new accountant rebuilt from ``save``'s state."""
        raise NotImplementedError

    def snapshot(self, acc):
        """Everything a user can observe of the recorded history (for 'unchanged' checks)."""
        return copy.deepcopy(self.save(acc))

    #: step arguments that must be rejected with a ValueError naming this parameter
    BAD_STEPS = [
        (dict(noise_multiplier=-1.0, sample_rate=0.01), "noise_multiplier"),
        (dict(noise_multiplier=float("nan"), sample_rate=0.01), "noise_multiplier"),
        (dict(noise_multiplier=1.0, sample_rate=1.5), "sample_rate"),
        (dict(noise_multiplier=1.0, sample_rate=-0.1), "sample_rate"),
        (dict(noise_multiplier="1.0", sample_rate=0.01), "noise_multiplier"),
        (dict(noise_multiplier=1.0, sample_rate=True), "sample_rate"),
    ]
    BAD_DELTAS = [0.0, 1.0, -1e-5, 1.5, float("nan"), float("inf"), None, "1e-5", True]
    BAD_EPSILONS = [-0.1, float("nan"), None, "1", True]

    # -- validation before mutation --------------------------------------------------
    @pytest.mark.parametrize("index", range(len(BAD_STEPS)))
    def test_bad_step_raises_naming_the_parameter_and_changes_nothing(self, index):
        kwargs, name = self.BAD_STEPS[index]
        acc = self.make()
        self.add_steps(acc, 1.0, 0.01, 10)
        before = self.snapshot(acc)
        with pytest.raises(ValueError, match=name):
            self.add_steps(acc, kwargs["noise_multiplier"], kwargs["sample_rate"], 1)
        assert self.snapshot(acc) == before

    @pytest.mark.parametrize("delta", BAD_DELTAS, ids=repr)
    def test_bad_delta_raises_naming_delta_and_changes_nothing(self, delta):
        acc = self.make()
        self.add_steps(acc, 1.0, 0.01, 10)
        before = self.snapshot(acc)
        with pytest.raises(ValueError, match="delta"):
            self.epsilon_bounds(acc, delta)
        assert self.snapshot(acc) == before

    @pytest.mark.parametrize("epsilon", BAD_EPSILONS, ids=repr)
    def test_bad_epsilon_raises_naming_epsilon_and_changes_nothing(self, epsilon):
        acc = self.make()
        self.add_steps(acc, 1.0, 0.01, 10)
        before = self.snapshot(acc)
        with pytest.raises(ValueError, match="epsilon"):
            self.delta_bounds(acc, epsilon)
        assert self.snapshot(acc) == before

    # -- what every answer is -------------------------------------------------------------
    def test_empty_history_spends_nothing(self):
        acc = self.make()
        assert self.epsilon_bounds(acc, 1e-5) == (0.0, 0.0)
        assert self.delta_bounds(acc, 0.5) == (0.0, 0.0)

    @pytest.mark.parametrize("sigma,q,steps", [(1.1, 0.01, 1000), (0.8, 0.05, 300),
                                               (3.0, 0.2, 50), (1.0, 1.0, 1)])
    def test_bounds_are_ordered_finite_and_never_nan(self, sigma, q, steps):
        acc = self.make()
        self.add_steps(acc, sigma, q, steps)
        for delta in (1e-3, 1e-5, 1e-8):
            lo, up = self.epsilon_bounds(acc, delta)
            assert 0.0 <= lo <= up < math.inf
        for eps in (0.0, 0.5, 2.0):
            lo, up = self.delta_bounds(acc, eps)
            assert 0.0 <= lo <= up <= 1.0

    def test_monotone_in_steps_and_in_delta(self):
        acc = self.make()
        previous = (0.0, 0.0)
        for _ in range(4):
            self.add_steps(acc, 1.0, 0.02, 100)
            now = self.epsilon_bounds(acc, 1e-5)
            assert now[0] >= previous[0] and now[1] >= previous[1]
            previous = now
        ups = [self.epsilon_bounds(acc, d)[1] for d in (1e-2, 1e-4, 1e-6, 1e-8)]
        assert ups == sorted(ups)
        dups = [self.delta_bounds(acc, e)[1] for e in (0.5, 1.0, 2.0, 4.0)]
        assert dups == sorted(dups, reverse=True)

    # -- closed forms -----------------------------------------------------------------------
    @pytest.mark.parametrize("sigma,steps", [(1.0, 1), (2.0, 100), (5.0, 1000)])
    def test_full_batch_steps_bracket_the_gaussian_closed_form(self, sigma, steps):
        """q = 1: T steps are the Gaussian mechanism with mu = SENS sqrt(G) / sigma, where
        G = ceil(T / STEPS_PER_GAUSSIAN) (G = T for one Gaussian per step)."""
        acc = self.make()
        self.add_steps(acc, sigma, 1.0, steps)
        gaussians = -(-steps // self.STEPS_PER_GAUSSIAN)
        mu = self.SENS * math.sqrt(gaussians) / sigma
        for delta in (1e-3, 1e-6, 1e-10):
            lo, up = self.epsilon_bounds(acc, delta)
            exact = gaussian_epsilon(delta, mu)
            assert lo <= exact * (1 + 1e-9) + 1e-12 and up >= exact * (1 - 1e-9)
            assert up <= exact * 1.01 + 1e-3
        for eps in (0.5, 2.0):
            lo, up = self.delta_bounds(acc, eps)
            exact = float(gaussian_delta(eps, mu))
            assert lo <= exact * (1 + 1e-9) and up >= exact * (1 - 1e-9)

    # -- determinism and round trips ------------------------------------------------------
    def test_same_history_same_bits_whether_queried_often_or_once(self):
        often = self.make()
        for _ in range(5):
            self.add_steps(often, 1.1, 0.01, 40)
            self.epsilon_bounds(often, 1e-5)
            self.delta_bounds(often, 1.0)
        self.add_steps(often, 0.9, 0.02, 30)
        once = self.make()
        self.add_steps(once, 1.1, 0.01, 200)
        self.add_steps(once, 0.9, 0.02, 30)
        for delta in (1e-5, 1e-7):
            assert self.epsilon_bounds(often, delta) == self.epsilon_bounds(once, delta)
        assert self.delta_bounds(often, 1.0) == self.delta_bounds(once, 1.0)

    def test_save_and_restore_give_the_same_bits_and_can_go_on(self):
        acc = self.make()
        self.add_steps(acc, 1.1, 0.01, 150)
        self.epsilon_bounds(acc, 1e-5)
        restored = self.restore(self.save(acc))
        assert self.epsilon_bounds(restored, 1e-5) == self.epsilon_bounds(acc, 1e-5)
        for a in (acc, restored):
            self.add_steps(a, 0.8, 0.02, 20)
        assert self.epsilon_bounds(restored, 1e-6) == self.epsilon_bounds(acc, 1e-6)
        assert self.delta_bounds(restored, 2.0) == self.delta_bounds(acc, 2.0)

    def test_pickle_and_deepcopy_keep_the_answers(self):
        acc = self.make()
        self.add_steps(acc, 1.1, 0.01, 150)
        expected = self.epsilon_bounds(acc, 1e-5)
        for clone in (pickle.loads(pickle.dumps(acc)), copy.deepcopy(acc)):
            assert self.epsilon_bounds(clone, 1e-5) == expected
            assert self.snapshot(clone) == self.snapshot(acc)
