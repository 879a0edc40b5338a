"""get_tradeoff_bounds says what its bound assumes, as the epsilon and delta queries do:
a recorded sample rate that the sizes contradict, and a fixed-size batch fraction read
from the rate, are in its notes for every sampler (the tight pairs' path dropped them),
on the engine-limit path too; the numbers are those of the sampler's pairs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.engine import compose_history
from pb_accountant.tradeoff import tradeoff_bounds

MISMATCH = "differs from batch_size/dataset_size"


@pytest.mark.parametrize("sampler,relation", [
    ("poisson", "add_remove"), ("poisson", "replace_one"), ("poisson", "replace_special"),
    ("fixed_size", "add_remove"), ("fixed_size", "replace_one"),
    ("fixed_size", "replace_special"), ("shuffle", "replace_special")])
def test_a_contradicted_rate_is_flagged_by_the_tradeoff_query(sampler, relation):
    acc = PrivacyBucketsAccountant(sampler=sampler, neighbouring=relation,
                                   dataset_size=100, batch_size=10)
    acc.history = [(1.0, 0.37, 20)]
    eps_notes = acc.get_epsilon_bounds(1e-5).notes
    tb = acc.get_tradeoff_bounds([0.01, 0.1])
    assert any(MISMATCH in n for n in eps_notes)
    assert any(MISMATCH in n for n in tb.notes), tb.notes
    # the numbers are the sampler's pairs' (fixed_size: b/n = 0.1, not the rate 0.37)
    sp = acc._sampled(acc.history)
    methods = ("split",) if sp.lower is not None else ("split", "grouped")
    ref = tradeoff_bounds(compose_history(acc._composer, list(sp.upper), None, methods),
                          [0.01, 0.1])
    np.testing.assert_array_equal(tb.tpr_upper, ref.tpr_upper)
    np.testing.assert_array_equal(tb.tpr_lower, ref.tpr_lower)


def test_a_fraction_read_from_the_rate_is_said():
    acc = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one")
    acc.history = [(1.0, 0.1, 20)]
    assert any("batch fraction b/n is taken from the history's sample_rate" in n
               for n in acc.get_tradeoff_bounds([0.1]).notes)


def test_plain_poisson_has_no_sampler_notes():
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    assert acc.get_tradeoff_bounds([0.1]).notes == acc.get_epsilon_bounds(1e-5).notes == ()


def test_the_engine_limit_path_keeps_the_sampler_notes(monkeypatch):
    import pb_accountant.tradeoff as tradeoff

    def fail(*args, **kwargs):
        raise MemoryError("test")

    monkeypatch.setattr(tradeoff, "tradeoff_bounds", fail)
    acc = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one",
                                   dataset_size=100, batch_size=10)
    acc.history = [(1.0, 0.37, 20)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tb = acc.get_tradeoff_bounds([0.1])
    assert np.all(tb.tpr_upper == 1.0) or np.all(tb.tpr_upper >= 0.1)
    assert any(MISMATCH in n for n in tb.notes)
    assert len(tb.notes) >= 2                         # the engine limit's reason first
