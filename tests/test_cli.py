"""The pb-accountant command line: in-process through ``main([...])`` where possible,
and for real (``python -m pb_accountant.integrations.cli ...``) where the process matters."""
import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pb_accountant import PrivacyBucketsAccountant

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5


def _env():
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    return dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg")


def run(*argv, cwd=None, check=True):
    proc = subprocess.run([sys.executable, "-m", "pb_accountant.integrations.cli", *map(str, argv)],
                          capture_output=True, text=True, env=_env(), cwd=cwd or ROOT,
                          timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    return proc


def run_json(*argv):
    return json.loads(run(*argv, "--json").stdout)


def cli(capsys, *argv):
    """(status, stdout, stderr) of ``main(argv)`` in this process."""
    from pb_accountant.integrations.cli import main
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def cli_json(capsys, *argv):
    status, out, err = cli(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)


def bounds(history, delta=DELTA):
    acc = PrivacyBucketsAccountant()
    acc.history = history
    return acc.get_epsilon_bounds(delta)


# ------------------------------------------------------------------------------------
# epsilon
# ------------------------------------------------------------------------------------

def test_epsilon_text_table_rounds_outward(capsys):
    status, out, err = cli(capsys, "epsilon", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--delta", DELTA)
    assert status == 0 and err == ""
    b = bounds([(1.0, 0.05, 60)])
    lines = out.splitlines()
    assert lines[0] == "DP-SGD (Poisson-subsampled Gaussian), 60 steps, delta = 1e-05"
    header = next(i for i, l in enumerate(lines) if "eps_lower" in l)
    assert lines[header].split() == ["eps_lower", "eps_upper", "rel_width"]
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    lo_txt, up_txt, width = lines[header + 2].split()
    assert float(lo_txt) <= b.lower and float(up_txt) >= b.upper          # still bounds
    assert float(lo_txt) == pytest.approx(b.lower, rel=1e-5)
    assert float(up_txt) == pytest.approx(b.upper, rel=1e-5)
    assert width.endswith("%")
    assert f"certified: {lo_txt} <= epsilon <= {up_txt} at delta = 1e-05" in out
    # columns are aligned: every row of the schedule table has the header's width
    sched = [l for l in lines if l.strip().startswith(("segment", "1 ", "-------"))][:3]
    assert len({len(l) for l in sched}) == 1


def test_epsilon_json_epochs_and_segments(capsys):
    data = cli_json(capsys, "epsilon", "--sigma", 1.0, "--sample-rate", 0.05, "--epochs", 3,
                    "--delta", DELTA)
    assert data["steps"] == 60 and data["schedule"] == [
        {"noise_multiplier": 1.0, "sample_rate": 0.05, "steps": 60}]
    assert data["notes"][0] == "3 epochs / sample rate 0.05 = 60 steps"
    b = bounds([(1.0, 0.05, 60)])
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)
    seg = cli_json(capsys, "epsilon", "--segment", "1.0,0.05,40", "--segment", "0.8,0.1,10",
                   "--delta", DELTA)
    b2 = bounds([(1.0, 0.05, 40), (0.8, 0.1, 10)])
    assert seg["steps"] == 50 and len(seg["schedule"]) == 2
    assert (seg["eps_lower"], seg["eps_upper"]) == (b2.lower, b2.upper)
    assert 0 < seg["eps_lower"] <= seg["eps_upper"]


# ------------------------------------------------------------------------------------
# the user's terms: batch and dataset size, fractions, fractional epochs, schedule files
# ------------------------------------------------------------------------------------

def test_batch_size_and_dataset_size_give_the_sample_rate(capsys):
    data = cli_json(capsys, "epsilon", "--sigma", 1.1, "--batch-size", 256,
                    "--dataset-size", 50000, "--steps", 30, "--delta", DELTA)
    assert data["schedule"][0]["sample_rate"] == 256 / 50000
    assert "256/50000" in data["notes"][0]
    same = cli_json(capsys, "epsilon", "--sigma", 1.1, "--sample-rate", "256/50000",
                    "--steps", 30, "--delta", DELTA)
    assert same["schedule"] == data["schedule"]
    assert (same["eps_lower"], same["eps_upper"]) == (data["eps_lower"], data["eps_upper"])
    b = bounds([(1.1, 256 / 50000, 30)])
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)


def test_fractional_epochs_round_up_and_say_so(capsys):
    # 2.5 epochs at q = 256/50000: 2.5 * 50000 / 256 = 488.28... -> 489 steps (as TF Privacy)
    data = cli_json(capsys, "epsilon", "--sigma", 1.1, "--batch-size", 256,
                    "--dataset-size", 50000, "--epochs", 2.5, "--delta", DELTA)
    assert data["steps"] == 489
    note = data["notes"][1]
    assert "488.281 steps, rounded up to 489" in note
    # an exact quotient is not rounded (fractions are exact: 0.01 is 1/100)
    exact = cli_json(capsys, "epsilon", "--sigma", 1.1, "--sample-rate", 0.01,
                     "--epochs", 0.5, "--delta", DELTA)
    assert exact["steps"] == 50 and exact["notes"] == ["0.5 epochs / sample rate 0.01 = 50 steps"]


