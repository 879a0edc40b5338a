"""Which epsilon is mine?  Poisson, fixed-size and shuffled batches side by side.

Computes the certified epsilon bounds (delta = 1e-5) of DP-SGD runs the size of
CIFAR-10 (n = 50,000) and MNIST (n = 60,000) with batch size 256, under the three
samplers of ``PrivacyBucketsAccountant`` and two neighbouring relations, writes the
tables quoted in docs/which-epsilon.md (``--markdown``) and draws

* ``docs/img/which_epsilon_epochs.png``: epsilon bounds over the epochs, one panel per
  dataset (sigma = 1.0);
* ``docs/img/which_epsilon_chua.png``: one epoch of 1,000 steps at sigma = 0.35 (the
  setting of Chua et al.'s published example), delta over epsilon: the shuffle bracket,
  the Poisson bracket, the unamplified Gaussian in closed form and the "cube" lower
  bound of Chua et al. (ICML 2024), recomputed here from its formula.

Runs offline in well under a minute:

    python examples/which_epsilon.py                 # tables on stdout, PNGs in docs/img
    python examples/which_epsilon.py --quick         # two settings, no PNG (tests)
    python examples/which_epsilon.py --write-doc     # also refresh docs/which-epsilon.md
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

try:
    import pb_accountant  # noqa: F401
except ImportError:  # a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pb_accountant import PrivacyBucketsAccountant, bound_text

REPO = Path(__file__).resolve().parents[1]
DELTA = 1e-5
DATASETS = {"CIFAR-10": 50_000, "MNIST": 60_000}
BATCH = 256
#: (sampler, neighbouring) columns of the tables
COLUMNS = [("poisson", "add_remove"), ("fixed_size", "add_remove"),
           ("shuffle", "replace_special"),
           ("poisson", "replace_one"), ("fixed_size", "replace_one"),
           ("shuffle", "replace_one")]
#: (sigma, epochs) rows: typical DP-SGD training on these datasets
SETTINGS = [(1.0, 10), (1.0, 100), (2.0, 100), (1.1, 60)]


def steps_for(sampler: str, n: int, b: int, epochs: int) -> int:
    """Steps of ``epochs`` epochs: ceil(n/b) batches per epoch when shuffling (a
    DataLoader with drop_last=False), ceil(epochs * n / b) expected-size steps otherwise."""
    if sampler == "shuffle":
        return epochs * -(-n // b)
    return -(-epochs * n // b)


def bounds(sampler: str, relation: str, n: int, b: int, sigma: float, epochs: int,
           delta: float = DELTA):
    acc = PrivacyBucketsAccountant(sampler=sampler, neighbouring=relation,
                                   dataset_size=n, batch_size=b)
    acc.history = [(sigma, b / n, steps_for(sampler, n, b, epochs))]
    return acc.get_epsilon_bounds(delta)


def table(settings, datasets) -> str:
    head = "| dataset | sigma | epochs | " + " | ".join(
        f"{s} / {r}" for s, r in COLUMNS) + " |"
    rule = "|" + "---|" * (3 + len(COLUMNS))
    rows = [head, rule]
    for name, n in datasets.items():
        for sigma, epochs in settings:
            cells = []
            for s, r in COLUMNS:
                b = bounds(s, r, n, BATCH, sigma, epochs)
                cells.append(f"[{bound_text(b.lower, False, 2)}, "
                             f"{bound_text(b.upper, True, 2)}]")
            rows.append(f"| {name} | {sigma:g} | {epochs} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------
# Chua et al.'s single-epoch setting
# --------------------------------------------------------------------------------------

CHUA_SIGMA, CHUA_STEPS = 0.35, 1000
CHUA_EPS = (0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0)


def gaussian_delta(eps, sigma):
    """Hockey-stick divergence of N(1, sigma^2) vs N(0, sigma^2) (closed form)."""
    eps = np.asarray(eps, dtype=float)
    return stats.norm.cdf(0.5 / sigma - sigma * eps) - np.exp(
        eps + stats.norm.logcdf(-0.5 / sigma - sigma * eps))


def cube_delta(eps, sigma, steps, caps=np.arange(0.0, 100.0, 0.01)):
    """Chua et al.'s lower bound: max over C of P(max_t x_t > C) - e^eps Q(max_t x_t > C),
    P: one of the ``steps`` coordinates (uniformly chosen) has mean 1, Q: all mean 0."""
    log_p_in = stats.norm.logcdf((caps - 1.0) / sigma) + (steps - 1) * stats.norm.logcdf(
        caps / sigma)
    log_q_in = steps * stats.norm.logcdf(caps / sigma)
    p_out, q_out = -np.expm1(log_p_in), -np.expm1(log_q_in)
    return np.array([np.max(p_out - math.exp(e) * q_out) for e in np.atleast_1d(eps)])


def chua_rows():
    """delta at each epsilon: (eps, shuffle lower, cube, shuffle upper, closed form,
    Poisson lower, Poisson upper) for one epoch of CHUA_STEPS steps."""
    n, b = CHUA_STEPS, 1                     # 1,000 batches per epoch
    shuffle = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                       dataset_size=n, batch_size=b)
    shuffle.history = [(CHUA_SIGMA, b / n, CHUA_STEPS)]
    poisson = PrivacyBucketsAccountant()
    poisson.history = [(CHUA_SIGMA, 1.0 / CHUA_STEPS, CHUA_STEPS)]
    eps = np.asarray(CHUA_EPS)
    s = shuffle.get_delta_bounds(eps)
    p = poisson.get_delta_bounds(eps)
    return list(zip(eps, np.atleast_1d(s.lower), cube_delta(eps, CHUA_SIGMA, CHUA_STEPS),
                    np.atleast_1d(s.upper), gaussian_delta(eps, CHUA_SIGMA),
                    np.atleast_1d(p.lower), np.atleast_1d(p.upper)))


def chua_table(rows) -> str:
    out = ["| epsilon | shuffle lower (pb) | cube lower (Chua et al.) | shuffle upper (pb) | "
           "unamplified Gaussian (closed form) | Poisson lower (pb) | Poisson upper (pb) |",
           "|---|---|---|---|---|---|---|"]
    for e, sl, cube, su, closed, pl, pu in rows:
        out.append(f"| {e:g} | {sl:.4g} | {cube:.4g} | {su:.4g} | {closed:.4g} | {pl:.3g} | "
                   f"{pu:.3g} |")
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------

def plot_epochs(path: Path, sigma: float = 1.0) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    epochs = [1, 2, 5, 10, 20, 50, 100]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    styles = {("poisson", "add_remove"): "tab:blue", ("fixed_size", "add_remove"): "tab:green",
              ("shuffle", "replace_special"): "tab:red"}
    for ax, (name, n) in zip(axes, DATASETS.items()):
        for (s, r), colour in styles.items():
            bb = [bounds(s, r, n, BATCH, sigma, e) for e in epochs]
            up = [b.upper for b in bb]
            lo = [b.lower for b in bb]
            ax.plot(epochs, up, color=colour, lw=2, label=f"{s} ({r}): upper")
            ax.plot(epochs, lo, color=colour, lw=1.5, ls="--", label=f"{s} ({r}): lower")
            ax.fill_between(epochs, lo, up, color=colour, alpha=0.12)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epochs")
        ax.set_title(f"{name}-sized: n = {n:,}, b = {BATCH}, sigma = {sigma:g}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"certified epsilon at delta = {DELTA:g}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_chua(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    eps = np.linspace(0.0, 12.0, 121)
    shuffle = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                       dataset_size=CHUA_STEPS, batch_size=1)
    shuffle.history = [(CHUA_SIGMA, 1.0 / CHUA_STEPS, CHUA_STEPS)]
    poisson = PrivacyBucketsAccountant()
    poisson.history = [(CHUA_SIGMA, 1.0 / CHUA_STEPS, CHUA_STEPS)]
    s = shuffle.get_delta_bounds(eps)
    p = poisson.get_delta_bounds(eps)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(eps, s.upper, color="tab:red", lw=2, label="shuffle upper (pb, no amplification)")
    ax.plot(eps, s.lower, color="tab:red", lw=1.5, ls="--",
            label="shuffle lower (pb, max-of-batches)")
    cube_eps = np.asarray(CHUA_EPS)
    ax.plot(cube_eps, cube_delta(cube_eps, CHUA_SIGMA, CHUA_STEPS), "ko", ms=4,
            label="cube lower bound (Chua et al. 2024)")
    ax.plot(eps, p.upper, color="tab:blue", lw=2, label="Poisson upper (pb)")
    ax.plot(eps, p.lower, color="tab:blue", lw=1.5, ls="--", label="Poisson lower (pb)")
    ax.set_yscale("log")
    ax.set_ylim(1e-12, 1.0)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("delta")
    ax.set_title(f"one epoch, {CHUA_STEPS} steps, sigma = {CHUA_SIGMA}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_doc(side: str, chua: str, path: Path = REPO / "docs" / "which-epsilon.md") -> None:
    """Replace the two tables of docs/which-epsilon.md (found by their headers)."""
    def replace(text, header, table_text):
        lines = text.split("\n")
        i = next(k for k, line in enumerate(lines) if line.startswith(header))
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        return "\n".join(lines[:i] + table_text.split("\n") + lines[j:])
    text = path.read_text(encoding="utf-8")
    text = replace(text, "| dataset | sigma | epochs |", side)
    text = replace(text, "| epsilon | shuffle lower (pb) |", chua)
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two settings, no figures")
    parser.add_argument("--write-doc", action="store_true",
                        help="also write the tables into docs/which-epsilon.md")
    parser.add_argument("--img", default=str(REPO / "docs" / "img"),
                        help="folder of the PNGs (default docs/img)")
    args = parser.parse_args(argv)
    if args.quick and args.write_doc:
        parser.error("--write-doc needs the full tables: drop --quick")
    if Path(args.img).exists() and not Path(args.img).is_dir():
        parser.error(f"--img must be a folder, {args.img!r} is a file")
    t0 = time.monotonic()
    if args.quick:
        print(table([(1.0, 10)], {"MNIST": DATASETS["MNIST"]}))
        return 0
    side, chua = table(SETTINGS, DATASETS), chua_table(chua_rows())
    print(f"## epsilon bounds at delta = {DELTA:g}, batch size {BATCH}\n")
    print(side)
    print(f"\n## Chua et al.'s setting: one epoch, {CHUA_STEPS} steps, sigma = {CHUA_SIGMA} "
          "(delta at each epsilon)\n")
    print(chua)
    if args.write_doc:
        write_doc(side, chua)
    img = Path(args.img)
    img.mkdir(parents=True, exist_ok=True)
    plot_epochs(img / "which_epsilon_epochs.png")
    plot_chua(img / "which_epsilon_chua.png")
    print(f"\nwrote {img / 'which_epsilon_epochs.png'} and {img / 'which_epsilon_chua.png'} "
          f"in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
