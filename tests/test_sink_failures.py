"""A failing sink never stops training, never desynchronises it, never cuts a line.

``JSONLinesSink("/dev/full")`` fails every write with ENOSPC.  Real Opacus and
Lightning runs must finish, account every step taken exactly once, report the error
(a SinkErrorWarning and ``tracker.sink_errors``), disable the sink and still give
every record to the other sinks.
"""
import errno
import json
import os
import warnings

import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import (BudgetTracker, CSVSink, JSONLinesSink, SinkErrorWarning)
from pb_accountant.integrations import sinks as sinks_module

from _budget_helpers import quiet_opacus_warnings

DELTA = 1e-5
SIGMA, Q = 1.0, 0.125
DEV_FULL = "/dev/full"

needs_dev_full = pytest.mark.skipif(not os.path.exists(DEV_FULL), reason="no /dev/full")


def steps_of(accountant):
    return sum(int(h[2]) for h in accountant.history)


@needs_dev_full
def test_opacus_training_survives_a_full_disk():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from opacus import PrivacyEngine
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    quiet_opacus_warnings()
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=8), noise_multiplier=SIGMA,
        max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(0))
    received = []
    broken = JSONLinesSink(DEV_FULL)
    tracker = BudgetTracker(engine, DELTA, every_n_steps=1, every_epoch=True,
                            sinks=[broken, received.append])
    tracker.attach(optimizer)
    taken = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(2):
            for xb, yb in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                before = [p.detach().clone() for p in model.parameters()]
                optimizer.step()                       # never raises for logging
                taken += 1
                after = list(model.parameters())
                assert any(not torch.equal(a, b) for a, b in zip(before, after)), \
                    "a step was accounted but its update was not applied"
            tracker.on_epoch_end(epoch)
    tracker.close()
    assert steps_of(engine.accountant) == taken == 16       # each step accounted once
    assert [r.step for r in received if r.event == "step"] == list(range(1, 17))
    assert len(received) == len(tracker.records) == 18      # the other sink got every record
    assert len(tracker.sink_errors) == 1                    # reported once, then disabled
    err = tracker.sink_errors[0]
    assert err.sink is broken and isinstance(err.error, OSError) and err.step == 1
    assert err.error.errno == errno.ENOSPC
    assert tracker.disabled_sinks == [broken] and broken not in tracker.sinks
    sink_warnings = [w for w in caught if issubclass(w.category, SinkErrorWarning)]
    assert len(sink_warnings) == 1 and "/dev/full" in str(sink_warnings[0].message)


@needs_dev_full
def test_lightning_fit_survives_a_full_disk(tmp_path):
    pytest.importorskip("pytorch_lightning")
    import test_lightning as tl
    from opacus.lightning import DPLightningDataModule
    from pb_accountant.integrations.lightning import PrivacyBudgetCallback

    quiet_opacus_warnings()
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    model = tl.TinyDPModel()
    received = []
    callback = PrivacyBudgetCallback(model.privacy_engine, delta=DELTA, log_every_n_steps=1,
                                     sinks=[JSONLinesSink(DEV_FULL), received.append])
    trainer = tl.make_trainer(tmp_path, callback, max_epochs=2)
    with pytest.warns(SinkErrorWarning, match="dev/full"):
        trainer.fit(model, datamodule=DPLightningDataModule(tl.TinyData()))
    acc = model.privacy_engine.accountant
    assert steps_of(acc) == trainer.global_step == 16
    assert [r.step for r in received if r.event == "step"] == list(range(1, 17))
    assert len(received) == len(callback.records)
    assert len(callback.monitor.tracker.sink_errors) == 1


def test_a_failing_callable_is_disabled_and_the_others_go_on(tmp_path):
    acc = PrivacyBucketsAccountant()
    calls = []

    def broken(record):
        calls.append(record.step)
        raise RuntimeError("boom")

    path = tmp_path / "b.jsonl"
    tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[broken, JSONLinesSink(path)])
    with pytest.warns(SinkErrorWarning, match="boom"):
        for _ in range(3):
            acc.step(noise_multiplier=SIGMA, sample_rate=Q)
            tracker.on_step()
    tracker.close()
    assert calls == [1]                                   # disabled after its failure
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    assert str(tracker.sink_errors[0].error) == "boom"


