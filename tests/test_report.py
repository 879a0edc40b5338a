"""The privacy report (pb_accountant.integrations.report) and the `risk` / `report`
subcommands: every source kind, the content a model card needs, files, errors."""
import json
import math
import re

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.integrations import BudgetTracker, JSONLinesSink
from pb_accountant.integrations import report as report_mod
from pb_accountant.integrations.cli import main
from pb_accountant.integrations.report import load_source, privacy_report

HISTORY = [(1.1, 0.01, 300), (1.3, 0.02, 100)]


def accountant(history=HISTORY):
    acc = PrivacyBucketsAccountant()
    acc.history = list(history)
    return acc


def check_content(data, acc, deltas):
    assert data["mechanism"].startswith("Poisson-subsampled Gaussian")
    assert data["assumptions"]["sampler"] == "poisson"
    assert data["assumptions"]["neighbouring"] == "add_remove"
    h = data["history"]
    assert h["steps"] == sum(t for _, _, t in acc.history)
    assert h["segments"] == len(acc.history)
    assert h["noise_multiplier"]["min"] == min(s for s, _, _ in acc.history)
    assert h["sample_rate"]["max"] == max(q for _, q, _ in acc.history)
    assert [r["delta"] for r in data["epsilon"]] == sorted(deltas, reverse=True)
    for row in data["epsilon"]:
        b = acc.get_epsilon_bounds(row["delta"])
        assert (row["lower"], row["upper"]) == (b.lower, b.upper)   # the very numbers
    risk = data["attack_risk"]
    lo, up = acc.get_tpr_bounds(np.asarray(risk["fpr"]))
    # the report's TPR bounds come from one trade-off evaluation on a larger grid: each is
    # certified, so it brackets the same true value as the accountant's
    assert np.all(np.asarray(risk["tpr_lower"]) <= up) and np.all(lo <= np.asarray(risk["tpr_upper"]))
    assert risk["gdp_mu"]["lower"] <= risk["gdp_mu"]["upper"]
    assert data["version"]
    assert any("privacy buckets" in s for s in data["assumed"])


def test_report_from_accountant_writes_markdown_json_png(tmp_path):
    acc = accountant()
    rep = privacy_report(acc, str(tmp_path / "card"), deltas=(1e-5, 1e-6))
    check_content(rep.data, acc, [1e-5, 1e-6])
    md = (tmp_path / "card.md").read_text()
    assert md == rep.markdown
    for text in ("Certified (epsilon, delta)", "Attack risk", "false-positive rate",
                 "Method and assumptions", "add_remove", "poisson"):
        assert text in md
    data = json.loads((tmp_path / "card.json").read_text())
    assert data["epsilon"] == rep.data["epsilon"]
    if report_mod.plot_available():
        png = tmp_path / "card.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "card.png" in md


def test_report_without_output_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = privacy_report(accountant([(1.0, 0.05, 50)]), deltas=(1e-5,))
    assert rep.files == {} and list(tmp_path.iterdir()) == []
    assert rep.markdown.startswith("## Differential privacy")


def test_report_without_matplotlib_notes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(report_mod, "plot_available", lambda: False)
    rep = privacy_report(accountant([(1.0, 0.05, 50)]), str(tmp_path / "r"), deltas=(1e-5,))
    assert "png" not in rep.files and not (tmp_path / "r.png").exists()
    assert any("matplotlib" in n for n in rep.data["notes"])


def test_report_from_state_dict_and_json_file(tmp_path):
    acc = accountant()
    state = dict(acc.state_dict())
    a = privacy_report(state, deltas=(1e-5,))
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    b = privacy_report(str(path), deltas=(1e-5,))
    assert a.data["epsilon"] == b.data["epsilon"]
    assert b.data["source"] == {"kind": "state_dict", "path": str(path)}
    check_content(a.data, acc, [1e-5])
    # a BudgetTracker checkpoint holds the accountant's state under "accountant"
    tracker_state = tmp_path / "tracker.json"
    tracker = BudgetTracker(acc, 1e-5, sinks=[])
    tracker_state.write_text(json.dumps(tracker.state_dict()))
    c = privacy_report(str(tracker_state), deltas=(1e-5,))
    assert c.data["epsilon"] == a.data["epsilon"]


