"""PrivacyBudgetCallback for Hugging Face transformers' Trainer, on CPU, no downloads.

A tiny torch module (returning {"loss", "logits"}) is made private with Opacus; the
Trainer gets the DPOptimizer through ``optimizers=`` and the Poisson DPDataLoader
through ``get_train_dataloader``.  The callback must log the bounds and stop the
Trainer before the certified epsilon exceeds the budget.
"""
import json
import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("opacus")

import pb_accountant  # noqa: F401
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer, TrainingArguments, default_data_collator

from pb_accountant.integrations.huggingface import PrivacyBudgetCallback
from pb_accountant import PrivacyBucketsAccountant

from _budget_helpers import fresh_bounds, quiet_opacus_warnings

DELTA = 1e-5
SIGMA = 1.0
N, BATCH = 64, 8
Q = 1 / 8


class Points(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(N, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class TinyClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x=None, labels=None, **unused):
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class DPTrainer(Trainer):
    """Trains on the Poisson-sampling loader made by Opacus."""

    def __init__(self, *args, dp_loader=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dp_loader = dp_loader

    def get_train_dataloader(self):
        return self.dp_loader


def private_setup(accountant="pb"):
    quiet_opacus_warnings()
    torch.manual_seed(0)
    data = Points()
    model = TinyClassifier()
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(data, batch_size=BATCH, collate_fn=default_data_collator),
        noise_multiplier=SIGMA, max_grad_norm=1.0,
        noise_generator=torch.Generator().manual_seed(0))
    loader.generator = torch.Generator().manual_seed(1)
    return data, engine, model, optimizer, loader


def args_for(tmp_path, epochs, logging_steps=2):
    return TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=epochs, per_device_train_batch_size=BATCH,
        logging_steps=logging_steps, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, remove_unused_columns=False, max_grad_norm=0.0,
        lr_scheduler_type="constant", learning_rate=0.5, dataloader_num_workers=0)


def steps_of(accountant):
    return sum(int(h[2]) for h in accountant.history)


def test_trainer_stops_before_the_budget(tmp_path):
    k = 13
    max_eps = 0.5 * (fresh_bounds([(SIGMA, Q, k)], DELTA).upper
                     + fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper)
    data, engine, model, optimizer, loader = private_setup()
    callback = PrivacyBudgetCallback(engine, delta=DELTA, max_epsilon=max_eps)
    payloads = []

    class Reporter(transformers.TrainerCallback):       # a reporter after ours
        def on_log(self, args, state, control, logs=None, **kw):
            payloads.append(dict(logs))

    trainer = DPTrainer(model=model, args=args_for(tmp_path, epochs=4), train_dataset=data,
                        optimizers=(optimizer, None), callbacks=[callback, Reporter()],
                        dp_loader=loader)
    trainer.train()

    acc = engine.accountant
    assert steps_of(acc) == k == trainer.state.global_step
    assert callback.stopped and "max_epsilon" in callback.stop_reason
    assert trainer.control.should_training_stop
    assert callback.guard.refused_steps == 0          # stopped by the callback, not the barrier
    records = callback.records
    assert [(r.step, r.event) for r in records] == [
        (2, "step"), (4, "step"), (6, "step"), (8, "step"), (8, "epoch"), (10, "step"),
        (12, "step"), (13, "stop"), (13, "epoch")]
    assert all(r.eps_upper <= max_eps and r.sample_rate == Q for r in records)
    final = fresh_bounds([(SIGMA, Q, k)], DELTA)
    assert (records[-1].eps_lower, records[-1].eps_upper) == (final.lower, final.upper)
    # the bounds are in the Trainer's log history and in the logs sent to reporters
    history = [h for h in trainer.state.log_history if "epsilon_upper" in h]
    assert [h["step"] for h in history] == [r.step for r in records]
    assert history[-1]["epsilon_upper"] == records[-1].eps_upper and history[-1]["delta"] == DELTA
    with_loss = [p for p in payloads if "loss" in p and "epsilon_upper" in p]
    assert len(with_loss) == 6, "epsilon was not added to the Trainer's logging payload"
    assert with_loss[0]["epsilon_upper"] == records[0].eps_upper
    # the state is JSON-serialisable (trainer_state.json)
    trainer.state.save_to_json(str(tmp_path / "state.json"))
    saved = json.loads((tmp_path / "state.json").read_text())
    assert any("epsilon_upper" in h for h in saved["log_history"])


