"""The pb-accountant command line, run for real: ``python -m pb_accountant.integrations.cli ...``."""
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


def bounds(history, delta=DELTA):
    acc = PrivacyBucketsAccountant()
    acc.history = history
    return acc.get_epsilon_bounds(delta)


# ------------------------------------------------------------------------------------
# epsilon
# ------------------------------------------------------------------------------------

def test_epsilon_text_table_rounds_outward():
    out = run("epsilon", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
              "--delta", DELTA).stdout
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


def test_epsilon_json_epochs_and_segments():
    data = run_json("epsilon", "--sigma", 1.0, "--sample-rate", 0.05, "--epochs", 3,
                    "--delta", DELTA)
    assert data["steps"] == 60 and data["schedule"] == [
        {"noise_multiplier": 1.0, "sample_rate": 0.05, "steps": 60}]
    assert "3 epochs x 20 steps" in data["notes"][0]
    b = bounds([(1.0, 0.05, 60)])
    assert (data["eps_lower"], data["eps_upper"]) == (b.lower, b.upper)
    seg = run_json("epsilon", "--segment", "1.0,0.05,40", "--segment", "0.8,0.1,10",
                   "--delta", DELTA)
    b2 = bounds([(1.0, 0.05, 40), (0.8, 0.1, 10)])
    assert seg["steps"] == 50 and len(seg["schedule"]) == 2
    assert (seg["eps_lower"], seg["eps_upper"]) == (b2.lower, b2.upper)
    assert seg["eps_upper"] > b.upper * 0 and seg["eps_lower"] <= seg["eps_upper"]


# ------------------------------------------------------------------------------------
# delta
# ------------------------------------------------------------------------------------

def test_delta_bounds_table_and_json():
    argv = ("delta", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
            "--epsilon", 0.5, 1, 2, 4)
    data = run_json(*argv)
    res = data["results"]
    assert [r["epsilon"] for r in res] == [0.5, 1.0, 2.0, 4.0]
    for r in res:
        assert 0.0 <= r["delta_lower"] <= r["delta_upper"] <= 1.0
    uppers = [r["delta_upper"] for r in res]
    assert uppers == sorted(uppers, reverse=True)
    # consistent with the epsilon command: delta_upper at eps_upper(1e-5) is <= 1e-5 ...
    b = bounds([(1.0, 0.05, 60)])
    at = run_json("delta", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
                  "--epsilon", repr(b.upper), repr(b.lower))["results"]
    # (the delta command composes on its own grid, so agreement is up to its precision)
    assert at[0]["delta_upper"] <= DELTA * (1 + 1e-3)
    # ... and delta_lower at eps_lower is about 1e-5 (both certified)
    assert at[1]["delta_lower"] >= DELTA * (1 - 1e-3)
    text = run(*argv).stdout
    rows = [l.split() for l in text.splitlines() if l.strip()[:1].isdigit()]
    assert [row[0] for row in rows[-4:]] == ["0.5", "1", "2", "4"]


# ------------------------------------------------------------------------------------
# noise
# ------------------------------------------------------------------------------------

def test_noise_finds_the_smallest_certified_sigma():
    proc = run("noise", "--target-epsilon", 2.0, "--sample-rate", 0.05, "--steps", 60,
               "--delta", DELTA, "--tol", "2e-3", "--progress", "always",
               "--progress-delay", 0, "--json")
    data = json.loads(proc.stdout)
    sigma, rejected = data["noise_multiplier"], data["rejected_noise_multiplier"]
    assert rejected < sigma <= rejected * (1 + 2e-3)
    acc = PrivacyBucketsAccountant()
    ok = acc.epsilon_after(DELTA, noise_multiplier=sigma, sample_rate=0.05, num_steps=60)
    bad = acc.epsilon_after(DELTA, noise_multiplier=rejected, sample_rate=0.05, num_steps=60)
    assert ok.upper <= 2.0 < bad.upper
    assert data["eps_upper"] == ok.upper and data["eps_lower"] <= data["eps_upper"]
    assert data["evaluations"] >= 3
    # the progress bar (shown at once here; by default only after about a second)
    bar = proc.stderr.splitlines()
    assert len(bar) >= 3 and all(l.startswith("[") and "%" in l for l in bar)
    assert bar[-1].startswith("[" + "#" * 24 + "] 100%") and "sigma in [" in bar[-1]
    quiet = run("noise", "--target-epsilon", 2.0, "--sample-rate", 0.05, "--steps", 60,
                "--delta", DELTA, "--tol", "0.05", "--json")          # auto + not a TTY
    assert quiet.stderr == ""


