"""Random-settings benchmark (issue 12): pb against the faster peer on settings it never saw.

Draws ``--n`` settings with a fixed ``--seed`` across the space people use: sigma 0.4-20,
q 1e-5..1, steps 1..1e7 and delta 1e-15..1e-2 (all log-uniform), and a share of noise
schedules of 1-1000 segments (per-epoch sigma drawn around a base or decaying, batch size
changes).  For each setting it records pb's time from scratch for both bounds
(``get_epsilon_bounds`` on a fresh accountant, median of 3, in a forked child stopped after
``--pb-limit`` seconds: a "timeout" reads as that time), the peers' times measured in
the same run (Opacus ``PRVAccountant``; dp_accounting's PLD at
value_discretization_interval 1e-4, pessimistic estimate, connect-the-dots), pb's width
(up - low) / up and pb's upper bound against the pessimistic PLD epsilon.

Peers run in a forked child process per call (their imports are paid once, untimed) with
a time limit (``--peer-limit`` seconds) and an address-space cap; a timeout or failure is recorded (status column), never fatal.  PLD
runs first; PRV then gets 1.5x PLD's time (plus 0.5 s) as its limit, since a slower answer
cannot be the faster peer's (its epsilon is then missing, its status "timeout").  The
table is saved as CSV and the ratio (faster peer's time / pb's time) is drawn over the
settings, coloured by pb's width.

    python benchmarks/bench_random.py [--n 200] [--seed 12] [--out benchmarks/results]
                                      [--quick] [--no-peers] [--peer-limit 10]

``--sigma LO HI``, ``--q``, ``--steps``, ``--delta`` and ``--schedule-share`` zoom into a
region of the space (the README's zoomed run: ``--n 24 --seed 7 --sigma 0.4 1 --q 1e-5
1e-4 --steps 1e4 1e7 --name random_suite_region``).
"""
from __future__ import annotations

import argparse
import csv
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
import warnings

import numpy as np

SIGMA = (0.4, 20.0)
SAMPLE_RATE = (1e-5, 1.0)
STEPS = (1, 10 ** 7)
DELTA = (1e-15, 1e-2)
SEGMENTS = (1, 1000)
SCHEDULE_SHARE = 0.35
PEER_MEMORY = 10 * 2 ** 30         # address space a peer process may use (torch maps ~3 GiB)