def test_report_from_tracker_log_every_step_is_exact(tmp_path):
    log = tmp_path / "budget.jsonl"
    acc = PrivacyBucketsAccountant()
    with BudgetTracker(acc, 1e-5, every_n_steps=1, every_epoch=False,
                       sinks=[JSONLinesSink(log)]) as tracker:
        for sigma, q, steps in [(1.0, 0.05, 6), (1.5, 0.05, 4)]:
            for _ in range(steps):
                acc.step(noise_multiplier=sigma, sample_rate=q)
                tracker.on_step()
    rep = privacy_report(str(log), deltas=(1e-6,))
    rebuilt, info, _ = load_source(str(log))
    assert rebuilt.history == acc.history
    assert info["kind"] == "tracker_log" and info["records"] == 10
    # the log's own delta joins the table; the recomputed bound equals the recorded one
    assert [r["delta"] for r in rep.data["epsilon"]] == [1e-5, 1e-6]
    last = json.loads(log.read_text().splitlines()[-1])
    assert rep.data["epsilon"][0]["upper"] == last["eps_upper"]
    assert not any("approximation" in n or "rebuilt history gives" in n for n in rep.data["notes"])
    assert rep.data["certified"] is True and "the upper bound is the guarantee" in rep.markdown


def test_report_from_sparse_tracker_log_says_it_is_approximate(tmp_path):
    log = tmp_path / "budget.jsonl"
    acc = PrivacyBucketsAccountant()
    with BudgetTracker(acc, 1e-5, every_n_steps=5, every_epoch=False,
                       sinks=[JSONLinesSink(log)]) as tracker:
        for i in range(10):
            acc.step(noise_multiplier=1.0 if i < 7 else 2.0, sample_rate=0.05)
            tracker.on_step()
    rep = privacy_report(str(log), deltas=(1e-5,))
    assert any("approximation" in n for n in rep.data["notes"])
    assert any("rebuilt history gives" in n for n in rep.data["notes"])


def test_report_from_sparse_tracker_log_is_not_labelled_certified(tmp_path, capsys):
    # the noise multiplier is 0.6 for 99 steps in each 100 and 5.0 at the logged step:
    # the rebuilt history (all 5.0) gives epsilon 30x too low
    log = tmp_path / "run.jsonl"
    acc = PrivacyBucketsAccountant()
    with BudgetTracker(acc, 1e-5, every_n_steps=100, every_epoch=False,
                       sinks=[JSONLinesSink(log)]) as tracker:
        for i in range(200):
            acc.step(noise_multiplier=0.6 if i % 100 < 99 else 5.0, sample_rate=0.05)
            tracker.on_step()
    rep = privacy_report(str(log), deltas=(1e-5, 1e-6, 1e-4))
    assert rep.data["certified"] is False
    assert "the upper bound is the guarantee" not in rep.markdown
    assert "approximation from the log" in rep.markdown
    assert "### Certified" not in rep.markdown
    for row in rep.data["epsilon"]:
        true = acc.get_epsilon_bounds(row["delta"])
        # never below the logged certified eps_upper; certified where the log's delta covers it
        assert row["upper"] >= 15.0 and row["lower"] <= row["upper"]
        assert row["upper_certified"] == (row["delta"] >= 1e-5)
        assert row["lower_certified"] == (row["delta"] <= 1e-5)
        if row["upper_certified"]:
            assert row["upper"] >= true.upper
        if row["lower_certified"]:
            assert row["lower"] <= true.lower
    row = rep.data["epsilon"][1]
    assert row["delta"] == 1e-5 and row["upper"] == acc.get_epsilon_bounds(1e-5).upper
    assert "| 1e-06 | 15.39 | ≈ " in rep.markdown       # not certified: marked
    # the command line prints the same report
    status, out, err = cli(capsys, "report", log, "--delta", "1e-5")
    assert status == 0 and "the upper bound is the guarantee" not in out
    assert "approximation from the log" in out and "| 1e-05 | 15.39 | 15.4 |" in out


