"""Issue 13, integrations side: no silent sampler mismatch, flags everywhere.

Tiny real trainings (Opacus with ``poisson_sampling=False``, the Hugging Face Trainer's
own shuffled loader, Lightning with ``DataLoader(shuffle=True)``): the
``SamplerMismatchWarning`` (and, with the samplers engine, the shuffle bracket) appears,
and no record calls a number certified for a sampler it was not computed for.  Then
records, sinks, the guard, resuming and the CLI flags.
"""
import csv
import json
import logging
import os
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetGuard, BudgetTracker
from pb_accountant.integrations._cli_render import up
from pb_accountant.integrations.sampling import (LoaderSampling, SamplerMismatchWarning,
                                                  accountant_assumptions, loader_sampling,
                                                  sampler_check)
from pb_accountant.integrations.sinks import BudgetRecord, CSVSink, LoggingSink, TensorBoardSink

from _budget_helpers import quiet_opacus_warnings

DELTA = 1e-5
SIGMA = 1.0
N, BATCH = 64, 8                 # 8 batches per epoch
Q = 1 / 8


def _has_samplers() -> bool:
    try:
        PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                 dataset_size=N, batch_size=BATCH)
    except (TypeError, ValueError):
        return False
    return True


needs_samplers = pytest.mark.skipif(not _has_samplers(),
                                    reason="the samplers engine (issue 13) is not merged")


def shuffle_accountant(history=(), n=N, b=BATCH):
    acc = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                   dataset_size=n, batch_size=b)
    acc.history = [tuple(h) for h in history]
    return acc


def mismatches(caught):
    return [w for w in caught if issubclass(w.category, SamplerMismatchWarning)]


def assert_never_certified_for_the_wrong_sampler(records, loader="shuffle"):
    assert records
    for r in records:
        assert r.sampler == "poisson" and r.neighbouring == "add_remove"
        assert r.loader_sampler == loader and r.certified_for_loader is False
        assert "NOT certified" in r.assumption_text()


# --------------------------------------------------------------------------------------
# detection by duck typing
# --------------------------------------------------------------------------------------

def test_loaders_are_recognised():
    torch = pytest.importorskip("torch")
    from torch.utils.data import (DataLoader, DistributedSampler, IterableDataset,
                                  TensorDataset)
    data = TensorDataset(torch.zeros(N, 2))
    shuffled = loader_sampling(DataLoader(data, batch_size=BATCH, shuffle=True))
    assert shuffled == LoaderSampling("shuffle", shuffled.source, N, BATCH)
    assert "RandomSampler" in shuffled.source
    assert loader_sampling(DataLoader(data, batch_size=BATCH)).sampler == "sequential"
    sequential = loader_sampling(DataLoader(data, batch_size=BATCH))
    assert sequential.upper_only and not shuffled.upper_only
    dist = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
    found = loader_sampling(DataLoader(data, batch_size=BATCH, sampler=dist))
    assert (found.sampler, found.dataset_size, found.batch_size) == ("shuffle", N, 2 * BATCH)
    odd = TensorDataset(torch.zeros(N + 1, 2))
    padded = DistributedSampler(odd, num_replicas=2, rank=0, shuffle=True)
    assert loader_sampling(DataLoader(odd, batch_size=BATCH, sampler=padded)).sampler == "unknown"
    # drop_last: 6 batches of 10 from 64 examples, 4 left out of every epoch
    dropped = loader_sampling(DataLoader(data, batch_size=10, shuffle=True, drop_last=True))
    assert (dropped.sampler, dropped.dataset_size, dropped.upper_only) == ("shuffle", 60, True)
    kept = loader_sampling(DataLoader(data, batch_size=10, shuffle=True))
    assert (kept.dataset_size, kept.upper_only) == (N, False)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(4))

    assert loader_sampling(DataLoader(Stream(), batch_size=2)).sampler == "unknown"
    assert loader_sampling(None) is None
    pytest.importorskip("opacus")
    from opacus.data_loader import DPDataLoader
    dp = loader_sampling(DPDataLoader.from_data_loader(DataLoader(data, batch_size=BATCH)))
    assert dp.sampler == "poisson" and dp.dataset_size == N and dp.batch_size == BATCH


