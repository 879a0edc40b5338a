"""The paper's invariants on every representation (Definitions 4, 7, 8; Lemmas 9-10)."""
import math

import numpy as np
import pytest

from pb_accountant import DiscretePair, Gaussian, SubsampledGaussian
from pb_accountant.buckets import Grid, SplitBuckets
from pb_accountant.composition import BucketSet, BucketOptions, Composer, compose_sets

PAIRS = [SubsampledGaussian(1.0, 0.05), Gaussian(3.0),
         DiscretePair((0.2, 0.5, 0.3), (0.4, 0.1, 0.5)),
         DiscretePair((0.5, 0.25, 0.25), (0.6, 0.4, 0.0))]


def _leaf(pair, n=200, step=0.01):
    grid = Grid(step, n)
    return BucketSet.leaf(pair, grid, frozenset({"split", "grouped", "paper"}))


@pytest.mark.parametrize("pair", PAIRS)
def test_leaf_masses_sum_to_one(pair):
    leaf = _leaf(pair)
    masses = leaf.split.masses()
    assert masses == pytest.approx([1.0, 1.0], abs=1e-12)
    for p in leaf.paper:
        assert p.rows[0].sum() + p.a_inf == pytest.approx(1.0, abs=1e-12)
    g = leaf.grouped
    assert g.rows[0].sum() + g.a_inf == pytest.approx(1.0, abs=1e-12)
    assert g.rows[2].sum() + g.b_minf == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("pair", PAIRS)
def test_error_correction_terms(pair):
    """EC terms are non-negative and real <= virtual, after compositions and squarings."""
    leaf = _leaf(pair)
    options = BucketOptions(number_of_buckets=200)
    x = leaf
    for _ in range(3):
        x = compose_sets(x, x, 1e-30, options)
        for p in x.paper:
            A, V, R = p.rows
            tol = 1e-12
            assert np.all(V - A >= -tol), "virtual EC term negative"
            assert np.all(R - A >= -tol), "real EC term negative"
            assert np.all(R <= V + tol), "real EC term above virtual"
        y = x.squared()
        for p in y.paper:
            A, V, R = p.rows
            assert np.all(R <= V + 1e-12) and np.all(R - A >= -1e-12)


def test_u_recursion():
    leaf = _leaf(SubsampledGaussian(1.0, 0.05))
    p = leaf.paper[0]
    assert p.u == 1
    q = p.compose(p)
    assert q.u == 2
    assert q.compose(p).u == 3
    assert q.squared().u == math.ceil(2 / 2) + 1
    assert q.compose(q).compose(p).squared().u == math.ceil(5 / 2) + 1


@pytest.mark.parametrize("pair", PAIRS)
def test_squaring_preserves_mass(pair):
    leaf = _leaf(pair)
    sq = leaf.squared()
    assert sq.split.masses() == pytest.approx(leaf.split.masses(), abs=1e-14)
    assert sq.grouped.rows[0].sum() == pytest.approx(leaf.grouped.rows[0].sum(), abs=1e-14)
    assert sq.grouped.rows[2].sum() == pytest.approx(leaf.grouped.rows[2].sum(), abs=1e-14)
    for a, b in zip(sq.paper, leaf.paper):
        assert a.rows[0].sum() + a.a_inf == pytest.approx(b.rows[0].sum() + b.a_inf, abs=1e-14)
    assert sq.grid.factor == pytest.approx(leaf.grid.factor ** 2)


def test_split_squaring_keeps_both_masses_per_point():
    """Squaring splits odd atoms with weights g/(1+g), 1/(1+g) preserving A and B."""
    grid = Grid(0.1, 4)
    A = np.array([0, 0, 0, 0, 1.0, 0, 0, 0, 0])       # one atom at t = 0
    A = np.roll(A, 1)                                  # atom at t = 0.1 (odd index 1)
    t = grid.losses
    B = A * np.exp(-t)
    s = SplitBuckets(grid, np.vstack([A, B]), 0.0, 0.0, np.zeros(2))
    q = s.squared()
    assert q.rows[0].sum() == pytest.approx(1.0)
    assert q.rows[1].sum() == pytest.approx(B.sum())
    # every atom of the squared pair has B = A e^{-t}
    assert np.allclose(q.rows[1], q.rows[0] * np.exp(-q.grid.losses))


@pytest.mark.parametrize("pair", PAIRS[:2])
def test_split_pair_relation_after_composition(pair):
    """On the split pair every atom keeps B = A e^{-t} up to the leaf's one-sided
    roundings (the A row rounds each split up, the B row down, by the masses' relative
    error over f - 1: about 1e-11 per step here, docs/floating-point.md)."""
    c = Composer(BucketOptions())
    x = c.compose([(pair, 37)], 1e-6, ("split",))
    A, B = x.split.rows
    up = np.exp(x.grid.losses)
    err = np.abs(B * up - A).sum()
    certified = (x.split.error[1] * up.max() + x.split.error[0]
                 + x.split.relative.max() * (A.sum() + (B * up).sum()))
    assert err <= 1e-8 * A.sum() + certified + 1e-12


@pytest.mark.parametrize("offset", [-3, 0, 5, 8])
def test_squaring_with_offsets_keeps_masses_and_the_split_relation(offset):
    """Grids with an index offset (one-sided losses) square in absolute indices."""
    grid = Grid(0.05, 20, offset)
    leaf = BucketSet.leaf(SubsampledGaussian(1.0, 0.05), grid,
                          frozenset({"split", "grouped", "paper"}))
    sq = leaf.squared()
    assert sq.grid.offset == -((-offset) // 2)
    assert sq.split.masses() == pytest.approx(leaf.split.masses(), abs=1e-14)
    A, B = sq.split.rows
    # up to the leaf's one-sided roundings of the split (relative ~1e-12 at f = e^0.05)
    # and the shares that displaced borders send one point further (about 1e-13 of a
    # neighbour's mass, docs/method.md §4)
    assert np.allclose(B * np.exp(sq.grid.losses), A, rtol=1e-10, atol=1e-12 * A.max())
    g = sq.grouped
    assert g.rows[0].sum() == pytest.approx(leaf.grouped.rows[0].sum(), abs=1e-14)
    # grouped C = B f^label still holds label by label
    assert np.allclose(g.row("C"), g.row("B") * np.exp(sq.grid.losses), rtol=1e-12)
