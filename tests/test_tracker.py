"""BudgetTracker and its sinks: CSV / JSON lines flushed per record, logging, TensorBoard
event files read back, attaching to an Opacus DPOptimizer, and the sample-rate check."""
import csv
import json
import logging
import math
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from pb_accountant.integrations import (BudgetTracker, CSVSink, JSONLinesSink, LoggingSink, SampleRateWarning,
                          check_sample_rate)
from pb_accountant.integrations.sinks import BudgetRecord
from pb_accountant import PrivacyBucketsAccountant

from _budget_helpers import fresh_bounds, quiet_opacus_warnings

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5
SIGMA, Q = 1.0, 0.125


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def manual_run(tracker, accountant, steps, steps_per_epoch=None):
    for i in range(1, steps + 1):
        accountant.step(noise_multiplier=SIGMA, sample_rate=Q)
        tracker.on_step()
        if steps_per_epoch and i % steps_per_epoch == 0:
            tracker.on_epoch_end()


# ------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------

def test_csv_and_jsonl_are_flushed_after_every_record(tmp_path):
    acc = PrivacyBucketsAccountant()
    csv_path, jsonl_path = tmp_path / "budget.csv", tmp_path / "sub" / "budget.jsonl"
    tracker = BudgetTracker(acc, DELTA, every_n_steps=2, every_epoch=True,
                            sinks=[CSVSink(csv_path), JSONLinesSink(jsonl_path)])
    for i in range(1, 7):
        acc.step(noise_multiplier=SIGMA, sample_rate=Q)
        tracker.on_step()
        if i % 3 == 0:
            tracker.on_epoch_end()
        # read back while the files are still open: everything recorded is on disk
        rows, lines = read_csv(csv_path), read_jsonl(jsonl_path)
        assert len(rows) == len(lines) == len(tracker.records)
    events = [(r.step, r.epoch, r.event) for r in tracker.records]
    assert events == [(2, 0, "step"), (3, 0, "epoch"), (4, 1, "step"), (6, 1, "step"),
                      (6, 1, "epoch")]
    for row, line, rec in zip(rows, lines, tracker.records):
        assert int(row["step"]) == line["step"] == rec.step
        assert float(row["eps_upper"]) == line["eps_upper"] == rec.eps_upper   # full precision
        assert float(row["eps_lower"]) == line["eps_lower"] == rec.eps_lower
        assert float(row["delta"]) == DELTA and line["noise_multiplier"] == SIGMA
        assert float(row["sample_rate"]) == line["sample_rate"] == Q
        assert 0 < rec.eps_lower <= rec.eps_upper < math.inf
    uppers = [r.eps_upper for r in tracker.records]
    assert uppers == sorted(uppers)
    tracker.close()
    # appending to an existing CSV does not repeat the header
    with BudgetTracker(acc, DELTA, sinks=[CSVSink(csv_path)]) as t2:
        t2.record()
    assert len(read_csv(csv_path)) == len(rows) + 1