def test_default_accountant_assumes_poisson_add_remove():
    assert accountant_assumptions(PrivacyBucketsAccountant())["sampler"] == "poisson"
    assert accountant_assumptions(object()) == {"sampler": "poisson",
                                                "neighbouring": "add_remove",
                                                "dataset_size": None, "batch_size": None}


def test_warning_names_sampler_and_how_to_switch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(N, 2)), batch_size=BATCH, shuffle=True)
    with pytest.warns(SamplerMismatchWarning) as caught:
        check = sampler_check(PrivacyBucketsAccountant(), loader, DELTA, pending=(SIGMA, Q))
    text = str(caught[0].message)
    assert "shuffle" in text and "sampler='poisson'" in text
    assert "poisson_sampling=True" in text and 'sampler="shuffle"' in text
    assert f"dataset_size={N}" in text and f"batch_size={BATCH}" in text
    assert check is not None and not check.match and check.loader_sampler == "shuffle"


@needs_samplers
def test_warning_gives_the_shuffle_bracket_of_one_epoch_then_of_the_history():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(N, 2)), batch_size=BATCH, shuffle=True)
    with pytest.warns(SamplerMismatchWarning):
        check = sampler_check(PrivacyBucketsAccountant(), loader, DELTA, pending=(SIGMA, Q))
    expected = shuffle_accountant([(SIGMA, Q, 8)]).get_epsilon_bounds(DELTA)
    assert (check.implied.lower, check.implied.upper) == (expected.lower, expected.upper)
    assert up(expected.upper) in check.message and "one epoch" in check.message
    acc = PrivacyBucketsAccountant()
    acc.history = [(SIGMA, Q, 24)]
    with pytest.warns(SamplerMismatchWarning):
        check = sampler_check(acc, loader, DELTA)
    expected = shuffle_accountant(acc.history).get_epsilon_bounds(DELTA)
    assert check.implied.upper == expected.upper and "24 steps" in check.message


@needs_samplers
def test_upper_only_loaders_get_no_lower_bound():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, sinks=[])
    loader = DataLoader(TensorDataset(torch.zeros(N, 2)), batch_size=10, shuffle=True,
                        drop_last=True)
    with pytest.warns(SamplerMismatchWarning, match="no lower bound is certified"):
        tracker.check_loader(loader, noise_multiplier=SIGMA, sample_rate=1 / 6)
    acc.history = [(SIGMA, 1 / 6, 12)]                  # two epochs of 6 batches
    record = tracker.record()
    expected = shuffle_accountant(acc.history, n=60, b=10).get_epsilon_bounds(DELTA)
    assert record.loader_eps_lower == 0.0 and record.loader_eps_upper == expected.upper


@needs_samplers
def test_a_matching_accountant_is_not_warned_about():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(N, 2)), batch_size=BATCH, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerMismatchWarning)
        check = sampler_check(shuffle_accountant(), loader, DELTA)
    assert check.match
    with pytest.warns(SamplerMismatchWarning, match="batch_size=16"):
        check = sampler_check(shuffle_accountant(b=16), loader, DELTA)
    assert not check.match


# --------------------------------------------------------------------------------------
# real training: Opacus with poisson_sampling=False
# --------------------------------------------------------------------------------------

def _opacus_run(poisson_sampling, accountant=None, steps=6, every=2):
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401  (registers "pb")
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset
    quiet_opacus_warnings()
    torch.manual_seed(0)
    x = torch.randn(N, 4)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    model = torch.nn.Linear(4, 2)
    engine = PrivacyEngine(accountant="pb")
    if accountant is not None:
        engine.accountant = accountant
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(data, batch_size=BATCH, shuffle=True),
            noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=poisson_sampling)
        tracker = BudgetTracker(engine, DELTA, every_n_steps=every, sinks=[])
        tracker.attach(optimizer)
        taken = 0
        while taken < steps:
            for xb, yb in loader:
                if taken == steps:
                    break
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                taken += 1
    return engine, tracker, caught


