"""Two-scale leaves on and off (pb_accountant/two_scale.py, docs/method.md §3).

Draws random settings of the small-q corner (seeded) and prints, per setting, the
certified bracket and the time of an epsilon query from scratch (both bounds, the
adaptive refinement included) with ``two_scale=False`` (one grid) and with the
default (two-scale leaves where the rule takes them), then the worst and the median.

    python benchmarks/bench_two_scale.py --n 16 --seed 3
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pb_accountant import PrivacyBucketsAccountant  # noqa: E402


def draw(n, seed, sigma=(0.4, 1.2), q=(1e-5, 1e-3), steps=(1e3, 1e7), delta=(1e-12, 1e-4)):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        out.append((round(float(rng.uniform(*sigma)), 4),
                    float(f"{10 ** rng.uniform(*np.log10(q)):.4g}"),
                    int(10 ** rng.uniform(*np.log10(steps))),
                    float(f"{10 ** rng.uniform(*np.log10(delta)):.3g}")))
    return out


def timed_bounds(setting, **options):
    sigma, q, steps, delta = setting
    a = PrivacyBucketsAccountant(**options)
    a.history = [(sigma, q, steps)]
    t0 = time.perf_counter()
    b = a.get_epsilon_bounds(delta)
    return b, time.perf_counter() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--seed", type=int, default=3)
    a = p.parse_args(argv)
    rows = []
    for i, s in enumerate(draw(a.n, a.seed)):
        (off, t_off), (on, t_on) = timed_bounds(s, two_scale=False), timed_bounds(s)
        rows.append((off.width, t_off, on.width, t_on))
        print(f"#{i} sigma {s[0]}, q {s[1]:.4g}, {s[2]} steps, delta {s[3]:.3g}:\n"
              f"    one grid  [{off.lower:.8g}, {off.upper:.8g}] width {off.width:.2e} "
              f"in {t_off:6.2f} s\n"
              f"    two-scale [{on.lower:.8g}, {on.upper:.8g}] width {on.width:.2e} "
              f"in {t_on:6.2f} s{'  (' + '; '.join(on.notes) + ')' if on.notes else ''}",
              flush=True)
    for name, j in (("one grid", 0), ("two-scale", 2)):
        widths = [r[j] for r in rows]
        times = [r[j + 1] for r in rows]
        print(f"{name}: width worst {max(widths):.2e}, median {statistics.median(widths):.2e}; "
              f"time worst {max(times):.2f} s, median {statistics.median(times):.2f} s, "
              f"total {math.fsum(times):.1f} s; widths above 5e-4: "
              f"{sum(w > 5e-4 for w in widths)}")


if __name__ == "__main__":
    main()
