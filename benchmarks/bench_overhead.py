"""Settings dominated by fixed per-operation costs: this tree against a reference tree.

Times (median of ``--repeats``, each run in a fresh process, the two trees alternating
so that both see the same machine load): the 100-epoch noise schedule from scratch, a
per-epoch training loop on it (both bounds after every epoch, the history growing by
one epoch per query), and the many-segment settings #17, #183 and #7 of
``bench_random.draw_settings(200, 12)``.

    python benchmarks/bench_overhead.py --reference /path/to/reference/tree [--repeats 3]

The reference tree's ``pb_accountant`` is put first on ``PYTHONPATH`` for its runs
(e.g. ``git archive 54761bb | tar -x -C /tmp/ref``); without ``--reference`` only this
tree is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
sys.path.insert(1, {bench!r})
import pb_accountant
from pb_accountant import PrivacyBucketsAccountant
case = {case!r}
SCHEDULE = [(round(1.0 + 0.01 * i, 12), 0.01, 100) for i in range(100)]
if case == "schedule100":
    def run():
        acc = PrivacyBucketsAccountant()
        acc.history = SCHEDULE
        return acc.get_epsilon_bounds(1e-5).upper
elif case == "training-loop":
    def run():
        acc = PrivacyBucketsAccountant()
        for entry in SCHEDULE:
            acc.history = acc.history + [entry]
            up = acc.get_epsilon_bounds(1e-5).upper
        return up
else:
    from bench_random import draw_settings
    s = draw_settings(200, 12)[int(case[1:])]
    def run():
        acc = PrivacyBucketsAccountant()
        acc.history = s["history"]
        return acc.get_epsilon_bounds(s["delta"]).upper
t = time.perf_counter()
value = run()
print(json.dumps({{"seconds": time.perf_counter() - t, "upper": float(value).hex(),
                   "module": pb_accountant.__file__}}))
"""

CASES = ("schedule100", "training-loop", "#17", "#183", "#7")


def run_case(case: str, tree: str | None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD.format(bench=HERE, case=case)],
                         env=env, cwd="/", capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", help="tree holding the reference pb_accountant")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    args = ap.parse_args(argv)
    trees = [("this", None)] + ([("reference", args.reference)] if args.reference else [])
    print(f"{'case':14s}" + "".join(f"{name:>12s}" for name, _ in trees)
          + ("     ratio" if args.reference else ""), flush=True)
    for case in args.cases:
        times = {name: [] for name, _ in trees}
        uppers = {}
        for _ in range(args.repeats):
            for name, tree in (trees if _ % 2 == 0 else trees[::-1]):
                r = run_case(case, tree)
                times[name].append(r["seconds"])
                uppers[name] = r["upper"]
        med = {name: statistics.median(v) for name, v in times.items()}
        line = f"{case:14s}" + "".join(f"{med[name]:11.3f}s" for name, _ in trees)
        if args.reference:
            line += f"  {med['reference'] / med['this']:7.2f}x"
            if uppers["this"] != uppers["reference"]:
                line += f"  UPPER BOUNDS DIFFER {uppers['this']} {uppers['reference']}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