def test_opacus_poisson_sampling_false_warns_and_records_say_so():
    engine, tracker, caught = _opacus_run(poisson_sampling=False)
    found = mismatches(caught)
    assert found, "make_private(poisson_sampling=False) with accountant='pb' was silent"
    text = str(found[0].message)
    assert "shuffle" in text and "poisson_sampling=True" in text
    assert engine.accountant.history == [(SIGMA, Q, 6)]
    assert_never_certified_for_the_wrong_sampler(tracker.records)


@needs_samplers
def test_opacus_poisson_sampling_false_records_carry_the_shuffle_bracket():
    engine, tracker, _ = _opacus_run(poisson_sampling=False, steps=16, every=8)
    last = tracker.records[-1]
    expected = shuffle_accountant(engine.accountant.history).get_epsilon_bounds(DELTA)
    assert (last.loader_eps_lower, last.loader_eps_upper) == (expected.lower, expected.upper)
    assert last.loader_neighbouring == "replace_special"
    assert 0.0 <= last.loader_eps_lower <= last.loader_eps_upper
    assert up(expected.upper) in last.assumption_text()


def test_opacus_poisson_sampling_true_is_certified_for_its_loader():
    engine, tracker, caught = _opacus_run(poisson_sampling=True)
    assert not mismatches(caught)
    assert tracker.records and all(r.loader_sampler == "poisson" and r.certified_for_loader
                                   and r.loader_eps_upper is None for r in tracker.records)


@needs_samplers
def test_opacus_with_a_shuffle_accountant_is_silent_and_certified():
    engine, tracker, caught = _opacus_run(poisson_sampling=False,
                                          accountant=shuffle_accountant(), steps=8, every=8)
    assert not mismatches(caught)
    (record,) = tracker.records
    assert record.sampler == "shuffle" and record.certified_for_loader is True
    expected = shuffle_accountant([(SIGMA, Q, 8)]).get_epsilon_bounds(DELTA)
    assert (record.eps_lower, record.eps_upper) == (expected.lower, expected.upper)


# --------------------------------------------------------------------------------------
# real training: the Hugging Face Trainer's own loader and Lightning's
# --------------------------------------------------------------------------------------

def test_hf_trainer_loader_warns_and_logs_which_sampler(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch import nn
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments, default_data_collator
    from pb_accountant.integrations.huggingface import PrivacyBudgetCallback

    class Points(Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(N, 4, generator=g)

        def __len__(self):
            return N

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": (self.x[i, 0] > 0).long()}

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def forward(self, x=None, labels=None, **unused):
            logits = self.net(x)
            return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}

    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, log_every_n_steps=4,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=1,
                             per_device_train_batch_size=BATCH, logging_steps=4, report_to=[],
                             save_strategy="no", use_cpu=True, disable_tqdm=True,
                             remove_unused_columns=False, dataloader_num_workers=0)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=Points(),
                      data_collator=default_data_collator, callbacks=[callback])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    found = mismatches(caught)
    assert found and "shuffle" in str(found[0].message)
    assert acc.history == [(SIGMA, Q, 8)]
    assert_never_certified_for_the_wrong_sampler(callback.records)
    entries = [h for h in trainer.state.log_history if "epsilon_upper" in h]
    assert entries and all(h["sampler"] == "poisson" and h["neighbouring"] == "add_remove"
                           and h["loader_sampler"] == "shuffle" for h in entries)
    if _has_samplers():
        expected = shuffle_accountant(acc.history).get_epsilon_bounds(DELTA)
        assert entries[-1]["shuffle_epsilon_upper"] == expected.upper
        assert entries[-1]["shuffle_epsilon_lower"] == expected.lower


