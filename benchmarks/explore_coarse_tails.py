"""Exploration, not a bound: would a leaf with coarse tail intervals cost tightness?

Leaf grids of small-q pairs are mostly tail: at sigma 1, q 0.01 a leaf of ~8,000 points
spends ~7,000 on losses above 0.3, and leaf masses are ~60% of the 100-epoch schedule's
time (issue 12).  This script measures, in plain floating point (no certification),
how far epsilon moves when the leaf's intervals above loss ``--tau`` are ``--merge``
grid spacings wide, each split onto its own end points as the split pair splits every
interval (any partition gives a dominating pair; only tightness is at stake):

    python benchmarks/explore_coarse_tails.py --sigma 1 --q 0.01 --steps 8192 \\
        --delta 1e-5 --tau 0.3 --merge 16

One direction only (A = the mixture, B = N(0, s^2)).  The n-fold composition is an FFT
power on a wide cyclic grid, of the A row tilted toward the saddle point so that its
round-off is small where delta is decided; the script prints a round-off estimate
beside each epsilon, and a change not well above it says nothing.

Measured (sigma 1, q 0.01, spacing 2^-11, tau 0.3, merge 16: 8,213 -> 1,110 leaf
points), epsilon moves by 3.2e-5 at 256 steps and delta 1e-5; 1.1e-5 and 2.0e-5 at
1,024 steps and delta 1e-5 and 1e-10; 1.6e-5 at delta 1e-14 (reach 5); 3.2e-6 and 5.1e-6
at 8,192 steps and delta 1e-5 and 1e-10.  A lower threshold (0.1) or wider intervals
(64 spacings) cost about 1e-4 at 8,192 steps and delta 1e-10.  The fine estimates lie
within 4e-5 of pb's certified brackets.
"""

import argparse
import math

import numpy as np
from scipy import optimize, special


def interval_masses(cuts, sigma, q):
    """A = (1-q) N(0, s^2) + q N(1, s^2) and B = N(0, s^2) masses of the loss intervals
    (-inf, c_0], (c_0, c_1], ..., (c_last, inf), tail-side CDF differences."""
    x = sigma ** 2 * np.log1p(np.expm1(cuts) / q) + 0.5
    x = np.concatenate(([-np.inf], x, [np.inf]))

    def mass(shift):
        z = (x - shift) / sigma
        left, right = special.ndtr(z), special.ndtr(-z)
        return np.where(z[1:] > 0, right[:-1] - right[1:], left[1:] - left[:-1])

    b = mass(0.0)
    return (1 - q) * b + q * mass(1.0), b


def split_leaf(points, spacing, k0, size, sigma, q):
    """The A row on the fine grid (index k - k0) from intervals cut at ``points`` (grid
    indices), each interval's masses split onto its two end points (its B row is
    e^{-t} A by construction), and the A-mass above the grid (distinguishing)."""
    t = points * spacing
    a, b = interval_masses(t, sigma, q)
    A = np.zeros(size)
    idx = points - k0
    A[idx[0]] += a[0]
    f = np.exp(np.diff(t))
    ai, bi = a[1:-1], b[1:-1]
    beta = np.clip((ai * f - bi * np.exp(t[1:])) / (f - 1.0), 0.0, ai)
    np.add.at(A, idx[:-1], ai - beta)
    np.add.at(A, idx[1:], beta)
    return A, a[-1]


