"""The privacy budget survives every resume: Opacus checkpoints, Lightning, HF Trainer.

Each test trains a tiny model until a budget guard stops it, once without
interruption and once "killed" after a few steps (a checkpoint, then brand-new model,
engine, accountant, callback and trainer objects that resume from it).  The resumed
run must end with the same accountant history, bitwise the same bounds, and the guard
must stop at the same step.  A resume that finds no budget state must not silently
start from zero.
"""
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

import pb_accountant  # noqa: F401  (registers "pb")
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetGuard, BudgetStateError, BudgetTracker

from _budget_helpers import fresh_bounds, quiet_opacus_warnings

DELTA = 1e-5
SIGMA = 1.0
N, BATCH = 64, 8
Q = 1 / 8
K = 11                      # the budget allows exactly K steps


def budget(k=K):
    return 0.5 * (fresh_bounds([(SIGMA, Q, k)], DELTA).upper
                  + fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper)


def steps_of(accountant):
    return sum(int(h[2]) for h in accountant.history)


def same_bounds(acc_a, acc_b):
    a, b = acc_a.get_epsilon_bounds(DELTA), acc_b.get_epsilon_bounds(DELTA)
    return (a.lower, a.upper) == (b.lower, b.upper)


# ------------------------------------------------------------------------------------
# plain Opacus: PrivacyEngine.save_checkpoint / load_checkpoint + tracker + guard
# ------------------------------------------------------------------------------------

def opacus_setup(seed=0):
    quiet_opacus_warnings()
    torch.manual_seed(seed)
    x = torch.randn(N, 4)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH), noise_multiplier=SIGMA,
        max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(seed))
    tracker = BudgetTracker(engine, DELTA, every_n_steps=1, every_epoch=False, sinks=[])
    tracker.attach(optimizer)
    guard = BudgetGuard(engine, max_epsilon=budget(), delta=DELTA, mode="stop").attach(optimizer)
    return engine, model, optimizer, loader, tracker, guard


def train_opacus(model, optimizer, loader, guard, max_steps=None, epochs=4):
    taken = 0
    for _ in range(epochs):
        for xb, yb in loader:
            if guard.should_stop or (max_steps is not None and taken >= max_steps):
                return taken
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
            if not guard.should_stop:
                taken += 1
    return taken


def test_opacus_checkpoint_resume_matches_an_uninterrupted_run(tmp_path):
    engine, model, optimizer, loader, tracker, guard = opacus_setup()
    assert train_opacus(model, optimizer, loader, guard) == K and guard.should_stop
    reference = engine.accountant

    engine1, model1, optimizer1, loader1, tracker1, guard1 = opacus_setup()
    assert train_opacus(model1, optimizer1, loader1, guard1, max_steps=4) == 4
    path = tmp_path / "ckpt.pt"
    engine1.save_checkpoint(path=path, module=model1, optimizer=optimizer1,
                            checkpoint_dict={"pb_tracker": tracker1.state_dict(),
                                             "pb_guard": guard1.state_dict()})
    # "kill": new objects everywhere
    engine2, model2, optimizer2, loader2, tracker2, guard2 = opacus_setup(seed=1)
    checkpoint = engine2.load_checkpoint(path=path, module=model2, optimizer=optimizer2)
    tracker2.load_state_dict(checkpoint["pb_tracker"])    # Opacus restored the history
    guard2.load_state_dict(checkpoint["pb_guard"])
    assert steps_of(engine2.accountant) == 4 and tracker2.step == 4
    more = train_opacus(model2, optimizer2, loader2, guard2)
    assert more == K - 4 and guard2.should_stop
    assert engine2.accountant.history == reference.history == [(SIGMA, Q, K)]
    assert same_bounds(engine2.accountant, reference)
    assert tracker2.records[-1].step == K
    assert tracker2.records[-1].eps_upper == tracker.records[-1].eps_upper


def test_tracker_state_restores_an_empty_accountant_and_rejects_a_different_one():
    acc = PrivacyBucketsAccountant()
    for _ in range(3):
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[])
    tracker.on_step()
    state = tracker.state_dict()
    import json
    state = json.loads(json.dumps(state))            # survives JSON

    fresh = PrivacyBucketsAccountant()
    restored = BudgetTracker(fresh, DELTA, sinks=[])
    restored.load_state_dict(state)
    assert fresh.history == acc.history and same_bounds(fresh, acc)
    assert restored.steps_seen == 1

    other = PrivacyBucketsAccountant()
    other.step(noise_multiplier=2.0, sample_rate=Q)
    with pytest.raises(ValueError, match="differ from the checkpoint"):
        BudgetTracker(other, DELTA, sinks=[]).load_state_dict(state)
    assert other.history == [(2.0, Q, 1)]            # unchanged
    with pytest.raises(ValueError, match="state"):
        BudgetTracker(PrivacyBucketsAccountant(), DELTA, sinks=[]).load_state_dict({"x": 1})