def test_tracker_log_of_several_runs_uses_the_last(tmp_path):
    log = tmp_path / "budget.jsonl"
    lines = [{"step": s, "epoch": 0, "delta": 1e-5, "eps_lower": 0.1, "eps_upper": 0.2,
              "noise_multiplier": 1.0, "sample_rate": 0.1, "event": "step", "time": 0.0}
             for s in (1, 2, 3, 1, 2)]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    acc, info, _ = load_source(str(log))
    assert acc.history == [(1.0, 0.1, 2)] and info["records"] == 2


@pytest.mark.parametrize("bad,match", [
    (42, "source must be"),
    ({"mechanism": "pb"}, "history"),
    ({"history": [(1.0, 2.0, 3)], "mechanism": "pb"}, "sample_rate"),
    ({"history": [], "mechanism": "pb", "assumptions": {"sampler": "shuffle"}}, "shuffle"),
])
def test_bad_sources_raise_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        privacy_report(bad)


def test_bad_files_and_arguments(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        privacy_report(str(tmp_path / "missing.json"))
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1"):
        privacy_report(str(junk))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        privacy_report(str(empty))
    with pytest.raises(ValueError, match="deltas"):
        privacy_report(accountant(), deltas=(0.0,))
    with pytest.raises(ValueError, match="fpr"):
        privacy_report(accountant(), fpr=(2.0,))
    with pytest.raises(ValueError, match="does not exist"):
        privacy_report(accountant(), str(tmp_path / "no" / "such" / "dir" / "r"))


# -- the command line ----------------------------------------------------------------
def cli(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_risk_text_and_json(capsys):
    status, out, err = cli(capsys, "risk", "--sigma", 1.1, "--sample-rate", 0.01,
                           "--steps", 200)
    assert status == 0, err
    assert "tpr_upper" in out and "Gaussian DP" in out
    status, out, err = cli(capsys, "risk", "--sigma", 1.1, "--sample-rate", 0.01, "--steps", 200,
                           "--fpr", "1e-4", "0.05", "--json")
    assert status == 0, err
    data = json.loads(out)
    acc = accountant([(1.1, 0.01, 200)])
    lo, up = acc.get_tpr_bounds(np.array([1e-4, 0.05]))
    assert [r["fpr"] for r in data["results"]] == [1e-4, 0.05]
    assert [r["tpr_upper"] for r in data["results"]] == list(up)
    assert [r["tpr_lower"] for r in data["results"]] == list(lo)
    assert data["gdp_mu"]["lower"] <= data["gdp_mu"]["upper"]


def test_cli_risk_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "risk.png"
    status, out, err = cli(capsys, "risk", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 20,
                           "--png", png)
    assert status == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and str(png) in out


@pytest.mark.parametrize("argv,match", [
    (("--fpr", "0"), "--fpr"),
    (("--fpr", "1.5"), "--fpr"),
    (("--fpr", "x"), "--fpr"),
])
def test_cli_risk_bad_values(capsys, argv, match):
    status, out, err = cli(capsys, "risk", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 20,
                           *argv)
    assert status == 2 and match in err and out == ""


def test_cli_report(capsys, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(dict(accountant([(1.0, 0.05, 40)]).state_dict())))
    status, out, err = cli(capsys, "report", state, "--delta", "1e-5")
    assert status == 0, err
    assert out.startswith("## Differential privacy") and "| 1e-05 |" in out
    status, out, err = cli(capsys, "report", state, "--delta", "1e-5", "--out",
                           tmp_path / "card", "--no-plot", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert set(data["files"]) == {"md", "json"}
    assert (tmp_path / "card.md").exists() and not (tmp_path / "card.png").exists()
    assert data["report"]["epsilon"][0]["delta"] == 1e-5
    status, out, err = cli(capsys, "report", tmp_path / "missing.json")
    assert status == 2 and "cannot read" in err
    status, out, err = cli(capsys, "report", state, "--delta", "2")
    assert status == 2 and "--delta" in err


def test_non_finite_values_in_json(tmp_path):
    """A history whose epsilon cannot be certified at a tiny delta: inf is written as the
    string "inf" (valid JSON), never NaN."""
    acc = accountant([(0.0, 0.5, 1)])          # no noise: distinguishing mass 0.5
    rep = privacy_report(acc, str(tmp_path / "r"), deltas=(1e-5,), plot=False)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["epsilon"][0]["upper"] == "inf"
    assert rep.data["attack_risk"]["gdp_mu"]["upper"] == "inf"
    assert "∞" in rep.markdown
    assert math.isinf(acc.get_epsilon(1e-5))


def test_readme_attack_risk_example_runs(capsys, tmp_path, monkeypatch):
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
                 if "get_tpr_bounds" in b)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "## Differential privacy" in out
    lo, up = namespace["accountant"].get_tpr_bounds(0.01)
    assert 0.01 < lo <= up < 0.05


def test_report_from_the_dp_accounting_adapter():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as de
    from pb_accountant.dp_accounting_adapter import PrivacyBucketsDpAccountant
    acc = PrivacyBucketsDpAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE).compose(
        de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.05, de.LaplaceDpEvent(2.0)), 20))
    rep = privacy_report(acc, deltas=(1e-5,))
    assert rep.data["source"] == {"kind": "dp_accounting_adapter"}
    assert rep.data["assumptions"]["neighbouring"] == "add_remove"
    assert rep.data["history"]["steps"] == 20
    b = acc.get_epsilon_bounds(1e-5)
    assert (rep.data["epsilon"][0]["lower"], rep.data["epsilon"][0]["upper"]) == (b.lower, b.upper)
    assert "LaplaceDpEvent" in rep.markdown


