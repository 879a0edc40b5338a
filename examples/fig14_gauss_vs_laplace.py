"""Paper Figure 14 (Section 6): truncated Gauss vs truncated Laplace.

Both mechanisms have sensitivity 1 and are truncated at mean +- 2500 (paper §6, Fig. 14
caption).  Two comparisons:

* equal variance: Laplace LP(0, 200) (variance 2*200^2 = 80,000) vs Gauss with
  sigma^2 = 80,000 (sigma = 200 sqrt 2);
* half variance: the same Laplace vs Gauss with sigma^2 = 40,000 (sigma = 200), the
  Gaussian the Laplace mechanism's (eps, delta) graph converges to under composition.

Top row: e^eps over the number of compositions (1..512) for delta = 1e-2, 1e-3, 1e-4
(certified upper bounds).  Bottom row: the (eps, delta) graphs (upper and lower bound)
after 512 compositions.

    python examples/fig14_gauss_vs_laplace.py            # full (about half a minute)
    python examples/fig14_gauss_vs_laplace.py --quick    # tiny instance (tests)
"""
from __future__ import annotations

import math

import numpy as np

from _repro import (Timer, compositions_grid, md_table, parse_args, plt, save, write_csv,
                    write_markdown)
from pb_accountant import Gaussian, Laplace, compose

NAME = "fig14_gauss_vs_laplace"
T = 2500.0
DELTAS = (1e-2, 1e-3, 1e-4)
LINESTYLES = {1e-2: "-", 1e-3: "--", 1e-4: ":"}


def mechanisms():
    lap = Laplace(200.0, truncation=T)
    return [("equal variance (80,000)", lap, Gaussian(200.0 * math.sqrt(2.0), truncation=T)),
            ("Gauss with half the variance (40,000)", lap, Gaussian(200.0, truncation=T))]


def main(argv=None):
    args = parse_args(NAME, __doc__, argv)
    timer = Timer()
    r_main = 64 if args.quick else 512
    rs = compositions_grid(r_main, 6 if args.quick else 30)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    over_rows, graph_rows, summary, gaps = [], [], [], []
    for col, (title, lap, gau) in enumerate(mechanisms()):
        named = (("Laplace", lap, "tab:blue"), ("Gauss", gau, "tab:red"))
        ax = axes[0, col]
        eps_at = {}
        for label, pair, color in named:
            for dl in DELTAS:
                ups = []
                for r in rs.tolist():
                    eb = compose([(pair, r)], delta=min(DELTAS[-1], 1e-6)).epsilon_bounds(dl)
                    ups.append(eb.upper)
                    over_rows.append((title, label, int(r), dl, eb.lower, eb.upper,
                                      math.exp(eb.upper)))
                eps_at[(label, dl)] = np.array(ups)
                ax.plot(rs, np.exp(ups), color=color, ls=LINESTYLES[dl],
                        label=f"{label}, delta={dl:g}")
        late = rs >= max(1, r_main // 8)
        for dl in DELTAS:
            a, b = eps_at[("Laplace", dl)][late], eps_at[("Gauss", dl)][late]
            gaps.append((title, dl, float(np.max(np.abs(a - b) / np.maximum(a, b))),
                         float(a[-1]), float(b[-1]), float(abs(a[-1] - b[-1]) / a[-1])))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("compositions r")
        ax.set_ylabel(r"$e^\varepsilon$ (upper bound)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

        ax = axes[1, col]
        for label, pair, color in named:
            pb = compose([(pair, r_main)], delta=1e-12)
            eps = np.linspace(0.0, 0.7 if r_main >= 512 else 0.25, 60 if args.quick else 250)
            db = pb.delta_bounds(eps)
            lo, up = np.asarray(db.lower), np.asarray(db.upper)
            m = up > 1e-14
            ax.plot(np.exp(eps[m]), up[m], color=color, lw=2, label=f"{label} upper")
            m = lo > 1e-14
            ax.plot(np.exp(eps[m]), lo[m], color=color, lw=1, ls="--", label=f"{label} lower")
            graph_rows += [(title, label, b, r_main, float(e), math.exp(e), float(d))
                           for b, arr in (("lower", lo), ("upper", up))
                           for e, d in zip(eps, arr)]
            inf_mass = pair.infinity_masses()[0]
            summary.append((title, label, f"{pair!r}", r_main,
                            pb.epsilon_bounds(1e-4).upper, float(up[-1]),
                            float(-np.expm1(r_main * np.log1p(-inf_mass)))))
        ax.set_yscale("log")
        ax.set_xlabel(r"$e^\varepsilon$")
        ax.set_ylabel(r"$\delta$")
        ax.set_title(f"{title}: {r_main} compositions", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, args.out / "fig14_gauss_vs_laplace.png")
    write_csv(args.out / "eps_over_r.csv", ["setting", "mechanism", "compositions", "delta",
                                            "eps_lower", "eps_upper", "exp_eps_upper"], over_rows)
    write_csv(args.out / "eps_delta.csv", ["setting", "mechanism", "bound", "compositions",
                                           "epsilon", "exp_epsilon", "delta"], graph_rows)
    t1 = md_table(["setting", "mechanism", "pair", "r", "eps at delta=1e-4 (upper)",
                   "delta at largest eps plotted", "distinguishing mass 1-(1-p)^r"], summary)
    t2 = md_table(["setting", "delta", f"max relative eps gap, r >= {max(1, r_main // 8)}",
                   f"Laplace eps (r={r_main})", f"Gauss eps (r={r_main})",
                   f"relative gap at r={r_main}"], gaps)
    write_markdown(args.out / "results.md", "Figure 14: truncated Gauss vs truncated Laplace",
                   [("quick mode" if args.quick else f"r up to {r_main}"), t1, t2,
                    "![fig14](fig14_gauss_vs_laplace.png)"])
    print("fig14 truncated Gauss vs Laplace:")
    for row in summary:
        print(f"  {row[0]:38s} {row[1]:8s} eps(1e-4) upper {row[4]:.5f}  delta floor "
              f"(distinguishing mass) {row[6]:.3e}")
    for row in gaps:
        print(f"  {row[0]:38s} delta={row[1]:g}: Laplace eps {row[3]:.5f}  Gauss eps "
              f"{row[4]:.5f}  rel. gap {row[5]:.4f} (max {row[2]:.4f} for r >= "
              f"{max(1, r_main // 8)})")
    print(f"  wrote {args.out} in {timer}")


if __name__ == "__main__":
    main()