def _log_uniform(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw_settings(n: int, seed: int, sigma_range=SIGMA, q_range=SAMPLE_RATE,
                  steps_range=STEPS, delta_range=DELTA, schedule_share=SCHEDULE_SHARE):
    """``n`` settings: dicts with the history [(sigma, q, steps), ...], delta and kind.
    The ranges default to the whole space (``SIGMA``, ...); narrower ones zoom into a
    region (the draws of a seed then differ from the whole space's)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        sigma = _log_uniform(rng, *sigma_range)
        q = min(_log_uniform(rng, *q_range), 1.0)
        steps = int(round(_log_uniform(rng, steps_range[0], steps_range[1] + 0.5)))
        steps = max(1, min(steps, steps_range[1]))
        delta = _log_uniform(rng, *delta_range)
        kind = "constant"
        history = [(round(sigma, 6), round(q, 8), steps)]
        if rng.uniform() < schedule_share and steps >= 2:
            segments = int(round(_log_uniform(rng, SEGMENTS[0], SEGMENTS[1])))
            segments = max(1, min(segments, steps))
            per, extra = divmod(steps, segments)
            counts = [per + (1 if i < extra else 0) for i in range(segments)]
            style = rng.choice(["drawn", "decaying", "batch"])
            history = []
            for i, c in enumerate(counts):
                if style == "drawn":          # per-epoch sigma drawn around the base
                    s = sigma * float(rng.uniform(0.7, 1.3))
                    qq = q
                elif style == "decaying":     # noise decays linearly to half
                    s = sigma * (1.0 - 0.5 * i / max(segments - 1, 1))
                    qq = q
                else:                          # batch size grows in four stages
                    s = sigma
                    qq = min(q * 2.0 ** (4 * i // segments), 1.0)
                history.append((round(max(s, sigma_range[0]), 6), round(qq, 8), c))
            kind = f"schedule-{style}"
        out.append({"index": k, "kind": kind, "history": history, "delta": delta})
    return out


def add_space_arguments(parser, suffix: str = ""):
    """The options that narrow the drawn space (``--sigma LO HI`` ...; defaults: all of
    it); ``suffix`` is appended to each option's name (``--delta-range``)."""
    for name, default, what in (("sigma", SIGMA, "noise multipliers"),
                                ("q", SAMPLE_RATE, "sampling rates"),
                                ("steps", STEPS, "step counts"), ("delta", DELTA, "deltas")):
        parser.add_argument(f"--{name}{suffix}", dest=f"space_{name}", type=float, nargs=2,
                            metavar=("LO", "HI"), default=default,
                            help=f"range of the {what} drawn (log-uniform; default "
                            f"{default[0]:g} {default[1]:g})")
    parser.add_argument("--schedule-share", type=float, default=SCHEDULE_SHARE,
                        help="share of noise schedules among the settings")


def space(args):
    """``draw_settings``' keyword arguments from ``add_space_arguments``' options (None:
    the whole space)."""
    if args is None:
        return dict(sigma_range=SIGMA, q_range=SAMPLE_RATE, steps_range=STEPS,
                    delta_range=DELTA, schedule_share=SCHEDULE_SHARE)
    for name, whole in (("sigma", SIGMA), ("q", SAMPLE_RATE), ("steps", STEPS),
                        ("delta", DELTA)):
        lo, hi = getattr(args, f"space_{name}")
        if not 0 < lo <= hi:
            raise ValueError(f"the {name} range must be LO HI with 0 < LO <= HI (the whole "
                             f"space: {whole[0]:g} {whole[1]:g}), got {lo:g} {hi:g}")
    if not 0 <= args.schedule_share <= 1:
        raise ValueError(f"--schedule-share must be in [0, 1], got {args.schedule_share:g}")
    return dict(sigma_range=tuple(args.space_sigma), q_range=tuple(args.space_q),
                steps_range=(int(args.space_steps[0]), int(args.space_steps[1])),
                delta_range=tuple(args.space_delta), schedule_share=args.schedule_share)


# ------------------------------------------------------------------------------ peers
def _prv(history, delta):
    from opacus.accountants import PRVAccountant
    acc = PRVAccountant()
    acc.history = list(history)
    return float(acc.get_epsilon(delta))


def _pld(history, delta):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    total = None
    for sigma, q, count in history:
        pld = pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=q, value_discretization_interval=1e-4,
            pessimistic_estimate=True, use_connect_dots=True).self_compose(count)
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(delta))


PEERS = {"prv": _prv, "pld": _pld}


def _child(conn, name, history, delta):
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (PEER_MEMORY, PEER_MEMORY))
    except (ImportError, ValueError, OSError):
        pass
    t = time.perf_counter()
    try:
        value = PEERS[name](history, delta)
        conn.send(("ok", value, time.perf_counter() - t))
    except BaseException as exc:                # recorded, never fatal
        conn.send((f"error: {type(exc).__name__}: {str(exc)[:80]}", math.nan,
                   time.perf_counter() - t))


class PeerRunner:
    """Peer calls in a forked child each (the peers' imports are paid once, in this
    process, before any timing), killed when they run past ``limit`` seconds."""

    def __init__(self, limit: float):
        self.limit = limit
        import opacus.accountants  # noqa: F401
        import dp_accounting.pld.privacy_loss_distribution  # noqa: F401
        self.ctx = mp.get_context("fork")

    def call(self, name, history, delta):
        """(status, epsilon, seconds); status "ok", "timeout" or "error: ..."."""
        conn, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_child, args=(child, name, history, delta),
                                daemon=True)
        proc.start()
        try:
            if conn.poll(self.limit):
                return conn.recv()
            return "timeout", math.nan, self.limit
        except EOFError:                         # killed (e.g. out of memory)
            return "error: child died", math.nan, math.nan
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join()
            conn.close()
            child.close()

    def close(self):
        pass


def peer_time(runner, name, history, delta, repeats=3, budget=3.0):
    """Median of up to ``repeats`` calls (only one when a call takes over ``budget`` s)."""
    status, value, t = runner.call(name, history, delta)
    times = [t]
    while status == "ok" and len(times) < repeats and sum(times) < budget:
        status2, value2, t2 = runner.call(name, history, delta)
        if status2 != "ok":
            break
        times.append(t2)
    return status, value, statistics.median(times)


