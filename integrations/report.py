"""A privacy report fit for a model card: Markdown + JSON (+ a PNG) from one call.

    from pb_accountant.integrations.report import privacy_report
    report = privacy_report(accountant, "privacy")       # privacy.md, privacy.json, privacy.png

``source`` is a :class:`pb_accountant.PrivacyBucketsAccountant` (or the dp_accounting
adapter ``PrivacyBucketsDpAccountant``), a saved ``state_dict``
(a mapping, or a JSON file holding one, e.g. ``BudgetTracker.state_dict()["accountant"]``)
or a tracker log (the JSON lines :class:`~pb_accountant.integrations.JSONLinesSink`
writes).  The report holds the mechanism, sampler and neighbouring relation, the
history summarised, certified epsilon bounds at several deltas, certified bounds on an
attacker's true-positive rate at fixed false-positive rates (docs/attack-risk.md), the
GDP mu bracket, the method, library version and what is assumed, and a plot of the
privacy curve and the trade-off band (matplotlib optional: without it the plot is
skipped with a note).

A tracker log records, per line, the step count and the noise multiplier and sample rate
of the *last* step.  The history is rebuilt by giving every step since the previous
line that line's values.  Only a log with a line for every step of Poisson sampling
(under the log's neighbouring relation) gives the exact history and certified bounds; a
log of fixed-size or shuffled batches lacks the sizes they need, and from a sparser log
the history between lines is unknown, so the report is labelled an approximation (stating
the sampler and relation the log's own bounds assume): its
upper bound is at least the largest eps_upper the tracker logged (certified for the
real history) and, where the log's delta allows, the logged certified values are used.
Every field of every record is checked as the tracker writes it (a malformed log raises
ValueError naming the file, the line and the field; fields the tracker does not write
are ignored, a record needs only 'step' and 'eps_upper').
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pb_accountant.results import directed_decimal
from pb_accountant._validation import (MAX_STEPS, check_count, check_delta,
                                      check_noise_multiplier, check_real, check_sample_rate)

__all__ = ["privacy_report", "PrivacyReport", "DEFAULT_DELTAS", "load_source"]

#: deltas at which the report states epsilon bounds by default (plus a tracker log's own)
DEFAULT_DELTAS = (1e-5, 1e-6, 1e-8)
#: false-positive rates of the attack-risk table
DEFAULT_FPR = (1e-3, 1e-2, 0.1)
_DEFAULT_ASSUMPTIONS = {"sampler": "poisson", "neighbouring": "add_remove"}
_ASSUMPTION_KEYS = frozenset({"sampler", "neighbouring", "dataset_size", "batch_size"})
_RELATION_TEXT = {"add_remove": "adding or removing one example",
                  "replace_one": "replacing one example by another",
                  "replace_special": "replacing one example by a special (zero) element"}


@dataclass
class PrivacyReport:
    """The report: ``data`` (JSON-ready), ``markdown``, and the files written."""

    data: Dict[str, Any]
    markdown: str
    files: Dict[str, str] = field(default_factory=dict)


# -- sources ----------------------------------------------------------------------------
def _accountant_from_state(state: Mapping):
    from pb_accountant import PrivacyBucketsAccountant
    if "history" not in state:
        raise ValueError("source state_dict must have the key 'history' (a list of "
                         f"(noise_multiplier, sample_rate, num_steps)), got keys {sorted(state)!r}")
    options = state.get("options", {})
    if not isinstance(options, Mapping):
        raise ValueError(f"state_dict['options'] must be a mapping of option names to "
                         f"values, got {options!r}")
    assumptions = state.get("assumptions")
    assumptions = {} if assumptions is None else assumptions      # Opacus-style: poisson
    if not isinstance(assumptions, Mapping):
        raise ValueError(f"state_dict['assumptions'] must be a mapping with the keys "
                         f"{sorted(_ASSUMPTION_KEYS)!r}, got {assumptions!r}")
    unknown = sorted(set(assumptions) - _ASSUMPTION_KEYS)
    if unknown:
        raise ValueError(f"state_dict['assumptions'] has unknown key(s) {unknown!r}; known: "
                         f"{sorted(_ASSUMPTION_KEYS)!r}")
    options, assumptions = dict(options), dict(assumptions)
    try:
        acc = PrivacyBucketsAccountant(**assumptions, **options)
    except ValueError as exc:
        # an accountant without sampler arguments models poisson / add_remove only
        plain = all(v is None or _DEFAULT_ASSUMPTIONS.get(k, None) == v
                    for k, v in assumptions.items())
        if not assumptions or not plain:
            raise ValueError(f"source state_dict assumes {assumptions!r} with options "
                             f"{options!r}, which this accountant cannot model: {exc}") from None
        acc = PrivacyBucketsAccountant(**options)
        state = {k: v for k, v in state.items() if k != "assumptions"}
    acc.load_state_dict(dict(state))
    return acc


def _logged_epsilon(name: str, value) -> float:
    """An epsilon as JSONLinesSink writes it: a number >= 0, or "inf" (never NaN)."""
    return check_real(name, math.inf if value == "inf" else value, low=0.0, allow_inf=True)


def _text(name: str, value) -> str:
    """A name or word the tracker writes (a string)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _optional(check):
    """``check`` for a field the tracker writes as null when it has no value."""
    return lambda name, value: None if value is None else check(name, value)


