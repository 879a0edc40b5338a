"""Atoms binned by their computed loss, with the loss's round-off covered.

An atom whose computed loss sits on a grid point (or one ulp from it) may have its exact
loss on the other side.  ``bucket_masses_with_error`` then counts its mass as error in
every bucket its exact loss may fall in; ``bucket_masses_with_displacement`` widens the
shift of the borders its loss error reaches (docs/floating-point.md, "Atoms").  Checked
here in 60-digit arithmetic (mpmath) against the exact binning.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from pb_accountant.mechanisms import (DiscretePair, Gaussian, Laplace, MechanismPair,
                                      RandomizedResponse)
from pb_accountant.mechanisms import _straddling_atoms
from pb_accountant.subsampled_laplace import SubsampledLaplace

mp = pytest.importorskip("mpmath").mp
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

DPS = 60


def _exact_loss(a: float, b: float):
    if b == 0:
        return mp.inf
    if a == 0:
        return -mp.inf
    return mp.log(mp.mpf(a) / mp.mpf(b))


def _exact_bucket(ts, loss) -> int:
    """Index k of the right-closed interval (t_{k-1}, t_k] holding ``loss``."""
    return next((k for k, v in enumerate(ts) if loss <= v), len(ts))


def _oriented_atoms(pair: DiscretePair):
    """(exact loss, A-mass, B-mass) of every atom in the pair's orientation."""
    out = []
    for a, b in zip(pair.probabilities_a, pair.probabilities_b):
        if a == 0 and b == 0:
            continue
        if pair.swapped:
            a, b = b, a
        out.append((_exact_loss(a, b), mp.mpf(a), mp.mpf(b)))
    return out


def _grid_on_the_atoms(pair: DiscretePair, picks, offsets, extra):
    """Grid points on chosen atoms' computed losses, moved by -1, 0 or +1 ulp, plus
    ``extra`` points: ascending and distinct."""
    losses, _, _ = pair._atoms()
    if pair.swapped:
        losses = -losses
    finite = losses[np.isfinite(losses)]
    pts = list(extra)
    if finite.size:
        for p, o in zip(picks, offsets):
            v = float(finite[p % finite.size])
            for _ in range(abs(o)):
                v = float(np.nextafter(v, math.copysign(math.inf, o)))
            pts.append(v)
    return np.unique(np.array(pts, dtype=float))


def _check_error_path(pair: DiscretePair, t):
    a, b, ea, eb = pair.bucket_masses_with_error(t)
    assert a.shape == b.shape == ea.shape == eb.shape == (len(t) + 1,)
    assert np.all(ea >= 0) and np.all(eb >= 0)
    with mp.workdps(DPS):
        ts = [mp.mpf(float(v)) for v in t]
        A = [mp.mpf(0)] * (len(t) + 1)
        B = [mp.mpf(0)] * (len(t) + 1)
        for loss, ma, mb in _oriented_atoms(pair):
            k = _exact_bucket(ts, loss)
            A[k] += ma
            B[k] += mb
        for k in range(len(t) + 1):
            assert abs(mp.mpf(float(a[k])) - A[k]) <= mp.mpf(float(ea[k])), ("A", k, a, A, ea)
            assert abs(mp.mpf(float(b[k])) - B[k]) <= mp.mpf(float(eb[k])), ("B", k, b, B, eb)


def _check_displacement_path_undecided(pair: DiscretePair, t):
    _check_displacement_path(pair, t, resolved=False)


