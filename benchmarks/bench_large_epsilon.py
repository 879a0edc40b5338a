"""Widths of pb's bracket on a seeded random sample, worst case first (issue 12).

Draws settings like ``bench_random.py`` (same ranges, any seed), runs pb alone (no
peers) and prints, per option set, the worst and median width (up - low) / up, the
settings whose lower bound is 0, and the worst settings.  Used to measure the grouped
lower bound at large epsilon and the grid resolution's share of the width:

    python benchmarks/bench_large_epsilon.py --n 40 --seed 2026
    python benchmarks/bench_large_epsilon.py --n 40 --seed 2026 --resolution 0.0075 \
        --leaf-resolution 0.02
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_random import draw_settings  # noqa: E402


def run(settings, options, limit_steps):
    from pb_accountant import PrivacyBucketsAccountant
    rows = []
    for s in settings:
        if sum(c for _, _, c in s["history"]) > limit_steps:
            continue
        acc = PrivacyBucketsAccountant(**options)
        acc.history = list(s["history"])
        t = time.perf_counter()
        b = acc.get_epsilon_bounds(s["delta"])
        dt = time.perf_counter() - t
        width = (b.upper - b.lower) / b.upper if math.isfinite(b.upper) and b.upper > 0 else (
            0.0 if b.upper == 0 else math.inf)
        rows.append((width, s, b, dt))
        print(f"  #{s['index']:3d} {s['kind']:18s} steps {sum(c for *_, c in s['history']):>9d} "
              f"delta {s['delta']:.1e}: [{b.lower:.6g}, {b.upper:.6g}] width {width:.2e} "
              f"{dt:.2f}s", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--only", type=int, nargs="*", help="setting indices to run")
    ap.add_argument("--resolution", type=float)
    ap.add_argument("--leaf-resolution", type=float)
    ap.add_argument("--max-steps", type=int, default=10 ** 7)
    a = ap.parse_args(argv)
    options = {}
    if a.resolution:
        options["resolution"] = a.resolution
    if a.leaf_resolution:
        options["leaf_resolution"] = a.leaf_resolution
    settings = draw_settings(max(a.n, max(a.only) + 1 if a.only else 0), a.seed)
    if a.only:
        settings = [s for s in settings if s["index"] in set(a.only)]
    print(f"seed {a.seed}, {len(settings)} settings, options {options or 'default'}")
    rows = run(settings, options, a.max_steps)
    widths = [w for w, *_ in rows]
    finite = [w for w in widths if math.isfinite(w)]
    print(f"width: worst {max(widths):.3e}, median {statistics.median(widths):.3e}; "
          f"above 5e-4: {sum(w > 5e-4 for w in widths)} of {len(widths)}; "
          f"lower bound 0 under an upper bound > 1: "
          f"{sum(b.lower == 0 and b.upper > 1 for _, _, b, _ in rows)}; "
          f"infinite upper: {len(widths) - len(finite)}; total time "
          f"{sum(dt for *_, dt in rows):.1f}s")
    for w, s, b, dt in sorted(rows, key=lambda r: -r[0])[:8]:
        print(f"  worst #{s['index']} {s['history'][:2]}{'...' if len(s['history']) > 2 else ''} "
              f"delta {s['delta']:.2g}: [{b.lower:.6g}, {b.upper:.6g}] width {w:.2e}")


if __name__ == "__main__":
    main()
