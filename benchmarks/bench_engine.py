"""Engine benchmark: pb bounds vs Opacus PRV/RDP and dp_accounting PLD, same run.

Prints one table for four DP-SGD settings (the paper's and three common training runs):
pb's certified lower/upper epsilon (both directions, both bounds, from scratch), the
relative width, pb's upper bound against dp_accounting's pessimistic PLD epsilon
(value_discretization_interval 1e-4) and Opacus PRV's upper bound, and the time ratios
(medians of --repeats runs).  Then the paper's scale point: 2^18 compositions on a fixed
grid of more than 10^5 buckets.

    python benchmarks/bench_engine.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

SETTINGS = [  # sigma, q, steps, delta
    (4.0, 0.01, 65536, 1e-5),
    (1.1, 0.00512, 9766, 1e-5),
    (3.0, 0.08192, 2500, 1e-5),
    (0.8, 0.001, 100000, 1e-6),
]


def median_time(fn, repeats):
    times, value = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), value


def pb_bounds(sigma, q, steps, delta):
    from pb_accountant import SubsampledGaussian, epsilon_bounds
    return epsilon_bounds([(SubsampledGaussian(sigma, q), steps)], delta)


def prv_bounds(sigma, q, steps, delta):
    from opacus.accountants import PRVAccountant
    acc = PRVAccountant()
    acc.history = [(sigma, q, steps)]
    eps = acc.get_epsilon(delta)
    return eps


def pld_epsilon(sigma, q, steps, delta):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    pld = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q,
                                          value_discretization_interval=1e-4,
                                          pessimistic_estimate=True, use_connect_dots=True)
    return pld.self_compose(steps).get_epsilon_for_delta(delta)


def rdp_epsilon(sigma, q, steps, delta):
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    acc.history = [(sigma, q, steps)]
    return acc.get_epsilon(delta)


def scale_point(repeats):
    """2^18 compositions, fixed grid of 2n+1 = 131069 buckets (paper: ~4 min, O(n^2))."""
    from pb_accountant import SubsampledGaussian, epsilon_bounds

    def run():
        b = epsilon_bounds([(SubsampledGaussian(4.0, 0.01), 2 ** 18)], 1e-5,
                           number_of_buckets=65534)
        return b, b.grid

    return median_time(run, repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = []
    for sigma, q, steps, delta in SETTINGS:
        t_pb, b = median_time(lambda: pb_bounds(sigma, q, steps, delta), args.repeats)
        t_prv, e_prv = median_time(lambda: prv_bounds(sigma, q, steps, delta), args.repeats)
        t_pld, e_pld = median_time(lambda: pld_epsilon(sigma, q, steps, delta), args.repeats)
        t_rdp, e_rdp = median_time(lambda: rdp_epsilon(sigma, q, steps, delta), 1)
        rows.append((sigma, q, steps, delta, b, t_pb, e_prv, t_prv, e_pld, t_pld, e_rdp))

    header = ("setting (sigma, q, steps, delta)", "pb lower", "pb upper", "width",
              "up/PLD-1", "PRV up", "up<PRV", "RDP", "t pb", "t PRV", "t PLD",
              "faster x (vs best peer)", "vs PRV x")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for sigma, q, steps, delta, b, t_pb, e_prv, t_prv, e_pld, t_pld, e_rdp in rows:
        best = min(t_prv, t_pld)
        print(f"| {sigma}, {q}, {steps}, {delta:g} | {b.lower:.5f} | {b.upper:.5f} | "
              f"{b.width:.2e} | {b.upper / e_pld - 1:+.2e} | {e_prv:.5f} | "
              f"{'yes' if b.upper < e_prv else 'NO'} | {e_rdp:.4f} | {t_pb:.3f}s | "
              f"{t_prv:.3f}s | {t_pld:.3f}s | {best / t_pb:.2f} | {t_prv / t_pb:.2f} |")
    t_scale, (b, grid) = scale_point(max(1, min(args.repeats, 3)))
    print()
    print(f"scale point: 2^18 compositions of SubsampledGaussian(4, 0.01) on "
          f"{2 * grid.number_of_buckets + 1} buckets (fixed grid, paper's squaring rule): "
          f"{t_scale:.2f} s (median), eps in [{b.lower:.5f}, {b.upper:.5f}] at delta 1e-5")


if __name__ == "__main__":
    main()
