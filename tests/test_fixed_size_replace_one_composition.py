"""fixed_size under replace_one: the composed upper bound holds the delta of a
realisable run (an independent review found it did not).

The dataset pair: every other example contributes 0, x = +1 against x' = -1.  With b of
n drawn without replacement the step's sum is +-1 when x's slot is drawn (probability
g = b/n) and 0 otherwise, so each step is exactly the Poisson replace_one pair
(1-g) N(0) + g N(1) vs (1-g) N(0) + g N(-1) at q = g, whose bracket the library certifies
tightly.  The fixed_size pair (1-g) N(0) + g N(2) vs N(0) dominates one step only for
e^eps >= 1 in each direction; composed (both directions taken separately) it fell below
this run at small eps: n = 10, b = 9, sigma 1, two steps, exact delta(0) = 0.776277
(2-D quadrature of the product of the two mixtures) against a certified upper 0.770903.
With mixed noise (one step at sigma 0.2, then ten at 2.0, n = 3, b = 2) the gap reached
delta 0.776 against 0.749 at eps = 2.  The upper bound now composes each step's
symmetrised pair (samplers.FIXED_SIZE_REPLACE_NOTE; tests/test_fixed_size_symmetrised.py
checks it against this run's exact delta at eps 0 too).
"""
from __future__ import annotations

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant

CASES = [
    # (n, b, history, epsilons)
    (10, 9, [(1.0, 0.9, 2)], [0.0, 0.25]),
    (3, 2, [(0.2, 2 / 3, 1), (2.0, 2 / 3, 10)], [0.0, 0.5, 1.0, 2.0]),
]


@pytest.mark.parametrize("n,b,history,eps", CASES)
def test_fixed_size_replace_one_upper_holds_the_symmetric_run(n, b, history, eps):
    fixed = PrivacyBucketsAccountant(sampler="fixed_size", neighbouring="replace_one",
                                     dataset_size=n, batch_size=b)
    fixed.history = history
    # the realised run's own certified lower bound (its steps are this pair exactly)
    realised = PrivacyBucketsAccountant(sampler="poisson", neighbouring="replace_one")
    realised.history = [(s, b / n, c) for s, _, c in history]
    upper = np.asarray(fixed.get_delta_bounds(np.array(eps)).upper)
    lower = np.asarray(realised.get_delta_bounds(np.array(eps)).lower)
    assert np.all(upper >= lower), (upper, lower)
