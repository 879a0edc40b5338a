"""Shared helpers of the paper reproductions (``examples/fig*.py``, ``examples/vuvuzela.py``).

Every reproduction writes PNGs, CSV files and a ``results.md`` into its output folder
(default ``examples/output/<name>/``) and prints its key numbers.  ``--quick`` runs a
small instance of the same pipeline (used by ``tests/test_reproductions.py``).
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

import numpy as np

try:
    import pb_accountant  # noqa: F401
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pb_accountant  # noqa: F401

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pb_accountant import compose  # noqa: E402
from pb_accountant.pair_bounds import (cdp_for_sequence, rdp_from_pair, kov_epsilon_for_pair,  # noqa: E402
                                       kov_for_sequence, rdp_for_sequence)

EXAMPLES = Path(__file__).resolve().parent

#: one colour/style per bound, used by every figure
STYLE = {
    "buckets upper": dict(color="tab:red", lw=2.0),
    "buckets lower": dict(color="tab:blue", lw=1.5, ls="--"),
    "KOV": dict(color="tab:green", lw=1.5, ls="-."),
    "RDP": dict(color="tab:purple", lw=1.5, ls=":"),
    "CDP": dict(color="tab:orange", lw=1.5, ls=(0, (5, 2, 1, 2))),
    "exact": dict(color="black", lw=0.8, ls="-"),
}


def parse_args(name: str, doc: str, argv=None, extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.strip().split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, default=EXAMPLES / "output" / name,
                   help="output folder for PNGs, CSVs and results.md")
    p.add_argument("--quick", action="store_true",
                   help="small instance of the same pipeline (seconds; used by the tests)")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out must be a folder, {str(args.out)!r} is a file")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        p.error(f"--out: cannot create the folder {str(args.out)!r} ({exc.strerror or exc})")
    return args


class Timer:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __str__(self):
        return f"{time.perf_counter() - self.t0:.1f}s"


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in rows:
            w.writerow([_fmt(v) for v in row])


def _fmt(v):
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isinf(v):
            return "inf"
        return f"{v:.10g}"
    return v


def md_table(header: Sequence[str], rows: Iterable[Sequence], digits: int = 4) -> str:
    def cell(v):
        if isinstance(v, (float, np.floating)):
            v = float(v)
            if math.isinf(v):
                return "inf"
            if v != 0.0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
                return f"{v:.{digits - 1}e}"
            return f"{v:.{digits}f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(path: Path, title: str, sections: List[str]) -> None:
    path.write_text(f"# {title}\n\n" + "\n\n".join(sections) + "\n")


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------------------
# the bounds, for one (homogeneous or not) sequence
# --------------------------------------------------------------------------------------

def bucket_curve(sequence, eps, delta=1e-5):
    """(lower, upper) delta arrays of the privacy buckets at ``eps``."""
    pb = compose(sequence, delta=delta)
    db = pb.delta_bounds(np.asarray(eps, dtype=float))
    return np.asarray(db.lower), np.asarray(db.upper)


def bucket_epsilon(sequence, delta, compose_delta=None):
    pb = compose(sequence, delta=compose_delta or delta)
    return pb.epsilon_bounds(delta)


def comparison_curves(sequence, eps, *, kov=True, rdp=True, cdp=True) -> Dict[str, np.ndarray]:
    """delta upper curves of the comparison bounds for the same pairs as the buckets."""
    out = {}
    if kov:
        (pair, r), = sequence
        out["KOV"] = np.asarray(kov_for_sequence(pair, r, eps).delta_upper)
    if rdp:
        out["RDP"] = np.asarray(rdp_for_sequence(sequence).delta(eps).upper)
    if cdp:
        out["CDP"] = np.asarray(cdp_for_sequence(sequence).delta(eps).upper)
    return out


def comparison_epsilons(sequence, delta, *, kov=True, rdp=True, cdp=True,
                        rdp_profile=None, cdp_seq=None) -> Dict[str, float]:
    out = {}
    if kov:
        (pair, r), = sequence
        out["KOV"] = kov_epsilon_for_pair(pair, r, delta).upper
    if rdp:
        prof = rdp_profile or rdp_for_sequence(sequence)
        out["RDP"] = prof.epsilon(delta).upper
    if cdp:
        seq = cdp_seq or cdp_for_sequence(sequence)
        out["CDP"] = seq.epsilon(delta).upper
    return out


def epsilons_over_r(pair, rs, delta, exact) -> Dict[str, List[float]]:
    """Epsilon at ``delta`` after r compositions, for every r: bucket bounds, the
    comparison bounds of the same pair, and ``exact(r)``."""
    prof = rdp_from_pair(pair)
    over_r = {k: [] for k in ("buckets upper", "buckets lower", "KOV", "RDP", "CDP", "exact")}
    for r in rs.tolist():
        eb = compose([(pair, r)], delta=delta).epsilon_bounds(delta)
        over_r["buckets upper"].append(eb.upper)
        over_r["buckets lower"].append(eb.lower)
        c = comparison_epsilons([(pair, r)], delta, rdp_profile=prof.composed(r),
                                cdp_seq=cdp_for_sequence([(pair, r)]))
        for k, v in c.items():
            over_r[k].append(v)
        over_r["exact"].append(exact(r))
    return over_r


def epsilon_at(eps, delta_curve, delta):
    """Smallest grid epsilon whose (certified upper) delta is <= delta (inf if none)."""
    ok = np.nonzero(np.asarray(delta_curve) <= delta)[0]
    return float(np.asarray(eps)[ok[0]]) if ok.size else math.inf


def compositions_grid(r_max: int, points: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, r_max, points)).astype(int))


def plot_eps_delta(ax, eps, curves: Dict[str, np.ndarray], title: str, *, floor=1e-14,
                   labels_suffix: str = "", styles=None):
    x = np.exp(np.asarray(eps))
    for label, d in curves.items():
        st = dict(STYLE.get(label.split(" [")[0], {}))
        if styles and label in styles:
            st.update(styles[label])
        d = np.asarray(d, dtype=float)
        mask = d > floor
        if mask.any():
            ax.plot(x[mask], d[mask], label=label + labels_suffix, **st)
    ax.set_yscale("log")
    ax.set_xlabel(r"$e^\varepsilon$")
    ax.set_ylabel(r"$\delta$")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_eps_over_r(ax, rs, curves: Dict[str, Sequence[float]], title: str, styles=None):
    for label, e in curves.items():
        st = dict(STYLE.get(label.split(" [")[0], {}))
        if styles and label in styles:
            st.update(styles[label])
        e = np.asarray(e, dtype=float)
        ax.plot(rs, np.exp(np.minimum(e, 50.0)), label=label, **st)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("compositions r")
    ax.set_ylabel(r"$e^\varepsilon$")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