def test_noise_takes_the_users_terms_too(capsys):
    data = cli_json(capsys, "noise", "--target-epsilon", 4, "--batch-size", 500,
                    "--dataset-size", 10000, "--epochs", 1.5, "--delta", DELTA, "--tol", 0.05)
    assert data["steps"] == 30 and data["sample_rate"] == 0.05 and data["certified"]


@pytest.mark.parametrize("fmt", ["csv", "json", "json-object"])
def test_schedule_files(capsys, tmp_path, fmt):
    rows = [(1.0, 0.05, 40), (0.8, 0.1, 10)]
    if fmt == "csv":
        path = tmp_path / "phases.csv"
        path.write_text("noise_multiplier,sample_rate,steps\n1.0,0.05,40\n0.8,1/10,10\n\n")
    else:
        segs = [{"noise_multiplier": s, "sample_rate": q, "steps": t} for s, q, t in rows]
        path = tmp_path / "phases.json"
        path.write_text(json.dumps(segs if fmt == "json" else {"segments": segs}))
    data = cli_json(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    assert data["schedule"] == [{"noise_multiplier": s, "sample_rate": q, "steps": t}
                                for s, q, t in rows]
    b = bounds(rows)
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)


SCHEDULE_ERRORS = [
    ("bad.csv", "sigma,q,steps\n1,0.1,3\n", "CSV needs a header"),
    ("bad.csv", "noise_multiplier,sample_rate,steps\n1,1.5,3\n",
     "line 2 sample rate must be in [0, 1]"),
    ("bad.csv", "noise_multiplier,sample_rate,steps\n1,0.1,2.5\n", "line 2 steps must be an integer"),
    ("bad.json", "[{\"noise_multiplier\": 1, \"steps\": 3}]", "segment 1: needs"),
    ("bad.json", "[1, 2", "not valid JSON"),
    ("bad.json", "{\"x\": 1}", "must be a list of segments"),
    ("empty.csv", "noise_multiplier,sample_rate,steps\n", "no segments"),
]