# -- malformed tracker logs and state files: a ValueError (CLI: exit 2, one line) naming
# the file, the line and the field, never an internal error ----------------------------
GOOD_RECORD = {"step": 1, "epoch": 0, "delta": 1e-5, "eps_lower": 0.1, "eps_upper": 0.5,
               "noise_multiplier": 1.0, "sample_rate": 0.01, "event": "step", "time": 0.0,
               "sampler": "poisson", "neighbouring": "add_remove", "loader_sampler": None,
               "loader_eps_lower": None, "loader_eps_upper": None,
               "loader_neighbouring": None}
NAN, INF = float("nan"), float("inf")


def write_log(path, second):
    """A log whose second line is ``second`` (a record's changes, or a raw line)."""
    line = second if isinstance(second, str) else json.dumps({**GOOD_RECORD, "step": 2,
                                                              **second})
    path.write_text(json.dumps(GOOD_RECORD) + "\n" + line + "\n")
    return path


@pytest.mark.parametrize("second,field", [
    ({"step": None}, "step"), ({"step": -1}, "step"), ({"step": 1.5}, "step"),
    ({"step": True}, "step"), ({"step": "3"}, "step"), ({"step": INF}, "step"),
    ({"step": [2]}, "step"), ({"step": 10 ** 30}, "step"),
    ({"eps_upper": NAN}, "eps_upper"), ({"eps_upper": "nan"}, "eps_upper"),
    ({"eps_upper": -INF}, "eps_upper"), ({"eps_upper": None}, "eps_upper"),
    ({"eps_lower": "nan"}, "eps_lower"), ({"eps_lower": 2.0, "eps_upper": 1.0}, "eps_lower"),
    ({"delta": [1e-5]}, "delta"), ({"delta": NAN}, "delta"), ({"delta": 0}, "delta"),
    ({"noise_multiplier": {"a": 1}}, "noise_multiplier"),
    ({"noise_multiplier": True}, "noise_multiplier"), ({"noise_multiplier": None}, "noise_multiplier"),
    ({"sample_rate": [0.1]}, "sample_rate"), ({"sample_rate": "0.1"}, "sample_rate"),
    ({"sampler": 5}, "sampler"), ({"neighbouring": None}, "neighbouring"),
    ({"epoch": -1}, "epoch"), ({"event": 3}, "event"), ({"time": NAN}, "time"),
    ({"loader_eps_upper": "x"}, "loader_eps_upper"), ({"loader_sampler": 1}, "loader_sampler"),
    ("{oops", "not JSON"), ("[1, 2]", "not a budget record"), ("null", "not a budget record"),
    ('{"eps_upper": 0.5}', "'step' is missing"),
])
def test_malformed_tracker_log_is_a_user_error(tmp_path, capsys, second, field):
    log = write_log(tmp_path / "run.jsonl", second)
    with pytest.raises(ValueError, match=f"run.jsonl: line 2.*{field}"):
        load_source(str(log))
    status, out, err = cli(capsys, "report", log)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "internal error" not in err
    assert f"{log}: line 2" in err and field in err
    assert err.count(str(log)) == 1                  # the file named once, not twice


