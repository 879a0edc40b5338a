"""Noise schedules (issue 12): pb's certified bounds against Opacus's RDP and
dp_accounting's PLD, with wall times, in the same run.

1. The 100-epoch schedule: history [(1.0 + 0.01 i, 0.01, 100) for i in range(100)],
   delta 1e-5.  Prints pb's time from scratch (both bounds, a fresh accountant, median
   of ``--repeat``), its bounds and width, and PLD's estimates.
2. Training: one query per epoch.  pb's total over the 100 queries (one accountant that
   grows by one epoch at a time) against Opacus RDPAccountant.get_epsilon once per
   epoch over the same run, and the final answers.
3. Per-step schedules (every step its own sigma, ``--per-step`` sizes): pb, PLD, RDP.

    python benchmarks/bench_schedules.py [--repeat 3] [--per-step 1000 ...] [--no-pld]
"""
import argparse
import statistics
import sys
import time

import numpy as np

from pb_accountant import PrivacyBucketsAccountant

DELTA = 1e-5
SAMPLE_RATE = 0.01
EPOCHS = 100
STEPS_PER_EPOCH = 100


def epoch_schedule():
    """The 100-epoch noise schedule: one sigma per epoch."""
    return [(round(1.0 + 0.01 * i, 12), SAMPLE_RATE, STEPS_PER_EPOCH) for i in range(EPOCHS)]


def per_step_schedule(steps: int, seed: int = 20261123):
    rng = np.random.default_rng(seed)
    sigmas = np.round(rng.uniform(0.8, 1.5, size=steps), 12)
    return [(float(s), SAMPLE_RATE, 1) for s in sigmas]


def pb_bounds(history):
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    t = time.perf_counter()
    b = acc.get_epsilon_bounds(DELTA)
    return b, time.perf_counter() - t


def pld_epsilon(history, pessimistic: bool, interval: float = 1e-3):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    t = time.perf_counter()
    plds = [pld_lib.from_gaussian_mechanism(
        s, sampling_prob=q, value_discretization_interval=interval,
        pessimistic_estimate=pessimistic, use_connect_dots=pessimistic).self_compose(c)
        for s, q, c in history]
    while len(plds) > 1:                       # pairwise: the same result, faster
        plds = [plds[i].compose(plds[i + 1]) if i + 1 < len(plds) else plds[i]
                for i in range(0, len(plds), 2)]
    return plds[0].get_epsilon_for_delta(DELTA), time.perf_counter() - t


def rdp_epsilon(history):
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    acc.history = list(history)
    t = time.perf_counter()
    return float(acc.get_epsilon(DELTA)), time.perf_counter() - t


def print_pld(history):
    try:
        up, t_up = pld_epsilon(history, True)
        lo, t_lo = pld_epsilon(history, False)
        print(f"  PLD  optimistic {lo:.6f}  pessimistic {up:.6f}  "
              f"(discretization 1e-3)  {t_up + t_lo:.2f} s")
    except ImportError:
        print("  PLD  (dp_accounting not installed)")


def from_scratch(repeat: int, pld: bool):
    history = epoch_schedule()
    times = []
    for _ in range(repeat):
        b, t = pb_bounds(history)
        times.append(t)
    print(f"100-epoch schedule ({EPOCHS} x {STEPS_PER_EPOCH} steps, sigma 1.00..1.99, "
          f"q {SAMPLE_RATE}, delta {DELTA}), from scratch, both bounds:")
    print(f"  pb   [{b.lower:.6f}, {b.upper:.6f}]  width {b.width:.2e}  "
          f"median {statistics.median(times):.3f} s  (runs: "
          + ", ".join(f"{t:.3f}" for t in times) + ")")
    if pld:
        print_pld(history)
    sys.stdout.flush()


def training():
    """One query per epoch, pb (both bounds) and Opacus RDP, each over the same run."""
    history = epoch_schedule()
    acc = PrivacyBucketsAccountant()
    t_pb = 0.0
    widths = []
    for sigma, q, count in history:
        acc.history.append((sigma, q, count))
        t = time.perf_counter()
        b = acc.get_epsilon_bounds(DELTA)
        t_pb += time.perf_counter() - t
        widths.append(b.width)
    print("training: one query per epoch (100 queries, the history grows by one epoch "
          "each):")
    print(f"  pb   total {t_pb:.3f} s  final [{b.lower:.6f}, {b.upper:.6f}]  "
          f"widest width {max(widths):.2e}")
    try:
        from opacus.accountants import RDPAccountant
        rdp = RDPAccountant()
        t_rdp = 0.0
        for sigma, q, count in history:
            rdp.history.append((sigma, q, count))
            t = time.perf_counter()
            r = float(rdp.get_epsilon(DELTA))
            t_rdp += time.perf_counter() - t
        print(f"  RDP  total {t_rdp:.3f} s  final {r:.6f}  (pb/RDP time {t_pb / t_rdp:.2f})")
    except ImportError:
        print("  RDP  (opacus not installed)")
    sys.stdout.flush()


def per_step(sizes, pld: bool):
    for steps in sizes:
        history = per_step_schedule(steps)
        b, t_pb = pb_bounds(history)
        print(f"per-step schedule: steps={steps} distinct entries={len(history)} "
              f"delta={DELTA} q={SAMPLE_RATE}")
        print(f"  pb   [{b.lower:.6f}, {b.upper:.6f}]  width {b.width:.2e}  {t_pb:.2f} s")
        if pld:
            print_pld(history)
        try:
            r, t_r = rdp_epsilon(history)
            print(f"  RDP  {r:.6f}  {t_r:.2f} s")
        except ImportError:
            print("  RDP  (opacus not installed)")
        sys.stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-step", type=int, nargs="*", default=[1000])
    parser.add_argument("--no-pld", action="store_true")
    args = parser.parse_args(argv)
    from_scratch(args.repeat, not args.no_pld)
    training()
    per_step(args.per_step, not args.no_pld)


if __name__ == "__main__":
    main()
