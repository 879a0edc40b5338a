"""Underflow cannot slip past a certified bound (docs/floating-point.md, "Underflow").

A relative error model says nothing below the normal range: a factor e^x with x below
about -708, or a product with it, is off by up to 2^-1075 absolutely, and a huge weight
multiplies that.  Each case below was built by an independent review on hand-made rows
(the engine's own histories kept far from these ranges); each bound is compared with
the exact value in 60-digit arithmetic.
"""
import math

import mpmath as mp
import numpy as np

from pb_accountant.buckets import GroupedBuckets, Grid, PaperBuckets
from pb_accountant.queries import PaperUpper, ThresholdSum, certified_lower_epsilon


def test_a_lower_sum_term_whose_weight_factor_underflows_is_dropped():
    """On the lower side a B-mass is r e^{-u} with r up to e^600: its block's factor
    e^{s_b - u} underflowed to 0, the term counted p in full, and the lower bound on
    delta(199) was 0.5 where the truth is 0.318 (a lower epsilon of 200.01 against a true
    198.40).  Such a term is now dropped, which only lowers a lower bound."""
    with mp.workdps(60):
        b1 = mp.mpf("0.5") * mp.e ** mp.mpf("-200.01")
        r1 = float(b1 * mp.e ** 800)
        ts = ThresholdSum.build([0.0, 200.01], [1e-3, 0.5], [1e-3, r1], [0.0, 800.0],
                                0.0, False)
        eps = 199.0
        exact = mp.mpf("0.5") - mp.e ** eps * mp.mpf(r1) * mp.e ** -800
        assert float(ts(eps)) <= exact
        # the same groups through the grouped buckets' lower curve, and its epsilon
        g = Grid(100.0, 8)
        t = g.losses
        a_row, c_row = np.zeros(g.size), np.zeros(g.size)
        i0, i1 = int(np.flatnonzero(t == 0.0)[0]), int(np.flatnonzero(t == 800.0)[0])
        a_row[i0], c_row[i0] = 1e-3, 1e-3
        a_row[i1], c_row[i1] = 0.5, float(b1 * mp.e ** 800)
        curve = GroupedBuckets(g, np.vstack([a_row, c_row]), np.zeros(2), 1, 0.0, 0.0,
                               ("ab",)).lower_curves()["ab"]
        assert float(curve(eps)) <= mp.mpf("0.5") - mp.e ** eps * b1
        assert certified_lower_epsilon([curve], 0.4) <= mp.log(mp.mpf("0.1") / b1)
        # and through the paper's buckets (V up to e^600 after ``tamed``)
        gp = Grid(10.0, 70)
        tp = gp.losses
        j0, j1 = int(np.flatnonzero(tp == -100.0)[0]), int(np.flatnonzero(tp == 690.0)[0])
        a_row, v_row = np.zeros(gp.size), np.zeros(gp.size)
        a_row[j0], v_row[j0] = 1e-3, 1e-3
        b2 = mp.mpf("0.5") * mp.e ** -150
        a_row[j1], v_row[j1] = 0.5, float(b2 * mp.e ** 690)
        paper = PaperBuckets(gp, np.vstack([a_row, v_row, v_row]), 0.0, 1, np.zeros(3), 1,
                             "ab", np.zeros(3))
        assert float(paper.lower_curves()["ab"](149.0)) <= mp.mpf("0.5") - mp.e ** 149 * b2


