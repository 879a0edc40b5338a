"""Paper Section 7 (Figures 15-21): Vuvuzela's dialing and conversation protocols.

Vuvuzela (van den Hooff et al., SOSP 2015) hides who talks to whom by adding dummy
requests whose number is drawn from a Laplace distribution LP(mu, b).  The paper
re-analyses it with privacy buckets and proposes Gaussian noise GS(mu, sigma^2).
Modelled here, per round (= one observation), as the paper does:

* dialing: one count with sensitivity 2, noise LP(mu, b) or GS(mu, sigma^2) truncated at
  mean +- mu (noise in [0, 2 mu]): ``Laplace(b, 2, truncation=mu)``,
  ``Gaussian(sigma, 2, truncation=mu)``;
* conversation (default ``--conversation-model singles``): the count of single accesses,
  sensitivity 2, noise LP(mu, b) truncated at mean +- mu; this is the model under which
  the paper's Figure 19/20 claims hold.  ``--conversation-model both`` also observes the
  pairs (sensitivity 1, noise LP(mu/2, b/2)), i.e. composes ``Laplace(b, 2,
  truncation=mu)`` and ``Laplace(b/2, 1, truncation=mu/2)`` per round (Gaussian: sigma
  and sigma/2), as Vuvuzela's own analysis does.

"Vuvuzela original" is Vuvuzela's own analysis as reconstructed here: per round
eps0 = (sum of sensitivity/scale) and delta0 = the probability that the clamped noise
max(0, .) hits its floor (1/2 exp(-(mu - 2)/b) for dialing, exp(-(mu - 2)/b) for the
conversation), composed with the advanced composition theorem (DRV10) at delta = 1e-4.

Outputs: e^eps at delta = 1e-4 and delta at e^eps = 2 over the number of observations
(Fig. 15, 18), (eps, delta) graphs with upper and lower bounds at r = 1024 and 8192
(dialing, Fig. 16, 21) and r = 65,536 and 524,288 (conversation, Fig. 19, 20).

    python examples/vuvuzela.py            # full (about a minute)
    python examples/vuvuzela.py --quick    # tiny instance (tests)
"""
from __future__ import annotations

import math

import numpy as np

from _repro import (Timer, md_table, parse_args, plt, save, write_csv, write_markdown)
from pb_accountant import Gaussian, Laplace, compose
from pb_accountant.comparison import advanced_composition_epsilon

NAME = "vuvuzela"
DELTA = 1e-4
TARGET_EPS = math.log(2.0)


class Config:
    """One noise configuration of one protocol."""

    def __init__(self, name, kind, mu, scale, protocol, original=False):
        self.name, self.kind, self.mu, self.scale = name, kind, mu, scale
        self.protocol, self.original = protocol, original

    #: "singles" (default): only the single accesses LP(mu, b), sensitivity 2 -- the
    #: model under which the paper's Fig. 19/20 claims hold; "both": singles and pairs
    #: (sensitivity 1, LP(mu/2, b/2)) are observed, as Vuvuzela's own analysis assumes
    conversation_model = "singles"

    def sequence(self, r):
        mu, b = self.mu, self.scale
        mech = Laplace if self.kind == "LP" else Gaussian
        if self.protocol == "dialing" or Config.conversation_model == "singles":
            return [(mech(b, 2.0, truncation=mu), r)]
        return [(mech(b, 2.0, truncation=mu), r), (mech(b / 2.0, 1.0, truncation=mu / 2.0), r)]

    def vuvuzela_round(self):
        """(eps0, delta0) of one round in Vuvuzela's own analysis (Laplace only)."""
        b, mu = self.scale, self.mu
        if self.protocol == "dialing":
            return 2.0 / b, 0.5 * math.exp(-(mu - 2.0) / b)
        return 4.0 / b, math.exp(-(mu - 2.0) / b)

    @property
    def label(self):
        star = "" if self.original else "*"
        unit = "b" if self.kind == "LP" else "sigma"
        return f"{self.name}{star} {self.kind}({self.mu / 1000:g}k, {unit}={self.scale:g})"


