"""Paper Figure 13: the Gauss mechanism GS(0, 2*200^2) vs GS(1, 2*200^2).

Left: the (eps, delta) graph after 512 compositions (buckets upper and lower bound,
KOV, RDP, CDP and the exact curve, which is known in closed form for the Gaussian:
delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), mu = sqrt(r)/sigma).
Right: e^eps over the number of compositions at delta = 1e-5.

    python examples/fig13_gauss.py            # full (seconds)
    python examples/fig13_gauss.py --quick    # tiny instance (tests)
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from _repro import (Timer, epsilons_over_r, bucket_curve, comparison_curves, compositions_grid, md_table, parse_args, plot_eps_delta, plot_eps_over_r,
                    plt, save, write_csv, write_markdown)
from pb_accountant import Gaussian, compose

NAME = "fig13_gauss"
SIGMA = 200.0 * math.sqrt(2.0)
DELTA = 1e-5


def exact_delta(eps, r, sigma=SIGMA):
    mu = math.sqrt(r) / sigma
    eps = np.asarray(eps, dtype=float)
    return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def exact_epsilon(delta, r, sigma=SIGMA):
    if exact_delta(0.0, r, sigma) <= delta:
        return 0.0
    return optimize.brentq(lambda e: exact_delta(e, r, sigma) - delta, 0.0, 100.0, xtol=1e-14)


def main(argv=None):
    args = parse_args(NAME, __doc__, argv)
    timer = Timer()
    r_main = 64 if args.quick else 512
    rs = compositions_grid(r_main, 8 if args.quick else 40)
    pair = Gaussian(SIGMA)
    seq = [(pair, r_main)]

    pb = compose(seq, delta=1e-10)
    eps_hi = pb.epsilon_upper(1e-9) * 1.1
    eps = np.linspace(0.0, eps_hi, 60 if args.quick else 250)
    lower, upper = bucket_curve(seq, eps, delta=1e-10)
    comp = comparison_curves(seq, eps)
    curves = {"buckets upper": upper, "buckets lower": lower, **comp,
              "exact": exact_delta(eps, r_main)}
    write_csv(args.out / "eps_delta.csv", ["curve", "bound", "epsilon", "exp_epsilon", "delta"],
              [(k, "lower" if k == "buckets lower" else "upper", float(e), math.exp(e), float(d))
               for k, v in curves.items() for e, d in zip(eps, v)])

    over_r = epsilons_over_r(pair, rs, DELTA, lambda r: exact_epsilon(DELTA, r))
    write_csv(args.out / "eps_over_r.csv",
              ["curve", "compositions", "delta", "epsilon", "exp_epsilon"],
              [(k, int(r), DELTA, float(e), math.exp(e)) for k, v in over_r.items()
               for r, e in zip(rs, v)])

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    plot_eps_delta(axes[0], eps, curves, f"Gauss sigma=200*sqrt(2): {r_main} compositions",
                   floor=1e-12)
    plot_eps_over_r(axes[1], rs, over_r, r"Gauss: $e^\varepsilon$ at $\delta$=1e-5")
    save(fig, args.out / "fig13_gauss.png")

    last = {k: v[-1] for k, v in over_r.items()}
    table = md_table(["method", f"eps at delta={DELTA:g}", "e^eps", "eps / exact eps"],
                     [(k, v, math.exp(v), v / last["exact"]) for k, v in last.items()])
    picks = [int(r) for r in rs if r in (1, 8, 64, 512) or r == rs[-1]]
    table2 = md_table(["r"] + list(over_r), [
        tuple([r] + [over_r[k][list(rs).index(r)] for k in over_r]) for r in sorted(set(picks))])
    write_markdown(args.out / "results.md", "Figure 13: Gauss mechanism sigma = 200 sqrt 2",
                   [f"{r_main} compositions, delta = {DELTA:g}" +
                    (" (quick mode)" if args.quick else ""), table,
                    "epsilon at delta = 1e-5 over the number of compositions", table2,
                    "![fig13](fig13_gauss.png)"])
    print(f"fig13 Gauss sigma={SIGMA:.3f}, r={r_main}, delta={DELTA:g}:")
    for k, v in last.items():
        print(f"  {k:14s} eps = {v:.5f}  e^eps = {math.exp(v):.5f}")
    print(f"  wrote {args.out} in {timer}")


if __name__ == "__main__":
    main()
