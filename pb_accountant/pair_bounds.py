"""The comparison bounds computed for mechanism pairs (their old home, kept for imports).

The functions live with their bound family in :mod:`pb_accountant.comparison`
(:mod:`~pb_accountant.comparison.rdp`, :mod:`~pb_accountant.comparison.kov`,
:mod:`~pb_accountant.comparison.cdp`); see that package and ``docs/comparison-bounds.md``.
"""
from __future__ import annotations

from .comparison.kov import (one_step_curve, kov_for_sequence, kov_epsilon_for_pair)
from .comparison.rdp import (DEFAULT_ORDERS, RenyiProfile, rdp_from_pair, rdp_for_sequence,
                             rdp_delta_for_sequence, rdp_epsilon_for_sequence)
from .comparison.cdp import (PairCDP, cdp_for_pair, cdp_for_sequence, cdp_delta_for_sequence,
                             cdp_epsilon_for_sequence)

__all__ = [
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
