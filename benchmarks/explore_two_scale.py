"""Exploration, not a bound the library reports: two-scale leaves for small sampling rates.

At q ~ 1e-5..1e-4 and sigma ~ 0.4..1.2 one step's loss is a narrow bulk (losses ~ q)
plus a rare tail reaching past 3.  Its standard deviation is set by the tail, so a
leaf spaced at ``leaf_resolution`` times it is far coarser than the bulk, and the bulk's
rounding, repeated at every one of millions of steps, decides the width
(docs/method.md §3, "Where the width target is still missed"): at sigma 0.5, q 1e-5,
10^7 steps, delta 1e-5 the bracket is 2.5e-2 wide on the default grids and stays so
with the final grids' resolution 32 times finer; halving the leaf spacing as well
narrows it to 7.6e-3, quartering it (the finest level) to 2.2e-3.

A two-scale leaf splits the step's events at a loss W (the first leaf point above
which one step's A-mass is at most REST_MASS): the bulk (loss <= W) on a grid spaced at
``leaf_resolution`` times the bulk's own spread, the rest on the ordinary leaf grid.
For 2^k steps it keeps two parts, B_k (every step in the bulk, fine) and R_k (the rest,
coarse):

    B_{k+1} = B_k * B_k,        R_{k+1} = 2 B_k * R_k + R_k * R_k = R_k * (2 B_k + R_k),

B_k squared down to R_k's spacing for its sum with R_k (the engine's squaring:
masses kept, connect-the-dots placement).  B's grid coarsens by the engine's own rule
as its spread grows; once it reaches R's spacing the parts are added and the ordinary
squaring goes on.  An event of the rest is then rounded to the coarse grid about once
per squaring level instead of once per step.

Both representations are built: the split pairs' atoms add (upper bound), and groups
of the two parts with the same label merge, each row brought to the larger of the two
log-scales first (lower bound: any grouping bounds from below).  The parts are
sub-probability measures; each is kept normalised with its A- and B-masses as weights,
so the engine's product formulas for the infinity atoms apply.  The sums' and weights'
roundings are charged only roughly: the numbers show tightness and cost, they are not
certified.  Power-of-two step counts and one mechanism only.  The script compares the
bracket with the engine's own at refinement levels 0-2 and with ``check_ctd.py``'s
estimate (extrapolated from two spacings).

    python benchmarks/explore_two_scale.py --sigma 0.5 --q 1e-5 --log2-steps 23 \\
        --delta 1e-5
    python benchmarks/explore_two_scale.py --random 8 --seed 5      # corner settings
"""

import argparse
import dataclasses
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pb_accountant import SubsampledGaussian  # noqa: E402
from pb_accountant.buckets import GroupedBuckets, Grid, SplitBuckets, leaf_masses  # noqa: E402
from pb_accountant.composition import (BucketSet, Composer, canonical_history,  # noqa: E402
                                       compose_split, follow_plan)
from pb_accountant.engine import PrivacyBuckets, _two_sided_bounds  # noqa: E402

U = 2.0 ** -53
#: the rest holds at most this A-mass of one step (W is the first coarse point past it)
REST_MASS = 1e-3


def _grid_covering(step, i_lo, i_hi):
    n = max(2, math.ceil((i_hi - i_lo) / 2))
    n += n % 2
    return Grid(step, n, i_lo + n)


def _split_set(split):
    return BucketSet(split.grid, (("split", (split,)),))


def _coarsened(part, log_factor):
    """Both representations of a part squared until the spacing is ``log_factor``
    (``BucketSet.coarsened_to`` on the two together)."""
    split, grouped = part
    joint = BucketSet(split.grid, (("split", (split.split,)), ("grouped", (grouped,))))
    joint = joint.coarsened_to(log_factor)
    return _split_set(joint.split), joint.grouped


def _scaled(part, wa, wb):
    """A part with its A-kind rows (A, D, the +inf atom) times wa and its B-kind rows
    (B, C, the -inf atom) times wb: one rounding per entry, charged as 2u relative."""
    s, g = part
    s = s.split
    w = np.array([wa, wb])
    split = SplitBuckets(s.grid, s.rows * w[:, None], s.a_inf * wa, s.b_minf * wb,
                         s.error * w * (1 + 4 * U), s.compositions, s.overflow,
                         s.relative + 2 * U)
    wg = np.array([wa if k in ("A", "D") else wb for k in g.kinds])
    grouped = GroupedBuckets(g.grid, g.rows * wg[:, None], g.error * wg * (1 + 4 * U),
                             g.compositions, g.a_inf * wa, g.b_minf * wb, g.directions,
                             g.relative + 2 * U, g.log_scale)
    return _split_set(split), grouped