def test_lightning_shuffled_loader_warns_and_logs_the_bracket(tmp_path):
    torch = pytest.importorskip("torch")
    try:
        import pytorch_lightning as pl
    except ImportError:
        pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset
    from pb_accountant.integrations.lightning import PrivacyBudgetCallback
    from test_lightning import TinyPlainModel as Tiny      # (no Opacus: the callback accounts)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=BATCH, shuffle=True)
    acc = PrivacyBucketsAccountant()
    callback = PrivacyBudgetCallback(acc, delta=DELTA, log_every_n_steps=4,
                                     noise_multiplier=SIGMA, sample_rate=Q, account_steps=True)
    logged = []

    class Catch(pl.loggers.logger.Logger):
        name, version = "catch", 0

        @property
        def experiment(self):
            return None

        def log_hyperparams(self, *a, **k):
            pass

        def log_metrics(self, metrics, step=None):
            logged.append((step, dict(metrics)))

    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, callbacks=[callback],
                         logger=Catch(), enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Tiny(), train_dataloaders=loader)
    found = mismatches(caught)
    assert found and "shuffle" in str(found[0].message)
    assert acc.history == [(SIGMA, Q, 8)]
    assert_never_certified_for_the_wrong_sampler(callback.records)
    if _has_samplers():
        ours = [m for _, m in logged if "shuffle_epsilon_upper" in m]
        expected = shuffle_accountant(acc.history).get_epsilon_bounds(DELTA)
        assert ours and ours[-1]["shuffle_epsilon_upper"] == expected.upper


# --------------------------------------------------------------------------------------
# sinks, guard, resume
# --------------------------------------------------------------------------------------

def _record(**kw):
    base = dict(step=8, epoch=0, delta=DELTA, eps_lower=1.0, eps_upper=1.1,
                noise_multiplier=SIGMA, sample_rate=Q, event="step")
    base.update(kw)
    return BudgetRecord(**base)


