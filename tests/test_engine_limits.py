"""The low-level API at an engine limit (ENGINE_LIMITS: a grid factor or a product beyond
the floating-point range): ``compose``, ``epsilon_bounds`` and every query of what
``compose`` returns answer the trivial bounds with the reason in ``notes`` and a
RuntimeWarning, as the accountant does, where they raised OverflowError; user errors
still raise ValueErrors first."""
import math
import warnings

import numpy as np
import pytest

from pb_accountant import DiscretePair, Gaussian, compose, epsilon_bounds, tradeoff_bounds
from pb_accountant.composition import canonical_history
from pb_accountant.engine import ENGINE_LIMITS, PrivacyBuckets, history_loss_cap

LIMIT_NOTE = "engine limit reached"

#: options accepted by BucketOptions whose grid factor e^(spacing) squares past 1e308
#: on this history (a review's reproduction: OverflowError from ``Grid.factor``)
COARSE_GRID = ([(Gaussian(15.66), 3000), (Gaussian(0.47), 2)],
               dict(number_of_buckets=4, resolution=0.2, leaf_resolution=0.5), None)
#: the paper's buckets of a pair with a 2^-40 mass, 50 steps: their product leaves the
#: floating-point range (``convolve_rows``, scale 2^1171)
PAPER_PRODUCT = ([(DiscretePair((0.5, 0.5), (1.0 - 2.0 ** -40, 2.0 ** -40)), 50)], {},
                 ("split", "paper"))


