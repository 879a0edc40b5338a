"""Train a small MLP with Opacus DP-SGD on scikit-learn's digits and account with "pb".

The privacy-buckets accountant plugs into Opacus as ``PrivacyEngine(accountant="pb")``
(registered when ``pb_accountant`` is imported) and reports a *certified* interval
[lower, upper] for epsilon.  After every epoch this script prints the test accuracy,
the pb bounds, and what Opacus's PRV and RDP accountants say for the very same
history (replayed into fresh accountants), so the numbers can be compared directly::

    python examples/train_digits.py                  # 15 epochs, well under a minute
    python examples/train_digits.py --epochs 5 --sigma 1.5 --max-epsilon 3

A ``BudgetTracker`` writes every epoch's bounds to a CSV file (started afresh at each
run; default ``examples/output/digits_budget.csv``, a git-ignored folder) and to
TensorBoard with ``--tensorboard DIR``, and a ``BudgetGuard`` stops training *before*
the step that would take the certified upper bound past ``--max-epsilon``.

The digits data set (1797 8x8 images) ships with scikit-learn, so nothing is
downloaded.  Batches are Poisson-sampled (Opacus's default), which is what the
accountants assume.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import pb_accountant  # noqa: F401  (registers the "pb" accountant with Opacus)
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pb_accountant  # noqa: F401

from pb_accountant.results import bound_text  # noqa: E402
from _flags import check_training_flags  # noqa: E402
from pb_accountant.integrations import BudgetGuard, BudgetTracker, CSVSink, TensorBoardSink  # noqa: E402
from opacus import PrivacyEngine
from opacus.accountants import PRVAccountant, RDPAccountant

HEADER = ("epoch", "test_acc", "pb_eps_lower", "pb_eps_upper", "prv_eps", "rdp_eps",
          "pb_time_s")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=15, help="training epochs")
    p.add_argument("--sigma", type=float, default=1.0, help="noise multiplier")
    p.add_argument("--batch-size", type=int, default=64,
                   help="expected (Poisson) batch size; sample rate = 1/len(loader)")
    p.add_argument("--delta", type=float, default=1e-5, help="target delta")
    p.add_argument("--seed", type=int, default=0, help="seed for data split, init, sampling")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="per-example clip norm")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--max-epsilon", type=float, default=10.0,
                   help="privacy budget: the guard stops training before exceeding it")
    p.add_argument("--budget-csv", default="examples/output/digits_budget.csv",
                   help="CSV file the budget tracker writes (overwritten at each run)")
    p.add_argument("--tensorboard", default=None,
                   help="also log the bounds to TensorBoard event files in this directory")
    args = p.parse_args(argv)
    check_training_flags(p, args)
    if not 0 < args.max_grad_norm < math.inf:
        p.error("--max-grad-norm must be > 0 and finite")
    if not 0 < args.lr < math.inf:
        p.error("--lr must be > 0 and finite")
    return args


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_data(seed: int):
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float32), digits.target, test_size=0.2, random_state=seed,
        stratify=digits.target)
    scaler = StandardScaler().fit(x_train)
    x_train = scaler.transform(x_train).astype(np.float32)
    x_test = scaler.transform(x_test).astype(np.float32)
    train = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train).long())
    test = TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test).long())
    return train, test


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def accuracy(model: nn.Module, data: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return correct / len(y)


def replay(accountant_cls, history, delta: float) -> float:
    """Epsilon of an Opacus accountant given the same history."""
    acc = accountant_cls()
    acc.history = [tuple(h) for h in history]
    return float(acc.get_epsilon(delta))


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", module="opacus")   # secure-RNG / RDP-alpha notices
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # torch, harmless
    seed_everything(args.seed)
    train, test = load_data(args.seed)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(train, batch_size=args.batch_size)
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader,
        noise_multiplier=args.sigma, max_grad_norm=args.max_grad_norm,
        poisson_sampling=True)
    sample_rate = 1 / len(loader)
    criterion = nn.CrossEntropyLoss()
    Path(args.budget_csv).parent.mkdir(parents=True, exist_ok=True)
    sinks = [CSVSink(args.budget_csv, append=False)]
    if args.tensorboard:
        sinks.append(TensorBoardSink(args.tensorboard))
    tracker = BudgetTracker(engine.accountant, args.delta, every_epoch=True, sinks=sinks)
    guard = BudgetGuard(engine.accountant, args.max_epsilon, args.delta, mode="stop")
    guard.attach(optimizer, data_loader=loader)

    print(f"digits: {len(train)} train / {len(test)} test examples; MLP 64-64-10; "
          f"DP-SGD sigma={args.sigma}, clip={args.max_grad_norm}, "
          f"q={sample_rate:.5f} (expected batch {args.batch_size}), "
          f"{len(loader)} steps/epoch, delta={args.delta:g}, seed={args.seed}")
    print("  ".join(f"{h:>12}" for h in HEADER))
    start = time.perf_counter()
    pb_total = 0.0
    bounds = None
    for epoch in range(1, args.epochs + 1):
        if guard.should_stop:
            break
        for x, y in loader:
            if guard.should_stop:
                break
            optimizer.zero_grad()
            if len(y) == 0:            # Poisson sampling can draw an empty batch
                optimizer.step()       # still a step (noise only) for the accountant
                continue
            criterion(model(x), y).backward()
            optimizer.step()
        acc = accuracy(model, test)
        t0 = time.perf_counter()
        bounds = engine.accountant.get_epsilon_bounds(args.delta)
        pb_time = time.perf_counter() - t0
        tracker.on_epoch_end(epoch)
        pb_total += pb_time
        history = engine.accountant.history
        prv = replay(PRVAccountant, history, args.delta)
        rdp = replay(RDPAccountant, history, args.delta)
        row = (f"{epoch:>12d}", f"{acc:>12.4f}", f"{bound_text(bounds.lower, False):>12}",
               f"{bound_text(bounds.upper, True):>12}", f"{prv:>12.6f}", f"{rdp:>12.6f}", f"{pb_time:>12.3f}")
        print("  ".join(row), flush=True)
    elapsed = time.perf_counter() - start

    tracker.close()
    steps = len(engine.accountant)
    if guard.should_stop:
        print(f"\nbudget guard: {guard.stop_message}")
    print(f"budget log: {args.budget_csv} ({len(tracker.records)} records)")
    print(f"\n{steps} DP-SGD steps in {elapsed:.1f} s (pb accounting {pb_total:.2f} s); "
          f"history {engine.accountant.history}")
    print(f"certified: ({bound_text(bounds.lower, False)} <= eps <= "
          f"{bound_text(bounds.upper, True)}, delta={args.delta:g})"
          f"; relative width {bounds.width:.2e}")
    for note in bounds.notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
