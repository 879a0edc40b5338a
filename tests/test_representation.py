"""Every bucket representation implements the interface of
pb_accountant/representation.py, and a generic run over the registry brackets a closed
form (randomized response, r-fold, paper §5.5)."""
import inspect
import math

import numpy as np
import pytest

from pb_accountant import RandomizedResponse
from pb_accountant.buckets import Grid
from pb_accountant.composition import METHODS, REPRESENTATIONS
from pb_accountant.representation import DIRECTIONS, BucketRepresentation

ABSTRACT = sorted(BucketRepresentation.__abstractmethods__)


def test_interface_is_abstract():
    assert {"leaves", "compose_full", "from_product", "squared", "padded", "restricted",
            "infinity_bucket", "row_errors", "upper_curves", "lower_curves"} <= set(ABSTRACT)
    with pytest.raises(TypeError):
        BucketRepresentation()


@pytest.mark.parametrize("name", sorted(REPRESENTATIONS))
def test_each_representation_implements_the_interface(name):
    cls = REPRESENTATIONS[name]
    assert issubclass(cls, BucketRepresentation)
    assert cls.method == name and name in cls.variants
    assert not inspect.isabstract(cls)
    for method in ABSTRACT:                  # defined by the class itself, not inherited
        assert method in cls.__dict__, f"{cls.__name__} lacks {method}"
    sig = inspect.signature(cls.restricted)
    assert list(sig.parameters) == ["self", "grid", "mean_loss"]
    assert sig.parameters["mean_loss"].default is None


def rr_delta(p: float, r: int, eps: float) -> float:
    """Exact delta(eps) of r-fold randomized response (both directions coincide)."""
    total = 0.0
    for k in range(r + 1):
        a = math.comb(r, k) * p ** k * (1 - p) ** (r - k)
        b = math.comb(r, k) * (1 - p) ** k * p ** (r - k)
        total += max(0.0, a - math.exp(eps) * b)
    return total


P, R = 0.6, 8
EPS = [0.0, 0.2, 0.5, 1.0, 2.0, 3.0, 3.5]


@pytest.mark.parametrize("name", sorted(REPRESENTATIONS))
def test_generic_leaf_compose_curves_bracket_randomized_response(name):
    cls = REPRESENTATIONS[name]
    pair = RandomizedResponse(P)
    step = math.log(P / (1 - P)) / 4.0
    grid = Grid(step, 64)
    methods = frozenset(METHODS)
    leaves = cls.leaves(pair, grid, methods)
    assert leaves, f"{name} built no leaf"
    upper = {d: [] for d in DIRECTIONS}
    lower = {d: [] for d in DIRECTIONS}
    for leaf in leaves:
        x = leaf
        for _ in range(R - 1):               # r-fold through the interface only
            x = x.compose(leaf)
        assert x.compositions == R
        assert x.grid == grid
        a_inf, b_minf = x.infinity_bucket
        assert 0.0 <= a_inf <= 1e-12 and 0.0 <= b_minf <= 1e-12   # nothing beyond the grid
        assert all(0.0 <= e < 1e-9 for e in x.row_errors().values())
        for d, c in x.upper_curves().items():
            upper[d].append(c)
        for d, c in x.lower_curves().items():
            lower[d].append(c)
    assert any(upper.values()) or any(lower.values())
    exact = np.array([rr_delta(P, R, e) for e in EPS])
    for d in DIRECTIONS:
        for c in upper[d]:
            up = np.asarray(c(np.array(EPS)), dtype=float)
            assert np.all(up >= exact * (1 - 1e-12)), (name, d, up, exact)
            # not vacuous (the paper's upper bound pays for index misplacement u_T)
            assert np.all(up <= exact + 0.1), (name, d, up, exact)
        for c in lower[d]:
            lo = np.asarray(c(np.array(EPS)), dtype=float)
            assert np.all(lo <= exact * (1 + 1e-12) + 1e-300), (name, d, lo, exact)
            assert np.all(lo >= exact - 0.1), (name, d, lo, exact)
            assert lo[0] == pytest.approx(exact[0], rel=1e-6)


@pytest.mark.parametrize("name", sorted(REPRESENTATIONS))
def test_restricted_padded_squared_keep_the_interface(name):
    """Window, pad and square through the interface; masses stay (or move to infinity)."""
    cls = REPRESENTATIONS[name]
    grid = Grid(math.log(1.5) / 4.0, 64)
    for leaf in cls.leaves(RandomizedResponse(0.6), grid, frozenset(METHODS)):
        full = leaf.compose_full(leaf)
        window = full.grid.window(grid.number_of_buckets, 3)
        kept = full.restricted(window, (0.5, -0.5))
        assert kept.grid == window
        assert full.restricted(full.grid, (0.0, 0.0)).grid == full.grid
        wide = kept.padded(80)
        assert wide.grid.number_of_buckets == 80
        # the same rows numpy's pad gives: the kept buckets centred, zeros around them
        k = 80 - window.number_of_buckets
        assert np.array_equal(wide.rows, np.pad(kept.rows, ((0, 0), (k, k))))
        assert wide.rows.dtype == kept.rows.dtype
        assert kept.padded(window.number_of_buckets) is kept
        with pytest.raises(RuntimeError, match="widened"):
            kept.padded(window.number_of_buckets - 2)
        sq = kept.squared()
        assert sq.grid.log_factor == 2.0 * window.log_factor
        assert sq.compositions == 2