def test_a_crash_loses_nothing(tmp_path):
    """The process dies (os._exit: no close, no atexit) right after the 4th record."""
    script = textwrap.dedent(f"""
        import os
        from pb_accountant import PrivacyBucketsAccountant
        from pb_accountant.integrations import BudgetTracker, CSVSink, JSONLinesSink
        acc = PrivacyBucketsAccountant()
        t = BudgetTracker(acc, 1e-5, every_n_steps=1, sinks=[
            CSVSink({str(tmp_path / 'b.csv')!r}), JSONLinesSink({str(tmp_path / 'b.jsonl')!r})])
        for i in range(10):
            acc.step(noise_multiplier=1.0, sample_rate=0.125)
            t.on_step()
            if i == 3:
                os._exit(17)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 17, proc.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "b.csv")] == [1, 2, 3, 4]
    assert [r["step"] for r in read_jsonl(tmp_path / "b.jsonl")] == [1, 2, 3, 4]


def test_non_finite_values_are_valid_json(tmp_path):
    sink = JSONLinesSink(tmp_path / "x.jsonl")
    sink.write(BudgetRecord(1, 0, 1e-9, 0.0, math.inf, 0.0, 0.5, "step"))
    sink.close()
    (line,) = read_jsonl(tmp_path / "x.jsonl")
    assert line["eps_upper"] == "inf" and float(line["eps_upper"]) == math.inf


# ------------------------------------------------------------------------------------
# logging
# ------------------------------------------------------------------------------------

def test_logging_sink_uses_the_pb_accountant_logger(caplog):
    assert logging.getLogger("pb_accountant").handlers == []
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, every_n_steps=1)          # default sink: logging
    assert isinstance(tracker.sinks[0], LoggingSink)
    with caplog.at_level(logging.INFO, logger="pb_accountant"):
        manual_run(tracker, acc, 2)
    records = [r for r in caplog.records if r.name == "pb_accountant"]
    assert len(records) == 2
    assert records[-1].levelno == logging.INFO
    msg = records[-1].getMessage()
    assert "step 2" in msg and "delta=1e-05" in msg and "noise_multiplier=1" in msg
    from decimal import Decimal
    shown = re.search(r"epsilon in \[(\S+), (\S+)\]", msg)
    assert Decimal(shown.group(1)) <= Decimal(tracker.records[-1].eps_lower)
    assert Decimal(shown.group(2)) >= Decimal(tracker.records[-1].eps_upper)
    assert records[-1].budget["eps_lower"] == tracker.records[-1].eps_lower
    assert logging.getLogger("pb_accountant").handlers == []          # nothing installed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pb_accountant"):
        manual_run(tracker, acc, 1)
    assert not [r for r in caplog.records if r.name == "pb_accountant"]


def test_callables_and_accountants_without_lower_bounds():
    from_rdp = pytest.importorskip("opacus.accountants").RDPAccountant()
    seen = []
    tracker = BudgetTracker(from_rdp, DELTA, every_n_steps=1, sinks=[seen.append])
    from_rdp.step(noise_multiplier=SIGMA, sample_rate=Q)
    tracker.on_step()
    assert seen == tracker.records and seen[0].eps_lower == 0.0 and seen[0].eps_upper > 0
    with pytest.raises(ValueError, match="every_n_steps"):
        BudgetTracker(from_rdp, DELTA, every_n_steps=0)
    with pytest.raises(ValueError, match="delta"):
        BudgetTracker(from_rdp, 2.0)
    with pytest.raises(TypeError, match="sink"):
        BudgetTracker(from_rdp, DELTA, sinks=[42])


# ------------------------------------------------------------------------------------
# Opacus + TensorBoard
# ------------------------------------------------------------------------------------

def opacus_setup(n=64, batch=8, seed=0):
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    quiet_opacus_warnings()
    torch.manual_seed(seed)
    x = torch.randn(n, 3)
    y = (x.sum(1) > 0).long()
    model = torch.nn.Linear(3, 2)
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=batch), noise_multiplier=SIGMA,
        max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(seed))
    return torch, engine, model, optimizer, loader


def train(torch, model, optimizer, loader, tracker, epochs):
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        tracker.on_epoch_end(epoch)


def _record(lower, upper, **kw):
    return BudgetRecord(step=kw.pop("step", 1), epoch=0, delta=DELTA, eps_lower=lower,
                        eps_upper=upper, noise_multiplier=SIGMA, sample_rate=Q, **kw)


def test_logging_sink_rounds_the_bounds_outward(caplog):
    # 0.27173794242660726 to nearest at 6 digits is 0.271738 (above); these are not:
    lower, upper = 1.2345649, 1.2345641          # nearest: 1.23456 and 1.23456
    with caplog.at_level(logging.INFO, logger="pb_accountant"):
        LoggingSink().write(_record(lower, upper))
    (rec,) = [r for r in caplog.records if r.name == "pb_accountant"]
    assert "epsilon in [1.23456, 1.23457] at delta=1e-05" in rec.getMessage()
    text = _record(0.1, 0.2, sampler="poisson", loader_sampler="shuffle",
                   loader_eps_lower=1.2345649, loader_eps_upper=1.2345641,
                   loader_neighbouring="replace_special").assumption_text()
    assert "epsilon in [1.23456, 1.23457]" in text


class _FakeWriter:
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, global_step=None):
        self.scalars[tag] = value

    def flush(self):
        pass


@pytest.mark.parametrize("lower,upper", [(0.27173794242660726, 0.27173794242660726),
                                         (0.2251650927311461, 0.3036876112501946),
                                         (1e-50, 1e-50), (1e38, 1e39), (0.0, math.inf)])
def test_tensorboard_bounds_are_rounded_outward_to_float32(lower, upper):
    import numpy as np
    from pb_accountant.integrations import TensorBoardSink
    writer = _FakeWriter()
    TensorBoardSink(writer=writer).write(_record(
        lower, upper, loader_sampler="shuffle", loader_eps_lower=lower,
        loader_eps_upper=upper, loader_neighbouring="replace_special"))
    for prefix in ("privacy/", "privacy/shuffle/"):
        lo = writer.scalars[prefix + "epsilon_lower"]
        assert float(np.float32(lo)) == lo and lo <= lower           # what float32 keeps
        up = writer.scalars.get(prefix + "epsilon_upper")
        if up is None:                                  # beyond float32: not plotted
            with np.errstate(over="ignore"):
                assert float(np.float32(upper)) == math.inf
        else:
            assert float(np.float32(up)) == up and up >= upper
    assert writer.scalars["privacy/sample_rate"] == Q               # not a bound: as is


def test_tensorboard_event_file_never_shows_an_upper_bound_below_itself(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch")
    from pb_accountant.integrations import TensorBoardSink
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, every_n_steps=5, every_epoch=False,
                            sinks=[TensorBoardSink(tmp_path / "tb ü")])
    for _ in range(20):
        acc.step(noise_multiplier=1.1, sample_rate=0.01)
        tracker.on_step()
    tracker.close()
    events = EventAccumulator(str(tmp_path / "tb ü"))
    events.Reload()
    upper = events.Scalars("privacy/epsilon_upper")
    lower = events.Scalars("privacy/epsilon_lower")
    assert [e.step for e in upper] == [r.step for r in tracker.records] == [5, 10, 15, 20]
    for e_up, e_lo, rec in zip(upper, lower, tracker.records):
        # (step 10's 0.27173794242660726 was stored as 0.2717379331588745 before)
        assert e_lo.value <= rec.eps_lower <= rec.eps_upper <= e_up.value


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from pb_accountant.integrations import TensorBoardSink
    torch, engine, model, optimizer, loader = opacus_setup()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    tracker = BudgetTracker(engine, DELTA, every_n_steps=2, every_epoch=False, sinks=[sink])
    tracker.attach(optimizer, data_loader=loader)
    train(torch, model, optimizer, loader, tracker, epochs=1)
    # read back before closing: the writer was flushed after every record
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("privacy/epsilon_lower", "privacy/epsilon_upper", "privacy/noise_multiplier",
                "privacy/sample_rate"):
        assert tag in tags
    upper = acc.Scalars("privacy/epsilon_upper")
    lower = acc.Scalars("privacy/epsilon_lower")
    assert [e.step for e in upper] == [r.step for r in tracker.records] == [2, 4, 6, 8]
    for e_up, e_lo, rec in zip(upper, lower, tracker.records):
        assert e_up.value == pytest.approx(rec.eps_upper, rel=1e-6)      # float32 on disk
        assert e_lo.value == pytest.approx(rec.eps_lower, rel=1e-6)
        assert e_lo.value <= e_up.value
    assert [e.value for e in acc.Scalars("privacy/sample_rate")] == [Q] * 4
    tracker.close()


def test_attach_records_every_n_steps_and_epochs():
    torch, engine, model, optimizer, loader = opacus_setup()
    tracker = BudgetTracker(engine, DELTA, every_n_steps=3, sinks=[])
    tracker.attach(optimizer)
    train(torch, model, optimizer, loader, tracker, epochs=2)
    got = [(r.step, r.epoch, r.event) for r in tracker.records]
    assert got == [(3, 0, "step"), (6, 0, "step"), (8, 0, "epoch"), (9, 1, "step"),
                   (12, 1, "step"), (15, 1, "step"), (16, 1, "epoch")]
    assert all(r.noise_multiplier == SIGMA and r.sample_rate == Q for r in tracker.records)
    tracker.detach()
    assert optimizer.step_hook is not None and not hasattr(optimizer.step_hook, "_pb_wrapped")


def test_recorded_bounds_equal_a_fresh_computation():
    """What the tracker records during training is what a fresh accountant certifies."""
    torch, engine, model, optimizer, loader = opacus_setup()
    tracker = BudgetTracker(engine, DELTA, every_n_steps=1, every_epoch=False, sinks=[])
    tracker.attach(optimizer)
    train(torch, model, optimizer, loader, tracker, epochs=1)
    assert len(tracker.records) == 8
    for rec in tracker.records:
        fresh = fresh_bounds([(SIGMA, Q, rec.step)], DELTA)
        assert (rec.eps_lower, rec.eps_upper) == (fresh.lower, fresh.upper)


def test_tracking_every_step_matches_a_fresh_accountant():
    """Regression: querying after every step must not return a cached answer for fewer
    steps (pb_accountant's binary-power prefix cache once keyed segments by count >> b)."""
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, every_n_steps=1, sinks=[])
    manual_run(tracker, acc, 12)
    for rec in tracker.records:
        fresh = fresh_bounds([(SIGMA, Q, rec.step)], DELTA)
        assert (rec.eps_lower, rec.eps_upper) == (fresh.lower, fresh.upper), rec.step
    uppers = [r.eps_upper for r in tracker.records]
    assert all(a < b for a, b in zip(uppers, uppers[1:]))


def test_attach_without_accounting_hook_steps_the_accountant():
    torch, engine, model, optimizer, loader = opacus_setup()
    optimizer.attach_step_hook(None)                     # as if no PrivacyEngine accounted
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, every_n_steps=4, every_epoch=False, sinks=[])
    with pytest.raises(ValueError, match="sample rate is unknown"):
        tracker.attach(optimizer)
    tracker.attach(optimizer, sample_rate=Q)
    train(torch, model, optimizer, loader, tracker, epochs=1)
    assert acc.history == [(SIGMA, Q, 8)]
    assert [r.step for r in tracker.records] == [4, 8]


