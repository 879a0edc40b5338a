"""PrivacyBudgetCallback for PyTorch Lightning, with opacus.lightning's DPLightningDataModule.

The model follows Opacus's Lightning example: make_private is called inside
configure_optimizers.  That example reads the training loader through
``trainer._data_connector._train_dataloader_source``, which no longer exists in
Lightning 2.x; ``trainer.datamodule.train_dataloader()`` is used instead (it returns
the DPDataLoader of the DPLightningDataModule).
"""
import csv

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")
pytest.importorskip("opacus")

import pb_accountant  # noqa: F401  (registers "pb")
from opacus import PrivacyEngine
from opacus.data_loader import DPDataLoader
from opacus.lightning import DPLightningDataModule
from pytorch_lightning.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pb_accountant.integrations import CSVSink
from pb_accountant.integrations.lightning import PrivacyBudgetCallback

from _budget_helpers import fresh_bounds, quiet_opacus_warnings

DELTA = 1e-5
SIGMA = 1.0
N, BATCH = 64, 8            # 8 batches per epoch, sample rate 1/8
Q = 1 / 8


class TinyData(pl.LightningDataModule):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(N, 4, generator=g)
        self.train = TensorDataset(x, (x[:, 0] > 0).long())

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=BATCH)


class TinyDPModel(pl.LightningModule):
    def __init__(self, accountant="pb"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self.privacy_engine = PrivacyEngine(accountant=accountant)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
        loader = self.trainer.datamodule.train_dataloader()
        assert isinstance(loader, DPDataLoader)
        if hasattr(self, "dp"):                      # a plain dict: no module cycle
            self.dp["model"].remove_hooks()
        dp_model, optimizer, _ = self.privacy_engine.make_private(
            module=self, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
            max_grad_norm=1.0, poisson_sampling=isinstance(loader, DPDataLoader),
            noise_generator=torch.Generator().manual_seed(0))
        self.dp = {"model": dp_model}
        return optimizer


def make_trainer(tmp_path, callback, max_epochs):
    return pl.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1,
                      callbacks=[callback], logger=CSVLogger(str(tmp_path), name="run"),
                      log_every_n_steps=1, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)


def logged_metrics_csv(trainer):
    path = f"{trainer.logger.log_dir}/metrics.csv"
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def steps_of(accountant):
    return sum(int(h[2]) for h in accountant.history)


@pytest.fixture(autouse=True)
def _quiet():
    quiet_opacus_warnings()
    import warnings
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
    warnings.filterwarnings("ignore", message=".*val_dataloader.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")


def test_callback_stops_before_budget_and_logs(tmp_path):
    k = 11                  # the budget allows exactly k steps: one epoch and 3 steps
    lo = fresh_bounds([(SIGMA, Q, k)], DELTA).upper
    hi = fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper
    max_eps = 0.5 * (lo + hi)
    model = TinyDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, max_epsilon=max_eps,
                                     log_every_n_steps=2, sinks=[CSVSink(tmp_path / "b.csv")])
    trainer = make_trainer(tmp_path, callback, max_epochs=5)
    trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))

    acc = model.privacy_engine.accountant
    assert steps_of(acc) == k == trainer.global_step
    assert trainer.should_stop and callback.stopped and "max_epsilon" in callback.stop_reason
    # the guard on the DPOptimizer was attached with the sample rate opacus accounts
    assert callback.guard is not None and callback.guard.refused_steps == 0
    assert acc.history == [(SIGMA, Q, k)]
    # every record within the target, the last at the stopping step
    records = callback.records
    assert records and all(r.eps_upper <= max_eps for r in records)
    assert [(r.step, r.event) for r in records] == [
        (2, "step"), (4, "step"), (6, "step"), (8, "step"), (8, "epoch"), (10, "step"),
        (11, "stop"), (11, "epoch")]      # Lightning ends the interrupted epoch too
    assert records[-1].epoch == 1                     # stopped in the middle of epoch 2
    assert records[-1].eps_upper == fresh_bounds([(SIGMA, Q, k)], DELTA).upper
    assert records[-1].eps_lower == fresh_bounds([(SIGMA, Q, k)], DELTA).lower
    assert all(r.noise_multiplier == SIGMA and r.sample_rate == Q for r in records)
    # pl_module.log: the logger got epsilon_lower / epsilon_upper
    rows = logged_metrics_csv(trainer)
    logged = [(int(r["step"]), float(r["epsilon_upper"])) for r in rows if r.get("epsilon_upper")]
    assert logged and max(v for _, v in logged) <= max_eps
    assert any(r.get("epsilon_lower") for r in rows)
    assert float(trainer.callback_metrics["epsilon_upper"]) == pytest.approx(
        records[-1].eps_upper, rel=1e-6)
    # the extra sink got the same records
    with open(tmp_path / "b.csv", newline="") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [r.step for r in records]
    # the guard was detached at the end of training
    assert "step" not in vars(trainer.optimizers[0])