def test_restricted_rejects_a_grid_that_is_not_a_window():
    grid = Grid(0.1, 16)
    for cls in REPRESENTATIONS.values():
        for leaf in cls.leaves(RandomizedResponse(0.6), grid, frozenset(METHODS)):
            with pytest.raises(ValueError, match="grid"):
                leaf.restricted(Grid(0.2, 8), (0.0, 0.0))


def test_engine_joins_lower_curves_through_public_methods():
    from pb_accountant.composition import Composer
    from pb_accountant.engine import PrivacyBuckets, adaptive_epsilon_bounds
    from pb_accountant import SubsampledGaussian
    history = [(SubsampledGaussian(1.0, 0.01), 200)]
    composer = Composer()
    ab = PrivacyBuckets(composer.compose(history, 1e-5, ("split", "grouped-ab")), 1e-5)
    ba = PrivacyBuckets(composer.compose(history, 1e-5, ("split", "grouped-ba")), 1e-5)
    assert len(ab.upper_curves("split")) == 2 and len(ab.upper_curves("split", "ba")) == 1
    assert len(ab.lower_curves("grouped")) == 1
    both = ab.with_lower_curves_of(ba)
    assert len(both.lower_curves("grouped")) == 2 and len(ab.lower_curves("grouped")) == 1
    full = PrivacyBuckets(composer.compose(history, 1e-5, ("split", "grouped")), 1e-5)
    assert both.epsilon_bounds(1e-5).lower == full.epsilon_bounds(1e-5).lower
    assert adaptive_epsilon_bounds(composer, history, 1e-5).upper == full.epsilon_bounds(1e-5).upper
    with pytest.raises(ValueError, match="method"):
        ab.epsilon_upper(1e-5, "paper")


def test_a_new_representation_needs_only_a_registry_entry(monkeypatch):
    """A registered representation is built, composed and queried with no change to
    the engine or the BucketSet (here a second split pair under another name)."""
    from pb_accountant import SubsampledGaussian, compose
    from pb_accountant import composition
    from pb_accountant.buckets import SplitBuckets

    class TwinSplit(SplitBuckets):
        method = "twin"
        variants = ("twin",)

        @classmethod
        def leaves(cls, pair, grid, methods=("twin",)):
            return super().leaves(pair, grid, methods) if "twin" in methods else ()

    monkeypatch.setitem(composition.REPRESENTATIONS, "twin", TwinSplit)
    history = [(SubsampledGaussian(1.0, 0.02), 300)]
    pb = compose(history, delta=1e-5, methods=("split", "grouped", "twin"))
    assert "twin" in pb.methods and len(pb.upper_curves("twin")) == 2
    assert pb.epsilon_upper(1e-5, "twin") == pb.epsilon_upper(1e-5, "split")
    assert np.array_equal(pb.delta_upper([0.5, 1.0], "twin"), pb.delta_upper([0.5, 1.0], "split"))
    with pytest.raises(ValueError, match="methods must be among"):
        compose(history, delta=1e-5, methods=("split", "nope"))


def test_row_tolerance_is_in_the_units_rows_are_stored_in():
    """A grouped C or D row stored above its true size (log-scales summing to s < 0)
    has its tolerance raised to true units, e^{-s} times; rows that hold masses (the
    split pair's) and rows stored below their true size keep it as given."""
    from pb_accountant import SubsampledGaussian
    from pb_accountant.buckets import GroupedBuckets, SplitBuckets
    grid = Grid(2.0 ** -7, 510, 3)
    pair = SubsampledGaussian(1.1, 0.01)
    split = SplitBuckets.leaves(pair, grid)[0]
    assert np.array_equal(split.row_tolerance(split, 1e-20), [1e-20, 1e-20])
    g = GroupedBuckets.leaves(pair, grid, ("grouped-ab",))[0]
    shifted = g._with(g.grid, g.rows, g.error, log_scale=np.array([0.0, -183.0]))
    tol = shifted.row_tolerance(g, 1e-20)
    assert tol[0] == 1e-20 and tol[1] == pytest.approx(1e-20 * math.exp(183.0), rel=1e-12)
    assert np.array_equal(shifted.row_tolerance(shifted, 0.0), [0.0, 0.0])
    # a row stored below its true size keeps the tolerance as given
    raised = g._with(g.grid, g.rows, g.error, log_scale=np.array([0.0, 20.0]))
    assert np.array_equal(raised.row_tolerance(g, 1e-20), [1e-20, 1e-20])
    far = g._with(g.grid, g.rows, g.error, log_scale=np.array([0.0, -400.0]))
    assert far.row_tolerance(far, 1e-20)[1] == math.inf      # no split is worth it