def epsilon(A, a_inf, steps, delta, spacing, k0, theta):
    """(epsilon estimate, relative round-off estimate) of the n-fold composition.

    A split pair's atoms have B = e^{-t} A exactly, and so have its products, so
    delta(eps) = sum over t > eps of A_n(t) (1 - e^{eps - t}) (+ the infinity mass).
    The A row is tilted by e^{theta t} before the transform (tilting commutes with
    convolution): with theta near the saddle point, the tilted row peaks where delta is
    decided, and the transform's round-off is relative to the values there."""
    n_fft = 1 << math.ceil(math.log2(int(40.0 / spacing) + len(A)))
    t_leaf = (k0 + np.arange(len(A))) * spacing
    # composed index j holds loss (steps k0 + j) spacing modulo the cyclic length: read
    # as the representative in [-16, n_fft spacing - 16) (where the mass is)
    low = int(-16.0 / spacing)
    t = (np.mod(steps * k0 + np.arange(n_fft) - low, n_fft) + low) * spacing
    # the tilted leaf, normalised: A e^{theta t} / M, M = sum of A e^{theta t}
    w = A * np.exp(theta * (t_leaf - t_leaf.max()))
    log_m = theta * t_leaf.max() + math.log(w.sum())
    z = np.zeros(n_fft)
    z[: len(A)] = w / w.sum()
    tilted = np.fft.irfft(np.fft.rfft(z) ** steps, n_fft)
    # A_n(t) = tilted(t) M^steps e^{-theta t}
    infinity = -math.expm1(steps * math.log1p(-a_inf))

    def weight(mask):
        return np.exp(steps * log_m - theta * t[mask])

    def excess(eps):
        up = t > eps
        return (np.sum(np.maximum(tilted[up], 0.0) * weight(up) * -np.expm1(eps - t[up]))
                + infinity - delta)

    if excess(0.0) <= 0.0:
        return 0.0, math.inf
    if excess(60.0) > 0.0:
        return math.inf, 0.0      # the mass above --reach alone exceeds delta: raise it
    eps = optimize.brentq(excess, 0.0, 60.0, xtol=1e-12)
    # round-off: the transform's noise floor (its most negative entry, an entry's
    # absolute error) on every entry above eps, weighed like the others, in delta units
    # over the slope of delta(eps) (the A-mass above eps), relative to eps
    up = t > eps
    w = weight(up)
    floor = max(-tilted.min(), 1e-17 * tilted.max())
    noise = floor * np.sum(w)
    slope = np.sum(np.maximum(tilted[up], 0.0) * w * np.exp(eps - t[up]))
    return eps, noise / max(slope, 1e-300) / eps


def saddle_tilt(A, steps, spacing, k0, eps):
    """theta with steps * (mean loss of the leaf's A row tilted by e^{theta t}) = eps."""
    t = (k0 + np.arange(len(A))) * spacing

    def gap(theta):
        w = A * np.exp(theta * (t - t.max()))
        return steps * np.sum(w * t) / np.sum(w) - eps

    return optimize.brentq(gap, 0.0, 200.0) if gap(0.0) < 0.0 < gap(200.0) else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--q", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=8192)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--log2-spacing", type=int, default=-11)
    p.add_argument("--tau", type=float, default=0.3, help="loss above which intervals merge")
    p.add_argument("--merge", type=int, default=16, help="fine spacings per tail interval")
    p.add_argument("--reach", type=float, default=4.0, help="largest leaf loss")
    args = p.parse_args(argv)
    d = 2.0 ** args.log2_spacing
    k0 = math.ceil(math.log1p(-args.q) / d)
    ks = np.arange(k0, math.ceil(args.reach / d) + 1)
    k_tau = math.ceil(args.tau / d)
    coarse = ks[(ks <= k_tau) | ((ks - k_tau) % args.merge == 0) | (ks == ks[-1])]
    out, leaf = {}, {}
    for name, points in (("fine", ks), ("coarse", coarse)):
        A, a_inf = split_leaf(points, d, k0, len(ks), args.sigma, args.q)
        # the tilt from an untilted first estimate, then twice from the tilted one
        theta = 0.0
        for _ in range(3):
            guess, noise = epsilon(A, a_inf, args.steps, args.delta, d, k0, theta)
            if not 0 < guess < math.inf:
                break
            theta = saddle_tilt(A, args.steps, d, k0, guess)
        out[name], noise = epsilon(A, a_inf, args.steps, args.delta, d, k0, theta)
        leaf[name] = A, theta
        print(f"{name:6s} leaf points {len(points):6d}  epsilon estimate (uncertified) "
              f"{out[name]:.8f}  tilt {theta:.2f}  relative round-off ~{noise:.1e}")
    if 0 < out["fine"] < math.inf:
        print(f"relative change {(out['coarse'] - out['fine']) / out['fine']:.2e}")
        # a candidate predictor: the expected number of steps above tau among the events
        # that decide delta (the saddle-point tilt), times the tail spacing, over epsilon
        A, theta = leaf["fine"]
        w = A * np.exp(theta * (ks - ks.max()) * d)
        coarse_steps = args.steps * w[ks > k_tau].sum() / w.sum()
        print(f"tilted steps above tau {coarse_steps:.3g}; times the tail spacing over "
              f"epsilon {coarse_steps * args.merge * d / out['fine']:.2e}")


if __name__ == "__main__":
    main()
