"""The computations behind ``pb-accountant``: user input in, plain data out.

Input is read in the user's terms (``--batch-size``/``--dataset-size``, fractions such
as ``256/50000``, fractional ``--epochs``, ``--schedule FILE``) and checked before any
work starts; every mistake raises :class:`UserError` naming the option.  Work is
bounded (``--num``, ``--tol``, segment counts) and peers run in child processes with
a time and a memory limit (``peers.run_peer_isolated``).  Rendering lives in
``_cli_render``.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pb_accountant._validation import MAX_STEPS, check_count, check_noise_multiplier, check_real

from . import _cli_render as render

Schedule = List[Tuple[float, float, int]]
Data = Dict[str, Any]

MAX_NUM = 100_000               # points of `curve`
MAX_COMPARE_POINTS = 200        # deltas at which `curve --compare` asks each peer
MAX_SEGMENTS = 1_000            # phases of a schedule (each is composed on its own)
MIN_TOL, MAX_TOL = 1e-6, 0.5    # relative tolerance of `noise`
MIN_DELTA_FLOOR = 1e-30         # smallest --min-delta / --delta accepted
MAX_PEER_TIMEOUT = 3600.0


class UserError(Exception):
    """A mistake in the command line or its values: reported in one line, exit 2."""


@contextmanager
def staged_files():
    """Output files staged as temporaries (committed by the caller); on any failure the
    temporaries go, and a path that cannot be written is the user's error."""
    files = render.AtomicFiles()
    try:
        yield files
    except render.OutputError as exc:
        files.discard()
        raise UserError(str(exc)) from None
    except BaseException:
        files.discard()
        raise


# --------------------------------------------------------------------------------------
# values in the user's terms
# --------------------------------------------------------------------------------------

def _fraction(name: str, text) -> Fraction:
    """A number or a fraction ``a/b`` (exact), e.g. ``0.01``, ``256/50000``, ``2.5``."""
    raw = str(text).strip()
    try:
        if "/" in raw:
            num, den = raw.split("/", 1)
            value = Fraction(num.strip()) / Fraction(den.strip())
        else:
            value = Fraction(raw)
    except (ValueError, ZeroDivisionError):
        raise UserError(f"{name} must be a number or a fraction such as 256/50000, "
                        f"got {raw!r}") from None
    return value


def _checked(check, name: str, text, *args, **kwargs):
    """``check(..., name, ...)`` from pb_accountant._validation, its ValueError a UserError
    that shows the value as the user typed it."""
    try:
        return check(*args, **kwargs)
    except ValueError as exc:
        head = str(exc).rsplit(", got ", 1)[0]
        raise UserError(f"{head}, got {str(text).strip()}") from None


def number(name: str, text, *, low=None, high=None, low_open=False, high_open=False,
           fraction: bool = False) -> float:
    """``text`` as a finite float in the stated interval, else UserError naming ``name``."""
    if fraction:
        exact = _fraction(name, text)
        try:
            x = float(exact)
        except OverflowError:
            # beyond the floating-point range (1e400): the range check names it
            x = math.inf if exact > 0 else -math.inf
    else:
        try:
            x = float(str(text).strip())
        except ValueError:
            raise UserError(f"{name} must be a number, got {str(text)!r}") from None
    return _checked(check_real, name, text, name, x, low=low, high=high, low_open=low_open,
                    high_open=high_open)


def noise_multiplier(name: str, text) -> float:
    """A noise multiplier: 0 or in [MIN_NOISE, MAX_NOISE] (the accountant's step rule,
    whose message gives that range, for inf and 1e400 too)."""
    try:
        x = float(str(text).strip())
    except ValueError:
        raise UserError(f"{name} must be a number, got {str(text)!r}") from None
    return _checked(check_noise_multiplier, name, text, x, name)


def integer(name: str, text, minimum: int = 0, maximum: Optional[int] = None) -> int:
    raw = str(text).strip()
    try:
        value = Fraction(raw)
    except (ValueError, ZeroDivisionError):
        raise UserError(f"{name} must be an integer, got {raw!r}") from None
    if value.denominator != 1:
        if float(value).is_integer():
            # (1e-400 rounds to 0: not an integer all the same)
            raise UserError(f"{name} must be an integer, got {raw!r}")
        value = float(value)                    # check_count says what an integer is
    else:
        value = int(value)
    return _checked(check_count, name, raw, name, value, minimum=minimum, maximum=maximum)


def delta_value(text, name: str = "--delta") -> float:
    x = number(name, text, low=0.0, high=1.0, low_open=True, high_open=True, fraction=True)
    return _checked(check_real, name, text, name, x, low=MIN_DELTA_FLOOR, high=1.0,
                    high_open=True)


