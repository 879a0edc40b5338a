"""Small-delta settings of issue 12: bounds, width and time (not run by pytest).

    python benchmarks/bench_small_delta.py [--peers]

Prints, per setting, eps_low, eps_up, relative width and seconds from scratch (both
bounds, a fresh accountant), and with --peers dp_accounting's PLD at interval 1e-4.
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
from scipy import special

from pb_accountant import PrivacyBucketsAccountant

SETTINGS = [
    # (label, history, deltas)
    ("s2 q.05 T5000", [(2.0, 0.05, 5000)], [1e-5, 1e-9, 1e-10, 1e-12, 1e-15]),
    ("s3 q.001 T1e5", [(3.0, 0.001, 100000)], [1e-5, 1e-9, 1e-12, 1e-15]),
    ("s1.1 q.01 T1000", [(1.1, 0.01, 1000)], [1e-5, 1e-10, 1e-12, 1e-15]),
    ("gauss q1 s50 T1e6", [(50.0, 1.0, 10 ** 6)], [1e-5, 1e-12, 1e-15]),
    ("gauss q1 s5 T1000", [(5.0, 1.0, 1000)], [1e-5, 1e-12, 1e-15]),
    # drawn at random (seed 12): sigma, q, steps
    ("s0.8 q.004 T3e4", [(0.8, 0.004, 30000)], [1e-6, 1e-11, 1e-14]),
    ("s6.3 q.2 T2e3", [(6.3, 0.2, 2000)], [1e-7, 1e-13]),
    ("s1.5 q2e-4 T1e6", [(1.5, 2e-4, 10 ** 6)], [1e-8, 1e-12]),
    ("sched s1.0/1.4 q.02", [(1.0, 0.02, 500), (1.4, 0.02, 500), (1.2, 0.01, 2000)], [1e-5, 1e-12]),
]


def gauss_delta(mu, eps):
    return special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2)


def pld_epsilon(history, delta):
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting import dp_event
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for s, q, n in history:
        ev = dp_event.GaussianDpEvent(s) if q == 1.0 else dp_event.PoissonSampledDpEvent(
            q, dp_event.GaussianDpEvent(s))
        acc.compose(ev, n)
    return acc.get_epsilon(delta)


def main(argv):
    peers = "--peers" in argv
    for label, history, deltas in SETTINGS:
        for delta in deltas:
            acc = PrivacyBucketsAccountant()
            acc.history = list(history)
            t0 = time.perf_counter()
            b = acc.get_epsilon_bounds(delta)
            dt = time.perf_counter() - t0
            width = (b.upper - b.lower) / b.upper if math.isfinite(b.upper) and b.upper > 0 else math.inf
            extra = ""
            if peers:
                try:
                    extra = f" pld={pld_epsilon(history, delta):.6g}"
                except Exception as exc:  # noqa: BLE001
                    extra = f" pld=({type(exc).__name__})"
            print(f"{label:22s} delta={delta:7.0e} low={b.lower:.6g} up={b.upper:.6g} "
                  f"width={width:.2e} t={dt:.2f}s{extra}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
