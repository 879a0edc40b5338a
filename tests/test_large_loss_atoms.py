"""Atoms far out in loss (|loss| 300-1,300): both bounds bracket exact enumerations.

An independent review found certified delta lower bounds above the exact delta, up to
36% at one float step below an atom's loss of 580, and epsilon lower bounds up to 0.33
float steps above the exact epsilon: the grouped bound's B-weights are scaled by
e^{-(label + k)}, and the rounded sum label + k (within u |label + k|, 6e-14 at 580) was
not charged, nor were the queries' rounded exponent arguments; a few-term sum's
allowance (about 64u) did not cover them.  The references enumerate the composed atoms
exactly (multinomial counts) in 60-digit mpmath on the very doubles given.
"""
import itertools
import math

import numpy as np
import pytest

from _closed_form import atoms_delta
from _optional import given, settings, st
from pb_accountant import DiscretePair, Laplace, SubsampledLaplace, compose
from pb_accountant.buckets import SPACING_BITS, summable_spacing

mp = pytest.importorskip("mpmath")


def _atoms(a, b, r):
    out = []
    for ks in itertools.product(range(r + 1), repeat=len(a)):
        if sum(ks) != r:
            continue
        c = mp.factorial(r)
        for k in ks:
            c /= mp.factorial(k)
        pa = pb = c
        for k, x, y in zip(ks, a, b):
            pa *= mp.mpf(x) ** k
            pb *= mp.mpf(y) ** k
        out.append((pa, pb))
    return out


def _exact_epsilon(atoms, delta):
    """The least eps with exact delta(eps) <= delta (bisection on the exact curve)."""
    lo, hi = mp.mpf(0), mp.mpf(2000)
    if atoms_delta(atoms, 0) <= delta:
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        if atoms_delta(atoms, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _check(a, b, r, epsilons, deltas=(), **options):
    mp.mp.dps = 60
    atoms = _atoms(a, b, r)
    pb = compose([(DiscretePair(tuple(a), tuple(b)), r)], delta=1e-12, **options)
    eps = np.array(epsilons, dtype=float)
    db = pb.delta_bounds(eps)
    for e, lo, up in zip(eps, db.lower, db.upper):
        d = atoms_delta(atoms, e)
        assert mp.mpf(float(lo)) <= d, (a, b, r, e, lo, d)
        assert mp.mpf(float(up)) >= d, (a, b, r, e, up, d)
    for delta in deltas:
        bounds = compose([(DiscretePair(tuple(a), tuple(b)), r)], delta=delta,
                         **options).epsilon_bounds(delta)
        truth = _exact_epsilon(atoms, mp.mpf(delta))
        assert mp.mpf(bounds.lower) <= truth <= mp.mpf(bounds.upper), (delta, bounds, truth)


def _below(loss):
    """Epsilons up to one float step below ``loss`` (the bound is tightest there)."""
    return [loss - 1e-6, loss - 1e-8, loss - 2e-10, loss - 1e-11, loss - 1e-12,
            float(np.nextafter(loss, -np.inf)), loss]


CASES = [
    ((0.5, 0.5), (math.exp(-580.0) * 0.5, 1.0), 1, 580.0),
    ((0.5061831269011816, 0.4938168730988184), (1.0342557830988787e-137, 1.0), 1,
     314.7396188579567),
    ((0.02425719030089272, 0.9757428096991073), (9.647147043885385e-190, 1.0), 1,
     431.50546324205453),
    ((0.5, 0.5), (3.881661647525841e-261, 1.0), 1, 598.9252987692561),
    ((0.5, 0.22138007379334043, 0.27861992620665954),
     (5.51422244520968e-267, 0.27861992620665954, 0.7213800737933405), 2,
     1224.7794839903343),
]


@pytest.mark.parametrize("a,b,r,loss", CASES)
def test_lower_bounds_below_an_atom_far_out_hold(a, b, r, loss):
    """The review's cases: delta bounds just below the atom's loss and epsilon bounds
    at small delta bracket the exact values (no tolerance: the bounds are certified)."""
    _check(a, b, r, _below(loss), deltas=(1e-8, 1e-10, 1e-12) if r == 1 else ())


@settings(max_examples=80, deadline=None)
@given(loss=st.floats(300.0, 740.0), mass=st.floats(0.01, 0.99), r=st.integers(1, 2),
       swapped=st.booleans())
def test_random_far_atoms_are_bracketed(loss, mass, r, swapped):
    """A two-atom pair whose first atom has loss ``loss`` (either direction), one or two
    steps: delta bounds near every composed atom loss bracket the exact curve."""
    x = mass * math.exp(-loss)
    a, b = (mass, 1.0 - mass), (x, 1.0 - x)
    if swapped:
        a, b = b, a
    mp.mp.dps = 60
    losses = sorted({float(mp.log(p / q)) for p, q in _atoms(a, b, r) if p > 0 and q > 0}
                    | {float(mp.log(q / p)) for p, q in _atoms(a, b, r) if p > 0 and q > 0})
    eps = [e for l in losses if l > 1.0 for e in (l - 1e-9, float(np.nextafter(l, -np.inf)))]
    _check(a, b, r, eps)


def test_a_factor_at_the_leaf_range_limit_still_answers():
    """The spacing is rounded down: a factor BucketOptions lets reach MAX_LOSS_RANGE
    exactly is not refused at the first query (rounded to nearest, it was: an
    independent review's 202 buckets at factor 31.9875...)."""
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant(number_of_buckets=202, factor=31.987542644725693)
    acc.history = [(1.0, 0.01, 10)]
    bounds = acc.get_epsilon_bounds(1e-5)
    assert 0 < bounds.lower <= bounds.upper < math.inf


def test_fixed_factors_keep_labels_that_add_exactly():
    """A fixed ``factor`` is rounded to SPACING_BITS significant bits of log f, so every
    label (i + offset) log f is exact and a product's labels are its operands' sums;
    the bounds on such a grid still bracket the exact curve far out."""
    from fractions import Fraction
    rng = np.random.default_rng(5)
    for f in (1.001, 1.01, math.exp(1e-3), 1.37):
        d = summable_spacing(math.log(f))
        assert 0 <= 1 - d / math.log(f) < 2.0 ** (1 - SPACING_BITS)     # rounded down
        for i in rng.integers(-2 ** 33, 2 ** 33, 200).tolist():
            assert Fraction(float(i) * d) == Fraction(i) * Fraction(d)
    _check((0.5, 0.5), (math.exp(-580.0) * 0.5, 1.0), 2, [1159.9, 1159.99999],
           factor=1.37, number_of_buckets=2000)


@pytest.mark.parametrize("mechanism", [Laplace(scale=0.0011335409548925998),
                                       SubsampledLaplace(0.0011335409548925998, 1.0),
                                       SubsampledLaplace(0.001, 0.5)])
@pytest.mark.parametrize("steps", [1, 2])
def test_per_step_epsilons_near_900_give_valid_bounds_not_errors(mechanism, steps):
    """Losses near 900 per step, beyond the leaf's range: a leaf bucket's error bound
    over its tiny mass overflowed (inf * 0 = NaN) and two steps raised an internal
    error; now both give valid, if loose, bounds with the reason."""
    bounds = compose([(mechanism, steps)], delta=1e-10).epsilon_bounds(1e-10)
    assert 0.0 <= bounds.lower <= bounds.upper
    assert bounds.lower <= steps / 0.001                   # the mechanism is pure DP
    if math.isinf(bounds.upper):
        assert bounds.notes
