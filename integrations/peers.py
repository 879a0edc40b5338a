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
  distributions; the pessimistic one is an upper estimate (at interval 1e-4 and small
  delta it can lie below pb's certified lower bound: README, "How it compares"), the
  optimistic one an estimate from below.

``run_peer_isolated`` runs one peer in a child Python with a time limit and an
address-space limit (``RLIMIT_AS``), so that a peer that allocates without bound or
never ends costs the caller a "failed: <reason>" row, never its own result.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

Schedule = Sequence[Tuple[float, float, int]]
Pair = Tuple[Optional[float], Optional[float]]

__all__ = ["PEERS", "PeerUnavailable", "PeerResult", "peer_epsilons", "peer_description",
           "run_peer_isolated"]

#: default limits of :func:`run_peer_isolated`
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_BYTES = 4 * 1024 ** 3


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


# --------------------------------------------------------------------------------------
# isolation: each peer runs in a child process with a time and a memory limit
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PeerResult:
    """One peer's answer: ``status`` is "ok", "not installed" or "failed"; ``pairs``
    is set only when "ok"; ``reason`` is a short text for the other two."""

    name: str
    status: str
    pairs: Optional[List[Pair]] = None
    reason: str = ""
    seconds: Optional[float] = None


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _limit_memory(memory_bytes: Optional[int]) -> None:  # pragma: no cover - in the child
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if memory_bytes is None:
        return
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):
        pass                                 # no RLIMIT_AS here: the time limit remains


_PACKAGES = {"opacus-rdp": ("opacus", "opacus"), "opacus-prv": ("opacus", "opacus"),
             "pld-pessimistic": ("dp_accounting", "dp-accounting"),
             "pld-optimistic": ("dp_accounting", "dp-accounting")}


def _missing_package(name: str) -> Optional[str]:
    """The install hint when the peer's package cannot be found here, else None."""
    import importlib.util
    module, dist = _PACKAGES[name]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"pip install {dist}"


def run_peer_isolated(name: str, schedule: Schedule, deltas: Sequence[float], *,
                      timeout: float = DEFAULT_TIMEOUT_S,
                      memory_bytes: Optional[int] = DEFAULT_MEMORY_BYTES,
                      **options) -> PeerResult:
    """Run peer ``name`` in a child Python with ``timeout`` seconds and an address-space
    limit of ``memory_bytes`` (RLIMIT_AS, where the OS has it); never raises for the
    peer's own failures, which come back as status "failed" with a short reason."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    missing = _missing_package(name)
    if missing is not None:                  # no child process for a peer not installed
        return PeerResult(name, "not installed", reason=missing)
    request = json.dumps({"name": name, "deltas": [float(d) for d in deltas],
                          "schedule": [[float(s), float(q), int(t)] for s, q, t in schedule],
                          "options": options})
    env = dict(os.environ, PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="3")
    posix = os.name == "posix"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pb_accountant.integrations.peers"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, start_new_session=posix,
            preexec_fn=(lambda: _limit_memory(memory_bytes)) if posix else None)
    except OSError as exc:
        return PeerResult(name, "failed", reason=_short(f"could not start: {exc}"))

    def kill() -> None:
        try:
            if posix:
                os.killpg(proc.pid, signal.SIGKILL)
            else:                                              # pragma: no cover
                proc.kill()
        except OSError:
            pass

    try:
        out, err = proc.communicate(request, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        proc.communicate()
        return PeerResult(name, "failed", reason=f"timed out after {timeout:g} s")
    except BaseException:                    # Ctrl-C: the child is in its own session
        kill()
        proc.wait()
        raise
    try:
        answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    except (ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        if proc.returncode is not None and proc.returncode < 0:
            why = f"killed by signal {-proc.returncode}"
            if -proc.returncode == getattr(signal, "SIGKILL", 9):
                why += " (out of memory?)"
        else:
            last = [line for line in (err or "").splitlines() if line.strip()]
            why = last[-1] if last else f"exit status {proc.returncode}"
        return PeerResult(name, "failed", reason=_short(why))
    if answer.get("status") == "ok":
        pairs = [(None if lo is None else float(lo), None if up is None else float(up))
                 for lo, up in answer["pairs"]]
        return PeerResult(name, "ok", pairs, "", answer.get("seconds"))
    return PeerResult(name, answer.get("status", "failed"), reason=_short(answer.get("reason", "")))


def _child_main() -> int:  # pragma: no cover - runs in the child process
    import logging
    import warnings
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    request = json.loads(sys.stdin.read())
    name = request["name"]
    try:
        try:
            import importlib
            importlib.import_module(_PACKAGES[name][0] + (".accountants" if name.startswith(
                "opacus") else ".pld"))
        except Exception:
            pass                              # peer_epsilons reports what is missing
        t = time.monotonic()
        pairs = peer_epsilons(name, request["schedule"], request["deltas"],
                              **request.get("options", {}))
        answer = {"status": "ok", "pairs": pairs, "seconds": time.monotonic() - t}
    except PeerUnavailable as exc:
        # the parent found the package: failing to import it here is a failure (a
        # broken install, or the memory limit), not an absence
        cause = exc.__context__ or exc
        answer = {"status": "failed",
                  "reason": f"cannot import {_PACKAGES[name][0]}: {cause}"}
    except MemoryError:
        answer = {"status": "failed", "reason": "out of memory"}
    except Exception as exc:  # the peer's own failure, reported in its row
        message = str(exc).splitlines()[0] if str(exc) else ""
        answer = {"status": "failed", "reason": f"{type(exc).__name__}: {message}".rstrip(": ")}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_child_main())
