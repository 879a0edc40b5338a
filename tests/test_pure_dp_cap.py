"""The pure-DP bound: where every pair's privacy loss is bounded (Laplace, Poisson-sampled
Laplace, randomized response, histograms without distinguishing events), delta is 0
from the history's largest total loss on, and the best upper bound on epsilon is at
most that loss (``engine.history_loss_cap``).

The grid's own upper bound rounds an atom at that loss up to the next grid point (one
randomized-response step at delta 1e-15: 1.0986 against the grid's 1.1 or more), so
the pure-DP bound is what makes small deltas tight for these pairs.  References
enumerate the composed atoms exactly in 60-digit mpmath.
"""
import itertools
import math

import numpy as np
import pytest

from _closed_form import atoms_delta
from _optional import given, settings, st
from pb_accountant import (DiscretePair, Gaussian, Laplace, RandomizedResponse,
                           SubsampledGaussian, compose, epsilon_bounds)
from pb_accountant.engine import history_loss_cap
from pb_accountant.sampled_pairs import max_of_batches_pair
from pb_accountant.subsampled_laplace import SubsampledLaplace

mp = pytest.importorskip("mpmath")


def _composed_atoms(history):
    """(A-mass, B-mass, exact loss) of every outcome of the composed history, in the
    pairs' orientations (a swapped pair's A is its B)."""
    per_step = []
    for pair, count in history:
        a = [mp.mpf(p) for p in pair.probabilities_a]
        b = [mp.mpf(p) for p in pair.probabilities_b]
        if pair.swapped:
            a, b = b, a
        events = [(x, y) for x, y in zip(a, b) if x > 0 or y > 0]
        per_step += [events] * count
    out = []
    for combo in itertools.product(*per_step):
        pa = pb = mp.mpf(1)
        for x, y in combo:
            pa *= x
            pb *= y
        out.append((pa, pb))
    return out


def _largest_total_loss(atoms):
    ab = max((mp.log(p / q) if q > 0 else mp.inf) for p, q in atoms if p > 0)
    ba = max((mp.log(q / p) if p > 0 else mp.inf) for p, q in atoms if q > 0)
    return max(ab, ba, mp.mpf(0))


@pytest.mark.parametrize("history", [
    [(Gaussian(1.0), 3)],
    [(SubsampledGaussian(1.1, 0.01), 10)],
    [(Laplace(1.0, truncation=3.0), 2)],           # truncated: A reaches past B's support
    [(Laplace(1.0), 2), (Gaussian(5.0), 1)],
    [(DiscretePair((0.5, 0.5), (1.0, 0.0)), 1)],   # an event B cannot produce
    [(max_of_batches_pair(4, 1.0, 1.0), 1)],       # approximate masses: none derived
])
def test_unbounded_losses_have_no_cap(history):
    assert history_loss_cap(history) == math.inf


def test_the_cap_rounds_up_the_exact_sum():
    """Laplace's eps0 = 1/0.3 is not a double: 7 steps' cap is the least double at or
    above 7 * (1/0.3 rounded up), and a mirrored pair's directions are summed apart."""
    cap = history_loss_cap([(Laplace(0.3), 7)])
    assert cap >= 7 * (10 / 3) and math.nextafter(cap, 0.0) < 7 * (10 / 3) * (1 + 1e-15)
    rr = RandomizedResponse(0.75)
    one = DiscretePair((0.75, 0.25), (0.5, 0.5))       # A||B max log 1.5, B||A max log 2
    both = history_loss_cap([(one, 2), (one.mirrored(), 1)])
    assert both >= 2 * math.log(1.5) + math.log(2.0)     # A||B: 2 log 1.5 + log 2 (mirror)
    assert both <= (2 * math.log(2.0) + math.log(1.5)) * (1 + 1e-14)
    assert history_loss_cap([(rr, 3)]) >= 3 * math.log(3.0)


@settings(max_examples=40, deadline=None)
@given(a=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4),
       b=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4),
       r=st.integers(1, 3), swapped=st.booleans(), mirror_too=st.booleans())
