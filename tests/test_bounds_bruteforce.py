"""Property test: every bound brackets brute-force products of small discrete pairs."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pb_accountant import DiscretePair, compose
from conftest import hockey_stick, product_pair

ALL_METHODS = ("split", "grouped", "paper")


@st.composite
def discrete_pair(draw):
    k = draw(st.integers(2, 4))
    a = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k)))
    b = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k)))
    if draw(st.booleans()):
        b[draw(st.integers(0, k - 1))] = 0.0          # a distinguishing event
    a = a + 1e-3
    b = b + (b > 0) * 1e-3
    if b.sum() == 0:
        b[0] = 1.0
    a, b = a / a.sum(), b / b.sum()
    return a, b


@st.composite
def sequence(draw):
    pairs = draw(st.lists(discrete_pair(), min_size=1, max_size=2))
    counts = [draw(st.integers(1, 3)) for _ in pairs]
    total = sum(counts)
    if total > 6:
        counts = [1] * len(pairs)
    fixed = draw(st.sampled_from([None, 64, 200]))
    return pairs, counts, fixed


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence(), st.lists(st.floats(0.0, 3.0), min_size=3, max_size=3))
def test_bounds_bracket_bruteforce(seq, epsilons):
    pairs, counts, fixed = seq
    mechs = [(DiscretePair(tuple(a), tuple(b)), c) for (a, b), c in zip(pairs, counts)]
    pb = compose(mechs, methods=ALL_METHODS, number_of_buckets=fixed)
    flat = [p for p, c in zip(pairs, counts) for _ in range(c)]
    pa, pbv = product_pair(flat)
    eps = np.array(sorted(epsilons))
    exact = np.array([hockey_stick(pa, pbv, e) for e in eps])
    for method in ("split", "paper"):
        up = pb.delta_upper(eps, method)
        assert np.all(up >= exact - 1e-15), (method, up, exact)
    for method in ("grouped", "paper"):
        lo = pb.delta_lower(eps, method)
        assert np.all(lo <= exact + 1e-15), (method, lo, exact)
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact + 1e-15) and np.all(exact <= db.upper + 1e-15)
    assert np.all(np.isfinite(db.lower)) and np.all(np.isfinite(db.upper))
    # the epsilon side: the returned points are certified
    delta = float(np.clip(exact[1], 1e-9, 0.5))
    eb = pb.epsilon_bounds(delta)
    assert 0.0 <= eb.lower <= eb.upper
    if math.isfinite(eb.upper):
        assert hockey_stick(pa, pbv, eb.upper) <= delta + 1e-15
    if math.isinf(eb.lower):                         # certified: delta(eps) > delta for all eps
        assert hockey_stick(pa, pbv, 700.0) > delta - 1e-15
    elif eb.lower > 0:
        assert hockey_stick(pa, pbv, eb.lower) > delta - 1e-15
