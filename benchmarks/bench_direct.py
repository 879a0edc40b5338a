"""Direct sums against transforms (issue 12): the cost behind ``convolution._DIRECT_TAPS``.

For rows of length m and a short operand spanning k columns (random masses; the wide
operand leaf-like), prints the time of ``convolve_rows`` summed directly and through the
transform, at a loose tolerance (two parts, the transform's cheapest) and at a tight one
(a finer split), best of a 0.15 s loop each.  Tests never time things; this script is
where the thresholds come from.

    python benchmarks/bench_direct.py [--m 1000 4000 16000 64000] [--k 32 64 128]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pb_accountant.convolution as conv


def _time(f, budget=0.15):
    f()
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < budget:
        f()
        n += 1
    return (time.perf_counter() - t) / n * 1e3


def measure(m: int, k: int, tolerance: float, rng) -> tuple:
    """(direct ms, transform ms) for one product of 2 rows."""
    x = np.zeros((2, m))
    x[:, :k] = rng.random((2, k)) * 1e-3
    y = rng.random((2, m)) ** 8 * 1e-2
    saved = conv._DIRECT_TAPS
    try:
        conv._DIRECT_TAPS = ((10 ** 9, 0),)
        direct = _time(lambda: conv.convolve_rows(x, y, tolerance))
        conv._DIRECT_TAPS = ((0, 0),)
        transform = _time(lambda: conv.convolve_rows(x, y, tolerance))
    finally:
        conv._DIRECT_TAPS = saved
    return direct, transform


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, nargs="*", default=[200, 1000, 4000, 16000, 64000])
    parser.add_argument("--k", type=int, nargs="*", default=[32, 64, 128, 256])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("rows m, columns k: direct / transform ms (loose tolerance; tight tolerance); "
          "* where the library sums directly")
    for m in args.m:
        cells = []
        for k in args.k:
            if k > m:
                continue
            loose = measure(m, k, 1.0, rng)
            tight = measure(m, k, 1e-20, rng)
            mark = "*" if k <= conv._direct_taps(m) else " "
            cells.append(f"k{k}{mark} {loose[0]:.2f}/{loose[1]:.2f} ({tight[0]:.2f}/{tight[1]:.2f})")
        print(f"m {m:6d}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