def test_guard_state_keeps_a_stop_for_the_same_budget_only():
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, max_epsilon=0.01, delta=DELTA, mode="stop")
    assert not guard.check(noise_multiplier=SIGMA, sample_rate=Q)
    state = guard.state_dict()
    again = BudgetGuard(PrivacyBucketsAccountant(), max_epsilon=0.01, delta=DELTA, mode="stop")
    again.load_state_dict(state)
    assert again.should_stop and again.refused_steps == 1
    raised = BudgetGuard(PrivacyBucketsAccountant(), max_epsilon=5.0, delta=DELTA, mode="stop")
    raised.load_state_dict(state)
    assert not raised.should_stop


def test_callback_state_with_a_bad_guard_state_changes_nothing():
    """The callbacks' common state (accountant, tracker, guard) is validated whole before
    the accountant is restored: a bad guard part left the history loaded before."""
    from pb_accountant.integrations._callback_core import BudgetMonitor
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    monitor = BudgetMonitor(acc, DELTA, 5.0, None, False, [], SIGMA, Q, False)
    state = json.loads(json.dumps(monitor.state_dict()))
    for guard in ({"refused_steps": 1}, {"should_stop": False, "refused_steps": -1}):
        fresh = BudgetMonitor(PrivacyBucketsAccountant(), DELTA, 5.0, None, False, [], SIGMA,
                              Q, False)
        with pytest.raises(ValueError, match="state"):
            fresh.load_state_dict(dict(state, guard=guard))
        assert fresh.accountant.history == [] and fresh.restored is None
    fresh.load_state_dict(state)
    assert fresh.accountant.history == acc.history


# ------------------------------------------------------------------------------------
# PyTorch Lightning: the callback's state rides in the checkpoint
# ------------------------------------------------------------------------------------

def _lightning():
    pl = pytest.importorskip("pytorch_lightning")
    from opacus.lightning import DPLightningDataModule
    import test_lightning as tl
    import warnings
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*val_dataloader.*")
    warnings.filterwarnings("ignore", message=".*resuming from a checkpoint.*")
    warnings.filterwarnings("ignore", message=".*ended mid-epoch.*")
    quiet_opacus_warnings()
    return pl, DPLightningDataModule, tl


def _pl_trainer(pl, tmp_path, callbacks, **kw):
    return pl.Trainer(accelerator="cpu", devices=1, callbacks=callbacks, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=str(tmp_path), **kw)


def test_lightning_resume_matches_an_uninterrupted_run(tmp_path):
    pl, DPLightningDataModule, tl = _lightning()
    from pb_accountant.integrations.lightning import PrivacyBudgetCallback

    model = tl.TinyDPModel()
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, max_epsilon=budget(),
                                     log_every_n_steps=None)
    _pl_trainer(pl, tmp_path, [callback], max_epochs=5).fit(
        model, datamodule=DPLightningDataModule(tl.TinyData()))
    reference = model.privacy_engine.accountant
    assert reference.history == [(SIGMA, Q, K)] and callback.stopped

    first = tl.TinyDPModel()
    cb1 = PrivacyBudgetCallback(first.privacy_engine, delta=DELTA, max_epsilon=budget(),
                                log_every_n_steps=None)
    t1 = _pl_trainer(pl, tmp_path, [cb1], max_epochs=5, max_steps=4)
    t1.fit(first, datamodule=DPLightningDataModule(tl.TinyData()))
    assert t1.global_step == 4 and steps_of(first.privacy_engine.accountant) == 4
    ckpt = str(tmp_path / "after4.ckpt")
    t1.save_checkpoint(ckpt)

    second = tl.TinyDPModel()                          # "kill": everything new
    cb2 = PrivacyBudgetCallback(second.privacy_engine, delta=DELTA, max_epsilon=budget(),
                                log_every_n_steps=None)
    t2 = _pl_trainer(pl, tmp_path, [cb2], max_epochs=5)
    t2.fit(second, datamodule=DPLightningDataModule(tl.TinyData()), ckpt_path=ckpt)
    acc = second.privacy_engine.accountant
    assert cb2.monitor.restored == "loaded"
    assert acc.history == reference.history and same_bounds(acc, reference)
    assert t2.global_step == K and cb2.stopped          # the guard fired at the same step
    assert cb2.records[-1].eps_upper == callback.records[-1].eps_upper