DIALING = [
    Config("LP-8k", "LP", 8000.0, 500.0, "dialing", True),
    Config("LP-13k", "LP", 13000.0, 770.0, "dialing", True),
    Config("LP-20k", "LP", 20000.0, 1130.0, "dialing", True),
    Config("GS-8k", "GS", 8000.0, 707.0, "dialing"),
    Config("GS-20k", "GS", 20000.0, 1598.0, "dialing"),
    Config("GS-1.6k", "GS", 1600.0, 320.0, "dialing"),
    Config("GS-4.1k", "GS", 4100.0, 833.0, "dialing"),
    Config("LP-4k", "LP", 4000.0, 330.0, "dialing"),
    Config("LP-10k", "LP", 10000.0, 827.0, "dialing"),
]
CONVERSATION = [
    Config("LP-low", "LP", 150e3, 7.3e3, "conversation", True),
    Config("LP-medium", "LP", 300e3, 13.8e3, "conversation", True),
    Config("LP-high", "LP", 450e3, 20e3, "conversation", True),
    Config("GS-low", "GS", 150e3, math.sqrt(2.0) * 7.3e3, "conversation"),
    Config("GS-high", "GS", 450e3, math.sqrt(2.0) * 20e3, "conversation"),
    Config("GS-new1", "GS", 15e3, 2.5e3, "conversation"),
    Config("GS-new2", "GS", 45e3, 7.5e3, "conversation"),
    Config("LP-37.5k", "LP", 37.5e3, 2.3e3, "conversation"),
    Config("LP-112.5k", "LP", 112.5e3, 6.9e3, "conversation"),
]
#: (eps, delta) graphs: protocol, r, the configurations shown (paper Fig. 16, 19-21)
GRAPHS = [
    ("dialing", 1024, ["GS-1.6k", "LP-8k", "GS-8k", "LP-4k"], "LP-8k"),
    ("dialing", 8192, ["GS-4.1k", "LP-20k", "GS-20k", "LP-10k"], "LP-20k"),
    ("conversation", 65536, ["GS-new1", "GS-new2", "LP-low", "GS-low", "LP-37.5k"], "LP-low"),
    ("conversation", 524288, ["GS-new1", "GS-new2", "LP-high", "GS-high", "LP-112.5k"],
     "LP-high"),
]


def vuvuzela_epsilon(cfg, r):
    eps0, delta0 = cfg.vuvuzela_round()
    return advanced_composition_epsilon(eps0, delta0, r, DELTA).upper


def vuvuzela_delta_at(cfg, r, eps):
    """Smallest delta' = r delta0 + d with advanced composition eps' <= eps (DRV10)."""
    eps0, delta0 = cfg.vuvuzela_round()
    drift = r * eps0 * math.expm1(eps0)
    if eps <= drift:
        return 1.0
    log_inv_d = ((eps - drift) / eps0) ** 2 / (2.0 * r)
    return min(1.0, r * delta0 + math.exp(-log_inv_d))


def over_r(configs, rs, quick):
    rows = []
    for cfg in configs:
        for r in rs:
            pb = compose(cfg.sequence(int(r)), delta=1e-6)
            eb = pb.epsilon_bounds(DELTA)
            db = pb.delta_bounds(TARGET_EPS)
            v_eps = vuvuzela_epsilon(cfg, int(r)) if cfg.kind == "LP" and cfg.original else math.nan
            v_del = (vuvuzela_delta_at(cfg, int(r), TARGET_EPS) if cfg.kind == "LP"
                     and cfg.original else math.nan)
            rows.append((cfg.protocol, cfg.name, cfg.label, int(r), eb.lower, eb.upper,
                         db.lower, db.upper, v_eps, v_del))
    return rows