def test_noise_text_and_unreachable_target():
    text = run("noise", "--target-epsilon", 8, "--sample-rate", 0.05, "--epochs", 1,
               "--delta", DELTA, "--tol", "0.05").stdout
    assert "smallest noise multiplier for epsilon <= 8" in text
    assert "noise_multiplier" in text and "certifies epsilon <=" in text
    proc = run("noise", "--target-epsilon", 1e-6, "--sample-rate", 1, "--steps", 10,
               "--delta", DELTA, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no noise multiplier" in proc.stderr


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


def test_curve_writes_png_and_csv(tmp_path):
    data = run_json("curve", "--sigma", 1.0, "--sample-rate", 0.05, "--steps", 60,
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


def test_curve_compare_overlays_the_peers(tmp_path):
    pytest.importorskip("opacus")
    pytest.importorskip("dp_accounting")
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
    data = run_json(*argv)
    res = {r["method"]: r for r in data["results"]}
    assert list(res) == ["pb", "opacus-rdp", "opacus-prv", "pld-pessimistic", "pld-optimistic"]
    assert all(r["available"] for r in res.values())
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
    assert header.split()[:4] == ["method", "eps_lower", "eps_upper", "seconds"]


# ------------------------------------------------------------------------------------
# errors: one line on stderr, non-zero exit, no traceback
# ------------------------------------------------------------------------------------

ERRORS = [
    (["epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "10"], "--delta"),
    (["epsilon", "--sigma", "1", "--sample-rate", "1.5", "--steps", "10", "--delta", "1e-5"],
     "--sample-rate must be in (0, 1]"),
    (["epsilon", "--sigma", "abc", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5"],
     "--sigma must be a number"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10", "--delta", "0"],
     "--delta must be in (0, 1)"),
    (["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--delta", "1e-5"],
     "exactly one of --steps and --epochs"),
    (["epsilon", "--segment", "1,0.01", "--delta", "1e-5"], "SIGMA,SAMPLE_RATE,STEPS"),
    (["epsilon", "--segment", "1,0.01,5", "--sigma", "1", "--delta", "1e-5"], "not both"),
    (["delta", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--epsilon", "-1"],
     "--epsilon must be in [0, inf)"),
    (["noise", "--target-epsilon", "0", "--sample-rate", "0.1", "--steps", "3",
      "--delta", "1e-5"], "--target-epsilon"),
    (["compare", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3", "--delta", "1e-5",
      "--peers", "nope"], "unknown peer"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
]


@pytest.mark.parametrize("argv,needle", ERRORS, ids=[" ".join(a[:1] + [n]) for a, n in ERRORS])
def test_user_errors_print_one_line(argv, needle):
    proc = run(*argv, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pb-accountant") and "error:" in lines[0]
    assert needle in lines[0]


def test_library_value_errors_are_one_line(monkeypatch, capsys):
    """A ValueError raised inside pb_accountant becomes one line and exit status 2."""
    from pb_accountant.integrations import cli

    def boom(self, delta):
        raise ValueError("something the library\nrejects, on two lines")

    monkeypatch.setattr(PrivacyBucketsAccountant, "get_epsilon_bounds", boom)
    status = cli.main(["epsilon", "--sigma", "1", "--sample-rate", "0.1", "--steps", "3",
                       "--delta", "1e-5"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err == ("pb-accountant epsilon: error: something the library rejects, "
                            "on two lines\n")


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
        assert main(["curve", "--sigma", "1", "--sample-rate", "0.05", "--steps", "20",
                     "--out", {str(tmp_path / 'nt')!r}, "--num", "20", "--compare"]) == 0
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
        assert not status[name]["available"] and "not installed" in status[name]["kind"]
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