def test_histograms_are_capped_at_their_exact_largest_loss(a, b, r, swapped, mirror_too):
    """Random histograms (no distinguishing events): the cap lies within rounding above
    the exact largest total loss of both directions, the exact delta there is 0, the
    engine's delta upper bound from the cap on is 0, and both epsilon bounds bracket the
    exact epsilon at delta 1e-15 with the upper bound at most the cap."""
    n = min(len(a), len(b))
    a, b = np.array(a[:n]) + 0.05, np.array(b[:n]) + 0.05       # every event on both sides
    pair = DiscretePair(tuple(a / a.sum()), tuple(b / b.sum()), swapped=swapped)
    if abs(math.fsum(pair.probabilities_a) - 1) > 1e-12 or abs(
            math.fsum(pair.probabilities_b) - 1) > 1e-12:
        return
    history = [(pair, r)] + ([(pair.mirrored(), 1)] if mirror_too else [])
    mp.mp.dps = 60
    atoms = _composed_atoms(history)
    exact = _largest_total_loss(atoms)
    cap = history_loss_cap(history)
    assert mp.mpf(cap) >= exact
    assert mp.mpf(cap) <= exact + 1e-12 * (1 + abs(exact))
    assert atoms_delta(atoms, cap) == 0
    pb = compose(history, delta=1e-15)
    db = pb.delta_bounds(np.array([cap, cap * 1.5 + 1.0]))
    assert np.all(db.upper == 0.0) and np.all(db.lower == 0.0)
    bounds = epsilon_bounds(history, 1e-15)
    assert bounds.upper <= cap
    # the exact epsilon at 1e-15: the least eps with exact delta <= 1e-15 (bisection)
    lo, hi = mp.mpf(0), mp.mpf(cap)
    for _ in range(90):
        mid = (lo + hi) / 2
        if atoms_delta(atoms, mid) <= mp.mpf(1e-15):
            hi = mid
        else:
            lo = mid
    assert mp.mpf(bounds.lower) <= hi and lo <= mp.mpf(bounds.upper), (bounds, lo, hi)


@pytest.mark.parametrize("pair,steps", [(RandomizedResponse(0.75), 1),
                                        (RandomizedResponse(0.9), 20),
                                        (Laplace(0.2), 1), (Laplace(1.0), 10),
                                        (SubsampledLaplace(0.05, 0.1), 3)])
def test_small_delta_upper_bounds_are_the_largest_total_loss(pair, steps):
    """At delta 1e-15 the exact epsilon is within 1e-6 of the largest total loss for
    these pairs; the best upper bound is at most that loss (where the grid's lies above
    it, that loss, and the note says where it came from; a named method keeps its own
    bound)."""
    cap = history_loss_cap([(pair, steps)])
    bounds = epsilon_bounds([(pair, steps)], 1e-15)
    assert bounds.upper <= cap
    # (10 Laplace steps: an atom at a grid point, the grid's own bound is a hair lower)
    split = compose([(pair, steps)], delta=1e-15).epsilon_bounds(1e-15, method="split")
    if split.upper > cap:
        assert bounds.upper == cap
        assert any(n.startswith("the upper bound is the history's largest total privacy "
                                "loss") for n in bounds.notes), bounds.notes
    assert not any(n.startswith("no epsilon could be certified") for n in bounds.notes)
    assert (bounds.upper - bounds.lower) / bounds.upper < 4e-4


def test_laplace_at_eps0_880_gets_the_pure_dp_upper_bound():
    """Per-step losses beyond the floating-point range of e^loss: the grid certifies no
    upper bound (its notes said so); the pure-DP bound, 2 eps0, is finite."""
    bounds = epsilon_bounds([(Laplace(1 / 880.0), 2)], 1e-10)
    assert bounds.upper == history_loss_cap([(Laplace(1 / 880.0), 2)])
    assert 1760.0 <= bounds.upper <= 1760.0 * (1 + 1e-15)
    assert 0.0 <= bounds.lower <= bounds.upper


def test_delta_notes_follow_the_pure_dp_bound():
    """Laplace at eps0 880: the grid certifies nothing (its infinity mass is 1), but from
    the cap on delta is 0: the notes say so, not that no bound beats the trivial one."""
    pb = compose([(Laplace(1 / 880.0), 2)], delta=1e-10)
    db = pb.delta_bounds(np.array([100.0, 1761.0]))
    assert list(db.upper) == [1.0, 0.0]
    assert not any(n.startswith("bounds cannot be certified") for n in db.notes), db.notes
    assert any(n.startswith("delta is 0 from epsilon 1760") for n in db.notes), db.notes


def test_discrete_pair_subclasses_opt_in_to_the_cap():
    """A subclass may store approximate masses: it gets no cap unless it derives one."""
    class Approximate(DiscretePair):
        pass
    pair = Approximate((0.75, 0.25), (0.25, 0.75))
    assert history_loss_cap([(pair, 2)]) == math.inf
    assert history_loss_cap([(DiscretePair((0.75, 0.25), (0.25, 0.75)), 2)]) < math.inf