@pytest.mark.parametrize("sink_cls", [JSONLinesSink, CSVSink])
def test_a_write_failing_midway_leaves_no_cut_line(tmp_path, monkeypatch, sink_cls):
    acc = PrivacyBucketsAccountant()
    path = tmp_path / "b.out"
    sink = sink_cls(path)
    tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[sink])
    acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    tracker.on_step()
    good = path.read_bytes()
    assert good.endswith(b"\n")

    real_write = os.write
    state = {"calls": 0}

    def half_then_enospc(fd, data):                     # a short write, then a full disk
        state["calls"] += 1
        if state["calls"] == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks_module.os, "write", half_then_enospc)
    acc.step(noise_multiplier=SIGMA, sample_rate=Q)
    with pytest.warns(SinkErrorWarning, match="No space left"):
        tracker.on_step()
    monkeypatch.undo()
    assert state["calls"] == 2
    assert path.read_bytes() == good                    # truncated back to the last full line
    assert len(tracker.records) == 2 and tracker.disabled_sinks == [sink]


@needs_dev_full
def test_csv_sink_on_a_full_disk_fails_at_the_first_record_not_at_construction():
    sink = CSVSink(DEV_FULL)                             # the header is written with a row
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, sinks=[sink])
    with pytest.warns(SinkErrorWarning):
        tracker.record()
    assert len(tracker.sink_errors) == 1


def test_csv_append_false_starts_afresh(tmp_path):
    path = tmp_path / "b.csv"
    acc = PrivacyBucketsAccountant()
    for append, expected in ((True, 2), (True, 4), (False, 2)):
        with BudgetTracker(acc, DELTA, sinks=[CSVSink(path, append=append)]) as tracker:
            tracker.record()
            tracker.record()
        lines = path.read_text().splitlines()
        assert lines[0].startswith("step,") and len(lines) == expected + 1
        assert sum(line.startswith("step,") for line in lines) == 1


@pytest.mark.parametrize("sink_cls", [JSONLinesSink, CSVSink])
def test_appending_after_a_cut_line_starts_a_new_line(tmp_path, sink_cls):
    """A file left ending in a cut line (an OS crash without fsync, another writer): the
    resumed run's first record was glued to it, so that record was lost too."""
    path = tmp_path / ("log.jsonl" if sink_cls is JSONLinesSink else "log.csv")
    acc = PrivacyBucketsAccountant()
    with sink_cls(path) as sink:
        tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[sink])
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        tracker.on_step()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"step": 2, "ep')          # the cut line
    with sink_cls(path) as sink:
        tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[sink])
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        tracker.on_step()
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        tracker.on_step()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert lines[-4] == b'{"step": 2, "ep'                # left as it was, on its own
    if sink_cls is JSONLinesSink:
        assert [json.loads(x)["step"] for x in lines[-3:-1]] == [2, 3]
    else:
        assert [x.split(b",")[0] for x in lines[-3:-1]] == [b"2", b"3"]
    with sink_cls(path) as sink:                          # a whole file: no blank line
        sink.write(tracker.records[-1])
    assert b"\n\n" not in path.read_bytes()


def test_a_csv_appended_to_keeps_its_own_header(tmp_path):
    """Rows appended to a budget log of an earlier version (fewer columns) had carried
    every current column under the old header: the extra values lay under no name.  They
    now carry the file's columns only, with a warning naming those left out; a CSV that
    is not a budget log is refused before anything is written; a log of this version
    appends as before."""
    import csv
    from pb_accountant.integrations.sinks import FIELDS, BudgetRecord
    record = BudgetRecord(step=3, epoch=1, delta=1e-5, eps_lower=0.5, eps_upper=0.6,
                          noise_multiplier=1.0, sample_rate=0.01, event="step",
                          loader_sampler="poisson")
    old = tmp_path / "old.csv"
    old.write_text(",".join(FIELDS[:9]) + "\n" + ",".join(["1"] * 9) + "\n")
    with pytest.warns(RuntimeWarning, match="loader_sampler"):
        sink = CSVSink(old)
    sink.write(record)
    sink.close()
    rows = list(csv.reader(old.open()))
    assert rows[0] == FIELDS[:9] and all(len(r) == 9 for r in rows) and rows[2][0] == "3"

    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a budget log"):
        CSVSink(other)
    assert other.read_text() == "a,b\n1,2\n"
    CSVSink(other, append=False).close()           # starting afresh is fine

    same = tmp_path / "same.csv"
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sink = CSVSink(same)
        sink.write(record)
        sink.close()
    rows = list(csv.reader(same.open()))
    assert rows[0] == FIELDS and len(rows) == 3 and all(len(r) == len(FIELDS) for r in rows)