def test_hard_barrier_when_the_loop_ignores_the_callback(tmp_path):
    """Even if a callback stop is missed (stop flag cleared), the guard refuses the step."""
    k = 3
    max_eps = 0.5 * (fresh_bounds([(SIGMA, Q, k)], DELTA).upper
                     + fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper)
    data, engine, model, optimizer, loader = private_setup()
    callback = PrivacyBudgetCallback(engine, delta=DELTA, max_epsilon=max_eps,
                                     log_every_n_steps=1)

    class IgnoreStop(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = False

    trainer = DPTrainer(model=model, args=args_for(tmp_path, epochs=1), train_dataset=data,
                        optimizers=(optimizer, None), callbacks=[callback, IgnoreStop()],
                        dp_loader=loader)
    trainer.train()
    assert steps_of(engine.accountant) == k                # 8 batches ran, 3 steps were taken
    assert trainer.state.global_step == 8
    assert callback.guard.should_stop and callback.guard.refused_steps == 5
    assert fresh_bounds(engine.accountant.history, DELTA).upper <= max_eps


def test_account_steps_without_opacus_optimizer(tmp_path):
    """The callback can account the steps itself (noise added elsewhere)."""
    data = Points()
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=None, log_every_n_steps=4,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    trainer = Trainer(model=TinyClassifier(), args=args_for(tmp_path, epochs=1, logging_steps=4),
                      train_dataset=data, data_collator=default_data_collator,
                      callbacks=[callback])
    trainer.train()
    assert acc.history == [(SIGMA, Q, 8)]
    assert [(r.step, r.event) for r in callback.records] == [(4, "step"), (8, "step"),
                                                             (8, "epoch")]
    assert not callback.stopped


def test_account_steps_counts_every_accumulated_micro_batch(tmp_path):
    """gradient_accumulation_steps=3 over 8 batches: steps of 3, 3 and 2 batches, each
    accounted at that many times the batch's rate (it was Q per step: 3 steps that
    touched 8 batches were accounted as 3 batches).  The look-ahead prices the next
    step the same way: a budget that one 3-batch step exceeds stops before it."""
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, noise_multiplier=SIGMA,
                                     sample_rate=Q, account_steps=True)
    args = args_for(tmp_path, epochs=1)
    args.gradient_accumulation_steps = 3
    Trainer(model=TinyClassifier(), args=args, train_dataset=Points(),
            data_collator=default_data_collator, callbacks=[callback]).train()
    assert acc.history == [(SIGMA, 3 * Q, 2), (SIGMA, 2 * Q, 1)]

    budget = 0.5 * (fresh_bounds([(SIGMA, Q, 1)], DELTA).upper
                    + fresh_bounds([(SIGMA, 3 * Q, 1)], DELTA).upper)
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=budget,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    Trainer(model=TinyClassifier(), args=args, train_dataset=Points(),
            data_collator=default_data_collator, callbacks=[callback]).train()
    assert acc.history == [] and callback.stopped