def test_sinks_say_which_sampler(tmp_path, caplog):
    mismatch = _record(loader_sampler="shuffle", loader_eps_lower=2.0, loader_eps_upper=9.0,
                       loader_neighbouring="replace_special")
    with CSVSink(tmp_path / "b.csv") as sink:
        sink.write(mismatch)
    with open(tmp_path / "b.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["sampler"] == "poisson" and row["neighbouring"] == "add_remove"
    assert row["loader_sampler"] == "shuffle" and float(row["loader_eps_upper"]) == 9.0
    assert json.loads(json.dumps(mismatch.as_json_dict()))["loader_eps_lower"] == 2.0
    with caplog.at_level(logging.INFO, logger="pb_accountant"):
        LoggingSink().write(mismatch)
        LoggingSink().write(_record(loader_sampler="poisson"))
    first, second = [r.getMessage() for r in caplog.records]
    assert "sampler=poisson" in first and "NOT certified for the shuffle loader" in first
    assert "[2, 9]" in first and "NOT" not in second

    class Writer:
        def __init__(self):
            self.scalars, self.texts = [], []

        def add_scalar(self, tag, value, global_step=None):
            self.scalars.append(tag)

        def add_text(self, tag, text, global_step=None):
            self.texts.append(text)

        def flush(self):
            pass

    writer = Writer()
    sink = TensorBoardSink(writer=writer)
    sink.write(mismatch)
    sink.write(mismatch)
    assert "privacy/shuffle/epsilon_upper" in writer.scalars
    assert len(writer.texts) == 1 and "sampler=poisson" in writer.texts[0]


def test_guard_says_which_sampler_it_stops_on():
    acc = PrivacyBucketsAccountant()
    guard = BudgetGuard(acc, max_epsilon=0.01, delta=DELTA, mode="stop")
    assert not guard.check(noise_multiplier=SIGMA, sample_rate=Q)
    assert "sampler=poisson, neighbouring=add_remove" in guard.stop_message


@needs_samplers
def test_guard_stops_on_the_configured_samplers_upper_bound():
    acc = shuffle_accountant()
    budget = shuffle_accountant([(SIGMA, Q, 8)]).get_epsilon(DELTA)       # one epoch
    guard = BudgetGuard(acc, max_epsilon=budget, delta=DELTA, mode="stop", lookahead=False)
    taken = 0
    while guard.check(noise_multiplier=SIGMA, sample_rate=Q) and taken < 100:
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        taken += 1
    assert taken == 8 and acc.get_epsilon(DELTA) <= budget
    assert "sampler=shuffle" in guard.stop_message


def test_resume_with_another_sampler_raises():
    tracker = BudgetTracker(PrivacyBucketsAccountant(), DELTA, sinks=[])
    tracker.accountant.history = [(SIGMA, Q, 5)]
    state = json.loads(json.dumps(tracker.state_dict()))
    assert state["accountant"]["assumptions"]["sampler"] == "poisson"
    other = dict(state, accountant=dict(state["accountant"],
                                        assumptions={"sampler": "shuffle",
                                                     "neighbouring": "replace_special",
                                                     "dataset_size": N, "batch_size": BATCH}))
    fresh = BudgetTracker(PrivacyBucketsAccountant(), DELTA, sinks=[])
    with pytest.raises(ValueError, match="sampler='shuffle'"):
        fresh.load_state_dict(other)
    assert fresh.accountant.history == []                       # nothing changed
    fresh.load_state_dict(state)
    assert fresh.accountant.history == [(SIGMA, Q, 5)]


@needs_samplers
def test_callback_state_keeps_the_sampler_and_refuses_another():
    pytest.importorskip("torch")
    from pb_accountant.integrations._callback_core import BudgetMonitor
    monitor = BudgetMonitor(shuffle_accountant([(SIGMA, Q, 8)]), DELTA, None, 4, True, [],
                            SIGMA, Q, True)
    state = json.loads(json.dumps(monitor.state_dict()))
    assert state["accountant"]["assumptions"] == {"sampler": "shuffle",
                                                  "neighbouring": "replace_special",
                                                  "dataset_size": N, "batch_size": BATCH}
    same = BudgetMonitor(shuffle_accountant(), DELTA, None, 4, True, [], SIGMA, Q, True)
    same.load_state_dict(state)
    assert same.accountant.history == [(SIGMA, Q, 8)]
    for other in (PrivacyBucketsAccountant(), shuffle_accountant(b=16)):
        monitor = BudgetMonitor(other, DELTA, None, 4, True, [], SIGMA, Q, True)
        with pytest.raises(ValueError):
            monitor.load_state_dict(state)
        assert monitor.accountant.history == []


# --------------------------------------------------------------------------------------
# the CLI flags
# --------------------------------------------------------------------------------------

def cli(capsys, *argv):
    from pb_accountant.integrations.cli import main
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_default_says_poisson_add_remove(capsys):
    status, out, _ = cli(capsys, "epsilon", "--sigma", 1.1, "--sample-rate", 0.01,
                         "--steps", 100, "--delta", DELTA)
    assert status == 0
    assert "assumes: sampler=poisson, neighbouring=add_remove" in out
    assert "(sampler=poisson, neighbouring=add_remove)" in out.split("certified:")[1]
    status, out, _ = cli(capsys, "epsilon", "--sigma", 1.1, "--sample-rate", 0.01,
                         "--steps", 100, "--delta", DELTA, "--json")
    data = json.loads(out)
    assert (data["sampler"], data["neighbouring"]) == ("poisson", "add_remove")


def test_cli_sampler_needs_sizes_and_a_defined_relation(capsys):
    status, _, err = cli(capsys, "epsilon", "--sampler", "shuffle", "--sigma", 1.1,
                         "--sample-rate", 0.01, "--steps", 100, "--delta", DELTA)
    assert status == 2 and "--batch-size and --dataset-size" in err
    status, _, err = cli(capsys, "epsilon", "--sampler", "bogus", "--sigma", 1.1,
                         "--sample-rate", 0.01, "--steps", 100, "--delta", DELTA)
    assert status == 2 and "--sampler" in err
    status, _, err = cli(capsys, "noise", "--sampler", "shuffle", "--target-epsilon", 3,
                         "--sample-rate", 0.01, "--epochs", 1, "--delta", DELTA)
    assert status == 2 and "--batch-size and --dataset-size" in err


@needs_samplers
def test_cli_shuffle_matches_the_accountant(capsys):
    status, out, err = cli(capsys, "epsilon", "--sampler", "shuffle", "--sigma", 1.0,
                           "--batch-size", 256, "--dataset-size", 2560, "--epochs", 3,
                           "--delta", DELTA, "--json")
    assert status == 0, err
    data = json.loads(out)
    assert (data["sampler"], data["neighbouring"]) == ("shuffle", "replace_special")
    assert data["steps"] == 30
    expected = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                        dataset_size=2560, batch_size=256)
    expected.history = [(1.0, 0.1, 30)]
    b = expected.get_epsilon_bounds(DELTA)
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)
    status, _, err = cli(capsys, "epsilon", "--sampler", "shuffle", "--neighbouring",
                         "add_remove", "--sigma", 1.0, "--batch-size", 256, "--dataset-size",
                         2560, "--epochs", 3, "--delta", DELTA)
    assert status == 2 and "replace_special" in err
    status, out, err = cli(capsys, "delta", "--sampler", "fixed_size", "--neighbouring",
                           "replace_one", "--sigma", 1.0, "--batch-size", 256,
                           "--dataset-size", 2560, "--steps", 30, "--epsilon", 1, 2)
    assert status == 0, err
    assert "assumes: sampler=fixed_size, neighbouring=replace_one" in out
    status, out, err = cli(capsys, "compare", "--sampler", "shuffle", "--sigma", 1.0,
                           "--batch-size", 256, "--dataset-size", 2560, "--steps", 30,
                           "--delta", DELTA, "--peers", "opacus-rdp", "--json")
    assert status == 0, err
    rows = {r["method"]: r for r in json.loads(out)["results"]}
    assert rows["pb"]["sampler"] == "shuffle" and rows["pb-poisson"]["sampler"] == "poisson"
    assert rows["opacus-rdp"]["sampler"] == "poisson"
    status, out, err = cli(capsys, "noise", "--sampler", "shuffle", "--target-epsilon", 8,
                           "--batch-size", 256, "--dataset-size", 2560, "--epochs", 3,
                           "--delta", DELTA, "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["sampler"] == "shuffle" and data["steps"] == 30 and data["certified"]
    check = PrivacyBucketsAccountant(sampler="shuffle", neighbouring="replace_special",
                                     dataset_size=2560, batch_size=256)
    check.history = [(data["noise_multiplier"], 0.1, 30)]
    assert check.get_epsilon(DELTA) <= 8.0 and data["eps_upper"] <= 8.0
    status, _, err = cli(capsys, "curve", "--sampler", "shuffle", "--sigma", 1.0,
                         "--batch-size", 256, "--dataset-size", 2560, "--steps", 30,
                         "--compare")
    assert status == 2 and "--compare" in err
    status, out, err = cli(capsys, "curve", "--sampler", "shuffle", "--sigma", 1.0,
                           "--batch-size", 256, "--dataset-size", 2560, "--steps", 30,
                           "--num", 3)
    assert status == 0, err and "sampler=shuffle" in out


def test_guard_attach_warns_about_a_shuffled_loader():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset
    quiet_opacus_warnings()
    model = torch.nn.Linear(4, 2)
    engine = PrivacyEngine(accountant="pb")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(TensorDataset(torch.randn(N, 4)), batch_size=BATCH,
                                   shuffle=True),
            noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=False)
    guard = BudgetGuard(engine, max_epsilon=10.0, delta=DELTA, mode="stop")
    with pytest.warns(SamplerMismatchWarning, match="shuffle"):
        guard.attach(optimizer, data_loader=loader)
    assert guard.loader_check is not None and not guard.loader_check.match
    guard.detach()