#: the checks of a tracker log record's fields (BudgetRecord.as_json_dict); a field
#: that is present must pass its check (extra fields are ignored)
_RECORD_FIELDS = {
    "step": lambda name, value: check_count(name, value, maximum=MAX_STEPS),
    "epoch": _optional(check_count),
    "delta": lambda name, value: check_delta(value, name),
    "eps_lower": _logged_epsilon,
    "eps_upper": _logged_epsilon,
    "noise_multiplier": _optional(lambda name, value: check_noise_multiplier(value, name)),
    "sample_rate": _optional(lambda name, value: check_sample_rate(value, name)),
    "event": _text,
    "time": lambda name, value: check_real(name, value),
    # names, not choices: another accountant or loader may name its own ("unknown",
    # "sequential"); any but poisson / add_remove makes the rebuilt history approximate
    "sampler": _text,
    "neighbouring": _text,
    "loader_sampler": _optional(_text),
    "loader_eps_lower": _optional(_logged_epsilon),
    "loader_eps_upper": _optional(_logged_epsilon),
    "loader_neighbouring": _optional(_text),
}


def _check_record(rec: dict) -> None:
    """ValueError naming the first malformed field of a tracker log record."""
    for key in ("step", "eps_upper"):
        if key not in rec:
            raise ValueError(f"the field {key!r} is missing (a budget record needs 'step' "
                             "and 'eps_upper')")
    checked = {key: check(key, rec[key]) for key, check in _RECORD_FIELDS.items()
               if key in rec}
    for low, up in (("eps_lower", "eps_upper"), ("loader_eps_lower", "loader_eps_upper")):
        lower, upper = checked.get(low), checked.get(up)
        if lower is not None and upper is not None and lower > upper:
            raise ValueError(f"{low} must be <= {up}={rec[up]!r}, got {rec[low]!r}")


def _read_log(lines: Sequence[str], where: str) -> Tuple[List[dict], List[int]]:
    """(records, their line numbers) of a tracker log, each record checked field by
    field (ValueError naming the file, the line and the field); of a log appended to by
    several runs, the last run."""
    records, numbers = [], []
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise ValueError(f"{where}: line {i + 1} is not JSON") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: line {i + 1} is not a budget record (a JSON object "
                             f"with 'step' and 'eps_upper'), got {rec!r}")
        try:
            _check_record(rec)
        except ValueError as exc:
            raise ValueError(f"{where}: line {i + 1}: {exc}") from None
        records.append(rec)
        numbers.append(i + 1)
    if not records:
        raise ValueError(f"{where}: the tracker log holds no records")
    # a log appended to by several runs: keep the last run (steps restart)
    start = 0
    for i in range(1, len(records)):
        if int(records[i]["step"]) < int(records[i - 1]["step"]):
            start = i
    return records[start:], numbers[start:]


#: the neighbouring relations a rebuilt (Poisson) accountant models without sizes
_POISSON_RELATIONS = ("add_remove", "replace_one", "replace_special")


def _log_assumptions(records: List[dict]) -> Tuple[str, str, bool]:
    """(sampler, neighbouring, modelled) the log's bounds assume ("a+b" when the records
    differ); modelled: a Poisson accountant with that relation rebuilds them (fixed-size
    and shuffled batches need the dataset and batch sizes, which the log does not hold)."""
    samplers = sorted({str(r.get("sampler", "poisson")) for r in records})
    relations = sorted({str(r.get("neighbouring", "add_remove")) for r in records})
    modelled = samplers == ["poisson"] and len(relations) == 1 and \
        relations[0] in _POISSON_RELATIONS
    return "+".join(samplers), "+".join(relations), modelled