def test_lookahead_prices_an_accumulated_dp_step_as_opacus_records_it(tmp_path):
    """gradient_accumulation_steps=2 with make_private(poisson_sampling=False): Opacus
    records each step at 2Q.  The look-ahead priced the next step at Q, let a step the
    budget cannot afford through, and the guard had to refuse it (6 Trainer steps for
    5 taken); it now stops cleanly before it."""
    import warnings
    quiet_opacus_warnings()
    torch.manual_seed(0)
    data, model, engine = Points(), TinyClassifier(), PrivacyEngine(accountant="pb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the shuffled loader's sampler warning
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
            data_loader=DataLoader(data, batch_size=BATCH, shuffle=True,
                                   collate_fn=default_data_collator),
            noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=False,
            noise_generator=torch.Generator().manual_seed(0))
    k = 5
    max_eps = 0.5 * (fresh_bounds([(SIGMA, 2 * Q, k)], DELTA).upper
                     + fresh_bounds([(SIGMA, 2 * Q, k + 1)], DELTA).upper)
    callback = PrivacyBudgetCallback(engine, delta=DELTA, max_epsilon=max_eps)
    args = args_for(tmp_path, epochs=3)
    args.gradient_accumulation_steps = 2
    trainer = DPTrainer(model=model, args=args, train_dataset=data,
                        optimizers=(optimizer, None), callbacks=[callback], dp_loader=loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert engine.accountant.history == [(SIGMA, 2 * Q, k)]
    assert callback.stopped and callback.guard.refused_steps == 0
    assert trainer.state.global_step == k


def test_account_steps_with_an_accounting_dp_optimizer_is_refused(tmp_path):
    """make_private's hook already records every step: account_steps=True counted each
    twice, silently; it is refused before the first step."""
    data, engine, model, optimizer, loader = private_setup()
    callback = PrivacyBudgetCallback(engine, delta=DELTA, account_steps=True)
    trainer = DPTrainer(model=model, args=args_for(tmp_path, epochs=1), train_dataset=data,
                        optimizers=(optimizer, None), callbacks=[callback], dp_loader=loader)
    with pytest.raises(ValueError, match="counted twice"):
        trainer.train()
    assert engine.accountant.history == [] and trainer.state.global_step == 0


def plain_trainer(tmp_path, callbacks, epochs=1, save_steps=4):
    """No Opacus: the callbacks account the steps; a checkpoint every ``save_steps``."""
    args = args_for(tmp_path, epochs=epochs, logging_steps=4)
    args.save_strategy = "steps"
    args.save_steps = save_steps
    return Trainer(model=TinyClassifier(), args=args, train_dataset=Points(),
                   data_collator=default_data_collator, callbacks=callbacks)


def test_infinite_budget_checkpoint_round_trips(tmp_path):
    """max_epsilon=inf (never stops) is saved with every checkpoint and restored as is."""
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=math.inf,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    plain_trainer(tmp_path, [callback]).train()
    assert acc.history == [(SIGMA, Q, 8)] and not callback.stopped
    folder = tmp_path / "checkpoint-8"
    assert (folder / callback.state_file).is_file()
    assert not [p for p in os.listdir(folder) if p.endswith(".tmp")]
    again = PrivacyBudgetCallback(PrivacyBucketsAccountant(), delta=DELTA, max_epsilon=math.inf,
                                  noise_multiplier=SIGMA, sample_rate=Q)
    again.load_state(str(folder))
    assert again.state_dict() == callback.state_dict()
    assert again.state_dict()["guard"]["max_epsilon"] == math.inf


def test_a_failed_checkpoint_write_warns_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    from pb_accountant.integrations import huggingface as hf

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf.os, "replace", broken)
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=50.0,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    with pytest.warns(RuntimeWarning, match="not saved with checkpoint"):
        plain_trainer(tmp_path, [callback]).train()
    monkeypatch.undo()
    assert acc.history == [(SIGMA, Q, 8)]                  # training went on
    for folder in ("checkpoint-4", "checkpoint-8"):
        names = os.listdir(tmp_path / folder)
        assert not [p for p in names if p.startswith("pb_accountant_state")], names