def test_a_malformed_record_of_an_earlier_run_is_an_error_too(tmp_path):
    log = tmp_path / "run.jsonl"
    first = dict(GOOD_RECORD, step=10 ** 30)          # was taken as a run that restarted
    log.write_text(json.dumps(first) + "\n" + json.dumps(GOOD_RECORD) + "\n")
    with pytest.raises(ValueError, match="line 1: step must be an integer"):
        load_source(str(log))


def test_the_logged_non_finite_epsilon_is_accepted(tmp_path):
    """JSONLinesSink writes an uncertifiable epsilon as "inf": a valid record."""
    log = write_log(tmp_path / "run.jsonl", {"eps_lower": "inf", "eps_upper": "inf"})
    acc, info, _ = load_source(str(log))
    assert acc.history == [(1.0, 0.01, 2)] and info["records"] == 2 and info["exact"]


def test_samplers_the_tracker_may_name_are_accepted(tmp_path):
    """A loader the tracker could not recognise is logged as "unknown" (another
    accountant may name its own sampler): valid, and an approximation when not poisson."""
    log = write_log(tmp_path / "run.jsonl", {"loader_sampler": "unknown",
                                             "loader_eps_lower": 0.0, "loader_eps_upper": "inf"})
    assert load_source(str(log))[1]["exact"]
    log = write_log(tmp_path / "run.jsonl", {"sampler": "sequential"})
    assert not load_source(str(log))[1]["exact"]


@pytest.mark.parametrize("change,field", [
    ({"options": 5}, "state_dict['options']"), ({"options": "x"}, "state_dict['options']"),
    ({"options": [1]}, "state_dict['options']"), ({"assumptions": 5}, "state_dict['assumptions']"),
    ({"assumptions": [1]}, "state_dict['assumptions']"),
    ({"assumptions": {"samplr": "poisson"}}, "state_dict['assumptions']"),
])
@pytest.mark.parametrize("tracker", [False, True])
def test_malformed_state_file_is_a_user_error(tmp_path, capsys, change, field, tracker):
    state = dict(accountant([(1.0, 0.05, 3)]).state_dict(), **change)
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"accountant": state} if tracker else state))
    with pytest.raises(ValueError, match=re.escape(field)):
        load_source(str(path))
    status, out, err = cli(capsys, "report", path)
    assert status == 2 and err.count("\n") == 1 and field in err and "internal" not in err


