"""PyTorch Lightning callback: log the privacy budget and stop before it is exceeded.

    >>> trainer = pl.Trainer(callbacks=[PrivacyBudgetCallback(model.privacy_engine,
    ...                                                       delta=1e-5, max_epsilon=3.0)])

Writes ``epsilon_lower`` and ``epsilon_upper`` to the trainer's loggers every
``log_every_n_steps`` optimisation steps and at each epoch end, at the record's step
(the accountant's step count, the same step as a ``TensorBoardSink``; for a
TensorBoard logger, like that sink, rounded outward to the float32 it keeps, so a
plotted bound is still a bound; also
``pl_module.log`` for the progress bar and ``callback_metrics``), and sets
``trainer.should_stop`` when one more step would take the certified upper bound past
``max_epsilon`` (look-ahead with the accountant's ``epsilon_after``).  When the
trainer's optimizer is an Opacus ``DPOptimizer`` a :class:`~pb_accountant.integrations.guard.BudgetGuard`
in mode "stop" is also attached to it, so no step past the budget can be taken.

Lightning's default training loader (``DataLoader(shuffle=True)``) shuffles once per
epoch, which is not the Poisson sampling the default accountant assumes: at
``on_train_start`` the callback compares the two and warns with a
``SamplerMismatchWarning`` naming the epsilon the loader implies; the loggers then also
get the loader's bracket as ``shuffle_epsilon_lower``/``shuffle_epsilon_upper``
(docs/which-epsilon.md).

The accountant's history, the tracker's counters and the guard's state are part of
the callback's ``state_dict()``, which Lightning stores in every checkpoint: a run
resumed with ``trainer.fit(..., ckpt_path=...)`` continues from the privacy already
spent (a checkpoint whose accountant assumed another sampler or neighbouring relation
is refused with a ValueError).  Resuming at ``global_step > 0`` with an empty accountant and no such state
raises :class:`~pb_accountant.integrations.BudgetStateError`.  Each callback's state is
stored under its own ``state_key`` (from ``name=`` or, by default, ``delta`` and
``max_epsilon``), so several callbacks can share a trainer; a checkpoint of an earlier
version (key ``"PrivacyBudgetCallback"``) or of one callback whose budget has changed
since is still restored.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Optional

try:
    import pytorch_lightning as pl
except ImportError:  # pragma: no cover - the unified "lightning" package
    import lightning.pytorch as pl

from pb_accountant._validation import check_flag

from ._callback_core import BudgetMonitor, MonitorView, check_name

__all__ = ["PrivacyBudgetCallback"]


class PrivacyBudgetCallback(MonitorView, pl.Callback):
    """Log ``epsilon_lower``/``epsilon_upper`` and stop before ``max_epsilon`` is exceeded.

    Args:
        accountant: a ``PrivacyBucketsAccountant``, another Opacus accountant (upper
            bound only) or an Opacus ``PrivacyEngine``.
        delta: the delta the budget is measured at.
        max_epsilon: the budget; None only logs.
        log_every_n_steps: log every n optimisation steps (None: epoch ends only).
        log_on_epoch_end: also log at every training epoch end.
        prog_bar: show the bounds in the progress bar.
        sinks: extra sinks (CSV, JSON lines, TensorBoard, logging) for the records.
        noise_multiplier, sample_rate: the schedule, when no ``DPOptimizer`` tells it
            (``sample_rate``: one batch's; a step over ``accumulate_grad_batches``
            batches is accounted at that many times it, as Opacus does).
        guard_optimizer: attach the hard-stop guard to a ``DPOptimizer``.
        account_steps: step the accountant from the callback (for loops whose
            optimizer does not account, e.g. noise added by hand).
        name: the checkpoint key's name (default: derived from ``delta`` and
            ``max_epsilon``); needed only for two callbacks with the same both.
    """

    def __init__(self, accountant: Any, delta: float, max_epsilon: Optional[float] = None,
                 log_every_n_steps: Optional[int] = 50, log_on_epoch_end: bool = True,
                 prog_bar: bool = False, sinks: Optional[Iterable[Any]] = None,
                 noise_multiplier: Optional[float] = None, sample_rate: Optional[float] = None,
                 guard_optimizer: bool = True, account_steps: bool = False,
                 name: Optional[str] = None):
        super().__init__()
        prog_bar = check_flag("prog_bar", prog_bar)
        account_steps = check_flag("account_steps", account_steps)
        self.name = check_name(name)
        self.monitor = BudgetMonitor(accountant, delta, max_epsilon, log_every_n_steps,
                                     log_on_epoch_end, sinks, noise_multiplier, sample_rate,
                                     guard_optimizer)
        self.prog_bar = prog_bar
        self.account_steps = account_steps
        self._last_global_step = None
        self._batches = 0              # batches since the last optimisation step

    def _log(self, trainer, pl_module, record, on_step: bool) -> None:
        """The record's values, at the record's step, straight to the loggers.

        ``pl_module.log`` would hand them to the loggers only at Lightning's own logging
        interval and one step lower; it is used for ``callback_metrics`` and the
        progress bar only.
        """
        if record is None:
            return
        values = {"epsilon_lower": float(record.eps_lower),
                  "epsilon_upper": float(record.eps_upper)}
        if record.certified_for_loader is False and record.loader_eps_upper is not None:
            values[f"{record.loader_sampler}_epsilon_lower"] = float(record.loader_eps_lower)
            values[f"{record.loader_sampler}_epsilon_upper"] = float(record.loader_eps_upper)
        for name, value in values.items():
            pl_module.log(name, value, on_step=on_step, on_epoch=not on_step,
                          prog_bar=self.prog_bar, logger=False)
        finite = {k: v for k, v in values.items() if math.isfinite(v)}
        # for TensorBoard, which keeps float32, the bounds rounded outward to it (as the
        # TensorBoardSink writes them): a plotted upper bound never below the bound
        from .sinks import _float32
        as_float32 = {k: _float32(v, k.endswith("_upper")) for k, v in finite.items()}
        as_float32 = {k: v for k, v in as_float32.items() if math.isfinite(v)}
        for logger in trainer.loggers:
            try:
                logger.log_metrics(as_float32 if "TensorBoard" in type(logger).__name__
                                   else finite, step=record.step)
            except Exception as exc:                 # logging never stops training
                warnings.warn(f"{type(logger).__name__}.log_metrics failed: {exc!r}",
                              RuntimeWarning, stacklevel=2)

    # -- checkpoints -------------------------------------------------------------------
    @property
    def state_key(self) -> str:
        """Distinct per ``name`` (or per delta and max_epsilon): several callbacks coexist."""
        if self.name is not None:
            return self._generate_state_key(name=self.name)
        return self._generate_state_key(delta=self.monitor.delta,
                                        max_epsilon=self.monitor.max_epsilon)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        """No state under this key: take the earlier versions' key, else the checkpoint's
        only budget state (a changed budget), for Lightning to restore next."""
        states = checkpoint.get("callbacks")
        if not isinstance(states, dict) or self.state_key in states:
            return
        legacy = type(self).__qualname__
        ours = [k for k in states if isinstance(k, str) and k.startswith(legacy + "{")]
        key = legacy if legacy in states else ours[0] if len(ours) == 1 else None
        if key is not None:
            states[self.state_key] = states[key]

    def state_dict(self) -> dict:
        """Stored by Lightning in every checkpoint (accountant history included)."""
        return self.monitor.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Called by Lightning when resuming: restores the accountant first."""
        self.monitor.load_state_dict(state_dict)

    def _read_accumulation(self, trainer) -> None:
        """Batches per optimisation step, for the look-ahead's next step."""
        accumulate = getattr(trainer, "accumulate_grad_batches", 1)
        self.monitor.accumulation = (accumulate if isinstance(accumulate, int)
                                     and not isinstance(accumulate, bool) and accumulate > 1
                                     else 1)

    # -- hooks -------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self.monitor.check_resume(trainer.global_step, "the Lightning checkpoint")
        self._read_accumulation(trainer)
        self.monitor.setup(list(trainer.optimizers), data_loader=trainer.train_dataloader,
                           account_steps=self.account_steps)
        self._last_global_step = trainer.global_step
        self._batches = 0
        if self.monitor.next_step_exceeds():
            self.monitor.stopped = True
            self.monitor.stop_reason = "stopping before the first step: it would exceed the budget"
            trainer.should_stop = True

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # account_steps without a DPOptimizer: the guard refuses a step past the budget
        # here (Lightning goes on after a stop request below min_steps/min_epochs)
        self.monitor.before_optimizer_step(optimizer, self._batches + 1)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._batches += 1
        if trainer.global_step == self._last_global_step:
            return        # gradient accumulation: no optimisation step in this batch
        self._last_global_step = trainer.global_step
        accumulated, self._batches = self._batches, 0
        if self.account_steps:
            self.monitor.account(accumulated)       # a step over all its batches
        self._read_accumulation(trainer)            # (a GradientAccumulationScheduler)
        record, stop = self.monitor.after_step(trainer.current_epoch)
        self._log(trainer, pl_module, record, on_step=True)
        if stop:
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        record = self.monitor.epoch_end(trainer.current_epoch)
        self._log(trainer, pl_module, record, on_step=False)

    def on_train_end(self, trainer, pl_module) -> None:
        self.monitor.train_end(trainer.current_epoch)
        self.monitor.teardown()
