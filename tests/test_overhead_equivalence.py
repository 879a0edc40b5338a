"""The shortcuts that cut per-operation costs give the very floats of the plain
computations they replace (bitwise, not within a tolerance): the masses without their
error bounds, the A and B components of a leaf in one pass, the grouped directions
built together, the split pair's bookkeeping, and the convolution's helpers.  The
premise of batching rows into one transform (a row's transform does not depend on the
rows beside it or on the thread count) is checked too."""

import math

import numpy as np
import pytest
from scipy import fft as sfft

from pb_accountant import (Gaussian, Laplace, PrivacyBucketsAccountant, RandomizedResponse,
                           SubsampledGaussian)
from pb_accountant.buckets import GroupedBuckets, Grid, SplitBuckets, leaf_masses
from pb_accountant.composition import Composer
from pb_accountant.convolution import (_level_bounds, _pair_bound, _parts, _round_into,
                                       _row_norms, _scaled, convolve_rows, fft_length)
from pb_accountant.mechanisms import normal_x_interval_mass, normal_x_interval_masses
from pb_accountant.subsampled_laplace import SubsampledLaplace


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


PAIRS = [SubsampledGaussian(1.1, 0.01), SubsampledGaussian(0.7, 1.0),
         SubsampledGaussian(6.0, 1.7e-4), Gaussian(2.0), Gaussian(1.5, truncation=4.0),
         Laplace(2.0), RandomizedResponse(0.6), SubsampledLaplace(2.0, 0.05)]


@pytest.mark.parametrize("pair", PAIRS, ids=repr)
@pytest.mark.parametrize("mirrored", [False, True])
def test_bucket_masses_are_those_with_error_bounds(pair, mirrored):
    p = pair.mirrored() if mirrored else pair
    t = np.linspace(-3.0, 3.0, 777)
    a, b = p.bucket_masses(t)
    a2, b2, _, _ = p.bucket_masses_with_error(t)
    assert same_bits(a, a2) and same_bits(b, b2)
    assert a.sum() > 0.5 and b.sum() > 0.5               # not vacuous: real masses


@pytest.mark.parametrize("count", [40, 3000, 9000])       # batched and per-mean paths
def test_several_means_in_one_pass(rng, count):
    scale = 1.3
    x = np.sort(rng.normal(0.0, 4.0, count))
    x = np.concatenate(([-np.inf, -np.inf], x, [x[-1], np.inf]))   # empty and wide ones
    means = (0.0, 1.0, -2.5)
    mass, err = normal_x_interval_masses(x, means, scale)
    for k, mean in enumerate(means):
        m1, e1 = normal_x_interval_mass(x, mean, scale)
        assert same_bits(mass[k], m1) and same_bits(err[k], e1)
    assert mass.sum() > 2.9


@pytest.mark.parametrize("q", [1e-4, 0.02, 0.7])
def test_end_points_with_the_inner_term_passed_in(q):
    pair = SubsampledGaussian(0.9, q)
    t = np.linspace(-1.0, 45.0, 501)                     # both branches (t > 30)
    inner = pair._inner_parts(t)
    x = pair._x_of_loss(t)
    assert same_bits(x, pair._x_of_loss(t, inner))
    assert same_bits(pair._x_error(t, x), pair._x_error(t, x, inner))
    assert same_bits(pair._inner(t), inner[0])


@pytest.mark.parametrize("pair", [SubsampledGaussian(1.1, 0.01), Gaussian(2.0),
                                  SubsampledGaussian(0.8, 0.3).mirrored(), Laplace(1.0),
                                  RandomizedResponse(0.75)], ids=repr)
