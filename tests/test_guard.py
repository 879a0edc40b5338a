"""BudgetGuard with real Opacus training: it stops BEFORE the step that would exceed.

The budget is put halfway between the certified epsilon after K and after K + 1 steps
(computed by a fresh accountant), so a correct guard takes exactly K steps.  Every test
runs with the pb accountant and, as a control, with Opacus's RDP accountant.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

import pb_accountant  # noqa: F401  (registers "pb" with opacus)
from opacus import PrivacyEngine
from opacus.accountants import RDPAccountant
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pb_accountant.integrations import BudgetExceededError, BudgetGuard, BudgetTracker
from pb_accountant import PrivacyBucketsAccountant

from _budget_helpers import fresh_bounds, quiet_opacus_warnings

DELTA = 1e-5
SIGMA = 1.0
N, BATCH = 64, 8            # DPDataLoader: sample rate 1/8, 8 batches per epoch
Q = 1 / 8
K = 5                       # the guard must allow exactly K steps

ACCOUNTANTS = ["pb", "rdp"]


def reference_epsilon(mechanism, steps):
    if mechanism == "pb":
        return fresh_bounds([(SIGMA, Q, steps)], DELTA).upper
    acc = RDPAccountant()
    acc.history = [(SIGMA, Q, steps)]
    return acc.get_epsilon(DELTA)


def budget_between(mechanism, k=K):
    lo, hi = reference_epsilon(mechanism, k), reference_epsilon(mechanism, k + 1)
    assert lo < hi
    return 0.5 * (lo + hi)


def private_training(mechanism, seed=0):
    quiet_opacus_warnings()
    torch.manual_seed(seed)
    x = torch.randn(N, 4)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = PrivacyEngine(accountant=mechanism)
    model, optimizer, dp_loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
        max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(seed))
    return engine, model, optimizer, dp_loader


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def backward(model, xb, yb):
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()


def steps_of(accountant):
    return sum(int(h[2]) for h in accountant.history)


@pytest.mark.parametrize("mechanism", ACCOUNTANTS)
def test_raise_mode_stops_before_the_exceeding_step(mechanism):
    max_eps = budget_between(mechanism)
    engine, model, optimizer, loader = private_training(mechanism)
    tracker = BudgetTracker(engine, DELTA, every_n_steps=1, every_epoch=False, sinks=[])
    tracker.attach(optimizer)
    guard = BudgetGuard(engine, max_epsilon=max_eps, delta=DELTA, mode="raise").attach(optimizer)
    raised = None
    for _epoch in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            backward(model, xb, yb)
            before = snapshot(model)
            steps_before = steps_of(engine.accountant)
            try:
                optimizer.step()
            except BudgetExceededError as exc:
                raised = exc
                # raised before Opacus updated the parameters or accounted the step
                assert same(before, snapshot(model))
                assert steps_of(engine.accountant) == steps_before
                break
        if raised:
            break
    assert raised is not None, "the guard never stopped training"
    assert isinstance(raised, RuntimeError)
    assert raised.max_epsilon == max_eps and raised.delta == DELTA
    assert raised.epsilon > max_eps and raised.steps == K
    assert "max_epsilon" in str(raised) and "not taken" in str(raised)
    assert steps_of(engine.accountant) == K
    assert [r.step for r in tracker.records] == list(range(1, K + 1))
    assert tracker.records[-1].eps_upper <= max_eps
    # the budget actually spent, recomputed from scratch, is within the target ...
    assert reference_epsilon(mechanism, K) <= max_eps
    # ... and the refused step would indeed have exceeded it
    assert reference_epsilon(mechanism, K + 1) > max_eps


@pytest.mark.parametrize("mechanism", ACCOUNTANTS)
def test_stop_mode_sets_flag_and_refuses_further_steps(mechanism):
    max_eps = budget_between(mechanism)
    engine, model, optimizer, loader = private_training(mechanism)
    tracker = BudgetTracker(engine, DELTA, every_n_steps=1, every_epoch=False, sinks=[])
    tracker.attach(optimizer)
    guard = BudgetGuard(engine, max_epsilon=max_eps, delta=DELTA, mode="stop").attach(optimizer)
    taken = 0
    for _epoch in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            backward(model, xb, yb)
            before = snapshot(model)
            optimizer.step()
            if guard.should_stop:
                assert same(before, snapshot(model))      # the refused step changed nothing
                break
            taken += 1
        if guard.should_stop:
            break
    assert guard.should_stop
    assert taken == K == steps_of(engine.accountant)
    assert guard.refused is not None and guard.refused.upper > max_eps
    assert "max_epsilon" in guard.stop_message
    # a loop that ignores the flag still cannot spend more: the optimizer refuses
    xb, yb = next(iter(loader))
    for _ in range(2):
        optimizer.zero_grad()
        backward(model, xb, yb)
        before = snapshot(model)
        assert optimizer.step() is None
        assert same(before, snapshot(model))
    assert steps_of(engine.accountant) == K
    assert tracker.records[-1].step == K and tracker.records[-1].eps_upper <= max_eps
    assert reference_epsilon(mechanism, K) <= max_eps < reference_epsilon(mechanism, K + 1)
    # detaching restores Opacus's own step
    guard.detach()
    assert "step" not in vars(optimizer)


@pytest.mark.parametrize("mechanism", ACCOUNTANTS)
def test_guard_with_closure_runs_forward_and_backward(mechanism):
    """Lightning passes a closure to step(); it must run before the check."""
    max_eps = budget_between(mechanism, k=2)
    engine, model, optimizer, loader = private_training(mechanism)
    guard = BudgetGuard(engine, max_epsilon=max_eps, delta=DELTA, mode="stop").attach(optimizer)
    calls = []
    for xb, yb in loader:
        def closure(xb=xb, yb=yb):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            calls.append(1)
            return loss
        optimizer.step(closure)
        if guard.should_stop:
            break
    assert len(calls) == 3 and steps_of(engine.accountant) == 2


def test_first_step_over_budget_is_refused():
    engine, model, optimizer, loader = private_training("pb")
    guard = BudgetGuard(engine, max_epsilon=0.01, delta=DELTA).attach(optimizer)
    xb, yb = next(iter(loader))
    backward(model, xb, yb)
    before = snapshot(model)
    with pytest.raises(BudgetExceededError, match="not taken"):
        optimizer.step()
    assert engine.accountant.history == [] and same(before, snapshot(model))
    assert guard.refused.upper > 0.01


@pytest.mark.parametrize("mechanism", ACCOUNTANTS)
def test_manual_loop_without_opacus(mechanism):
    """Any loop: check() before each step, then account the step yourself."""
    acc = PrivacyBucketsAccountant() if mechanism == "pb" else RDPAccountant()
    max_eps = budget_between(mechanism)
    guard = BudgetGuard(acc, max_epsilon=max_eps, delta=DELTA, mode="stop")
    steps = 0
    while guard.check(noise_multiplier=SIGMA, sample_rate=Q):
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        steps += 1
        assert steps <= 3 * K, "the guard did not stop"
    assert steps == K
    assert guard.should_stop and not guard.check(noise_multiplier=SIGMA, sample_rate=Q)
    assert acc.get_epsilon(DELTA) <= max_eps
    assert reference_epsilon(mechanism, K) <= max_eps
    # defaults: the schedule of the accountant's last step
    guard2 = BudgetGuard(acc, max_epsilon=1e6, delta=DELTA)
    assert guard2.check() is True and not guard2.would_exceed()
    assert guard2.epsilon_after(num_steps=2).upper > acc.get_epsilon(DELTA)


def test_validation_errors():
    acc = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match="mode"):
        BudgetGuard(acc, 1.0, DELTA, mode="warn")
    with pytest.raises(ValueError, match="max_epsilon"):
        BudgetGuard(acc, -1.0, DELTA)
    with pytest.raises(ValueError, match="delta"):
        BudgetGuard(acc, 1.0, 0.0)
    with pytest.raises(TypeError):
        BudgetGuard(object(), 1.0, DELTA)
    guard = BudgetGuard(acc, 1.0, DELTA)
    with pytest.raises(ValueError, match="noise_multiplier and sample_rate"):
        guard.check()                      # empty history, nothing given
    with pytest.raises(TypeError, match="DPOptimizer"):
        guard.attach(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
    assert issubclass(BudgetExceededError, RuntimeError)