def test_lightning_resume_without_budget_state_refuses_to_start_from_zero(tmp_path):
    pl, DPLightningDataModule, tl = _lightning()
    from pb_accountant.integrations.lightning import PrivacyBudgetCallback

    first = tl.TinyDPModel()
    t1 = _pl_trainer(pl, tmp_path, [], max_epochs=1, max_steps=3)   # no callback: no state
    t1.fit(first, datamodule=DPLightningDataModule(tl.TinyData()))
    ckpt = str(tmp_path / "nostate.ckpt")
    t1.save_checkpoint(ckpt)
    second = tl.TinyDPModel()
    cb = PrivacyBudgetCallback(second.privacy_engine, delta=DELTA, max_epsilon=budget())
    t2 = _pl_trainer(pl, tmp_path, [cb], max_epochs=2)
    with pytest.raises(BudgetStateError, match="forgotten"):
        t2.fit(second, datamodule=DPLightningDataModule(tl.TinyData()), ckpt_path=ckpt)
    assert steps_of(second.privacy_engine.accountant) == 0


# ------------------------------------------------------------------------------------
# Hugging Face Trainer: the callback's state file in every checkpoint folder
# ------------------------------------------------------------------------------------

def _hf():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    import test_huggingface as th
    return transformers, th


def _hf_args(th, tmp_path):
    args = th.args_for(tmp_path, epochs=4)
    args.save_strategy = "steps"
    args.save_steps = 5
    return args