@needs_samplers
def test_a_drop_last_loader_matches_the_accountant_given_the_whole_dataset():
    """DataLoader(3 examples, batch 2, shuffle, drop_last): one example is left out of
    every epoch.  The shuffle accountant given dataset_size=3 reads Opacus's rate
    1/len(loader) = 1 as drop_last (lower bound 0) and is this loader's; one given the 2
    examples an epoch uses reads whole epochs and certified a lower epsilon 4.3765 at
    delta 1e-5, sigma 1, one step, above the run's true epsilon (at most 4.2816: the
    example is in the batch with probability 2/3, so by joint convexity delta is at
    most 2/3 of the Gaussian's).  Before, the check passed that accountant silently and
    warned about the right one ("dataset_size=3 but the loader has 2")."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(3, 1)), batch_size=2, shuffle=True,
                        drop_last=True)
    assert loader_sampling(loader).drop_last_of == 3
    right = shuffle_accountant([(1.0, 1.0, 1)], n=3, b=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerMismatchWarning)
        assert sampler_check(right, loader, DELTA).match
    assert right.get_epsilon_bounds(DELTA).lower == 0.0
    wrong = shuffle_accountant([(1.0, 1.0, 1)], n=2, b=2)
    assert wrong.get_epsilon_bounds(DELTA).lower > 4.2816          # not a lower bound
    with pytest.warns(SamplerMismatchWarning, match="give dataset_size=3"):
        assert not sampler_check(wrong, loader, DELTA).match
    # the Poisson accountant's warning suggests the size that reads drop_last
    with pytest.warns(SamplerMismatchWarning, match="dataset_size=3, batch_size=2"):
        sampler_check(PrivacyBucketsAccountant(), loader, DELTA)


@needs_samplers
def test_a_loader_leaving_examples_out_otherwise_is_upper_bound_only():
    """RandomSampler(num_samples=2) over 3 examples: an epoch uses 2 of them, which no
    accountant reads; the shuffle accountant with the loader's sizes is warned that its
    lower bound (every example in a batch of every epoch) is not certified."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, RandomSampler, TensorDataset
    data = TensorDataset(torch.zeros(3, 1))
    loader = DataLoader(data, batch_size=2, sampler=RandomSampler(data, num_samples=2))
    found = loader_sampling(loader)
    assert found.upper_only and found.drop_last_of is None and found.dataset_size == 2
    with pytest.warns(SamplerMismatchWarning, match="lower bound .* not certified"):
        assert not sampler_check(shuffle_accountant([(1.0, 1.0, 1)], n=2, b=2), loader,
                                 DELTA).match