def test_a_file_that_is_not_text_is_a_user_error(tmp_path, capsys):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x80\x81\xff\x00")
    status, out, err = cli(capsys, "report", path)
    assert status == 2 and "not UTF-8 text" in err and err.count("\n") == 1


def test_the_training_line_shows_the_settings_not_rounded_ranges():
    """A constant noise multiplier 1.1 and sample rate 0.01 were shown as the ranges
    "1.1–1.101" and "0.01–0.01001" (the settings rounded as if they were bounds)."""
    md = privacy_report(accountant([(1.1, 0.01, 50)]), plot=False).markdown
    assert "50 steps in 1 segment(s); noise multiplier 1.1, sample rate 0.01\n" in md
    md = privacy_report(accountant([(1.1, 0.01, 50), (0.8, 1 / 3, 5)]), plot=False).markdown
    assert "noise multiplier 0.8–1.1, sample rate 0.01–0.333333\n" in md


def test_the_delta_and_fpr_of_a_row_are_printed_as_given():
    """Bounds at delta 1.0000004e-5 were printed on a row "1e-05"."""
    rep = privacy_report(accountant(), deltas=[1.0000004e-5, 1e-5], fpr=[1 / 3], plot=False)
    assert "| 1.0000004e-05 | " in rep.markdown and "| 1e-05 | " in rep.markdown
    assert "| 0.3333333333333333 | " in rep.markdown


def test_the_plot_link_works_for_a_name_with_spaces(tmp_path):
    """![...](out ü.png) is not a Markdown image (a space ends the destination)."""
    pytest.importorskip("matplotlib")
    rep = privacy_report(accountant(), tmp_path / "model card ü")
    assert "![privacy curve and trade-off band](<model card ü.png>)" in rep.markdown
    assert (tmp_path / "model card ü.png").exists()
    rep = privacy_report(accountant(), tmp_path / "card")
    assert "![privacy curve and trade-off band](card.png)" in rep.markdown


def test_the_report_never_overwrites_its_source(tmp_path, capsys):
    """`report run.json --out run` replaced the saved accountant state by the report."""
    state = tmp_path / "run.json"
    text = json.dumps(dict(accountant([(1.0, 0.05, 40)]).state_dict()))
    state.write_text(text)
    with pytest.raises(ValueError, match="is the source"):
        privacy_report(str(state), str(tmp_path / "run"), plot=False)
    status, out, err = main_status(capsys, "report", state, "--out", tmp_path / "run",
                                   "--no-plot")
    assert status == 2 and out == "" and "--out" in err and err.count("\n") == 1
    assert state.read_text() == text and not (tmp_path / "run.md").exists()
    log = tmp_path / "log.md"                   # a source with the .md name too
    log.write_text(text)
    with pytest.raises(ValueError, match="is the source"):
        privacy_report(log, tmp_path / "log", plot=False)
    assert log.read_text() == text
    privacy_report(str(state), str(tmp_path / "card"), plot=False)     # elsewhere: fine
    assert json.loads(state.read_text()) == json.loads(text)


