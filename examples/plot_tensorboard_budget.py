"""Train briefly with Opacus + BudgetTracker/BudgetGuard, then plot the TensorBoard log.

A small MLP is trained with DP-SGD on scikit-learn's digits (nothing is downloaded).
A :class:`~pb_accountant.integrations.BudgetTracker` writes the certified ``epsilon_lower`` and
``epsilon_upper`` to a TensorBoard event file after every step and a
:class:`~pb_accountant.integrations.BudgetGuard` stops training before the certified upper bound would
pass ``--max-epsilon``.  The event file is then read back with TensorBoard's
``EventAccumulator`` and both bounds are plotted against the step::

    python examples/plot_tensorboard_budget.py          # -> examples/output/tensorboard_epsilon.png
    python examples/plot_tensorboard_budget.py --max-epsilon 2 --logdir runs/demo --out budget.png

The figure in docs/training-budget.md is made with
``--out docs/img/tensorboard_epsilon.png``; by default nothing tracked is written.

``tensorboard --logdir runs/`` shows the same scalars under ``privacy/``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import pb_accountant.integrations  # noqa: F401
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(ROOT))

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pb_accountant  # noqa: F401  (registers the "pb" accountant with Opacus)
from pb_accountant.results import bound_text
from _flags import check_training_flags
from pb_accountant.integrations import BudgetExceededError, BudgetGuard, BudgetTracker, TensorBoardSink
from opacus import PrivacyEngine


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=8, help="at most this many epochs")
    p.add_argument("--sigma", type=float, default=1.3, help="noise multiplier")
    p.add_argument("--batch-size", type=int, default=64, help="expected Poisson batch size")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--max-epsilon", type=float, default=2.0,
                   help="budget: the guard stops before the certified eps_upper exceeds it")
    p.add_argument("--logdir", default=None, help="TensorBoard log dir (default: a temp dir)")
    p.add_argument("--out", default=str(ROOT / "examples" / "output" / "tensorboard_epsilon.png"),
                   help="the PNG to write (examples/output/ is git-ignored)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    check_training_flags(p, args)
    return args


def train(args, logdir: Path):
    warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")
    warnings.filterwarnings("ignore", message=".*Full backward hook.*")
    torch.manual_seed(args.seed)
    digits = load_digits()
    x = torch.tensor(StandardScaler().fit_transform(digits.data), dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=loader, noise_multiplier=args.sigma, max_grad_norm=1.0,
        noise_generator=torch.Generator().manual_seed(args.seed))

    sink = TensorBoardSink(logdir)
    tracker = BudgetTracker(engine, args.delta, every_n_steps=1, every_epoch=False, sinks=[sink])
    tracker.attach(optimizer, data_loader=loader)
    guard = BudgetGuard(engine, max_epsilon=args.max_epsilon, delta=args.delta, mode="raise")
    guard.attach(optimizer)
    start = time.perf_counter()
    stopped = None
    try:
        for epoch in range(args.epochs):
            for xb, yb in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            last = tracker.last
            print(f"epoch {epoch}: {last.step} steps, train acc {acc:.3f}, "
                  f"epsilon in [{bound_text(last.eps_lower, False, 4)}, "
                  f"{bound_text(last.eps_upper, True, 4)}]")
            tracker.on_epoch_end(epoch)
    except BudgetExceededError as exc:
        stopped = exc
        print(f"guard: {exc}")
    finally:
        tracker.close()
    print(f"trained {tracker.last.step} steps in {time.perf_counter() - start:.1f} s; "
          f"TensorBoard events in {logdir}")
    return tracker, stopped


def plot(logdir: Path, out: Path, args, stopped) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = EventAccumulator(str(logdir))
    events.Reload()                                   # read the real event file back
    upper = events.Scalars("privacy/epsilon_upper")
    lower = events.Scalars("privacy/epsilon_lower")
    steps = np.array([e.step for e in upper])
    up = np.array([e.value for e in upper])
    lo = np.array([e.value for e in lower])
    q = events.Scalars("privacy/sample_rate")[-1].value
    sigma = events.Scalars("privacy/noise_multiplier")[-1].value

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 5.5), dpi=120, sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    ax.plot(steps, up, color="tab:red", lw=1.8, label=r"certified upper bound $\varepsilon_{up}$")
    ax.plot(steps, lo, color="tab:blue", lw=1.2, ls="--",
            label=r"certified lower bound $\varepsilon_{low}$")
    ax.axhline(args.max_epsilon, color="black", lw=1, ls=":",
               label=f"budget max_epsilon = {args.max_epsilon:g}")
    if stopped is not None:
        ax.axvline(steps[-1], color="gray", lw=0.8)
        ax.annotate(f"guard stops before step {steps[-1] + 1}\n"
                    f"(would reach {bound_text(stopped.epsilon, True, 4)})",
                    xy=(steps[-1], up[-1]), xytext=(0.55, 0.25), textcoords="axes fraction",
                    arrowprops={"arrowstyle": "->", "color": "gray"}, fontsize=8)
    ax.set_ylabel(r"$\varepsilon$ at $\delta$ = " + f"{args.delta:g}")
    ax.set_title(f"DP-SGD on digits (noise multiplier {sigma:g}, sample rate {q:.4g}): "
                 "read back from TensorBoard", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax2.plot(steps, (up - lo) / up * 100, color="tab:purple", lw=1.2)
    ax2.set_ylabel("gap (% of upper)", fontsize=8)
    ax2.set_xlabel("optimizer step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    print(f"read {len(steps)} steps from {logdir}; wrote {out}")


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(args.logdir) if args.logdir else Path(tmp) / "tb"
        _tracker, stopped = train(args, logdir)
        plot(logdir, Path(args.out), args, stopped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