def _history_from_log(records: List[dict], numbers: Sequence[int], where: str,
                      modelled: bool = True
                      ) -> Tuple[List[Tuple[float, float, int]], List[str], bool]:
    """(history, notes, exact): exact only with a record for every step (what changed
    inside a longer interval is not in the log) and a sampler/relation the rebuilt
    accountant models (``modelled``, from :func:`_log_assumptions`).
    The records were checked by ``_read_log``."""
    history: List[Tuple[float, float, int]] = []
    notes: List[str] = []
    previous = 0
    exact = True
    for rec, number in zip(records, numbers):
        step = int(rec["step"])
        k = step - previous
        if k <= 0:
            continue
        sigma, q = rec.get("noise_multiplier"), rec.get("sample_rate")
        if sigma is None or q is None:
            missing = "noise_multiplier" if sigma is None else "sample_rate"
            raise ValueError(f"{where}: line {number}: the record at step {step} has no "
                             f"{missing}: the history of its {k} step(s) cannot be rebuilt")
        if k > 1 or not modelled:
            exact = False
        if history and (history[-1][0], history[-1][1]) == (float(sigma), float(q)):
            history[-1] = (history[-1][0], history[-1][1], history[-1][2] + k)
        else:
            history.append((float(sigma), float(q), k))
        previous = step
    notes.append("history rebuilt from the tracker log: each step since the previous record "
                 "is given that record's noise multiplier and sample rate")
    if not exact:
        notes.append("the tracker log does not hold a record for every step (or assumes "
                     "a sampler the rebuilt history does not model): the rebuilt history is "
                     "an approximation and its bounds are not certified")
    return history, notes, exact


def _logged_bounds(records: List[dict]) -> Dict[str, Any]:
    """The largest certified eps_lower/eps_upper the log holds at its last delta.

    Each was certified for the real history up to its step; epsilon only grows with
    the steps, so both hold for the real history up to the last record."""
    delta = records[-1].get("delta")
    out: Dict[str, Any] = {"delta": None, "eps_lower": None, "eps_upper": None, "step": None}
    if not isinstance(delta, (int, float)) or isinstance(delta, bool):
        return out
    out["delta"], out["step"] = float(delta), int(records[-1]["step"])
    for rec in records:
        if rec.get("delta") != delta:
            continue
        for key in ("eps_lower", "eps_upper"):
            value = rec.get(key)
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue
            if not math.isnan(value) and (out[key] is None or value > out[key]):
                out[key] = value
    return out


def _loader_mismatch(records: List[dict]) -> Optional[Dict[str, Any]]:
    """The last record's loader, when the tracker saw one that samples otherwise than
    the accountant assumed (its bounds are then not certified for the training run)."""
    rec = records[-1]
    loader = rec.get("loader_sampler")
    if loader is None or loader == rec.get("sampler", "poisson"):
        return None
    return {"loader_sampler": loader, "loader_neighbouring": rec.get("loader_neighbouring"),
            "delta": rec.get("delta"), "step": rec.get("step"),
            "eps_lower": rec.get("loader_eps_lower"), "eps_upper": rec.get("loader_eps_upper")}


