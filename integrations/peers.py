"""Other accountants, for side-by-side comparison, when they are installed.

Each peer turns a DP-SGD schedule ``[(noise_multiplier, sample_rate, steps), ...]`` into
epsilons at several deltas, as ``(lower, upper)`` pairs (None where the method gives
no such bound).  Peers are imported lazily; a missing package raises
:class:`PeerUnavailable` with the install hint.

* ``opacus-rdp``: Opacus's RDP accountant (upper bound; ``get_privacy_spent``);
* ``opacus-prv``: Opacus's PRV accountant (Gopi et al.): its error bounds
  ``eps_lower``/``eps_upper`` for ``eps_error`` (an approximation's error bars, not
  floating-point-certified bounds);
* ``pld-pessimistic`` / ``pld-optimistic``: Google's ``dp_accounting`` privacy loss
  distributions; the pessimistic estimate is an upper bound, the optimistic one an
  estimate from below.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

Schedule = Sequence[Tuple[float, float, int]]
Pair = Tuple[Optional[float], Optional[float]]

__all__ = ["PEERS", "PeerUnavailable", "peer_epsilons", "peer_description"]


class PeerUnavailable(ImportError):
    """The package a peer accountant needs is not installed."""


def _opacus_rdp(schedule: Schedule, deltas: Sequence[float], **_) -> List[Pair]:
    try:
        from opacus.accountants import RDPAccountant
        from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    except ImportError as exc:
        raise PeerUnavailable(f"opacus is not installed ({exc}); pip install opacus") from None
    orders = list(RDPAccountant.DEFAULT_ALPHAS)
    rdp = 0.0
    for sigma, q, steps in schedule:
        rdp = rdp + compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
    out = []
    for delta in deltas:
        eps, _order = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
        out.append((None, float(eps)))
    return out


def _opacus_prv(schedule: Schedule, deltas: Sequence[float], eps_error: float = 0.01,
                **_) -> List[Pair]:
    try:
        from opacus.accountants import PRVAccountant
    except ImportError as exc:
        raise PeerUnavailable(f"opacus is not installed ({exc}); pip install opacus") from None
    acc = PRVAccountant()
    acc.history = [(float(s), float(q), int(t)) for s, q, t in schedule]
    delta_error = min(deltas) / 1000.0
    dprv = acc._get_dprv(eps_error=eps_error, delta_error=delta_error)
    out = []
    for delta in deltas:
        lo, _est, up = dprv.compute_epsilon(delta, delta_error, eps_error)
        out.append((max(0.0, float(lo)), float(up)))
    return out


def _pld(schedule: Schedule, pessimistic: bool, interval: float):
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib
    except ImportError as exc:
        raise PeerUnavailable(f"dp_accounting is not installed ({exc}); "
                              "pip install dp-accounting") from None
    composed = None
    for sigma, q, steps in schedule:
        one = pld_lib.from_gaussian_mechanism(
            float(sigma), sampling_prob=float(q), pessimistic_estimate=pessimistic,
            value_discretization_interval=interval, use_connect_dots=pessimistic)
        one = one.self_compose(int(steps))
        composed = one if composed is None else composed.compose(one)
    return composed


def _pld_pessimistic(schedule: Schedule, deltas: Sequence[float], pld_interval: float = 1e-4,
                     **_) -> List[Pair]:
    pld = _pld(schedule, True, pld_interval)
    return [(None, float(pld.get_epsilon_for_delta(d))) for d in deltas]


def _pld_optimistic(schedule: Schedule, deltas: Sequence[float], pld_interval: float = 1e-4,
                    **_) -> List[Pair]:
    pld = _pld(schedule, False, pld_interval)
    return [(float(pld.get_epsilon_for_delta(d)), None) for d in deltas]


PEERS: Dict[str, Tuple[str, Callable[..., List[Pair]], str]] = {
    "opacus-rdp": ("Opacus RDP", _opacus_rdp, "upper bound"),
    "opacus-prv": ("Opacus PRV", _opacus_prv, "PRV error bounds (eps_error=0.01)"),
    "pld-pessimistic": ("dp_accounting PLD pessimistic", _pld_pessimistic, "upper estimate"),
    "pld-optimistic": ("dp_accounting PLD optimistic", _pld_optimistic,
                       "estimate from below, not a certified bound"),
}


def peer_description(name: str) -> Tuple[str, str]:
    label, _fn, kind = PEERS[name]
    return label, kind


def peer_epsilons(name: str, schedule: Schedule, deltas: Sequence[float], **options) -> List[Pair]:
    """[(lower, upper), ...] of peer ``name`` at each delta; PeerUnavailable if missing."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    schedule = [(float(s), float(q), int(t)) for s, q, t in schedule if int(t) > 0]
    if not schedule:
        return [(0.0, 0.0) for _ in deltas]
    out = PEERS[name][1](schedule, list(deltas), **options)
    return [(None if lo is None or math.isnan(lo) else lo,
             None if up is None or math.isnan(up) else up) for lo, up in out]