def _quietly(f, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return f(*args, **kwargs)


def _composed(case, delta=1e-5):
    sequence, options, methods = case
    extra = {} if methods is None else {"methods": methods}
    return compose(sequence, delta=delta, **options, **extra)


def _limited(notes, cap=math.inf):
    """The limit's note alone, or with the pure-DP note where the history's losses are
    bounded (``cap`` finite: the best bounds keep that bound at a limit)."""
    extra = () if math.isinf(cap) else ("the upper bound is the history's largest total",)
    return (len(notes) == 1 + len(extra) and notes[0].startswith(LIMIT_NOTE)
            and all(n.startswith(e) for n, e in zip(notes[1:], extra)))


@pytest.mark.parametrize("case", [COARSE_GRID, PAPER_PRODUCT], ids=["coarse", "paper"])
def test_compose_answers_an_engine_limit_with_the_trivial_bounds(case):
    pb = _composed(case)
    # PAPER_PRODUCT's pair has bounded losses (pure DP): the best bounds keep the
    # history's largest total loss, 50 log(2^40 - 1), as the dp_accounting adapter does
    cap = history_loss_cap(canonical_history(case[0]))
    assert math.isinf(cap) == (case is COARSE_GRID)
    with pytest.warns(RuntimeWarning, match=LIMIT_NOTE):
        eb = pb.epsilon_bounds(1e-5)
    assert (eb.lower, eb.upper) == (0.0, cap) and _limited(eb.notes, cap)
    assert _quietly(pb.epsilon_bounds, 1e-5, method="split").upper == math.inf
    if math.isfinite(cap):
        above = _quietly(pb.delta_bounds, np.array([cap * 0.999, cap]))
        assert above.upper.tolist() == [1.0, 0.0]
    db = _quietly(pb.delta_bounds, 1.0)
    assert (db.lower, db.upper) == (0.0, 1.0) and _limited(db.notes)
    dbs = _quietly(pb.delta_bounds, np.array([0.0, 1.0, 50.0]))
    assert np.all(dbs.lower == 0.0) and np.all(dbs.upper == 1.0) and _limited(dbs.notes)
    curve = _quietly(pb.curve, num=5)
    assert np.all(curve.delta_lower == 0.0) and np.all(curve.delta_upper == 1.0)
    assert _limited(curve.notes) and len(curve.epsilons) == 5
    for tb in (_quietly(pb.tradeoff_bounds), _quietly(tradeoff_bounds, pb, [0.01])):
        assert np.all(tb.tpr_upper == 1.0) and tb.mu_upper == math.inf and _limited(tb.notes)
    assert _quietly(pb.epsilon_upper, 1e-5) == cap
    assert _quietly(pb.epsilon_upper, 1e-5, method="split") == math.inf
    assert _quietly(pb.epsilon_lower, 1e-5) == 0.0
    assert _quietly(pb.delta_upper, 2.0).tolist() == [1.0]
    assert _quietly(pb.delta_lower, 2.0).tolist() == [0.0]
    assert _limited(pb.notes()) and pb.infinity_mass == 1.0
    assert isinstance(pb.limit_error, ENGINE_LIMITS)   # (what the CLI reports)


def test_epsilon_bounds_answers_an_engine_limit():
    sequence, options, _ = COARSE_GRID
    with pytest.warns(RuntimeWarning, match=LIMIT_NOTE):
        eb = epsilon_bounds(sequence, 1e-5, **options)
    assert (eb.lower, eb.upper) == (0.0, math.inf) and _limited(eb.notes)
    # deterministic: the same answer, bit for bit
    assert _quietly(epsilon_bounds, sequence, 1e-5, **options) == eb


def test_user_errors_raise_before_the_trivial_answer():
    pb = _composed(COARSE_GRID)
    with pytest.raises(ValueError, match="delta"):
        pb.epsilon_bounds(2.0)
    with pytest.raises(ValueError, match="epsilon"):
        pb.delta_bounds(-1.0)
    with pytest.raises(ValueError, match="epsilon"):
        pb.curve([0.0, math.nan])
    with pytest.raises(ValueError, match="fpr"):
        pb.tradeoff_bounds(2.0)
    with pytest.raises(ValueError, match="eps_step"):
        pb.tradeoff_bounds(eps_step=0.0)
    with pytest.raises(ValueError, match="method"):
        pb.delta_upper(1.0, method="no such method")
    sequence, options, _ = COARSE_GRID
    with pytest.raises(ValueError, match="delta"):
        epsilon_bounds(sequence, 0.0, **options)


def test_a_query_reaching_a_limit_answers_and_the_engine_s_own_objects_raise(monkeypatch):
    """A limit met by a query (not by the composition) is answered the same way by what
    ``compose`` returns; the engine's own PrivacyBuckets raise it (its coarse passes fall
    back to finer grids on it)."""
    pb = compose([(Gaussian(1.0), 10)], delta=1e-5)
    inner = PrivacyBuckets(pb.buckets, 1e-5)

    def overflowing(*args, **kwargs):
        raise OverflowError("a test's overflow")

    monkeypatch.setattr("pb_accountant.engine.upper_epsilon", overflowing)
    with pytest.warns(RuntimeWarning, match="a test's overflow"):
        eb = pb.epsilon_bounds(1e-5)
    assert (eb.lower, eb.upper) == (0.0, math.inf) and _limited(eb.notes)
    with pytest.raises(ENGINE_LIMITS):
        inner.epsilon_bounds(1e-5)


def test_compositions_within_the_limits_are_unchanged():
    history = [(Gaussian(1.0), 10)]
    pb = compose(history, delta=1e-5)
    inner = PrivacyBuckets(pb.buckets, 1e-5, history)
    assert pb.epsilon_bounds(1e-5) == inner.epsilon_bounds(1e-5)
    assert not any(n.startswith(LIMIT_NOTE) for n in pb.epsilon_bounds(1e-5).notes)
    empty = compose([], delta=1e-5)
    assert empty.epsilon_bounds(1e-5, method="split").upper == 0.0
    assert empty.delta_bounds(1.0, method="paper").upper == 0.0


def test_the_dp_accounting_adapter_s_engine_answers_limits():
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event
    from pb_accountant.dp_accounting_adapter import PrivacyBucketsDpAccountant
    sequence, options, _ = COARSE_GRID
    acc = PrivacyBucketsDpAccountant(**options)
    acc.compose(dp_event.GaussianDpEvent(15.66), 3000)
    acc.compose(dp_event.GaussianDpEvent(0.47), 2)
    curve = _quietly(acc.engine().curve, num=4)
    assert np.all(curve.delta_upper == 1.0) and _limited(curve.notes)
    eb = _quietly(acc.get_epsilon_bounds, 1e-5)
    assert (eb.lower, eb.upper) == (0.0, math.inf)


@pytest.mark.parametrize("method", ["x", "best", "grouped-ab", 3])
def test_an_unknown_method_name_is_refused(method):
    """An unknown name was answered as the best bounds, labelled with it."""
    pb = compose([(Gaussian(1.0), 3)])
    with pytest.raises(ValueError, match="method must be None"):
        pb.epsilon_bounds(1e-5, method=method)
    with pytest.raises(ValueError, match="method must be None"):
        pb.delta_bounds(1.0, method=method)


@pytest.mark.parametrize("sigma,sensitivity", [(1.0, 1.0), (0.8, 5.0)])
@pytest.mark.parametrize("methods", [("paper",), ("split", "grouped", "paper")])
def test_the_paper_method_at_the_largest_counts_answers_trivially_not_nan(sigma, sensitivity,
                                                                          methods):
    """10^15 compositions (the most a count may be) of a Gaussian by the paper method:
    its rows' relative error grows to inf, and ``restricted`` formed inf * 0 (an empty
    top) as the A error: the next product raised RuntimeError("internal error: NaN in
    the operands of a product's error bound").  With that fixed, Definition 9's slack,
    inf times an empty A tail, made every delta bound NaN (the lower one too, clipped
    to it).  An unbounded error is the trivial bound."""
    pb = _quietly(compose, [(Gaussian(sigma, sensitivity), 10 ** 15)], delta=1e-5,
                  methods=methods)
    eps = np.array([0.0, 1.0, 1e6])
    for method in (None, "paper"):
        db = _quietly(pb.delta_bounds, eps, method=method)
        assert not np.isnan(db.upper).any() and not np.isnan(db.lower).any()
        assert np.all(db.upper == 1.0) and np.all(db.lower == 0.0)
    eb = _quietly(pb.epsilon_bounds, 1e-5)
    assert eb.upper == math.inf and eb.lower == 0.0