def sample_rate(args, required: bool = True) -> Tuple[Optional[Fraction], List[str]]:
    """The Poisson rate from --sample-rate (number or a/b) or --batch-size/--dataset-size."""
    notes: List[str] = []
    batch, size = getattr(args, "batch_size", None), getattr(args, "dataset_size", None)
    if args.sample_rate is not None and (batch is not None or size is not None):
        raise UserError("give either --sample-rate or --batch-size with --dataset-size, not both")
    if batch is not None or size is not None:
        if batch is None or size is None:
            missing = "--dataset-size" if batch is not None else "--batch-size"
            raise UserError(f"{missing} is needed too: the sample rate is "
                            "batch size / dataset size")
        b = integer("--batch-size", batch, minimum=1)
        n = integer("--dataset-size", size, minimum=1)
        if b > n:
            raise UserError(f"--batch-size ({b}) must not exceed --dataset-size ({n})")
        q = Fraction(b, n)
        notes.append(f"sample rate = batch size / dataset size = {b}/{n} = {float(q):.6g}")
        return q, notes
    if args.sample_rate is None:
        if required:
            raise UserError("give --sample-rate (e.g. 0.01 or 256/50000) or --batch-size "
                            "with --dataset-size")
        return None, notes
    q = _fraction("--sample-rate", args.sample_rate)
    number("--sample-rate", args.sample_rate, low=0.0, high=1.0, low_open=True,
           fraction=True)
    return q, notes


def steps_from(args, q: Fraction) -> Tuple[int, List[str]]:
    """--steps, or --epochs (fractional allowed): steps = ceil(epochs / sample rate)."""
    if (args.steps is None) == (args.epochs is None):
        raise UserError("give exactly one of --steps and --epochs")
    if args.steps is not None:
        return integer("--steps", args.steps, maximum=MAX_STEPS), []
    epochs = _fraction("--epochs", args.epochs)
    if epochs <= 0 or epochs > 10 ** 9:
        raise UserError(f"--epochs must be in (0, 1e9], got {args.epochs}")
    exact = epochs / q
    steps = math.ceil(exact)
    if steps > MAX_STEPS:
        raise UserError(f"--epochs {args.epochs} at this sample rate is {steps} steps, "
                        f"more than {MAX_STEPS:g}")
    if exact == steps:
        note = f"{float(epochs):g} epochs / sample rate {float(q):.6g} = {steps} steps"
    else:
        note = (f"{float(epochs):g} epochs / sample rate {float(q):.6g} = "
                f"{float(exact):.6g} steps, rounded up to {steps} (more steps is the "
                "conservative side)")
    return steps, [note]


def _segment(where: str, sigma, q, steps) -> Tuple[float, float, int]:
    s = noise_multiplier(f"{where} noise multiplier", sigma)
    rate = number(f"{where} sample rate", q, low=0.0, high=1.0, fraction=True)
    t = integer(f"{where} steps", steps, maximum=MAX_STEPS)
    return s, rate, t


def _read_schedule_file(path: str) -> Schedule:
    name = f"--schedule {path}"
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark, which
        # must not become part of the first column's name (or hide a JSON "[")
        with open(path, newline="", encoding="utf-8-sig") as fh:
            text = fh.read(50_000_001)
    except OSError as exc:
        raise UserError(f"{name}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{name}: not UTF-8 text (a CSV or JSON schedule): {exc.reason} "
                        f"at byte {exc.start}") from None
    if len(text) > 50_000_000:
        raise UserError(f"{name}: the file is larger than 50 MB")
    keys = ("noise_multiplier", "sample_rate", "steps")
    stripped = text.lstrip()
    rows: List[Tuple[str, Any]] = []
    if stripped.startswith(("[", "{")):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{name}: not valid JSON ({exc})") from None
        if isinstance(obj, dict):
            obj = obj.get("segments", obj.get("schedule"))
        if not isinstance(obj, list):
            raise UserError(f"{name}: JSON must be a list of segments, or an object with "
                            "a \"segments\" list")
        for i, item in enumerate(obj):
            rows.append((f"{name}: segment {i + 1}", item))
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not set(keys) <= set(header):
            raise UserError(f"{name}: CSV needs a header with the columns "
                            f"{', '.join(keys)}, got {', '.join(header) or 'none'}")
        for i, item in enumerate(reader):
            rest = item.get(None) or []
            # values past the header, or under a column without a name (a header that
            # ends in a comma)
            extra = [v for v in rest if str(v).strip()] + [
                v for k, v in item.items()
                if k is not None and not str(k).strip() and str(v or "").strip()]
            item = {str(k).strip(): v for k, v in item.items() if k is not None}
            if all(not str(v or "").strip() for v in item.values()) and not extra:
                continue
            if extra:
                # a value past the header's columns (a thousands separator, as in
                # 1,000 steps, or a stray comma) is never dropped silently
                named = [h for h in header if h]
                raise UserError(f"{name}: line {i + 2}: more values than the header "
                                f"names columns ({', '.join(named)}); write numbers "
                                "without thousands separators")
            rows.append((f"{name}: line {i + 2}", item))
    out = []
    for where, item in rows:
        if not isinstance(item, dict) or not all(k in item and item[k] not in (None, "")
                                                 for k in keys):
            raise UserError(f"{where}: needs noise_multiplier, sample_rate and steps")
        out.append(_segment(where, item["noise_multiplier"], item["sample_rate"], item["steps"]))
    if not out:
        raise UserError(f"{name}: no segments")
    return out


