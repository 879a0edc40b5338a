"""Paper Figure 12: Laplace, Gauss and DP-SGD (eps, delta) graphs, buckets vs KOV, RDP, CDP.

* Laplace LP(0, 200) vs LP(1, 200), truncated at mean +- 2500 (paper §5.1), r = 512;
* Gauss GS(0, (200 sqrt 2)^2) vs GS(1, ...), truncated at mean +- 2500 (§5.2), r = 512;
* DP-SGD: (1-q) GS(0, sigma^2) + q GS(1, sigma^2) vs GS(0, sigma^2), sigma = 4, q = 0.01,
  r = 2^16 (§5.4; the paper omits KOV there, here it is computed).

Each panel shows the buckets' certified upper and lower bound and the comparison bounds
for the same pair (``pb_accountant.pair_bounds``); no CDP statement exists for DP-SGD.
CoverUp's measured histograms (the fourth panel of the paper's figure) are not
available offline and are left out.

    python examples/fig12_mechanisms.py            # full (well under a minute)
    python examples/fig12_mechanisms.py --quick    # tiny instance (tests)
"""
from __future__ import annotations

import math

import numpy as np

from _repro import (Timer, bucket_curve, comparison_curves, comparison_epsilons, md_table,
                    parse_args, plot_eps_delta, plt, save, write_csv, write_markdown)
from pb_accountant import Gaussian, Laplace, SubsampledGaussian, compose

NAME = "fig12_mechanisms"
DELTAS = (1e-3, 1e-4, 1e-5, 1e-6)


def settings(quick):
    r_lg = 64 if quick else 512
    r_sgd = 2 ** 10 if quick else 2 ** 16
    return [
        ("Laplace", f"Laplace b=200, truncated +-2500, r={r_lg}",
         Laplace(200.0, truncation=2500.0), r_lg, dict(kov=True, rdp=True, cdp=True)),
        ("Gauss", f"Gauss sigma=200*sqrt(2), truncated +-2500, r={r_lg}",
         Gaussian(200.0 * math.sqrt(2.0), truncation=2500.0), r_lg,
         dict(kov=True, rdp=True, cdp=True)),
        ("DP-SGD", f"DP-SGD sigma=4, q=0.01, r={r_sgd}", SubsampledGaussian(4.0, 0.01), r_sgd,
         dict(kov=True, rdp=True, cdp=False)),
    ]


def fig22_rows():
    """RDP of one DP-SGD step from the leaf buckets vs Opacus (paper Fig. 22), if installed."""
    try:
        from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    except Exception:  # pragma: no cover - opacus is optional here
        return []
    from pb_accountant.pair_bounds import rdp_from_pair

    orders = np.arange(2.0, 65.0)
    prof = rdp_from_pair(SubsampledGaussian(4.0, 0.01), orders)
    ref = np.asarray(compute_rdp(q=0.01, noise_multiplier=4.0, steps=1, orders=list(orders)))
    rows = [(int(a), float(prof.rdp[i]), float(ref[i]), float(prof.rdp[i] / ref[i]))
            for i, a in enumerate(orders) if a in (2, 4, 8, 16, 32, 64)]
    eps_ours = prof.composed(2 ** 16).epsilon(1e-5).upper
    eps_opacus = float(get_privacy_spent(orders=list(orders), rdp=ref * 2 ** 16, delta=1e-5)[0])
    return rows + [("eps", eps_ours, eps_opacus, eps_ours / eps_opacus)]


def main(argv=None):
    args = parse_args(NAME, __doc__, argv)
    timer = Timer()
    n_eps = 60 if args.quick else 250
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    csv_rows, eps_rows, printed = [], [], []
    for ax, (key, title, pair, r, which) in zip(axes, settings(args.quick)):
        seq = [(pair, r)]
        pb = compose(seq, delta=1e-10)
        floor = pb.infinity_mass
        eps_hi = pb.epsilon_upper(max(1e-10, 3.0 * floor)) * 1.3
        eps = np.linspace(0.0, eps_hi, n_eps)
        lower, upper = bucket_curve(seq, eps, delta=1e-10)
        comp = comparison_curves(seq, eps, **which)
        curves = {"buckets upper": upper, "buckets lower": lower, **comp}
        plot_eps_delta(ax, eps, curves, title, floor=1e-13)
        csv_rows += [(key, name, "lower" if name == "buckets lower" else "upper", r, float(e),
                      math.exp(e), float(d)) for name, d in curves.items()
                     for e, d in zip(eps, d)]
        for dl in DELTAS:
            eb = compose(seq, delta=dl).epsilon_bounds(dl)
            c = comparison_epsilons(seq, dl, **which)
            eps_rows.append((key, r, dl, eb.lower, eb.upper, c.get("KOV", math.nan),
                             c.get("RDP", math.nan), c.get("CDP", math.nan)))
        printed.append((key, r, floor))
    save(fig, args.out / "fig12_mechanisms.png")
    write_csv(args.out / "eps_delta.csv",
              ["setting", "curve", "bound", "compositions", "epsilon", "exp_epsilon", "delta"],
              csv_rows)
    header = ["setting", "r", "delta", "buckets lower", "buckets upper", "KOV", "RDP", "CDP"]
    write_csv(args.out / "epsilons.csv", header, eps_rows)
    table = md_table(header, [tuple(row) for row in eps_rows])
    floors = md_table(["setting", "r", "distinguishing mass + certified round-off (delta floor)"],
                      printed)
    write_markdown(args.out / "results.md", "Figure 12: Laplace, Gauss, DP-SGD",
                   ["epsilon at delta (NaN: bound not applicable)" +
                    (" (quick mode)" if args.quick else ""), table, floors,
                    "![fig12](fig12_mechanisms.png)"])
    fig22 = [] if args.quick else fig22_rows()
    if fig22:
        with open(args.out / "results.md", "a") as fh:
            fh.write("\nPaper Fig. 22 analogue: Renyi divergences of one DP-SGD step "
                     "(sigma=4, q=0.01) from the leaf buckets vs Opacus's compute_rdp\n\n")
            fh.write(md_table(["order", "buckets (certified)", "Opacus", "ratio"],
                              fig22[:-1], digits=6) + "\n\n")
            fh.write(f"epsilon at delta=1e-5 after 2^16 steps, integer orders 2..64: "
                     f"buckets RDP {fig22[-1][1]:.6f}, Opacus {fig22[-1][2]:.6f}\n")
    print("fig12 epsilon at delta (buckets lower/upper, KOV, RDP, CDP):")
    for row in eps_rows:
        key, r, dl, lo, up, kov, rdp, cdp = row
        print(f"  {key:8s} r={r:<6d} delta={dl:.0e}: [{lo:.5f}, {up:.5f}]  KOV {kov:.5f}  "
              f"RDP {rdp:.5f}  CDP {cdp:.5f}")
    for key, r, floor in printed:
        print(f"  {key:8s} delta floor (distinguishing mass + round-off) {floor:.3e}")
    if fig22:
        print(f"  RDP from buckets vs Opacus (sigma=4, q=0.01, 2^16 steps, delta=1e-5, orders "
              f"2..64): eps {fig22[-1][1]:.6f} vs {fig22[-1][2]:.6f}")
    print(f"  wrote {args.out} in {timer}")


if __name__ == "__main__":
    main()