def load_source(source) -> Tuple[Any, Dict[str, Any], List[str]]:
    """(accountant, description of the source, notes) for any supported source."""
    from pb_accountant import PrivacyBucketsAccountant
    if isinstance(source, PrivacyBucketsAccountant):
        return source, {"kind": "accountant"}, []
    if _is_dp_accounting_adapter(source):
        return source, {"kind": "dp_accounting_adapter"}, []
    if isinstance(source, Mapping):
        return _accountant_from_state(source), {"kind": "state_dict"}, []
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, encoding="utf-8-sig") as fh:       # (a BOM is not JSON)
                text = fh.read()
        except OSError as exc:
            raise ValueError(f"source: cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"source: {path} is not UTF-8 text (a JSON state_dict or "
                             f"tracker log): {exc.reason} at byte {exc.start}") from None
        try:
            state = json.loads(text)
        except ValueError:
            state = None
        if isinstance(state, Mapping) and "history" in state:
            return _accountant_from_state(state), {"kind": "state_dict", "path": path}, []
        if isinstance(state, Mapping) and "accountant" in state and isinstance(state["accountant"], Mapping):
            # a BudgetTracker.state_dict()
            return (_accountant_from_state(state["accountant"]),
                    {"kind": "tracker_state", "path": path}, [])
        records, numbers = _read_log(text.splitlines(), path)
        sampler, relation, modelled = _log_assumptions(records)
        history, notes, every_step = _history_from_log(records, numbers, path)
        exact = every_step and modelled
        # the log's own relation (Poisson replace_one, say: its bounds are not add/remove's)
        acc = (PrivacyBucketsAccountant(neighbouring=relation)
               if modelled and relation != "add_remove" else PrivacyBucketsAccountant())
        acc.history = history
        last = records[-1]
        info = {"kind": "tracker_log", "path": path, "records": len(records),
                "exact": exact, "every_step": every_step, "last_record": last}
        if not exact:
            info["logged_bounds"] = _logged_bounds(records)
        mismatch = _loader_mismatch(records)
        if mismatch is not None:
            info["loader_mismatch"] = mismatch
        if not modelled:
            # what the logged (certified) bounds assume: the card must say so, not the
            # Poisson add/remove of the rebuilt history
            info["logged_assumptions"] = {"sampler": sampler, "neighbouring": relation}
            notes.append(f"the tracker log's bounds assume sampler={sampler}, neighbouring="
                         f"{relation}; the log does not hold what that needs (the dataset "
                         "and batch sizes), so values marked ≈ are computed for the rebuilt "
                         "history as Poisson sampling with add/remove neighbours: the "
                         "rebuilt history is an approximation and its bounds are not "
                         "certified")
        return acc, info, notes
    raise ValueError("source must be a PrivacyBucketsAccountant, a state_dict mapping, or the "
                     f"path of a JSON state_dict or tracker log, got {type(source).__name__}")


# -- the report -------------------------------------------------------------------------
def _num(x):
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        raise RuntimeError("report: a NaN reached the report")
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _assumptions(acc) -> Dict[str, Any]:
    got = getattr(acc, "assumptions", None)
    if callable(got):
        got = got()
    if isinstance(got, Mapping):
        out = dict(_DEFAULT_ASSUMPTIONS)
        out.update({k: v for k, v in got.items()})
        return out
    return dict(_DEFAULT_ASSUMPTIONS)


def _options(acc) -> Dict[str, Any]:
    import dataclasses
    opts = getattr(acc, "options", None)
    if opts is None or not dataclasses.is_dataclass(opts):
        return {}
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}


def _is_dp_accounting_adapter(acc) -> bool:
    return type(acc).__name__ == "PrivacyBucketsDpAccountant" and hasattr(acc, "ledger")


def _event_summary(acc) -> Dict[str, Any]:
    """The adapter's ledger (the composed DpEvent) and its pairs."""
    pairs = acc.history
    text = str(acc.ledger)
    return {"segments": len(pairs), "steps": int(sum(c for _, c in pairs)),
            "events": text if len(text) <= 2000 else text[:1997] + "...",
            "pairs": [{"pair": repr(p), "count": int(c)} for p, c in pairs[:50]]}


def _adapter_assumptions(acc) -> Dict[str, Any]:
    samplers = sorted(getattr(acc, "_samplers", ()) or ())
    rel = getattr(acc.neighboring_relation, "name", str(acc.neighboring_relation))
    return {"sampler": "+".join(samplers) or "none",
            "neighbouring": {"ADD_OR_REMOVE_ONE": "add_remove",
                             "REPLACE_ONE": "replace_one"}.get(rel, rel)}


def _history_summary(history) -> Dict[str, Any]:
    hist = [(float(s), float(q), int(t)) for s, q, t in history]
    active = [h for h in hist if h[2] > 0]
    sig = [s for s, _, _ in active]
    qs = [q for _, q, _ in active]
    return {"segments": len(hist), "steps": int(sum(t for _, _, t in hist)),
            "noise_multiplier": {"min": min(sig) if sig else None, "max": max(sig) if sig else None},
            "sample_rate": {"min": min(qs) if qs else None, "max": max(qs) if qs else None},
            "entries": [{"noise_multiplier": s, "sample_rate": q, "steps": t}
                        for s, q, t in hist[:50]],
            "entries_shown": min(len(hist), 50)}