def test_groups_are_the_split_pairs_buckets_or_nearest_for_atoms(pair):
    """Without loss atoms the grouped leaf reads the split pair's masses: group i is
    bucket i (loss in (t_{i-1}, t_i]), the last group also the top corner.  With atoms
    (Laplace's capped loss, randomized response) group i holds the events nearest t_i.
    The infinite losses are their own groups; one direction alone has the bits of that
    direction of both."""
    grid = Grid(2.0 ** -7, 510, 3)
    K = grid.size
    a_inf, b_minf = pair.infinity_masses()
    both = GroupedBuckets.leaves(pair, grid, ("grouped",))[0]
    if pair.has_loss_atoms():
        a, b, ea, eb, _ = leaf_masses(pair, GroupedBuckets.leaf_grid_points(grid),
                                      grid.log_factor)
        assert len(a) == K
        assert same_bits(both.row("A")[:-1], a[:-1])
        assert both.row("A")[-1] == max(a[-1] - a_inf, 0.0)
        assert same_bits(both.row("B")[1:], b[1:])
    else:
        a, b, ea, eb, _ = leaf_masses(pair, grid.losses, grid.log_factor)
        assert len(a) == K + 1
        assert same_bits(both.row("A")[:-1], a[:K - 1])
        assert both.row("A")[-1] == a[K - 1] + max(a[K] - a_inf, 0.0)
        assert same_bits(both.row("B")[1:-1], b[1:K - 1])
        assert both.row("B")[-1] == b[K - 1] + b[K]
        given = GroupedBuckets.leaves(pair, grid, ("grouped",),
                                      split_masses=(a, b, ea, eb, _))[0]
        assert same_bits(given.rows, both.rows) and same_bits(given.error, both.error)
    assert both.row("B")[0] == max(b[0] - b_minf, 0.0)
    assert (both.a_inf, both.b_minf) == (a_inf, b_minf)
    for d in ("ab", "ba"):
        alone = GroupedBuckets.leaves(pair, grid, ("grouped-" + d,))[0]
        got = both.one_direction(d)
        assert got.directions == alone.directions == (d,)
        for field in ("rows", "error", "relative", "log_scale"):
            assert same_bits(getattr(got, field), getattr(alone, field)), field
        assert (got.a_inf, got.b_minf) == (alone.a_inf, alone.b_minf)
        assert got.compositions == alone.compositions
    with pytest.raises(ValueError, match="direction"):
        GroupedBuckets.leaves(pair, grid, ("grouped-ab",))[0].one_direction("ba")


def test_loss_atoms_are_told_apart():
    assert not SubsampledGaussian(1.0, 0.01).has_loss_atoms()
    assert not Gaussian(1.0).has_loss_atoms()
    assert Laplace(1.0).has_loss_atoms()
    assert RandomizedResponse(0.6).has_loss_atoms()


@pytest.fixture
def leaf_mass_calls(monkeypatch):
    """The pair of every ``leaf_masses`` computation the test makes, in order."""
    import pb_accountant.composition as composition
    import pb_accountant.graded_leaves as graded_leaves
    calls = []
    real = composition.leaf_masses

    def counting(pair, cuts, spacing):
        calls.append(pair)
        return real(pair, cuts, spacing)

    monkeypatch.setattr(composition, "leaf_masses", counting)
    monkeypatch.setattr(graded_leaves, "leaf_masses", counting)    # (graded leaves' cuts)
    return calls


def test_a_query_computes_each_leafs_masses_once(leaf_mass_calls):
    """The split pair and the A||B groups of one composition share their leaf masses."""
    history = [(SubsampledGaussian(1.0 + 0.1 * i, 0.01), 50) for i in range(4)]
    Composer().compose(history, 1e-5, ("split", "grouped-ab"))
    assert sorted(leaf_mass_calls, key=repr) == sorted((p for p, _ in history), key=repr)


def test_an_accountant_query_computes_each_leafs_masses_once(leaf_mass_calls):
    """So do they through an accountant's query, whose direction prediction
    (``Composer.direction_spans``) builds the leaves before the composition reads them:
    one computation of a leaf's masses, not one for the prediction and one for the
    composition.  (The B||A groups, composed only where they can matter, compute them
    again; not here.)"""
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0 + 0.1 * i, 0.01, 50) for i in range(3)]
    acc.get_epsilon_bounds(1e-5)
    assert len(leaf_mass_calls) == len(set(leaf_mass_calls)) == 3


def test_grid_arrays_are_the_formula_and_read_only():
    for grid in (Grid(0.01, 100, 7), Grid(2.0 ** -12, 5000, -300)):
        n = grid.number_of_buckets
        idx = np.arange(-n, n + 1) + grid.offset
        assert np.array_equal(grid.indices, idx)
        assert same_bits(grid.losses, idx.astype(float) * grid.log_factor)
        with pytest.raises(ValueError):
            grid.losses[0] = 1.0


def _split(rng, n=300, offset=5):
    grid = Grid(2.0 ** -6, n, offset)
    rows = rng.random((2, grid.size)) ** 30
    rows[:, :20] = 0.0
    return SplitBuckets(grid, rows, 1e-12, 2e-13, np.array([1e-15, 2e-15]), 3, 0.0,
                        np.array([1e-14, 3e-14]))


