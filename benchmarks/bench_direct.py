"""Direct sums against transforms (issue 12): the cost model behind
``convolution.direct_is_cheaper``.

1. Synthetic rows: for rows of length m and a short operand spanning k columns (random
   masses; the wide operand leaf-like), the time of one product of 2 rows summed
   directly and through the transform, at a loose tolerance (two parts, the transform's
   cheapest) and a tight one (a finer split), best of a 0.1 s loop each; * marks the
   pairs the cost model sums directly.
2. Real operands (``--settings N``): every ``convolve_rows`` call of N random-suite
   settings (``--seed``, from scratch, both bounds; at most 60 calls per setting, drawn
   at random) is timed both ways (best of 3, alternated), the cost model's constants
   are fitted to those times (least squares on relative error), and the total time of
   the transform alone, of the cost model and of the better path per call (an oracle)
   are printed.

Tests never time things; this script is where the constants come from.

    python benchmarks/bench_direct.py [--m ...] [--k ...] [--settings 40 --seed 12]
"""
from __future__ import annotations

import argparse
import math
import random
import time

import numpy as np

import pb_accountant.convolution as conv


def _time(f, budget=0.1):
    f()
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < budget:
        f()
        n += 1
    return (time.perf_counter() - t) / n * 1e3


class _Forced:
    """Every product through the direct sum (where it can be certified) or through the
    transform."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        self.saved = (conv.direct_is_cheaper, conv._DIRECT_MOST_TERMS)
        if self.path == "direct":
            conv.direct_is_cheaper = lambda *args: True
        else:
            conv._DIRECT_MOST_TERMS = 0

    def __exit__(self, *exc):
        conv.direct_is_cheaper, conv._DIRECT_MOST_TERMS = self.saved


def product_ms(x, y, tolerance, path: str, timer=_time) -> float:
    with _Forced(path):
        return timer(lambda: conv.convolve_rows(x, y, tolerance))


def synthetic(ms, ks, rng):
    print("1. rows m, short operand k columns (2 rows): direct / transform ms, loose "
          "tolerance (tight); * where the cost model sums directly")
    for m in ms:
        cells = []
        for k in ks:
            if k > m:
                continue
            x = np.zeros((2, m))
            x[:, :k] = rng.random((2, k)) * 1e-3
            y = rng.random((2, m)) ** 8 * 1e-2 + 1e-200
            loose = [product_ms(x, y, 1.0, p) for p in ("direct", "transform")]
            tight = [product_ms(x, y, 1e-20, p) for p in ("direct", "transform")]
            mark = "*" if conv.direct_is_cheaper(2, m, k, m) else " "
            cells.append(f"k{k}{mark} {loose[0]:.2f}/{loose[1]:.2f} "
                         f"({tight[0]:.2f}/{tight[1]:.2f})")
        print(f"m {m:6d}: " + "  ".join(cells), flush=True)


def captured_calls(n_settings: int, seed: int, most_seconds: float):
    """(setting, x, y, tolerance) of up to 60 random ``convolve_rows`` calls from each of
    the first n_settings random-suite settings whose query takes at most most_seconds."""
    import bench_random
    from pb_accountant import PrivacyBucketsAccountant
    import pb_accountant.buckets as buckets
    import pb_accountant.composition as composition
    real = conv.convolve_rows
    calls: list = []

    def spy(x, y=None, tolerance=0.0):
        calls.append((x.copy(), None if y is None else y.copy(),
                      np.array(tolerance, dtype=float)))
        return real(x, y, tolerance)

    out, kept = [], 0
    settings = bench_random.draw_settings(200, seed)
    try:
        buckets.convolve_rows = composition.convolve_rows = spy
        for index, setting in enumerate(settings):
            if kept >= n_settings:
                break
            calls.clear()
            acc = PrivacyBucketsAccountant()
            acc.history = list(setting["history"])
            t = time.perf_counter()
            acc.get_epsilon_bounds(setting["delta"])
            if time.perf_counter() - t > most_seconds:
                continue
            chosen = list(calls)
            random.Random(index).shuffle(chosen)
            out += [(index,) + c for c in chosen[:60]]
            kept += 1
    finally:
        buckets.convolve_rows = composition.convolve_rows = real
    return out


def _best_of_3(f):
    times = []
    for _ in range(3):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def fitted(n_settings: int, seed: int, most_seconds: float):
    calls = captured_calls(n_settings, seed, most_seconds)
    rec = []
    for _, x, y, tol in calls:
        rows, m = x.shape
        lx, hx = conv._span(x)
        ly, hy = (lx, hx) if y is None else conv._span(y)
        with _Forced("direct"):
            if conv._direct(x, y) is None or hx == lx or hy == ly:
                continue            # not certifiable directly (or an operand of zeros)
        td = tt = math.inf
        for path in ("direct", "transform", "direct", "transform"):
            with _Forced(path):
                t = _best_of_3(lambda: conv.convolve_rows(x, y, tol))
            if path == "direct":
                td = min(td, t)
            else:
                tt = min(tt, t)
        rec.append((rows, m, hx - lx, hy - ly, td, tt))
    r = np.array(rec, dtype=float)
    rows, m, sx, sy, td, tt = r.T
    # the direct sum's shape (``direct_is_cheaper``): blocks of the shorter span, each
    # a convolve of at most _DIRECT_BLOCK columns against the longer one
    terms = np.minimum(sx, sy)
    blocks = np.ceil(terms / conv._DIRECT_BLOCK)
    per_block = np.minimum(terms, conv._DIRECT_BLOCK)
    entries = blocks * (np.maximum(sx, sy) + per_block - 1)
    n_fft = np.array([conv.fft_length(int(v)) for v in m], dtype=float)
    a = np.vstack([np.ones_like(td), rows * blocks, rows * entries,
                   rows * entries * per_block]).T
    cd = np.linalg.lstsq(a / td[:, None], np.ones_like(td), rcond=None)[0]
    b = np.vstack([np.ones_like(tt), rows, rows * n_fft * np.log2(n_fft)]).T
    ct = np.linalg.lstsq(b / tt[:, None], np.ones_like(tt), rcond=None)[0]
    print(f"2. {len(rec)} certifiable calls of {n_settings} settings (seed {seed}), "
          "least squares on relative error, ns:")
    print(f"   direct:    {cd[0] * 1e9:9.0f} per call + {cd[1] * 1e9:9.0f} per block of a "
          f"row + {cd[2] * 1e9:.2f} per entry + {cd[3] * 1e9:.4f} per term")
    print(f"   transform: {ct[0] * 1e9:9.0f} per call + {ct[1] * 1e9:9.0f} per row "
          f"+ {ct[2] * 1e9:.3f} per N log2 N")
    rule = np.array([conv.direct_is_cheaper(*map(int, v)) for v in r[:, :4]])
    chosen = np.where(rule, td, tt)
    print(f"   total: transform alone {tt.sum():.3f} s, cost model {chosen.sum():.3f} s, "
          f"better path per call {np.minimum(td, tt).sum():.3f} s; direct taken "
          f"{int(rule.sum())} of {len(rule)}; worst choice "
          f"{np.max(chosen / np.minimum(td, tt)):.2f}x the better path")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, nargs="*", default=[300, 1000, 4000, 16000, 64000])
    parser.add_argument("--k", type=int, nargs="*", default=[32, 128, 512, 2048, 8192])
    parser.add_argument("--settings", type=int, default=0,
                        help="random-suite settings whose calls are timed and fitted")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--most-seconds", type=float, default=1.0,
                        help="skip settings whose query takes longer")
    args = parser.parse_args(argv)
    synthetic(args.m, args.k, np.random.default_rng(0))
    if args.settings:
        fitted(args.settings, args.seed, args.most_seconds)


if __name__ == "__main__":
    main()