def _row_from_log(b, delta: float, logged: Dict[str, Any]) -> Dict[str, Any]:
    """A row rebuilt from a sparse log: the tracker's certified values where its delta
    covers this one (epsilon(delta) falls as delta grows), the rebuilt bound elsewhere;
    the upper bound is never below the logged certified eps_upper."""
    lower, upper = float(b.lower), float(b.upper)
    log_delta, log_lower, log_upper = logged["delta"], logged["eps_lower"], logged["eps_upper"]
    lower_ok = upper_ok = False
    if log_upper is not None:
        upper = max(upper, log_upper)
        upper_ok = delta >= log_delta
    if log_lower is not None and delta <= log_delta:
        lower, lower_ok = log_lower, True
        upper = max(upper, lower)
    return {"lower": _num(lower), "upper": _num(upper), "lower_certified": lower_ok,
            "upper_certified": upper_ok}


def _fmt(x, up=True, sig=4) -> str:
    """Directed rounding for display: upper bounds up, lower bounds down."""
    if isinstance(x, str):
        return "∞" if x == "inf" else x
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "∞"
    if x == 0:
        return "0"
    # the exact value rounded in decimal (x * 10^k in floats rounds, so a ceiling of it
    # could display an upper bound below the float it shows, e.g. 0.0008297000000000001
    # as 0.0008297); the exponent is the exact floor(log10 |x|)
    from decimal import Decimal
    exp = Decimal(x).adjusted()
    v = directed_decimal(x, up, significant=sig)
    if abs(exp) > 290:
        # (a subnormal sample rate, say: the text straight from the decimal)
        return f"{v:.{sig - 1}e}"
    # v has at most sig significant digits: the nearest double's sig-digit text is v
    return f"{float(v):.{sig}g}"


def _exact(x) -> str:
    """A value a bound is certified *at* (a delta, a false-positive rate): six
    significant digits when they read back as the value, else every digit."""
    x = float(x) + 0.0
    text = f"{x:.6g}"
    return text if not math.isfinite(x) or float(text) == x else repr(x)


def _span(stats: Dict[str, Any]) -> str:
    """A parameter's range over the history ("1.1", or "0.8–1.1"): the training's
    settings, not bounds, so no directed rounding (that showed a constant 1.1 as
    "1.1–1.101")."""
    lo, hi = stats["min"], stats["max"]
    if lo is None:
        return "-"
    return f"{lo:.6g}" if lo == hi else f"{lo:.6g}–{hi:.6g}"


def _training_line(h: Dict[str, Any]) -> str:
    if "events" in h:
        return (f"- **Training:** the dp_accounting event {h['events']} "
                f"({h['segments']} composed mechanism segment(s))")
    return (f"- **Training:** {h['steps']} steps in {h['segments']} segment(s); noise "
            f"multiplier {_span(h['noise_multiplier'])}, sample rate "
            f"{_span(h['sample_rate'])}")


def _image_target(path: str) -> str:
    """A Markdown link destination for a file name (spaces or parentheses need <...>)."""
    name = os.path.basename(path)
    if any(c in name for c in " ()<>\t"):
        return "<" + name.replace("<", "%3C").replace(">", "%3E") + ">"
    return name


def _loader_warning(data: Dict[str, Any], a: Dict[str, Any]) -> List[str]:
    """A bullet when the tracker saw a loader the bounds do not assume (a shuffled
    DataLoader under a Poisson accountant): the card must not read as certified for it."""
    m = data.get("loader_mismatch")
    if not m:
        return []
    text = (f"- **Warning:** the tracker log says the data loader feeding training samples by "
            f"{m['loader_sampler']}: the bounds below assume sampler={a.get('sampler')} and "
            "are not certified for it")
    if m.get("eps_upper") is not None and m.get("delta") is not None:
        text += (f"; the tracker's certified bracket for it (sampler={m['loader_sampler']}, "
                 f"neighbouring={m.get('loader_neighbouring')}) at delta="
                 f"{_exact(m['delta'])} after {m['step']} steps is epsilon in "
                 f"[{_fmt(m['eps_lower'], False)}, {_fmt(m['eps_upper'])}]")
    return [text + " (docs/which-epsilon.md)"]