def schedule_from(args) -> Tuple[Schedule, List[str]]:
    """[(sigma, q, steps)] from --schedule, --segment, or the single-phase options."""
    single = [args.sigma, args.sample_rate, args.steps, args.epochs,
              getattr(args, "batch_size", None), getattr(args, "dataset_size", None)]
    given = [bool(args.segment), args.schedule is not None, any(v is not None for v in single)]
    if sum(given) > 1:
        raise UserError("use one of --schedule FILE, --segment (repeatable), or "
                        "--sigma with --sample-rate and --steps/--epochs")
    if args.schedule is not None:
        schedule = _read_schedule_file(args.schedule)
        notes: List[str] = []
    elif args.segment:
        schedule = []
        for text in args.segment:
            parts = [p.strip() for p in text.split(",")]
            if len(parts) != 3:
                raise UserError("--segment expects SIGMA,SAMPLE_RATE,STEPS (e.g. 1.1,0.01,1000), "
                                f"got {text!r}")
            schedule.append(_segment("--segment", *parts))
        notes = []
    else:
        if args.sigma is None:
            raise UserError("give --sigma with --sample-rate (or --batch-size and "
                            "--dataset-size) and --steps or --epochs, or --segment, or "
                            "--schedule FILE")
        s = noise_multiplier("--sigma", args.sigma)
        q, notes = sample_rate(args)
        steps, more = steps_from(args, q)
        schedule = [(s, float(q), steps)]
        notes = notes + more
    if len(schedule) > MAX_SEGMENTS:
        raise UserError(f"the schedule has {len(schedule)} segments; at most {MAX_SEGMENTS} "
                        "are supported (merge phases with equal noise and sample rate)")
    return schedule, notes


SAMPLER_CHOICES = ("poisson", "fixed_size", "shuffle")           # pb_accountant.samplers
NEIGHBOURING_CHOICES = ("add_remove", "replace_one", "replace_special")


def assumptions_from(args) -> Tuple[Data, List[str]]:
    """(sampler, neighbouring, dataset_size, batch_size) from --sampler/--neighbouring.

    Poisson needs no sizes (--batch-size/--dataset-size only give its rate); the other
    samplers need both, in the single-phase form.  Shuffling under add_remove is not
    defined (adding an example moves every later batch): without --neighbouring it is
    accounted under replace_special, with a note.
    """
    sampler = getattr(args, "sampler", None) or "poisson"
    relation = getattr(args, "neighbouring", None)
    notes: List[str] = []
    if relation is None:
        relation = "add_remove"
        if sampler == "shuffle":
            relation = "replace_special"
            notes.append("neighbouring=replace_special (zeroing out one example): add_remove "
                         "is not defined for shuffling; for Poisson both give the same pair")
    out: Data = {"sampler": sampler, "neighbouring": relation, "dataset_size": None,
                 "batch_size": None}
    if sampler != "poisson":
        if getattr(args, "batch_size", None) is None or getattr(args, "dataset_size", None) is None:
            raise UserError(f"--sampler {sampler} needs --batch-size and --dataset-size "
                            "(they fix the batches; --segment and --schedule are Poisson only)")
        out["batch_size"] = integer("--batch-size", args.batch_size, minimum=1)
        out["dataset_size"] = integer("--dataset-size", args.dataset_size, minimum=1)
    try:
        accountant_for(out)
    except ValueError as exc:
        text = str(exc).replace("sampler=", "--sampler ").replace("neighbouring=", "--neighbouring ")
        raise UserError(text) from None
    return out, notes


def accountant_for(assumptions: Optional[Data] = None, schedule: Optional[Schedule] = None):
    """A ``PrivacyBucketsAccountant`` under ``assumptions`` holding ``schedule``."""
    from pb_accountant import PrivacyBucketsAccountant
    kwargs = {k: v for k, v in (assumptions or {}).items() if v is not None}
    acc = PrivacyBucketsAccountant(**kwargs) if kwargs.get("sampler", "poisson") != "poisson" \
        or kwargs.get("neighbouring", "add_remove") != "add_remove" else PrivacyBucketsAccountant()
    if schedule is not None:
        acc.history = [(float(s), float(q), int(t)) for s, q, t in schedule]
    return acc


