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


# ------------------------------------------------------------------------------------
# the look-ahead: exactly the per-step guard's stopping step, far fewer queries
# ------------------------------------------------------------------------------------

def run_manual(accountant, guard, schedule, limit=5000):
    """Steps taken under ``guard``; ``schedule(i)`` gives (sigma, q) of step i (0-based)."""
    taken = 0
    while True:
        sigma, q = schedule(taken)
        if not guard.check(noise_multiplier=sigma, sample_rate=q):
            return taken
        accountant.step(noise_multiplier=sigma, sample_rate=q)
        taken += 1
        assert taken < limit, "the guard did not stop"


def random_settings(seed, count):
    import random
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sigma, q = rng.uniform(0.9, 2.5), rng.uniform(0.01, 0.1)
        k = rng.randint(15, 300)
        lo = fresh_bounds([(sigma, q, k)], DELTA).upper
        hi = fresh_bounds([(sigma, q, k + 1)], DELTA).upper
        budget = lo + rng.random() * (hi - lo)          # anywhere in [eps(k), eps(k + 1))
        switch = rng.randint(3, k) if i % 2 else None   # every other setting changes sigma
        out.append((sigma, q, budget, switch))
    return out


@pytest.mark.parametrize("setting", random_settings(2024, 6))
def test_lookahead_stops_at_the_same_step_as_the_per_step_guard(setting):
    sigma, q, budget, switch = setting

    def schedule(i):
        return (sigma * 1.1 if switch is not None and i >= switch else sigma), q

    ref_acc, acc = PrivacyBucketsAccountant(), PrivacyBucketsAccountant()
    reference = BudgetGuard(ref_acc, budget, DELTA, mode="stop", lookahead=False)
    guard = BudgetGuard(acc, budget, DELTA, mode="stop")
    steps_ref = run_manual(ref_acc, reference, schedule)
    steps = run_manual(acc, guard, schedule)
    assert steps == steps_ref > 0
    assert acc.history == ref_acc.history
    assert guard.refused.upper == reference.refused.upper > budget   # the same exact query
    assert acc.get_epsilon(DELTA) <= budget
    assert reference.queries == steps_ref + 1
    if steps_ref >= 100:
        assert guard.queries < steps_ref / 3


def test_lookahead_with_an_rdp_accountant_matches_the_per_step_guard():
    k = 40
    max_eps = budget_between("rdp", k)
    ref_acc, acc = RDPAccountant(), RDPAccountant()
    schedule = lambda i: (SIGMA, Q)                     # noqa: E731
    steps_ref = run_manual(ref_acc, BudgetGuard(ref_acc, max_eps, DELTA, "stop",
                                                lookahead=False), schedule)
    guard = BudgetGuard(acc, max_eps, DELTA, "stop")
    assert run_manual(acc, guard, schedule) == steps_ref == k
    assert guard.queries < k / 2


def test_a_history_changed_behind_the_guards_back_is_rechecked():
    acc = PrivacyBucketsAccountant()
    max_eps = budget_between("pb", 30)
    guard = BudgetGuard(acc, max_eps, DELTA, mode="stop")
    for _ in range(5):
        assert guard.check(noise_multiplier=SIGMA, sample_rate=Q)
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    # someone else spends 20 steps at another rate, then a checkpoint replaces the history
    for _ in range(20):
        acc.step(noise_multiplier=SIGMA, sample_rate=2 * Q)
    acc.load_state_dict({"history": [(SIGMA, Q, 30)], "mechanism": "pb"})
    assert not guard.check(noise_multiplier=SIGMA, sample_rate=Q)   # 31 steps would exceed


def guard_with_a_plan(**kwargs):
    """A guard whose look-ahead covers the next steps at (SIGMA, Q), and its accountant."""
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, 10.0, DELTA, mode="stop", **kwargs)
    assert guard.check(noise_multiplier=SIGMA, sample_rate=Q)
    acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    assert guard._plan is not None and guard._plan.covered > 1
    return acc, guard


@pytest.mark.parametrize("change", [{"max_epsilon": 0.5}, {"delta": 1e-300},
                                    {"every_n_steps": 1, "lookahead": False}])
def test_a_budget_changed_after_the_plan_is_rechecked(change):
    acc, guard = guard_with_a_plan()
    for name, value in change.items():
        setattr(guard, name, value)
    exact = acc.epsilon_after(guard.delta, noise_multiplier=SIGMA, sample_rate=Q).upper
    queries = guard.queries
    assert guard.check(noise_multiplier=SIGMA, sample_rate=Q) == (exact <= guard.max_epsilon)
    assert guard.queries > queries                  # the old look-ahead was not used
    if "max_epsilon" in change:
        assert not guard.allows(noise_multiplier=SIGMA, sample_rate=Q) and guard.should_stop


def test_raising_the_budget_then_reset_goes_on():
    acc, guard = guard_with_a_plan()
    guard.max_epsilon = 0.5
    assert not guard.check(noise_multiplier=SIGMA, sample_rate=Q)
    guard.max_epsilon = 20.0
    guard.reset()
    assert guard.check(noise_multiplier=SIGMA, sample_rate=Q) and guard.max_epsilon == 20.0


@pytest.mark.parametrize("name,value", [
    ("max_epsilon", -1.0), ("max_epsilon", float("nan")), ("max_epsilon", "3"),
    ("max_epsilon", True), ("delta", 0.0), ("delta", 1.0), ("delta", None), ("mode", "warn"),
    ("every_n_steps", 0), ("every_n_steps", 1.5), ("lookahead_margin", 1.0),
    ("lookahead_margin", -0.1),
])
def test_a_bad_new_setting_is_refused_before_anything_changes(name, value):
    acc, guard = guard_with_a_plan()
    before, plan = getattr(guard, name), guard._plan
    with pytest.raises(ValueError, match=name):
        setattr(guard, name, value)
    assert getattr(guard, name) == before and guard._plan is plan