def _markdown(data: Dict[str, Any]) -> str:
    h = data["history"]
    a = data["assumptions"]
    certified = data.get("certified", True)
    lines = [f"## Differential privacy ({data['title']})", "",
             f"- **Mechanism:** {data['mechanism']}",
             f"- **Sampler:** {a.get('sampler')}; **neighbouring relation:** "
             f"{a.get('neighbouring')}"] + _loader_warning(data, a) + [
             _training_line(h),
             f"- **Accountant:** pb-accountant {data['version']} (privacy buckets, certified "
             f"upper and lower bounds)", "",
             "### Certified (epsilon, delta)" if certified else
             "### (epsilon, delta), approximate: rebuilt from a tracker log", "",
             "| delta | epsilon lower bound | epsilon upper bound |", "|---|---|---|"]
    for row in data["epsilon"]:
        lo = ("" if row.get("lower_certified", certified) else "≈ ") + _fmt(row["lower"], False)
        up = ("" if row.get("upper_certified", certified) else "≈ ") + _fmt(row["upper"])
        lines.append(f"| {_exact(row['delta'])} | {lo} | {up} |")
    if certified:
        lines += ["", "The true epsilon lies between the two bounds; the upper bound is the "
                  "guarantee.", ""]
    else:
        why = data.get("approximate_because") or [
            "the tracker log lacks a record for every step, so the history between records "
            "is not known"]
        text = "; and ".join(why)
        lines += ["", text[:1].upper() + text[1:] + ": this bracket is an approximation from "
                  "the log, not a certificate.  Values marked ≈ come from the rebuilt "
                  "history; the others are the certified bounds the tracker logged for the "
                  "real run.", ""]
    lines += ["### Attack risk (membership inference)", "",
              "Best true-positive rate any attacker can reach at a given false-positive "
              "rate, for one example, " + ("certified from the privacy curve" if certified
                                           else "approximate (from the rebuilt history)")
              + " (f-DP trade-off, both neighbouring directions):", "",
              "| false-positive rate | TPR lower bound | TPR upper bound |", "|---|---|---|"]
    r = data["attack_risk"]
    approx = "" if certified else "≈ "
    for f, lo, up in zip(r["fpr"], r["tpr_lower"], r["tpr_upper"]):
        lines.append(f"| {_exact(f)} | {approx}{_fmt(lo, False)} | {approx}{_fmt(up)} |")
    mu = r["gdp_mu"]
    lines += ["", f"Gaussian-DP parameter implied by the curve (for FPR in "
              f"[{mu['alpha_min']:g}, 1 - {mu['alpha_min']:g}]): mu in "
              f"[{approx}{_fmt(mu['lower'], False)}, {approx}{_fmt(mu['upper'])}].", ""]
    if data.get("plot"):
        lines += [f"![privacy curve and trade-off band]({_image_target(data['plot'])})", ""]
    lines += ["### Method and assumptions", ""]
    lines += [f"- {s}" for s in data["assumed"]]
    if data["notes"]:
        lines += ["", "### Notes", ""] + [f"- {n}" for n in data["notes"]]
    return "\n".join(lines) + "\n"


