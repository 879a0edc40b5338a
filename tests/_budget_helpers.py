"""Shared helpers for the integration tests (tracker, guard, callbacks, CLI)."""
import warnings

from pb_accountant import PrivacyBucketsAccountant


def fresh_bounds(history, delta):
    """Bounds of ``history`` from a brand-new accountant (no caches shared with training)."""
    acc = PrivacyBucketsAccountant()
    acc.history = [tuple(h) for h in history]
    return acc.get_epsilon_bounds(delta)


def fresh_epsilon(sigma, q, steps, delta):
    return fresh_bounds([(sigma, q, steps)], delta)


def quiet_opacus_warnings():
    warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")
    warnings.filterwarnings("ignore", message=".*Full backward hook is firing.*")
    warnings.filterwarnings("ignore", message=".*Optimal order is the.*")
