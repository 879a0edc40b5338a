"""Rendering for ``pb-accountant``: text tables, JSON, CSV and PNG from plain data.

The commands (``_cli_commands``) compute and return dictionaries; this module only
formats them.  Bounds are rounded outward for display (lower bounds down, upper
bounds up), so a printed bound is still a valid bound; JSON carries full doubles.
Files are written to a temporary file in the target folder and moved into place
with ``os.replace``, so a failure never leaves a partial file behind.
"""
from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence

from pb_accountant.results import directed_decimal

from ._common import json_float

Data = Dict[str, Any]


# --------------------------------------------------------------------------------------
# numbers and tables
# --------------------------------------------------------------------------------------

def _directed(x: Optional[float], up: bool, sig: int = 6) -> str:
    """x rounded to ``sig`` significant digits towards +inf (up) or -inf (down)."""
    if x is None:
        return "-"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0.0:
        return "0"
    d = directed_decimal(x, up, significant=sig)
    if 1e-4 <= abs(d) < 1e7:
        text = format(d, "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    mantissa, exponent = format(d, "e").split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent):+03d}"


def up(x) -> str:
    """An upper bound for display: rounded towards +inf."""
    return _directed(x, True)


def down(x) -> str:
    """A lower bound for display: rounded towards -inf."""
    return _directed(x, False)


def g(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def exact(x) -> str:
    """The value a bound is certified *at* (an epsilon, a delta, a false-positive
    rate): six significant digits when they read back as the value, else every digit
    (the bounds at 1.0000004 are not those at 1: a rounded argument would leave one of
    the two printed bounds unproven)."""
    if x is None:
        return "-"
    x = float(x) + 0.0                          # -0.0 as 0
    text = f"{x:.6g}"
    return text if not math.isfinite(x) or float(text) == x else repr(x)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]

    def line(cells):
        out = []
        for cell, width, a in zip(cells, widths, align):
            out.append(str(cell).rjust(width) if a == "r" else str(cell).ljust(width))
        return "  " + "  ".join(out).rstrip()

    parts = [line(headers), line(["-" * w for w in widths])]
    parts += [line(r) for r in rows]
    return "\n".join(parts)


def _width(lo: float, hi: float) -> str:
    if hi == 0 or not math.isfinite(hi):
        return "-"
    return f"{100.0 * (hi - lo) / hi:.3g}%"


def _jsonable(obj):
    if isinstance(obj, float):
        return json_float(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def render_json(data: Data) -> str:
    return json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n"


def _schedule_table(schedule) -> str:
    rows = [[str(i + 1), g(s["noise_multiplier"]), g(s["sample_rate"]), str(s["steps"])]
            for i, s in enumerate(schedule)]
    return table(["segment", "noise_multiplier", "sample_rate", "steps"], rows, "rrrr")


def _notes(notes: Sequence[str]) -> str:
    return "".join(f"note: {n}\n" for n in notes)


_SAMPLER_TEXT = {"poisson": "Poisson-subsampled Gaussian",
                 "fixed_size": "Gaussian, fixed-size batches drawn without replacement",
                 "shuffle": "Gaussian, batches of one shuffle per epoch"}


def assumption_text(data: Data) -> str:
    """``sampler=..., neighbouring=...`` (and the sizes) a result assumes."""
    text = (f"sampler={data.get('sampler', 'poisson')}, "
            f"neighbouring={data.get('neighbouring', 'add_remove')}")
    if data.get("dataset_size") is not None and data.get("sampler", "poisson") != "poisson":
        text += f", dataset_size={data['dataset_size']}, batch_size={data['batch_size']}"
    return text


def _heading(data: Data, with_delta: bool = True) -> str:
    kind = _SAMPLER_TEXT.get(data.get("sampler", "poisson"), data.get("sampler"))
    text = f"DP-SGD ({kind}), {data['steps']} steps"
    if with_delta:
        text += f", delta = {exact(data['delta'])}"
    text += f"\nassumes: {assumption_text(data)}"
    return text + "\n\n" + _schedule_table(data["schedule"]) + "\n\n"


# --------------------------------------------------------------------------------------
# the commands' text
# --------------------------------------------------------------------------------------

def render_epsilon(data: Data) -> str:
    lo, hi = data["eps_lower"], data["eps_upper"]
    out = _heading(data)
    out += table(["eps_lower", "eps_upper", "rel_width"],
                 [[down(lo), up(hi), _width(lo, hi)]], "rrr") + "\n\n"
    out += (f"certified: {down(lo)} <= epsilon <= {up(hi)} at delta = {exact(data['delta'])} "
            f"({assumption_text(data)})\n")
    return out + _notes(data["notes"])


def render_delta(data: Data) -> str:
    out = _heading(data, with_delta=False)
    rows = [[exact(r["epsilon"]), down(r["delta_lower"]), up(r["delta_upper"])]
            for r in data["results"]]
    out += table(["epsilon", "delta_lower", "delta_upper"], rows, "rrr") + "\n"
    return out + _notes(data["notes"])


def render_noise(data: Data) -> str:
    head = (f"noise multiplier for epsilon <= {exact(data['target_epsilon'])} at delta = "
            f"{exact(data['delta'])}, sample rate {data['sample_rate']:g}, {data['steps']} steps\n"
            f"assumes: {assumption_text(data)}\n\n")
    sigma = data["noise_multiplier"]
    timing = f", {data['seconds']:.1f} s" if data.get("seconds") is not None else ""
    if sigma is None:
        out = head + f"cannot be certified: {data['reason']}\n"
        return out + _notes(data["notes"])
    out = head + table(["noise_multiplier", "eps_lower", "eps_upper"],
                       [[up(sigma), down(data["eps_lower"]), up(data["eps_upper"])]],
                       "rrr") + "\n\n"
    rejected = data["rejected_noise_multiplier"]
    out += f"sigma = {up(sigma)} certifies epsilon <= {up(data['eps_upper'])}"
    if rejected is not None and data["reason"] is None:
        out += (f"; sigma = {down(rejected)} does not (relative tolerance "
                f"{data['relative_tolerance']:g}, {data['evaluations']} evaluations{timing})\n")
    else:
        out += f" ({data['evaluations']} evaluations{timing})\n"
    if data["reason"] is not None:
        out += f"not the smallest: {data['reason']}\n"
    return out + _notes(data["notes"])


def render_compare(data: Data) -> str:
    timing = any("seconds" in r for r in data["results"])
    rows = []
    for r in data["results"]:
        row = [r["label"], "-" if r["eps_lower"] is None else down(r["eps_lower"]),
               "-" if r["eps_upper"] is None else up(r["eps_upper"])]
        if timing:
            row.append("-" if r.get("seconds") is None else f"{r['seconds']:.2f}")
        row.append(r["kind"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}")
        rows.append(row)
    headers = ["method", "eps_lower", "eps_upper"] + (["seconds"] if timing else []) + ["kind"]
    align = "lrr" + ("r" if timing else "") + "l"
    out = _heading(data) + table(headers, rows, align) + "\n"
    return out + _notes(data["notes"])


def render_curve(data: Data, points: Optional[Sequence[Sequence[float]]] = None) -> str:
    out = ""
    written = [p for p in (data.get("png"), data.get("csv"), data.get("peers_csv")) if p]
    if written:
        out += (f"wrote {' and '.join(written)} ({data['points']} points, epsilon in "
                f"[0, {g(data['eps_max'])}], certified delta bounds)\n"
                f"assumes: {assumption_text(data)}\n")
    else:
        out += _heading(data, with_delta=False)
        rows = [[exact(e), down(lo), up(hi)] for e, lo, hi in (points or [])]
        out += table(["epsilon", "delta_lower", "delta_upper"], rows, "rrr") + "\n"
    for name, status in data.get("peers", {}).items():
        out += f"  {name}: {status}\n"
    return out + _notes(data["notes"])


# --------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------

class OutputError(Exception):
    """An output path that cannot be written (a user error)."""


def check_output_path(option: str, path: str) -> str:
    """``path`` if a file can be created there, else OutputError naming ``option``
    (a link counts as its target; a FIFO or device is refused, never replaced)."""
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    shown = os.path.dirname(path) or "."
    if os.path.isdir(real):
        raise OutputError(f"{option}: {path} is a folder, not a file name")
    if os.path.exists(real) and not os.path.isfile(real):
        raise OutputError(f"{option}: {path} exists and is not a regular file")
    if not os.path.isdir(folder):
        raise OutputError(f"{option}: cannot write {path}: folder {shown} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{option}: cannot write {path}: folder {shown} is not writable")
    if os.path.exists(real) and not os.access(real, os.W_OK):
        raise OutputError(f"{option}: cannot write {path}: the file is read-only")
    return path


class AtomicFiles:
    """Write several files to temporaries first; ``commit`` moves all into place."""

    def __init__(self):
        self._pending: List[tuple] = []

    def write(self, option: str, path: str, writer: Callable[[str], None]) -> None:
        # a link is followed (its target is what gets replaced); anything that exists
        # and is not a regular file (a FIFO, a device) is refused, never replaced
        path = os.path.realpath(path)
        if os.path.exists(path) and not os.path.isfile(path):
            raise OutputError(f"{option}: {path} exists and is not a regular file")
        folder = os.path.dirname(path)
        base = os.path.basename(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder)
            os.close(fd)
        except OSError as exc:
            raise OutputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None
        self._pending.append((tmp, path))
        try:
            writer(tmp)
        except OSError as exc:
            raise OutputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None

    def commit(self) -> None:
        umask = os.umask(0)
        os.umask(umask)
        for tmp, path in self._pending:
            try:                                 # an existing file keeps its mode
                mode = stat.S_IMODE(os.stat(path).st_mode)
            except FileNotFoundError:
                mode = 0o666 & ~umask            # as open() would have made it
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        self._pending = []

    def discard(self) -> None:
        for tmp, _path in self._pending:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self._pending = []


def curve_csv_writer(epsilons, lower, upper) -> Callable[[str], None]:
    def write(path: str) -> None:
        import csv
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["epsilon", "delta_lower", "delta_upper"])
            for e, lo, hi in zip(epsilons, lower, upper):
                w.writerow([repr(float(e)), repr(float(lo)), repr(float(hi))])
    return write


def peers_csv_writer(deltas, peer_curves) -> Callable[[str], None]:
    def write(path: str) -> None:
        import csv
        names = list(peer_curves)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["delta"] + [f"{n}_eps_lower" for n in names]
                       + [f"{n}_eps_upper" for n in names])
            for i, d in enumerate(deltas):
                los = ["" if peer_curves[n][i][0] is None else repr(peer_curves[n][i][0])
                       for n in names]
                ups = ["" if peer_curves[n][i][1] is None else repr(peer_curves[n][i][1])
                       for n in names]
                w.writerow([repr(d)] + los + ups)
    return write


def curve_png_writer(epsilons, lower, upper, schedule, peer_curves, deltas,
                     title: Optional[str]) -> Callable[[str], None]:
    def write(path: str) -> None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
        from .peers import peer_description
        eps = np.asarray(epsilons)
        d_up = np.asarray(upper)
        d_lo = np.asarray(lower)
        fig, ax = plt.subplots(figsize=(7.0, 4.5), dpi=120)
        try:
            mask_up = d_up > 0
            mask_lo = d_lo > 0
            ax.fill_between(eps, np.where(mask_lo, d_lo, np.nan),
                            np.where(mask_up, d_up, np.nan), color="tab:blue", alpha=0.2,
                            linewidth=0, label="certified region")
            ax.plot(eps[mask_up], d_up[mask_up], color="tab:blue", lw=2,
                    label="pb upper bound", zorder=5)
            ax.plot(eps[mask_lo], d_lo[mask_lo], color="tab:blue", lw=1.2, ls="--",
                    label="pb lower bound", zorder=5)
            styles = {"opacus-rdp": ("tab:red", "-"), "opacus-prv": ("tab:green", "-"),
                      "pld-pessimistic": ("tab:orange", "-"),
                      "pld-optimistic": ("tab:orange", ":")}
            for name, pairs in peer_curves.items():
                label, _kind = peer_description(name)
                color, ls = styles.get(name, ("gray", "-"))
                for idx, suffix in ((1, "upper"), (0, "lower")):
                    pts = [(p[idx], d) for p, d in zip(pairs, deltas)
                           if p[idx] is not None and math.isfinite(p[idx])]
                    if pts:
                        xs, ys = zip(*pts)
                        ax.plot(xs, ys, color=color, ls=ls if idx == 1 else ":", lw=1.2,
                                marker=".", ms=3,
                                label=f"{label} ({suffix})" if name == "opacus-prv" else label)
            ax.set_yscale("log")
            positive = d_up[mask_up]
            bottom = max(float(positive.min()) if positive.size else 1e-12, 1e-14)
            ax.set_ylim(bottom, 1.0)
            ax.set_xlim(0.0, float(eps.max()) if eps.size and eps.max() > 0 else 1.0)
            ax.set_xlabel(r"$\varepsilon$")
            ax.set_ylabel(r"$\delta(\varepsilon)$")
            text = title
            if text is None:
                if len(schedule) == 1:
                    s = schedule[0]
                    text = (f"DP-SGD: noise multiplier {s['noise_multiplier']:g}, sample rate "
                            f"{s['sample_rate']:g}, {s['steps']} steps")
                else:
                    text = (f"DP-SGD: {len(schedule)} segments, "
                            f"{sum(s['steps'] for s in schedule)} steps")
            ax.set_title(text, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(path, format="png")
        finally:
            plt.close(fig)
    return write


# --------------------------------------------------------------------------------------
# attack risk and the privacy report
# --------------------------------------------------------------------------------------

def render_risk(data: Data) -> str:
    out = (f"DP-SGD (Poisson-subsampled Gaussian), {data['steps']} steps: an attacker's best "
           "true-positive rate (membership inference, one example)\n"
           f"assumes: {assumption_text(data)}\n\n")
    out += _schedule_table(data["schedule"]) + "\n\n"
    rows = [[exact(r["fpr"]), down(r["tpr_lower"]), up(r["tpr_upper"])] for r in data["results"]]
    out += table(["fpr", "tpr_lower", "tpr_upper"], rows, "rrr") + "\n\n"
    mu = data["gdp_mu"]
    out += (f"Gaussian DP: {down(mu['lower'])} <= mu <= {up(mu['upper'])} "
            f"(FPR in [{g(mu['alpha_min'])}, 1 - {g(mu['alpha_min'])}])\n")
    if data.get("png"):
        out += f"wrote {data['png']} (privacy curve and trade-off band)\n"
    return out + _notes(data["notes"])


def render_report(data: Data) -> str:
    files = data.get("files") or {}
    if not files:
        return data["markdown"]
    return "".join(f"wrote {files[k]}\n" for k in ("md", "json", "png") if k in files)