def _plot(path: str, curve, tb_curve, title: str) -> None:
    """Two panels: the certified privacy curve, and the TPR-vs-FPR band (matplotlib's
    object API, no pyplot state)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10.0, 4.2), dpi=110)
    ax1, ax2 = fig.subplots(1, 2)
    eps = np.asarray(curve.epsilons)
    up = np.asarray(curve.delta_upper)
    lo = np.asarray(curve.delta_lower)
    ax1.fill_between(eps, np.where(lo > 0, lo, np.nan), np.where(up > 0, up, np.nan),
                     color="tab:blue", alpha=0.2, lw=0, label="certified region")
    ax1.plot(eps[up > 0], up[up > 0], color="tab:blue", lw=2, label="upper bound")
    ax1.plot(eps[lo > 0], lo[lo > 0], color="tab:blue", lw=1.2, ls="--", label="lower bound")
    ax1.set_yscale("log")
    pos = up[up > 0]
    ax1.set_ylim(max(float(pos.min()) if pos.size else 1e-12, 1e-14), 1.0)
    ax1.set_xlabel(r"$\varepsilon$")
    ax1.set_ylabel(r"$\delta(\varepsilon)$")
    ax1.set_title("privacy curve", fontsize=10)
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    fpr = np.asarray(tb_curve.fpr)
    ax2.fill_between(fpr, tb_curve.tpr_lower, tb_curve.tpr_upper, color="tab:red", alpha=0.25,
                     lw=0, label="certified TPR band")
    ax2.plot(fpr, tb_curve.tpr_upper, color="tab:red", lw=1.5, label="TPR upper bound")
    ax2.plot(fpr, tb_curve.tpr_lower, color="tab:red", lw=1.0, ls="--", label="TPR lower bound")
    ax2.plot(fpr, fpr, color="gray", lw=1, ls=":", label="random guess")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlim(float(fpr.min()), 1.0)
    ax2.set_ylim(float(fpr.min()), 1.0)
    ax2.set_xlabel("false-positive rate")
    ax2.set_ylabel("true-positive rate")
    ax2.set_title("attack risk (trade-off band)", fontsize=10)
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png")


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def build_report(acc, source_info: Dict[str, Any], notes: List[str], *, deltas, fpr,
                 title: Optional[str], plot_points: int = 60):
    """(data, curve, trade-off bounds on the plot grid): everything but the files."""
    from pb_accountant import __version__
    deltas = [check_delta(d, "deltas") for d in deltas]
    from pb_accountant.tradeoff import _check_fpr
    # the library's check (range [MIN_FPR, 1], no bools or strings), here before any
    # bound is computed, naming the caller's values (not the plot grid merged with them)
    fpr = _check_fpr(fpr).tolist()
    log = source_info.get("last_record")
    if log is not None and log.get("delta") is not None:
        d = float(log["delta"])
        if d not in deltas:
            deltas.append(d)
    deltas = sorted(set(deltas), reverse=True)
    adapter = _is_dp_accounting_adapter(acc)
    summary = _event_summary(acc) if adapter else _history_summary(acc.history)
    logged = source_info.get("logged_bounds")     # a sparse tracker log: not certified
    rows = []
    for d in deltas:
        b = acc.get_epsilon_bounds(d)
        row = {"delta": d, "lower": _num(b.lower), "upper": _num(b.upper),
               "notes": list(b.notes)}
        if logged is not None:
            row.update(_row_from_log(b, d, logged))
        rows.append(row)
        notes = notes + [n for n in b.notes if n not in notes]
    if log is not None and log.get("delta") is not None:
        b = acc.get_epsilon_bounds(float(log["delta"]))
        recorded = log.get("eps_upper")
        if isinstance(recorded, (int, float)) and recorded != b.upper:
            notes.append(f"the last log record states eps_upper={recorded!r} at delta="
                         f"{log['delta']!r}; the rebuilt history gives {b.upper!r}")
    plot_fpr = np.geomspace(1e-6, 1.0, plot_points)
    all_fpr = np.unique(np.concatenate((np.asarray(fpr), plot_fpr)))
    tb = acc.get_tradeoff_bounds(all_fpr)
    pick = np.searchsorted(tb.fpr, fpr)
    risk = {"fpr": [float(f) for f in fpr],
            "tpr_lower": [_num(tb.tpr_lower[i]) for i in pick],
            "tpr_upper": [_num(tb.tpr_upper[i]) for i in pick],
            "gdp_mu": {"lower": _num(tb.mu_lower), "upper": _num(tb.mu_upper),
                       "alpha_min": tb.mu_alpha_min}}
    notes = notes + [n for n in tb.notes if n not in notes]
    assumptions = _adapter_assumptions(acc) if adapter else _assumptions(acc)
    if source_info.get("logged_assumptions"):
        assumptions = dict(source_info["logged_assumptions"])
    steps = summary["steps"]
    if title is None:
        title = f"DP-SGD, {steps} steps" if not adapter else "dp_accounting events"
    why = []                                      # why a log's report is approximate
    if logged is not None and not source_info.get("every_step", False):
        why.append("the tracker log lacks a record for every step, so the noise multiplier "
                   "and sample rate between records are not known")
    if source_info.get("logged_assumptions"):
        la = source_info["logged_assumptions"]
        why.append(f"the logged bounds assume sampler={la['sampler']}, neighbouring="
                   f"{la['neighbouring']}, which the rebuilt history (Poisson sampling, "
                   "add/remove neighbours) does not model")
    assumed = [] if logged is None else [
        "The history was rebuilt from a tracker log: " + "; and ".join(why) + ", so the "
        "bounds and attack-risk figures are an approximation, not a certificate.  Values "
        "marked ≈ come from the rebuilt history; the others are the certified bounds the "
        "tracker logged for the real history (up to the last record's step)."]
    assumed += [
        "Bounds are certified by privacy buckets (Meiser & Mohammadi, \"Tight on "
        "Budget?\"): the upper bounds are provably at least, the lower bounds provably at "
        "most, the true values, floating-point error included (docs/method.md, "
        "docs/floating-point.md).",
        (f"Each step is the {assumptions.get('sampler')}-sampled Gaussian mechanism with "
         "clipping norm C and noise standard deviation noise_multiplier x C (DP-SGD); the "
         "training code must implement exactly this (per-example clipping, the stated "
         "sampling)." if not adapter else
         "The composed dp_accounting DpEvents describe the mechanism exactly (each event "
         "as dp_accounting documents it; pb_accountant.dp_accounting_adapter maps it to "
         "its worst-case pair)."),
        f"Neighbouring datasets differ by {_RELATION_TEXT.get(assumptions.get('neighbouring'), assumptions.get('neighbouring'))}; "
        "both directions are bounded.",
        "Attack-risk bounds: the f-DP trade-off curve is bounded from the certified "
        "delta(epsilon) bounds by convex duality (docs/attack-risk.md); they bound the "
        "best test between two neighbouring datasets, i.e. any membership-inference "
        "attack on one example, for the worst-case example.",
        "Only the released model's training is covered (not hyper-parameter search or "
        "other uses of the data).",
    ]
    data = {
        "title": title,
        "generator": "pb_accountant.integrations.report",
        "version": __version__,
        "source": {k: ({n: _num(x) if isinstance(x, float) else x for n, x in v.items()}
                       if k in ("logged_bounds", "loader_mismatch") else v)
                   for k, v in source_info.items() if k != "last_record"},
        "certified": logged is None,
        **({"loader_mismatch": {k: (_num(v) if isinstance(v, float) else v)
                                for k, v in source_info["loader_mismatch"].items()}}
           if source_info.get("loader_mismatch") else {}),
        **({"approximate_because": why} if logged is not None else {}),
        "mechanism": ("composed dp_accounting DpEvents" if adapter else
                      "Poisson-subsampled Gaussian (DP-SGD)"
                      if assumptions.get("sampler") == "poisson" else
                      f"{assumptions.get('sampler')}-sampled Gaussian (DP-SGD)"),
        "assumptions": assumptions,
        "history": summary,
        "epsilon": rows,
        "attack_risk": risk,
        "method": "privacy buckets (split pair upper bound, grouped lower bound)",
        "options": _options(acc),
        "assumed": assumed,
        "notes": list(dict.fromkeys(notes)),
        "plot": None,
    }
    curve = acc.engine().curve(num=120) if adapter else acc.get_privacy_curve(num=120)
    return data, curve, tb


def _check_not_the_source(source: str, output: str, plot: bool) -> None:
    """ValueError when a file the report would write is the source it reads (``report
    run.json --out run`` replaced the saved accountant state by the report)."""
    for suffix in (".md", ".json") + ((".png",) if plot else ()):
        target = output + suffix
        try:
            same = os.path.exists(target) and os.path.samefile(target, source)
        except OSError:
            same = False
        if same:
            raise ValueError(f"output: {target} is the source being reported on; writing the "
                             "report there would replace it (choose another output prefix)")


def privacy_report(source, output: Optional[str] = None, *, deltas: Sequence[float] = DEFAULT_DELTAS,
                   fpr: Sequence[float] = DEFAULT_FPR, plot: bool = True,
                   title: Optional[str] = None) -> PrivacyReport:
    """Build the report; with ``output`` (a path prefix) write ``output.md``,
    ``output.json`` and, with matplotlib, ``output.png``.

    Bad input raises ValueError before anything is written.
    """
    if output is not None and isinstance(source, (str, os.PathLike)):
        _check_not_the_source(os.fspath(source), os.fspath(output), plot)
    acc, info, notes = load_source(source)
    data, curve, tb = build_report(acc, info, list(notes), deltas=deltas, fpr=fpr, title=title)
    files: Dict[str, str] = {}
    if output is not None:
        output = os.fspath(output)
        folder = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(folder):
            raise ValueError(f"output: the folder {folder} does not exist")
        if plot and plot_available():
            png = output + ".png"
            _plot(png, curve, tb, data["title"])
            data["plot"] = png
            files["png"] = png
        elif plot:
            data["notes"].append("matplotlib is not installed: no plot "
                                 "(pip install matplotlib)")
        md = _markdown(data)
        with open(output + ".json", "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, allow_nan=False)
            fh.write("\n")
        files["json"] = output + ".json"
        with open(output + ".md", "w", encoding="utf-8") as fh:
            fh.write(md)
        files["md"] = output + ".md"
    else:
        md = _markdown(data)
    return PrivacyReport(data, md, files)