def test_grouped_plus_charges_a_scale_factor_below_the_normal_range():
    """``GroupedBuckets.plus`` brings both operands to the larger scale by e^{gap}: below
    e^-708 that factor is subnormal or 0, a C entry of e^127 (true units) came back as
    0, and the lower bound on delta(100) was 0.40001 where the truth is 1e-5 (a lower
    epsilon of 150 against a true 49.3).  Such a row's mass and error are now charged
    whole, as absolute error."""
    with mp.workdps(60):
        g = Grid(100.0, 10)
        pos = {int(v): i for i, v in enumerate(g.losses)}
        groups = {200: (mp.mpf(0.4), mp.e ** -73), 800: (mp.mpf(0.5), mp.e ** -50),
                  1000: (mp.mpf(1e-5), mp.mpf(1e-5) * mp.e ** -950)}
        a1, c1 = np.zeros(g.size), np.zeros(g.size)
        a1[pos[200]], c1[pos[200]] = 0.4, math.exp(177.0)      # C = e^127 at scale -50
        g1 = GroupedBuckets(g, np.vstack([a1, c1]), np.zeros(2), 1, 0.0, 0.0, ("ab",),
                            np.zeros(2), np.array([0.0, -50.0]))
        a2, c2 = np.zeros(g.size), np.zeros(g.size)
        a2[pos[800]], c2[pos[800]] = 0.5, math.exp(50.0)
        a2[pos[1000]], c2[pos[1000]] = 1e-5, 1e-5 * math.exp(-650.0)
        g2 = GroupedBuckets(g, np.vstack([a2, c2]), np.zeros(2), 1, 0.0, 0.0, ("ab",),
                            np.zeros(2), np.array([0.0, 700.0]))
        curve = g1.plus(g2).lower_curves()["ab"]

        def true_delta(eps):
            return sum(max(mp.mpf(0), a - mp.e ** eps * b) for a, b in groups.values())

        for eps in (80.0, 100.0, 140.0):
            assert float(curve(eps)) <= true_delta(eps)
        true_eps = mp.log(mp.mpf(0.5) - mp.mpf("1e-3") + mp.mpf(1e-5)) + 50
        assert certified_lower_epsilon([curve], 1e-3) <= true_eps


def test_paper_upper_charges_products_below_the_normal_range():
    """Definition 9 forms R e^{-t} as a product: near t = 700 it is subnormal and may
    round up by 2^-1075, which e^eps multiplies.  The upper bound F(699) was 9.2e-21
    below the exact value of its own rows; each such product now adds e^eps times its
    worst rounding."""
    with mp.workdps(80):
        g = Grid(70.0, 10)
        top = g.size - 1                                       # t = 700
        e700 = math.exp(-700.0)
        a = 1e-10
        r0 = a * math.exp(1.0) * 0.5                           # R e^-700 is subnormal
        # the R whose product with e^-700 rounds up the most
        r = max((r0 * (1 + k * 1e-9) for k in range(2000)),
                key=lambda v: mp.mpf(v * e700) - mp.mpf(v) * mp.mpf(e700))
        assert mp.mpf(r * e700) > mp.mpf(r) * mp.mpf(e700)   # it does round up
        a_row, r_row = np.zeros(g.size), np.zeros(g.size)
        a_row[top], r_row[top] = a, r
        upper = PaperUpper(g, a_row, r_row, 0.0, 0, 0.0)
        for eps in (600.0, 690.0, 699.0):
            exact = mp.mpf(a) - mp.e ** mp.mpf(eps) * mp.mpf(r) * mp.e ** mp.mpf(-700)
            assert float(upper(eps)[0]) >= max(exact, 0)


def test_paper_upper_allowance_does_not_overflow_past_eps_709():
    """The allowance is e^eps times a subnormal tail, formed as one exp: past eps 709.78
    e^eps alone is inf, which made F(712) = 1 on rows whose true value is 1e-6."""
    with mp.workdps(60):
        g = Grid(10.0, 76)
        t = g.losses
        a_row, r_row = np.zeros(g.size), np.zeros(g.size)
        j = int(np.flatnonzero(t == 740.0)[0])
        a_row[j], r_row[j] = 1e-6, 1e-6
        upper = PaperUpper(g, a_row, r_row, 0.0, 0, 0.0)
        for eps in (700.0, 712.0, 720.0, 739.0):
            exact = mp.mpf(1e-6) - mp.e ** mp.mpf(eps) * mp.mpf(1e-6) * mp.e ** -740
            got = float(upper(eps)[0])
            assert exact <= got
            if eps <= 720.0:          # (nearer the loss, 2^-1074 e^eps is no longer small)
                assert got < 2e-6
