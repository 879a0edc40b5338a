"""Bit-for-bit check of performance work: every bound as ``float.hex``, to diff two trees.

Settings: the 100-epoch noise schedule, ~60 settings of ``bench_random.draw_settings(200,
12)`` that take under ~2 s (plus #7, #17 and #183, the many-segment ones; ``--quick``
leaves those three out), delta queries (``get_delta``, ``get_delta_bounds``), and a
per-epoch training loop asking ``get_epsilon`` and ``get_epsilon_bounds`` after every
epoch on a growing history.  Each line is ``name: hex hex ...``; two runs must give the
same file.

    PYTHONPATH=/path/to/reference/tree python benchmarks/check_same_bits.py --out ref.txt
    python benchmarks/check_same_bits.py --out new.txt && diff ref.txt new.txt

(``PYTHONPATH`` puts the reference tree's ``pb_accountant`` ahead of the editable
install; the script prints which one it imported.)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: indices of draw_settings(200, 12) whose pb time was under ~2 s on main (54761bb),
#: constant and schedule settings alike, spread over the suite
RANDOM_INDICES = (0, 2, 3, 5, 8, 11, 13, 15, 18, 20, 22, 25, 27, 29, 31, 33, 35, 38, 41,
                  43, 47, 51, 54, 57, 59, 61, 63, 65, 67, 69, 71, 75, 78, 80, 83, 85, 87,
                  89, 92, 97, 99, 101, 103, 105, 108, 110, 112, 114, 117, 119, 121, 124,
                  126, 129, 132, 134, 136, 138, 142, 144, 150, 152, 156, 158, 161, 163,
                  # schedules of 11-495 segments
                  10, 16, 26, 48, 70, 84, 122, 131, 177, 193, 195)
#: the many-segment settings whose fixed per-operation costs dominate
HEAVY_INDICES = (7, 17, 183)
#: the 100-epoch noise schedule (sigma 1.0 .. 1.99, q 0.01, 100 steps each)
SCHEDULE = [(round(1.0 + 0.01 * i, 12), 0.01, 100) for i in range(100)]
DELTA_EPSILONS = (0.0, 0.1, 0.5, 1.0, 2.0, 5.0)


def _hex(x) -> str:
    return float(x).hex()


def _bounds(history, delta):
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    b = acc.get_epsilon_bounds(delta)
    return [_hex(b.lower), _hex(b.upper)]


def _delta_queries(history):
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    out = [_hex(acc.get_delta(e)) for e in DELTA_EPSILONS]
    db = acc.get_delta_bounds(list(DELTA_EPSILONS))
    out += [_hex(v) for v in db.lower] + [_hex(v) for v in db.upper]
    return out


def _training_loop(epochs: int, steps: int, sigma: float, q: float, bounds: bool):
    """One accountant stepped through ``epochs`` epochs, queried after each."""
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    out = []
    for _ in range(epochs):
        for _ in range(steps):
            acc.step(noise_multiplier=sigma, sample_rate=q)
        if bounds:
            b = acc.get_epsilon_bounds(1e-5)
            out += [_hex(b.lower), _hex(b.upper)]
        else:
            out.append(_hex(acc.get_epsilon(1e-5)))
    return out


def _schedule_loop(history, delta):
    """The schedule's epochs appended one at a time, both bounds after each."""
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    out = []
    for entry in history:
        acc.history = acc.history + [entry]
        b = acc.get_epsilon_bounds(delta)
        out += [_hex(b.lower), _hex(b.upper)]
    return out


def cases(quick: bool):
    from bench_random import draw_settings
    drawn = draw_settings(200, 12)
    out = [("schedule100", lambda: _bounds(SCHEDULE, 1e-5)),
           ("schedule100-delta", lambda: _delta_queries(SCHEDULE)),
           ("schedule100-loop", lambda: _schedule_loop(SCHEDULE[:40], 1e-5)),
           ("training-get_epsilon", lambda: _training_loop(30, 195, 1.1, 256 / 50000, False)),
           ("training-bounds", lambda: _training_loop(12, 100, 0.9, 0.02, True))]
    indices = RANDOM_INDICES + (() if quick else HEAVY_INDICES)
    for k in indices:
        s = drawn[k]
        out.append((f"random{k}", lambda s=s: _bounds(s["history"], s["delta"])))
    for k in RANDOM_INDICES[::6]:
        s = drawn[k]
        out.append((f"random{k}-delta", lambda s=s: _delta_queries(s["history"])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="file the hex values are written to")
    ap.add_argument("--quick", action="store_true", help="leave out #7, #17 and #183")
    args = ap.parse_args(argv)
    import pb_accountant
    print(f"pb_accountant from {os.path.dirname(pb_accountant.__file__)}", flush=True)
    t_all = time.perf_counter()
    with open(args.out, "w") as fh:
        for name, run in cases(args.quick):
            t0 = time.perf_counter()
            values = run()
            fh.write(f"{name}: {' '.join(values)}\n")
            fh.flush()
            print(f"{name:24s} {len(values):4d} values  {time.perf_counter() - t0:6.2f}s",
                  flush=True)
    print(f"total {time.perf_counter() - t_all:.1f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