# --------------------------------------------------------------------------------- pb
def pb_run(history, delta, repeats=3):
    """Median of ``repeats`` from-scratch runs (one only when a run takes over 5 s)."""
    from pb_accountant import PrivacyBucketsAccountant
    times, bounds = [], None
    while len(times) < repeats and sum(times) <= 5.0:
        acc = PrivacyBucketsAccountant()
        acc.history = list(history)
        t = time.perf_counter()
        bounds = acc.get_epsilon_bounds(delta)
        times.append(time.perf_counter() - t)
    return bounds, statistics.median(times)


def _pb_child(conn, history, delta):
    b, t = pb_run(history, delta)
    conn.send((b.lower, b.upper, t))


def pb_limited(history, delta, limit):
    """pb_run in a forked child: (status, lower, upper, seconds); past ``limit`` seconds
    the run is stopped and recorded as "timeout" (its time then reads as the limit)."""
    ctx = mp.get_context("fork")
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=_pb_child, args=(child, history, delta), daemon=True)
    proc.start()
    try:
        if conn.poll(limit):
            low, up, t = conn.recv()
            return "ok", low, up, t
        return "timeout", math.nan, math.nan, limit
    except EOFError:
        return "error: child died", math.nan, math.nan, math.nan
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        conn.close()
        child.close()


FIELDS = ["index", "kind", "segments", "steps", "sigma_min", "sigma_max", "q_min", "q_max",
          "delta", "pb_status", "pb_time", "pb_low", "pb_up", "width", "prv_status", "prv_eps",
          "prv_time", "pld_status", "pld_eps", "pld_time", "peer", "peer_time", "ratio",
          "up_vs_pld"]


def measure(setting, runner, limit, pb_limit):
    history, delta = setting["history"], setting["delta"]
    pb_status, low, up, t_pb = pb_limited(history, delta, pb_limit)
    if pb_status != "ok":
        width = math.nan
    else:
        width = (up - low) / up if (up > 0 and math.isfinite(up)) else (
            0.0 if up == 0 else math.inf)
    row = {"index": setting["index"], "kind": setting["kind"], "segments": len(history),
           "steps": sum(c for _, _, c in history),
           "sigma_min": min(s for s, _, _ in history), "sigma_max": max(s for s, _, _ in history),
           "q_min": min(q for _, q, _ in history), "q_max": max(q for _, q, _ in history),
           "delta": delta, "pb_status": pb_status, "pb_time": t_pb, "pb_low": low,
           "pb_up": up, "width": width}
    best = None
    for name in ("pld", "prv"):
        if runner is None:
            row.update({f"{name}_status": "skipped", f"{name}_eps": math.nan,
                        f"{name}_time": math.nan})
            continue
        # the second peer only needs to beat the first: its limit is the first's time
        # (a slower answer cannot be the faster peer's), which keeps the suite short
        runner[name].limit = limit if best is None else min(limit, 1.5 * best[1] + 0.5)
        status, value, t = peer_time(runner[name], name, history, delta)
        row.update({f"{name}_status": status, f"{name}_eps": value, f"{name}_time": t})
        if status == "ok" and math.isfinite(value) and (best is None or t < best[1]):
            best = (name, t)
    if best is None:
        # no peer answered: the ratio is at least limit / pb's time ("> limit")
        row["peer"], row["peer_time"] = ("none", math.nan) if runner is None else (
            f">{limit:g}s", limit)
    else:
        row["peer"], row["peer_time"] = best
    row["ratio"] = row["peer_time"] / t_pb if t_pb > 0 else math.inf
    if pb_status != "ok" and not row["peer"] in PEERS:
        row["ratio"] = math.nan          # both stopped at their limits: no ratio
    pld = row["pld_eps"]
    row["up_vs_pld"] = (up / pld - 1.0 if row["pld_status"] == "ok" and
                        math.isfinite(pld) and pld > 0 else math.nan)
    return row


def read_csv(path):
    """A saved table, numbers parsed."""
    text = {"kind", "peer", "prv_status", "pld_status", "pb_status"}
    rows = []
    with open(path, newline="") as fh:
        for raw in csv.DictReader(fh):
            rows.append({k: (v if k in text else (int(v) if k in ("index", "segments", "steps")
                                                  else float(v))) for k, v in raw.items()})
    return rows


