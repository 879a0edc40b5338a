"""benchmarks/check_ctd.py, the independent reference the README cites where pb and the
peers disagree: it must reproduce the closed-form Gaussian and land inside pb's brackets."""
import pytest

from _benchmarks import load_benchmark
from _closed_form import gaussian_epsilon
from pb_accountant import PrivacyBucketsAccountant


@pytest.fixture(scope="module")
def ctd():
    return load_benchmark("check_ctd")


@pytest.mark.parametrize("sigma, steps, delta", [(2.0, 100, 1e-10), (1.0, 10, 1e-5)])
def test_gaussian_composition_from_above_and_close(ctd, sigma, steps, delta):
    exact = gaussian_epsilon(delta, steps ** 0.5 / sigma)
    history = [(sigma, 1.0, steps)]
    est, counted = ctd.epsilon_ctd(history, delta, 1e-3, ctd.tail_end(history, delta), exact)
    assert counted < 1e-6 * delta
    # connect-the-dots dominates the true pair: its epsilon is at or above the exact one
    assert exact * (1 - 1e-9) <= est <= exact * (1 + 1e-5)


@pytest.mark.parametrize("history, delta", [([(1.0, 0.01, 1000)], 1e-12),
                                            ([(0.9, 6.267e-4, 2533)], 8.7e-12),
                                            ([(1.2, 0.02, 300), (0.8, 0.01, 200)], 1e-8)])
def test_inside_pb_bracket(ctd, history, delta):
    acc = PrivacyBucketsAccountant()
    acc.history = history
    b = acc.get_epsilon_bounds(delta)
    est, counted = ctd.epsilon_ctd(history, delta, 2e-5, ctd.tail_end(history, delta), b.upper)
    assert counted < 1e-3 * delta
    assert b.lower <= est <= b.upper


def test_a_large_tilt_keeps_the_entries_near_epsilon(ctd):
    """One step at sigma 3.5707, q 1.39e-3, delta 6.6e-15 (epsilon 0.0071, tilt 1e3):
    the rows used to be scaled by the largest e^{lam t} on the grid (t up to tmax 4), so
    every entry near epsilon underflowed and the estimate fell 1.3e-4 below the closed
    form, 0.007119732239614527 (mpmath, 50 digits; confirmed by quadrature).  Tilted in
    log space it is above it, and close."""
    history, delta = [(3.570738182218979, 0.0013910781368195672, 1)], 6.557329963658316e-15
    exact = 0.007119732239614527
    est, _ = ctd.epsilon_ctd(history, delta, 2e-6, ctd.tail_end(history, delta), exact)
    assert exact * (1 - 1e-9) <= est <= exact * (1 + 1e-6)


def test_a_cut_that_takes_most_of_the_tilted_mass_does_not_underflow_the_rows(ctd):
    """sigma 0.442, q 0.975, 48,945 steps, delta 3.3e-12 (epsilon 1.2e5): the high-end
    cut took most of the tilted mass at every squaring, the rows shrank to 1e-175 and
    the tool raised IndexError; kept at sum 1 it converges into pb's bracket."""
    history, delta = [(0.4421645730448022, 0.9745458909050497, 48945)], 3.2932622314200485e-12
    acc = PrivacyBucketsAccountant()
    acc.history = history
    b = acc.get_epsilon_bounds(delta)
    tmax = ctd.tail_end(history, delta)
    coarse, fine = (ctd.epsilon_ctd(history, delta, h, tmax, b.upper)[0] for h in (0.025, 0.0125))
    assert b.lower <= fine - (coarse - fine) / 3 <= fine <= b.upper
