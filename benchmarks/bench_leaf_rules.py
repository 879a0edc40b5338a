"""Leaf sizing (issue 12, item 2): width and time of pb when the leaf grid is capped.

Today's leaf spacing is ``leaf_resolution`` times the pair's loss spread; at small q the
loss range (set by the per-step infinity budget) is wide compared with that spread, so
leaves hit 65534 buckets.  This benchmark re-runs random-suite settings (same seed and
indices as ``bench_random.py``) with the leaf's spacing doubled until it has at most
``--caps`` buckets (``None``: today's rule) and prints width and time for each cap.

Accuracy model used to read the results (docs/method.md §4: the split pair replaces each
event's loss by a two-point spread of variance at most d0^2/4 that keeps both masses):
T steps add variance v <= T d0^2 / 4, which moves epsilon by about
(v / 2) (h - 1), h = p_A(eps) / (e^eps P_B(L > eps)) the hazard of the composed loss at
eps.  In the Gaussian regime (many sampled events) h ~ z / sqrt(T s^2) and the relative
error is about d0^2 / (8 s^2), independent of T: the leaf must resolve the spread s.
In the tail regime (T q <~ 1: eps decided by a few sampled events) h ~ (a few) / eps and
much coarser leaves are as accurate.  Neither T nor eps is known where the leaf is built
(it is shared by every history of the pair and delta class), so no cap is safe for all.

    python benchmarks/bench_leaf_rules.py --only 156 155 18 142 197 --caps None 16382 8190
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_random import draw_settings  # noqa: E402

import pb_accountant.composition as composition  # noqa: E402
from pb_accountant import PrivacyBucketsAccountant  # noqa: E402

_today = composition.leaf_grid
_CAP = {"cap": None}


def capped_leaf_grid(pair, budget, options, cap=composition.LEAF_LOSS_RANGE):
    """Today's leaf grid, its spacing doubled until it has at most _CAP buckets."""
    grid = _today(pair, budget, options, cap)
    limit = _CAP["cap"]
    if limit is None or options.factor is not None or options.number_of_buckets is not None:
        return grid
    lo, hi = pair.loss_range(budget)
    lo, hi = max(lo, -cap), min(hi, cap)
    half = max((hi - lo) / 2.0, 1e-9)
    step = grid.log_factor
    while half / step + 2 > limit:
        step *= 2.0
    if step == grid.log_factor:
        return grid
    offset = int(round((lo + hi) / 2.0 / step))
    n = composition.buckets_for(half + step, step, options.max_buckets)
    n_max = int((composition.MAX_LOSS_RANGE / step - abs(offset))) // 2 * 2
    return composition.Grid(step, max(min(n, n_max), 2), offset)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--only", type=int, nargs="*")
    parser.add_argument("--caps", nargs="*", default=["None", "16382", "8190", "4094"])
    args = parser.parse_args(argv)
    composition.leaf_grid = capped_leaf_grid
    caps = [None if c == "None" else int(c) for c in args.caps]
    settings = draw_settings(args.n, args.seed)
    if args.only:
        settings = [s for s in settings if s["index"] in set(args.only)]
    for s in settings:
        steps = sum(c for _, _, c in s["history"])
        cells = []
        for cap in caps:
            _CAP["cap"] = cap
            acc = PrivacyBucketsAccountant()
            acc.history = list(s["history"])
            t, c = time.perf_counter(), time.process_time()
            b = acc.get_epsilon_bounds(s["delta"])
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            width = (b.upper - b.lower) / b.upper if b.upper > 0 else float("nan")
            cells.append(f"cap {cap}: [{b.lower:.6g}, {b.upper:.6g}] width {width:.2e} "
                         f"wall {wall:.3f} cpu {cpu:.3f}")
        sigma, q, _ = s["history"][0]
        print(f"#{s['index']} steps {steps} segments {len(s['history'])} sigma {sigma} q {q} "
              f"delta {s['delta']:.1e} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