def _hf_run(transformers, th, tmp_path, stop_at=None, resume=None):
    from pb_accountant.integrations.huggingface import PrivacyBudgetCallback
    data, engine, model, optimizer, loader = th.private_setup()
    callback = PrivacyBudgetCallback(engine, delta=DELTA, max_epsilon=budget(13))
    callbacks = [callback]
    if stop_at is not None:
        class Kill(transformers.TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == stop_at:
                    control.should_training_stop = True

        callbacks.append(Kill())
    trainer = th.DPTrainer(model=model, args=_hf_args(th, tmp_path), train_dataset=data,
                           optimizers=(optimizer, None), callbacks=callbacks, dp_loader=loader)
    trainer.train(resume_from_checkpoint=resume)
    return engine, callback, trainer


def test_huggingface_resume_matches_an_uninterrupted_run(tmp_path):
    transformers, th = _hf()
    from pb_accountant.integrations.huggingface import STATE_FILE
    engine, callback, trainer = _hf_run(transformers, th, tmp_path / "full")
    reference = engine.accountant
    assert reference.history == [(SIGMA, Q, 13)] and callback.stopped

    run = tmp_path / "killed"
    engine1, cb1, t1 = _hf_run(transformers, th, run, stop_at=5)
    assert t1.state.global_step == 5
    assert (run / "checkpoint-5" / cb1.state_file).is_file()
    assert not (run / "checkpoint-5" / STATE_FILE).exists()     # named per callback now
    engine2, cb2, t2 = _hf_run(transformers, th, run, resume=str(run / "checkpoint-5"))
    acc = engine2.accountant
    assert cb2.monitor.restored == "loaded"
    assert acc.history == reference.history and same_bounds(acc, reference)
    assert t2.state.global_step == 13 and cb2.stopped
    assert cb2.records[-1].eps_upper == callback.records[-1].eps_upper


def test_huggingface_resume_without_budget_state_refuses(tmp_path):
    transformers, th = _hf()
    run = tmp_path / "run"
    _, callback, _ = _hf_run(transformers, th, run, stop_at=5)
    os.remove(run / "checkpoint-5" / callback.state_file)
    with pytest.raises(BudgetStateError, match="forgotten"):
        _hf_run(transformers, th, run, resume=str(run / "checkpoint-5"))


def test_saved_budget_state_carries_the_accountant_options():
    """A checkpoint of an accountant with non-default options never resumes silently
    into one with other options (the bounds would differ)."""
    from pb_accountant import PrivacyBucketsAccountant
    from pb_accountant.integrations._common import accountant_state, restore_accountant
    tuned = PrivacyBucketsAccountant(number_of_buckets=200, factor=1.01)
    for _ in range(30):
        tuned.step(noise_multiplier=1.0, sample_rate=0.05)
    state = json.loads(json.dumps(accountant_state(tuned)))
    assert state["options"]["number_of_buckets"] == 200
    default = PrivacyBucketsAccountant()
    with pytest.raises(ValueError, match="number_of_buckets"):
        restore_accountant(default, state)
    assert default.history == []
    same = PrivacyBucketsAccountant(number_of_buckets=200, factor=1.01)
    assert restore_accountant(same, state) == "loaded"
    assert same.get_epsilon_bounds(1e-5) == tuned.get_epsilon_bounds(1e-5)


def test_lightning_two_callbacks_keep_separate_states_and_old_checkpoints_load(tmp_path):
    pl, DPLightningDataModule, tl = _lightning()
    from pb_accountant.integrations.lightning import PrivacyBudgetCallback

    def callbacks(model):
        return [PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, max_epsilon=budget(),
                                      log_every_n_steps=None),
                PrivacyBudgetCallback(model.privacy_engine, delta=1e-6, log_every_n_steps=None)]

    first = tl.TinyDPModel()
    cbs = callbacks(first)
    t1 = _pl_trainer(pl, tmp_path, cbs, max_epochs=5, max_steps=4)
    t1.fit(first, datamodule=DPLightningDataModule(tl.TinyData()))   # no "unique state_key" error
    ckpt = str(tmp_path / "two.ckpt")
    t1.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=False)["callbacks"]
    assert {cb.state_key for cb in cbs} <= set(saved) and len({cb.state_key for cb in cbs}) == 2
    assert saved[cbs[0].state_key]["guard"]["max_epsilon"] == budget()

    second = tl.TinyDPModel()
    cbs2 = callbacks(second)
    t2 = _pl_trainer(pl, tmp_path, cbs2, max_epochs=5)
    t2.fit(second, datamodule=DPLightningDataModule(tl.TinyData()), ckpt_path=ckpt)
    assert [cb.monitor.restored for cb in cbs2] == ["loaded", "matched"]
    assert steps_of(second.privacy_engine.accountant) == K and cbs2[0].stopped

    # a checkpoint of the version with one fixed key ("PrivacyBudgetCallback")
    old = torch.load(ckpt, weights_only=False)
    old["callbacks"] = {"PrivacyBudgetCallback": old["callbacks"][cbs[0].state_key]}
    legacy = str(tmp_path / "legacy.ckpt")
    torch.save(old, legacy)
    third = tl.TinyDPModel()
    cb3 = PrivacyBudgetCallback(third.privacy_engine, delta=DELTA, max_epsilon=budget(),
                                log_every_n_steps=None)
    _pl_trainer(pl, tmp_path, [cb3], max_epochs=5).fit(
        third, datamodule=DPLightningDataModule(tl.TinyData()), ckpt_path=legacy)
    assert cb3.monitor.restored == "loaded"
    assert steps_of(third.privacy_engine.accountant) == K and cb3.stopped


def test_a_state_without_the_accountants_history_does_not_resume_from_zero():
    """A state whose accountant entry is None (saved over an accountant without
    state_dict, or corrupted) restores no history.  The tracker had taken it (step 100,
    the accountant empty: every later bound that of the new steps only) and a callback
    resuming at step 100 had gone on from zero with a RuntimeWarning only, where a
    checkpoint without any state raises BudgetStateError."""
    from pb_accountant.integrations._callback_core import STATE_FORMAT, BudgetMonitor
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, sinks=[])
    with pytest.raises(ValueError, match=r"state\['accountant'\] is None .* 100 steps"):
        tracker.load_state_dict({"accountant": None, "step": 100, "epoch": 3,
                                 "steps_seen": 100})
    assert tracker.step == 0 and acc.history == []
    tracker.load_state_dict({"accountant": None, "step": 0, "epoch": 0, "steps_seen": 0})
    opacus_restored = PrivacyBucketsAccountant()                  # the history came back
    opacus_restored.history = [(SIGMA, Q, 100)]                   # another way: fine
    BudgetTracker(opacus_restored, DELTA, sinks=[]).load_state_dict(
        {"accountant": None, "step": 100, "epoch": 3, "steps_seen": 100})

    monitor = BudgetMonitor(acc, DELTA, budget(), None, True, [], SIGMA, Q, True)
    monitor.load_state_dict({"format": STATE_FORMAT, "accountant": None,
                             "tracker": {"epoch": 3, "steps_seen": 100}, "guard": None})
    with pytest.raises(BudgetStateError, match="without the accountant's history"):
        monitor.check_resume(100, "the checkpoint")
    assert acc.history == []
