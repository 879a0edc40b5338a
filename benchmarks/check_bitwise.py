"""Bit-for-bit regression check for engine restructurings (commits that change no number).

Computes ``epsilon_bounds`` and ``delta_bounds`` for every method (split, grouped,
paper, best) on the four settings of ``bench_engine.py``, four fixed-grid settings
(``number_of_buckets``, ``factor``) and ~20 random settings drawn with a fixed seed (heterogeneous histories; Laplace, Gaussian, randomized
response, subsampled Gaussian; tiny and large deltas), plus the top-level adaptive
``epsilon_bounds``, and stores ``float.hex`` of every number.

    python benchmarks/check_bitwise.py --save before.json
    python benchmarks/check_bitwise.py --compare before.json    # after the change
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time

BENCH = [  # sigma, q, steps, delta (bench_engine.SETTINGS)
    (4.0, 0.01, 65536, 1e-5),
    (1.1, 0.00512, 9766, 1e-5),
    (3.0, 0.08192, 2500, 1e-5),
    (0.8, 0.001, 100000, 1e-6),
]
EPSILONS = [0.0, 0.05, 0.3, 1.0, 2.5, 7.0, 30.0]


def _hex(x) -> str:
    return float(x).hex()


def _random_settings(count: int = 20, seed: int = 20261123):
    from pb_accountant import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian
    rng = random.Random(seed)
    out = []
    for k in range(count):
        history = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(["sgm", "gauss", "laplace", "rr"])
            if kind == "sgm":
                pair = SubsampledGaussian(rng.choice([0.7, 1.0, 1.5, 3.0]),
                                          rng.choice([0.001, 0.01, 0.05, 0.2]))
                count_ = rng.choice([1, 7, 100, 1000, 4096])
            elif kind == "gauss":
                pair = Gaussian(rng.choice([0.5, 2.0, 10.0, 40.0]))
                count_ = rng.choice([1, 3, 50, 300])
            elif kind == "laplace":
                pair = Laplace(rng.choice([0.5, 2.0, 20.0, 100.0]))
                count_ = rng.choice([1, 5, 64, 200])
            else:
                pair = RandomizedResponse(rng.choice([0.51, 0.55, 0.6, 0.75]))
                count_ = rng.choice([1, 4, 32, 128])
            history.append((pair, count_))
        delta = rng.choice([1e-14, 1e-10, 1e-7, 1e-5, 1e-3, 0.05, 0.3])
        out.append((f"random{k}", history, delta))
    return out


def _fixed_grid_settings():
    """Expert options: a fixed number_of_buckets (the paper's squaring rule), a factor."""
    from pb_accountant import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian
    return [
        ("fixed0", [(SubsampledGaussian(1.1, 0.01), 1000)], 1e-5, {"number_of_buckets": 2000}),
        ("fixed1", [(RandomizedResponse(0.6), 50)], 1e-4,
         {"factor": 1.01, "number_of_buckets": 500}),
        ("fixed2", [(Laplace(2.0), 30), (Gaussian(3.0), 7)], 1e-6,
         {"factor": 1.001, "number_of_buckets": 4000}),
        ("fixed3", [(Gaussian(3.0), 100)], 1e-8,
         {"number_of_buckets": 1024, "free_infty_budget": 1e-12}),
    ]


def compute(quick: bool = False) -> dict:
    from pb_accountant import SubsampledGaussian, compose, epsilon_bounds
    settings = [(f"bench{k}", [(SubsampledGaussian(s, q), n)], d, {})
                for k, (s, q, n, d) in enumerate(BENCH)]
    if quick:
        settings = settings[1:3]
    settings += [(name, h, d, {}) for name, h, d in _random_settings()]
    settings += _fixed_grid_settings()
    results = {}
    for name, history, delta, options in settings:
        t0 = time.perf_counter()
        rec = {}
        top = epsilon_bounds(history, delta, **options)
        rec["epsilon_bounds"] = [_hex(top.lower), _hex(top.upper)]
        pb = compose(history, delta=delta, methods=("split", "grouped", "paper"), **options)
        for method in (None, "split", "grouped", "paper"):
            key = method or "best"
            for dd in (delta, delta * 10.0 if delta < 0.05 else delta / 10.0):
                eb = pb.epsilon_bounds(dd, method)
                rec[f"eps[{key}][{dd!r}]"] = [_hex(eb.lower), _hex(eb.upper)]
            db = pb.delta_bounds(EPSILONS, method)
            rec[f"delta[{key}]"] = [[_hex(v) for v in db.lower], [_hex(v) for v in db.upper]]
            db1 = pb.delta_bounds(0.5, method)
            rec[f"delta1[{key}]"] = [_hex(db1.lower), _hex(db1.upper)]
        rec["infinity_mass"] = _hex(pb.infinity_mass)
        results[name] = rec
        print(f"{name:10s} eps=[{top.lower:.6g}, {top.upper:.6g}] at delta={delta:g} "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="FILE")
    g.add_argument("--compare", metavar="FILE")
    ap.add_argument("--quick", action="store_true",
                    help="skip the two largest benchmark settings")
    args = ap.parse_args(argv)
    results = compute(args.quick)
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)
        n = sum(len(json.dumps(v)) > 0 for v in results.values())
        print(f"saved {n} settings to {args.save}")
        return 0
    with open(args.compare) as fh:
        before = json.load(fh)
    total, diffs = 0, []
    for name, rec in results.items():
        if name not in before:
            diffs.append(f"{name}: missing in {args.compare}")
            continue
        for key, value in rec.items():
            flat_new = json.dumps(value)
            flat_old = json.dumps(before[name].get(key))
            total += flat_new.count("0x") + flat_new.count("inf")
            if flat_new != flat_old:
                diffs.append(f"{name} {key}: {flat_old} -> {flat_new}")
    if diffs:
        print(f"{len(diffs)} DIFFERENCES:")
        print("\n".join(diffs))
        return 1
    print(f"all identical: {len(results)} settings, {total} numbers bit-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
