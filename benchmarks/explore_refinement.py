"""Exploration, not a bound: would refining one half of the grids beat halving both?

An epsilon query whose first pass is wider than ``engine.TARGET_WIDTH`` computes the
bounds again with both the leaf and the final resolutions halved (``Composer.refined``).
The width behaves like L + F, a leaf part and a final-grid part, each shrinking about
4-fold per halving of its own resolution; where one part dominates, or one half is much
cheaper, halving only that half could meet the target for less.  For each setting of a
random suite whose first pass (at the level ``engine._first_level`` picks) is too wide,
this script times that pass and the three refinements from scratch (each the faster of
two fresh composers) and prints their widths:

    F/2: final resolution halved;  L/2: leaf resolution halved;  B/2: both (what the
    engine does; a finer level also doubles the bucket cap)

and then, over the settings whose first width is at most 4x the target (where one
halving of both suffices in the model), the cost in first-pass units of three policies:
the engine's (B/2), "F/2 first, B/2 if that fails", "L/2 first, B/2 if that fails", and
an oracle that knows the cheapest refinement that meets the target.

    python benchmarks/explore_refinement.py --seed 31 [--max-time 3]

``--max-time``: settings whose pb time in the suite's saved table exceeds it are
skipped (that table must exist: bench_random.py writes it).

Measured on seed 31 (benchmarks/results/explore_refinement_seed31.txt): 69 of the
settings under 3 s have a first pass wider than the target, 63 of them within 4x of it.
Over those 63 the engine's rule costs 27.6 s, F/2 first 30.6 s, L/2 first 36.8 s and
the oracle 25.5 s.  The oracle saves 7%, and a rule that must guess costs up to 1.65
times the engine's on single settings, so the engine keeps halving both.
"""

import argparse
import dataclasses
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import bench_random as BR  # noqa: E402

from pb_accountant import PrivacyBucketsAccountant, engine  # noqa: E402
from pb_accountant.composition import Composer, canonical_history  # noqa: E402

#: a stand-in cost for a second refinement (level 2), where a policy needs one
LEVEL_TWO = 3.0


def timed(options, history, delta, symmetric):
    best, bounds = math.inf, None
    for _ in range(2):
        composer = Composer(options)
        t = time.perf_counter()
        bounds = engine._two_sided_bounds(composer, history, delta, symmetric)
        best = min(best, time.perf_counter() - t)
    return best, bounds


def variants(options):
    wider_cap = 2 * (options.max_buckets + 2) - 2
    return {
        "F/2": dataclasses.replace(options, resolution=options.resolution / 2),
        "L/2": dataclasses.replace(options, leaf_resolution=options.leaf_resolution / 2),
        "B/2": dataclasses.replace(options, resolution=options.resolution / 2,
                                   leaf_resolution=options.leaf_resolution / 2,
                                   max_buckets=wider_cap),
    }


def measure(setting):
    acc = PrivacyBucketsAccountant()
    acc.history = list(setting["history"])
    sampled = acc._sampled(acc._snapshot(), acc._assumptions)
    history = canonical_history(list(sampled.upper))
    delta = setting["delta"]
    level = engine._first_level(acc._composer, history, delta)
    options = acc._composer.refined(level).options
    t0, b0 = timed(options, history, delta, sampled.symmetric)
    if not (math.isfinite(b0.upper) and b0.upper > 0 and b0.width > engine.TARGET_WIDTH):
        return None
    out = {"level": level, "t0": t0, "w0": b0.width}
    for name, opts in variants(options).items():
        t, b = timed(opts, history, delta, sampled.symmetric)
        out[name] = (t / t0, b.width)
    return out


def policy_costs(row, aim=engine.TARGET_WIDTH):
    """Cost, in first-pass units, of each policy on one measured setting."""
    def then_both(first):
        cost, width = row[first]
        if width <= aim:
            return 1 + cost
        return 1 + cost + both()

    def both():
        cost, width = row["B/2"]
        return cost if width <= aim else cost + LEVEL_TWO

    met = [row[k][0] for k in ("F/2", "L/2", "B/2") if row[k][1] <= aim]
    return {"engine": 1 + both(), "F/2 first": then_both("F/2"),
            "L/2 first": then_both("L/2"), "oracle": 1 + (min(met) if met else both())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--max-time", type=float, default=3.0)
    args = parser.parse_args(argv)
    name = "random_suite" if args.seed == 12 else f"random_suite_seed{args.seed}"
    table = os.path.join(os.path.dirname(__file__), "results", f"{name}.csv")
    saved = {int(r["index"]): r for r in BR.read_csv(table)}
    totals, worst = {}, {}
    for i, setting in enumerate(BR.draw_settings(args.n, args.seed)):
        r = saved.get(i)
        if r is None or r["pb_status"] != "ok" or float(r["pb_time"]) > args.max_time:
            continue
        row = measure(setting)
        if row is None:
            continue
        print(f"#{i} steps={r['steps']} segments={r['segments']} level={row['level']} "
              f"first {row['t0']:.3f} s w={row['w0']:.2e} | "
              + " | ".join(f"{k} {row[k][0]:.2f}x w={row[k][1]:.2e}"
                           for k in ("F/2", "L/2", "B/2")), flush=True)
        if row["w0"] > 4 * engine.TARGET_WIDTH:
            continue
        costs = policy_costs(row)
        for k, v in costs.items():
            totals[k] = totals.get(k, 0.0) + v * row["t0"]
            worst[k] = max(worst.get(k, 0.0), v / costs["engine"])
    print("\npolicy: total first-pass seconds, worst cost against the engine's rule")
    for k in totals:
        print(f"  {k:10s} {totals[k]:7.2f} s   worst x{worst[k]:.2f}")


if __name__ == "__main__":
    main()
