"""Paper Figure 11: randomized response (p = 0.51), buckets vs KOV, RDP and CDP.

Left: the (eps, delta) graph after 512 compositions (buckets upper and lower bound, KOV,
RDP, CDP, and the exact curve of r-fold randomized response).  Right: e^eps over the
number of compositions at delta = 1e-4.  All comparison bounds are computed for the
same pair the buckets compose (``pb_accountant.pair_bounds``).

    python examples/fig11_randomized_response.py            # full (seconds)
    python examples/fig11_randomized_response.py --quick    # tiny instance (tests)
"""
from __future__ import annotations

import math

import numpy as np

from _repro import (Timer, epsilons_over_r, bucket_curve, comparison_curves, compositions_grid, md_table, parse_args, plot_eps_delta, plot_eps_over_r,
                    plt, save, write_csv, write_markdown)
from scipy import optimize, stats

from pb_accountant import RandomizedResponse, compose

NAME = "fig11_randomized_response"
P = 0.51
DELTA = 1e-4


def exact_delta(eps, r, p=P):
    """delta(eps) of r-fold randomized response, summed over the binomial outcomes.

    k of the r answers favour A with loss L_k = (2k - r) eps0; delta(eps) is the sum of
    P_A(k) (1 - e^(eps - L_k)) over the k with L_k > eps.  (KOV's closed form is exact
    only at its grid points: for odd r below eps0 it is an upper bound, e.g. r = 1 at
    delta = 1e-4, where it gives eps0 = 0.040005 against the exact 0.039809.)
    """
    eps0 = math.log(p / (1.0 - p))
    k = np.arange(r + 1)
    loss = (2 * k - r) * eps0
    pa = stats.binom.pmf(k, r, p)
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    gap = eps[:, None] - loss[None, :]
    terms = np.where(gap < 0.0, -pa[None, :] * np.expm1(np.minimum(gap, 0.0)), 0.0)
    return terms.sum(axis=1)


def exact_epsilon(delta, r, p=P):
    """The exact epsilon of r-fold randomized response at ``delta`` (root of exact_delta)."""
    if exact_delta(0.0, r, p)[0] <= delta:
        return 0.0
    hi = r * math.log(p / (1.0 - p))
    return optimize.brentq(lambda e: exact_delta(e, r, p)[0] - delta, 0.0, hi, xtol=1e-15)


def main(argv=None):
    args = parse_args(NAME, __doc__, argv)
    timer = Timer()
    r_main = 64 if args.quick else 512
    n_eps = 60 if args.quick else 300
    rs = compositions_grid(r_main, 8 if args.quick else 40)
    pair = RandomizedResponse(P)
    eps0 = math.log(P / (1.0 - P))
    seq = [(pair, r_main)]

    # ---- left: (eps, delta) graph -------------------------------------------------
    pb = compose(seq, delta=1e-12)
    eps_hi = min(pb.epsilon_upper(1e-10) * 1.1, r_main * eps0)
    eps = np.linspace(0.0, eps_hi, n_eps)
    lower, upper = bucket_curve(seq, eps, delta=1e-12)
    comp = comparison_curves(seq, eps)
    exact = exact_delta(eps, r_main)
    curves = {"buckets upper": upper, "buckets lower": lower, **comp, "exact": exact}
    rows = [(name, "upper" if name != "buckets lower" else "lower", float(e), math.exp(e),
             float(d)) for name, d in curves.items() for e, d in zip(eps, d)]
    write_csv(args.out / "eps_delta.csv", ["curve", "bound", "epsilon", "exp_epsilon", "delta"],
              rows)

    # ---- right: e^eps over r at delta = 1e-4 ---------------------------------------
    over_r = epsilons_over_r(pair, rs, DELTA, lambda r: exact_epsilon(DELTA, r))
    rows = [(name, int(r), DELTA, float(e), math.exp(min(e, 700.0)))
            for name, es in over_r.items() for r, e in zip(rs, es)]
    write_csv(args.out / "eps_over_r.csv", ["curve", "compositions", "delta", "epsilon",
                                            "exp_epsilon"], rows)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    plot_eps_delta(axes[0], eps, curves, f"RR p={P}: {r_main} compositions")
    plot_eps_over_r(axes[1], rs, over_r, f"RR p={P}: " + r"$e^\varepsilon$ at $\delta$=1e-4")
    save(fig, args.out / "fig11_randomized_response.png")

    # ---- summary --------------------------------------------------------------------
    last = {k: v[-1] for k, v in over_r.items()}
    probe = [e for e in (1.0, 2.0, 3.0, 4.0, 5.0) if e <= eps_hi]
    pb_probe = compose(seq, delta=1e-12).delta_bounds(np.array(probe))
    comp_probe = comparison_curves(seq, np.array(probe))
    exact_probe = exact_delta(np.array(probe), r_main)
    table1 = md_table(["method", f"eps at delta={DELTA:g}", "e^eps"],
                      [(k, v, math.exp(min(v, 700.0))) for k, v in last.items()])
    table2 = md_table(["eps", "buckets lower", "buckets upper", "exact", "KOV", "RDP", "CDP"],
                      [(e, float(pb_probe.lower[i]), float(pb_probe.upper[i]),
                        float(exact_probe[i]), float(comp_probe["KOV"][i]),
                        float(comp_probe["RDP"][i]), float(comp_probe["CDP"][i]))
                       for i, e in enumerate(probe)])
    write_markdown(args.out / "results.md", f"Figure 11: randomized response p={P}",
                   [f"{r_main} compositions, delta = {DELTA:g}" + (" (quick mode)" if args.quick
                                                                  else ""),
                    table1, f"delta(eps) after {r_main} compositions", table2,
                    "![fig11](fig11_randomized_response.png)"])
    print(f"fig11 randomized response p={P}, r={r_main}, delta={DELTA:g}:")
    for k, v in last.items():
        print(f"  {k:14s} eps = {v:.5f}  e^eps = {math.exp(min(v, 700.0)):.4f}")
    print(f"  wrote {args.out} in {timer}")


if __name__ == "__main__":
    main()