def plot_over_r(rows, configs, protocol, path):
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    cmap = plt.get_cmap("tab10")
    for k, cfg in enumerate(configs):
        mine = [row for row in rows if row[1] == cfg.name]
        rs = [row[3] for row in mine]
        color = cmap(k % 10)
        axes[0].plot(rs, np.exp([row[5] for row in mine]), color=color, lw=2 if not
                     cfg.original else 1.5, label=f"{cfg.label} buckets")
        axes[1].plot(rs, [max(row[7], 1e-300) for row in mine], color=color,
                     label=f"{cfg.label} buckets")
        if cfg.original:
            axes[0].plot(rs, np.exp(np.minimum([row[8] for row in mine], 5.0)), color=color,
                         ls="--", lw=1, label=f"{cfg.label} Vuvuzela (adv. comp.)")
            axes[1].plot(rs, [row[9] for row in mine], color=color, ls="--", lw=1,
                         label=f"{cfg.label} Vuvuzela (adv. comp.)")
    axes[0].axhline(2.0, color="green", lw=0.8)
    axes[1].axhline(DELTA, color="green", lw=0.8)
    axes[0].set_ylim(1.0, 3.0)
    axes[0].set_ylabel(r"$e^\varepsilon$ at $\delta$ = 1e-4")
    axes[1].set_ylabel(r"$\delta$ at $e^\varepsilon$ = 2")
    axes[1].set_yscale("log")
    axes[1].set_ylim(1e-16, 1.0)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("observations r")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title(f"Vuvuzela {protocol}: " + r"$e^\varepsilon$ over r", fontsize=10)
    axes[1].set_title(f"Vuvuzela {protocol}: " + r"$\delta$ over r", fontsize=10)
    axes[1].legend(fontsize=6, loc="lower right", ncol=2)
    save(fig, path)


def _options(p):
    p.add_argument("--conversation-model", choices=("singles", "both"), default="singles",
                   help="conversation protocol: observe single accesses (sensitivity 2) and "
                        "pairs (sensitivity 1, half the noise), or the single accesses only")