def test_two_callbacks_keep_separate_checkpoint_states(tmp_path):
    acc = PrivacyBucketsAccountant()
    warn = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=math.inf,
                                 noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    stop = PrivacyBudgetCallback(acc, delta=1e-6, max_epsilon=50.0)
    plain_trainer(tmp_path, [warn, stop]).train()
    folder = tmp_path / "checkpoint-8"
    assert warn.state_file != stop.state_file
    saved = {cb.state_file: json.loads((folder / cb.state_file).read_text())
             for cb in (warn, stop)}
    assert saved[warn.state_file]["guard"]["max_epsilon"] == "inf"
    assert saved[stop.state_file]["guard"]["delta"] == 1e-6
    # a new process restores each from its own file
    acc2 = PrivacyBucketsAccountant()
    warn2 = PrivacyBudgetCallback(acc2, delta=DELTA, max_epsilon=math.inf,
                                  noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    stop2 = PrivacyBudgetCallback(acc2, delta=1e-6, max_epsilon=50.0)
    plain_trainer(tmp_path, [warn2, stop2], epochs=2).train(
        resume_from_checkpoint=str(folder))
    assert warn2.monitor.restored == "loaded" and stop2.monitor.restored == "matched"
    assert acc2.history == [(SIGMA, Q, 16)]
    assert stop2.guard.state_dict()["delta"] == 1e-6
    with pytest.raises(ValueError, match="name"):
        PrivacyBudgetCallback(acc, delta=DELTA, name="../x")


def test_a_checkpoint_of_the_single_state_file_version_is_restored(tmp_path):
    from pb_accountant.integrations.huggingface import STATE_FILE
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=50.0,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    plain_trainer(tmp_path, [callback]).train()
    folder = tmp_path / "checkpoint-8"
    os.replace(folder / callback.state_file, folder / STATE_FILE)     # the old layout
    acc2 = PrivacyBucketsAccountant()
    again = PrivacyBudgetCallback(acc2, delta=DELTA, max_epsilon=50.0, name="renamed",
                                  noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    plain_trainer(tmp_path, [again], epochs=2).train(resume_from_checkpoint=str(folder))
    assert again.monitor.restored == "loaded" and acc2.history == [(SIGMA, Q, 16)]


def test_resuming_with_an_older_budget_state_warns(tmp_path):
    """A state from checkpoint-8 at global step 16 lacks 8 steps: never silently."""
    import warnings
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, noise_multiplier=SIGMA, sample_rate=Q,
                                     account_steps=True)
    plain_trainer(tmp_path, [callback], epochs=2, save_steps=8).train()
    assert acc.history == [(SIGMA, Q, 16)]

    def resume(**kw):
        again = PrivacyBudgetCallback(PrivacyBucketsAccountant(), delta=DELTA,
                                      noise_multiplier=SIGMA, sample_rate=Q,
                                      account_steps=True, **kw)
        plain_trainer(tmp_path, [again], epochs=3, save_steps=8).train(
            resume_from_checkpoint=str(tmp_path / "checkpoint-16"))
        return again

    with pytest.warns(RuntimeWarning, match="holds only 8 steps"):
        stale = resume(resume_from=str(tmp_path / "checkpoint-8"))
    assert stale.monitor.restored == "loaded"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fresh = resume()
    assert fresh.monitor.accountant.history == [(SIGMA, Q, 24)]


@pytest.mark.parametrize("name", ["account_steps", "clear_dp_gradients", "log_on_epoch_end",
                                  "guard_optimizer"])
@pytest.mark.parametrize("bad", ["False", 0, None])
def test_flags_are_true_or_false(name, bad):
    """A truthy stand-in such as "False" would read as the opposite: refused."""
    with pytest.raises(ValueError, match=rf"{name} must be True or False"):
        PrivacyBudgetCallback(PrivacyBucketsAccountant(), delta=1e-5, **{name: bad})


def test_account_steps_refused_steps_are_neither_taken_nor_recorded(tmp_path):
    """account_steps=True: the Trainer takes its first step even after a stop at
    on_train_begin, and a loop may ignore the stop request.  With a plain optimizer the
    step past the budget had been taken and recorded (history 1 step over a budget below
    one step); with a DPOptimizer without an accounting hook the guard refused 5 steps
    (no update) and the callback recorded them all the same (8 steps for 3 taken).
    The guard now refuses the step before the update and the refused steps are not
    recorded."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    quiet_opacus_warnings()
    loader = DataLoader(Points(), batch_size=BATCH, collate_fn=default_data_collator)

    class IgnoreStop(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = False

    def train(model, optimizer, budget, callbacks=()):
        acc = PrivacyBucketsAccountant()
        callback = PrivacyBudgetCallback(acc, delta=DELTA, max_epsilon=budget,
                                         noise_multiplier=SIGMA, sample_rate=Q,
                                         account_steps=True, log_every_n_steps=1)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = DPTrainer(model=model, args=args_for(tmp_path, epochs=1),
                            train_dataset=Points(), optimizers=(optimizer, None),
                            callbacks=[callback, *callbacks], dp_loader=loader)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the shuffled loader's sampler warning
            trainer.train()
        moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        return acc, callback, moved

    torch.manual_seed(0)
    model = TinyClassifier()
    below_one = 0.5 * fresh_bounds([(SIGMA, Q, 1)], DELTA).upper
    acc, callback, moved = train(model, torch.optim.SGD(model.parameters(), lr=0.5), below_one)
    assert acc.history == [] and callback.stopped and not moved
    assert callback.guard.refused_steps == 1

    k = 3
    budget = 0.5 * (fresh_bounds([(SIGMA, Q, k)], DELTA).upper
                    + fresh_bounds([(SIGMA, Q, k + 1)], DELTA).upper)
    model = GradSampleModule(TinyClassifier())
    optimizer = DPOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), noise_multiplier=SIGMA,
                            max_grad_norm=1.0, expected_batch_size=BATCH)
    acc, callback, _ = train(model, optimizer, budget, callbacks=[IgnoreStop()])
    assert acc.history == [(SIGMA, Q, k)] and callback.guard.refused_steps == 8 - k
    assert all(r.eps_upper <= budget for r in callback.records)


def test_account_steps_with_a_step_rate_above_one_is_refused_before_the_first_step(tmp_path):
    """sample_rate 0.5 with 3 accumulated batches: each step's rate is 1.5.  It had
    raised only after the first step was taken (and not recorded); now at train begin."""
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, noise_multiplier=SIGMA, sample_rate=0.5,
                                     account_steps=True)
    args = args_for(tmp_path, epochs=1)
    args.gradient_accumulation_steps = 3
    model = TinyClassifier()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model=model, args=args, train_dataset=Points(),
                      data_collator=default_data_collator, callbacks=[callback])
    with pytest.raises(ValueError, match=r"sample_rate=0\.5 .* 3 batches"):
        trainer.train()
    assert acc.history == [] and trainer.state.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