def add_suite_arguments(parser):
    """``--only``, ``--n``, ``--seed``, the space's ranges and ``--csv``: which settings of
    which suite a check script reads (``chosen_jobs``)."""
    parser.add_argument("--only", type=int, nargs="*", default=[],
                        help="indices of bench_random.draw_settings(n, seed, ranges)")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=12)
    add_space_arguments(parser, suffix="-range")
    parser.add_argument("--csv", help="that suite's table (for PLD's and PRV's epsilon); "
                        "default benchmarks/results/random_suite.csv for seed 12")


def chosen_jobs(args):
    """``suite_jobs`` of the settings ``add_suite_arguments``' options name (the table
    defaults to seed 12's only for seed 12: another seed's settings never meet its
    peers)."""
    if not args.only:
        return []
    path = args.csv or (os.path.join(os.path.dirname(__file__), "results",
                                     "random_suite.csv") if args.seed == 12 else None)
    return suite_jobs(args.only, draw_settings(args.n, args.seed, **space(args)), path)


def suite_jobs(indices, settings, path):
    """(name, history, delta, saved row or {}) of the settings numbered ``indices``; the
    table saved at ``path`` (if any) gives the peers' answers, for the check scripts."""
    rows = {r["index"]: r for r in read_csv(path)} if path and os.path.exists(path) else {}
    return [(f"#{i}", settings[i]["history"], settings[i]["delta"], rows.get(i, {}))
            for i in indices]


def peer_answers(row) -> str:
    """The peers' epsilons of a saved row, for a check script's line."""
    return "  ".join(f"{k[:3].upper()} {row[k]:.6f}" for k in ("pld_eps", "prv_eps")
                     if math.isfinite(row.get(k, math.nan)))