def _added(x, y):
    """The sum of two parts (disjoint event sets) on the coarser spacing: the split
    pairs' atoms add; groups with the same label merge (any grouping bounds from below),
    each row brought to the larger of the two log-scales first."""
    d = max(x[0].grid.log_factor, y[0].grid.log_factor)
    x, y = _coarsened(x, d), _coarsened(y, d)
    ends = [(s.grid.offset - s.grid.number_of_buckets, s.grid.offset + s.grid.number_of_buckets)
            for s, _ in (x, y)]
    g = _grid_covering(d, min(e[0] for e in ends), max(e[1] for e in ends))
    (sx, gx), (sy, gy) = x, y
    sx, sy = sx.split, sy.split
    rows = np.zeros((2, g.size))
    log_scale = np.maximum(gx.log_scale, gy.log_scale)
    grows = np.zeros((len(gx.kinds), g.size))
    gerr = np.zeros(len(gx.kinds))
    for s, gr, (start, _) in ((sx, gx, ends[0]), (sy, gy, ends[1])):
        at = start - (g.offset - g.number_of_buckets)
        rows[:, at: at + s.grid.size] += s.rows
        f = np.exp(gr.log_scale - log_scale)
        grows[:, at: at + s.grid.size] += gr.rows * f[:, None]
        gerr += gr.error * f
    split = SplitBuckets(g, rows, sx.a_inf + sy.a_inf, sx.b_minf + sy.b_minf,
                         (sx.error + sy.error) * (1 + 4 * U),
                         max(sx.compositions, sy.compositions), sx.overflow + sy.overflow,
                         np.maximum(sx.relative, sy.relative) + 2 * U)
    grouped = GroupedBuckets(g, grows, gerr * (1 + 8 * U), max(gx.compositions, gy.compositions),
                             gx.a_inf + gy.a_inf, gx.b_minf + gy.b_minf, gx.directions,
                             np.maximum(gx.relative, gy.relative) + 8 * U, log_scale)
    return _split_set(split), grouped


def _product(x, y, budget, options):
    """x * y: the split pair composed by the engine's policy, the groups following its
    plan (as ``Composer`` composes every node)."""
    same = x is y
    z, plan = compose_split(x[0], x[0] if same else y[0], budget, options)
    return z, follow_plan(plan, x[1], x[1] if same else y[1], same)


def _part(pair, step, i_lo, i_hi, keep):
    """(masses, normalised part) of the events whose loss interval (t_{k-1}, t_k]
    passes ``keep``: both parts are cut at the same computed point W, so they partition
    the events; the groups read the same masses (labels: upper ends, as the engine's
    leaves)."""
    g = _grid_covering(step, i_lo, i_hi)
    t = g.losses
    a, b, ea, eb, sh = leaf_masses(pair, t, step)
    kept = keep(np.concatenate(([-np.inf], t)), np.concatenate((t, [np.inf])))
    a, b, ea, eb = (np.where(kept, v, 0.0) for v in (a, b, ea, eb))
    split = _split_set(SplitBuckets.from_masses(g, a, b, ea, eb, sh))
    grouped = GroupedBuckets.from_masses(g, a, b, ea, eb, sh, directions=("ab",))
    w = split.split.masses()
    return w, _scaled((split, grouped), 1.0 / w[0], 1.0 / w[1])


def two_scale_bounds(sigma, q, log2_steps, delta, bulk_resolution=0.04, level=0):
    """(EpsilonBounds of the split pair and the A||B groups, details) for
    (sigma, q)^(2^log2_steps), built from two-scale leaves on the engine's grids of
    refinement ``level``."""
    steps = 2 ** log2_steps
    pair = SubsampledGaussian(sigma, q)
    comp = Composer().refined(level)
    cfg = comp._config(delta, steps)
    budget, opts = cfg[1], comp.options
    leaf = comp._leaf(("split",), pair, cfg)[0][0]
    H = leaf.grid.log_factor
    t = leaf.grid.losses
    A = leaf.split.rows[0]
    above = np.cumsum(A[::-1])[::-1]                  # A-mass at or above each point
    iW = int(np.flatnonzero((t >= 0) & (above <= REST_MASS))[0]) + leaf.grid.offset \
        - leaf.grid.number_of_buckets
    W = iW * H
    inside = t <= W
    m = float(A[inside].sum())
    mu = float((A * t)[inside].sum()) / m
    sd = math.sqrt(max(float((A * (t - mu) ** 2)[inside].sum()) / m, 0.0))
    h = min(2.0 ** math.floor(math.log2(bulk_resolution * max(sd, 1e-300))), H)
    r = int(round(H / h))
    lo, hi = pair.loss_range(budget)
    wB, B = _part(pair, h, math.floor(lo / h) - 4, iW * r + 4, lambda l, u: u <= W)
    wR, R = _part(pair, H, iW - 4, math.ceil(hi / H) + 4, lambda l, u: l >= W)
    # the rest keeps its spacing unless its range needs more than the bucket cap
    keep_spacing = dataclasses.replace(opts, resolution=1e-12)
    X, merged_at = None, None
    for k in range(log2_steps):
        if X is None:
            BB = _product(B, B, budget, opts)
            # 2 B R + R R = R (2 B + R): one product on the coarse grid
            wS = 2 * wB + wR
            S = _added(_scaled(B, *(2 * wB / wS)), _scaled(R, *(wR / wS)))
            R = _product(R, S, budget, keep_spacing)
            B, wB, wR = BB, wB * wB, wR * wS
            if B[0].grid.log_factor >= R[0].grid.log_factor:
                X, merged_at = _added(_scaled(B, *wB), _scaled(R, *wR)), k + 1
        else:
            X = _product(X, X, budget, opts)
    if X is None:
        X = _added(_scaled(B, *wB), _scaled(R, *wR))
    joint = BucketSet(X[0].grid, (("split", (X[0].split,)), ("grouped", (X[1],))))
    bounds = PrivacyBuckets(joint, delta).epsilon_bounds(delta)
    return bounds, {"H": H, "h": h, "W": W, "bulk_sd": sd, "merged_at": merged_at}