def test_a_sample_rate_above_one_is_refused_at_attach_where_every_step_would_use_it():
    """A tracker that steps the accountant itself, or a guard, with sample_rate 2 had
    only warned at attach; every optimizer.step() then raised inside the training loop.
    Both are refused at attach, before anything is installed."""
    from pb_accountant.integrations import BudgetGuard
    torch, engine, model, optimizer, loader = opacus_setup()
    optimizer.attach_step_hook(None)
    acc = PrivacyBucketsAccountant()
    tracker = BudgetTracker(acc, DELTA, every_n_steps=4, every_epoch=False, sinks=[])
    with pytest.warns(SampleRateWarning), pytest.raises(ValueError, match=r"sample_rate.*2\.0"):
        tracker.attach(optimizer, sample_rate=2.0)
    guard = BudgetGuard(acc, 100.0, DELTA)
    with pytest.warns(SampleRateWarning), pytest.raises(ValueError, match=r"sample_rate.*2\.0"):
        guard.attach(optimizer, sample_rate=2.0)
    assert optimizer.step_hook is None and "step" not in vars(optimizer)
    tracker.attach(optimizer, sample_rate=Q)            # nothing was left attached
    guard.attach(optimizer, sample_rate=Q)
    train(torch, model, optimizer, loader, tracker, epochs=1)
    assert acc.history == [(SIGMA, Q, 8)]


