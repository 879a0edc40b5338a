"""benchmarks/check_ctd.py, the independent reference the README cites where pb and the
peers disagree: it must reproduce the closed-form Gaussian and land inside pb's brackets."""
import importlib.util
import os

import pytest

from _closed_form import gaussian_epsilon
from pb_accountant import PrivacyBucketsAccountant


@pytest.fixture(scope="module")
def ctd():
    path = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "check_ctd.py")
    spec = importlib.util.spec_from_file_location("check_ctd", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
