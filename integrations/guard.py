"""``BudgetGuard``: stop DP training before the step that would exceed a privacy budget.

Before every step the guard asks the accountant what the certified upper bound would
be *after* the pending step (``epsilon_after``, no state change).  If that exceeds
``max_epsilon`` the step is refused:

* ``mode="raise"``: :class:`BudgetExceededError` is raised before the optimizer
  updates the parameters (and before the accountant records the step);
* ``mode="stop"``: ``guard.should_stop`` is set; an attached optimizer skips the
  update (gradients are discarded), and a framework loop reads the flag and ends.

Either way every step that was taken, hence every recorded budget, is within the
target: certified ``eps_upper <= max_epsilon``.

    >>> guard = BudgetGuard(engine.accountant, max_epsilon=3.0, delta=1e-5, mode="raise")
    >>> guard.attach(optimizer)                 # Opacus DPOptimizer: checked in step()
    >>> # or by hand, before each step of any loop:
    >>> if not guard.check(noise_multiplier=sigma, sample_rate=q): break
"""
from __future__ import annotations

import math
from typing import Any, Optional

from pb_accountant.results import EpsilonBounds

from ._common import (accumulated_iterations, check_delta_arg, epsilon_after,
                      find_dp_optimizer, infer_sample_rate, resolve_accountant,
                      schedule_in_force, steps_taken)
from .sampling import check_sample_rate

__all__ = ["BudgetGuard", "BudgetExceededError"]

MODES = ("raise", "stop")


class BudgetExceededError(RuntimeError):
    """The next step would take the certified epsilon past the budget (step not taken)."""

    def __init__(self, message: str, *, epsilon: float, max_epsilon: float, delta: float,
                 steps: Optional[int]):
        super().__init__(message)
        self.epsilon = epsilon
        self.max_epsilon = max_epsilon
        self.delta = delta
        self.steps = steps


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
    """

    def __init__(self, accountant: Any, max_epsilon: float, delta: float, mode: str = "raise",
                 *, noise_multiplier: Optional[float] = None,
                 sample_rate: Optional[float] = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES!r}, got {mode!r}")
        if (isinstance(max_epsilon, bool) or not isinstance(max_epsilon, (int, float))
                or math.isnan(max_epsilon) or max_epsilon < 0):
            raise ValueError(f"max_epsilon must be a number >= 0, got {max_epsilon!r}")
        self._source = accountant
        resolve_accountant(accountant)
        self.max_epsilon = float(max_epsilon)
        self.delta = check_delta_arg(delta)
        self.mode = mode
        self.noise_multiplier = noise_multiplier
        self.sample_rate = sample_rate
        self.should_stop = False
        self.last_check: Optional[EpsilonBounds] = None      # bounds of the last pending step
        self.refused: Optional[EpsilonBounds] = None         # bounds of the refused step
        self.refused_steps = 0
        self.stop_message: Optional[str] = None
        self._optimizer = None
        self._original_step = None
        self._opt_sample_rate: Optional[float] = None

    @property
    def accountant(self) -> Any:
        return resolve_accountant(self._source)

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
        return float(sigma), float(q)

    def epsilon_after(self, noise_multiplier: Optional[float] = None,
                      sample_rate: Optional[float] = None, num_steps: int = 1) -> EpsilonBounds:
        """Bounds after ``num_steps`` more steps (no state change, no side effect)."""
        sigma, q = self._schedule(noise_multiplier, sample_rate)
        return epsilon_after(self.accountant, self.delta, sigma, q, num_steps)

    def would_exceed(self, noise_multiplier: Optional[float] = None,
                     sample_rate: Optional[float] = None, num_steps: int = 1) -> bool:
        """True if ``num_steps`` more steps would exceed the budget (no side effect)."""
        return self.epsilon_after(noise_multiplier, sample_rate, num_steps).upper > self.max_epsilon

    def check(self, noise_multiplier: Optional[float] = None,
              sample_rate: Optional[float] = None, num_steps: int = 1) -> bool:
        """Call BEFORE a step: True if it may be taken.

        Otherwise mode "raise" raises :class:`BudgetExceededError` and mode "stop" sets
        ``should_stop`` and returns False (and keeps returning False).
        """
        if self.should_stop:
            self.refused_steps += 1
            return False
        bounds = self.epsilon_after(noise_multiplier, sample_rate, num_steps)
        self.last_check = bounds
        if bounds.upper <= self.max_epsilon:
            return True
        self.refused = bounds
        self.refused_steps += 1
        steps = steps_taken(self.accountant)
        message = (f"privacy budget exceeded: the next step would take the certified epsilon to "
                   f"{bounds.upper:.6g} > max_epsilon={self.max_epsilon:g} at delta={self.delta:g}"
                   + ("" if steps is None else f" after {steps} steps")
                   + "; the step was not taken")
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

    # -- Opacus ------------------------------------------------------------------------
    def attach(self, optimizer: Any, *, sample_rate: Optional[float] = None,
               data_loader: Any = None) -> "BudgetGuard":
        """Check before every ``step()`` of an Opacus ``DPOptimizer``.

        ``optimizer.step`` is wrapped: a closure (Lightning passes one) is evaluated
        first, then the pending step - the optimizer's noise multiplier and
        sample_rate x accumulated iterations - is checked before Opacus clips, noises,
        accounts and updates.  The sample rate is the one the accounting hook was
        built with, else ``sample_rate``, else 1/len(data_loader).  A refused step in
        mode "stop" discards the gradients (``zero_grad``) and returns None.
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
        check_sample_rate(q, data_loader, stacklevel=3)
        had_own_step = "step" in vars(opt)
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
            allowed = guard.check(noise_multiplier=float(opt.noise_multiplier),
                                  sample_rate=q * accumulated_iterations(opt))
            if not allowed:
                opt.zero_grad(set_to_none=True)   # discard the refused step's gradients
                return None
            result = original(*args, **kwargs)
            return loss if loss is not None else result

        guarded_step._pb_guard = self
        opt.step = guarded_step
        self._optimizer, self._original_step, self._had_own_step = opt, original, had_own_step
        self._opt_sample_rate = q
        return self

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
