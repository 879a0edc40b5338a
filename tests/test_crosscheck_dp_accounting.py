"""Cross-checks against dp_accounting's PLD accountant on DP-SGD settings."""
import pytest

from pb_accountant import SubsampledGaussian, compose

pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")

SETTINGS = [  # sigma, q, steps, delta
    (1.1, 0.00512, 9766, 1e-5),
    (3.0, 0.08192, 2500, 1e-5),
    (1.5, 0.04, 2249, 1e-5),
    (0.9, 0.02, 500, 1e-6),
    (2.0, 0.2, 50, 1e-5),
    (0.6, 0.005, 3000, 1e-5),
]


def pld_epsilon(sigma, q, steps, delta, pessimistic):
    pld = pld_lib.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=1e-4,
        pessimistic_estimate=pessimistic, use_connect_dots=pessimistic)
    return pld.self_compose(steps).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("sigma,q,steps,delta", SETTINGS)
def test_brackets_dp_accounting(sigma, q, steps, delta):
    b = compose([(SubsampledGaussian(sigma, q), steps)], delta=delta).epsilon_bounds(delta)
    pessimistic = pld_epsilon(sigma, q, steps, delta, True)
    optimistic = pld_epsilon(sigma, q, steps, delta, False)
    assert b.lower <= pessimistic
    assert b.upper >= optimistic
    assert b.upper <= pessimistic * 1.001          # as tight as the peer, within 0.1%
    assert b.width < 1e-3


def test_dp_accounting_published_value():
    """dp_accounting's test: Poisson q 0.2, sigma 0.5, 3 compositions: delta(1) = 0.15594."""
    db = compose([(SubsampledGaussian(0.5, 0.2), 3)]).delta_bounds(1.0)
    assert db.lower <= 0.15594 + 5e-6 and db.upper >= 0.15594 - 5e-6
    assert db.upper - db.lower < 1e-3