@pytest.mark.parametrize("n", [1, 4, 7])
def test_every_n_steps_without_lookahead_may_overspend_up_to_n_minus_1(n):
    k = 10
    max_eps = budget_between("pb", k)
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, max_eps, DELTA, mode="stop", every_n_steps=n, lookahead=False)
    taken = run_manual(acc, guard, lambda i: (SIGMA, Q))
    assert taken == -(-k // n) * n                      # the first check point at or after k
    assert 0 <= taken - k <= n - 1
    assert guard.queries == taken // n + 1              # one query per check point


@pytest.mark.parametrize("n", [1, 4, 7])
def test_every_n_steps_with_lookahead_never_overspends_and_stops_at_most_n_minus_1_early(n):
    k = 10
    max_eps = budget_between("pb", k)
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, max_eps, DELTA, mode="stop", every_n_steps=n)
    taken = run_manual(acc, guard, lambda i: (SIGMA, Q))
    assert taken == (k // n) * n                        # whole blocks that fit
    assert 0 <= k - taken <= n - 1
    assert acc.get_epsilon(DELTA) <= max_eps
    assert guard.queries == taken // n + 1
    assert "every_n_steps" in guard.stop_message


def test_allows_has_no_side_effect_on_the_stop_flag():
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, 0.01, DELTA, mode="raise")
    assert guard.allows(noise_multiplier=SIGMA, sample_rate=Q) is False
    assert not guard.should_stop and guard.refused_steps == 0
    assert guard.last_check.upper > 0.01
    with pytest.raises(ValueError, match="every_n_steps"):
        BudgetGuard(acc, 1.0, DELTA, every_n_steps=0)
    with pytest.raises(ValueError, match="lookahead_margin"):
        BudgetGuard(acc, 1.0, DELTA, lookahead_margin=1.5)


def test_a_guard_pickled_before_its_settings_were_properties_loads():
    """Older guards held max_epsilon, delta, ... under their public names, which the
    validated properties hide: unpickling moves them (it raised AttributeError)."""
    import pickle
    from pb_accountant import PrivacyBucketsAccountant
    from pb_accountant.integrations.guard import BudgetGuard
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    guard = BudgetGuard(acc, 5.0, 1e-5, noise_multiplier=1.0, sample_rate=0.01)
    old = {(k[1:] if k[1:] in ("max_epsilon", "delta", "mode", "every_n_steps",
                                "lookahead", "lookahead_margin") else k): v
           for k, v in guard.__dict__.items()}
    restored = object.__new__(BudgetGuard)
    restored.__setstate__(old)
    assert (restored.max_epsilon, restored.delta, restored.every_n_steps) == (5.0, 1e-5, None)
    assert restored.check(noise_multiplier=1.0, sample_rate=0.01)
    assert pickle.loads(pickle.dumps(restored)).max_epsilon == 5.0


def test_a_refused_step_under_batch_memory_manager_keeps_the_logical_batches():
    """BatchMemoryManager queues one skip flag per physical batch; Opacus pops it in
    pre_step.  A refused logical step must pop its flag and drop its accumulated
    gradient too: left in the queue, every later physical batch was read against an
    earlier one's flag (each counted as a refused step; after a reset, logical steps
    ended at the wrong physical batches, mixing two Poisson batches into one step)."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    engine, model, optimizer, loader = private_training("pb")
    guard = BudgetGuard(engine, budget_between("pb"), DELTA, mode="stop").attach(optimizer)
    criterion = nn.CrossEntropyLoss()

    def epoch():
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=3,
                                optimizer=optimizer) as physical:
            for x, y in physical:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
        return list(optimizer._step_skip_queue)

    assert epoch() == []                                 # (was 3 stale entries)
    acc = engine.accountant
    assert acc.history == [(SIGMA, Q, K)] and guard.should_stop
    assert guard.refused_steps == len(loader) - K        # logical steps (was 9 physical)
    assert all(p.summed_grad is None for p in optimizer.params)
    guard.max_epsilon = 1e3
    guard.reset()
    assert epoch() == []
    assert acc.history == [(SIGMA, Q, K + len(loader))]
    assert guard.refused_steps == len(loader) - K


def test_a_caught_raise_under_batch_memory_manager_keeps_the_logical_batches():
    """Mode "raise": a loop that catches BudgetExceededError and goes on must not read
    the next physical batches against the refused batch's skip flag, nor carry its
    accumulated gradient into the next logical step."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    engine, model, optimizer, loader = private_training("pb")
    guard = BudgetGuard(engine, budget_between("pb"), DELTA, mode="raise").attach(optimizer)
    criterion = nn.CrossEntropyLoss()
    raised = 0
    for _ in range(2):          # (batches of one physical batch and of several, refused)
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=6,
                                optimizer=optimizer) as physical:
            for x, y in physical:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                try:
                    optimizer.step()
                except BudgetExceededError:
                    raised += 1
                    assert all(p.summed_grad is None for p in optimizer.params)
        assert optimizer._step_skip_queue == []
    assert raised == 2 * len(loader) - K              # one per refused logical step
    assert engine.accountant.history == [(SIGMA, Q, K)]
    assert guard.refused_steps == 2 * len(loader) - K