def main(argv=None):
    args = parse_args(NAME, __doc__, argv, extra=_options)
    Config.conversation_model = args.conversation_model
    timer = Timer()
    if args.quick:
        dial_rs = 2 ** np.arange(0, 11, 2)
        conv_rs = 2 ** np.arange(0, 13, 3)
        dialing = [c for c in DIALING if c.name in ("LP-20k", "GS-4.1k")]
        conversation = [c for c in CONVERSATION if c.name in ("LP-high", "GS-new2")]
        graphs = [("dialing", 1024, ["GS-4.1k", "LP-20k"], "LP-20k"),
                  ("conversation", 4096, ["GS-new2", "LP-high"], "LP-high")]
    else:
        dial_rs = 2 ** np.arange(0, 15)
        conv_rs = 2 ** np.arange(0, 20)
        dialing, conversation, graphs = DIALING, CONVERSATION, GRAPHS
    rows_d = over_r(dialing, dial_rs, args.quick)
    rows_c = over_r(conversation, conv_rs, args.quick)
    header = ["protocol", "config", "label", "observations", "eps_lower", "eps_upper",
              "delta_lower_at_e2", "delta_upper_at_e2", "vuvuzela_eps", "vuvuzela_delta_at_e2"]
    write_csv(args.out / "over_r.csv", header, rows_d + rows_c)
    plot_over_r(rows_d, dialing, "dialing", args.out / "vuvuzela_dialing_over_r.png")
    plot_over_r(rows_c, conversation, "conversation", args.out / "vuvuzela_conversation_over_r.png")

    # ---- (eps, delta) graphs --------------------------------------------------------
    by_name = {c.name: c for c in DIALING + CONVERSATION}
    graph_rows, summary = [], []
    ncol = 2
    nrow = (len(graphs) + 1) // 2
    fig, axes = plt.subplots(nrow, ncol, figsize=(12, 4.8 * nrow), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (protocol, r, names, ref) in zip(axes.ravel(), graphs):
        eps = np.linspace(0.0, math.log(3.0), 50 if args.quick else 200)
        v_ref = vuvuzela_epsilon(by_name[ref], r)
        for k, name in enumerate(names):
            cfg = by_name[name]
            pb = compose(cfg.sequence(r), delta=1e-12)
            db = pb.delta_bounds(eps)
            lo, up = np.asarray(db.lower), np.asarray(db.upper)
            m = up > 1e-16
            ax.plot(np.exp(eps[m]), up[m], color=cmap(k), lw=2, label=f"{cfg.label} upper")
            m = lo > 1e-16
            ax.plot(np.exp(eps[m]), lo[m], color=cmap(k), lw=1, ls="--", label="lower")
            graph_rows += [(protocol, name, r, b, float(e), math.exp(e), float(d))
                           for b, arr in (("lower", lo), ("upper", up)) for e, d in zip(eps, arr)]
            eb = pb.epsilon_bounds(DELTA)
            at2 = pb.delta_bounds(TARGET_EPS)
            v_eps = vuvuzela_epsilon(cfg, r) if cfg.kind == "LP" else math.nan
            at_v = pb.delta_bounds(min(v_ref, 50.0)).upper
            summary.append((protocol, cfg.label, r, math.exp(eb.lower), math.exp(eb.upper),
                            at2.lower, at2.upper, math.exp(v_eps) if cfg.kind == "LP" else
                            math.nan, by_name[ref].name, math.exp(v_ref), at_v,
                            "yes" if eb.upper <= TARGET_EPS else "no", pb.infinity_mass))
        v = v_ref
        ax.plot([math.exp(v)], [DELTA], "o", color="red", ms=7,
                label=f"Vuvuzela original, {by_name[ref].label}")
        ax.fill_between([1.0, 2.0], 1e-16, DELTA, color="green", alpha=0.12,
                        label="target e^eps <= 2, delta <= 1e-4")
        ax.set_yscale("log")
        ax.set_ylim(1e-14, 1.0)
        ax.set_xlabel(r"$e^\varepsilon$")
        ax.set_ylabel(r"$\delta$")
        ax.set_title(f"Vuvuzela {protocol}, r = {r}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, args.out / "vuvuzela_eps_delta.png")
    write_csv(args.out / "eps_delta.csv", ["protocol", "config", "observations", "bound",
                                           "epsilon", "exp_epsilon", "delta"], graph_rows)
    sum_header = ["protocol", "configuration", "r", "e^eps lower (delta=1e-4)",
                  "e^eps upper (delta=1e-4)", "delta lower at e^eps=2", "delta upper at e^eps=2",
                  "Vuvuzela e^eps (adv. comp.)", "reference", "reference's Vuvuzela e^eps",
                  "buckets delta at reference's Vuvuzela eps", "meets e^eps<=2, delta<=1e-4",
                  "distinguishing mass + round-off"]
    supported = []
    for cfg in dialing + conversation:
        mine = [row for row in rows_d + rows_c if row[1] == cfg.name]
        ok = [row[3] for row in mine if row[5] <= TARGET_EPS]
        ok_v = [row[3] for row in mine if not math.isnan(row[8]) and row[8] <= TARGET_EPS]
        supported.append((cfg.protocol, cfg.label, max(ok) if ok else 0,
                          (max(ok_v) if ok_v else 0) if cfg.original and cfg.kind == "LP"
                          else "-"))
    last_rows = []
    for rows in (rows_d, rows_c):
        top = max(row[3] for row in rows)
        last_rows += [(row[0], row[2], row[3], math.exp(row[5]), math.exp(row[8])
                       if not math.isnan(row[8]) else math.nan) for row in rows if row[3] == top]
    t_over = md_table(["protocol", "configuration", "r", "e^eps upper (buckets)",
                       "e^eps Vuvuzela (adv. comp.)"], last_rows)
    write_markdown(args.out / "results.md", "Vuvuzela (paper Section 7)",
                   [("quick mode" if args.quick else "full run") + ", delta = 1e-4, target "
                    "e^eps <= 2, conversation model: " + args.conversation_model,
                    md_table(sum_header, summary),
                    "largest number of observations of the over-r curves", t_over,
                    "largest r (a power of two) with e^eps <= 2 at delta = 1e-4",
                    md_table(["protocol", "configuration", "buckets (certified)",
                              "Vuvuzela (adv. comp.)"], supported),
                    "![over r](vuvuzela_dialing_over_r.png)",
                    "![over r](vuvuzela_conversation_over_r.png)",
                    "![graphs](vuvuzela_eps_delta.png)"])
    print(f"vuvuzela (conversation model: {args.conversation_model}): e^eps at delta=1e-4 "
          "[lower, upper] (Vuvuzela's adv. comp.), delta at e^eps=2:")
    for row in summary:
        v = "" if math.isnan(row[7]) else f" Vuvuzela {row[7]:.3f}"
        print(f"  {row[0]:12s} r={row[2]:<7d} {row[1]:34s} [{row[3]:.4f}, {row[4]:.4f}]{v}"
              f"  delta(e^eps=2) <= {row[6]:.2e}  delta at {row[8]}'s Vuvuzela e^eps="
              f"{row[9]:.3f}: {row[10]:.2e}  meets: {row[11]}")
    print(f"  wrote {args.out} in {timer}")


if __name__ == "__main__":
    main()
