"""Comparison bounds: the prior-work bounds the paper compares privacy buckets with.

Every function returns a certified UPPER bound (on delta for a given epsilon, or on
epsilon for a given delta) in the result objects of :mod:`pb_accountant.results`, with
the trivially valid lower bound 0.  Numbers refer to "Tight on Budget?" (Meiser &
Mohammadi; "paper"), the Dwork-Rothblum CDP paper ("DR16"), Dwork & Roth's book
("DR14") and the works named in each docstring.  See ``docs/comparison-bounds.md``.

* composition theorems for an (eps, delta) pair: naive (paper Lemma 2), adaptive
  (paper Lemma 3), advanced (paper Lemma 4; DR14 Theorem 3.20; DR16 Theorem 1.1), and
  the optimal Kairouz-Oh-Viswanath composition (paper Theorem 3, §5.6) evaluated in
  log space for up to 10**7 compositions;
* Renyi DP (paper §5.7): Renyi divergences of a discrete privacy-loss distribution,
  the RDP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019) and the
  standard and improved (Balle et al. 2020) RDP -> (eps, delta) conversions;
* concentrated DP: zCDP (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020) and the
  Dwork-Rothblum (mu, tau)-CDP with its composition rule.

Each family lives in one module and answers both for its own parameters and for the
mechanism pairs the buckets compose (so every bound of the paper's figures is computed for
exactly that pair): :mod:`.composition_theorems`, :mod:`.kov`, :mod:`.rdp` and :mod:`.cdp`.
:mod:`pb_accountant.pair_bounds` re-exports the pair-level functions under their old home.

Only numpy and scipy are used; nothing here imports torch or opacus.
"""
from __future__ import annotations

from .composition_theorems import (naive_composition, adaptive_composition,
                                   advanced_composition, advanced_composition_epsilon)
from .kov import (kov_delta, kov_epsilon, kov_curve, one_step_curve, kov_for_sequence,
                  kov_epsilon_for_pair)
from .rdp import (renyi_divergence, rdp_to_epsilon, rdp_to_delta, subsampled_gaussian_rdp,
                  DEFAULT_ORDERS, RenyiProfile, rdp_from_pair, rdp_for_sequence,
                  rdp_delta_for_sequence, rdp_epsilon_for_sequence)
from .cdp import (CDPParams, zcdp_epsilon, zcdp_delta, gaussian_zcdp, cdp_delta, cdp_epsilon,
                  compose_cdp, gaussian_cdp, pure_dp_cdp, randomized_response_cdp, laplace_cdp,
                  PairCDP, cdp_for_pair, cdp_for_sequence, cdp_delta_for_sequence,
                  cdp_epsilon_for_sequence)

__all__ = [
    "CDPParams",
    "naive_composition",
    "adaptive_composition",
    "advanced_composition",
    "advanced_composition_epsilon",
    "kov_delta",
    "kov_epsilon",
    "kov_curve",
    "renyi_divergence",
    "rdp_to_epsilon",
    "rdp_to_delta",
    "subsampled_gaussian_rdp",
    "zcdp_epsilon",
    "zcdp_delta",
    "gaussian_zcdp",
    "cdp_delta",
    "cdp_epsilon",
    "compose_cdp",
    "gaussian_cdp",
    "pure_dp_cdp",
    "randomized_response_cdp",
    "laplace_cdp",
    "DEFAULT_ORDERS",
    "RenyiProfile",
    "rdp_from_pair",
    "rdp_for_sequence",
    "rdp_delta_for_sequence",
    "rdp_epsilon_for_sequence",
    "one_step_curve",
    "kov_for_sequence",
    "kov_epsilon_for_pair",
    "PairCDP",
    "cdp_for_pair",
    "cdp_for_sequence",
    "cdp_delta_for_sequence",
    "cdp_epsilon_for_sequence",
]
