"""FFT round-off floor (issue 12): pb's width and time on random-suite settings.

Runs ``get_epsilon_bounds`` from scratch (median of ``--repeats``) on settings drawn by
``bench_random.draw_settings`` (same seed, same indices), pb only, and prints one line
per setting: width (up - low) / up, the bounds, wall and CPU time, and the certified
absolute error of the composed split pair (``error``, the part that an FFT level charged
in full inflated).  Compare two checkouts by running it under each (PYTHONPATH).

    python benchmarks/bench_fft_floor.py [--seed 12] [--only 155 72 ...] [--small-delta 1e-9]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_random import draw_settings  # noqa: E402


def run(history, delta, repeats):
    from pb_accountant import PrivacyBucketsAccountant
    walls, cpus = [], []
    for _ in range(repeats):
        acc = PrivacyBucketsAccountant()
        acc.history = list(history)
        t, c = time.perf_counter(), time.process_time()
        b = acc.get_epsilon_bounds(delta)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    split = acc._composer.compose(acc._pairs(acc.history), delta, ("split",)).split
    return b, statistics.median(walls), statistics.median(cpus), float(max(split.error))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--only", type=int, nargs="*")
    parser.add_argument("--small-delta", type=float, default=None,
                        help="only settings with delta at most this")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    settings = draw_settings(args.n, args.seed)
    if args.only:
        settings = [s for s in settings if s["index"] in set(args.only)]
    if args.small_delta is not None:
        settings = [s for s in settings if s["delta"] <= args.small_delta]
    if args.max_steps is not None:
        settings = [s for s in settings
                    if sum(c for _, _, c in s["history"]) <= args.max_steps]
    import pb_accountant
    print(f"# pb_accountant from {os.path.dirname(pb_accountant.__file__)}")
    print("index kind segments steps delta width low up wall_s cpu_s split_error")
    for s in settings:
        steps = sum(c for _, _, c in s["history"])
        b, wall, cpu, err = run(s["history"], s["delta"], args.repeats)
        width = (b.upper - b.lower) / b.upper if b.upper > 0 else float("nan")
        print(f"{s['index']} {s['kind']} {len(s['history'])} {steps} {s['delta']:.2e} "
              f"{width:.3e} {b.lower:.7g} {b.upper:.7g} {wall:.3f} {cpu:.3f} {err:.2e}",
              flush=True)


if __name__ == "__main__":
    main()