def main_status(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_source_file_with_a_byte_order_mark(tmp_path):
    """A state saved by a tool that writes a UTF-8 BOM was "line 1 is not JSON"."""
    acc = accountant([(1.0, 0.05, 40)])
    path = tmp_path / "state.json"
    path.write_text("\ufeff" + json.dumps(dict(acc.state_dict())), encoding="utf-8")
    got, info, _ = load_source(path)
    assert info["kind"] == "state_dict" and got.history == acc.history


def _logged_run(path, **sampling):
    acc = PrivacyBucketsAccountant(**sampling)
    with BudgetTracker(acc, 1e-5, every_n_steps=1, every_epoch=False,
                       sinks=[JSONLinesSink(path)]) as tracker:
        for _ in range(20):
            acc.step(noise_multiplier=1.0, sample_rate=0.01)
            tracker.on_step()
    return acc, tracker


def test_a_log_of_another_sampler_is_reported_under_it(tmp_path):
    """A fixed_size / replace_one run's log was reported as "Sampler: poisson;
    neighbouring relation: add_remove" (with the logged fixed_size bounds in its table)
    and "the tracker log lacks a record for every step" (it has every step)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc, tracker = _logged_run(tmp_path / "fx.jsonl", sampler="fixed_size",
                                   neighbouring="replace_one", dataset_size=1000,
                                   batch_size=10)
    rep = privacy_report(str(tmp_path / "fx.jsonl"), deltas=(1e-5,), plot=False)
    assert rep.data["certified"] is False
    assert rep.data["assumptions"] == {"sampler": "fixed_size", "neighbouring": "replace_one"}
    assert "**Sampler:** fixed_size; **neighbouring relation:** replace_one" in rep.markdown
    assert "poisson" not in rep.markdown.split("### Method")[0].split("rebuilt history")[0]
    assert "lacks a record for every step" not in rep.markdown
    assert "approximation from the log" in rep.markdown
    (row,) = rep.data["epsilon"]
    assert (row["lower"], row["upper"]) == (tracker.last.eps_lower, tracker.last.eps_upper)


def test_a_poisson_replace_one_log_is_rebuilt_exactly(tmp_path):
    """Poisson with replace_one needs no sizes: the log rebuilds the run, bitwise (it was
    rebuilt under add/remove and labelled approximate)."""
    acc, tracker = _logged_run(tmp_path / "r1.jsonl", neighbouring="replace_one")
    rep = privacy_report(str(tmp_path / "r1.jsonl"), deltas=(1e-5, 1e-6), plot=False)
    assert rep.data["certified"] is True and "### Certified" in rep.markdown
    assert rep.data["assumptions"]["neighbouring"] == "replace_one"
    for row in rep.data["epsilon"]:
        b = acc.get_epsilon_bounds(row["delta"])
        assert (row["lower"], row["upper"]) == (b.lower, b.upper)
    assert rep.data["epsilon"][0]["upper"] == tracker.last.eps_upper


def test_a_log_whose_loader_was_shuffled_says_so_on_the_card(tmp_path):
    """The tracker logged that a shuffled DataLoader fed training (its Poisson bounds not
    certified for it, the loader's bracket beside them); the card said only "Sampler:
    poisson" and "Certified", dropping that."""
    import warnings
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    log = tmp_path / "run.jsonl"
    loader = DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=8, shuffle=True)
    acc = PrivacyBucketsAccountant()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with BudgetTracker(acc, 1e-5, every_n_steps=1, every_epoch=False,
                           sinks=[JSONLinesSink(log)]) as tracker:
            tracker.check_loader(loader, noise_multiplier=1.0, sample_rate=0.125)
            for _ in range(16):
                acc.step(noise_multiplier=1.0, sample_rate=0.125)
                tracker.on_step()
    last = tracker.last
    assert last.loader_sampler == "shuffle" and last.loader_eps_upper is not None
    rep = privacy_report(str(log), deltas=(1e-5,), plot=False)
    m = rep.data["loader_mismatch"]
    assert m["loader_sampler"] == "shuffle" and m["eps_upper"] == last.loader_eps_upper
    warning = [l for l in rep.markdown.splitlines() if l.startswith("- **Warning:**")]
    assert len(warning) == 1 and "samples by shuffle" in warning[0]
    assert "not certified for it" in warning[0] and "at delta=1e-05 after 16 steps" in warning[0]
    json.dumps(rep.data, allow_nan=False)
    # a log without a loader (or a matching one) has no such line
    rep = privacy_report(str(write_log(tmp_path / "plain.jsonl", {})), plot=False)
    assert "loader_mismatch" not in rep.data and "**Warning:**" not in rep.markdown