def _check_displacement_path(pair: DiscretePair, t, resolved=True):
    """Every atom lies, by its exact loss, in the displaced borders of the bucket it is
    counted in (its computed loss's), and the masses are those of these event sets."""
    a, b, ea, eb, shift = pair.bucket_masses_with_displacement(t)
    assert shift.shape == (len(t),) and np.all(shift >= 0)
    losses, _, _ = pair._atoms()
    if pair.swapped:
        losses = -losses
    counted = np.searchsorted(t, losses, side="left")
    # atoms whose side of the grid points was decided went to their exact bucket
    straddle = _straddling_atoms(t, pair._atoms()[0],
                                 pair._atom_loss_error(pair._atoms()[0]),
                                 swapped=pair.swapped)
    if straddle is not None and resolved:
        _, exact = pair._place_straddling_atoms(t, straddle)
        for i, k in exact.items():
            counted[i] = k
    with mp.workdps(DPS):
        ts = [mp.mpf(float(v)) for v in t]
        sh = [mp.mpf(float(v)) for v in shift]
        A = [mp.mpf(0)] * (len(t) + 1)
        B = [mp.mpf(0)] * (len(t) + 1)
        for k, (loss, ma, mb) in zip(counted.tolist(), _oriented_atoms(pair)):
            lower = -mp.inf if k == 0 else ts[k - 1] - sh[k - 1]
            upper = mp.inf if k == len(t) else ts[k] + sh[k]
            # (bucket 0 holds loss -inf, the last one +inf)
            assert (lower < loss or k == 0) and loss <= upper, (k, loss, lower, upper)
            A[k] += ma
            B[k] += mb
        for k in range(len(t) + 1):
            assert abs(mp.mpf(float(a[k])) - A[k]) <= mp.mpf(float(ea[k])), ("A", k)
            assert abs(mp.mpf(float(b[k])) - B[k]) <= mp.mpf(float(eb[k])), ("B", k)


_probability = st.one_of(st.just(0.0), st.floats(1e-300, 1.0),
                         st.floats(0.05, 1.0), st.sampled_from([0.25, 0.5, 0.75]))


