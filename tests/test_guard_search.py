"""BudgetGuard's search for the last step that fits ends in a bounded number of queries,
and a pending step count the accountant cannot hold is a ValueError, not a stop.

Most tests use an accountant whose epsilon is exact and instant at any step count, so
the number of certified queries (not time) is what is checked; a test that would hang
without the bound fails at ``QUERY_LIMIT`` queries instead.
"""
import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant._validation import MAX_STEPS
from pb_accountant.integrations import BudgetExceededError, BudgetGuard
from pb_accountant.results import EpsilonBounds

DELTA = 1e-5
QUERY_LIMIT = 150              # doubling then bisection to MAX_STEPS: about 100 queries
UNIT = 2.0 ** -40              # epsilon per step of LinearAccountant (exact in floats)


class LinearAccountant:
    """eps_upper = per_step x (steps with sample rate > 0): exact at any step count."""

    def __init__(self, history, per_step=UNIT):
        self.history = list(history)
        self.per_step = per_step

    def _epsilon(self, history):
        return self.per_step * sum(count for _, q, count in history if q)

    def get_epsilon(self, delta):
        return self._epsilon(self.history)

    def step(self, *, noise_multiplier, sample_rate):
        last = self.history[-1] if self.history else None
        if last is not None and last[:2] == (noise_multiplier, sample_rate):
            self.history[-1] = (last[0], last[1], last[2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def epsilon_after(self, delta, *, noise_multiplier, sample_rate, num_steps=1):
        upper = self._epsilon(self.history + [(noise_multiplier, sample_rate, num_steps)])
        return EpsilonBounds(delta, 0.0, upper, method="linear")


class FlatAccountant(LinearAccountant):
    """Every step after the history costs nothing: the bound stops growing."""

    def epsilon_after(self, delta, *, noise_multiplier, sample_rate, num_steps=1):
        return EpsilonBounds(delta, 0.0, self.get_epsilon(delta), method="flat")


def limit_queries(guard, limit=QUERY_LIMIT):
    """Fail (instead of hanging) once ``guard`` has asked more than ``limit`` queries."""
    query = guard._query

    def limited(*args):
        assert guard.queries < limit, f"more than {limit} accountant queries"
        return query(*args)

    guard._query = limited
    return guard


def test_the_last_fitting_step_is_exact_in_a_bounded_number_of_queries():
    last = 7 * 10 ** 14 + 12345                  # eps(last) <= budget < eps(last + 1)
    taken = last - 10 ** 9                       # within the margin: the search runs
    acc = LinearAccountant([(1.0, 0.5, taken)])
    guard = limit_queries(BudgetGuard(acc, (last + 0.5) * UNIT, DELTA, mode="stop"))
    assert guard.check(noise_multiplier=1.0, sample_rate=0.5)
    assert guard._plan.covered == last - taken
    assert guard.queries <= QUERY_LIMIT
    queries = guard.queries
    for _ in range(1000):                        # covered: no more queries
        assert guard.check(noise_multiplier=1.0, sample_rate=0.5)
        acc.step(noise_multiplier=1.0, sample_rate=0.5)
    assert guard.queries == queries


def test_a_bound_that_stops_growing_ends_the_search_at_max_steps():
    taken = 500
    acc = FlatAccountant([(1.0, 0.5, taken)])
    budget = acc.get_epsilon(DELTA)              # every further step lands on the budget
    guard = limit_queries(BudgetGuard(acc, budget, DELTA, mode="stop"))
    assert guard.check(noise_multiplier=1.0, sample_rate=0.5)
    assert guard._plan.covered == MAX_STEPS - taken
    assert guard.allows(noise_multiplier=1.0, sample_rate=0.5)
    assert not guard.errors and not guard.should_stop


def test_a_zero_sample_rate_never_spends_budget_and_needs_no_search():
    """The review's case: a pending step at sample rate 0 just inside the margin."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    budget = acc.get_epsilon(DELTA) * (1 + 1e-4)
    guard = limit_queries(BudgetGuard(acc, budget, DELTA), limit=4)
    assert guard.check(noise_multiplier=1.0, sample_rate=0.0)
    queries = guard.queries
    for _ in range(200):
        acc.step(noise_multiplier=1.0, sample_rate=0.0)
        assert guard.check(noise_multiplier=1.0, sample_rate=0.0)
    assert guard.queries == queries and not guard.errors
    assert acc.get_epsilon(DELTA) <= budget


def test_a_slowly_growing_real_bound_is_searched_in_few_queries():
    """The review's realistic case (3,477 queries before): a huge-noise step near the budget."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(0.8, 0.01, 2000)]
    budget = acc.get_epsilon(DELTA) * (1 + 1e-4)
    guard = limit_queries(BudgetGuard(acc, budget, DELTA))
    assert guard.check(noise_multiplier=20.0, sample_rate=1e-5)
    assert guard.queries <= QUERY_LIMIT and not guard.errors
    covered = guard._plan.covered
    assert acc.epsilon_after(DELTA, noise_multiplier=20.0, sample_rate=1e-5,
                             num_steps=covered).upper <= budget


# -- num_steps beyond what the accountant can hold: a user error -------------------------

@pytest.mark.parametrize("mode", ["raise", "stop"])
def test_too_many_pending_steps_is_a_value_error_before_any_state_change(mode):
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    guard = BudgetGuard(acc, 5.0, DELTA, mode=mode)
    for bad in (2 * 10 ** 15, MAX_STEPS - 99, 0, -3, 1.5, float("inf"), "2"):
        with pytest.raises(ValueError, match="num_steps") as info:
            guard.check(noise_multiplier=1.0, sample_rate=0.01, num_steps=bad)
        with pytest.raises(ValueError, match="num_steps"):
            guard.allows(noise_multiplier=1.0, sample_rate=0.01, num_steps=bad)
    assert str(MAX_STEPS - 100) in str(info.value)         # the valid range is named
    assert not guard.should_stop and guard.refused_steps == 0
    assert guard.errors == [] and guard.queries == 0 and guard.refused is None
    assert acc.history == [(1.0, 0.01, 100)]


def test_a_stopped_guard_does_not_count_a_user_error_as_a_refused_step():
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, 0.01, DELTA, mode="stop")
    assert not guard.check(noise_multiplier=1.0, sample_rate=0.1)
    assert guard.should_stop and guard.refused_steps == 1
    with pytest.raises(ValueError, match="num_steps"):
        guard.check(noise_multiplier=1.0, sample_rate=0.1, num_steps=2 * 10 ** 15)
    with pytest.raises(ValueError, match="num_steps"):
        guard.allows(noise_multiplier=1.0, sample_rate=0.1, num_steps=-1)
    assert guard.refused_steps == 1


def test_every_n_steps_beyond_max_steps_is_refused_at_construction():
    with pytest.raises(ValueError, match="every_n_steps"):
        BudgetGuard(PrivacyBucketsAccountant(), 1.0, DELTA, every_n_steps=MAX_STEPS + 1)


def test_a_large_valid_step_count_is_still_certified():
    acc = LinearAccountant([(1.0, 0.5, 10)])
    guard = BudgetGuard(acc, 100.0, DELTA, mode="raise")
    assert guard.check(noise_multiplier=1.0, sample_rate=0.5, num_steps=10 ** 9)
    with pytest.raises(BudgetExceededError):
        guard.check(noise_multiplier=1.0, sample_rate=0.5, num_steps=MAX_STEPS - 10)
    assert guard.errors == []


# -- accountants without epsilon_after (Opacus's): a copy is stepped ---------------------

class OpacusStyleAccountant:
    """Opacus's history convention, epsilon from the history; counts its step() calls."""

    steps_called = 0

    def __init__(self):
        self.history = []

    def step(self, *, noise_multiplier, sample_rate):
        type(self).steps_called += 1
        last = self.history[-1] if self.history else None
        if last is not None and last[:2] == (noise_multiplier, sample_rate):
            self.history[-1] = (last[0], last[1], last[2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def get_epsilon(self, delta):
        return UNIT * sum(count for _, q, count in self.history if q)


def test_a_look_ahead_of_an_opacus_style_accountant_steps_its_copy_once():
    from pb_accountant.integrations._common import epsilon_after
    acc = OpacusStyleAccountant()
    acc.step(noise_multiplier=1.0, sample_rate=0.5)
    OpacusStyleAccountant.steps_called = 0
    bounds = epsilon_after(acc, DELTA, 2.0, 0.5, 10 ** 6)
    assert bounds.upper == UNIT * (1 + 10 ** 6)
    assert OpacusStyleAccountant.steps_called == 1
    assert acc.history == [(1.0, 0.5, 1)]                 # the original is untouched
    guard = limit_queries(BudgetGuard(acc, (10 ** 9 + 0.5) * UNIT, DELTA, mode="stop"))
    acc.history = [(2.0, 0.5, 10 ** 9 - 10 ** 5)]
    assert guard.check(noise_multiplier=2.0, sample_rate=0.5)
    assert guard._plan.covered == 10 ** 5


def test_an_opacus_accountant_look_ahead_equals_stepping_a_copy():
    rdp = pytest.importorskip("opacus.accountants")
    import copy
    from pb_accountant.integrations._common import epsilon_after
    acc = rdp.RDPAccountant()
    for _ in range(3):
        acc.step(noise_multiplier=1.0, sample_rate=0.01)
    stepped = copy.deepcopy(acc)
    for _ in range(500):
        stepped.step(noise_multiplier=1.2, sample_rate=0.01)
    assert epsilon_after(acc, DELTA, 1.2, 0.01, 500).upper == stepped.get_epsilon(DELTA)


def test_a_bound_that_barely_grows_never_raises_out_of_check():
    """A cheap phase after a costly one (20 steps at sigma 1, q 0.5, then sigma 100,
    q 0.001 under a budget of 100): the look-ahead's power law through two bounds
    differing by 1e-6 put the budget at (100 / 15.1)^(1e5) steps, and that power
    raised OverflowError out of check() at step 192 of the training loop."""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.5, 20)]
    guard = BudgetGuard(acc, 100.0, DELTA, mode="stop")
    for _ in range(400):
        assert guard.check(noise_multiplier=100.0, sample_rate=1e-3)
        acc.step(noise_multiplier=100.0, sample_rate=1e-3)
    assert acc.get_epsilon(DELTA) <= 100.0 and guard.queries < 20 and not guard.errors
