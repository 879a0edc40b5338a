"""``BudgetTracker``: record the privacy spent during training and send it to sinks.

    >>> tracker = BudgetTracker(engine.accountant, delta=1e-5, every_n_steps=50,
    ...                         sinks=[LoggingSink(), CSVSink("budget.csv")])
    >>> tracker.attach(optimizer, data_loader=train_loader)   # Opacus DPOptimizer
    >>> for epoch in range(epochs):
    ...     for x, y in train_loader:
    ...         ...; optimizer.step()                          # recorded every 50 steps
    ...     tracker.on_epoch_end(epoch)                       # and at every epoch end

Without Opacus call ``tracker.on_step()`` after each step (having stepped the
accountant).  Each record holds step, epoch, delta, both certified epsilon bounds, the
sampler and neighbouring relation they assume, and the noise multiplier and sample
rate in force.  Given the data loader (``attach(..., data_loader=)`` or
``check_loader``), the tracker compares its sampler with the accountant's: on a
mismatch (a shuffled ``DataLoader`` under a Poisson accountant, say) it warns with a
:class:`~pb_accountant.integrations.sampling.SamplerMismatchWarning` and every record
also carries the loader's own bracket (docs/which-epsilon.md).

A sink that raises (a full disk, a closed file, a broken callable) never stops
training: the error is kept in ``tracker.sink_errors``, a :class:`SinkErrorWarning` is
issued, that sink is disabled (moved to ``tracker.disabled_sinks``, not retried) and
the other sinks still get every record.  ``state_dict()``/``load_state_dict()`` carry
the tracker's counters and the accountant's history through a checkpoint
(docs/training-budget.md, "Resuming").
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional

from pb_accountant._validation import check_count, check_delta, check_flag
from pb_accountant.results import EpsilonBounds

from ._common import (accountant_state, accumulated_iterations, epsilon_bounds, find_dp_optimizer,
                      infer_sample_rate, record_accumulated_step, resolve_accountant,
                      restore_accountant, schedule_in_force, steps_taken)
from .sampling import accountant_assumptions, check_sample_rate, sampler_check
from .sinks import (BudgetRecord, CSVSink, JSONLinesSink, LoggingSink, Sink,
                    TensorBoardSink, as_sink)

__all__ = ["BudgetTracker", "BudgetRecord", "LoggingSink", "CSVSink", "JSONLinesSink",
           "TensorBoardSink", "SinkError", "SinkErrorWarning"]


class SinkErrorWarning(RuntimeWarning):
    """A sink failed to write a budget record; it was disabled, training goes on."""


@dataclass(frozen=True)
class SinkError:
    """One failure: the sink (None: computing the record failed), the exception, the step."""

    sink: Any
    error: BaseException
    step: Optional[int]


class BudgetTracker:
    """Records (step, epoch, delta, eps_lower, eps_upper, sigma, q) and writes it to sinks.

    Args:
        accountant: a ``PrivacyBucketsAccountant`` (both bounds), any Opacus accountant
            (upper bound only; lower reported as 0) or a ``PrivacyEngine``.
        delta: the delta the bounds are reported at.
        every_n_steps: record every n optimisation steps (None: never on steps).
        every_epoch: record at ``on_epoch_end``.
        sinks: sink objects or callables; default ``[LoggingSink()]``.
    """

    def __init__(self, accountant: Any, delta: float, every_n_steps: Optional[int] = None,
                 every_epoch: bool = True, sinks: Optional[Iterable[Any]] = None):
        self._source = accountant
        resolve_accountant(accountant)                      # fail early on a wrong type
        self.delta = check_delta(delta)
        self.every_n_steps = (None if every_n_steps is None
                              else check_count("every_n_steps", every_n_steps, minimum=1))
        self.every_epoch = check_flag("every_epoch", every_epoch)
        self.sinks: List[Sink] = [as_sink(s) for s in (sinks if sinks is not None
                                                        else [LoggingSink()])]
        self.records: List[BudgetRecord] = []
        self.sink_errors: List[SinkError] = []
        self.disabled_sinks: List[Sink] = []
        self.step = 0
        self.epoch = 0
        self.steps_seen = 0            # on_step calls (the step count without a history)
        self._optimizer = None
        self._previous_hook = None
        self._sample_rate: Optional[float] = None
        self._account = False
        self.loader_check = None       # sampling.SamplerCheck of the loader feeding training

    # -- state ------------------------------------------------------------------------
    @property
    def accountant(self) -> Any:
        return resolve_accountant(self._source)

    @property
    def last(self) -> Optional[BudgetRecord]:
        return self.records[-1] if self.records else None

    def _steps(self) -> int:
        n = steps_taken(self.accountant)
        return self.steps_seen if n is None else n

    def _schedule(self):
        sigma, q = schedule_in_force(self.accountant)
        if sigma is None and self._optimizer is not None:
            sigma = float(self._optimizer.noise_multiplier)
            q = self._sample_rate
        return sigma, q

    # -- recording ---------------------------------------------------------------------
    def record(self, event: str = "manual", *, step: Optional[int] = None,
               epoch: Optional[int] = None) -> BudgetRecord:
        """Compute the bounds now and send a record to every sink.

        Called directly, a failure of the accountant propagates.  From the training-loop
        hooks (``on_step``, ``on_epoch_end``, ``on_train_end``, callbacks) it is warned
        with its cause, kept in ``sink_errors`` and answered with the valid bound
        eps_upper = inf, so that training goes on.
        """
        step = None if step is None else check_count("step", step)
        epoch = None if epoch is None else check_count("epoch", epoch)
        return self._record(event, step, epoch, in_loop=False)

    def _record(self, event: str, step: Optional[int], epoch: Optional[int], *,
                in_loop: bool) -> BudgetRecord:
        step = self._steps() if step is None else int(step)
        epoch = self.epoch if epoch is None else int(epoch)
        try:
            bounds = epsilon_bounds(self.accountant, self.delta)
        except Exception as exc:
            if not in_loop:
                raise
            self._sink_failed(None, exc, step)    # loud: SinkErrorWarning with the cause
            bounds = EpsilonBounds(self.delta, 0.0, math.inf, method="none",
                                   notes=(f"the accountant failed: {exc!r}",))
        sigma, q = self._schedule()
        assumed = accountant_assumptions(self.accountant)
        loader, loader_lower, loader_upper, relation = self._loader_bounds(step, in_loop)
        rec = BudgetRecord(step=step, epoch=epoch, delta=self.delta,
                           eps_lower=float(bounds.lower), eps_upper=float(bounds.upper),
                           noise_multiplier=sigma, sample_rate=q, event=event,
                           time=time.time(), sampler=str(assumed["sampler"]),
                           neighbouring=str(assumed["neighbouring"]), loader_sampler=loader,
                           loader_eps_lower=loader_lower, loader_eps_upper=loader_upper,
                           loader_neighbouring=relation)
        self.records.append(rec)
        for sink in list(self.sinks):
            try:
                sink.write(rec)
            except Exception as exc:          # a sink never stops training
                self._sink_failed(sink, exc, rec.step)
        return rec

    def _loader_bounds(self, step, in_loop: bool):
        """(loader sampler, its eps_lower, eps_upper) for a record: the bracket of the
        loader's sampler at the accountant's current history when they do not match."""
        check = self.loader_check
        if check is None:
            return None, None, None, None
        if check.match or check.sibling is None:
            return check.loader_sampler, None, None, None
        sibling = check.sibling
        relation = accountant_assumptions(sibling)["neighbouring"]
        try:
            # (a what-if query: the shared sibling keeps its history, so a record made
            # from another thread cannot carry this record's bracket, nor this one its)
            bounds = sibling.epsilon_bounds_of(
                list(getattr(self.accountant, "history", []) or []), self.delta)
        except Exception as exc:
            if not in_loop:
                raise
            self._sink_failed(None, exc, step)
            return check.loader_sampler, 0.0, math.inf, relation
        # fixed batches, or examples left out of an epoch: the shuffle upper bound (no
        # amplification) holds; its lower bound assumes every example in a uniformly
        # random batch of every epoch, so 0 is reported
        lower = 0.0 if check.sampling.upper_only else float(bounds.lower)
        return check.loader_sampler, lower, float(bounds.upper), relation

    def check_loader(self, data_loader: Any, *, noise_multiplier: Optional[float] = None,
                     sample_rate: Optional[float] = None, stacklevel: int = 2):
        """Compare the loader that feeds training with the accountant's sampler.

        Warns (:class:`~pb_accountant.integrations.sampling.SamplerMismatchWarning`) on a
        mismatch, naming the loader's sampler, the epsilon it implies and how to switch;
        from then on every record carries ``loader_sampler`` and, on a mismatch, the
        loader's bracket.  Returns the ``SamplerCheck`` (None without a loader).
        """
        pending = (noise_multiplier, sample_rate)
        check = sampler_check(self.accountant, data_loader, self.delta, pending=pending,
                              stacklevel=stacklevel + 1)
        if check is not None:
            self.loader_check = check
        return check

    def _sink_failed(self, sink: Any, exc: BaseException, step: Optional[int]) -> None:
        self.sink_errors.append(SinkError(sink, exc, step))
        name = "recording" if sink is None else type(sink).__name__
        where = getattr(sink, "path", None)
        if sink is not None and sink in self.sinks:
            self.sinks.remove(sink)
            self.disabled_sinks.append(sink)
            try:
                close = getattr(sink, "close", None)
                if close is not None:
                    close()
            except Exception:
                pass
            action = "the sink is disabled; training goes on"
        else:
            action = "training goes on"
        warnings.warn(f"budget {name}{'' if where is None else f' ({where!r})'} failed at step "
                      f"{step}: {exc!r}; {action} (see tracker.sink_errors)",
                      SinkErrorWarning, stacklevel=3)

    def on_step(self, step: Optional[int] = None) -> Optional[BudgetRecord]:
        """Call after every optimisation step; records when ``every_n_steps`` divides it.

        ``step`` defaults to the number of steps in the accountant's history (or an
        internal counter for accountants without one).
        """
        step = None if step is None else check_count("step", step)   # before any change
        self.steps_seen += 1
        self.step = self._steps() if step is None else step
        if self.every_n_steps and self.step > 0 and self.step % self.every_n_steps == 0:
            if self.last is not None and self.last.step == self.step:
                return None
            return self._record("step", None, None, in_loop=True)
        return None

    def on_epoch_end(self, epoch: Optional[int] = None) -> Optional[BudgetRecord]:
        """Call at the end of every epoch (0-based ``epoch``; default: counted here)."""
        epoch = self.epoch if epoch is None else check_count("epoch", epoch)
        rec = None
        if self.every_epoch:
            rec = self._record("epoch", None, epoch, in_loop=True)
        self.epoch = epoch + 1
        return rec

    def on_train_end(self) -> Optional[BudgetRecord]:
        """Record the final budget unless the last record already is at this step."""
        step = self._steps()
        if self.last is not None and self.last.step == step:
            return None
        return self._record("end", None, None, in_loop=True)

    # -- Opacus ------------------------------------------------------------------------
    def attach(self, optimizer: Any, *, data_loader: Any = None,
               sample_rate: Optional[float] = None, account: Optional[bool] = None) -> "BudgetTracker":
        """Call ``on_step`` after every step of an Opacus ``DPOptimizer``.

        The tracker chains onto ``optimizer.step_hook`` and runs after the accountant's
        own hook (installed by ``PrivacyEngine.make_private``), so each record includes
        the step just taken.  With no hook installed (or ``account=True``) the tracker
        steps the accountant itself with ``sample_rate`` (or 1/len(data_loader)).
        The sample rate is checked with :func:`check_sample_rate`.
        """
        account = None if account is None else check_flag("account", account)
        opt = find_dp_optimizer(optimizer)
        if opt is None:
            raise TypeError("attach() needs an Opacus DPOptimizer (with attach_step_hook), got "
                            f"{type(optimizer).__name__}")
        if self._optimizer is not None:
            raise RuntimeError("this tracker is already attached to an optimizer; detach() first")
        previous = getattr(opt, "step_hook", None)
        account = previous is None if account is None else account
        q = infer_sample_rate(sample_rate=sample_rate, optimizer=opt, data_loader=data_loader,
                              accountant=self.accountant)
        if q is None and account:
            raise ValueError("the tracker must step the accountant (the optimizer has no "
                             "accounting hook) but the sample rate is unknown: pass sample_rate= "
                             "or data_loader=")
        if q is not None:
            check_sample_rate(q, data_loader, stacklevel=3)
            if account and q > 1.0:
                # (the tracker records every step at q: above 1 each optimizer.step() had
                # raised inside the training loop, after only a warning here)
                raise ValueError(f"sample_rate must be in [0, 1] for a tracker that steps the "
                                 f"accountant itself (account=True), got {q!r}")
        self._account = account
        self._sample_rate = q
        loader = data_loader if data_loader is not None else getattr(opt, "_pb_data_loader", None)
        if loader is not None:
            self.check_loader(loader, noise_multiplier=float(opt.noise_multiplier),
                              sample_rate=q, stacklevel=3)

        def hook(optim):
            if previous is not None:
                previous(optim)
            if self._account:
                record_accumulated_step(self.accountant, optim.noise_multiplier, q,
                                        accumulated_iterations(optim))
            try:              # the step is accounted: nothing here may stop its update
                self.on_step()
            except Exception as exc:
                self._sink_failed(None, exc, self.step)

        hook._pb_wrapped = previous
        hook._pb_sample_rate = q
        opt.attach_step_hook(hook)
        self._optimizer, self._previous_hook, self._hook = opt, previous, hook
        return self

    def detach(self) -> None:
        """Restore the optimizer's previous step hook."""
        if self._optimizer is not None:
            if getattr(self._optimizer, "step_hook", None) is self._hook:
                self._optimizer.attach_step_hook(self._previous_hook)
            self._optimizer = self._previous_hook = None

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Counters and the accountant's history (JSON-serialisable), for checkpoints.

        Store it beside the model, e.g. in the ``checkpoint_dict`` of Opacus's
        ``PrivacyEngine.save_checkpoint`` (docs/training-budget.md, "Resuming").
        """
        return {"step": self.step, "epoch": self.epoch, "steps_seen": self.steps_seen,
                "accountant": accountant_state(self.accountant)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        An empty accountant is given the saved history; one that already holds it
        (Opacus's ``load_checkpoint`` restored it) is left alone; one holding a
        different history is an error (ValueError, nothing changed).
        """
        if not isinstance(state, dict) or "accountant" not in state:
            raise ValueError(f"state must be a dict from BudgetTracker.state_dict(), got {state!r}")
        step = check_count("state['step']", state.get("step", 0))
        epoch = check_count("state['epoch']", state.get("epoch", 0))
        seen = check_count("state['steps_seen']", state.get("steps_seen", 0))
        if state["accountant"] is None and max(step, seen) and steps_taken(self.accountant) == 0:
            # (it had been taken: the counters restored, the accountant left empty, every
            # later bound that of the steps after the resume only)
            raise ValueError(f"state['accountant'] is None but the state counts {max(step, seen)} "
                             "steps: it holds no history to give this empty accountant "
                             "(a state from an accountant without state_dict?)")
        restore_accountant(self.accountant, state["accountant"])
        self.step, self.epoch, self.steps_seen = step, epoch, seen

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Detach and close every sink."""
        self.detach()
        for sink in list(self.sinks):
            close = getattr(sink, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:
                    self._sink_failed(sink, exc, self.step)

    def __enter__(self) -> "BudgetTracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

