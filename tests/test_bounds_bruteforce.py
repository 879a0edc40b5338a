"""Property test: every bound brackets brute-force products of small discrete pairs.

Tolerances are relative (1e-12 of the value) plus the reference's own rounding error
and a 1e-300 floor, so deltas far below 1e-15 are checked too (the cases near 1e-14
below would pass any absolute 1e-15 tolerance whatever the bounds said).
"""
import math

import numpy as np
import pytest

from _optional import HealthCheck, given, settings, st
from pb_accountant import DiscretePair, compose
from pb_accountant.composition import THREE_QUARTER_LEVEL, Composer
from conftest import product_pair

ALL_METHODS = ("split", "grouped", "paper")
_U = 2.0 ** -53
REL = 1e-12
FLOOR = 1e-300


def hockey_stick_with_error(pa, pb, eps):
    """(delta, bound on the reference's rounding error): max of both directions of
    sum max(0, P - e^eps Q), summed exactly (fsum); the error bound counts the terms
    that are, or may be, positive, each at a few units of its operands."""
    e = math.exp(eps)
    values, errors = [], []
    for x, y in ((pa, pb), (pb, pa)):
        ey = e * y
        diff = x - ey
        values.append(math.fsum(np.maximum(diff, 0.0).tolist()))
        near = x >= ey * (1.0 - 8 * _U)
        errors.append(math.fsum((8 * _U * (x[near] + ey[near])).tolist()))
    k = int(np.argmax(values))
    return values[k], max(errors)


def slack(value, ref_error):
    return REL * abs(value) + ref_error + FLOOR


def check_brackets(pairs, counts, fixed, epsilons, composer=None):
    mechs = [(DiscretePair(tuple(a), tuple(b)), c) for (a, b), c in zip(pairs, counts)]
    pb = compose(mechs, methods=ALL_METHODS, number_of_buckets=fixed, composer=composer)
    flat = [p for p, c in zip(pairs, counts) for _ in range(c)]
    pa, pbv = product_pair(flat)
    eps = np.array(sorted(epsilons))
    ref = [hockey_stick_with_error(pa, pbv, e) for e in eps]
    exact = np.array([r[0] for r in ref])
    tol = np.array([slack(v, err) for v, err in ref])
    for method in ("split", "paper"):
        up = pb.delta_upper(eps, method)
        assert np.all(up >= exact - tol), (method, up, exact)
    for method in ("grouped", "paper"):
        lo = pb.delta_lower(eps, method)
        assert np.all(lo <= exact + tol), (method, lo, exact)
    db = pb.delta_bounds(eps)
    assert np.all(db.lower <= exact + tol) and np.all(exact <= db.upper + tol)
    assert np.all(np.isfinite(db.lower)) and np.all(np.isfinite(db.upper))
    # the epsilon side: the returned points are certified
    delta = float(np.clip(exact[1], 1e-300, 0.5))
    eb = pb.epsilon_bounds(delta)
    assert 0.0 <= eb.lower <= eb.upper
    if math.isfinite(eb.upper):
        at, err = hockey_stick_with_error(pa, pbv, eb.upper)
        assert at <= delta + slack(delta, err), (eb, at, delta)
    if math.isinf(eb.lower):                         # certified: delta(eps) > delta for all eps
        at, err = hockey_stick_with_error(pa, pbv, 700.0)
        assert at > delta - slack(delta, err)
    elif eb.lower > 0:
        at, err = hockey_stick_with_error(pa, pbv, eb.lower)
        assert at > delta - slack(delta, err), (eb, at, delta)
    return exact


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
    if draw(st.booleans()):                           # a rare event: deltas near 1e-14
        tiny = draw(st.sampled_from([1e-14, 3e-15, 1e-13]))
        j = draw(st.integers(0, k - 1))
        a = a * (1.0 - tiny) + tiny * (np.arange(k) == j)
        b = b * (1.0 - tiny * draw(st.sampled_from([0.0, 0.1, 0.5])))
        b[j] = tiny * 0.1 if b[j] == 0 else b[j]
        b = b / b.sum()
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
    check_brackets(pairs, counts, fixed, epsilons)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence(), st.lists(st.floats(0.0, 3.0), min_size=3, max_size=3))
def test_three_quarter_grids_bracket_bruteforce(seq, epsilons):
    """The grids between two halvings (spacings 3/4 times powers of two,
    ``Composer.refined``) bracket the same products."""
    pairs, counts, _ = seq
    check_brackets(pairs, counts, None, epsilons,
                   composer=Composer().refined(THREE_QUARTER_LEVEL))


def _rare(p_event, q_event):
    """A two-outcome pair whose distinguishing mass is tiny: delta near p_event."""
    return (np.array([1.0 - p_event, p_event]), np.array([1.0 - q_event, q_event]))


@pytest.mark.parametrize("fixed", [None, 64, 200])
@pytest.mark.parametrize("pairs,counts", [
    ([_rare(1e-14, 0.0)], [1]),                       # delta = 1e-14 at every epsilon
    ([_rare(1e-14, 0.0)], [3]),                       # about 3e-14
    ([_rare(3e-14, 1e-15)], [2]),                     # finite loss, delta near 5e-14
    ([_rare(1e-14, 0.0), _rare(0.25, 0.2)], [1, 2]),  # tiny mass next to ordinary losses
])
def test_bounds_bracket_deltas_near_1e_14(pairs, counts, fixed):
    exact = check_brackets(pairs, counts, fixed, [0.0, 0.5, 2.0])
    if fixed is None:
        check_brackets(pairs, counts, None, [0.0, 0.5, 2.0],
                       composer=Composer().refined(THREE_QUARTER_LEVEL))
    assert np.all((exact > 1e-16) & (exact < 1e-12)) or len(pairs) > 1
    assert exact[-1] < 1e-12                           # an absolute 1e-15 would be vacuous
