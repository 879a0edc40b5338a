"""Hugging Face ``transformers`` callback: log the privacy budget, stop before it is exceeded.

    >>> trainer = Trainer(model=dp_model, args=args, train_dataset=data,
    ...                   optimizers=(dp_optimizer, None),
    ...                   callbacks=[PrivacyBudgetCallback(engine, delta=1e-5, max_epsilon=3.0)])

Every ``log_every_n_steps`` optimisation steps (default: ``args.logging_steps``) the
certified bounds are recorded: appended to ``state.log_history`` as
``{"epsilon_lower", "epsilon_upper", "delta", "step", "sampler", "neighbouring"}`` (so they land in
``trainer_state.json``), added to the next ``on_log`` payload (seen by callbacks
registered after this one, such as the printer; the ``report_to`` integrations run
before user callbacks and do not see it: use a ``TensorBoardSink``), and written to
the given sinks.  When one more step would exceed ``max_epsilon`` the callback sets
``control.should_training_stop = True``; with an Opacus ``DPOptimizer`` a
:class:`~pb_accountant.integrations.guard.BudgetGuard` in mode "stop" also refuses any step past
the budget.  With ``account_steps=True`` the callback steps the accountant itself
(for set-ups whose optimizer adds the noise but does not account).

The Trainer clears gradients with ``model.zero_grad()`` only, which leaves Opacus's
``summed_grad`` in place, so the second step fails ("Gradients haven't been cleared
since the last optimizer step").  With ``clear_dp_gradients=True`` (default) the
callback calls the DPOptimizer's ``zero_grad`` at the start of every step.

The Trainer's own loader shuffles once per epoch (a ``RandomSampler``), which is not
the Poisson sampling the default accountant assumes: at ``on_train_begin`` the callback
compares the two and warns with a ``SamplerMismatchWarning`` naming the epsilon the
loader implies; the entries then also hold ``loader_sampler`` and the loader's bracket
(``shuffle_epsilon_lower``/``shuffle_epsilon_upper``; docs/which-epsilon.md).

Resuming: at every checkpoint (``on_save``) the callback writes ``STATE_FILE``
(the accountant's history, the tracker's counters and the guard's state, JSON) into
``args.output_dir/checkpoint-<global_step>``.  When ``trainer.train(resume_from_checkpoint=...)``
starts at ``global_step > 0`` it reads that file from the checkpoint folder (or from
``resume_from=`` given to the callback) and restores the accountant before the first
step; with neither the file nor a non-empty accountant it raises
:class:`~pb_accountant.integrations.BudgetStateError` rather than starting from zero.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any, Iterable, Optional

from transformers import TrainerCallback

from ._callback_core import BudgetMonitor, MonitorView

__all__ = ["PrivacyBudgetCallback", "STATE_FILE"]

STATE_FILE = "pb_accountant_state.json"


class PrivacyBudgetCallback(MonitorView, TrainerCallback):
    """Log ``epsilon_lower``/``epsilon_upper`` and stop before ``max_epsilon`` is exceeded.

    ``resume_from``: a checkpoint folder (or a ``STATE_FILE``) to restore the budget
    from when the Trainer resumes; default: ``args.output_dir/checkpoint-<global_step>``.
    """

    def __init__(self, accountant: Any, delta: float, max_epsilon: Optional[float] = None,
                 log_every_n_steps: Optional[int] = None, log_on_epoch_end: bool = True,
                 sinks: Optional[Iterable[Any]] = None, noise_multiplier: Optional[float] = None,
                 sample_rate: Optional[float] = None, guard_optimizer: bool = True,
                 account_steps: bool = False, clear_dp_gradients: bool = True,
                 resume_from: Optional[str] = None):
        self.monitor = BudgetMonitor(accountant, delta, max_epsilon, log_every_n_steps,
                                     log_on_epoch_end, sinks, noise_multiplier, sample_rate,
                                     guard_optimizer)
        self._explicit_every = log_every_n_steps
        self.account_steps = account_steps
        self.clear_dp_gradients = clear_dp_gradients
        self._pending_log = None
        self.resume_from = None if resume_from is None else os.fspath(resume_from)

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The budget state written to every checkpoint folder as ``STATE_FILE``."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.monitor.load_state_dict(state)

    def save_state(self, folder: str) -> str:
        """Write ``STATE_FILE`` into ``folder`` atomically (temporary file, then rename)."""
        path = os.path.join(os.fspath(folder), STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state_dict(), fh, allow_nan=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def load_state(self, path: str) -> None:
        """Read ``STATE_FILE`` (or a checkpoint folder holding it) and restore it."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, STATE_FILE)
        with open(path, encoding="utf-8") as fh:
            self.load_state_dict(json.load(fh))

    def _restore_on_resume(self, args, state) -> None:
        if not state.global_step or self.monitor.restored is not None:
            return
        candidates = []
        if self.resume_from is not None:
            candidates.append(self.resume_from)
        candidates.append(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))
        for candidate in candidates:
            target = (os.path.join(candidate, STATE_FILE) if os.path.isdir(candidate)
                      else candidate)
            if os.path.isfile(target):
                self.load_state(target)
                return
        self.monitor.check_resume(state.global_step, f"the checkpoint ({candidates[-1]})")

    @staticmethod
    def _epoch(state) -> Optional[int]:
        return None if state.epoch is None else int(state.epoch - 1e-9) if state.epoch > 0 else 0

    def _publish(self, state, record) -> None:
        if record is None:
            return
        entry = {"epsilon_lower": record.eps_lower, "epsilon_upper": record.eps_upper,
                 "delta": record.delta, "step": state.global_step,
                 "sampler": record.sampler, "neighbouring": record.neighbouring}
        if record.loader_sampler is not None:
            entry["loader_sampler"] = record.loader_sampler
        if record.certified_for_loader is False and record.loader_eps_upper is not None:
            entry[f"{record.loader_sampler}_epsilon_lower"] = record.loader_eps_lower
            entry[f"{record.loader_sampler}_epsilon_upper"] = record.loader_eps_upper
        state.log_history.append(entry)
        self._pending_log = entry

    # -- events ------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, optimizer=None, train_dataloader=None, **kw):
        self._restore_on_resume(args, state)
        if self._explicit_every is None and getattr(args, "logging_steps", None):
            steps = args.logging_steps
            if isinstance(steps, float) and steps < 1:      # a ratio of the total steps
                steps = max(1, int(round(steps * max(state.max_steps, 1))))
            self.monitor.log_every_n_steps = int(steps)
        self.monitor.setup([optimizer] if optimizer is not None else [],
                           data_loader=train_dataloader)
        if self.monitor.next_step_exceeds():
            self.monitor.stopped = True
            self.monitor.stop_reason = "stopping before the first step: it would exceed the budget"
            control.should_training_stop = True
        return control

    def on_step_begin(self, args, state, control, **kw):
        if self.clear_dp_gradients and self.monitor.optimizer is not None:
            self.monitor.optimizer.zero_grad(set_to_none=True)
        return control

    def on_step_end(self, args, state, control, **kw):
        if self.account_steps:
            self.monitor.account()
        record, stop = self.monitor.after_step(self._epoch(state))
        self._publish(state, record)
        if stop or (self.monitor.guard is not None and self.monitor.guard.should_stop):
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        if logs is not None and self._pending_log is not None:
            for key, value in self._pending_log.items():       # numbers only: loggers plot them
                if key.endswith(("epsilon_lower", "epsilon_upper")):
                    logs.setdefault(key, value)
            self._pending_log = None
        return control

    def on_save(self, args, state, control, **kw):
        if not state.is_world_process_zero:
            return control
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if os.path.isdir(folder):
            self.save_state(folder)
        else:
            warnings.warn(f"checkpoint folder {folder!r} not found: the privacy-budget state "
                          "was not saved with this checkpoint", RuntimeWarning, stacklevel=2)
        return control

    def on_epoch_end(self, args, state, control, **kw):
        record = self.monitor.epoch_end(self._epoch(state))
        self._publish(state, record)
        return control

    def on_train_end(self, args, state, control, **kw):
        self.monitor.train_end(self._epoch(state))
        self.monitor.teardown()
        return control
