"""``pb-accountant``: certified privacy bounds of DP-SGD from the command line.

    pb-accountant epsilon --sigma 1.1 --sample-rate 0.01 --epochs 10 --delta 1e-5
    pb-accountant epsilon --segment 1.1,0.01,500 --segment 0.9,0.02,200 --delta 1e-5
    pb-accountant delta   --sigma 1.1 --sample-rate 0.01 --steps 1000 --epsilon 1 2
    pb-accountant noise   --target-epsilon 3 --sample-rate 0.01 --epochs 10 --delta 1e-5
    pb-accountant curve   --sigma 1.1 --sample-rate 0.01 --steps 1000 --out curve --compare
    pb-accountant compare --sigma 1.1 --sample-rate 0.01 --steps 1000 --delta 1e-5

Aligned plain-text tables by default, ``--json`` for scripts.  Bounds are rounded
outward for display (lower bounds down, upper bounds up), so a printed bound is still
a valid bound; JSON carries the full double values.  User errors print one line to
stderr and exit with status 2.  Only numpy/scipy (and matplotlib for ``curve``) are
needed; peers in ``curve --compare``/``compare`` are used when installed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Callable, List, Optional, Sequence, Tuple

from ._common import json_float

PROG = "pb-accountant"
EXIT_USAGE = 2
Schedule = List[Tuple[float, float, int]]


class UserError(Exception):
    """A mistake in the command line or its values: reported in one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        raise UserError(f"{self.prog}: error: {message}")


