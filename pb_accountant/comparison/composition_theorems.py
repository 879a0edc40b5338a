"""Composition theorems for an (eps, delta) pair: naive (paper Lemma 2), adaptive
(paper Lemma 3) and advanced composition (paper Lemma 4; DR14 Theorem 3.20; DR16 Theorem 1.1)."""
from __future__ import annotations

import math

import numpy as np

from ..results import EpsilonBounds
from .._validation import _choice, _count, _real
from ._common import _ULP, _mul_up, _up


# --------------------------------------------------------------------------------------
# naive, adaptive and advanced composition (paper Lemmas 2-4)
# --------------------------------------------------------------------------------------

def _check_pair(epsilon, delta):
    eps = _real("epsilon", epsilon, low=0.0)
    dlt = _real("delta", delta, low=0.0, high=1.0)
    return eps, dlt


def naive_composition(epsilon, delta, compositions) -> EpsilonBounds:
    """Paper Lemma 2 (naive composition): r-fold (eps, delta)-DP is (r eps, r delta)-DP.

    Returns ``EpsilonBounds(delta=min(1, r delta), lower=0, upper=r eps, method="naive")``.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    eps_out = float(_mul_up(float(r), eps))
    delta_out = min(1.0, float(_mul_up(float(r), dlt)))
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="naive")


def adaptive_composition(epsilon, delta, compositions) -> EpsilonBounds:
    """Paper Lemma 3 (adaptive composition): (r eps, 1 - (1 - delta)^r)-DP.

    delta' = -expm1(r log1p(-delta)), accurate for tiny delta and huge r.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    eps_out = float(_mul_up(float(r), eps))
    delta_out = 1.0 if dlt == 1.0 else float(-np.expm1(r * np.log1p(-dlt)))
    delta_out = min(1.0, float(_up(delta_out)))
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="adaptive")


def _advanced_eps(eps, r, delta_slack, variant):
    growth = math.expm1(eps) if eps < 709.0 else math.inf
    drift = r * eps * growth
    if variant == "dr16":
        drift /= 2.0
    return float(_up(math.sqrt(2.0 * r * -math.log(delta_slack)) * eps + drift, 8.0))


def advanced_composition(epsilon, delta, compositions, delta_slack,
                         variant: str = "drv10") -> EpsilonBounds:
    """Advanced composition (paper Lemma 4; DR14 Theorem 3.20, Dwork-Rothblum-Vadhan).

    r-fold adaptive composition of (eps, delta)-DP mechanisms is (eps', r delta + delta_slack)-DP
    with eps' = sqrt(2 r ln(1/delta_slack)) eps + r eps (e^eps - 1).  ``variant="dr16"``
    uses DR16 Theorem 1.1, which halves the drift term: r eps (e^eps - 1) / 2.

    The book chapter's simplified form eps' = 2 eps sqrt(2 r ln(1/delta_slack)) (its
    Theorems 5 and 6) holds only in the regime of DR14 Corollary 3.21 (eps' < 1) and is
    NOT implemented: outside that regime it is not a valid bound.
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    ds = _real("delta_slack", delta_slack, low=0.0, high=1.0, low_open=True)
    _choice("variant", variant, ("drv10", "dr16"))
    eps_out = _advanced_eps(eps, r, ds, variant)
    delta_out = min(1.0, float(_up(r * dlt + ds)))
    notes = ()
    if math.isinf(eps_out):
        notes = ("epsilon' overflows: e^epsilon is not representable",)
    return EpsilonBounds(delta=delta_out, lower=0.0, upper=eps_out, method="advanced",
                         notes=notes)


def advanced_composition_epsilon(epsilon, delta, compositions, target_delta,
                                 variant: str = "drv10") -> EpsilonBounds:
    """Smallest eps' from advanced composition (paper Lemma 4) with delta' <= target_delta.

    eps' decreases in delta_slack, so the best split of target_delta gives all of
    target_delta - r delta to delta_slack.  Naive composition (paper Lemma 2) is also
    certified at this delta and is returned instead when it is smaller (noted).
    """
    eps, dlt = _check_pair(epsilon, delta)
    r = _count("compositions", compositions)
    target = _real("target_delta", target_delta, low=0.0, high=1.0)
    _choice("variant", variant, ("drv10", "dr16"))
    spent = float(_up(r * dlt))
    naive = float(_mul_up(float(r), eps))
    if spent > target:
        return EpsilonBounds(delta=target, lower=0.0, upper=math.inf, method="advanced",
                             notes=("compositions * delta exceeds target_delta: neither "
                                    "naive nor advanced composition certifies it",))
    slack = (target - spent) * (1.0 - 4.0 * _ULP)
    if slack <= 0.0:
        return EpsilonBounds(delta=target, lower=0.0, upper=naive, method="advanced",
                             notes=("no slack left for advanced composition; naive "
                                    "composition (paper Lemma 2) used",))
    adv = _advanced_eps(eps, r, slack, variant)
    if naive <= adv:
        return EpsilonBounds(delta=target, lower=0.0, upper=naive, method="advanced",
                             notes=("naive composition (paper Lemma 2) was tighter",))
    return EpsilonBounds(delta=target, lower=0.0, upper=adv, method="advanced",
                         notes=(f"delta_slack = {slack!r}",))


