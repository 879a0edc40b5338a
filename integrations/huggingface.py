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

Resuming: at every checkpoint (``on_save``) the callback writes its ``state_file``
(the accountant's history, the tracker's counters and the guard's state, JSON) into
``args.output_dir/checkpoint-<global_step>``; the file is named after ``name=`` or, by
default, after ``delta`` and ``max_epsilon``, so several callbacks keep separate states.
When ``trainer.train(resume_from_checkpoint=...)`` starts at ``global_step > 0`` it
reads its file from the checkpoint folder (or from ``resume_from=`` given to the
callback; else the ``STATE_FILE`` of earlier versions, else the folder's only budget
state) and restores the accountant before the first step, warning when the state holds
fewer steps than ``global_step``; with neither a file nor a non-empty accountant it
raises :class:`~pb_accountant.integrations.BudgetStateError` rather than starting from zero.
A checkpoint whose state cannot be written gets a ``RuntimeWarning``, never a crash.
"""
from __future__ import annotations

import glob
import json
import math
import os
import warnings
from typing import Any, Iterable, Optional

from transformers import TrainerCallback

from pb_accountant._validation import check_flag

from ._callback_core import BudgetMonitor, MonitorView, check_name

__all__ = ["PrivacyBudgetCallback", "STATE_FILE"]

#: the budget-state file of earlier versions (one per checkpoint folder; still read)
STATE_FILE = "pb_accountant_state.json"


def _to_json(state: dict) -> str:
    """JSON text of a callback state: an infinite budget (never stops) as "inf"."""
    guard = state.get("guard")
    if isinstance(guard, dict) and guard.get("max_epsilon") == math.inf:
        state = dict(state, guard=dict(guard, max_epsilon="inf"))
    return json.dumps(state, allow_nan=False)


def _from_json(state: Any) -> Any:
    guard = state.get("guard") if isinstance(state, dict) else None
    if isinstance(guard, dict) and guard.get("max_epsilon") == "inf":
        state = dict(state, guard=dict(guard, max_epsilon=math.inf))
    return state


class PrivacyBudgetCallback(MonitorView, TrainerCallback):
    """Log ``epsilon_lower``/``epsilon_upper`` and stop before ``max_epsilon`` is exceeded.

    ``resume_from``: a checkpoint folder (or a state file) to restore the budget
    from when the Trainer resumes; default: ``args.output_dir/checkpoint-<global_step>``.
    ``name``: names the state file (letters, digits, '.', '_', '-'); default: derived
    from ``delta`` and ``max_epsilon``.  ``sample_rate`` is one batch's: with
    ``gradient_accumulation_steps`` a step over k micro-batches is accounted (and
    looked ahead at) k times it, as Opacus does.
    """

    def __init__(self, accountant: Any, delta: float, max_epsilon: Optional[float] = None,
                 log_every_n_steps: Optional[int] = None, log_on_epoch_end: bool = True,
                 sinks: Optional[Iterable[Any]] = None, noise_multiplier: Optional[float] = None,
                 sample_rate: Optional[float] = None, guard_optimizer: bool = True,
                 account_steps: bool = False, clear_dp_gradients: bool = True,
                 resume_from: Optional[str] = None, name: Optional[str] = None):
        account_steps = check_flag("account_steps", account_steps)
        clear_dp_gradients = check_flag("clear_dp_gradients", clear_dp_gradients)
        self.name = check_name(name)
        self.monitor = BudgetMonitor(accountant, delta, max_epsilon, log_every_n_steps,
                                     log_on_epoch_end, sinks, noise_multiplier, sample_rate,
                                     guard_optimizer)
        self._explicit_every = log_every_n_steps
        self.account_steps = account_steps
        self.clear_dp_gradients = clear_dp_gradients
        self._pending_log = None
        self._substeps = 0             # accumulated micro-batches of the current step
        self.resume_from = None if resume_from is None else os.fspath(resume_from)

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The budget state written to every checkpoint folder as ``STATE_FILE``."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.monitor.load_state_dict(state)

    @property
    def state_file(self) -> str:
        """This callback's file name in a checkpoint folder (distinct per name, or per
        delta and max_epsilon)."""
        if self.name is not None:
            return f"pb_accountant_state.{self.name}.json"
        return (f"pb_accountant_state.delta-{self.monitor.delta!r}"
                f".max_epsilon-{self.monitor.max_epsilon!r}.json")

    def save_state(self, folder: str) -> str:
        """Write ``state_file`` into ``folder`` atomically (temporary file, then rename);
        a failure leaves no temporary file behind."""
        path = os.path.join(os.fspath(folder), self.state_file)
        text = _to_json(self.state_dict())
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
        return path

    def _find_state(self, path: str) -> Optional[str]:
        """The state file to restore from ``path`` (a file, or a checkpoint folder)."""
        if not os.path.isdir(path):
            return path if os.path.isfile(path) else None
        for name in (self.state_file, STATE_FILE):
            if os.path.isfile(os.path.join(path, name)):
                return os.path.join(path, name)
        found = glob.glob(os.path.join(glob.escape(path), "pb_accountant_state.*.json"))
        return found[0] if len(found) == 1 else None     # e.g. after a budget change

    def load_state(self, path: str) -> None:
        """Read a state file (or a checkpoint folder holding one) and restore it."""
        path = os.fspath(path)
        target = self._find_state(path)
        if target is None:
            raise ValueError(f"path: no privacy-budget state file in {path}")
        with open(target, encoding="utf-8") as fh:
            self.load_state_dict(_from_json(json.load(fh)))

    def _restore_on_resume(self, args, state) -> None:
        if not state.global_step or self.monitor.restored is not None:
            return
        candidates = []
        if self.resume_from is not None:
            candidates.append(self.resume_from)
        candidates.append(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))
        for candidate in candidates:
            target = self._find_state(candidate)
            if target is not None:
                self.load_state(target)
                self.monitor.check_resume(state.global_step, target)   # steps missing?
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
        accumulate = getattr(args, "gradient_accumulation_steps", 1)
        self.monitor.accumulation = (accumulate if isinstance(accumulate, int)
                                     and not isinstance(accumulate, bool) and accumulate > 1
                                     else 1)
        self._substeps = 0
        self.monitor.setup([optimizer] if optimizer is not None else [],
                           data_loader=train_dataloader, account_steps=self.account_steps)
        if self.monitor.next_step_exceeds():
            self.monitor.stopped = True
            self.monitor.stop_reason = "stopping before the first step: it would exceed the budget"
            control.should_training_stop = True
        return control

    def on_step_begin(self, args, state, control, **kw):
        if self.clear_dp_gradients and self.monitor.optimizer is not None:
            self.monitor.optimizer.zero_grad(set_to_none=True)
        return control

    def on_substep_end(self, args, state, control, **kw):
        self._substeps += 1            # a micro-batch accumulated into the next step
        return control

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
        # account_steps without a DPOptimizer: the guard refuses a step past the budget
        # here (the Trainer takes its first step even after a stop at on_train_begin)
        if optimizer is not None:
            self.monitor.before_optimizer_step(optimizer, self._substeps + 1)
        return control

    def on_step_end(self, args, state, control, **kw):
        accumulated, self._substeps = self._substeps + 1, 0
        if self.account_steps:
            self.monitor.account(accumulated)       # a step over all its micro-batches
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
            try:
                self.save_state(folder)
            except Exception as exc:                 # a checkpoint never stops training
                warnings.warn(f"the privacy-budget state was not saved with checkpoint "
                              f"{folder!r}: {exc!r}", RuntimeWarning, stacklevel=2)
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