# --------------------------------------------------------------------------------------
# formatting
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
    with localcontext() as ctx:
        ctx.prec = sig
        ctx.rounding = ROUND_CEILING if up else ROUND_FLOOR
        d = +Decimal(x)
    if 1e-4 <= abs(d) < 1e7:
        text = format(d, "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    mantissa, exponent = format(d, "e").split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent):+03d}"


def up(x):
    return _directed(x, True)


def down(x):
    return _directed(x, False)


def g(x) -> str:
    return "-" if x is None else f"{x:.6g}"


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


def _emit_json(obj, out) -> None:
    out.write(json.dumps(obj, indent=2, allow_nan=False) + "\n")


# --------------------------------------------------------------------------------------
# argument values
# --------------------------------------------------------------------------------------

def _float(name: str, text: str, *, low=None, high=None, low_open=False,
           high_open=False) -> float:
    try:
        x = float(text)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(x):
        raise UserError(f"{name} must be finite, got {text!r}")
    rng = (f"{'(' if low_open else '['}{low:g}, " if low is not None else "(-inf, ") + \
          (f"{high:g}{')' if high_open else ']'}" if high is not None else "inf)")
    if low is not None and (x < low or (low_open and x == low)):
        raise UserError(f"{name} must be in {rng}, got {text}")
    if high is not None and (x > high or (high_open and x == high)):
        raise UserError(f"{name} must be in {rng}, got {text}")
    return x


def _int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be an integer, got {text!r}") from None
    if not math.isfinite(value) or not value.is_integer() or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {text}")
    return int(value)


def steps_per_epoch(sample_rate: float) -> int:
    """Batches per epoch of a Poisson loader with this rate (Opacus: int(1/q))."""
    inv = 1.0 / sample_rate
    nearest = round(inv)
    if abs(inv - nearest) <= 1e-9 * inv:
        return max(1, int(nearest))
    return max(1, int(math.floor(inv)))


def _delta(text: str, name: str = "--delta") -> float:
    return _float(name, text, low=0.0, high=1.0, low_open=True, high_open=True)


def _schedule(args) -> Tuple[Schedule, List[str]]:
    """[(sigma, q, steps)] from --segment or --sigma/--sample-rate/--steps|--epochs."""
    notes: List[str] = []
    single = [args.sigma, args.sample_rate, args.steps, args.epochs]
    if args.segment:
        if any(v is not None for v in single):
            raise UserError("use either --segment (repeatable) or --sigma/--sample-rate with "
                            "--steps/--epochs, not both")
        out = []
        for text in args.segment:
            parts = [p.strip() for p in text.split(",")]
            if len(parts) != 3:
                raise UserError(f"--segment expects SIGMA,SAMPLE_RATE,STEPS (e.g. 1.1,0.01,1000), "
                                f"got {text!r}")
            out.append((_float("segment noise multiplier", parts[0], low=0.0),
                        _float("segment sample rate", parts[1], low=0.0, high=1.0),
                        _int("segment steps", parts[2])))
        return out, notes
    if args.sigma is None or args.sample_rate is None:
        raise UserError("give --sigma and --sample-rate with --steps or --epochs, or one "
                        "--segment SIGMA,SAMPLE_RATE,STEPS per phase")
    sigma = _float("--sigma", args.sigma, low=0.0)
    q = _float("--sample-rate", args.sample_rate, low=0.0, high=1.0, low_open=True)
    if (args.steps is None) == (args.epochs is None):
        raise UserError("give exactly one of --steps and --epochs")
    if args.steps is not None:
        steps = _int("--steps", args.steps)
    else:
        epochs = _int("--epochs", args.epochs)
        per = steps_per_epoch(q)
        steps = epochs * per
        notes.append(f"{epochs} epochs x {per} steps per epoch (1/sample_rate) = {steps} steps")
    return [(sigma, q, steps)], notes


def _schedule_table(schedule: Schedule) -> str:
    rows = [[str(i + 1), g(s), g(q), str(t)] for i, (s, q, t) in enumerate(schedule)]
    return table(["segment", "noise_multiplier", "sample_rate", "steps"], rows, "rrrr")


def _schedule_json(schedule: Schedule):
    return [{"noise_multiplier": s, "sample_rate": q, "steps": t} for s, q, t in schedule]


def _accountant(schedule: Schedule):
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    acc.history = [(float(s), float(q), int(t)) for s, q, t in schedule]
    acc._pairs(acc.history)                   # validate (ValueError -> one line)
    return acc


def _engine(schedule: Schedule, grid_delta: float):
    """Composed buckets of the schedule, on a grid sized for deltas down to grid_delta."""
    from pb_accountant import compose
    from pb_accountant.accountant import step_pair
    _accountant(schedule)                      # same validation as the accountant
    sequence = []
    for s, q, t in schedule:
        pair = step_pair(s, q)
        if pair is not None and t > 0:
            sequence.append((pair, t))
    return compose(sequence, delta=grid_delta)


def _width(lo: float, hi: float) -> str:
    if hi == 0 or not math.isfinite(hi):
        return "-"
    return f"{100.0 * (hi - lo) / hi:.3g}%"


def _print_notes(notes: Sequence[str], out) -> None:
    for note in notes:
        out.write(f"note: {note}\n")


# --------------------------------------------------------------------------------------
# subcommands
# --------------------------------------------------------------------------------------

def cmd_epsilon(args, out) -> int:
    schedule, notes = _schedule(args)
    delta = _delta(args.delta)
    acc = _accountant(schedule)
    b = acc.get_epsilon_bounds(delta)
    steps = sum(t for _, _, t in schedule)
    if args.json:
        _emit_json({"command": "epsilon", "delta": delta, "schedule": _schedule_json(schedule),
                    "steps": steps, "eps_lower": json_float(b.lower), "eps_upper": json_float(b.upper),
                    "notes": notes + list(b.notes)}, out)
        return 0
    out.write(f"DP-SGD (Poisson-subsampled Gaussian), {steps} steps, delta = {delta:g}\n\n")
    out.write(_schedule_table(schedule) + "\n\n")
    out.write(table(["eps_lower", "eps_upper", "rel_width"],
                    [[down(b.lower), up(b.upper), _width(b.lower, b.upper)]], "rrr") + "\n\n")
    out.write(f"certified: {down(b.lower)} <= epsilon <= {up(b.upper)} at delta = {delta:g}\n")
    _print_notes(notes + list(b.notes), out)
    return 0


def cmd_delta(args, out) -> int:
    schedule, notes = _schedule(args)
    eps = [_float("--epsilon", e, low=0.0) for e in args.epsilon]
    grid_delta = _delta(args.min_delta, "--min-delta")
    import numpy as np
    pb = _engine(schedule, grid_delta)
    db = pb.delta_bounds(np.asarray(eps, dtype=float))
    notes = notes + list(pb._notes(grid_delta))
    lows = np.atleast_1d(db.lower).tolist()
    ups = np.atleast_1d(db.upper).tolist()
    steps = sum(t for _, _, t in schedule)
    if args.json:
        _emit_json({"command": "delta", "schedule": _schedule_json(schedule), "steps": steps,
                    "results": [{"epsilon": e, "delta_lower": json_float(lo), "delta_upper": json_float(hi)}
                                for e, lo, hi in zip(eps, lows, ups)],
                    "notes": notes + list(db.notes)}, out)
        return 0
    out.write(f"DP-SGD (Poisson-subsampled Gaussian), {steps} steps\n\n")
    out.write(_schedule_table(schedule) + "\n\n")
    rows = [[g(e), down(lo), up(hi)] for e, lo, hi in zip(eps, lows, ups)]
    out.write(table(["epsilon", "delta_lower", "delta_upper"], rows, "rrr") + "\n")
    _print_notes(notes + list(db.notes), out)
    return 0


class Progress:
    """A one-line progress bar on stderr, shown only once the work exceeds ``delay`` s."""

    def __init__(self, stream, mode: str = "auto", delay: float = 1.0, width: int = 24):
        self.stream = stream
        try:
            self.tty = bool(stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False
        self.enabled = mode == "always" or (mode == "auto" and self.tty)
        self.delay = delay
        self.width = width
        self.start = time.monotonic()
        self.shown = False

    def update(self, fraction: float, text: str) -> None:
        if not self.enabled or time.monotonic() - self.start < self.delay:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.start
        line = f"[{bar}] {100 * fraction:3.0f}% {text} ({elapsed:.1f}s)"
        if self.tty:                    # redraw in place
            self.stream.write(f"\r{line}\x1b[K")
        else:                           # a log file: one plain line per update
            self.stream.write(line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def find_noise_multiplier(target: float, sample_rate: float, steps: int, delta: float, *,
                          tol: float = 1e-3, max_sigma: float = 1e4,
                          progress: Optional[Callable[[float, str], None]] = None):
    """Smallest sigma (within relative ``tol``) whose certified eps_upper <= target.

    Returns ``(sigma_ok, sigma_fail, eps_upper(sigma_ok), evaluations)``: ``sigma_ok``
    certifies the target, ``sigma_fail`` (< sigma_ok, ratio <= 1 + tol) does not; it is
    None when sigma = 0.001 already meets the target.  Brackets by factors of 2 from
    sigma = 1, then false position on log(eps_upper) against log(sigma) (Illinois
    variant), falling back to geometric bisection where eps_upper is infinite.
    """
    from pb_accountant import PrivacyBucketsAccountant

    evaluations = 0

    def eps_up(sigma: float) -> float:
        nonlocal evaluations
        evaluations += 1
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                return PrivacyBucketsAccountant().epsilon_after(
                    delta, noise_multiplier=sigma, sample_rate=sample_rate,
                    num_steps=steps).upper
            except (ValueError, ArithmeticError):
                # the engine cannot represent this (tiny) sigma: nothing is certified
                return math.inf

    def report(fraction, text):
        if progress is not None:
            progress(fraction, text)

    # bracket: lo fails (eps > target), hi succeeds (eps <= target)
    sigma = 1.0
    e = eps_up(sigma)
    report(0.05, f"sigma={sigma:.6g} eps_upper={e:.6g}")
    if e <= target:
        hi, e_hi = sigma, e
        lo, e_lo = None, None
        while lo is None:
            s = hi / 2.0
            if s < 1e-3:
                return hi, None, e_hi, evaluations   # practically any noise will do
            es = eps_up(s)
            report(0.1, f"bracketing: sigma={s:.6g} eps_upper={es:.6g}")
            if es <= target:
                hi, e_hi = s, es
            else:
                lo, e_lo = s, es
    else:
        lo, e_lo = sigma, e
        hi, e_hi = None, None
        while hi is None:
            s = lo * 2.0
            if s > max_sigma:
                raise UserError(f"no noise multiplier up to {max_sigma:g} reaches "
                                f"epsilon <= {target:g} at delta {delta:g}")
            es = eps_up(s)
            report(0.1, f"bracketing: sigma={s:.6g} eps_upper={es:.6g}")
            if es <= target:
                hi, e_hi = s, es
            else:
                lo, e_lo = s, es
    def f(e):                                  # log(eps/target); None for eps = inf
        return math.log(e) - math.log(target) if math.isfinite(e) and e > 0 else None

    f_lo, f_hi = f(e_lo), f(e_hi)
    start_ratio = math.log(hi / lo)
    side = 0                                   # Illinois: which end moved last
    margin = 0.25 * math.log1p(tol)            # keep strictly inside: guaranteed progress
    while hi / lo > 1.0 + tol:
        x_lo, x_hi = math.log(lo), math.log(hi)
        if f_lo is not None and f_hi is not None and f_lo > 0 >= f_hi:
            x = x_lo + (x_hi - x_lo) * f_lo / (f_lo - f_hi)
        else:
            x = 0.5 * (x_lo + x_hi)
        x = min(max(x, x_lo + margin), x_hi - margin)
        s = math.exp(x)
        es = eps_up(s)
        if es <= target:
            hi, e_hi, f_hi = s, es, f(es)
            if side == -1 and f_lo is not None:
                f_lo *= 0.5
            side = -1
        else:
            lo, e_lo, f_lo = s, es, f(es)
            if side == 1 and f_hi is not None:
                f_hi *= 0.5
            side = 1
        done = 1.0 - math.log(hi / lo) / start_ratio if start_ratio > 0 else 1.0
        report(0.1 + 0.9 * max(done, 0.0),
               f"sigma in [{lo:.6g}, {hi:.6g}] eps_upper={e_hi:.6g}")
    return hi, lo, e_hi, evaluations


def cmd_noise(args, out) -> int:
    target = _float("--target-epsilon", args.target_epsilon, low=0.0, low_open=True)
    q = _float("--sample-rate", args.sample_rate, low=0.0, high=1.0, low_open=True)
    delta = _delta(args.delta)
    tol = _float("--tol", args.tol, low=0.0, low_open=True)
    if (args.steps is None) == (args.epochs is None):
        raise UserError("give exactly one of --steps and --epochs")
    notes: List[str] = []
    if args.steps is not None:
        steps = _int("--steps", args.steps, minimum=1)
    else:
        epochs = _int("--epochs", args.epochs, minimum=1)
        steps = epochs * steps_per_epoch(q)
        notes.append(f"{epochs} epochs x {steps_per_epoch(q)} steps per epoch "
                     f"(1/sample_rate) = {steps} steps")
    bar = Progress(sys.stderr, args.progress, delay=args.progress_delay)
    t0 = time.monotonic()
    try:
        sigma, rejected, e_up, n_eval = find_noise_multiplier(
            target, q, steps, delta, tol=tol, progress=bar.update)
    finally:
        bar.close()
    bounds = _accountant([(sigma, q, steps)]).get_epsilon_bounds(delta)
    elapsed = time.monotonic() - t0
    if args.json:
        _emit_json({"command": "noise", "target_epsilon": target, "delta": delta,
                    "sample_rate": q, "steps": steps, "noise_multiplier": sigma,
                    "rejected_noise_multiplier": rejected, "relative_tolerance": tol,
                    "eps_lower": json_float(bounds.lower), "eps_upper": json_float(bounds.upper),
                    "evaluations": n_eval, "seconds": round(elapsed, 3),
                    "notes": notes + list(bounds.notes)}, out)
        return 0
    out.write(f"smallest noise multiplier for epsilon <= {target:g} at delta = {delta:g}, "
              f"sample rate {q:g}, {steps} steps\n\n")
    out.write(table(["noise_multiplier", "eps_lower", "eps_upper"],
                    [[up(sigma), down(bounds.lower), up(bounds.upper)]], "rrr") + "\n\n")
    if rejected is not None:
        out.write(f"sigma = {up(sigma)} certifies epsilon <= {up(bounds.upper)}; "
                  f"sigma = {down(rejected)} does not (relative tolerance {tol:g}, "
                  f"{n_eval} evaluations, {elapsed:.1f} s)\n")
    else:
        out.write(f"sigma = {up(sigma)} certifies epsilon <= {up(bounds.upper)} "
                  f"({n_eval} evaluations, {elapsed:.1f} s)\n")
    _print_notes(notes + list(bounds.notes), out)
    return 0


def _peer_names(args) -> List[str]:
    from .peers import PEERS
    if not getattr(args, "peers", None):
        return list(PEERS)
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    for name in names:
        if name not in PEERS:
            raise UserError(f"--peers: unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return names


def _preload(name: str) -> None:
    import importlib
    module = "opacus.accountants" if name.startswith("opacus") else "dp_accounting.pld"
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except ImportError:
        pass


def _run_peer(name, schedule, deltas, args):
    """(pairs or None, status) for one peer; status 'ok' or why it is missing."""
    from .peers import PeerUnavailable, peer_epsilons
    import logging
    import warnings
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pairs = peer_epsilons(name, schedule, deltas, pld_interval=args.pld_interval)
        return pairs, "ok"
    except PeerUnavailable as exc:
        return None, f"not installed: {exc}"


def cmd_compare(args, out) -> int:
    from .peers import peer_description
    schedule, notes = _schedule(args)
    delta = _delta(args.delta)
    names = _peer_names(args)
    rows = []
    t = time.monotonic()
    b = _accountant(schedule).get_epsilon_bounds(delta)
    rows.append(("pb", "pb-accountant (privacy buckets)", b.lower, b.upper,
                 "certified lower and upper bounds", time.monotonic() - t))
    for name in names:
        label, kind = peer_description(name)
        _preload(name)                       # import time is not the method's time
        t = time.monotonic()
        pairs, status = _run_peer(name, schedule, [delta], args)
        dt = time.monotonic() - t
        if pairs is None:
            rows.append((name, label, None, None, status, None))
        else:
            rows.append((name, label, pairs[0][0], pairs[0][1], kind, dt))
    steps = sum(tt for _, _, tt in schedule)
    if args.json:
        _emit_json({"command": "compare", "delta": delta, "schedule": _schedule_json(schedule),
                    "steps": steps,
                    "results": [{"method": m, "label": label, "eps_lower": json_float(lo),
                                 "eps_upper": json_float(hi), "kind": kind, "available": dt is not None,
                                 "seconds": None if dt is None else round(dt, 3)}
                                for m, label, lo, hi, kind, dt in rows],
                    "notes": notes + list(b.notes)}, out)
        return 0
    out.write(f"DP-SGD (Poisson-subsampled Gaussian), {steps} steps, delta = {delta:g}\n\n")
    out.write(_schedule_table(schedule) + "\n\n")
    table_rows = [[label, down(lo) if lo is not None else "-", up(hi) if hi is not None else "-",
                   "-" if dt is None else f"{dt:.2f}", kind]
                  for _m, label, lo, hi, kind, dt in rows]
    out.write(table(["method", "eps_lower", "eps_upper", "seconds", "kind"], table_rows,
                    "lrrrl") + "\n")
    _print_notes(notes + list(b.notes), out)
    return 0


def cmd_curve(args, out) -> int:
    import numpy as np
    schedule, notes = _schedule(args)
    num = _int("--num", args.num, minimum=2)
    grid_delta = _delta(args.min_delta, "--min-delta")
    pb = _engine(schedule, grid_delta)
    if args.eps_max is not None:
        eps_max = _float("--eps-max", args.eps_max, low=0.0, low_open=True)
    else:
        eps_max = pb.epsilon_bounds(grid_delta).upper
        eps_max = 1.0 if (not math.isfinite(eps_max) or eps_max <= 0) else eps_max
    epsilons = np.linspace(0.0, eps_max, num)
    curve = pb.curve(epsilons)
    notes = notes + list(pb._notes(grid_delta))
    prefix = args.out
    png_path = args.png or f"{prefix}.png"
    csv_path = args.csv or f"{prefix}.csv"
    peer_curves = {}
    peer_status = {}
    deltas = None
    if args.compare:
        positive = curve.delta_upper[(curve.delta_upper > 0) & (curve.delta_upper < 1)]
        d_lo = max(float(positive.min()) if positive.size else 1e-10, 1e-12)
        d_hi = min(float(positive.max()) if positive.size else 0.5, 0.5)
        if d_hi <= d_lo:
            d_hi = min(10 * d_lo, 0.5)
        deltas = np.geomspace(d_lo, d_hi, args.compare_points).tolist()
        for name in _peer_names(args):
            pairs, status = _run_peer(name, schedule, deltas, args)
            peer_status[name] = status
            if pairs is not None:
                peer_curves[name] = pairs
    _write_curve_csv(csv_path, curve)
    peers_csv = None
    if peer_curves:
        peers_csv = csv_path[:-4] + "_peers.csv" if csv_path.endswith(".csv") else csv_path + "_peers"
        _write_peers_csv(peers_csv, deltas, peer_curves)
    _plot_curve(png_path, curve, schedule, peer_curves, deltas, args.title)
    if args.json:
        _emit_json({"command": "curve", "schedule": _schedule_json(schedule), "png": png_path,
                    "csv": csv_path, "peers_csv": peers_csv, "points": int(len(epsilons)),
                    "eps_max": eps_max, "peers": peer_status, "notes": notes}, out)
        return 0
    out.write(f"wrote {png_path} and {csv_path} ({len(epsilons)} points, epsilon in "
              f"[0, {g(eps_max)}], both certified delta bounds)\n")
    if args.compare:
        for name, status in peer_status.items():
            out.write(f"  {name}: {status}\n")
        if peers_csv:
            out.write(f"wrote {peers_csv} (peers' epsilon at {len(deltas)} deltas)\n")
    _print_notes(notes, out)
    return 0


def _write_curve_csv(path, curve) -> None:
    import csv
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epsilon", "delta_lower", "delta_upper"])
        for e, lo, hi in zip(curve.epsilons, curve.delta_lower, curve.delta_upper):
            w.writerow([repr(float(e)), repr(float(lo)), repr(float(hi))])


def _write_peers_csv(path, deltas, peer_curves) -> None:
    import csv
    names = list(peer_curves)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["delta"] + [f"{n}_eps_lower" for n in names] + [f"{n}_eps_upper" for n in names])
        for i, d in enumerate(deltas):
            los = ["" if peer_curves[n][i][0] is None else repr(peer_curves[n][i][0]) for n in names]
            ups = ["" if peer_curves[n][i][1] is None else repr(peer_curves[n][i][1]) for n in names]
            w.writerow([repr(d)] + los + ups)


def _plot_curve(path, curve, schedule, peer_curves, deltas, title) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("curve needs matplotlib: pip install matplotlib") from None
    import numpy as np
    from .peers import peer_description
    eps = np.asarray(curve.epsilons)
    d_up = np.asarray(curve.delta_upper)
    d_lo = np.asarray(curve.delta_lower)
    fig, ax = plt.subplots(figsize=(7.0, 4.5), dpi=120)
    mask_up = d_up > 0
    mask_lo = d_lo > 0
    ax.fill_between(eps, np.where(mask_lo, d_lo, np.nan), np.where(mask_up, d_up, np.nan),
                    color="tab:blue", alpha=0.2, linewidth=0, label="certified region")
    ax.plot(eps[mask_up], d_up[mask_up], color="tab:blue", lw=2, label="pb upper bound", zorder=5)
    ax.plot(eps[mask_lo], d_lo[mask_lo], color="tab:blue", lw=1.2, ls="--",
            label="pb lower bound", zorder=5)
    styles = {"opacus-rdp": ("tab:red", "-"), "opacus-prv": ("tab:green", "-"),
              "pld-pessimistic": ("tab:orange", "-"), "pld-optimistic": ("tab:orange", ":")}
    for name, pairs in peer_curves.items():
        label, _kind = peer_description(name)
        color, ls = styles.get(name, ("gray", "-"))
        for idx, suffix in ((1, "upper"), (0, "lower")):
            pts = [(p[idx], d) for p, d in zip(pairs, deltas) if p[idx] is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, color=color, ls=ls if idx == 1 else ":", lw=1.2, marker=".",
                        ms=3, label=f"{label} ({suffix})" if name == "opacus-prv" else label)
    ax.set_yscale("log")
    positive = d_up[mask_up]
    bottom = max(float(positive.min()) if positive.size else 1e-12, 1e-14)
    ax.set_ylim(bottom, 1.0)
    ax.set_xlim(0.0, float(eps.max()))
    ax.set_xlabel(r"$\varepsilon$")
    ax.set_ylabel(r"$\delta(\varepsilon)$")
    if title is None:
        if len(schedule) == 1:
            s, q, t = schedule[0]
            title = f"DP-SGD: noise multiplier {s:g}, sample rate {q:g}, {t} steps"
        else:
            title = f"DP-SGD: {len(schedule)} segments, {sum(x[2] for x in schedule)} steps"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------------------

def _add_schedule(p) -> None:
    grp = p.add_argument_group("schedule (one phase, or --segment per phase)")
    grp.add_argument("--sigma", "--noise-multiplier", dest="sigma", metavar="SIGMA",
                     help="noise multiplier")
    grp.add_argument("--sample-rate", "-q", dest="sample_rate", metavar="Q",
                     help="Poisson sample rate (batch size / dataset size)")
    grp.add_argument("--steps", metavar="T", help="number of DP-SGD steps")
    grp.add_argument("--epochs", metavar="E",
                     help="number of epochs (steps = E x 1/sample_rate, as Opacus)")
    grp.add_argument("--segment", action="append", metavar="SIGMA,Q,STEPS",
                     help="one phase of a changing schedule (repeat in order)")


def build_parser() -> argparse.ArgumentParser:
    from pb_accountant import __version__
    parser = _Parser(prog=PROG, description="Certified upper AND lower privacy bounds for "
                     "DP-SGD (Poisson-subsampled Gaussian) with privacy buckets.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("epsilon", help="certified epsilon bounds at a delta")
    _add_schedule(p)
    p.add_argument("--delta", required=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_epsilon)

    p = sub.add_parser("delta", help="certified delta bounds at one or more epsilons")
    _add_schedule(p)
    p.add_argument("--epsilon", required=True, nargs="+", metavar="EPS")
    p.add_argument("--min-delta", default="1e-8",
                   help="smallest delta to resolve; sizes the grid (default 1e-8; smaller is slower)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_delta)

    p = sub.add_parser("noise", help="smallest noise multiplier meeting a target epsilon")
    p.add_argument("--target-epsilon", required=True)
    p.add_argument("--sample-rate", "-q", dest="sample_rate", required=True)
    p.add_argument("--steps")
    p.add_argument("--epochs")
    p.add_argument("--delta", required=True)
    p.add_argument("--tol", default="1e-3", help="relative tolerance on sigma (default 1e-3)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr after ~1 s (auto: only on a terminal)")
    p.add_argument("--progress-delay", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_noise)

    p = sub.add_parser("curve", help="epsilon-delta curve with both bounds: PNG and CSV")
    _add_schedule(p)
    p.add_argument("--out", default="privacy_curve", help="output prefix (PREFIX.png, PREFIX.csv)")
    p.add_argument("--png", help="PNG path (default PREFIX.png)")
    p.add_argument("--csv", help="CSV path (default PREFIX.csv)")
    p.add_argument("--min-delta", default="1e-8",
                   help="smallest delta to resolve; sizes the grid and the default range "
                        "(default 1e-8; smaller is slower)")
    p.add_argument("--eps-max", help="largest epsilon (default: the certified epsilon at "
                                     "--min-delta)")
    p.add_argument("--num", default="200", help="number of epsilons (default 200)")
    p.add_argument("--title")
    p.add_argument("--compare", action="store_true",
                   help="overlay Opacus RDP/PRV and dp_accounting PLD when installed")
    p.add_argument("--peers", help="comma-separated subset of peers for --compare")
    p.add_argument("--compare-points", type=int, default=16, help=argparse.SUPPRESS)
    p.add_argument("--pld-interval", type=float, default=1e-4, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_curve)

    p = sub.add_parser("compare", help="pb bounds next to the installed peer accountants")
    _add_schedule(p)
    p.add_argument("--delta", required=True)
    p.add_argument("--peers", help="comma-separated subset of: opacus-rdp, opacus-prv, "
                                   "pld-pessimistic, pld-optimistic")
    p.add_argument("--pld-interval", type=float, default=1e-4,
                   help="dp_accounting value discretization interval (default 1e-4)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``pb-accountant`` and ``python -m pb_accountant.integrations.cli``."""
    import warnings
    with warnings.catch_warnings():
        # numpy's floating-point chatter from inside the engine is not for the user
        warnings.filterwarnings("ignore", category=RuntimeWarning, message=(
            r"(overflow|underflow|divide by zero|invalid value) encountered"))
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    out = sys.stdout
    where = PROG
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        where = f"{PROG} {args.command}"
        return int(args.func(args, out) or 0)
    except UserError as exc:
        message = str(exc)
        if not message.startswith(PROG):
            message = f"{where}: error: {message}"
        sys.stderr.write(" ".join(message.split()) + "\n")
        return EXIT_USAGE
    except ValueError as exc:                      # the library's validation messages
        sys.stderr.write(f"{where}: error: {' '.join(str(exc).split())}\n")
        return EXIT_USAGE
    except ArithmeticError as exc:                 # e.g. OverflowError for absurd schedules
        sys.stderr.write(f"{where}: error: the bounds could not be computed for this schedule "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())})\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        try:
            sys.stdout.close()
        except Exception:
            pass
        return 1
    except OSError as exc:                         # unwritable output paths and the like
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
