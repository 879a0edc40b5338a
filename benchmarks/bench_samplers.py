"""Samplers benchmark (issue 13): the shuffle bracket's speed, and fixed-size and
replace-one bounds against Poisson add/remove on random settings.

1. Shuffle, 100 epochs of CIFAR-10-sized training (n = 50,000, b = 256, sigma 1.0 and
   0.6): certified bracket from a fresh accountant (cold caches); target < 2 s.  The
   Poisson bracket of the same history is printed beside it.
2. Random settings (sigma in [0.5, 5], q in [1e-3, 0.2], steps in [10, 20000], log-
   uniform, delta 1e-5): time and relative width (upper - lower) / upper of the
   certified bounds for poisson/add_remove, poisson/replace_one and
   fixed_size/replace_one (batch fraction q), medians and worst cases.

    python benchmarks/bench_samplers.py [--settings 20] [--seed 0]
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def shuffle_cifar():
    from pb_accountant import PrivacyBucketsAccountant
    from pb_accountant.sampled_pairs import max_of_batches_pair
    n, b, epochs = 50_000, 256, 100
    steps = -(-n // b) * epochs
    print(f"shuffle: n={n}, b={b}, {epochs} epochs ({steps} steps), delta=1e-5")
    print(f"{'sigma':>6} {'relation':>16} {'lower':>9} {'upper':>9} {'seconds':>8} "
          f"{'poisson lo/up':>20}")
    for sigma in (1.0, 0.6):
        for relation in ("replace_special", "replace_one"):
            max_of_batches_pair.cache_clear()
            acc = PrivacyBucketsAccountant(sampler="shuffle", neighbouring=relation,
                                           dataset_size=n, batch_size=b)
            acc.history = [(sigma, b / n, steps)]
            sec, r = timed(lambda: acc.get_epsilon_bounds(1e-5))
            poisson = PrivacyBucketsAccountant(
                neighbouring="add_remove" if relation == "replace_special" else relation)
            poisson.history = [(sigma, b / n, steps)]
            p = poisson.get_epsilon_bounds(1e-5)
            print(f"{sigma:6.2f} {relation:>16} {r.lower:9.4g} {r.upper:9.4g} {sec:8.3f} "
                  f"{p.lower:9.4g}/{p.upper:<9.4g}")


def random_settings(count, seed):
    from pb_accountant import PrivacyBucketsAccountant
    rng = np.random.default_rng(seed)
    configs = {"poisson/add_remove": {}, "poisson/replace_one": dict(neighbouring="replace_one"),
               "fixed_size/replace_one": dict(sampler="fixed_size", neighbouring="replace_one")}
    times = {k: [] for k in configs}
    widths = {k: [] for k in configs}
    for _ in range(count):
        sigma = float(math.exp(rng.uniform(math.log(0.5), math.log(5.0))))
        q = float(math.exp(rng.uniform(math.log(1e-3), math.log(0.2))))
        steps = int(math.exp(rng.uniform(math.log(10), math.log(20000))))
        for name, kw in configs.items():
            acc = PrivacyBucketsAccountant(**kw)
            acc.history = [(sigma, q, steps)]
            sec, r = timed(lambda: acc.get_epsilon_bounds(1e-5))
            times[name].append(sec)
            widths[name].append(r.width)
    print(f"\nrandom settings: {count} draws, delta=1e-5")
    print(f"{'configuration':>24} {'median s':>9} {'max s':>7} {'median width':>13} "
          f"{'max width':>10}")
    for name in configs:
        print(f"{name:>24} {statistics.median(times[name]):9.3f} {max(times[name]):7.3f} "
              f"{statistics.median(widths[name]):13.2e} {max(widths[name]):10.2e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shuffle_cifar()
    random_settings(args.settings, args.seed)


if __name__ == "__main__":
    main()
