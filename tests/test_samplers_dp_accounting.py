"""Bracketing against dp_accounting for the new samplers and relations.

dp_accounting's PLD gives a pessimistic (upper) and an optimistic (lower) estimate of the
same pair; our certified lower bound must lie below the pessimistic one and our
certified upper bound above the optimistic one, and the two must agree closely (the
pairs are the same).  Conventions: contributions clipped to norm 1, so a substitution
moves the sum by up to 2 -- dp_accounting's REPLACE_ONE Poisson pair
(1-q) N(0) + q N(-1) vs (1-q) N(0) + q N(1); its RDP accountant for
SampledWithoutReplacementDpEvent takes the Gaussian's own RDP alpha / (2 sigma^2), a
sum that moves by at most 1, i.e. our noise multiplier sigma is its sigma / 2.
"""
import pytest

from pb_accountant import PrivacyBucketsAccountant

pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
dpa = pytest.importorskip("dp_accounting")

NR = dpa.NeighboringRelation
DELTA = 1e-5


def pld_epsilons(make, steps, delta=DELTA):
    """(optimistic, pessimistic) PLD epsilon of ``make(pessimistic, connect_dots)``."""
    out = []
    for pessimistic in (False, True):
        pld = make(pessimistic).self_compose(steps)
        out.append(pld.get_epsilon_for_delta(delta))
    return tuple(out)


def accountant(history, **assumptions):
    acc = PrivacyBucketsAccountant(**assumptions)
    acc.history = history
    return acc


POISSON_REPLACE = [(1.0, 0.01, 1000), (0.8, 0.1, 100), (2.0, 0.5, 10), (0.6, 0.005, 3000),
                   (1.5, 1.0, 5)]


@pytest.mark.parametrize("sigma,q,steps", POISSON_REPLACE)
def test_poisson_replace_one_brackets_dp_accounting(sigma, q, steps):
    optimistic, pessimistic = pld_epsilons(
        lambda p: pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=q, neighboring_relation=NR.REPLACE_ONE,
            value_discretization_interval=1e-4, pessimistic_estimate=p,
            use_connect_dots=p), steps)
    b = accountant([(sigma, q, steps)], neighbouring="replace_one").get_epsilon_bounds(DELTA)
    assert b.sampler == "poisson" and b.neighbouring == "replace_one"
    assert b.lower <= pessimistic
    assert b.upper >= optimistic
    assert b.upper <= pessimistic * (1 + 2e-3)
    assert b.lower >= optimistic * (1 - 2e-3)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 500), (2.0, 0.1, 100)])
def test_poisson_replace_special_is_add_remove(sigma, q, steps):
    """For the Gaussian the special element contributes 0: the add/remove pair."""
    a = accountant([(sigma, q, steps)]).get_epsilon_bounds(DELTA)
    s = accountant([(sigma, q, steps)], neighbouring="replace_special").get_epsilon_bounds(DELTA)
    assert (a.lower, a.upper) == (s.lower, s.upper)
    optimistic, pessimistic = pld_epsilons(
        lambda p: pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=q, neighboring_relation=NR.REPLACE_SPECIAL,
            value_discretization_interval=1e-4, pessimistic_estimate=p,
            use_connect_dots=p), steps)
    assert s.lower <= pessimistic and s.upper >= optimistic


FIXED = [(1000, 10, 1.0, 500), (50_000, 256, 1.1, 1000), (200, 50, 3.0, 40)]


@pytest.mark.parametrize("relation", ["replace_one", "add_remove"])
@pytest.mark.parametrize("n,b,sigma,steps", FIXED)
def test_fixed_size_brackets_the_without_replacement_pair(relation, n, b, sigma, steps):
    """Sampling without replacement: (1-g) N(0) + g N(2) vs N(0), g = b/n (Zhu, Dong,
    Wang 2022), which is dp_accounting's sampled Gaussian with sensitivity 2."""
    g = b / n
    optimistic, pessimistic = pld_epsilons(
        lambda p: pld_lib.from_gaussian_mechanism(
            sigma, sensitivity=2.0, sampling_prob=g, value_discretization_interval=1e-4,
            pessimistic_estimate=p, use_connect_dots=p), steps)
    bounds = accountant([(sigma, g, steps)], sampler="fixed_size", neighbouring=relation,
                        dataset_size=n, batch_size=b).get_epsilon_bounds(DELTA)
    assert bounds.sampler == "fixed_size" and bounds.neighbouring == relation
    assert bounds.lower <= pessimistic and bounds.upper >= optimistic
    assert bounds.lower >= optimistic * (1 - 2e-3)          # the realised pair: tight
    if relation == "add_remove":
        assert bounds.upper <= pessimistic * (1 + 2e-3)
    else:
        # replace_one: the pair with its mirror (samplers.FIXED_SIZE_REPLACE_NOTE), a
        # sound upper bound, looser than the pair alone
        from pb_accountant.samplers import FIXED_SIZE_REPLACE_NOTE
        assert FIXED_SIZE_REPLACE_NOTE in bounds.notes
        assert pessimistic < bounds.upper < 2.0 * pessimistic


@pytest.mark.parametrize("n,b,sigma,steps", FIXED)
def test_fixed_size_replace_one_below_dp_accounting_rdp(n, b, sigma, steps):
    """dp_accounting's RDP bound for SampledWithoutReplacementDpEvent (REPLACE_ONE) is
    another upper bound on the same quantity (its sigma is ours / 2, module docstring):
    the realised lower bound is at most it."""
    rdp = dpa.rdp.RdpAccountant(neighboring_relation=NR.REPLACE_ONE)
    rdp.compose(dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma / 2)), steps))
    bounds = accountant([(sigma, b / n, steps)], sampler="fixed_size",
                        neighbouring="replace_one", dataset_size=n,
                        batch_size=b).get_epsilon_bounds(DELTA)
    assert bounds.lower <= rdp.get_epsilon(DELTA) and bounds.lower <= bounds.upper


@pytest.mark.parametrize("relation,sensitivity", [("replace_special", 1.0), ("replace_one", 2.0)])
def test_shuffle_upper_is_one_gaussian_per_epoch(relation, sensitivity):
    """The shuffle upper bound is the composition of one unamplified Gaussian per epoch
    (a partial epoch counts as one): dp_accounting's Gaussian PLD, same sensitivity."""
    n, b, sigma = 1000, 100, 4.0
    epochs, steps = 6, 55                       # 5 full epochs and a partial one
    optimistic, pessimistic = pld_epsilons(
        lambda p: pld_lib.from_gaussian_mechanism(
            sigma, sensitivity=sensitivity, value_discretization_interval=1e-4,
            pessimistic_estimate=p, use_connect_dots=p), epochs)
    bounds = accountant([(sigma, b / n, steps)], sampler="shuffle", neighbouring=relation,
                        dataset_size=n, batch_size=b).get_epsilon_bounds(DELTA)
    assert bounds.upper >= optimistic and bounds.upper <= pessimistic * (1 + 2e-3)
    assert 0.0 < bounds.lower <= bounds.upper
