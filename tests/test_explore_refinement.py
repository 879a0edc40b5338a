"""benchmarks/explore_refinement.py, which docs/method.md §3 cites for why both
resolutions are halved together: its policy costs, on hand-made measurements."""
import pytest

from _benchmarks import load_benchmark


@pytest.fixture(scope="module")
def explore():
    return load_benchmark("explore_refinement")


def test_policy_costs_count_every_pass(explore):
    """Costs in first-pass units: the first pass, then each refinement a policy runs; a
    refinement that misses the target is paid for and followed by halving both."""
    aim = 4e-4
    row = {"F/2": (1.2, 3e-4), "L/2": (1.1, 5e-4), "B/2": (1.6, 1e-4)}
    costs = explore.policy_costs(row, aim)
    assert costs == pytest.approx({"engine": 2.6, "F/2 first": 2.2,
                                   "L/2 first": 1 + 1.1 + 1.6, "oracle": 2.2})
    # halving both misses too: a second refinement (LEVEL_TWO) follows
    row = {"F/2": (1.2, 9e-4), "L/2": (1.1, 9e-4), "B/2": (1.6, 5e-4)}
    costs = explore.policy_costs(row, aim)
    both = 1.6 + explore.LEVEL_TWO
    assert costs == pytest.approx({"engine": 1 + both, "F/2 first": 1 + 1.2 + both,
                                   "L/2 first": 1 + 1.1 + both, "oracle": 1 + both})