# ------------------------------------------------------------------------------------
# sample-rate sanity (opacus issue #813)
# ------------------------------------------------------------------------------------

def test_check_sample_rate_warnings():
    with pytest.warns(SampleRateWarning, match="greater than 1"):
        problems = check_sample_rate(32)
    assert len(problems) == 1
    with pytest.raises(ValueError):
        check_sample_rate(-0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_sample_rate(0.01) == []
        assert check_sample_rate(1.0) == []


def test_check_sample_rate_with_opacus_loaders():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from opacus.data_loader import DPDataLoader
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(93, 2))
    # 93 batches -> DPDataLoader(sample_rate=1/93) has int(1/(1/93)) = 92 batches
    dp = DPDataLoader.from_data_loader(DataLoader(data, batch_size=1))
    assert len(dp) == 92 and dp.sample_rate == 1 / 93
    with pytest.warns(SampleRateWarning, match="#813") as rec:
        check_sample_rate(1 / 93, dp)
    assert len(rec) == 1
    with pytest.warns(SampleRateWarning) as rec:
        check_sample_rate(1 / len(dp), dp)                  # what make_private accounts
    assert len(rec) == 2 and "told sample_rate" in str(rec[1].message)
    # a sampler whose 1/rate is not an integer
    loader = DataLoader(data, batch_sampler=UniformWithReplacementSampler(num_samples=93,
                                                                         sample_rate=0.3))
    with pytest.warns(SampleRateWarning, match="0.3"):
        check_sample_rate(0.3, loader)
    # consistent: no warning; ordinary loaders are not judged
    ok = DPDataLoader.from_data_loader(DataLoader(data, batch_size=31))     # 3 batches
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_sample_rate(1 / 3, ok) == []
        assert check_sample_rate(0.5, DataLoader(data, batch_size=4)) == []


def test_tracker_attach_checks_the_sample_rate():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    import pb_accountant  # noqa: F401
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    quiet_opacus_warnings()
    data = TensorDataset(torch.randn(93, 2), torch.zeros(93, dtype=torch.long))
    model = torch.nn.Linear(2, 2)
    engine = PrivacyEngine(accountant="pb")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(data, batch_size=1), noise_multiplier=1.0, max_grad_norm=1.0)
    # make_private: DPDataLoader(sample_rate=1/93) has 92 batches, the hook accounts 1/92
    assert loader.sample_rate == 1 / 93 and len(loader) == 92
    tracker = BudgetTracker(engine, DELTA, sinks=[])
    with pytest.warns(SampleRateWarning) as caught:
        tracker.attach(optimizer, data_loader=loader)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "#813" in messages[0] and "told sample_rate" in messages[1]
    assert tracker._sample_rate == 1 / 92
    tracker.detach()
    # a consistent set-up attaches silently
    torch_, engine2, _model2, optimizer2, loader2 = opacus_setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BudgetTracker(engine2, DELTA, sinks=[]).attach(optimizer2, data_loader=loader2)
    assert not [w for w in caught if issubclass(w.category, SampleRateWarning)]