def draw(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    r = [x for x in rows if math.isfinite(x["ratio"])]
    if not r:
        return
    order = sorted(range(len(r)), key=lambda i: r[i]["ratio"])
    ratio = np.array([r[i]["ratio"] for i in order])
    width = np.array([r[i]["width"] for i in order])
    colour = np.clip(np.where(np.isfinite(width), width, 1.0), 1e-7, 1.0)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    sc = ax.scatter(np.arange(len(ratio)), ratio, c=colour, cmap="viridis_r",
                    norm=LogNorm(vmin=1e-6, vmax=1e-2), s=14)
    ax.set_yscale("log")
    ax.axhline(5.0, color="red", lw=0.8, ls="--", label="target 5x")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("random settings, sorted by ratio")
    ax.set_ylabel("faster peer's time / pb's time")
    ax.set_title(f"pb (both bounds, from scratch) vs faster of Opacus PRV and PLD (1e-4), "
                 f"{len(ratio)} settings", fontsize=9)
    fig.colorbar(sc, ax=ax, label="pb width (up - low) / up")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(row):
    hist = f"{row['segments']} seg" if row["segments"] > 1 else "1 seg"
    return (f"#{row['index']} {row['kind']} {hist}, steps {row['steps']}, sigma "
            f"{row['sigma_min']:.3g}-{row['sigma_max']:.3g}, q {row['q_min']:.3g}-"
            f"{row['q_max']:.3g}, delta {row['delta']:.2g}: pb "
            f"{'' if row['pb_status'] == 'ok' else '>'}{row['pb_time']:.3f}s "
            f"[{row['pb_low']:.6g}, {row['pb_up']:.6g}] width {row['width']:.2e}, peer "
            f"{row['peer']} {row['peer_time']:.3f}s, ratio {row['ratio']:.2f}, up/PLD-1 "
            f"{row['up_vs_pld']:+.2e}")


def summary(rows, out=sys.stdout):
    ratios = [r["ratio"] for r in rows if math.isfinite(r["ratio"])]
    widths = [r["width"] for r in rows if not math.isnan(r["width"])]
    above = [r["up_vs_pld"] for r in rows if math.isfinite(r["up_vs_pld"])]
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"settings: {len(rows)} (ratio undefined where pb and both peers hit their limits: "
      f"{sum(math.isnan(r['ratio']) for r in rows)})")
    if ratios:
        p(f"ratio (faster peer / pb): worst {min(ratios):.2f}, median "
          f"{statistics.median(ratios):.2f}, best {max(ratios):.2f}; "
          f"below 5x: {sum(x < 5 for x in ratios)}, below 1x: {sum(x < 1 for x in ratios)}")
    fin = [w for w in widths if math.isfinite(w)]
    p(f"width (pb finished): worst {max(widths):.3e}, median {statistics.median(fin) if fin else math.nan:.3e};"
      f" above 5e-4: {sum(w > 5e-4 for w in widths)}; infinite upper bounds: "
      f"{sum(r['pb_up'] == math.inf for r in rows)}")
    if above:
        p(f"up vs PLD: worst {max(above):+.3e}, median {statistics.median(above):+.3e}; "
          f"above +3e-4: {sum(a > 3e-4 for a in above)}")
    for name in ("prv", "pld"):
        st = [r[f"{name}_status"] for r in rows]
        p(f"{name}: ok {st.count('ok')}, timeout {st.count('timeout')}, other "
          f"{len(st) - st.count('ok') - st.count('timeout')}")
    p(f"pb: ok {sum(r['pb_status'] == 'ok' for r in rows)}, timeout "
      f"{sum(r['pb_status'] == 'timeout' for r in rows)} (time read as the limit, ratio "
      f"then an upper bound on the true one)")
    p(f"total pb time {sum(r['pb_time'] for r in rows if math.isfinite(r['pb_time'])):.1f}s")
    p("worst ratios:")
    for r in sorted((r for r in rows if math.isfinite(r["ratio"])), key=lambda r: r["ratio"])[:8]:
        p("  " + _fmt(r))
    p("worst widths:")
    for r in sorted(rows, key=lambda r: -r["width"] if not math.isnan(r["width"]) else 0)[:8]:
        p("  " + _fmt(r))
    if above:
        p("worst up vs PLD:")
        for r in sorted((r for r in rows if math.isfinite(r["up_vs_pld"])),
                        key=lambda r: -r["up_vs_pld"])[:5]:
            p("  " + _fmt(r))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--quick", action="store_true", help="12 settings")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--peer-limit", type=float, default=10.0)
    parser.add_argument("--pb-limit", type=float, default=30.0,
                        help="pb's limit per setting (its runs together); past it: timeout")
    parser.add_argument("--only", type=int, nargs="*", help="setting indices to run")
    add_space_arguments(parser)
    parser.add_argument("--name", help="file stem of the table (default: random_suite for "
                        "seed 12 over the whole space, random_suite_seed<seed> otherwise)")
    parser.add_argument("--summarize", metavar="CSV",
                        help="only print the summary and draw the picture of a saved table")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.summarize:
        rows = read_csv(args.summarize)
        summary(rows)
        out = os.path.dirname(os.path.abspath(args.summarize))
        stem = os.path.splitext(os.path.basename(args.summarize))[0]
        with open(os.path.join(out, f"{stem}_summary.txt"), "w") as fh:
            summary(rows, fh)
        draw(rows, os.path.join(out, f"{stem}.png"))
        return
    n = 12 if args.quick else args.n
    ranges = space(args)
    settings = draw_settings(n, args.seed, **ranges)
    if args.only:
        settings = [s for s in settings if s["index"] in set(args.only)]
    os.makedirs(args.out, exist_ok=True)
    pb_run([(1.0, 0.01, 10)], 1e-5, 1)                   # imports, not timed
    runner = None if args.no_peers else {p: PeerRunner(args.peer_limit) for p in PEERS}
    rows = []
    # the README's table is seed 12's over the whole space; anything else keeps its own
    stem = args.name or ("random_suite" if args.seed == 12 and ranges == space(None)
                         else f"random_suite_seed{args.seed}")
    csv_path = os.path.join(args.out, f"{stem}.csv")
    try:
        for s in settings:
            row = measure(s, runner, args.peer_limit, args.pb_limit)
            rows.append(row)
            print(_fmt(row), flush=True)
            with open(csv_path, "w", newline="") as fh:       # saved as it goes
                w = csv.DictWriter(fh, fieldnames=FIELDS)
                w.writeheader()
                w.writerows(rows)
    finally:
        if runner is not None:
            for r in runner.values():
                r.close()
    print()
    summary(rows)
    with open(os.path.join(args.out, f"{stem}_summary.txt"), "w") as fh:
        summary(rows, fh)
    draw(rows, os.path.join(args.out, f"{stem}.png"))
    print(f"wrote {csv_path} and {stem}.png")


if __name__ == "__main__":
    main()
