"""Framework-independent core of the Lightning and Hugging Face callbacks."""
from __future__ import annotations

import warnings
from typing import Any, Iterable, List, Optional

from pb_accountant._validation import check_count, check_delta, check_flag, check_real

from ._common import (BudgetStateError, accountant_state, check_step_defaults,
                      hook_records_into, find_dp_optimizer, infer_sample_rate,
                      record_accumulated_step, resolve_accountant, restore_accountant,
                      schedule_in_force, steps_taken)
from ._cli_render import exact, up
from .guard import BudgetGuard
from .sampling import check_sample_rate
from .sinks import BudgetRecord
from .tracker import BudgetTracker


class BudgetMonitor:
    """Records the budget every n steps and decides, by look-ahead, when to stop.

    ``after_step()`` is called after each optimisation step: it records when due and
    returns True when the *next* step would exceed ``max_epsilon`` (then it records
    the final budget too).  With an Opacus ``DPOptimizer``, ``setup()`` also attaches a
    :class:`BudgetGuard` in mode "stop" as a hard barrier: even a loop that ignores
    the stop request cannot take a step past the budget.
    """

    def __init__(self, accountant: Any, delta: float, max_epsilon: Optional[float],
                 log_every_n_steps: Optional[int], log_on_epoch_end: bool,
                 sinks: Optional[Iterable[Any]], noise_multiplier: Optional[float],
                 sample_rate: Optional[float], guard_optimizer: bool):
        resolve_accountant(accountant)
        log_on_epoch_end = check_flag("log_on_epoch_end", log_on_epoch_end)
        guard_optimizer = check_flag("guard_optimizer", guard_optimizer)
        self.source = accountant
        self.delta = check_delta(delta)
        # max_epsilon: as BudgetGuard, any budget >= 0 (inf never stops; None: no guard)
        self.max_epsilon = (None if max_epsilon is None
                            else check_real("max_epsilon", max_epsilon, low=0.0, allow_inf=True))
        self.log_every_n_steps = (None if log_every_n_steps is None
                                  else check_count("log_every_n_steps", log_every_n_steps,
                                                   minimum=1))
        self.tracker = BudgetTracker(accountant, delta, every_n_steps=None,
                                     every_epoch=log_on_epoch_end,
                                     sinks=list(sinks) if sinks is not None else [])
        # (validated here: a bad value had raised only after the first step was taken)
        self.noise_multiplier, self.sample_rate = check_step_defaults(noise_multiplier, sample_rate)
        # batches per optimisation step (the framework's gradient accumulation, set by
        # the callbacks): a step over k batches has sample rate k * sample_rate, as
        # Opacus's accounting hook records it
        self.accumulation = 1
        self.guard_optimizer = guard_optimizer
        self.guard: Optional[BudgetGuard] = None
        self.optimizer = None
        self.stopped = False
        self.stop_reason: Optional[str] = None
        self._last_seen_step = None
        self.last_lookahead = None
        self.restored: Optional[str] = None      # "loaded"/"matched" after a resume
        self._guard_state: Optional[dict] = None
        self.account_steps = False
        self._refused_seen = 0         # guard.refused_steps when a step was last accounted

    @property
    def accountant(self) -> Any:
        return resolve_accountant(self.source)

    @property
    def records(self) -> List[BudgetRecord]:
        return self.tracker.records

    def setup(self, optimizers: Iterable[Any], data_loader: Any = None,
              account_steps: bool = False) -> None:
        """Find the DPOptimizer, settle the sample rate, check it, attach the guard.

        ValueError (before anything changes) when ``account_steps`` is set but the
        optimizer's own accounting hook already records every step into this accountant:
        each step would be counted twice."""
        opt = None
        for candidate in optimizers or []:
            opt = find_dp_optimizer(candidate)
            if opt is not None:
                break
        if account_steps and opt is not None and hook_records_into(opt, self.accountant):
            raise ValueError(
                "account_steps=True, but the optimizer's accounting hook (installed by "
                "PrivacyEngine.make_private) already records every step into this "
                "accountant: each step would be counted twice; pass account_steps=False")
        self.optimizer = opt
        if self.noise_multiplier is None and opt is not None:
            self.noise_multiplier = float(opt.noise_multiplier)
        q = infer_sample_rate(sample_rate=self.sample_rate, optimizer=opt, data_loader=data_loader,
                              accountant=self.accountant)
        if account_steps and q is not None and q * self.accumulation > 1.0:
            # (each step over that many batches would be recorded at a rate above 1: it
            # had raised after the first step was taken, unrecorded)
            raise ValueError(
                f"sample_rate={q!r} is one batch's, and a step accumulates "
                f"{self.accumulation} batches: the step's rate {q * self.accumulation!r} "
                "must be in [0, 1]; pass the rate of one batch (1/len(loader)) or "
                "accumulate fewer batches")
        self.sample_rate = q
        if q is not None:
            check_sample_rate(q, data_loader, stacklevel=4)
        if data_loader is None and opt is not None:
            data_loader = getattr(opt, "_pb_data_loader", None)   # set by make_private
        if data_loader is not None and self.tracker.loader_check is None:
            self.tracker.check_loader(data_loader, noise_multiplier=self.noise_multiplier,
                                      sample_rate=q, stacklevel=4)
        if self.max_epsilon is not None:
            self.guard = BudgetGuard(self.source, self.max_epsilon, self.delta, mode="stop",
                                     noise_multiplier=self.noise_multiplier, sample_rate=q)
            if self._guard_state is not None:
                self.guard.load_state_dict(self._guard_state)
            if opt is not None and self.guard_optimizer and q is not None:
                self.guard.attach(opt, sample_rate=q)
        self.account_steps = account_steps
        self._refused_seen = 0 if self.guard is None else self.guard.refused_steps

    def teardown(self) -> None:
        if self.guard is not None:
            self.guard.detach()

    def _pending(self):
        sigma = self.noise_multiplier
        q = self.sample_rate
        last_sigma, last_q = schedule_in_force(self.accountant)
        if self.optimizer is not None:
            sigma = float(self.optimizer.noise_multiplier)   # schedulers may change it
        if q is not None and self.accumulation > 1:
            # the next step accumulates this many batches (the last of an epoch may have
            # fewer: the look-ahead errs on the side of stopping; a rate is at most 1)
            q = min(1.0, q * self.accumulation)
        return (last_sigma if sigma is None else sigma), (last_q if q is None else q)

    def next_step_exceeds(self) -> bool:
        """Look-ahead: would one more step exceed the budget? (no side effect)"""
        if self.max_epsilon is None or self.guard is None:
            return False
        if self.guard.should_stop:
            self.last_lookahead = self.guard.refused
            return True
        sigma, q = self._pending()
        if sigma is None or q is None:
            return False
        if self.guard.allows(noise_multiplier=sigma, sample_rate=q):
            return False                 # certified by the guard's look-ahead (cheap)
        self.last_lookahead = self.guard.last_check
        return True

    def before_optimizer_step(self, optimizer: Any, accumulated: int = 1) -> bool:
        """With ``account_steps`` and no guard on the optimizer (no ``DPOptimizer``),
        the guard checks the pending step over ``accumulated`` batches here, before the
        update; a refused step's gradients are dropped, so the optimizer does not
        update, and :meth:`account` does not record it.  A stop request alone does not
        hold every loop: Hugging Face's Trainer takes its first step after a stop at
        ``on_train_begin``, Lightning goes on below ``min_steps``/``min_epochs``.
        True when the step may be taken."""
        guard = self.guard
        if (not self.account_steps or guard is None or not self.guard_optimizer
                or guard.attached):
            return True
        sigma, q = self._pending()
        if sigma is None or q is None:
            return True                    # account() names what is missing
        if self.sample_rate is not None:
            q = self.sample_rate * accumulated      # as account() records the step
        if guard.check(noise_multiplier=sigma, sample_rate=q):
            return True
        for group in getattr(optimizer, "param_groups", None) or []:
            for param in group.get("params", []):
                param.grad = None          # no gradient: the optimizer skips the update
        return False

    def account(self, accumulated: int = 1) -> None:
        """Step the accountant (for loops whose optimizer does not account) with one
        step over ``accumulated`` batches: sample rate ``accumulated * sample_rate``
        (Opacus's convention: ``sample_rate`` is one batch's).  A step the guard
        refused (on the optimizer or in :meth:`before_optimizer_step`) made no update
        and is not recorded."""
        guard = self.guard
        if guard is not None and guard.refused_steps != self._refused_seen:
            self._refused_seen = guard.refused_steps
            return
        sigma, q = self._pending()
        if sigma is None or q is None:
            raise ValueError("account_steps=True needs noise_multiplier= and sample_rate=")
        if self.sample_rate is not None:
            record_accumulated_step(self.accountant, sigma, self.sample_rate, accumulated)
        else:
            self.accountant.step(noise_multiplier=sigma, sample_rate=q)

    def after_step(self, epoch: Optional[int]) -> tuple:
        """(record or None, stop?) after an optimisation step."""
        step = steps_taken(self.accountant)
        self.tracker.steps_seen += 1
        if step is None:
            step = self.tracker.steps_seen
        self.tracker.epoch = epoch if epoch is not None else self.tracker.epoch
        record = None
        new_step = step != self._last_seen_step
        self._last_seen_step = step
        if (new_step and self.log_every_n_steps and step > 0
                and step % self.log_every_n_steps == 0):
            record = self._record("step", step, epoch)
        stop = False
        if not self.stopped and self.next_step_exceeds():
            stop = True
            self.stopped = True
            ahead = self.last_lookahead
            bound = None if ahead is None else ahead.upper
            self.stop_reason = (
                f"stopping: one more step would exceed max_epsilon={exact(self.max_epsilon)} "
                f"at delta={exact(self.delta)}" + ("" if bound is None
                                                   else f" (eps_upper {up(bound)}")
                + f"{' (' if bound is None else ', '}{self.guard.assumption_text()})")
            if record is None:
                record = self._record("stop", step, epoch)
        return record, stop

    def _record(self, event: str, step: int, epoch: Optional[int]) -> BudgetRecord:
        last = self.tracker.last
        if last is not None and last.step == step and last.event == event:
            return last
        return self.tracker._record(event, step, epoch, in_loop=True)

    def epoch_end(self, epoch: int) -> Optional[BudgetRecord]:
        if not self.tracker.every_epoch:
            return None
        step = steps_taken(self.accountant)
        return self._record("epoch", self.tracker.steps_seen if step is None else step, epoch)

    def train_end(self, epoch: Optional[int]) -> Optional[BudgetRecord]:
        step = steps_taken(self.accountant)
        step = self.tracker.steps_seen if step is None else step
        last = self.tracker.last
        if last is not None and last.step == step:
            return None
        return self._record("end", step, epoch)

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Accountant history, tracker counters and guard state (JSON-serialisable)."""
        guard = self.guard.state_dict() if self.guard is not None else self._guard_state
        return {"format": STATE_FORMAT, "accountant": accountant_state(self.accountant),
                "tracker": {"epoch": self.tracker.epoch, "steps_seen": self.tracker.steps_seen},
                "guard": guard, "stopped": self.stopped, "stop_reason": self.stop_reason}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`: the accountant first (see ``restore_accountant``)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a privacy-budget callback state ({STATE_FORMAT!r}): {state!r}")
        tracker = state.get("tracker") or {}
        if not isinstance(tracker, dict):
            raise ValueError(f"state['tracker'] must be a dict or None, got {tracker!r}")
        epoch = check_count("state['tracker']['epoch']", tracker.get("epoch", 0))
        seen = check_count("state['tracker']['steps_seen']", tracker.get("steps_seen", 0))
        guard = state.get("guard")
        if guard is not None and not isinstance(guard, dict):
            raise ValueError(f"state['guard'] must be a dict or None, got {guard!r}")
        if guard is not None:
            BudgetGuard.check_state(guard)           # before anything is restored
        stopped = state.get("stopped")
        if stopped is not None:
            check_flag("state['stopped']", stopped)
        self.restored = restore_accountant(self.accountant, state.get("accountant"))
        self.tracker.epoch, self.tracker.steps_seen = epoch, seen
        self._guard_state = guard
        if self.guard is not None and guard is not None:
            self.guard.load_state_dict(guard)
            self._refused_seen = self.guard.refused_steps     # not a refusal of a step
        same_budget = bool(guard) and (guard.get("max_epsilon") == self.max_epsilon
                                       and guard.get("delta") == self.delta)
        self.stopped = bool(state.get("stopped")) and same_budget and bool(guard.get("should_stop"))
        self.stop_reason = state.get("stop_reason") if self.stopped else None

    def check_resume(self, global_step: int, where: str) -> None:
        """Refuse to resume at ``global_step`` > 0 with an accountant that has spent nothing.

        Raises :class:`BudgetStateError` when no budget state was restored and the
        accountant is empty (it would silently start from zero); warns when the
        accountant (restored or not) holds fewer steps than the framework has taken
        (steps the guard refused count as taken).
        """
        if not global_step:
            return
        steps = steps_taken(self.accountant)
        if self.restored not in (None, "none"):
            refused = (self._guard_state or {}).get("refused_steps", 0)
            if steps is not None and steps + refused < global_step:
                warnings.warn(
                    f"resuming at step {global_step} with the privacy-budget state from "
                    f"{where}, which holds only {steps} steps: the steps after it are not "
                    "accounted for (resume from the matching checkpoint)",
                    RuntimeWarning, stacklevel=3)
            return
        if steps == 0 or (steps is None and not self.tracker.steps_seen):
            # (a state whose accountant entry is None restores no history either: it had
            # let training go on from zero with a warning only)
            held = ("held no privacy-budget state" if self.restored is None
                    else "held a privacy-budget state without the accountant's history")
            raise BudgetStateError(
                f"resuming at step {global_step} but the accountant has no history and {where} "
                f"{held}: the privacy already spent would be forgotten. "
                "Save the callback's state with the checkpoint (docs/training-budget.md, "
                "'Resuming'), or restore the accountant before training "
                "(accountant.load_state_dict(...)).")
        if steps is not None and steps < global_step:
            warnings.warn(
                f"resuming at step {global_step} without a privacy-budget state from {where}; "
                f"the accountant holds only {steps} steps: check that it was restored",
                RuntimeWarning, stacklevel=3)


STATE_FORMAT = "pb_accountant.callback/1"


def check_name(name: Optional[str]) -> Optional[str]:
    """A callback's ``name`` (None, or letters, digits, '.', '_', '-': it names a file)."""
    if name is None:
        return None
    if (not isinstance(name, str) or not name or len(name) > 100
            or not all(c.isascii() and (c.isalnum() or c in "._-") for c in name)):
        raise ValueError("name must be None or 1 to 100 letters, digits, '.', '_' or '-', "
                         f"got {name!r}")
    return name


class MonitorView:
    """Read-only access to a callback's ``BudgetMonitor`` (shared by the callbacks)."""

    monitor: BudgetMonitor

    @property
    def records(self):
        return self.monitor.records

    @property
    def stopped(self) -> bool:
        return self.monitor.stopped

    @property
    def stop_reason(self) -> Optional[str]:
        return self.monitor.stop_reason

    @property
    def guard(self):
        return self.monitor.guard
