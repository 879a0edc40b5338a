"""The paper's upper curve (Definition 9) at epsilons past 2^63 grid steps.

``PaperUpper`` cast eps / log f to int64 before clipping: from about eps = 2^63 log f
(6e17 on a grid of log f 1/16) the index wrapped to the most negative integer, so the
query read the first bucket and formed e^eps times the whole tail.  Where the curve's
relative error is 0 (a DiscretePair whose every finite atom lies in one bucket), that
is 0 * inf: NaN in ``delta_bounds``, which also made the best bounds (the minimum over
methods, and the lower bound taken at most the upper) NaN.  Elsewhere the paper bound
was the trivial 1 there.  The exact delta is enumerated with exact fractions.
"""
import math
from fractions import Fraction

import numpy as np
import pytest

from pb_accountant import DiscretePair, compose

HUGE = [1e17, 6e17, 1e18, 1e19, 1e100, 1e300, float(np.finfo(float).max)]


def exact_delta(a, b):
    """max over both directions of sum max(P - e^eps Q, 0), for eps past every finite
    loss: only the events one side cannot produce count (the doubles read exactly)."""
    ab = sum((Fraction(x) for x, y in zip(a, b) if y == 0 and x > 0), Fraction(0))
    ba = sum((Fraction(y) for x, y in zip(a, b) if x == 0 and y > 0), Fraction(0))
    return max(ab, ba)


@pytest.mark.parametrize("a,b", [((1e-100, 1.0), (1.0, 0.0)),
                                 ((5e-324, 1.0), (1.0, 0.0)),
                                 ((0.75, 0.25), (0.25, 0.75)),
                                 ((0.5, 0.5, 0.0), (0.25, 0.5, 0.25))])
@pytest.mark.parametrize("method", [None, "split", "grouped", "paper"])
def test_delta_at_huge_epsilon_is_bracketed_not_nan(a, b, method):
    pb = compose([(DiscretePair(a, b), 1)], methods=("split", "grouped", "paper"))
    # every finite loss is below 745 (ln 5e-324): these epsilons are past all of them
    exact = exact_delta(a, b)
    db = pb.delta_bounds(np.array(HUGE), method=method)
    lower, upper = np.asarray(db.lower), np.asarray(db.upper)
    assert not np.isnan(lower).any() and not np.isnan(upper).any()
    for lo, up in zip(lower, upper):
        assert 0.0 <= Fraction(float(lo)) <= exact <= Fraction(float(up)) <= 1
    if method == "paper" and exact == 0:
        # the curve's own constant, not the trivial 1 of the wrapped index
        assert float(np.max(upper)) < 1e-200
    for eps in HUGE:
        one = pb.delta_bounds(eps, method=method)
        assert not math.isnan(one.lower) and not math.isnan(one.upper)
        assert Fraction(one.lower) <= exact <= Fraction(one.upper)


def test_grid_squared_past_the_float_range_is_an_engine_limit():
    """A fixed 2-bucket grid whose squaring rule doubles log f about a thousand times
    (a loss atom of 170 ln 2 with 13 steps, the split method alone) reached a Grid of
    infinite losses: an internal ValueError from ``compose``.  It is an engine limit:
    the trivial bounds, valid, with the reason in the notes.  (The exact delta at
    epsilon 0, of the stored masses, is about 13 * 2^-120 = 9.8e-36, A||B.)"""
    pair = DiscretePair((2.0 ** -120, 1.0), (2.0 ** -290, 1.0))
    with pytest.warns(RuntimeWarning):
        pb = compose([(pair, 13)], number_of_buckets=2, methods=("split",))
        eb = pb.epsilon_bounds(1e-5)
        db = pb.delta_bounds(0.0)
    # (the pair's losses are bounded, pure DP: at a limit the best bounds keep the
    # history's largest total loss, 13 * 170 ln 2, as the dp_accounting adapter does)
    assert eb.lower == 0.0 and 13 * 170 * math.log(2.0) <= eb.upper <= 1531.8553
    assert db.lower == 0.0 and db.upper == 1.0
    assert any("engine limit" in n for n in eb.notes + db.notes)