def test_callback_without_budget_only_logs(tmp_path):
    model = TinyDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, log_every_n_steps=None)
    trainer = make_trainer(tmp_path, callback, max_epochs=2)
    trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))
    assert not callback.stopped and callback.guard is None
    assert steps_of(model.privacy_engine.accountant) == 16
    assert [(r.step, r.epoch, r.event) for r in callback.records] == [(8, 0, "epoch"),
                                                                       (16, 1, "epoch")]
    rows = [r for r in logged_metrics_csv(trainer) if r.get("epsilon_upper")]
    assert len(rows) == 2
    assert float(rows[-1]["epsilon_upper"]) == pytest.approx(callback.records[-1].eps_upper,
                                                             rel=1e-6)


def test_budget_too_small_for_a_single_step(tmp_path):
    model = TinyDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, max_epsilon=0.05)
    trainer = make_trainer(tmp_path, callback, max_epochs=1)
    trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))
    assert model.privacy_engine.accountant.history == []
    assert callback.stopped and trainer.global_step == 0


class TinyPlainModel(pl.LightningModule):
    """No Opacus: the callback accounts the steps (``account_steps=True``)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_account_steps_counts_every_accumulated_batch(tmp_path):
    """accumulate_grad_batches=3 over 8 batches: steps of 3, 3 and 2 batches, each
    accounted at that many times the batch's rate (it was Q per step: the 8 batches of
    the epoch were accounted as 3).  The look-ahead prices the next step the same way:
    a budget that one 3-batch step exceeds stops before it."""
    from pb_accountant import PrivacyBucketsAccountant

    def fit(callback):
        trainer = pl.Trainer(max_epochs=1, accumulate_grad_batches=3, accelerator="cpu",
                             devices=1, callbacks=[callback], logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=str(tmp_path))
        trainer.fit(TinyPlainModel(), train_dataloaders=TinyData().train_dataloader())
        return trainer

    acc = PrivacyBucketsAccountant()
    trainer = fit(PrivacyBudgetCallback(acc, delta=DELTA, noise_multiplier=SIGMA,
                                        sample_rate=Q, account_steps=True))
    assert trainer.global_step == 3
    assert acc.history == [(SIGMA, 3 * Q, 2), (SIGMA, 2 * Q, 1)]

    budget = 0.5 * (fresh_bounds([(SIGMA, Q, 1)], DELTA).upper
                    + fresh_bounds([(SIGMA, 3 * Q, 1)], DELTA).upper)
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=budget, sample_rate=Q,
                                     noise_multiplier=SIGMA, account_steps=True)
    fit(callback)
    assert acc.history == [] and callback.stopped


class TinyShuffledDPModel(TinyDPModel):
    """make_private(poisson_sampling=False) on a plain loader: gradient accumulation
    is allowed, and Opacus records a step over k batches at k / len(loader)."""

    def train_dataloader(self):
        return TinyData().train_dataloader()

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
        dp_model, optimizer, _ = self.privacy_engine.make_private(
            module=self, optimizer=optimizer, data_loader=self.train_dataloader(),
            noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=False,
            noise_generator=torch.Generator().manual_seed(0))
        self.dp = {"model": dp_model}
        return optimizer


def test_lookahead_prices_an_accumulated_step_as_opacus_records_it(tmp_path):
    """accumulate_grad_batches=2: each step is recorded at 2Q.  The look-ahead priced
    the next step at Q, let a step the budget cannot afford through, and the guard on
    the optimizer had to refuse it (Lightning counted 6 steps for 5 taken)."""
    import warnings
    k = 5
    max_eps = 0.5 * (fresh_bounds([(SIGMA, 2 * Q, k)], DELTA).upper
                     + fresh_bounds([(SIGMA, 2 * Q, k + 1)], DELTA).upper)
    model = TinyShuffledDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, max_epsilon=max_eps,
                                     log_every_n_steps=None)
    trainer = pl.Trainer(max_epochs=3, accumulate_grad_batches=2, accelerator="cpu",
                         devices=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the shuffled loader's sampler warning
        trainer.fit(model)
    assert model.privacy_engine.accountant.history == [(SIGMA, 2 * Q, k)]
    assert callback.stopped and callback.guard.refused_steps == 0
    assert trainer.global_step == k


def test_account_steps_with_an_accounting_dp_optimizer_is_refused(tmp_path):
    """make_private's hook already records every step: account_steps=True counted each
    twice (8 steps recorded as 16), silently; it is refused before the first step."""
    model = TinyDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, account_steps=True,
                                     log_every_n_steps=None)
    trainer = make_trainer(tmp_path, callback, max_epochs=1)
    with pytest.raises(ValueError, match="counted twice"):
        trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))
    assert model.privacy_engine.accountant.history == [] and trainer.global_step == 0


def test_callback_with_an_rdp_accountant(tmp_path):
    """Any Opacus accountant works (upper bound only; the lower bound is logged as 0)."""
    from opacus.accountants import RDPAccountant

    def rdp(steps):
        ref = RDPAccountant()
        ref.history = [(SIGMA, Q, steps)]
        return ref.get_epsilon(DELTA)

    max_eps = 0.5 * (rdp(10) + rdp(11))
    model = TinyDPModel(accountant="rdp")
    acc = model.privacy_engine.accountant
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=max_eps, log_every_n_steps=4)
    trainer = make_trainer(tmp_path, callback, max_epochs=3)
    trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))
    assert callback.stopped and steps_of(acc) == 10
    assert acc.get_epsilon(DELTA) <= max_eps
    assert all(r.eps_lower == 0.0 and r.eps_upper <= max_eps for r in callback.records)


def test_logger_gets_fresh_values_at_the_tensorboard_sinks_steps(tmp_path):
    """Lightning's logger shows each record's value at the record's step (no stale values).

    Lightning's own logging interval (50 steps here, the default) must not delay or
    shift the values: they are the ones the TensorBoardSink writes, at the same steps.
    """
    pytest.importorskip("tensorboard")
    from pytorch_lightning.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from pb_accountant.integrations import TensorBoardSink

    model = TinyDPModel()
    sink = TensorBoardSink(tmp_path / "sink")
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, log_every_n_steps=3,
                                     sinks=[sink])
    logger = TensorBoardLogger(str(tmp_path), name="pl")
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, callbacks=[callback],
                         logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=DPLightningDataModule(TinyData()))
    sink.close()
    logger.finalize("success")

    def scalars(path, tag):
        events = EventAccumulator(str(path))
        events.Reload()
        return {e.step: e.value for e in events.Scalars(tag)}

    from_sink = scalars(tmp_path / "sink", "privacy/epsilon_upper")
    from_logger = scalars(logger.log_dir, "epsilon_upper")
    assert sorted(from_sink) == [3, 6, 8, 9, 12, 15, 16]      # every 3 steps + epoch ends
    assert from_logger == from_sink                           # same steps, same values
    for record in callback.records:
        assert from_logger[record.step] == pytest.approx(record.eps_upper, rel=1e-6)
        # float32 on disk, rounded outward: still an upper bound
        assert from_logger[record.step] >= record.eps_upper
    assert scalars(logger.log_dir, "epsilon_lower")[15] == pytest.approx(
        fresh_bounds([(SIGMA, Q, 15)], DELTA).lower, rel=1e-6)
    assert scalars(logger.log_dir, "epsilon_lower")[15] <= fresh_bounds([(SIGMA, Q, 15)],
                                                                          DELTA).lower


@pytest.mark.parametrize("name", ["prog_bar", "account_steps", "log_on_epoch_end",
                                  "guard_optimizer"])
@pytest.mark.parametrize("bad", ["False", 0, None])
def test_flags_are_true_or_false(name, bad):
    """A truthy stand-in such as "False" would read as the opposite: refused."""
    from pb_accountant import PrivacyBucketsAccountant
    with pytest.raises(ValueError, match=rf"{name} must be True or False"):
        PrivacyBudgetCallback(PrivacyBucketsAccountant(), delta=1e-5, **{name: bad})


def test_account_steps_refused_steps_are_neither_taken_nor_recorded(tmp_path):
    """account_steps=True and min_steps: Lightning goes on after the stop request.  With a
    plain optimizer the steps past the budget had been taken and recorded (8 for a budget
    of 3); with a DPOptimizer without an accounting hook the guard refused 5 steps (no
    update) and the callback recorded them all the same.  The guard now refuses a step
    before the update and the refused steps are not recorded."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from pb_accountant import PrivacyBucketsAccountant

    class DPPlainModel(TinyPlainModel):
        def configure_optimizers(self):
            self.gsm = [GradSampleModule(self.net)]        # a list: no module cycle
            return DPOptimizer(torch.optim.SGD(self.parameters(), lr=0.1),
                               noise_multiplier=SIGMA, max_grad_norm=1.0,
                               expected_batch_size=BATCH)

    class Params(pl.Callback):
        def __init__(self):
            self.seen = []

        def on_train_batch_end(self, trainer, pl_module, *args):
            self.seen.append(pl_module.net.weight.detach().clone())

    k = 3
    budget = 0.5 * (fresh_bounds([(SIGMA, Q, k)], DELTA).upper
                    + fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper)
    for model_type in (TinyPlainModel, DPPlainModel):
        torch.manual_seed(0)
        acc = PrivacyBucketsAccountant()
        callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=budget,
                                         noise_multiplier=SIGMA, sample_rate=Q,
                                         account_steps=True, log_every_n_steps=1)
        params = Params()
        trainer = pl.Trainer(max_epochs=1, min_steps=6, accelerator="cpu", devices=1,
                             callbacks=[callback, params], logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=str(tmp_path))
        trainer.fit(model_type(), train_dataloaders=TinyData().train_dataloader())
        assert trainer.global_step > k
        assert acc.history == [(SIGMA, Q, k)], model_type
        assert callback.guard.refused_steps == trainer.global_step - k
        assert all(torch.equal(w, params.seen[k - 1]) for w in params.seen[k:])
        assert all(r.eps_upper <= budget for r in callback.records)


def test_account_steps_with_a_step_rate_above_one_is_refused_before_the_first_step(tmp_path):
    """sample_rate 0.5 with accumulate_grad_batches=3: each step's rate is 1.5.  It had
    raised only after the first step was taken (and not recorded); now at train start."""
    from pb_accountant import PrivacyBucketsAccountant
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, noise_multiplier=SIGMA, sample_rate=0.5,
                                     account_steps=True)
    trainer = pl.Trainer(max_epochs=1, accumulate_grad_batches=3, accelerator="cpu",
                         devices=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"sample_rate=0\.5 .* 3 batches"):
        trainer.fit(TinyPlainModel(), train_dataloaders=TinyData().train_dataloader())
    assert acc.history == [] and trainer.global_step == 0