def ordinary_bounds(sigma, q, log2_steps, delta, level=0):
    """The engine's bounds (both directions) on its grids of refinement ``level``."""
    history = canonical_history([(SubsampledGaussian(sigma, q), 2 ** log2_steps)])
    return _two_sided_bounds(Composer().refined(level), history, delta, False)


def reference(sigma, q, log2_steps, delta, start):
    """check_ctd's estimate (not a certificate), extrapolated from spacings h and h/2:
    the raw estimate errs upward by about h^2, ``e(h/2) - (e(h) - e(h/2)) / 3`` removes
    that part (and is no longer one-sided: a bracket holding it is evidence, not proof).
    h is relative to epsilon where epsilon is small: at its default (2e-6) the tool
    reads 9.5e-4 above the true value at epsilon 0.007 (sigma 1.09607, q 1.688e-5,
    16,384 steps, delta 1.85e-6)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import check_ctd
    history = [(sigma, q, 2 ** log2_steps)]
    tmax = check_ctd.tail_end(history, delta)
    h = max(min(2e-6 * max(1.0, start), 4e-5 * start), 5e-7)
    coarse, fine = (check_ctd.epsilon_ctd(history, delta, g, tmax, start)[0] for g in (h, h / 2))
    return fine - (coarse - fine) / 3.0


def timed(f, *args, **kwargs):
    t0 = time.perf_counter()
    out = f(*args, **kwargs)
    return out, time.perf_counter() - t0


def one(sigma, q, log2_steps, delta, with_reference=True, level=0):
    row = {"sigma": sigma, "q": q, "log2_steps": log2_steps, "delta": delta, "level": level}
    for lv in (0, 1, 2):
        row[f"level{lv}"] = timed(ordinary_bounds, sigma, q, log2_steps, delta, lv)
    (bounds, info), took = timed(two_scale_bounds, sigma, q, log2_steps, delta, level=level)
    row["two_scale"] = (bounds, took)
    row.update(info)
    if with_reference:
        row["reference"] = timed(reference, sigma, q, log2_steps, delta, bounds.upper)
    return row


def show(row):
    ref = row.get("reference", (None, 0.0))[0]
    merged = (f"merged after 2^{row['merged_at']}" if row["merged_at"] is not None
              else "not merged")
    head = (f"sigma {row['sigma']!r}, q {row['q']!r}, 2^{row['log2_steps']} steps, "
            f"delta {row['delta']!r}: leaf spacing {row['H']:.3g}, bulk spacing "
            f"{row['h']:.3g} (bulk sd {row['bulk_sd']:.3g}, W {row['W']:.3g}), {merged}; "
            f"two-scale on level {row['level']} grids; reference {ref!r}")
    print(head)
    for name in ("level0", "level1", "level2", "two_scale"):
        b, took = row[name]
        against = (f"; against the reference {b.lower / ref - 1:+.2e}, {b.upper / ref - 1:+.2e}"
                   if ref else "")
        print(f"    {name:9s} [{b.lower:.8g}, {b.upper:.8g}] width {b.width:.2e} in "
              f"{took:6.2f} s{against}")
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sigma", type=float, default=0.5)
    p.add_argument("--q", type=float, default=1e-5)
    p.add_argument("--log2-steps", type=int, default=23)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--random", type=int, default=0,
                   help="draw this many settings: sigma 0.4-1.2, q 1e-5-1e-4 (log), "
                        "2^14..2^23 steps, delta 1e-12..1e-5 (log)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--level", type=int, default=0, choices=(0, 1, 2),
                   help="refinement level of the grids the two-scale leaves go on")
    p.add_argument("--no-reference", action="store_true", help="skip check_ctd")
    a = p.parse_args(argv)
    if a.random:
        rng = np.random.default_rng(a.seed)
        for _ in range(a.random):
            sigma = round(float(rng.uniform(0.4, 1.2)), 6)
            q = float(f"{10 ** rng.uniform(-5, -4):.4g}")
            k = int(rng.integers(14, 24))
            delta = float(f"{10 ** rng.uniform(-12, -5):.3g}")
            show(one(sigma, q, k, delta, not a.no_reference, a.level))
    else:
        show(one(a.sigma, a.q, a.log2_steps, a.delta, not a.no_reference, a.level))


if __name__ == "__main__":
    main()
