"""``BudgetGuard``: stop DP training before the step that would exceed a privacy budget.

Before a step the guard needs to know that the certified upper bound *after* the
pending step stays within ``max_epsilon``.  If it does not, the step is refused:

* ``mode="raise"``: :class:`BudgetExceededError` is raised before the optimizer
  updates the parameters (and before the accountant records the step);
* ``mode="stop"``: ``guard.should_stop`` is set; an attached optimizer skips the
  update (gradients are discarded), and a framework loop reads the flag and ends.

How often the accountant is asked (see docs/training-budget.md, "BudgetGuard"):

* default (``lookahead=True``): a certified look-ahead.  After a query that certifies
  ``eps_upper(history + m steps) <= max_epsilon - margin`` the next m steps with the
  same noise multiplier and sample rate need no query (epsilon is monotone in the
  number of steps).  m is predicted from the previous certified bounds (64 steps at
  first, then 80 % of the distance to the budget predicted by a power law through
  the last two bounds), so it shrinks near the budget.  Within ``lookahead_margin``
  of the budget the guard makes the exact one-step query ``epsilon_after(num_steps=1)``
  of a per-step guard, and if the step fits, finds the last step that still fits by
  doubling and bisection (a certified query per probe).  Every step let through
  without a query is covered by a certified query at that or a later step count, so
  the true epsilon never passes the budget (it is non-decreasing in the number of
  steps).  Training stops at the step a query before every step would stop at as long
  as the certified bound does not dip between neighbouring step counts near the
  budget (tests check this on random settings), at a cost of a few dozen queries.
* ``lookahead=False``: the exact one-step query before every step (the reference).
* ``every_n_steps=n``: one query per n steps.  With ``lookahead=True`` it asks for the
  next n steps together and refuses when they do not all fit: never over the budget,
  but it may stop up to n - 1 steps early.  With ``lookahead=False`` it asks only for
  the next step, before steps 1, n + 1, 2n + 1, ... (by the accountant's step count),
  and lets the steps in between through unchecked: it may take up to n - 1 steps
  past the budget.

    >>> guard = BudgetGuard(engine.accountant, max_epsilon=3.0, delta=1e-5, mode="raise")
    >>> guard.attach(optimizer)                 # Opacus DPOptimizer: checked in step()
    >>> # or by hand, before each step of any loop:
    >>> if not guard.check(noise_multiplier=sigma, sample_rate=q): break
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Optional, Tuple

from pb_accountant._validation import (MAX_STEPS, check_choice, check_count, check_delta,
                                      check_flag, check_noise_multiplier, check_real,
                                      check_sample_rate)
from pb_accountant.results import EpsilonBounds

from ._common import (accumulated_iterations, check_step_defaults, epsilon_after,
                      find_dp_optimizer, infer_sample_rate, resolve_accountant,
                      schedule_in_force, steps_taken)
from ._cli_render import exact, up
from .sampling import accountant_assumptions, sampler_check
from .sampling import check_sample_rate as warn_on_sample_rate

__all__ = ["BudgetGuard", "BudgetExceededError"]

MODES = ("raise", "stop")
MAX_LOOKAHEAD = 1 << 20          # steps one certified look-ahead may cover at most
FIRST_LOOKAHEAD = 64             # steps the first look-ahead tries to cover


class BudgetExceededError(RuntimeError):
    """The next step would take the certified epsilon past the budget (step not taken)."""

    def __init__(self, message: str, *, epsilon: float, max_epsilon: float, delta: float,
                 steps: Optional[int]):
        super().__init__(message)
        self.epsilon = epsilon
        self.max_epsilon = max_epsilon
        self.delta = delta
        self.steps = steps


class _Plan:
    """Steps certified within budget: ``covered`` steps at (sigma, q) after ``base``."""

    __slots__ = ("history", "base_len", "base_last", "sigma", "q", "covered")

    def __init__(self, history, sigma, q, covered):
        self.history = history
        self.base_len = len(history)
        self.base_last = tuple(history[-1]) if history else None
        self.sigma, self.q, self.covered = sigma, q, covered

    def steps_since(self, history, sigma, q) -> Optional[int]:
        """Steps added since the plan was made, if all of them were at (sigma, q)."""
        if history is not self.history or sigma != self.sigma or q != self.q:
            return None
        n = len(history)
        if n == self.base_len and n:                  # the usual case: the last entry grew
            last, base = history[n - 1], self.base_last
            if last[0] != base[0] or last[1] != base[1]:
                return None
            extra = last[2] - base[2]
            if extra < 0 or (extra and (last[0] != sigma or last[1] != q)):
                return None
            return int(extra)
        if n < self.base_len:
            return None
        extra = 0
        if self.base_len:
            first = history[self.base_len - 1]
            if (first[0], first[1]) != self.base_last[:2] or first[2] < self.base_last[2]:
                return None
            extra = int(first[2]) - int(self.base_last[2])
            if extra and (first[0], first[1]) != (sigma, q):
                return None
        for i in range(self.base_len, n):
            entry = history[i]
            if entry[0] != sigma or entry[1] != q:
                return None
            extra += int(entry[2])
        return extra


def _check_max_epsilon(value) -> float:
    """Any budget >= 0; inf is a guard that never stops (tracking only)."""
    return check_real("max_epsilon", value, low=0.0, allow_inf=True)


def _check_every_n_steps(value) -> Optional[int]:
    """None (query as needed) or a count >= 1."""
    return None if value is None else check_count("every_n_steps", value, minimum=1,
                                                   maximum=MAX_STEPS)


def _check_lookahead_margin(value) -> float:
    """A fraction of the budget in [0, 1)."""
    return check_real("lookahead_margin", value, low=0.0, high=1.0, high_open=True)


def _setting(name: str, check, doc: str) -> property:
    """A guard setting: assigning it validates the value as the constructor does, then
    drops the look-ahead (certified under the old settings, it must be made again)."""
    private = "_" + name

    def get(self):
        return getattr(self, private)

    def set_(self, value) -> None:
        value = check(value)                          # raises before anything changes
        setattr(self, private, value)
        self._drop_lookahead()

    return property(get, set_, doc=doc)


#: the guard's settings that are validated properties (stored as "_" + name)
_SETTINGS = ("max_epsilon", "delta", "mode", "every_n_steps", "lookahead",
             "lookahead_margin")


class BudgetGuard:
    """Refuses any step after which the certified eps_upper at ``delta`` > ``max_epsilon``.

    Args:
        accountant: ``PrivacyBucketsAccountant`` (uses ``epsilon_after``), any Opacus
            accountant (a copy is stepped) or a ``PrivacyEngine``.
        max_epsilon: the budget (a step reaching exactly it is allowed).
        delta: the delta of the budget.
        mode: "raise" or "stop".
        noise_multiplier, sample_rate: defaults for :meth:`check` when it is called
            without them (an attached optimizer and the accountant's history are used
            otherwise).
        every_n_steps: query the accountant once per n steps (None: as needed, see
            the module docstring for what each combination guarantees).
        lookahead: certified look-ahead (default); False queries before every step
            (or, with ``every_n_steps``, checks only the next step every n steps).
        lookahead_margin: a look-ahead lets steps through without a query only while
            its certified bound is <= ``max_epsilon * (1 - lookahead_margin)``, so that
            the numerical slack of the bounds cannot move the stopping step.

    ``max_epsilon``, ``delta``, ``mode``, ``every_n_steps``, ``lookahead`` and
    ``lookahead_margin`` may be changed later (for example to raise the budget, then
    :meth:`reset`): each new value is validated as the constructor does, and the
    look-ahead made under the old ones is dropped, so the next step is certified anew.
    """

    max_epsilon = _setting("max_epsilon", _check_max_epsilon,
                           "The budget (a step reaching exactly it is allowed).")
    delta = _setting("delta", check_delta, "The delta of the budget.")
    mode = _setting("mode", lambda value: check_choice("mode", value, MODES),
                    '"raise" or "stop".')
    every_n_steps = _setting("every_n_steps", _check_every_n_steps,
                             "Query once per n steps (None: as needed).")
    lookahead = _setting("lookahead", lambda value: check_flag("lookahead", value),
                         "Whether the certified look-ahead is used.")
    lookahead_margin = _setting("lookahead_margin", _check_lookahead_margin,
                                "Relative distance to the budget below which a look-ahead "
                                "lets steps through without a query.")

    def __init__(self, accountant: Any, max_epsilon: float, delta: float, mode: str = "raise",
                 *, noise_multiplier: Optional[float] = None,
                 sample_rate: Optional[float] = None, every_n_steps: Optional[int] = None,
                 lookahead: bool = True, lookahead_margin: float = 1e-3):
        # every setting is validated before anything is stored (the properties above
        # validate later changes the same way)
        self._mode = check_choice("mode", mode, MODES)
        self._max_epsilon = _check_max_epsilon(max_epsilon)
        self._delta = check_delta(delta)
        self._every_n_steps = _check_every_n_steps(every_n_steps)
        self._lookahead = check_flag("lookahead", lookahead)
        self._lookahead_margin = _check_lookahead_margin(lookahead_margin)
        # the defaults for check(): validated here, not first inside a training step
        noise_multiplier, sample_rate = check_step_defaults(noise_multiplier, sample_rate)
        self._engine_like = resolve_accountant(accountant) is not accountant
        self._source = accountant
        self.noise_multiplier = noise_multiplier
        self.sample_rate = sample_rate
        self.should_stop = False
        self.last_check: Optional[EpsilonBounds] = None      # bounds of the last query
        self.refused: Optional[EpsilonBounds] = None         # bounds of the refused step
        self.refused_steps = 0
        self.stop_message: Optional[str] = None
        self.errors: list = []                               # internal failures (warned)
        self.queries = 0                                     # accountant queries made
        self._optimizer = None
        self._original_step = None
        self._opt_sample_rate: Optional[float] = None
        self._plan: Optional[_Plan] = None
        self._span = 0                                       # last look-ahead length
        self._points: list = []                              # (steps, eps_upper) queried
        self._curve = None                                   # the schedule of _points
        self._memo = None
        self._allowed = 0
        self.loader_check = None      # sampling.SamplerCheck of the loader given to attach

    @property
    def accountant(self) -> Any:
        return resolve_accountant(self._source)

    @property
    def assumptions(self) -> dict:
        """The sampler, neighbouring relation and sizes the guarded bounds assume: the
        guard stops on the certified upper bound *of the accountant's configured
        sampler* (docs/which-epsilon.md), whatever loader feeds training."""
        return accountant_assumptions(self.accountant)

    def assumption_text(self) -> str:
        a = self.assumptions
        return f"sampler={a['sampler']}, neighbouring={a['neighbouring']}"

    # -- the check ---------------------------------------------------------------------
    def _schedule(self, noise_multiplier, sample_rate):
        sigma = noise_multiplier if noise_multiplier is not None else self.noise_multiplier
        q = sample_rate if sample_rate is not None else self.sample_rate
        if sigma is None and self._optimizer is not None:
            sigma = float(self._optimizer.noise_multiplier)
        if q is None and self._opt_sample_rate is not None:
            q = self._opt_sample_rate
        if sigma is None or q is None:
            last_sigma, last_q = schedule_in_force(self.accountant)
            sigma = last_sigma if sigma is None else sigma
            q = last_q if q is None else q
        if sigma is None or q is None:
            raise ValueError("the pending step's noise_multiplier and sample_rate are unknown: "
                             "pass them to check() or to BudgetGuard(...)")
        return check_noise_multiplier(sigma), check_sample_rate(q)

    def epsilon_after(self, noise_multiplier: Optional[float] = None,
                      sample_rate: Optional[float] = None, num_steps: int = 1) -> EpsilonBounds:
        """Bounds after ``num_steps`` more steps (no state change, no side effect)."""
        sigma, q = self._schedule(noise_multiplier, sample_rate)
        return epsilon_after(self.accountant, self.delta, sigma, q, num_steps)

    def would_exceed(self, noise_multiplier: Optional[float] = None,
                     sample_rate: Optional[float] = None, num_steps: int = 1) -> bool:
        """True if ``num_steps`` more steps would exceed the budget (exact query, no side effect)."""
        return self.epsilon_after(noise_multiplier, sample_rate, num_steps).upper > self.max_epsilon

    def allows(self, noise_multiplier: Optional[float] = None,
               sample_rate: Optional[float] = None, num_steps: int = 1) -> bool:
        """The decision :meth:`check` would take now, without refusing anything.

        Uses (and extends) the look-ahead, so it is cheap to call before every step;
        ``last_check`` holds the bounds whenever the accountant had to be queried.
        """
        k = self._num_steps(num_steps)
        if self.should_stop:
            return False
        sigma, q = self._schedule(noise_multiplier, sample_rate)
        return self._decide(sigma, q, k)[0]

    def _num_steps(self, num_steps) -> int:
        """``num_steps`` as an int in [1, MAX_STEPS - steps recorded] (ValueError else):
        the most the accountant can hold in all, so that a query never fails on it."""
        room = MAX_STEPS - (steps_taken(self.accountant) or 0)
        return check_count("num_steps", num_steps, minimum=1, maximum=max(1, room))

    def _query(self, accountant, sigma: float, q: float, k: int) -> EpsilonBounds:
        history = getattr(accountant, "history", None)
        key = None
        if isinstance(history, list):
            key = (id(accountant), len(history), tuple(history[-1]) if history else None,
                   sigma, q, k, self.delta)
            memo = self._memo
            if memo is not None and memo[0] is history and memo[1] == key:
                return memo[2]
        self.queries += 1
        try:
            bounds = epsilon_after(accountant, self.delta, sigma, q, k)
        except Exception as exc:
            # sigma, q and k were validated (_schedule, _num_steps): this is an internal
            # failure inside a training loop.  Loud, kept in ``errors``, and answered with
            # the valid bound inf, so the step is refused rather than taken uncertified.
            self.errors.append(exc)
            reason = f"the accountant failed: {exc!r}"
            warnings.warn(f"BudgetGuard could not certify the next step ({reason}); "
                          "treating its epsilon as inf (see guard.errors)",
                          RuntimeWarning, stacklevel=4)
            return EpsilonBounds(self.delta, 0.0, math.inf, method="none", notes=(reason,))
        if key is not None:
            self._memo = (history, key, bounds)
        return bounds

    def _decide(self, sigma: float, q: float, k: int) -> Tuple[bool, Optional[EpsilonBounds]]:
        """(allowed, bounds of the deciding query or None when no query was needed)."""
        acc = self.accountant
        history = getattr(acc, "history", None)
        trackable = isinstance(history, list)
        if self.every_n_steps is not None and not self.lookahead:
            position = steps_taken(acc)
            position = self._allowed if position is None else position
            if position % self.every_n_steps:
                return True, None                     # unchecked step (documented overspend)
            bounds = self._query(acc, sigma, q, k)
            self.last_check = bounds
            return bounds.upper <= self.max_epsilon, bounds
        if not self.lookahead:
            bounds = self._query(acc, sigma, q, k)
            self.last_check = bounds
            return bounds.upper <= self.max_epsilon, bounds
        plan = self._plan
        if trackable and plan is not None:
            done = plan.steps_since(history, sigma, q)
            if done is not None and done + k <= plan.covered:
                return True, None
            if done is None:                          # the schedule or history changed
                self._points, self._span = [], 0
        if self.every_n_steps is not None:            # fixed blocks, never over the budget
            span = max(k, self.every_n_steps)
            bounds = self._query(acc, sigma, q, span)
            self.last_check = bounds
            if bounds.upper <= self.max_epsilon:
                self._plan = _Plan(history, sigma, q, span) if trackable else None
                return True, None if span > k else bounds
            return False, bounds
        safe = self.max_epsilon * (1.0 - self.lookahead_margin)
        curve = (id(acc), id(history), sigma, q)
        if curve != self._curve:                      # points of another schedule: drop
            self._curve, self._points, self._span = curve, [], 0
        position = steps_taken(acc) or 0
        span = self._next_span(position, k, safe) if trackable else k
        if span > k:
            ahead = self._query(acc, sigma, q, span)
            self._points.append((position + span, ahead.upper))
            if ahead.upper <= safe:
                self._plan = _Plan(history, sigma, q, span)
                self._span = span
                return True, None
        bounds = self._query(acc, sigma, q, k)        # the exact query of a per-step guard
        self.last_check = bounds
        if trackable:
            self._points.append((position + k, bounds.upper))
        allowed = bounds.upper <= self.max_epsilon
        if allowed and trackable:
            # within the margin: find, by certified queries, the last step that still
            # fits, instead of asking before every one of the remaining steps
            covered = k if bounds.upper <= safe else self._last_fitting(acc, sigma, q, k)
            self._plan = _Plan(history, sigma, q, covered)
            self._span = max(self._span, k)
        return allowed, bounds

    def _last_fitting(self, acc, sigma: float, q: float, k: int) -> int:
        """Largest m >= k (k fits) with certified eps_upper(history + m steps) within
        ``max_epsilon``, up to the steps the history may still take (MAX_STEPS in all).

        A step with sample rate 0 never touches the data (it costs nothing): all of them
        fit.  Otherwise doubling, then bisection, one certified query per probe: about
        2 log2(MAX_STEPS) = 100 queries at most, even where the bound stops growing.
        """
        cap = max(k, MAX_STEPS - (steps_taken(acc) or 0))
        if q == 0.0:
            return cap
        good, bad = k, None
        while bad is None:
            if good >= cap:
                return good
            probe = min(2 * good, cap)
            if self._query(acc, sigma, q, probe).upper <= self.max_epsilon:
                good = probe
            else:
                bad = probe
        while bad - good > 1:
            mid = (good + bad) // 2
            if self._query(acc, sigma, q, mid).upper <= self.max_epsilon:
                good = mid
            else:
                bad = mid
        return good

    def _next_span(self, position: int, k: int, safe: float) -> int:
        """Steps the next look-ahead should cover (k: no look-ahead, query exactly).

        Predicted from the last two certified points (steps, eps_upper) on the current
        schedule with a power law eps ~ steps^a, aiming at 80 % of the distance to
        ``safe``; ``FIRST_LOOKAHEAD`` steps without points, doubling with one.  A prediction only
        chooses which certified query to make: it never lets a step through by itself.
        """
        points = sorted({p for p in self._points if p[1] > 0 and math.isfinite(p[1])})
        del self._points[:-8]
        limit = min(MAX_LOOKAHEAD, 64 * max(self._span, FIRST_LOOKAHEAD))
        if not points:
            return max(k, FIRST_LOOKAHEAD)
        if len(points) < 2:
            return max(k, min(2 * self._span, limit))
        (p1, e1), (p2, e2) = points[-2], points[-1]
        if not (e2 > e1 > 0 and p2 > p1 > 0):
            return max(k, min(2 * self._span, limit))
        exponent = math.log(e2 / e1) / math.log(p2 / p1)
        try:
            target = p2 * (safe / e2) ** (1.0 / exponent)
        except OverflowError:
            # a bound that barely grows (a cheap phase after a costly one): the budget
            # is predicted beyond the floating-point range, far away (this had raised
            # OverflowError out of check(), in the training loop)
            target = math.inf
        if not math.isfinite(target):
            return max(k, min(2 * self._span, limit))
        span = int(0.8 * (target - position))
        return max(k, min(span, limit))

    def check(self, noise_multiplier: Optional[float] = None,
              sample_rate: Optional[float] = None, num_steps: int = 1) -> bool:
        """Call BEFORE a step: True if it may be taken.

        Otherwise mode "raise" raises :class:`BudgetExceededError` and mode "stop" sets
        ``should_stop`` and returns False (and keeps returning False).
        """
        if self.should_stop:
            self._num_steps(num_steps)               # a user error is not a refused step
            self.refused_steps += 1
            return False
        plan = self._plan
        if (plan is not None and type(num_steps) is int and num_steps == 1
                and type(noise_multiplier) is float
                and type(sample_rate) is float):      # fast path: a look-ahead covers it
            source = self._source                    # resolved as in resolve_accountant
            acc = source.accountant if self._engine_like else source
            done = plan.steps_since(getattr(acc, "history", None), noise_multiplier, sample_rate)
            if done is not None and done < plan.covered:
                self._allowed += 1
                return True
        sigma, q = self._schedule(noise_multiplier, sample_rate)
        k = self._num_steps(num_steps)
        allowed, bounds = self._decide(sigma, q, k)
        if allowed:
            self._allowed += k
            return True
        self.refused = bounds
        self.refused_steps += 1
        steps = steps_taken(self.accountant)
        span = ""
        if self.every_n_steps is not None and self.lookahead:
            span = f" (checked {max(k, self.every_n_steps)} steps ahead, every_n_steps)"
        message = (f"privacy budget exceeded: the next step would take the certified epsilon "
                   f"({self.assumption_text()}) to {up(bounds.upper)} > max_epsilon="
                   f"{exact(self.max_epsilon)} at delta={exact(self.delta)}"
                   + span + ("" if steps is None else f" after {steps} steps")
                   + "; the step was not taken")
        if math.isinf(bounds.upper) and bounds.notes:
            message += f" ({bounds.notes[-1]})"
        if self.mode == "raise":
            raise BudgetExceededError(message, epsilon=bounds.upper, max_epsilon=self.max_epsilon,
                                      delta=self.delta, steps=steps)
        self.should_stop = True
        self.stop_message = message
        return False

    def reset(self) -> None:
        """Clear ``should_stop`` (for example after raising the budget)."""
        self.should_stop = False
        self.refused = None
        self.stop_message = None
        self._drop_lookahead()

    def __setstate__(self, state) -> None:
        # a guard pickled before its settings were properties holds them under their
        # public names, which the properties now hide: move them to their private ones
        state = dict(state)
        for name in _SETTINGS:
            if name in state and "_" + name not in state:
                state["_" + name] = state.pop(name)
        self.__dict__.update(state)

    def _drop_lookahead(self) -> None:
        """Forget the look-ahead plan and what predicted it (made under other settings)."""
        self._plan = None
        self._points, self._span, self._curve, self._memo = [], 0, None, None

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The guard's counters and stop flag (JSON-serialisable), for checkpoints.

        The accountant is checkpointed on its own (``accountant.state_dict()``, Opacus's
        ``PrivacyEngine.save_checkpoint`` or a tracker's/callback's state); the
        look-ahead is not saved: it is recomputed and does not change the stopping step.
        """
        return {"should_stop": self.should_stop, "refused_steps": self.refused_steps,
                "stop_message": self.stop_message, "max_epsilon": self.max_epsilon,
                "delta": self.delta}

    @staticmethod
    def check_state(state) -> int:
        """Validate a :meth:`state_dict` (ValueError naming what is wrong) without
        loading it; its refused-step count.  Callers that restore more than the guard
        check it before they change anything."""
        if not isinstance(state, dict) or "should_stop" not in state:
            raise ValueError(f"state must be a dict from BudgetGuard.state_dict(), got {state!r}")
        # every field is checked here, before a caller restores anything: a malformed
        # one must not pass for a stop (bool("false") is True) nor fail half-way through
        check_flag("state['should_stop']", state["should_stop"])
        if state.get("max_epsilon") is not None:
            check_real("state['max_epsilon']", state["max_epsilon"], low=0.0, allow_inf=True)
        if state.get("delta") is not None:
            check_delta(state["delta"], "state['delta']")
        message = state.get("stop_message")
        if message is not None and not isinstance(message, str):
            raise ValueError(f"state['stop_message'] must be a string or None, got {message!r}")
        return check_count("state['refused_steps']", state.get("refused_steps", 0))

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; a stop is kept only for the same budget and delta."""
        refused = self.check_state(state)
        same_budget = (state.get("max_epsilon") == self.max_epsilon
                       and state.get("delta") == self.delta)
        self.refused_steps = refused
        self.should_stop = bool(state["should_stop"]) and same_budget
        self.stop_message = state.get("stop_message") if self.should_stop else None
        self._plan = None

    # -- Opacus ------------------------------------------------------------------------
    def attach(self, optimizer: Any, *, sample_rate: Optional[float] = None,
               data_loader: Any = None) -> "BudgetGuard":
        """Check before every ``step()`` of an Opacus ``DPOptimizer``.

        ``optimizer.step`` is wrapped: a closure (Lightning passes one) is evaluated
        first, then the pending step - the optimizer's noise multiplier and
        sample_rate x accumulated iterations - is checked before Opacus clips, noises,
        accounts and updates.  The sample rate is the one the accounting hook was
        built with, else ``sample_rate``, else 1/len(data_loader).  A refused step in
        mode "stop" discards the gradients (``zero_grad``) and returns None.  A
        ``data_loader`` that is not the accountant's sampler is warned about
        (``SamplerMismatchWarning``, docs/which-epsilon.md): the guard stops on the
        configured accountant's bound, not the loader's.
        """
        opt = find_dp_optimizer(optimizer)
        if opt is None:
            raise TypeError("attach() needs an Opacus DPOptimizer, got "
                            f"{type(optimizer).__name__}")
        if self._optimizer is not None:
            raise RuntimeError("this guard is already attached to an optimizer; detach() first")
        q = infer_sample_rate(sample_rate=sample_rate if sample_rate is not None else self.sample_rate,
                              optimizer=opt, data_loader=data_loader, accountant=self.accountant)
        if q is None:
            raise ValueError("cannot tell the optimizer's sample rate: pass sample_rate= or "
                             "data_loader= to attach()")
        warn_on_sample_rate(q, data_loader, stacklevel=3)
        # (the guard prices every step at q: above 1 each optimizer.step() had raised
        # inside the training loop, after only a warning here)
        q = check_sample_rate(q)
        if data_loader is not None:      # the guard stops on the configured sampler's bound
            self.loader_check = sampler_check(self.accountant, data_loader, self.delta,
                                              pending=(float(opt.noise_multiplier), q),
                                              stacklevel=3)
        had_own_step = "step" in vars(opt)
        first_param = next(iter(getattr(opt, "params", None) or []), None)
        original = opt.step
        guard = self

        def guarded_step(closure=None, *args, **kwargs):
            loss = None
            if closure is not None:
                import torch  # only reached with torch in use
                with torch.enable_grad():
                    loss = closure()
            skip = getattr(opt, "_check_skip_next_step", None)
            if skip is not None and skip(pop_next=False):
                original(*args, **kwargs)   # a skipped (accumulating) step costs no privacy
                return loss
            try:
                allowed = guard.check(noise_multiplier=float(opt.noise_multiplier),
                                      sample_rate=q * accumulated_iterations(opt, first_param))
            except BudgetExceededError:
                # under a BatchMemoryManager, a loop that catches the error and goes on
                # must not read the next physical batches against this batch's skip flag
                # nor carry its summed gradients into the next logical batch; a step
                # without accumulated physical batches stays as it was (retryable)
                if getattr(opt, "_is_last_step_skipped", False) is True:
                    _discard_step(opt)
                elif getattr(opt, "_step_skip_queue", None):
                    opt._check_skip_next_step(pop_next=True)
                raise
            if not allowed:
                _discard_step(opt)                # the refused step's gradients, all of it
                return None
            result = original(*args, **kwargs)
            return loss if loss is not None else result

        guarded_step._pb_guard = self
        opt.step = guarded_step
        self._optimizer, self._original_step, self._had_own_step = opt, original, had_own_step
        self._opt_sample_rate = q
        return self

    @property
    def attached(self) -> bool:
        """Whether the guard checks an optimizer's steps (``attach``)."""
        return self._optimizer is not None

    def detach(self) -> None:
        """Restore the optimizer's own ``step``."""
        opt = self._optimizer
        if opt is None:
            return
        if getattr(opt.step, "_pb_guard", None) is self:
            if self._had_own_step:
                opt.step = self._original_step
            else:
                del opt.step
        self._optimizer = self._original_step = None
        self._opt_sample_rate = None


def _discard_step(opt: Any) -> None:
    """Drop a refused step as if it had been taken without an update.

    Opacus's ``pre_step`` pops the step's entry from the skip queue that
    ``BatchMemoryManager`` fills (one entry per physical batch); a refused step must pop
    it too, or every later physical batch is read against the entry of an earlier one:
    logical steps end at the wrong batches (mixing two Poisson batches into one noised
    step) and every physical batch counts as a refused step.  The gradients accumulated
    over the logical batch (``summed_grad``, kept by ``zero_grad`` after a skipped
    physical batch) are discarded with the per-sample ones.
    """
    pop = getattr(opt, "_check_skip_next_step", None)
    if pop is not None:
        pop(pop_next=True)
    if hasattr(opt, "_is_last_step_skipped"):
        opt._is_last_step_skipped = False     # so that zero_grad clears summed_grad too
    opt.zero_grad(set_to_none=True)
