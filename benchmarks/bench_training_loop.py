"""What accounting costs inside a DP-SGD training loop: pb vs Opacus's PRV and RDP.

(a) A CIFAR-sized schedule (sigma 1.1, q = 256/50000, 195 steps per epoch, 100 epochs)
    fed through ``step()``, asking for epsilon (delta 1e-5) after every epoch: total
    accounting time for pb ``get_epsilon`` (what Opacus calls), pb
    ``get_epsilon_bounds`` (both certified bounds), PRV and RDP, with the final values.
(b) Overhead of ``step()`` alone: 10^5 calls, pb vs RDPAccountant.
(c) ``opacus.accountants.utils.get_noise_multiplier`` with accountant="pb" vs "prv"
    (target eps 3, delta 1e-5, q 0.004, 50 epochs), plus pb's certified upper bound
    for each returned sigma.

Timings are medians over ``--repeats`` runs (part (a) is run ``--loop-repeats`` times,
1 by default, because it is the expensive one).  Every run uses fresh accountants, so
no run profits from another's caches.

    python benchmarks/bench_training_loop.py                # full, a few minutes
    python benchmarks/bench_training_loop.py --epochs 10 --repeats 1   # quick look
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pb_accountant  # noqa: E402,F401  (registers "pb" with Opacus)
from pb_accountant import PrivacyBucketsAccountant  # noqa: E402

from opacus.accountants import PRVAccountant, RDPAccountant  # noqa: E402
from opacus.accountants.utils import get_noise_multiplier  # noqa: E402

DELTA = 1e-5


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--steps-per-epoch", type=int, default=195)
    p.add_argument("--sigma", type=float, default=1.1)
    p.add_argument("--sample-rate", type=float, default=256 / 50000)
    p.add_argument("--step-calls", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3, help="repeats of (b) and (c)")
    p.add_argument("--loop-repeats", type=int, default=1, help="repeats of (a)")
    p.add_argument("--skip-noise", action="store_true", help="skip part (c)")
    return p.parse_args(argv)


def median_time(fn, repeats):
    """(median seconds, last result) of ``repeats`` calls of fn()."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


# ------------------------------------------------------------------------------------
# (a) the training loop
# ------------------------------------------------------------------------------------

def loop(make, query, args):
    """Step through the schedule, querying after every epoch; returns the last answer."""
    acc = make()
    answer = None
    for _ in range(args.epochs):
        for _ in range(args.steps_per_epoch):
            acc.step(noise_multiplier=args.sigma, sample_rate=args.sample_rate)
        answer = query(acc)
    return answer


def part_a(args):
    cases = [
        ("pb get_epsilon", PrivacyBucketsAccountant, lambda a: a.get_epsilon(DELTA)),
        ("pb get_epsilon_bounds", PrivacyBucketsAccountant, lambda a: a.get_epsilon_bounds(DELTA)),
        ("Opacus PRV get_epsilon", PRVAccountant, lambda a: a.get_epsilon(DELTA)),
        ("Opacus RDP get_epsilon", RDPAccountant, lambda a: a.get_epsilon(DELTA)),
    ]
    out = {}
    for name, make, query in cases:
        t, answer = median_time(lambda: loop(make, query, args), args.loop_repeats)
        out[name] = (t, answer)
        print(f"  ... {name}: {t:.2f} s", file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------------------------
# (b) step() overhead
# ------------------------------------------------------------------------------------

def steps_only(make, n, sigma, q):
    acc = make()
    step = acc.step
    for _ in range(n):
        step(noise_multiplier=sigma, sample_rate=q)
    assert sum(h[2] for h in acc.history) == n    # (RDP's len() counts entries)
    return acc


def part_b(args):
    out = {}
    for name, make in [("pb", PrivacyBucketsAccountant), ("RDP", RDPAccountant)]:
        t, _ = median_time(lambda: steps_only(make, args.step_calls, args.sigma,
                                              args.sample_rate), args.repeats)
        out[name] = t
    return out


# ------------------------------------------------------------------------------------
# (c) get_noise_multiplier
# ------------------------------------------------------------------------------------

def certified(sigma, q, steps):
    acc = PrivacyBucketsAccountant()
    acc.history = [(sigma, q, steps)]
    return acc.get_epsilon_bounds(DELTA)


def part_c(args):
    target, q, epochs = 3.0, 0.004, 50
    steps = int(epochs / q)
    out = {}
    for name in ("pb", "prv"):
        t, sigma = median_time(lambda: get_noise_multiplier(
            target_epsilon=target, target_delta=DELTA, sample_rate=q, epochs=epochs,
            accountant=name), args.repeats)
        out[name] = (t, sigma, certified(sigma, q, steps))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")       # RDP's "optimal order is the largest alpha"
    total_steps = args.epochs * args.steps_per_epoch
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}")

    a = part_a(args)
    b = part_b(args)
    c = None if args.skip_noise else part_c(args)

    w = 74
    print("=" * w)
    print(f"(a) training loop: sigma={args.sigma}, q={args.sample_rate:.6g}, "
          f"{args.steps_per_epoch} steps/epoch x {args.epochs} epochs = {total_steps} steps,")
    print(f"    epsilon (delta={DELTA:g}) asked after every epoch; "
          f"median of {args.loop_repeats} run(s)")
    print("-" * w)
    print(f"{'accountant / query':<26}{'total s':>10}{'ms/epoch':>11}{'final epsilon':>27}")
    for name, (t, answer) in a.items():
        if hasattr(answer, "lower"):
            value = f"[{answer.lower:.5f}, {answer.upper:.5f}]"
        else:
            value = f"{answer:.5f}"
        print(f"{name:<26}{t:>10.2f}{1000 * t / args.epochs:>11.1f}{value:>27}")
    t_pb = a["pb get_epsilon"][0]
    t_pbb = a["pb get_epsilon_bounds"][0]
    t_prv = a["Opacus PRV get_epsilon"][0]
    t_rdp = a["Opacus RDP get_epsilon"][0]
    print(f"ratios: PRV/pb = {t_prv / t_pb:.2f} (get_epsilon), {t_prv / t_pbb:.2f} (bounds);"
          f"  pb/RDP = {t_pb / t_rdp:.1f} (get_epsilon), {t_pbb / t_rdp:.1f} (bounds)")
    print("-" * w)
    print(f"(b) step() overhead: {args.step_calls} calls, median of {args.repeats}")
    print(f"    pb  {b['pb']:.3f} s ({1e6 * b['pb'] / args.step_calls:.2f} us/step)   "
          f"RDP {b['RDP']:.3f} s ({1e6 * b['RDP'] / args.step_calls:.2f} us/step)   "
          f"pb/RDP = {b['pb'] / b['RDP']:.2f}")
    if c is not None:
        print("-" * w)
        print(f"(c) get_noise_multiplier: target eps 3, delta {DELTA:g}, q 0.004, 50 epochs "
              f"(12500 steps), median of {args.repeats}")
        print(f"{'accountant':<12}{'time s':>10}{'sigma':>14}{'pb certified eps [lo, up]':>34}")
        for name, (t, sigma, bnd) in c.items():
            print(f"{name:<12}{t:>10.2f}{sigma:>14.6f}"
                  f"{f'[{bnd.lower:.5f}, {bnd.upper:.5f}]':>34}")
        ok = c["pb"][2].upper <= 3.0
        print(f"    pb's sigma certified <= 3: {ok};  PRV's sigma certified <= 3: "
              f"{c['prv'][2].upper <= 3.0};  time prv/pb = {c['prv'][0] / c['pb'][0]:.2f}")
    print("=" * w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