def test_needed_window_is_the_plain_scan(rng):
    for _ in range(20):
        s = _split(rng, 2 * int(rng.integers(16, 200)), int(rng.integers(-50, 50)))
        tail = float(10.0 ** rng.uniform(-30, 2))
        A, B = s.rows
        t = s.grid.losses
        hi_idx = np.nonzero(np.cumsum(A[::-1])[::-1] > tail)[0]
        lo_idx = np.nonzero(np.cumsum(B) > tail)[0]
        hi = float(t[hi_idx[-1]]) if len(hi_idx) else float(t[len(t) // 2])
        lo = float(t[lo_idx[0]]) if len(lo_idx) else float(t[len(t) // 2])
        got = s.needed_window(tail)
        assert got == (min(lo, hi), max(lo, hi))
        assert all(type(v) is float for v in got)


def test_squared_is_the_row_by_row_split(rng):
    for offset in (0, 1, -7, 12):
        s = _split(rng, 200, offset)
        sq = s.squared()
        g = math.exp(-s.grid.log_factor)
        lo_a, hi_a = g / (1.0 + g), 1.0 / (1.0 + g)
        from pb_accountant.buckets import _parity_slices
        even_start, odd_start, base, new = _parity_slices(s.grid)
        first_lo = base - (1 if odd_start < even_start else 0)
        for row, (w_lo, w_hi), got in zip(s.rows, ((lo_a, hi_a), (hi_a, lo_a)), sq.rows):
            out = np.zeros(new.size)
            even = row[even_start::2]
            out[base: base + len(even)] += even
            odd = row[odd_start::2]
            out[first_lo: first_lo + len(odd)] += odd * w_lo
            out[first_lo + 1: first_lo + 1 + len(odd)] += odd * w_hi
            assert same_bits(got, out)


def test_transform_of_a_row_does_not_depend_on_its_batch(rng):
    """The premise of transforming x and y (and the parts of a split) together."""
    for rows, n in ((3, 2048), (7, 8192), (5, 2 ** 16)):
        a = rng.random((rows, 2, n)) ** 8
        together = sfft.rfft(a, n=n, axis=-1, workers=2)
        for i in range(rows):
            assert same_bits(sfft.rfft(a[i], n=n, axis=-1, workers=1).view(float),
                             together[i].view(float))


def test_helpers_are_their_definitions(rng):
    x = rng.random((5, 301)) ** 12
    x[2] = 0.0
    x[3] *= 1e-250
    xs, e, live = _scaled(x)
    assert same_bits(xs, np.ldexp(x, -e[:, None]))
    assert list(live) == [True, True, False, True, True]
    step = np.ldexp(1.0, -np.array([3, 9, 1, 20, 24]))[:, None]
    part = np.empty_like(xs)
    rest = _round_into(xs, step, part)
    assert np.array_equal(part, np.round(xs / step) * step)
    plain_rest = xs - np.round(xs / step) * step
    assert np.array_equal(rest, np.where(np.abs(plain_rest) < 1e-280, 0.0, plain_rest))
    assert np.array_equal(part + rest, xs)
    # level bounds: the broadcast pair bounds summed in the loop's order
    n_fft = fft_length(301)
    for same in (True, False):
        k = 5
        px = _parts(part[None], rest[None], step[:, 0], np.full(5, 2.0 ** -7), k)[0]
        py = px if same else _parts(part[None, ::-1].copy(), rest[None, ::-1].copy(),
                                    step[::-1, 0], np.full(5, 2.0 ** -7), k)[0]
        assert np.array_equal(px.sum(axis=0), xs)         # the parts add up exactly
        nx = [_row_norms(p) for p in px]
        ny = [_row_norms(p) for p in py]
        bounds = [np.zeros(5) for _ in range(k - 1)]
        rest_bound = np.zeros(5)
        for i in range(k):
            for j in range(k):
                if same and j < i:
                    continue
                bd = _pair_bound(n_fft, nx[i], ny[j]) * (1.0 if (not same or i == j) else 2.0)
                if i + j < k - 1 and i < k - 1 and j < k - 1:
                    bounds[i + j] = bounds[i + j] + bd
                else:
                    rest_bound = rest_bound + bd
        got, got_rest = _level_bounds(n_fft, *(np.array(v) for v in zip(*nx)),
                                      *(np.array(v) for v in zip(*ny)), k, same)
        for b1, b2 in zip(got, bounds):
            assert same_bits(b1, b2 * 1.5)
        assert same_bits(got_rest, rest_bound * 2.0)


def test_convolution_is_exact_on_small_integers(rng):
    """A smoke check of the restructured convolution: integer rows convolve exactly."""
    x = rng.integers(0, 50, (3, 40)).astype(float)
    y = rng.integers(0, 50, (3, 40)).astype(float)
    for other in (None, y):
        z, err, rel = convolve_rows(x, other, 0.0)
        yy = x if other is None else other
        exact = np.array([np.convolve(a, b) for a, b in zip(x, yy)])
        assert np.all(np.abs(z - exact) <= err[:, None] + rel[:, None] * exact)
        assert np.all(err < 1e-9 * exact.sum(axis=1))


def test_coarse_rows_need_no_flush(rng):
    """Rows whose non-zero entries are all >= 2^-860 split into parts and rests that
    never fall below the flush threshold: skipping the flush changes nothing."""
    from pb_accountant.convolution import _coarse
    for trial in range(30):
        x = rng.random((2, 3, 257)) ** rng.uniform(1, 60)
        x[x < 2.0 ** -850] = 0.0
        x[:, :, ::7] = 2.0 ** -860 * rng.integers(1, 9, size=x[:, :, ::7].shape)
        assert _coarse(x)
        s0 = np.ldexp(1.0, -rng.integers(1, 25, 3))
        step = np.ldexp(1.0, -rng.integers(1, 41, 3))
        hi = np.empty_like(x)
        rest = _round_into(x, s0[None, :, None], hi)
        for k in (3, 5, 8):
            a = _parts(hi, rest, s0, step, k, flush=True)
            b = _parts(hi, rest, s0, step, k, flush=False)
            assert same_bits(a, b)
            assert np.array_equal(a.sum(axis=1), x)
    tiny = np.full((1, 1, 4), 1.0)
    tiny[0, 0, 1] = 1e-290
    assert not _coarse(tiny)


def _plain_narrow_masses(l, h, mean, scale):
    """``_narrow_masses`` as its formulas read (the form before it was rewritten in
    place): the reference for the in-place version's bits."""
    from pb_accountant._fp import two_prod, two_square, two_sum
    from pb_accountant.mechanisms import (_GL_LIMITS, _GL_RULES, _GL_TRUNCATION,
                                          _INV_SQRT_2PI, _NARROW_RELATIVE, UNDERFLOW_FLOOR)
    u = 2.0 ** -53
    s_hi, s_lo = two_sum(l, h)
    d_hi, d_lo = two_sum(0.5 * s_hi, -np.asarray(mean, dtype=float))
    d_lo = d_lo + 0.5 * s_lo
    q_hi = d_hi / scale
    p, e = two_prod(q_hi, float(scale))
    q_lo = (((d_hi - p) - e) + d_lo) / scale
    dmid = 4.0 * u * (np.abs(d_lo) / scale + np.abs(q_lo)) + 1e-300
    half = 0.5 * (h - l) / scale
    reach = np.abs(q_hi) + np.abs(q_lo) + half
    P, Pe = two_square(q_hi)
    lo2 = Pe + 2.0 * q_hi * q_lo
    with np.errstate(under="ignore"):
        phi = np.exp(-0.5 * P) * (1.0 - 0.5 * lo2)
    a = (q_hi + q_lo) * half
    b = 0.5 * half * half
    size = half * reach * (1.0 + 1e-6)
    rule = np.searchsorted(_GL_LIMITS[:-1], size, side="left")
    g = np.zeros(len(l))
    for k in np.unique(rule).tolist():
        _, _, nodes, weights = _GL_RULES[k]
        pick = rule == k
        acc = np.zeros(int(pick.sum()))
        for v, w in zip(nodes.tolist(), weights.tolist()):
            acc += w * np.exp(-(a[pick] * v + b[pick] * (v * v)))
        g[pick] = acc
    m = np.maximum(half * _INV_SQRT_2PI * phi * g, 0.0)
    y = (reach + dmid) * dmid * 1.01
    extra = (y + y * y + 2.0 * u * (np.abs(Pe) + 2.0 * np.abs(q_hi * q_lo)) + q_lo * q_lo
             + 0.25 * lo2 * lo2)
    rel = _NARROW_RELATIVE + _GL_TRUNCATION + extra
    return m, rel * m * (1 + 1e-9) + UNDERFLOW_FLOOR


@pytest.mark.parametrize("runs", ["one", "few", "many"])
def test_narrow_masses_in_place_are_their_formulas(rng, runs):
    """The in-place ``_narrow_masses`` (temporaries reused, each quadrature rule's runs of
    consecutive intervals sliced, or gathered beyond _NODE_RUNS_UP_TO runs) gives the
    bits of its formulas written out, at means scalar and per entry."""
    from pb_accountant.mechanisms import _narrow_masses
    n = 3000
    centre = np.clip(rng.normal(0.0, 2.0, n), -4.0, 4.0)
    if runs == "one":
        width = np.full(n, 1e-5)                           # one rule throughout
    elif runs == "few":
        centre = np.sort(centre)                            # as a leaf's: few runs
        width = np.full(n, 0.01)
    else:
        width = rng.choice([1e-4, 0.01, 0.05], n)          # many runs: index sets
    l, h = centre - width / 2, centre + width / 2
    for mean in (0.0, 1.0, rng.normal(0.0, 1.0, n)):
        for scale in (1.0, 0.7):
            m1, e1 = _narrow_masses(l, h, mean, scale)
            m2, e2 = _plain_narrow_masses(l, h, mean, scale)
            assert same_bits(m1, m2) and same_bits(e1, e2)
            assert m1.sum() > 0.0


def test_relative_part_in_place_is_its_formula(rng):
    """``_relative_part`` (ratio by one division, the row as the bins' weights, the rest in
    place) gives the bits of the plain formulas, rows with zeros and negatives too."""
    from pb_accountant.buckets import _CANDIDATES, LEAF_TAIL_SCALE, _relative_part
    for trial in range(40):
        row = rng.random(500) ** rng.uniform(1, 30)
        err = row * 10.0 ** rng.uniform(-17, -8, 500)
        row[rng.random(500) < 0.1] = 0.0
        if trial % 2:
            row[rng.random(500) < 0.05] = -1e-20
        for cap in (1e-9, 1e-12):
            cands = _CANDIDATES[_CANDIDATES <= cap]
            live = row > 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                ratio = np.where(live, err / np.where(live, row, 1.0), np.inf)
            idx = np.searchsorted(cands, ratio, side="left")
            k = len(cands) + 1
            sum_err = np.cumsum(np.bincount(idx, weights=err, minlength=k)[::-1])[::-1]
            sum_row = np.cumsum(np.bincount(idx, weights=np.where(live, row, 0.0),
                                            minlength=k)[::-1])[::-1]
            estimate = np.maximum(sum_err[1:] - cands * sum_row[1:], 0.0)
            r = float(cands[int(np.argmin(cands + estimate / LEAF_TAIL_SCALE))])
            rest = float(np.maximum(err - (r * (1.0 - 1e-12)) * row, 0.0).sum()) * (1.0 + 1e-9)
            assert _relative_part(err, row, cap) == (r, rest)


def test_parts_grown_from_fewer_are_the_split_from_scratch(rng):
    """``_split_plan`` grows k by splitting only the old remainder (``_parts``'s
    ``fewer``): the parts are those of splitting from scratch, flush or not."""
    for trial in range(20):
        x = rng.random((2, 3, 1000)) ** rng.uniform(1, 40)
        s0 = np.ldexp(1.0, -rng.integers(1, 25, 3))
        step = np.ldexp(1.0, -rng.integers(1, 41, 3))
        hi = np.empty_like(x)
        rest = _round_into(x, s0[None, :, None], hi)
        for flush in (True, False):
            for k in (3, 4, 7, 11):
                fewer = _parts(hi, rest, s0, step, k, flush)
                grown = _parts(hi, rest, s0, step, k + 1, flush, fewer)
                assert same_bits(grown, _parts(hi, rest, s0, step, k + 1, flush))
                assert same_bits(fewer, _parts(hi, rest, s0, step, k, flush))   # untouched


def test_interval_masses_of_no_interval():
    """Fewer than two end points hold no interval: empty masses, not an error (the
    consecutive-run shortcut of ``normal_x_interval_masses`` once failed on them)."""
    for x in (np.array([]), np.array([0.0]), np.array([-np.inf])):
        m, e = normal_x_interval_mass(x, 0.0, 1.0)
        assert m.shape == e.shape == (0,)
        m, e = normal_x_interval_masses(x, (0.0, 1.0), 1.3)
        assert m.shape == e.shape == (2, 0)
    from pb_accountant.mechanisms import _narrow_masses
    m1, e1 = _narrow_masses(np.arange(-3, 3), np.arange(-3, 3) + 1, 0.0, 2.0)   # integers
    m2, e2 = _narrow_masses(np.arange(-3.0, 3.0), np.arange(-3.0, 3.0) + 1, 0.0, 2.0)
    assert same_bits(m1, m2) and same_bits(e1, e2)
