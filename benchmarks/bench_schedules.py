"""Per-step noise schedules: every step has its own noise multiplier (distinct history
entries).  Prints pb's certified bounds, dp_accounting's PLD (pessimistic and optimistic)
and Opacus's RDP, with wall times.  Fixed seed, random schedules.

    python benchmarks/bench_schedules.py [steps ...]      (default: 1000 10000)
"""
import sys
import time

import numpy as np

from pb_accountant import PrivacyBucketsAccountant

DELTA = 1e-5
SAMPLE_RATE = 0.01


def schedule(steps: int, seed: int = 20261123):
    rng = np.random.default_rng(seed)
    sigmas = np.round(rng.uniform(0.8, 1.5, size=steps), 12)
    return [(float(s), SAMPLE_RATE, 1) for s in sigmas]


def pb_bounds(history):
    acc = PrivacyBucketsAccountant()
    acc.history = history
    t = time.perf_counter()
    b = acc.get_epsilon_bounds(DELTA)
    return b, time.perf_counter() - t


def pld_epsilon(history, pessimistic: bool, interval: float = 1e-3):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    t = time.perf_counter()
    plds = [pld_lib.from_gaussian_mechanism(
        s, sampling_prob=q, value_discretization_interval=interval,
        pessimistic_estimate=pessimistic, use_connect_dots=pessimistic)
        for s, q, _ in history]
    while len(plds) > 1:                       # pairwise: the same result, faster
        plds = [plds[i].compose(plds[i + 1]) if i + 1 < len(plds) else plds[i]
                for i in range(0, len(plds), 2)]
    return plds[0].get_epsilon_for_delta(DELTA), time.perf_counter() - t


def rdp_epsilon(history):
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    acc.history = history
    t = time.perf_counter()
    return float(acc.get_epsilon(DELTA)), time.perf_counter() - t


def main(sizes):
    for steps in sizes:
        history = schedule(steps)
        b, t_pb = pb_bounds(history)
        print(f"steps={steps} distinct entries={len(history)} delta={DELTA} q={SAMPLE_RATE}")
        print(f"  pb   [{b.lower:.6f}, {b.upper:.6f}]  width {b.width:.2e}  {t_pb:.1f} s")
        try:
            up, t_up = pld_epsilon(history, True)
            lo, t_lo = pld_epsilon(history, False)
            print(f"  PLD  optimistic {lo:.6f}  pessimistic {up:.6f}  "
                  f"(discretization 1e-3)  {t_up + t_lo:.1f} s")
        except ImportError:
            print("  PLD  (dp_accounting not installed)")
        try:
            r, t_r = rdp_epsilon(history)
            print(f"  RDP  {r:.6f}  {t_r:.1f} s")
        except ImportError:
            print("  RDP  (opacus not installed)")
        sys.stdout.flush()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
