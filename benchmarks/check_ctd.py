"""An independent reference where pb and the peers disagree: connect-the-dots, tilted.

For a Poisson-sampled Gaussian history (add/remove neighbours) each step's privacy loss
pair is discretised onto the loss grid k h by connect-the-dots: the A- and B-mass of the
events with loss in (t_{k-1}, t_k] are split onto the two end points, keeping both masses.
That pair dominates the true one (Doroshenko et al. 2022, "Connect the Dots"), so in
exact arithmetic its delta is an upper bound, and its error shrinks like h^2. Losses
beyond ``tmax`` count as +inf. The steps are composed by FFT in plain float64 after
every row is tilted by e^{lambda t} (a tilt commutes with convolution), lambda putting
the tilted composed mean at epsilon: the FFT's round-off is then relative to the mass
that decides delta, not to the bulk, which is what makes delta near 1e-12 computable
this way. delta(eps) = sum_t A(t) (1 - e^{eps - t})_+, per direction; the larger counts.

Products trim their far tails (the low end below 1e-15 of the peak; the high end where
its mass, counted in full and reported, stays below 1e-7 delta in all). Float round-off
makes the result an *estimate*, not a certificate. Run two spacings (``--h``) to see the
O(h^2) part converge (it is not small at the default spacing where epsilon is small:
2e-6 reads 9.5e-4 above the true value at epsilon 0.007, sigma 1.09607, q 1.688e-5,
16,384 steps, delta 1.85e-6, where halving h twice lands inside pb's bracket, and
1.1e-3 above pb's upper bound at 0.0268, where h 5e-7 is still 4e-6 above it and only
the extrapolation e(h/2) - (e(h) - e(h/2)) / 3 lands inside; an extrapolated value is
no longer one-sided); that does not show the round-off: products clip the FFT's noise
to >= 0, which only adds mass, and where the tail that decides delta sits within about
1e-11 of a row's tilted peak (small q, segments of different sigma) the estimate comes
out high (a review measured +3.6e-5 in epsilon on the README's zoomed #1 against a
long-double run, and 7-digit agreement on the other settings the README quotes;
``--long-double`` composes in long double: at sigma 0.8, q 1.2e-5, 150,001 steps, delta
1e-10 float64 gives 0.0617126 and 0.0617048 at h 2e-6 and 1e-6, long double 0.0616999 and
0.0616951, converging as h^2 to about 0.0616935). It
shares no code with pb or the peers: where they disagree it says which one is off
(README, "How it compares").

    python benchmarks/check_ctd.py --history 0.819916,7.794e-05,9462254 --delta 2.874e-12
    python benchmarks/check_ctd.py --only 31 192            # random-suite settings (seed 12)
    python benchmarks/check_ctd.py --history 0.8,1.2e-05,150001 --delta 1e-10 --h 2e-6 1e-6 \
        --long-double
    python benchmarks/check_ctd.py --only 23 --seed 7 --n 24 --sigma-range 0.4 1 \
        --q-range 1e-5 1e-4 --steps-range 1e4 1e7 \
        --csv benchmarks/results/random_suite_region.csv
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
from scipy import fft as sfft
from scipy import optimize, special

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: entries of a tilted product below this fraction of its peak are cut (lower tail moved
#: to the first kept point, upper tail counted as lost mass, reported)
TRIM = 1e-15


def step_pair(sigma: float, q: float, h: float, tmax: float):
    """One step's connect-the-dots A-row on the grid t = k h over [max(log(1 - q),
    -tmax), tmax]: (t, A, A-mass above tmax, B-mass below -tmax).  B = e^{-t} A on the
    grid (the pair's B-row); the mass beyond either end is loss +inf for its direction,
    and the A-mass below the grid sits on its first point."""
    s2 = sigma * sigma
    low = math.log1p(-q) if q < 1.0 else -math.inf
    t = np.arange(math.floor(max(low, -tmax) / h), math.ceil(tmax / h) + 1) * h
    with np.errstate(divide="ignore", invalid="ignore"):
        # the x with loss log(1 - q + q e^{(2x - 1) / (2 sigma^2)}) = t
        x = s2 * np.log(np.expm1(t) / q + 1.0) + 0.5
    x[t <= low] = -np.inf

    def interval_masses(mean):
        z = (x - mean) / sigma
        right, left = special.ndtr(-z), special.ndtr(z)
        m = np.where(z[1:] > 0, right[:-1] - right[1:], left[1:] - left[:-1])
        return np.maximum(m, 0.0), float(right[-1]), float(left[0])

    b, b_top, b_bottom = interval_masses(0.0)
    a1, a1_top, a1_bottom = interval_masses(1.0)
    a = (1.0 - q) * b + q * a1
    e_lo, e_hi = np.exp(-t[:-1]), np.exp(-t[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.clip((b - a * e_hi) / (e_lo - e_hi), 0.0, a)
    A = np.zeros(len(t))
    A[:-1] += lower
    A[1:] += a - lower
    # the A-mass below the grid (-tmax above log(1 - q): q near 1) moves up to its first
    # point, which can only raise A||B's delta (its B-mass is the -inf atom's already)
    A[0] += (1.0 - q) * b_bottom + q * a1_bottom
    return t, A, (1.0 - q) * b_top + q * a1_top, b_bottom


def _tilted(P, t, lam):
    """(P e^{lam t} / m, log m), m its largest entry: formed in log space, so the entries
    near that peak keep their digits at any tilt (scaling by the largest e^{lam t} on the
    grid instead underflowed them where the grid reaches far beyond epsilon: at epsilon
    0.0071, tilt 1e3 and tmax 4, every entry near epsilon was 0, and the estimate came
    out below the closed form)."""
    with np.errstate(divide="ignore"):
        lw = np.log(P) + lam * t
    top = float(lw.max())
    return np.exp(lw - top), top


#: the products' precision (``--long-double``: numpy's long double, 64-bit significands on
#: x86, where scipy's FFT computes in it too)
FFT_DTYPE = np.float64


class Tilted:
    """A measure on t0 + k h stored tilted: value(t) = R(t) e^{log_scale - lam t}.

    Products trim their ends: below, the entries under TRIM times the peak (their mass
    moved to the first kept point, far below epsilon, where it cannot matter); above,
    the longest tail whose untilted mass (at most its tilted mass times e^{log_scale -
    lam t} at its start) stays within ``budget``, that bound added to ``cut``, which
    ``delta`` counts in full."""

    def __init__(self, R, t0, h, lam, log_scale, budget, cut=0.0):
        self.R, self.t0, self.h, self.lam = R, t0, h, lam
        self.log_scale, self.budget, self.cut = log_scale, budget, cut

    @classmethod
    def of(cls, P, t0, h, lam, budget):
        R, top = _tilted(P, t0 + np.arange(len(P)) * h, lam)
        s = R.sum()
        return cls(R / s, t0, h, lam, math.log(s) + top, budget)

    def times(self, other: "Tilted") -> "Tilted":
        n = len(self.R) + len(other.R) - 1
        size = sfft.next_fast_len(n, real=True)
        x, y = (np.asarray(r, dtype=FFT_DTYPE) for r in (self.R, other.R))
        z = sfft.irfft(sfft.rfft(x, size) * sfft.rfft(y, size), size)[:n]
        z = np.maximum(z, 0.0)
        t0, log_scale = self.t0 + other.t0, self.log_scale + other.log_scale
        i = int(np.flatnonzero(z > TRIM * z.max())[0])
        with np.errstate(over="ignore"):
            tail = np.cumsum(z[::-1])[::-1] * np.exp(
                log_scale - self.lam * (t0 + np.arange(n) * self.h))
        fits = np.flatnonzero(tail[i + 1:] <= self.budget)
        j = i + 1 + int(fits[0]) if fits.size else n
        kept = z[i:j].copy()
        kept[0] += z[:i].sum()
        cut = self.cut + other.cut + (float(tail[j]) if j < n else 0.0)
        # kept at sum 1 (its sum goes to the scale): where a cut takes most of the tilted
        # mass, the rows would otherwise shrink at every squaring until they underflow
        # (sigma 0.442, q 0.975, 48,945 steps: IndexError after 19 squarings)
        total = kept.sum()
        return Tilted(kept / total, t0 + i * self.h, self.h, self.lam,
                      log_scale + math.log(total), self.budget, cut)

    def power(self, n: int) -> "Tilted":
        out, base = None, self
        while n:
            if n & 1:
                out = base if out is None else out.times(base)
            n >>= 1
            if n:
                base = base.times(base)
        return out

    def delta(self, eps: float) -> float:
        if not hasattr(self, "_masses"):      # untilted, once: a root search asks often
            self._t = self.t0 + np.arange(len(self.R)) * self.h
            with np.errstate(divide="ignore", over="ignore"):
                # (in log space: far below the tilted peak e^{log_scale - lam t} may
                # overflow where R has underflowed to 0)
                self._masses = np.exp(np.log(self.R) + self.log_scale - self.lam * self._t)
        sel = self._t > eps
        v = self._masses[sel] * -np.expm1(eps - self._t[sel])
        return float(v.sum()) + self.cut


def _rows(history, h, tmax, direction):
    """(t0, P, count, mass at +inf per step) of each segment, for ``direction``: "ab" the
    A-row on t, "ba" the B-row on s = -t."""
    rows = []
    for sigma, q, count in history:
        t, A, a_top, b_bottom = step_pair(sigma, q, h, tmax)
        if direction == "ab":
            rows.append((t[0], A, count, a_top))
        else:
            rows.append((-t[-1], (A * np.exp(-t))[::-1].copy(), count, b_bottom))
    return rows


def delta_curve(history, h: float, tmax: float, eps: float, direction: str, budget: float):
    """The composed ``direction``'s delta as a function and the mass it counts in full
    (cut tails, each within ``budget``, and losses beyond tmax), tilted for ``eps``;
    None where no loss reaches eps."""
    rows = _rows(history, h, tmax, direction)
    grids = [(t0 + np.arange(len(P)) * h, P, c) for t0, P, c, _ in rows]
    if sum(c * float(t[P > 0].max()) for t, P, c in grids) <= eps:
        return None

    def tilted_mean(lam):
        total = 0.0
        for t, P, c in grids:
            w = _tilted(P, t, lam)[0]
            total += c * float((w * t).sum() / w.sum())
        return total - eps

    # (a direction whose losses reach eps only in its far tail keeps the largest tilt)
    if tilted_mean(1e-3) >= 0:
        lam = 1e-3
    elif tilted_mean(1e3) <= 0:
        lam = 1e3
    else:
        lam = optimize.brentq(tilted_mean, 1e-3, 1e3)
    total = None
    for t0, P, c, _ in rows:
        part = Tilted.of(P, t0, h, lam, budget).power(c)
        total = part if total is None else total.times(part)
    inf = -math.expm1(sum(c * math.log1p(-top) for _, _, c, top in rows))
    return (lambda e: total.delta(e) + inf), total.cut + inf


def epsilon_ctd(history, delta: float, h: float, tmax: float, start: float):
    """(epsilon, counted): the connect-the-dots epsilon at ``delta`` (the larger
    direction), tilted at ``start`` and once more at the answer where it moved by more
    than 1%, and the mass its delta counts in full (cut tails and losses beyond tmax)."""
    best, counted = 0.0, 0.0
    total = sum(c for _, _, c in history)
    for direction in ("ab", "ba"):
        guess, full = start, 0.0
        for _ in range(2):
            # (a cut in a product of m steps is counted again in every later product:
            # up to total / m times)
            got = delta_curve(history, h, tmax, guess, direction, 1e-7 * delta / total)
            if got is None:
                eps = 0.0
                break
            curve, full = got
            lo, hi = 0.0, max(2.0 * guess, 1.0)
            for _ in range(64):
                if curve(hi) <= delta:
                    break
                hi *= 2.0
            else:
                return math.inf, full      # the mass counted in full exceeds delta
            if curve(lo) <= delta:
                eps = 0.0
                break
            eps = optimize.brentq(lambda e: curve(e) - delta, lo, hi, xtol=1e-12, rtol=1e-10)
            if abs(eps - guess) <= 0.01 * guess:
                break
            guess = eps
        if eps >= best:
            best, counted = eps, full
    return best, counted


def tail_end(history, delta: float) -> float:
    """A tmax (at least 4) beyond which the steps' A- and B-mass, all steps together, is
    below delta / 1e6: the pessimistic count of that mass as loss +inf stays negligible."""
    tmax = 4.0
    while tmax < 256.0:
        top = sum(c * sum(step_pair(s, q, tmax / 4.0, tmax)[2:]) for s, q, c in history)
        if top <= 1e-6 * delta:
            break
        tmax *= 2.0
    return tmax


def _shown(x: float) -> str:
    """Six decimals, or seven significant digits below 0.1 (where six decimals would
    hide the digits pb's bracket differs in)."""
    return f"{x:.6f}" if abs(x) >= 0.1 else f"{x:.7g}"


def main(argv=None):
    import bench_random as br
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", nargs="*", default=[], help="sigma,q,steps entries")
    parser.add_argument("--delta", type=float)
    br.add_suite_arguments(parser)
    parser.add_argument("--tmax", type=float, help="largest step loss kept (default: "
                        "where the mass beyond is below delta / 1e6, at least 4)")
    parser.add_argument("--h", type=float, nargs="*",
                        help="grid spacings (default: 2e-6 times max(1, epsilon); coarse where "
                             "epsilon is below about 0.1: give smaller ones there)")
    parser.add_argument("--long-double", action="store_true",
                        help="compose in long double (slower; where float64's round-off "
                             "shows, as at small q and small delta)")
    args = parser.parse_args(argv)
    global FFT_DTYPE
    FFT_DTYPE = np.longdouble if args.long_double else np.float64
    if args.history and not (args.delta is not None and 0 < args.delta < 1):
        parser.error(f"--history needs --delta in (0, 1), got {args.delta}")
    if any(not h > 0 for h in args.h or ()) or (args.tmax is not None and not args.tmax > 0):
        parser.error(f"--h and --tmax must be positive, got {args.h} and {args.tmax}")
    from pb_accountant import PrivacyBucketsAccountant
    jobs = []
    if args.history:
        try:
            history = [(float(s), float(q), int(c)) for s, q, c in
                       (e.split(",") for e in args.history)]
        except ValueError:
            parser.error(f"--history entries must be sigma,q,steps; got {args.history}")
        jobs.append(("given", history, args.delta, {}))
    jobs += br.chosen_jobs(args)
    for name, history, delta, row in jobs:
        acc = PrivacyBucketsAccountant()
        acc.history = list(history)
        b = acc.get_epsilon_bounds(delta)
        tmax = args.tmax or tail_end(history, delta)
        for h in args.h or [2e-6 * max(1.0, b.upper)]:
            est, counted = epsilon_ctd(history, delta, h, tmax, b.upper)
            off = max(b.lower - est, est - b.upper, 0.0)
            where = "inside" if off == 0 else f"outside by {off / b.upper:.2g} relative"
            print(f"{name}: delta {delta:.4g}  pb [{_shown(b.lower)}, {_shown(b.upper)}]  "
                  f"connect-the-dots {_shown(est)} at h {h:.2g}, tmax {tmax:g}, counted in full "
                  f"{counted / delta:.1e} delta ({where})  {br.peer_answers(row)}",
                  flush=True)


if __name__ == "__main__":
    main()
