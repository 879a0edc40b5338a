"""The comparison bounds computed for mechanism pairs (their old home, kept for imports).

The functions live with their bound family in :mod:`pb_accountant.comparison`
(:mod:`~pb_accountant.comparison.rdp`, :mod:`~pb_accountant.comparison.kov`,
:mod:`~pb_accountant.comparison.cdp`); see that package and ``docs/comparison-bounds.md``.
"""
from __future__ import annotations

from . import comparison as _comparison
from .comparison.kov import (  # noqa: F401  (re-exported)
    one_step_curve, kov_for_sequence, kov_epsilon_for_pair)
from .comparison.rdp import (  # noqa: F401  (re-exported)
    DEFAULT_ORDERS, RenyiProfile, rdp_from_pair, rdp_for_sequence, rdp_delta_for_sequence,
    rdp_epsilon_for_sequence)
from .comparison.cdp import (  # noqa: F401  (re-exported)
    PairCDP, cdp_for_pair, cdp_for_sequence, cdp_delta_for_sequence, cdp_epsilon_for_sequence)

# the pair-level names, in the order pb_accountant.comparison lists them
__all__ = [name for name in _comparison.__all__ if name in globals()]
