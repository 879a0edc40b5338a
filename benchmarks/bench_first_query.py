"""A process's first query, with and without the allocator priming (pb_accountant/_memory.py).

Each setting (``bench_random.draw_settings``: random histories across the suite's
space) runs in fresh Python processes, ``--repeats`` with the priming and as many
without (alternating; one each where a query of the first two takes over 2 s), each asking
``get_epsilon_bounds`` twice from scratch: the first query of the process and a repeat.
Printed per setting: the median first query's time and minor page faults of each mode,
the ratio unprimed / primed of the median first queries and of the median repeats, and
whether every process gave the same bits.  Then the worst, median and best of those
ratios.  Times are wall-clock on this machine; faults come from
``resource.getrusage`` (Linux counts them; elsewhere they read 0).

    python benchmarks/bench_first_query.py [--n 40] [--seed 7] [--repeats 3] [--limit 30]

``--limit``: seconds a process may take; a setting that runs past it (or whose process
fails) is left out, with the reason.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_random as BR  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
setting = json.loads(sys.stdin.read())
import pb_accountant._memory as memory
if not setting["prime"]:
    memory._primed = True          # (the priming is then skipped)
from pb_accountant import PrivacyBucketsAccountant
out = []
for _ in range(2):
    acc = PrivacyBucketsAccountant()
    acc.history = [tuple(x) for x in setting["history"]]
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    b = acc.get_epsilon_bounds(setting["delta"])
    t = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    out.append([t, faults, b.lower.hex(), b.upper.hex()])
print(json.dumps(out))
"""


def run_child(history, delta, prime: bool, limit: float):
    """[[seconds, minor faults, lower hex, upper hex]] of the two queries, or why not."""
    payload = json.dumps({"history": [list(x) for x in history], "delta": delta,
                          "prime": prime})
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=payload,
                              capture_output=True, text=True, timeout=limit, check=True)
    except subprocess.TimeoutExpired:
        return f"over {limit:g} s"
    except subprocess.CalledProcessError as exc:
        return "failed: " + (exc.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(done.stdout)


def _median_run(runs, k):
    """Query k's [seconds, faults, ...] of the process whose query k took the median time
    (of an even count, the faster of the middle two)."""
    ordered = sorted((x[k] for x in runs), key=lambda q: q[0])
    return ordered[(len(ordered) - 1) // 2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=float, default=30.0)
    args = parser.parse_args(argv)
    settings = BR.draw_settings(args.n, args.seed)
    first, repeat, rows, differ = [], [], 0, 0
    print(f"{'#':>4} {'segments':>8} {'steps':>9}  {'first primed':>12} {'faults':>8}  "
          f"{'unprimed':>9} {'faults':>8}  {'ratio':>6} {'repeat ratio':>12}  same bits")
    for i, s in enumerate(settings):
        runs = {True: [], False: []}
        for r in range(args.repeats):
            for prime in ((True, False) if (i + r) % 2 == 0 else (False, True)):
                runs[prime].append(run_child(s["history"], s["delta"], prime, args.limit))
            if r == 0 and (any(isinstance(x, str) for x in runs[True] + runs[False]) or max(
                    x[0][0] for x in runs[True] + runs[False]) > 2.0):
                break                  # (one process per mode: a median of one)
        failed = [x for x in runs[True] + runs[False] if isinstance(x, str)]
        if failed:
            print(f"{i:>4} left out: {failed[0]}")
            continue
        p, u = ([_median_run(runs[m], k) for k in (0, 1)] for m in (True, False))
        ratio = u[0][0] / p[0][0]
        again = u[1][0] / p[1][0]
        same = len({tuple(q[2:]) for x in runs[True] + runs[False] for q in x}) == 1
        differ += not same
        first.append(ratio)
        repeat.append(again)
        rows += 1
        steps = sum(c for _, _, c in s["history"])
        print(f"{i:>4} {len(s['history']):>8} {steps:>9}  {p[0][0]:>11.3f}s {p[0][1]:>8}  "
              f"{u[0][0]:>8.3f}s {u[0][1]:>8}  {ratio:>6.2f} {again:>12.2f}  {same}",
              flush=True)
    if rows:
        for name, r in (("first query", first), ("repeat", repeat)):
            print(f"{name}, unprimed / primed over {rows} settings: worst (least) "
                  f"{min(r):.2f}, median {statistics.median(r):.2f}, best {max(r):.2f}")
        print(f"settings whose processes gave different bits: {differ} of {rows}")


if __name__ == "__main__":
    main()