@needs_samplers
def test_concurrent_records_carry_the_loader_bracket_of_their_own_history():
    """A record computes the shuffled loader's bracket with a sibling accountant shared
    by all records.  The history used to be assigned to it before the query, so a record
    made from another thread meanwhile (a monitoring thread's record() during training)
    had replaced it: the first record carried the other's bracket.  Here the second
    record runs, to completion, in a thread started inside the first one's query."""
    import threading
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(N, 2)), batch_size=BATCH, shuffle=True)
    acc = PrivacyBucketsAccountant()
    acc.history = [(SIGMA, Q, 8)]          # one epoch; the next step starts another
    tracker = BudgetTracker(acc, DELTA, sinks=[])
    with pytest.warns(SamplerMismatchWarning):
        tracker.check_loader(loader)
    sibling = tracker.loader_check.sibling
    before = list(sibling.history)
    nested = []

    def query(*args, **kwargs):
        if not nested:
            nested.append(None)
            def other():
                acc.step(noise_multiplier=SIGMA, sample_rate=Q)        # step 9
                nested[0] = tracker.record(step=9)
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        return type(sibling)._bounds(sibling, *args, **kwargs)

    sibling._bounds = query
    first = tracker.record(step=8)
    expected = {8: shuffle_accountant([(SIGMA, Q, 8)]).get_epsilon_bounds(DELTA),
                9: shuffle_accountant([(SIGMA, Q, 9)]).get_epsilon_bounds(DELTA)}
    assert expected[8].upper < expected[9].upper
    for record in (first, nested[0]):
        bounds = expected[record.step]
        assert (record.loader_eps_lower, record.loader_eps_upper) == (bounds.lower,
                                                                      bounds.upper)
    assert list(sibling.history) == before