@pytest.mark.parametrize("name,text,needle", SCHEDULE_ERRORS)
def test_schedule_file_errors_name_the_file_and_row(capsys, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    status, out, err = cli(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and f"--schedule {path}" in err and needle in err, err


@pytest.mark.parametrize("name,text", [
    ("excel.csv", "\ufeffnoise_multiplier,sample_rate,steps\n1.0,0.05,40\n0.8,1/10,10\n"),
    ("bom.json", "\ufeff" + json.dumps([{"noise_multiplier": 1.0, "sample_rate": 0.05,
                                          "steps": 40},
                                         {"noise_multiplier": 0.8, "sample_rate": 0.1,
                                          "steps": 10}])),
])
def test_schedule_file_with_a_byte_order_mark(capsys, tmp_path, name, text):
    """A spreadsheet's "CSV UTF-8" (and some editors' JSON) starts with a BOM: it was
    read as part of the first column's name, "CSV needs a header ..." (exit 2)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    data = cli_json(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    b = bounds([(1.0, 0.05, 40), (0.8, 0.1, 10)])
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)


def test_schedule_file_not_utf8_is_a_user_error(capsys, tmp_path):
    """A Latin-1 or binary file was an internal error (UnicodeDecodeError, exit 1)."""
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"noise_multiplier,sample_rate,steps\n1.0,0.05,40 \xe9\n")
    status, out, err = cli(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert f"--schedule {path}" in err and "not UTF-8" in err and "internal" not in err


@pytest.mark.parametrize("header", ["noise_multiplier,sample_rate,steps",
                                    "noise_multiplier,sample_rate,steps,"])
@pytest.mark.parametrize("row", ["1.1,0.01,1,000", "1.1,0.01,100,7", "1.1,0.01,100,,x"])
def test_schedule_csv_row_with_more_values_than_columns(capsys, tmp_path, row, header):
    """"1,000" steps was read as 1 step (the extra value was dropped without a word)."""
    path = tmp_path / "phases.csv"
    path.write_text(f"{header}\n{row}\n")
    status, out, err = cli(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert f"--schedule {path}: line 2: more values than the header names" in err, err
    # a trailing comma (an empty last cell) is still fine
    path.write_text("noise_multiplier,sample_rate,steps\n1.0,0.05,40,\n")
    data = cli_json(capsys, "epsilon", "--schedule", path, "--delta", DELTA)
    assert data["steps"] == 40


def test_schedule_file_missing(capsys, tmp_path):
    status, _out, err = cli(capsys, "epsilon", "--schedule", tmp_path / "nope.csv",
                            "--delta", DELTA)
    assert status == 2 and "cannot read" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------
# delta
# ------------------------------------------------------------------------------------

def test_delta_bounds_table_and_json(capsys):
    argv = ("delta", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
            "--epsilon", 0.5, 1, 2, 4)
    data = cli_json(capsys, *argv)
    res = data["results"]
    assert [r["epsilon"] for r in res] == [0.5, 1.0, 2.0, 4.0]
    for r in res:
        assert 0.0 <= r["delta_lower"] <= r["delta_upper"] <= 1.0
    uppers = [r["delta_upper"] for r in res]
    assert uppers == sorted(uppers, reverse=True)
    # consistent with the epsilon command: delta_upper at eps_upper(1e-5) is <= 1e-5 ...
    b = bounds([(1.0, 0.05, 60)])
    at = cli_json(capsys, "delta", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
                  "--epsilon", repr(b.upper), repr(b.lower))["results"]
    # (the delta command composes on its own grid, so agreement is up to its precision)
    assert at[0]["delta_upper"] <= DELTA * (1 + 1e-3)
    # ... and delta_lower at eps_lower is about 1e-5 (both certified)
    assert at[1]["delta_lower"] >= DELTA * (1 - 1e-3)
    status, text, _ = cli(capsys, *argv)
    rows = [l.split() for l in text.splitlines() if l.strip()[:1].isdigit()]
    assert [row[0] for row in rows[-4:]] == ["0.5", "1", "2", "4"]


def test_the_argument_of_a_bound_is_printed_as_given(capsys):
    """The bounds at epsilon 1.0000004 were printed on a row "1": two rows "1" with
    different bounds, the first's delta_upper (0.000767448) below the certified upper
    bound at 1 (0.000767451).  Likewise delta in `epsilon`, fpr in `risk`."""
    common = ("--sigma", 1.1, "--sample-rate", 0.01, "--steps", 1000)
    status, text, _ = cli(capsys, "delta", *common, "--epsilon", "1.0000004", "1", "-0")
    rows = [l.split() for l in text.splitlines() if l.strip()[:1].isdigit()]
    assert [row[0] for row in rows[-3:]] == ["1.0000004", "1", "0"]
    status, text, _ = cli(capsys, "epsilon", *common, "--delta", "1.0000004e-5")
    assert "at delta = 1.0000004e-05 (" in text and "delta = 1e-05" not in text
    status, text, _ = cli(capsys, "risk", *common, "--fpr", "1/3")
    assert "0.3333333333333333" in text
    status, text, _ = cli(capsys, "noise", "--target-epsilon", "2.0000001", "--sample-rate",
                          0.05, "--steps", 20, "--delta", DELTA, "--tol", 0.1)
    assert "epsilon <= 2.0000001 at delta = 1e-05" in text


def test_delta_beyond_the_engine_is_a_valid_looser_answer(capsys):
    """A schedule the grid cannot hold: delta_upper = 1 (trivially valid), said plainly."""
    status, out, err = cli(capsys, "delta", "--sigma", 0.01, "--sample-rate", 0.5,
                           "--steps", 1000, "--epsilon", 1, "--json")
    assert status == 0 and "Traceback" not in err and "Warning" not in err
    data = json.loads(out)
    r = data["results"][0]
    assert 0.0 <= r["delta_lower"] <= r["delta_upper"] <= 1.0
    assert r["delta_upper"] == 1.0
    assert any("cannot be certified" in n for n in data["notes"])
    assert not any("factor or fewer buckets" in n for n in data["notes"])


# ------------------------------------------------------------------------------------
# noise
# ------------------------------------------------------------------------------------

def test_noise_finds_the_smallest_certified_sigma():
    proc = run("noise", "--target-epsilon", 2.0, "--sample-rate", 0.05, "--steps", 60,
               "--delta", DELTA, "--tol", "2e-3", "--progress", "--progress-delay", 0,
               "--json")
    data = json.loads(proc.stdout)
    sigma, rejected = data["noise_multiplier"], data["rejected_noise_multiplier"]
    assert data["certified"] and data["reason"] is None
    assert rejected < sigma <= rejected * (1 + 2e-3)
    acc = PrivacyBucketsAccountant()
    ok = acc.epsilon_after(DELTA, noise_multiplier=sigma, sample_rate=0.05, num_steps=60)
    bad = acc.epsilon_after(DELTA, noise_multiplier=rejected, sample_rate=0.05, num_steps=60)
    assert ok.upper <= 2.0 < bad.upper
    assert data["eps_upper"] == ok.upper and data["eps_lower"] <= data["eps_upper"]
    assert data["evaluations"] >= 3 and "seconds" not in data     # no timings by default
    # the progress bar (forced by --progress, shown at once with a zero delay)
    assert "searching noise multiplier" in proc.stderr
    quiet = run("noise", "--target-epsilon", 2.0, "--sample-rate", 0.05, "--steps", 60,
                "--delta", DELTA, "--tol", "0.05", "--json")          # not a TTY: no bar
    assert quiet.stderr == ""


def test_progress_only_when_asked_or_on_a_terminal(capsys):
    argv = ("epsilon", "--segment", "1.1,0.01,10", "--segment", "1.2,0.01,10",
            "--delta", DELTA)
    status, out, err = cli(capsys, *argv, "--progress", "--progress-delay", 0)
    assert status == 0 and "computing the bounds ..." in err
    status, out2, err = cli(capsys, *argv)               # captured stderr: not a terminal
    assert status == 0 and err == "" and out2 == out
    status, out, err = cli(capsys, "delta", "--sigma", 1, "--sample-rate", 0.1, "--steps", 5,
                           "--epsilon", 1, "--json", "--progress", "--progress-delay", 0)
    assert status == 0 and "composing ..." in err and json.loads(out)["steps"] == 5


def test_noise_text_and_unreachable_target(capsys):
    status, text, err = cli(capsys, "noise", "--target-epsilon", 8, "--sample-rate", 0.05,
                            "--epochs", 1, "--delta", DELTA, "--tol", "0.05")
    assert status == 0 and err == ""
    assert "noise multiplier for epsilon <= 8" in text
    assert "noise_multiplier" in text and "certifies epsilon <=" in text
    assert " s)" not in text                       # deterministic: no timing unless asked
    status, out, err = cli(capsys, "noise", "--target-epsilon", 1e-6, "--sample-rate", 1,
                           "--steps", 10, "--delta", DELTA)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "cannot be certified: no noise multiplier" in err


def test_noise_tolerance_is_bounded(capsys):
    status, out, err = cli(capsys, "noise", "--target-epsilon", 2, "--sample-rate", 0.05,
                           "--steps", 20, "--delta", DELTA, "--tol", "1e-16")
    assert status == 2 and out == "" and "--tol must be in [1e-06, 0.5]" in err
    # the finest accepted tolerance terminates, in few evaluations
    data = cli_json(capsys, "noise", "--target-epsilon", 2, "--sample-rate", 0.05,
                    "--steps", 20, "--delta", DELTA, "--tol", "1e-6")
    assert data["certified"] and data["evaluations"] <= 80
    assert data["noise_multiplier"] <= data["rejected_noise_multiplier"] * (1 + 1e-6)


def test_noise_says_when_smaller_noise_cannot_be_certified(capsys):
    """A target beyond what can be certified: a certified sigma, and why not smaller."""
    data = cli_json(capsys, "noise", "--target-epsilon", 1000, "--sample-rate", 0.01,
                    "--steps", 1000, "--delta", DELTA, "--tol", "0.01")
    assert data["certified"] and data["eps_upper"] <= 1000
    acc = PrivacyBucketsAccountant()
    ok = acc.epsilon_after(DELTA, noise_multiplier=data["noise_multiplier"],
                           sample_rate=0.01, num_steps=1000)
    assert ok.upper <= 1000
    if data["reason"] is not None:                 # the engine's ceiling is still there
        assert "cannot be certified" in data["reason"]
        status, text, err = cli(capsys, "noise", "--target-epsilon", 1000, "--sample-rate",
                                0.01, "--steps", 1000, "--delta", DELTA, "--tol", "0.01")
        assert "not the smallest:" in text and "cannot be certified" in text
        assert "smallest noise multiplier" not in text


# ------------------------------------------------------------------------------------
# curve
# ------------------------------------------------------------------------------------

def _check_png(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] >= 300 and img.shape[1] >= 500
    rgb = img[..., :3]
    assert float(rgb.std()) > 0.05                       # not a blank canvas
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50   # lines, text, fill
    return img


def test_curve_writes_png_and_csv(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    data = cli_json(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
                    "--out", tmp_path / "c", "--num", 50)
    assert data["png"] == str(tmp_path / "c.png") and data["csv"] == str(tmp_path / "c.csv")
    _check_png(tmp_path / "c.png")
    with open(tmp_path / "c.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 50 and list(rows[0]) == ["epsilon", "delta_lower", "delta_upper"]
    eps = [float(r["epsilon"]) for r in rows]
    lo = [float(r["delta_lower"]) for r in rows]
    up = [float(r["delta_upper"]) for r in rows]
    assert eps[0] == 0.0 and eps[-1] == pytest.approx(data["eps_max"])
    assert all(a <= b for a, b in zip(lo, up))
    assert all(b >= c for b, c in zip(up, up[1:]))                     # decreasing in eps
    assert up[-1] <= 1e-8 * (1 + 1e-9)       # default range ends where delta_up = 1e-8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "c.png"]   # no temp left
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "c.csv").stat().st_mode & 0o777 == 0o666 & ~umask


def test_curve_png_only_writes_no_csv(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--png", "only.png", "--num", 20)
    assert status == 0 and err == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["only.png"]
    assert out.startswith("wrote only.png (20 points")


def test_curve_without_files_prints_the_points(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--num", 5)
    assert status == 0 and err == "" and list(tmp_path.iterdir()) == []
    rows = [l.split() for l in out.splitlines() if l.strip()[:1].isdigit()]
    assert len(rows[-5:]) == 5 and rows[-5][0] == "0"
    data = cli_json(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
                    "--num", 5)
    assert len(data["curve"]) == 5 and data["png"] is None and data["csv"] is None


def test_curve_num_is_bounded(capsys):
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--num", "1e9")
    assert status == 2 and out == "" and "--num must be an integer >= 2 and <= 100000" in err


@pytest.mark.parametrize("option", ["--png", "--csv"])
def test_curve_output_in_a_missing_folder_exits_2_and_writes_nothing(capsys, tmp_path,
                                                                       option):
    other = "--csv" if option == "--png" else "--png"
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, other, tmp_path / "ok.file",
                           option, tmp_path / "missing" / "x")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and option in err and "does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_curve_png_failure_leaves_no_csv(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from pb_accountant.integrations import _cli_render

    def broken(*args, **kwargs):
        def write(path):
            raise OSError(28, "No space left on device")
        return write

    monkeypatch.setattr(_cli_render, "curve_png_writer", broken)
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--csv", tmp_path / "c.csv",
                           "--png", tmp_path / "c.png", "--num", 10)
    assert status == 2 and "--png" in err and "No space left" in err
    assert list(tmp_path.iterdir()) == []


def test_curve_compare_overlays_the_peers(tmp_path):
    pytest.importorskip("opacus")
    pytest.importorskip("dp_accounting")
    pytest.importorskip("matplotlib")
    proc = run("curve", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
               "--png", tmp_path / "cmp.png", "--csv", tmp_path / "cmp.csv", "--num", 40,
               "--compare", "--compare-points", 5, "--title", "test overlay")
    assert "opacus-rdp: ok" in proc.stdout and "pld-pessimistic: ok" in proc.stdout
    _check_png(tmp_path / "cmp.png")
    with open(tmp_path / "cmp_peers.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5
    assert {"delta", "opacus-rdp_eps_upper", "opacus-prv_eps_lower", "pld-pessimistic_eps_upper",
            "pld-optimistic_eps_lower"} <= set(rows[0])
    # the certified pb lower bound is below every peer's upper bound
    for r in rows:
        pb = bounds([(1.0, 0.05, 60)], float(r["delta"]))
        for key in ("opacus-rdp_eps_upper", "opacus-prv_eps_upper", "pld-pessimistic_eps_upper"):
            assert pb.lower <= float(r[key]) * (1 + 1e-9), (key, r["delta"])


# ------------------------------------------------------------------------------------
# compare
# ------------------------------------------------------------------------------------

def test_compare_table_and_json():
    pytest.importorskip("opacus")
    pytest.importorskip("dp_accounting")
    argv = ("compare", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60, "--delta", DELTA)
    data = run_json(*argv, "--timing")
    res = {r["method"]: r for r in data["results"]}
    assert list(res) == ["pb", "opacus-rdp", "opacus-prv", "pld-pessimistic", "pld-optimistic"]
    assert all(r["available"] and r["status"] == "ok" for r in res.values())
    assert all(r["seconds"] is not None and r["seconds"] >= 0 for r in res.values())
    pb = res["pb"]
    b = bounds([(1.0, 0.05, 60)])
    assert (pb["eps_lower"], pb["eps_upper"]) == (b.lower, b.upper)
    for name in ("opacus-rdp", "opacus-prv", "pld-pessimistic"):
        assert pb["eps_lower"] <= res[name]["eps_upper"]
    assert pb["eps_upper"] <= res["opacus-rdp"]["eps_upper"]            # pb is tighter
    assert res["opacus-rdp"]["eps_lower"] is None
    assert res["pld-optimistic"]["eps_upper"] is None
    text = run(*argv, "--peers", "pld-pessimistic,pld-optimistic").stdout
    for label in ("pb-accountant (privacy buckets)", "dp_accounting PLD pessimistic",
                  "dp_accounting PLD optimistic"):
        assert label in text
    assert "Opacus" not in text
    header = next(l for l in text.splitlines() if l.strip().startswith("method"))
    assert header.split() == ["method", "eps_lower", "eps_upper", "kind"]   # no timings


def _rows(out):
    data = json.loads(out)
    return data, {r["method"]: r for r in data["results"]}


def test_compare_a_failing_peer_keeps_pbs_result(capsys):
    """An absurd schedule: a peer that runs out of memory (or time) gets a 'failed' row."""
    pytest.importorskip("dp_accounting")
    status, out, err = cli(capsys, "compare", "--segment", "1e-6,0.01,100", "--delta", DELTA,
                           "--peers", "pld-pessimistic", "--peer-timeout", 30,
                           "--peer-memory", 1, "--json")
    assert status == 0 and err == ""                   # no traceback, no warnings
    data, rows = _rows(out)
    assert rows["pb"]["status"] == "ok" and rows["pb"]["eps_lower"] > 0
    peer = rows["pld-pessimistic"]
    assert peer["status"] == "failed" and not peer["available"]
    assert peer["eps_lower"] is None and peer["eps_upper"] is None
    assert len(peer["reason"]) <= 120 and peer["reason"]
    status, text, err = cli(capsys, "compare", "--segment", "1e-6,0.01,100", "--delta", DELTA,
                            "--peers", "pld-pessimistic", "--peer-timeout", 30,
                            "--peer-memory", 1)
    assert status == 0 and "pb-accountant (privacy buckets)" in text
    assert "failed: " in text


def test_compare_peer_timeout(capsys):
    pytest.importorskip("dp_accounting")
    status, out, err = cli(capsys, "compare", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--delta", DELTA, "--peers", "pld-pessimistic",
                           "--peer-timeout", "0.01", "--json")
    assert status == 0 and err == ""
    data, rows = _rows(out)
    b = bounds([(1.0, 0.05, 60)])
    assert (rows["pb"]["eps_lower"], rows["pb"]["eps_upper"]) == (b.lower, b.upper)
    assert rows["pld-pessimistic"]["status"] == "failed"
    assert rows["pld-pessimistic"]["reason"] == "timed out after 0.01 s"


def test_peer_runner_reports_a_crash_in_one_short_line():
    from pb_accountant.integrations import peers
    r = peers.run_peer_isolated("pld-pessimistic", [(1.0, 0.05, 10)], [DELTA],
                                pld_interval="not a number")
    assert r.status in ("failed", "not installed") and r.pairs is None
    assert "\n" not in r.reason and 0 < len(r.reason) <= 120


# ------------------------------------------------------------------------------------
# errors: one line on stderr, exit 2 for the user's mistakes, 1 for ours
# ------------------------------------------------------------------------------------

ERRORS = [
    (["epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "10"], "--delta"),
    (["epsilon", "--sigma", "1", "--sample-rate", "1.5", "--steps", "10", "--delta", "1e-5"],
     "--sample-rate must be in (0, 1]"),
    (["epsilon", "--sigma", "1", "--sample-rate", "1/0", "--steps", "10", "--delta", "1e-5"],
     "--sample-rate must be a number or a fraction"),
    (["epsilon", "--sigma", "1", "--sample-rate", "abc", "--steps", "10", "--delta", "1e-5"],
     "--sample-rate must be a number or a fraction"),
    (["epsilon", "--sigma", "abc", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5"],
     "--sigma must be a number"),
    (["epsilon", "--sigma", "1e-9", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5"],
     "--sigma must be 0 or in [1e-06, 1e+12]"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10", "--delta", "0"],
     "--delta must be in (0, 1)"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--delta", "1e-5"],
     "exactly one of --steps and --epochs"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--epochs", "-2", "--delta", "1e-5"],
     "--epochs must be in (0, 1e9]"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "2.5", "--delta", "1e-5"],
     "--steps must be an integer"),
    (["epsilon", "--sigma", "1", "--batch-size", "64", "--steps", "3", "--delta", "1e-5"],
     "--dataset-size is needed too"),
    (["epsilon", "--sigma", "1", "--batch-size", "640", "--dataset-size", "64", "--steps", "3",
      "--delta", "1e-5"], "--batch-size (640) must not exceed --dataset-size (64)"),
    (["epsilon", "--sigma", "1", "--batch-size", "6.5", "--dataset-size", "64", "--steps", "3",
      "--delta", "1e-5"], "--batch-size must be an integer >= 1"),
    (["epsilon", "--sigma", "1", "--batch-size", "64", "--dataset-size", "640",
      "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"], "not both"),
    (["epsilon", "--segment", "1,0.01", "--delta", "1e-5"], "SIGMA,SAMPLE_RATE,STEPS"),
    (["epsilon", "--segment", "1,0.01,5", "--sigma", "1", "--delta", "1e-5"], "use one of"),
    (["epsilon", "--segment", "1,0.01,5", "--schedule", "x.csv", "--delta", "1e-5"],
     "use one of"),
    (["delta", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--epsilon", "-1"],
     "--epsilon must be in [0, inf)"),
    (["noise", "--target-epsilon", "0", "--sample-rate", "0.1", "--steps", "3",
      "--delta", "1e-5"], "--target-epsilon"),
    (["noise", "--target-epsilon", "1", "--sample-rate", "0.1", "--steps", "3",
      "--delta", "1e-5", "--max-evaluations", "1e6"], "--max-evaluations must be an integer"),
    (["compare", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5",
      "--peers", "nope"], "unknown peer"),
    (["compare", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5",
      "--peer-timeout", "0"], "--peer-timeout must be in (0, 3600]"),
    (["compare", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5",
      "--pld-interval", "0"], "--pld-interval must be in [1e-06, 1]"),
    (["curve", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--num", "1"],
     "--num must be an integer >= 2"),
    (["epsilon", "--sigma", "1e400", "--sample-rate", "0.1", "--steps", "3", "--delta",
      "1e-5"], "--sigma must be 0 or in [1e-06, 1e+12], got 1e400"),    # past the floats
    (["epsilon", "--sigma", "nan", "--sample-rate", "0.1", "--steps", "3", "--delta",
      "1e-5"], "--sigma must be 0 or in [1e-06, 1e+12], got nan"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
]


@pytest.mark.parametrize("argv,needle", ERRORS, ids=[" ".join(a[:1] + [n]) for a, n in ERRORS])
def test_user_errors_print_one_line(capsys, argv, needle):
    status, out, err = cli(capsys, *argv)
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pb-accountant") and "error:" in lines[0]
    assert needle in lines[0]


def test_user_error_in_a_real_process_is_one_line():
    proc = run("epsilon", "--sigma", "1", "--sample-rate", "1.5", "--steps", "10",
               "--delta", "1e-5", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("pb-accountant epsilon: error: --sample-rate must be in (0, 1], "
                           "got 1.5\n")


def test_internal_errors_exit_1_in_one_line(monkeypatch, capsys):
    """An exception inside the library is not the user's fault: exit 1, one short line."""
    def boom(self, delta):
        raise ValueError("something the library\nrejects, on two lines")

    monkeypatch.setattr(PrivacyBucketsAccountant, "get_epsilon_bounds", boom)
    argv = ["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5"]
    status, out, err = cli(capsys, *argv)
    assert status == 1 and out == ""
    assert err == ("pb-accountant epsilon: internal error: ValueError: something the library "
                   "rejects, on two lines (run with --debug for the traceback)\n")
    status, out, err = cli(capsys, *argv, "--debug")
    assert status == 1 and "Traceback" in err and "internal error: ValueError" in err


def test_no_python_warnings_or_tracebacks_reach_the_user(capsys):
    """The accountant warns (RuntimeWarning) when it cannot certify: the CLI says it in
    the user's terms, once, with no warning class, source line or traceback."""
    status, out, err = cli(capsys, "epsilon", "--sigma", 0.01, "--sample-rate", 0.5,
                           "--steps", 1000, "--delta", DELTA)
    assert status == 0
    assert err == ""
    assert "inf" in out and "cannot be certified" in out
    assert "Warning" not in out and "factor or fewer buckets" not in out


def test_a_library_warning_becomes_one_plain_line(monkeypatch, capsys):
    import warnings

    real = PrivacyBucketsAccountant.get_epsilon_bounds

    def chatty(self, delta):
        warnings.warn("something worth knowing", UserWarning)
        warnings.warn("something worth knowing", UserWarning)
        return real(self, delta)

    monkeypatch.setattr(PrivacyBucketsAccountant, "get_epsilon_bounds", chatty)
    status, out, err = cli(capsys, "epsilon", "--sigma", "1", "--sample-rate", "0.1",
                           "--steps", "3", "--delta", "1e-5")
    assert status == 0
    assert err == "pb-accountant epsilon: warning: something worth knowing\n"


def test_help_and_version():
    proc = run("--help")
    assert "epsilon" in proc.stdout and "compare" in proc.stdout
    assert run("--version").stdout.startswith("pb-accountant ")
    assert "--segment SIGMA,Q,STEPS" in run("epsilon", "--help").stdout


def test_works_without_torch_opacus_lightning_transformers(tmp_path):
    """Block the heavy packages: the command line still runs, peers say 'not installed'."""
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys
        BLOCKED = ("torch", "opacus", "pytorch_lightning", "lightning", "transformers",
                   "dp_accounting", "tensorboard")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"blocked: {{name}}")
        sys.meta_path.insert(0, Block())
        import pb_accountant.integrations
        from pb_accountant.integrations.cli import main
        assert main(["epsilon", "--sigma", "1", "--sample-rate", "0.05", "--steps", "20",
                     "--delta", "1e-5", "--json"]) == 0
        assert main(["compare", "--sigma", "1", "--sample-rate", "0.05", "--steps", "20",
                     "--delta", "1e-5", "--json"]) == 0
        import importlib.util
        plot = ("--out" if importlib.util.find_spec("matplotlib") else "--csv")
        assert main(["curve", "--sigma", "1", "--sample-rate", "0.05", "--steps", "20",
                     plot, {str(tmp_path / 'nt')!r}, "--num", "20", "--compare"]) == 0
        from pb_accountant.integrations import BudgetTracker, BudgetGuard, check_sample_rate
        loaded = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        assert not loaded, loaded
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    outputs = [json.loads(chunk) for chunk in _json_chunks(proc.stdout)]
    compare = outputs[1]
    status = {r["method"]: r for r in compare["results"]}
    assert status["pb"]["available"] and status["pb"]["eps_upper"] > 0
    for name in ("opacus-rdp", "opacus-prv", "pld-pessimistic", "pld-optimistic"):
        assert not status[name]["available"] and status[name]["status"] == "not installed"
    assert "opacus-rdp: not installed" in proc.stdout
    assert (tmp_path / "nt.png").stat().st_size > 1000


def _json_chunks(text):
    """Split concatenated pretty-printed JSON objects."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text) or text[i] != "{":
            return
        obj, i = decoder.raw_decode(text, i)
        yield json.dumps(obj)


def test_python_dash_m_integrations_works():
    proc = subprocess.run([sys.executable, "-m", "pb_accountant.integrations", "epsilon", "--sigma", "1",
                           "--sample-rate", "0.05", "--steps", "5", "--delta", "1e-5", "--json"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["steps"] == 5


def test_curve_outputs_follow_links_keep_modes_and_never_replace_special_files(
        capsys, tmp_path, monkeypatch):
    """A link's target is written (the link stays a link), an existing file keeps its
    mode, and a FIFO (or a device: same check) is refused with exit 2 and left as it is."""
    import stat
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "target.csv"
    target.write_text("old\n")
    target.chmod(0o600)
    (tmp_path / "link.csv").symlink_to(target)
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--csv", "link.csv", "--num", 3)
    assert status == 0, err
    assert (tmp_path / "link.csv").is_symlink()
    assert target.read_text().startswith("epsilon,delta_lower,delta_upper")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    status, out, err = cli(capsys, "curve", "--sigma", 1.0, "--sample-rate", 0.05,
                           "--steps", 60, "--csv", "fifo.csv", "--num", 3)
    assert status == 2 and "not a regular file" in err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("argv,needle", [
    (("epsilon", "--sigma", "1", "--sample-rate", "1e400", "--steps", "10", "--delta", DELTA),
     "--sample-rate must be"),
    (("epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "10", "--delta",
      "1e400"), "--delta must be"),
    (("epsilon", "--segment", "1.0,1e400,10", "--delta", DELTA), "--segment sample rate"),
    (("risk", "--sigma", "1", "--sample-rate", "0.01", "--steps", "10", "--fpr", "1e400"),
     "--fpr must be"),
    (("epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "1e-400", "--delta",
      DELTA), "--steps must be an integer"),
    # below the library's least false-positive rate: it was an internal error (exit 1)
    (("risk", "--sigma", "1", "--sample-rate", "1", "--steps", "1", "--fpr", "1e-310"),
     "--fpr must be in [1e-300, 1]"),
])
def test_numbers_beyond_the_float_range_are_user_errors(capsys, argv, needle):
    """1e400 overflowed float(Fraction) into an internal error (exit 1), and --steps
    1e-400 rounded to 0 steps: each is a user error naming the option (exit 2)."""
    status, out, err = cli(capsys, *argv)
    assert status == 2 and out == "" and needle in err, err


def test_curve_rows_bound_delta_at_the_epsilon_they_print(capsys):
    """Each printed epsilon is the one its delta bounds were computed at: the curve's
    epsilons are rounded to the 6 digits shown before the query (a row rounded after it
    paired its delta bounds with a neighbouring epsilon, leaving one of them unproven)."""
    argv = ("curve", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60, "--num", 7)
    data = cli_json(capsys, *argv)
    eps = [row["epsilon"] for row in data["curve"]]
    assert all(float(f"{e:.6g}") == e for e in eps) and eps[-1] > 0
    status, out, _ = cli(capsys, *argv)
    printed = [float(l.split()[0]) for l in out.splitlines() if l.strip()[:1].isdigit()]
    assert printed[-7:] == eps


def test_risk_and_written_curve_say_what_they_assume(capsys, tmp_path):
    """Every result says its sampler and relation (README): `risk` and `curve` writing
    files said nothing."""
    common = ("--sigma", 1.1, "--steps", 100)
    status, out, err = cli(capsys, "risk", *common, "--sample-rate", 0.01)
    assert status == 0 and "\nassumes: sampler=poisson, neighbouring=add_remove\n" in out
    data = cli_json(capsys, "risk", *common, "--sample-rate", 0.01)
    assert (data["sampler"], data["neighbouring"]) == ("poisson", "add_remove")
    status, out, err = cli(capsys, "curve", *common, "--batch-size", 10, "--dataset-size",
                           1000, "--sampler", "fixed_size", "--num", 3,
                           "--csv", tmp_path / "c.csv")
    assert status == 0 and ("\nassumes: sampler=fixed_size, neighbouring=add_remove, "
                            "dataset_size=1000, batch_size=10\n") in out


def test_curve_never_writes_over_its_schedule_or_twice_to_one_file(capsys, tmp_path):
    """`curve --schedule phases.csv --csv phases.csv` replaced the schedule by the
    points; --png and --csv naming one file kept only the second."""
    schedule = tmp_path / "phases.csv"
    text = "noise_multiplier,sample_rate,steps\n1.0,0.05,40\n"
    schedule.write_text(text)
    status, out, err = cli(capsys, "curve", "--schedule", schedule, "--csv", schedule,
                           "--num", 3)
    assert status == 2 and out == "" and "--schedule file" in err and err.count("\n") == 1
    assert schedule.read_text() == text
    status, out, err = cli(capsys, "curve", "--schedule", schedule, "--num", 3,
                           "--csv", tmp_path / "x", "--png", str(tmp_path / "." / "x"))
    assert status == 2 and "name the same file" in err and not (tmp_path / "x").exists()