def sampled_schedule_from(args) -> Tuple[Schedule, List[str], Data]:
    """:func:`schedule_from` plus the assumptions; for shuffling, --epochs counts
    ceil(dataset size / batch size) steps per epoch (a DataLoader with drop_last=False)."""
    assumed, more = assumptions_from(args)
    schedule, notes = schedule_from(args)
    if assumed["sampler"] == "shuffle" and args.epochs is not None:
        epochs = _fraction("--epochs", args.epochs)
        per_epoch = -(-assumed["dataset_size"] // assumed["batch_size"])
        steps = math.ceil(epochs * per_epoch)
        if steps > MAX_STEPS:
            raise UserError(f"--epochs {args.epochs} is {steps} steps, more than {MAX_STEPS:g}")
        s, q, _ = schedule[0]
        schedule = [(s, q, steps)]
        notes = [n for n in notes if "epochs / sample rate" not in n]
        notes.append(f"{float(epochs):g} epochs of ceil({assumed['dataset_size']}/"
                     f"{assumed['batch_size']}) = {per_epoch} batches = {steps} steps")
    return schedule, notes + more, assumed


def schedule_json(schedule: Schedule) -> List[Data]:
    return [{"noise_multiplier": s, "sample_rate": q, "steps": t} for s, q, t in schedule]


# --------------------------------------------------------------------------------------
# progress and messages
# --------------------------------------------------------------------------------------

def progress_bar(args, total: Optional[int], desc: str, bar_format: Optional[str] = None):
    """A tqdm bar on stderr, shown after one second, only where ``args.show_progress``."""
    import sys
    try:
        from tqdm import tqdm
    except ImportError:                  # a dependency, but never worth failing for
        return _NoBar()
    return tqdm(total=total, desc=desc, file=sys.stderr,
                delay=getattr(args, "progress_delay", 1.0),
                disable=not getattr(args, "show_progress", False), leave=False,
                dynamic_ncols=True, bar_format=bar_format)


class busy:
    """A bar for one computation that cannot report steps: it shows the elapsed time
    (refreshed twice a second by a helper thread) once the work exceeds the delay."""

    def __init__(self, args, desc: str):
        self.args, self.desc = args, desc
        self.bar = None
        self._stop = None
        self._thread = None

    def __enter__(self):
        if not getattr(self.args, "show_progress", False):
            return self
        import threading
        self.bar = progress_bar(self.args, None, self.desc, "{desc} ... {elapsed}")
        self._stop = threading.Event()
        delay = getattr(self.args, "progress_delay", 1.0)

        def tick():
            if self._stop.wait(delay):
                return
            while True:
                self.bar.refresh()
                if self._stop.wait(0.5):
                    return

        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self._stop.set()
            self._thread.join()
            self.bar.close()
        return False


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass

    def set_postfix_str(self, text="", refresh=True):
        pass


_ENGINE_PHRASES = [
    ("choose a smaller factor or fewer buckets",
     "the privacy losses this needs are beyond the range the engine can represent "
     "(more noise, a smaller sample rate, fewer steps or a larger delta would fit)"),
]


def user_terms(message: str) -> str:
    """The engine's message in terms a CLI user can act on."""
    text = " ".join(str(message).split())
    if "internal failure:" in text or "could not certify epsilon" in text:
        for phrase, plain in _ENGINE_PHRASES:
            if phrase in text:
                return f"epsilon cannot be certified: {plain}"
    for phrase, plain in _ENGINE_PHRASES:
        if phrase in text:
            return plain
    return text


def _notes(notes: Sequence[str]) -> List[str]:
    out: List[str] = []
    for n in notes:
        n = user_terms(n)
        if n not in out:
            out.append(n)
    return out


# --------------------------------------------------------------------------------------
# the commands: each returns plain data
# --------------------------------------------------------------------------------------

def _accountant(schedule: Schedule):
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    acc.history = [(float(s), float(q), int(t)) for s, q, t in schedule]
    return acc


def _steps(schedule: Schedule) -> int:
    return int(sum(t for _, _, t in schedule))


def epsilon(args) -> Data:
    schedule, notes, assumed = sampled_schedule_from(args)
    delta = delta_value(args.delta)
    with busy(args, "computing the bounds"):
        b = accountant_for(assumed, schedule).get_epsilon_bounds(delta)
    return {"command": "epsilon", "delta": delta, "schedule": schedule_json(schedule),
            "steps": _steps(schedule), "eps_lower": b.lower, "eps_upper": b.upper,
            **assumed, "notes": _notes(notes + list(b.notes))}


def _engine(schedule: Schedule, grid_delta: float):
    """(PrivacyBuckets or None, reason): None when the engine cannot compose this schedule."""
    from pb_accountant import compose
    from pb_accountant.accountant import step_pair
    sequence = []
    for s, q, t in schedule:
        pair = step_pair(s, q)
        if pair is not None and t > 0:
            sequence.append((pair, t))
    pb = compose(sequence, delta=grid_delta)
    exc = pb.limit_error
    if exc is not None:
        # the engine's limits (compose answers them as the accountant does: a valid
        # looser answer, the reason); any other exception is an internal error (exit 1)
        return None, user_terms(str(exc)) or type(exc).__name__
    return pb, None


def delta(args) -> Data:
    import numpy as np
    schedule, notes, assumed = sampled_schedule_from(args)
    if len(args.epsilon) > MAX_NUM:
        raise UserError(f"--epsilon takes at most {MAX_NUM} values")
    eps = [number("--epsilon", e, low=0.0) for e in args.epsilon]
    grid_delta = delta_value(args.min_delta, "--min-delta")
    if _default(assumed):
        with busy(args, "composing"):
            pb, reason = _engine(schedule, grid_delta)
    else:                                   # the accountant composes the sampler's pairs
        pb, reason = None, None
        with busy(args, "composing"):
            db = accountant_for(assumed, schedule).get_delta_bounds(np.asarray(eps, dtype=float))
        lows = np.atleast_1d(db.lower).tolist()
        ups = np.atleast_1d(db.upper).tolist()
        notes = notes + list(db.notes)
    if reason is None and pb is None:
        pass
    elif pb is None:
        lows, ups = [0.0] * len(eps), [1.0] * len(eps)
        notes = notes + [f"delta cannot be certified below 1: {reason}"]
    else:
        db = pb.delta_bounds(np.asarray(eps, dtype=float))
        lows = np.atleast_1d(db.lower).tolist()
        ups = np.atleast_1d(db.upper).tolist()
        notes = notes + list(pb.notes(grid_delta)) + list(db.notes)
    return {"command": "delta", "schedule": schedule_json(schedule), "steps": _steps(schedule),
            **assumed, "results": [{"epsilon": e, "delta_lower": lo, "delta_upper": hi}
                                   for e, lo, hi in zip(eps, lows, ups)],
            "notes": _notes(notes)}


def _default(assumed: Data) -> bool:
    return assumed["sampler"] == "poisson" and assumed["neighbouring"] == "add_remove"


def noise(args) -> Data:
    from pb_accountant.calibration import find_noise_multiplier
    target = number("--target-epsilon", args.target_epsilon, low=0.0, low_open=True)
    delta_ = delta_value(args.delta)
    tol = number("--tol", args.tol, low=MIN_TOL, high=MAX_TOL)
    max_eval = integer("--max-evaluations", args.max_evaluations, minimum=2, maximum=1000)
    assumed, sampler_notes = assumptions_from(args)
    q, notes = sample_rate(args)
    steps, more = steps_from(args, q)
    if assumed["sampler"] == "shuffle" and args.epochs is not None:
        per_epoch = -(-assumed["dataset_size"] // assumed["batch_size"])
        steps = math.ceil(_fraction("--epochs", args.epochs) * per_epoch)
        more = [f"{float(_fraction('--epochs', args.epochs)):g} epochs of "
                f"ceil({assumed['dataset_size']}/{assumed['batch_size']}) = {per_epoch} "
                f"batches = {steps} steps"]
    if steps < 1:
        raise UserError("--steps must be at least 1 for noise")
    notes = notes + more + sampler_notes
    sizes = {k: v for k, v in assumed.items() if v is not None}
    t0 = time.monotonic()
    with progress_bar(args, None, "searching noise multiplier",
                      "{desc}: {n} evaluations [{elapsed}]{postfix}") as bar:
        def report(n, text):
            bar.update(1)
            bar.set_postfix_str(text, refresh=False)
        res = find_noise_multiplier(target, delta_, float(q), steps, tol=tol,
                                    max_evaluations=max_eval, progress=report, **sizes)
    lo_bound = None
    if res.noise_multiplier is not None:
        b = accountant_for(assumed, [(res.noise_multiplier, float(q), steps)]
                           ).get_epsilon_bounds(delta_)
        # both are certified upper bounds: the smaller one is too
        eps_upper = min(res.epsilon_upper, b.upper)
        lo_bound = min(b.lower, eps_upper)
        notes = notes + list(b.notes)
    else:
        eps_upper = math.inf
    elapsed = time.monotonic() - t0
    return {"command": "noise", "target_epsilon": target, "delta": delta_,
            "sample_rate": float(q), "steps": steps, "certified": res.certified,
            "noise_multiplier": res.noise_multiplier,
            "rejected_noise_multiplier": res.rejected_noise_multiplier,
            "relative_tolerance": res.relative_tolerance, "eps_lower": lo_bound,
            "eps_upper": eps_upper, "evaluations": res.evaluations,
            "reason": None if res.reason is None else user_terms(res.reason),
            **assumed, "notes": _notes(notes), **({"seconds": round(elapsed, 3)} if args.timing else {})}


def peer_names(args) -> List[str]:
    from .peers import PEERS
    if not getattr(args, "peers", None):
        return list(PEERS)
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    for name in names:
        if name not in PEERS:
            raise UserError(f"--peers: unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return names


def _peer_limits(args) -> Tuple[float, Optional[int], float]:
    timeout = number("--peer-timeout", args.peer_timeout, low=0.0, high=MAX_PEER_TIMEOUT,
                     low_open=True)
    memory = number("--peer-memory", args.peer_memory, low=0.1, high=1024.0)
    interval = number("--pld-interval", args.pld_interval, low=1e-6, high=1.0)
    return timeout, int(memory * 1024 ** 3), interval


def _run_peers(args, names, schedule, deltas, bar) -> Dict[str, Any]:
    from .peers import run_peer_isolated
    timeout, memory, interval = _peer_limits(args)
    results = {}
    for name in names:
        bar.set_postfix_str(name, refresh=True)
        results[name] = run_peer_isolated(name, schedule, deltas, timeout=timeout,
                                          memory_bytes=memory, pld_interval=interval)
        bar.update(1)
    return results


def compare(args) -> Data:
    from .peers import peer_description
    schedule, notes, assumed = sampled_schedule_from(args)
    delta_ = delta_value(args.delta)
    names = peer_names(args)
    _peer_limits(args)                                   # checked before any work
    rows = []
    poisson = {"sampler": "poisson", "neighbouring": "add_remove"}
    with progress_bar(args, len(names) + 1, "compare") as bar:
        bar.set_postfix_str("pb", refresh=True)
        t = time.monotonic()
        b = accountant_for(assumed, schedule).get_epsilon_bounds(delta_)
        dt = time.monotonic() - t
        bar.update(1)
        rows.append({"method": "pb", "label": "pb-accountant (privacy buckets)",
                     "eps_lower": b.lower, "eps_upper": b.upper, "status": "ok", "reason": "",
                     "kind": "certified lower and upper bounds", "available": True,
                     "sampler": assumed["sampler"], "neighbouring": assumed["neighbouring"],
                     **({"seconds": round(dt, 3)} if args.timing else {})})
        if not _default(assumed):        # Poisson's number beside it, as the peers give
            pb_poisson = accountant_for(None, schedule).get_epsilon_bounds(delta_)
            rows.append({"method": "pb-poisson", "label": "pb-accountant, Poisson",
                         "eps_lower": pb_poisson.lower, "eps_upper": pb_poisson.upper,
                         "status": "ok", "reason": "", "available": True, **poisson,
                         "kind": "certified for Poisson sampling only (for comparison)",
                         **({"seconds": None} if args.timing else {})})
        peers = _run_peers(args, names, schedule, [delta_], bar)
    for name in names:
        label, kind = peer_description(name)
        r = peers[name]
        lo, hi = r.pairs[0] if r.status == "ok" else (None, None)
        if not _default(assumed):
            kind += " (for Poisson sampling, add_remove)"
        rows.append({"method": name, "label": label, "eps_lower": lo, "eps_upper": hi,
                     "status": r.status, "reason": r.reason, "kind": kind,
                     "available": r.status == "ok", **poisson,
                     **({"seconds": None if r.seconds is None else round(r.seconds, 3)}
                        if args.timing else {})})
    if names and not _default(assumed):
        notes = notes + ["the peers account Poisson sampling with add/remove neighbours: "
                         f"their numbers are not bounds for sampler={assumed['sampler']}"]
    return {"command": "compare", "delta": delta_, "schedule": schedule_json(schedule),
            "steps": _steps(schedule), **assumed, "results": rows,
            "notes": _notes(notes + list(b.notes))}


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _distinct_outputs(outputs, schedule: Optional[str]) -> None:
    """UserError when two outputs are one file (the second would silently replace the
    first) or an output is the --schedule file being read."""
    given = [(opt, path) for opt, path in outputs if path]
    for i, (opt, path) in enumerate(given):
        for opt2, path2 in given[i + 1:]:
            if _same_file(path, path2):
                raise UserError(f"{opt} and {opt2} name the same file {path}; give each "
                                "its own")
        if schedule is not None and _same_file(path, schedule):
            raise UserError(f"{opt}: {path} is the --schedule file; writing there would "
                            "replace it")


def curve(args) -> Tuple[Data, Any]:
    """(data, files): ``files`` is an AtomicFiles ready to commit (nothing on disk yet)."""
    import numpy as np
    schedule, notes, assumed = sampled_schedule_from(args)
    if args.compare and not _default(assumed):
        raise UserError("--compare overlays peers that account Poisson sampling with "
                        "add/remove neighbours only; drop --compare or --sampler/--neighbouring")
    num = integer("--num", args.num, minimum=2, maximum=MAX_NUM)
    points = integer("--compare-points", args.compare_points, minimum=2,
                     maximum=MAX_COMPARE_POINTS)
    grid_delta = delta_value(args.min_delta, "--min-delta")
    eps_max = None
    if args.eps_max is not None:
        eps_max = number("--eps-max", args.eps_max, low=0.0, high=1e6, low_open=True)
    png_path, csv_path = args.png, args.csv
    if args.out is not None:
        png_path = png_path or f"{args.out}.png"
        csv_path = csv_path or f"{args.out}.csv"
    try:
        if png_path:
            render.check_output_path("--png", png_path)
        if csv_path:
            render.check_output_path("--csv", csv_path)
    except render.OutputError as exc:
        raise UserError(str(exc)) from None
    _distinct_outputs([("--png", png_path), ("--csv", csv_path)], args.schedule)
    if png_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserError("--png needs matplotlib: pip install matplotlib") from None
    names = peer_names(args) if args.compare else []
    if args.compare:
        _peer_limits(args)
    sampled = None
    if _default(assumed):
        with busy(args, "composing"):
            pb, reason = _engine(schedule, grid_delta)
    else:                                   # the accountant composes the sampler's pairs
        sampled, pb, reason = accountant_for(assumed, schedule), None, None
    if eps_max is None:
        if sampled is not None:
            top = sampled.get_epsilon_bounds(grid_delta).upper
        else:
            top = pb.epsilon_bounds(grid_delta).upper if pb is not None else math.inf
        eps_max = 1.0 if (not math.isfinite(top) or top <= 0) else top
    # the epsilons as printed (6 significant digits): each row's delta bounds are those
    # of the epsilon shown, not of a neighbour it was rounded from (delta falls with
    # epsilon, so a rounded epsilon would leave one of the two bounds unproven)
    epsilons = np.array([float(render.g(float(e))) for e in np.linspace(0.0, eps_max, num)])
    if sampled is not None:
        with busy(args, "composing"):
            db = sampled.get_delta_bounds(epsilons)
        lower, upper = np.asarray(db.lower, dtype=float), np.asarray(db.upper, dtype=float)
        notes = notes + list(db.notes)
    elif pb is None:
        lower, upper = np.zeros(num), np.ones(num)
        notes = notes + [f"delta cannot be certified below 1: {reason}"]
    else:
        c = pb.curve(epsilons)
        lower, upper = np.asarray(c.delta_lower), np.asarray(c.delta_upper)
        notes = notes + list(pb.notes(grid_delta))
    peer_curves: Dict[str, Any] = {}
    peer_status: Dict[str, str] = {}
    deltas: Optional[List[float]] = None
    if names:
        positive = upper[(upper > 0) & (upper < 1)]
        d_lo = max(float(positive.min()) if positive.size else 1e-10, 1e-12)
        d_hi = min(float(positive.max()) if positive.size else 0.5, 0.5)
        if d_hi <= d_lo:
            d_hi = min(10 * d_lo, 0.5)
        deltas = np.geomspace(d_lo, d_hi, points).tolist()
        with progress_bar(args, len(names), "peers") as bar:
            results = _run_peers(args, names, schedule, deltas, bar)
        for name in names:
            r = results[name]
            peer_status[name] = "ok" if r.status == "ok" else f"{r.status}: {r.reason}"
            if r.status == "ok":
                peer_curves[name] = r.pairs
    peers_csv = None
    if csv_path and peer_curves:
        peers_csv = (csv_path[:-4] + "_peers.csv" if csv_path.endswith(".csv")
                     else csv_path + "_peers")
        try:
            render.check_output_path("--csv", peers_csv)
        except render.OutputError as exc:
            raise UserError(str(exc)) from None
    sched = schedule_json(schedule)
    with staged_files() as files:
        if png_path:
            files.write("--png", png_path, render.curve_png_writer(
                epsilons, lower, upper, sched, peer_curves, deltas, args.title))
        if csv_path:
            files.write("--csv", csv_path, render.curve_csv_writer(epsilons, lower, upper))
        if peers_csv:
            files.write("--csv", peers_csv, render.peers_csv_writer(deltas, peer_curves))
    data = {"command": "curve", "schedule": sched, "steps": _steps(schedule),
            "png": png_path, "csv": csv_path, "peers_csv": peers_csv, "points": num,
            "eps_max": float(eps_max), "peers": peer_status, **assumed, "notes": _notes(notes)}
    if not (png_path or csv_path):
        data["curve"] = [{"epsilon": float(e), "delta_lower": float(lo), "delta_upper": float(hi)}
                         for e, lo, hi in zip(epsilons, lower, upper)]
    return data, files


# --------------------------------------------------------------------------------------
# attack risk and the privacy report (docs/attack-risk.md)
# --------------------------------------------------------------------------------------

#: most false-positive rates `risk` takes
MAX_FPR = 1_000


def _fprs(values) -> List[float]:
    values = list(values) if values else ["1e-3", "1e-2", "0.1"]
    if len(values) > MAX_FPR:
        raise UserError(f"--fpr takes at most {MAX_FPR} values")
    from pb_accountant.tradeoff import MIN_FPR        # (the library's range: one home)
    return [number("--fpr", v, low=MIN_FPR, high=1.0, fraction=True) for v in values]


def _png_path(path: Optional[str]) -> Optional[str]:
    if path is None:
        return None
    try:
        render.check_output_path("--png", path)
    except render.OutputError as exc:
        raise UserError(str(exc)) from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError("--png needs matplotlib: pip install matplotlib") from None
    return path


def risk(args) -> Tuple[Data, Any]:
    """Certified TPR-at-FPR bounds and the GDP mu bracket; (data, files to commit)."""
    import numpy as np
    from pb_accountant.integrations.report import _plot
    schedule, notes = schedule_from(args)
    fprs = _fprs(args.fpr)
    png_path = _png_path(args.png)
    acc = _accountant(schedule)
    with busy(args, "bounding the trade-off curve"):
        if png_path:
            grid = np.unique(np.concatenate((np.asarray(fprs), np.geomspace(1e-6, 1.0, 60))))
            tb_all = acc.get_tradeoff_bounds(grid)
            pick = np.searchsorted(tb_all.fpr, fprs)
            curve = acc.get_privacy_curve(num=120)
        else:
            tb_all = acc.get_tradeoff_bounds(fprs)
            pick = np.arange(len(fprs))
    sched = schedule_json(schedule)
    with staged_files() as files:
        if png_path:
            title = (f"DP-SGD: {len(schedule)} segment(s), {_steps(schedule)} steps")
            files.write("--png", png_path, lambda tmp: _plot(tmp, curve, tb_all, title))
    rows = [{"fpr": float(tb_all.fpr[i]), "tpr_lower": float(tb_all.tpr_lower[i]),
             "tpr_upper": float(tb_all.tpr_upper[i])} for i in pick]
    data = {"command": "risk", "schedule": sched, "steps": _steps(schedule),
            "sampler": "poisson", "neighbouring": "add_remove", "results": rows,
            "gdp_mu": {"lower": tb_all.mu_lower, "upper": tb_all.mu_upper,
                       "alpha_min": tb_all.mu_alpha_min},
            "png": png_path, "notes": _notes(notes + list(tb_all.notes))}
    return data, files


def report(args) -> Data:
    """The privacy report of a saved accountant state or tracker log."""
    from pb_accountant.integrations.report import DEFAULT_DELTAS, privacy_report
    deltas = [delta_value(d) for d in args.delta] if args.delta else list(DEFAULT_DELTAS)
    fprs = _fprs(args.fpr)
    if args.out is not None:
        for suffix in (".md", ".json") + (() if args.no_plot else (".png",)):
            try:
                render.check_output_path("--out", args.out + suffix)
            except render.OutputError as exc:
                raise UserError(str(exc)) from None
            try:
                same = os.path.samefile(args.out + suffix, args.source)
            except OSError:
                same = False
            if same:
                raise UserError(f"--out: {args.out + suffix} is the source {args.source}; the "
                                "report would replace it (choose another prefix)")
    with busy(args, "writing the report"):
        try:
            rep = privacy_report(args.source, args.out, deltas=deltas, fpr=fprs,
                                 plot=not args.no_plot and args.out is not None,
                                 title=args.title)
        except (ValueError, OSError) as exc:
            message = str(exc)                  # a log's errors name the file already
            if message.startswith("source: ") and args.source in message:
                message = message[len("source: "):]
            if not message.startswith(args.source):
                message = f"{args.source}: {message}"
            raise UserError(message) from None
    return {"command": "report", "files": rep.files, "report": rep.data,
            "markdown": rep.markdown}
