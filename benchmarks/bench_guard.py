"""Per-step cost of ``BudgetGuard`` against one DP-SGD step of a small MLP.

An MLP 64-64-10 is trained with Opacus DP-SGD (batch 64, noise multiplier 1.0,
sample rate 0.01) on random data, with a ``BudgetGuard`` attached to the
``DPOptimizer`` whose budget is the certified epsilon after ``--steps`` steps, so the
run ends where the guard refuses the next step (the expensive part of the look-ahead,
near the budget, is included).  The time the guard adds to ``optimizer.step()`` (the
guarded step minus Opacus's own step inside it) is summed and compared with the time
of a whole training step without it:

    python benchmarks/bench_guard.py                      # 20,000 steps, about 2 minutes
    python benchmarks/bench_guard.py --steps 2000 --exact-steps 300

The guard's total includes the accountant's first queries (grid set-up and first-time
compositions, paid by any first query, e.g. a tracker's first record), which dominate
short runs.  On a shared machine, pre-emption by other processes inflates the summed
times; the "robust" line uses the median guard time of a step instead.

``--exact-steps`` also times the per-step reference (``lookahead=False``: an exact
query before every step) over that many steps.  Not run by pytest.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

try:
    import pb_accountant  # noqa: F401  (registers "pb" with Opacus)
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pb_accountant  # noqa: F401

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetGuard

SIGMA, BATCH, N, DELTA = 1.0, 64, 6400, 1e-5


def setup(seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randn(N, 64)
    y = torch.randint(0, 10, (N,))
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True),
        noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=False)
    return engine, model, optimizer, loader


def timer(fn, spent: list, calls: list = None):
    """``fn`` that adds its seconds to ``spent[0]`` (and appends each call's to ``calls``)."""
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            spent[0] += dt
            if calls is not None:
                calls.append(dt)
    return wrapper


def train(max_epsilon: float, steps: int, **guard_options):
    """(steps taken, seconds in all, seconds in the guard, guard).

    The guard's time is that of the guarded ``optimizer.step`` minus that of Opacus's
    own step inside it: the wrapper, the schedule look-up and the check.
    """
    engine, model, optimizer, loader = setup()
    accountant = engine.accountant
    query = accountant.epsilon_after
    queries: list = []

    def timed_query(*args, **kwargs):                      # each accountant query's time
        t0 = time.perf_counter()
        try:
            return query(*args, **kwargs)
        finally:
            queries.append(time.perf_counter() - t0)

    accountant.epsilon_after = timed_query
    inner, outer, inner_calls, outer_calls = [0.0], [0.0], [], []
    optimizer.step = timer(optimizer.step, inner, inner_calls)   # Opacus's DP step
    guard = BudgetGuard(engine, max_epsilon, DELTA, mode="stop", **guard_options)
    guard.attach(optimizer, sample_rate=BATCH / N)
    optimizer.step = timer(optimizer.step, outer, outer_calls)   # guard + Opacus's DP step
    taken = 0
    start = time.perf_counter()
    while taken < steps and not guard.should_stop:
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
            if guard.should_stop:
                break
            taken += 1
            if taken >= steps:
                break
    total = time.perf_counter() - start
    guard.query_seconds = queries
    overheads = sorted(o - i for o, i in zip(outer_calls, inner_calls))
    guard.median_overhead = overheads[len(overheads) // 2] if overheads else 0.0
    return taken, total, outer[0] - inner[0], guard


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20000, help="steps until the budget is reached")
    p.add_argument("--exact-steps", type=int, default=200,
                   help="steps timed with the per-step reference guard (0: skip)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    q = BATCH / N
    ref = PrivacyBucketsAccountant()
    ref.history = [(SIGMA, q, args.steps)]
    budget = ref.get_epsilon(DELTA)
    print(f"MLP 64-64-10, batch {BATCH}, Opacus DP-SGD sigma={SIGMA}, q={q}, delta={DELTA:g}; "
          f"budget = certified eps after {args.steps} steps = {budget:.6f}; "
          f"torch threads {args.threads}")

    taken, total, in_guard, guard = train(budget, args.steps + 10)
    step_time = (total - in_guard) / max(taken, 1)
    per_step = in_guard / max(taken, 1)
    q_times = guard.query_seconds
    print(f"look-ahead guard: {taken} steps taken (stopped: {guard.should_stop}), "
          f"{guard.queries} accountant queries ({sum(q_times):.3f} s, the first "
          f"{q_times[0]:.3f} s), {in_guard:.3f} s in the guard, {total:.2f} s in all")
    print(f"  training step without the guard: {step_time * 1e3:.3f} ms; "
          f"guard per step: {per_step * 1e3:.4f} ms; ratio {per_step / step_time:.3%}")
    robust = guard.median_overhead + sum(q_times) / max(taken, 1)
    print(f"  robust to pre-emption by other processes (median guard time of a step without "
          f"a query, {guard.median_overhead * 1e6:.1f} us, plus all queries spread over the "
          f"steps): guard per step {robust * 1e3:.4f} ms; ratio {robust / step_time:.3%}")
    if args.exact_steps:
        taken_e, total_e, in_guard_e, guard_e = train(budget, args.exact_steps, lookahead=False)
        step_e = (total_e - in_guard_e) / max(taken_e, 1)
        per_e = in_guard_e / max(taken_e, 1)
        print(f"per-step reference guard (lookahead=False), first {taken_e} steps: "
              f"{guard_e.queries} queries, guard per step {per_e * 1e3:.3f} ms, "
              f"training step {step_e * 1e3:.3f} ms, ratio {per_e / step_e:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