@st.composite
def _discrete_pairs(draw):
    n = draw(st.integers(2, 6))
    a = np.array(draw(st.lists(_probability, min_size=n, max_size=n)))
    b = np.array(draw(st.lists(_probability, min_size=n, max_size=n)))
    if draw(st.booleans()):                 # some atoms with the same probabilities
        b[: n // 2] = a[: n // 2]
    if a.sum() == 0 or b.sum() == 0:
        a, b = np.full(n, 1.0 / n), np.full(n, 1.0 / n)
        a[0], a[1] = a[0] * 1.5, a[1] * 0.5
    pair = DiscretePair(tuple(a / a.sum()), tuple(b / b.sum()))
    return pair.mirrored() if draw(st.booleans()) else pair


@settings(max_examples=300, deadline=None)
@given(pair=_discrete_pairs(), picks=st.lists(st.integers(0, 5), min_size=1, max_size=4),
       offsets=st.lists(st.sampled_from([-2, -1, 0, 0, 0, 1, 2]), min_size=4, max_size=4),
       extra=st.lists(st.floats(-50.0, 50.0), max_size=3))
def test_random_atoms_on_and_next_to_grid_points_are_covered(pair, picks, offsets, extra):
    t = _grid_on_the_atoms(pair, picks, offsets, extra)
    if t.size == 0:
        t = np.array([0.0])
    _check_error_path(pair, t)
    _check_displacement_path(pair, t)


def test_several_atoms_summed_into_one_bucket_carry_the_sum_rounding():
    """Six atoms whose A-masses land in one bucket: their sum rounds by up to 5u of
    itself, which the 2u once charged did not cover (the computed sum 1 + 2^-52
    against an exact 0.99999999999999997; found by the test above)."""
    pair = DiscretePair(probabilities_a=(0.2546382482961598, 0.20759046773494125,
                                         0.08581295586662573, 0.19947335367091362,
                                         0.19947335367091362, 0.05301162076044597),
                        probabilities_b=(0.0, 0.0, 0.0, 0.0, 0.0, 1.0), swapped=False)
    _check_error_path(pair, np.array([-2.93724413]))


@pytest.mark.parametrize("p", [0.5 + 2 ** -40, 0.6, 0.7310585786300049, 0.9, 1.0 - 1e-12])
@pytest.mark.parametrize("mirrored", [False, True])
def test_randomized_response_on_its_own_losses(p, mirrored):
    """Grid points exactly on +-the computed loss and one ulp either side."""
    pair = RandomizedResponse(p)
    if mirrored:
        pair = pair.mirrored()
    e = float(pair._atoms()[0][0])
    pts = [e, -e, np.nextafter(e, 0), np.nextafter(e, 9), np.nextafter(-e, 0), 2 * e, 0.0]
    t = np.unique(np.array(pts, dtype=float))
    _check_error_path(pair, t)
    _check_displacement_path(pair, t)


def test_the_reviewed_atom_goes_to_its_exact_bucket():
    """log(a) - log(b) = 1.0 computed, 1 + 8.5e-17 exactly: the 60-digit side decides
    (1, 2], with no error and no shift."""
    a0, b0 = 0.7310585786300049, 0.2689414213699951
    pair = DiscretePair((a0, b0), (b0, a0))
    t = np.array([-1.0, 0.0, 1.0, 2.0])
    assert float(pair._atoms()[0][0]) == 1.0
    a, _, ea, _ = pair.bucket_masses_with_error(t)
    assert a[3] == a0 and a[2] == 0.0 and a[0] == b0      # -1 - 8.5e-17: below -1
    assert np.all(ea < 1e-15)
    *_, shift = pair.bucket_masses_with_displacement(t)
    assert np.all(shift == 0.0)


def test_an_undecided_atom_is_counted_as_error_in_both_buckets_and_widens_the_shift(
        monkeypatch):
    """Where the side cannot be decided (here: forced), the atom stays at its computed
    loss; both (0, 1] and (1, 2] carry its mass as error, and the displaced border t = 1
    moves by at least its loss error (a few 1e-16) and no more than 1e-15."""
    a0, b0 = 0.7310585786300049, 0.2689414213699951
    pair = DiscretePair((a0, b0), (b0, a0))
    monkeypatch.setattr(DiscretePair, "_atom_loss_side", lambda self, i, v: None)
    t = np.array([-1.0, 0.0, 1.0, 2.0])
    _, _, ea, _ = pair.bucket_masses_with_error(t)
    assert ea[2] >= a0 and ea[3] >= a0
    assert ea[0] >= b0 and ea[1] >= b0      # the mirror atom, computed -1.0, on t = -1
    assert ea[4] < 1e-15
    *_, shift = pair.bucket_masses_with_displacement(t)
    assert 8.5e-17 <= shift[2] <= 1e-15 and 8.5e-17 <= shift[0] <= 1e-15
    assert shift[1] == shift[3] == 0.0
    _check_error_path(pair, t)
    _check_displacement_path_undecided(pair, t)


def test_atoms_away_from_the_grid_points_leave_the_masses_and_errors_alone():
    """An atom farther than its loss error from every grid point changes nothing: the
    errors are the sums' rounding only and the shifts stay 0."""
    pair = RandomizedResponse(0.75)
    e = math.log(3.0)
    t = np.array([-e * (1 + 1e-12), 0.0, e * (1 - 1e-12), e * (1 + 1e-12)])
    a, b, ea, eb, shift = pair.bucket_masses_with_displacement(t)
    assert np.all(shift == 0.0)
    a2, b2, ea2, eb2 = pair.bucket_masses_with_error(t)
    assert np.array_equal(a, a2) and np.array_equal(ea, ea2)
    assert np.all(ea <= 4 * 2.0 ** -53 * a + 1e-300)


# -- the loss error bounds of each pair, against 60 digits ----------------------------
@settings(max_examples=200, deadline=None)
@given(scale=st.one_of(st.floats(1e-3, 1e3), st.sampled_from([1 / 3, 0.1, 1 / 7, 0.3])),
       sensitivity=st.one_of(st.just(1.0), st.floats(1e-3, 10.0)),
       truncated=st.booleans())
def test_laplace_atom_loss_error_covers_the_exact_loss(scale, sensitivity, truncated):
    pair = Laplace(scale, sensitivity, truncation=3.0 * sensitivity if truncated else None)
    losses, _, _ = pair._atoms()
    err = pair._atom_loss_error(losses)
    with mp.workdps(DPS):
        e0 = mp.mpf(sensitivity) / mp.mpf(scale)
        for L, e in zip(losses.tolist(), err.tolist()):
            if math.isinf(L):
                assert e == 0.0
                continue
            exact = e0 if L > 0 else -e0
            assert abs(mp.mpf(L) - exact) <= mp.mpf(e), (L, float(exact), e)
            assert e <= 1e-15 * abs(L) + 1e-300


@settings(max_examples=200, deadline=None)
@given(b=st.one_of(st.floats(1e-3, 1e4), st.sampled_from([1 / 3, 0.5, 1.0, 2.0])),
       q=st.one_of(st.floats(1e-12, 1.0), st.sampled_from([1.0, 0.5, 1e-300 * 1e290])))
def test_subsampled_laplace_atom_loss_error_covers_the_exact_loss(b, q):
    pair = SubsampledLaplace(b, q)
    losses, _, _ = pair._atoms()
    err = pair._atom_loss_error(losses)
    assert losses.shape == err.shape == (2,)
    with mp.workdps(DPS):
        B, Q = mp.mpf(b), mp.mpf(q)
        for L, e, sign in zip(losses.tolist(), err.tolist(), (-1, 1)):
            exact = mp.log(1 - Q + Q * mp.exp(sign / B))
            assert abs(mp.mpf(L) - exact) <= mp.mpf(e), (b, q, L, float(exact), e)
            # a few ulp of the terms: |L|, |log q| and 1/b
            assert e <= 8 * 2.0 ** -53 * (abs(L) + abs(math.log(q)) + 1.0 / b + 1.0)


@settings(max_examples=200, deadline=None)
@given(pair=_discrete_pairs())
def test_discrete_atom_loss_error_covers_the_exact_loss(pair):
    losses, a, b = pair._atoms()
    err = pair._atom_loss_error(losses)
    assert err.shape == losses.shape
    with mp.workdps(DPS):
        for L, e, pa, pb in zip(losses.tolist(), err.tolist(), a.tolist(), b.tolist()):
            exact = _exact_loss(pa, pb)
            if mp.isinf(exact):
                assert L == exact and e == 0.0
            else:
                assert abs(mp.mpf(L) - exact) <= mp.mpf(e), (pa, pb, L, e)
                assert e <= 1e-14 * (abs(math.log(pa)) + abs(math.log(pb)) + 1e-300)


def test_truncated_gaussian_infinite_atoms_need_no_allowance():
    pair = Gaussian(1.0, truncation=3.0)
    losses, _, _ = pair._atoms()
    assert np.all(np.isinf(losses))
    assert np.all(pair._atom_loss_error(losses) == 0.0)


def test_a_pair_with_finite_atoms_and_no_loss_error_bound_is_an_internal_error():
    """A new pair that forgets its bound must not pass as exact."""

    class Forgetful(MechanismPair):
        def _atoms(self):
            return np.array([0.5]), np.array([1.0]), np.array([1.0])

    with pytest.raises(NotImplementedError, match="internal error"):
        Forgetful().bucket_masses_with_error(np.array([0.0, 1.0]))


# -- the Poisson-sampled Laplace pair next to its flat ends ----------------------------
def _subsampled_laplace_exact_buckets(b: float, q: float, t):
    """Exact A- and B-masses of the intervals of ``t`` (60 digits): cumulative masses
    P(L <= t) from the exact end point x(t) (0 below L_-, 1 from L_+ on)."""
    with mp.workdps(DPS):
        B, Q = mp.mpf(b), mp.mpf(q)
        low = mp.log(1 - Q + Q * mp.exp(-1 / B))
        high = mp.log(1 - Q + Q * mp.exp(1 / B))

        def cdf(x, mean):
            z = (x - mean) / B
            return 1 - mp.exp(-z) / 2 if z >= 0 else mp.exp(z) / 2

        fa, fb = [mp.mpf(0)], [mp.mpf(0)]
        for v in t:
            T = mp.mpf(float(v))
            if T < low:
                fa.append(mp.mpf(0))
                fb.append(mp.mpf(0))
            elif T >= high:
                fa.append(mp.mpf(1))
                fb.append(mp.mpf(1))
            else:
                x = (B * mp.log((mp.exp(T) - (1 - Q)) / Q) + 1) / 2
                fb.append(cdf(x, 0))
                fa.append((1 - Q) * cdf(x, 0) + Q * cdf(x, 1))
        fa.append(mp.mpf(1))
        fb.append(mp.mpf(1))
        return ([fa[k + 1] - fa[k] for k in range(len(t) + 1)],
                [fb[k + 1] - fb[k] for k in range(len(t) + 1)])


@settings(max_examples=60, deadline=None)
@given(b=st.sampled_from([0.005, 0.01, 0.02, 0.05, 0.5, 2.0]),
       q=st.one_of(st.sampled_from([0.5, 0.25, 0.9]), st.floats(1e-4, 0.999)),
       anchor=st.sampled_from(["threshold", "low", "high"]),
       offset=st.integers(-3, 3))
def test_subsampled_laplace_buckets_next_to_the_flat_ends_cover_the_exact_ones(
        b, q, anchor, offset):
    """Grid points on (and a few ulp from) log(1 - q), L_- and L_+: there the loss is
    flat to 1e-17 over stretches of x as wide as 0.3, so an end point set to 0 or an
    atom binned by its computed loss may hold the wrong side's mass."""
    pair = SubsampledLaplace(b, q)
    v = {"threshold": math.log1p(-q), "low": pair.loss_low, "high": pair.loss_high}[anchor]
    for _ in range(abs(offset)):
        v = float(np.nextafter(v, math.copysign(math.inf, offset)))
    t = np.unique(np.array([pair.loss_low - 1.0, v, 0.5 * (v + pair.loss_high),
                            pair.loss_high + 1.0]))
    a, bm, ea, eb = pair.bucket_masses_with_error(t)
    A, B = _subsampled_laplace_exact_buckets(b, q, t)
    with mp.workdps(DPS):
        for k in range(len(t) + 1):
            assert abs(mp.mpf(float(a[k])) - A[k]) <= mp.mpf(float(ea[k])), ("A", k, a, ea)
            assert abs(mp.mpf(float(bm[k])) - B[k]) <= mp.mpf(float(eb[k])), ("B", k, bm, eb)


# -- the Laplace pair's end points clipped by their own rounding ------------------------
@pytest.mark.parametrize("scale,sensitivity,ulps", [
    (0.1, 1.0, 1), (1 / 3, 3.2836264481371886, 1), (0.1, 4.153640749693736, 2)])
def test_laplace_end_point_rounded_onto_the_sensitivity_carries_its_round_off(
        scale, sensitivity, ulps):
    """t a few ulp below eps0 (farther than the atom's loss error): (b t + s) / 2 rounds
    to s although x(t) < s exactly, so the stretch (x(t), s), whose loss exceeds t, is
    counted below t; the bucket above t, empty in the continuous part, carries its mass
    as error (it used to be treated as an exact clip)."""
    pair = Laplace(scale, sensitivity)
    t = pair.epsilon0
    for _ in range(ulps):
        t = float(np.nextafter(t, 0.0))
    assert abs(t - pair.epsilon0) > pair._atom_loss_error(np.array([pair.epsilon0]))[0]
    assert (scale * t + sensitivity) / 2.0 >= sensitivity
    ca, cb, eca, ecb = pair._continuous_with_error(np.array([t]))
    assert ca[1] == cb[1] == 0.0
    with mp.workdps(DPS):
        B, S = mp.mpf(scale), mp.mpf(sensitivity)
        x = (B * mp.mpf(t) + S) / 2
        assert x < S
        a_sliver = (1 - mp.exp(-(S - x) / B)) / 2               # Lap(s, b) on (x, s)
        b_sliver = mp.exp(-x / B) * (1 - mp.exp(-(S - x) / B)) / 2
        assert mp.mpf(float(eca[1])) >= a_sliver and mp.mpf(float(eca[0])) >= a_sliver
        assert mp.mpf(float(ecb[1])) >= b_sliver and mp.mpf(float(ecb[0])) >= b_sliver


# -- review by helper 41: an atom whose exact loss is a grid point ----------------------

@pytest.mark.parametrize("pair", [Laplace(1.0), Laplace(0.5), Laplace(0.25, sensitivity=2.0),
                                  SubsampledLaplace(1.0, 1.0),
                                  Laplace(1.0).mirrored()])
def test_an_atom_exactly_on_a_grid_point_is_placed_not_charged(pair):
    """Laplace's atoms sit at exactly +-eps0, a grid point of every grid whose spacing
    divides eps0 (eps0 = 1 on spacing 2^-5).  Equality was answered as undecided, so
    ``bucket_masses_with_error`` charged each such atom's whole mass as error in both
    buckets next to the point (errors 1.37 for Laplace(1)), and the paper method's upper
    bound was the trivial 1 at every epsilon for all such Laplace pairs.  The exact loss
    on t_k lies in (t_{k-1}, t_k] in either orientation: the atom is placed there."""
    e0 = float(pair.loss_bounds()[1])
    t = np.array([-2 * e0, -e0, -e0 / 2, 0.0, e0 / 2, e0, 2 * e0])
    t = np.round(t, 12)                              # the grid points +-eps0 exactly
    a, b, ea, eb = pair.bucket_masses_with_error(t)
    assert float(np.max(ea)) < 1e-12 and float(np.max(eb)) < 1e-12, (ea, eb)
    # the atom at +eps0 (A-mass 1/2 for the plain Laplace) is in (t_4, t_5] = (e0/2, e0]
    # and nothing lies beyond eps0
    assert a[-1] == 0.0 and a[-2] == 0.0 and b[-1] == 0.0 and b[-2] == 0.0
    # bucket 1 holds exactly the loss -e0 atom (the interval (-2 e0, -e0])
    assert a[0] == 0.0 and b[0] == 0.0 and a[1] > 0 and b[1] > 0


def test_the_paper_method_brackets_laplace_on_its_own_grid_points():
    """One Laplace release: delta(eps) = 1 - e^{(eps - eps0)/2} on [0, eps0].  The paper
    method (Definition 9 upper, Theorem 2 lower) brackets it instead of answering 1."""
    from pb_accountant import compose
    for scale, count in ((1.0, 1), (0.5, 1), (1.0, 3)):
        pb = compose([(Laplace(scale), count)], delta=1e-15,
                     methods=("split", "grouped", "paper"))
        eps = np.array([0.0, 0.25, 0.5, 1.0])
        up = pb.delta_upper(eps, method="paper")
        best = pb.delta_bounds(eps)
        assert np.all(up < 1.0), (scale, count, up)
        assert np.all(up >= best.lower)
        if count == 1:
            exact = 1.0 - np.exp((eps - 1.0 / scale) / 2.0)
            assert np.all(up >= exact * (1 - 1e-12)) and np.all(up <= exact + 1e-9), (up, exact)
            low = pb.delta_lower(eps, method="paper")
            assert np.all(low <= exact * (1 + 1e-12) + 1e-300)


def test_the_paper_method_brackets_kary_randomized_response():
    """k-ary randomized response's third event has loss exactly 0, the grid point 0 of
    every grid: undecided, its mass p (k - 2) / k was charged as error in both buckets
    next to 0 and the paper method answered delta in [0, 1].  One release:
    delta(eps) = (1 - p + p/k) - e^eps p/k."""
    from pb_accountant import compose
    from pb_accountant.mechanisms import KaryRandomizedResponse
    p, k = 0.5, 100
    eps = np.array([0.0, 0.5, 2.0])
    exact = (1 - p + p / k) - np.exp(eps) * p / k
    pb = compose([(KaryRandomizedResponse.of(p, k), 1)], delta=1e-12,
                 methods=("split", "grouped", "paper"))
    up, low = pb.delta_upper(eps, method="paper"), pb.delta_lower(eps, method="paper")
    assert np.all(up >= exact * (1 - 1e-12)) and np.all(up <= exact + 1e-9), (up, exact)
    assert np.all(low <= exact * (1 + 1e-12)) and np.all(low >= exact - 1e-9), (low, exact)
    pb = compose([(KaryRandomizedResponse.of(p, k), 5)], delta=1e-12,
                 methods=("split", "grouped", "paper"))
    best = pb.delta_bounds(eps)
    up = pb.delta_upper(eps, method="paper")
    assert np.all(up < 1.0) and np.all(up >= best.lower)
