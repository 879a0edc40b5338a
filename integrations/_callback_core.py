"""Framework-independent core of the Lightning and Hugging Face callbacks."""
from __future__ import annotations

from typing import Any, Iterable, List, Optional

from ._common import (check_delta_arg, check_positive_arg, find_dp_optimizer,
                      infer_sample_rate, resolve_accountant, schedule_in_force, steps_taken)
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
        self.source = accountant
        self.delta = check_delta_arg(delta)
        self.max_epsilon = (None if max_epsilon is None
                            else check_positive_arg("max_epsilon", max_epsilon))
        self.log_every_n_steps = check_positive_arg("log_every_n_steps", log_every_n_steps,
                                                    allow_none=True, integer=True)
        self.tracker = BudgetTracker(accountant, delta, every_n_steps=None,
                                     every_epoch=log_on_epoch_end,
                                     sinks=list(sinks) if sinks is not None else [])
        self.noise_multiplier = noise_multiplier
        self.sample_rate = sample_rate
        self.guard_optimizer = guard_optimizer
        self.guard: Optional[BudgetGuard] = None
        self.optimizer = None
        self.stopped = False
        self.stop_reason: Optional[str] = None
        self._last_seen_step = None
        self.last_lookahead = None

    @property
    def accountant(self) -> Any:
        return resolve_accountant(self.source)

    @property
    def records(self) -> List[BudgetRecord]:
        return self.tracker.records

    def setup(self, optimizers: Iterable[Any], data_loader: Any = None) -> None:
        """Find the DPOptimizer, settle the sample rate, check it, attach the guard."""
        opt = None
        for candidate in optimizers or []:
            opt = find_dp_optimizer(candidate)
            if opt is not None:
                break
        self.optimizer = opt
        if self.noise_multiplier is None and opt is not None:
            self.noise_multiplier = float(opt.noise_multiplier)
        q = infer_sample_rate(sample_rate=self.sample_rate, optimizer=opt, data_loader=data_loader,
                              accountant=self.accountant)
        self.sample_rate = q
        if q is not None:
            check_sample_rate(q, data_loader, stacklevel=4)
        if self.max_epsilon is not None:
            self.guard = BudgetGuard(self.source, self.max_epsilon, self.delta, mode="stop",
                                     noise_multiplier=self.noise_multiplier, sample_rate=q)
            if opt is not None and self.guard_optimizer and q is not None:
                self.guard.attach(opt, sample_rate=q)

    def teardown(self) -> None:
        if self.guard is not None:
            self.guard.detach()

    def _pending(self):
        sigma = self.noise_multiplier
        q = self.sample_rate
        last_sigma, last_q = schedule_in_force(self.accountant)
        if self.optimizer is not None:
            sigma = float(self.optimizer.noise_multiplier)   # schedulers may change it
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
        self.last_lookahead = self.guard.epsilon_after(noise_multiplier=sigma, sample_rate=q)
        return self.last_lookahead.upper > self.max_epsilon

    def account(self, accumulated: int = 1) -> None:
        """Step the accountant (for loops whose optimizer does not account)."""
        sigma, q = self._pending()
        if sigma is None or q is None:
            raise ValueError("account_steps=True needs noise_multiplier= and sample_rate=")
        self.accountant.step(noise_multiplier=sigma, sample_rate=q * accumulated)

    def after_step(self, epoch: Optional[int]) -> tuple:
        """(record or None, stop?) after an optimisation step."""
        step = steps_taken(self.accountant)
        if step is None:
            step = self.tracker._counter + 1
        self.tracker._counter += 1
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
                f"stopping: one more step would exceed max_epsilon={self.max_epsilon:g} at "
                f"delta={self.delta:g}" + ("" if bound is None else f" (eps_upper {bound:.6g})"))
            if record is None:
                record = self._record("stop", step, epoch)
        return record, stop

    def _record(self, event: str, step: int, epoch: Optional[int]) -> BudgetRecord:
        last = self.tracker.last
        if last is not None and last.step == step and last.event == event:
            return last
        return self.tracker.record(event, step=step, epoch=epoch)

    def epoch_end(self, epoch: int) -> Optional[BudgetRecord]:
        if not self.tracker.every_epoch:
            return None
        step = steps_taken(self.accountant)
        return self._record("epoch", self.tracker._counter if step is None else step, epoch)

    def train_end(self, epoch: Optional[int]) -> Optional[BudgetRecord]:
        step = steps_taken(self.accountant)
        step = self.tracker._counter if step is None else step
        last = self.tracker.last
        if last is not None and last.step == step:
            return None
        return self._record("end", step, epoch)


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
