"""The examples run end to end (as a user would start them) and print sane numbers."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("opacus")
pytest.importorskip("sklearn")

from _examples import load_example  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run_example(name, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, str(REPO / "examples" / name), *args],
                          cwd=str(REPO), env=env, capture_output=True, text=True,
                          timeout=timeout)


def parse_table(stdout):
    lines = stdout.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["epoch"])
    header = lines[header_at].split()
    rows = []
    for line in lines[header_at + 1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break
        rows.append(dict(zip(header, [int(parts[0])] + [float(x) for x in parts[1:]])))
    return header, rows


def test_train_digits_runs(tmp_path):
    budget_csv = tmp_path / "budget.csv"
    res = run_example("train_digits.py", "--epochs", "2", "--seed", "0",
                      "--budget-csv", str(budget_csv))
    assert res.returncode == 0, res.stderr
    header, rows = parse_table(res.stdout)
    assert header[:6] == ["epoch", "test_acc", "pb_eps_lower", "pb_eps_upper", "prv_eps",
                          "rdp_eps"]
    assert [r["epoch"] for r in rows] == [1, 2]
    for r in rows:
        assert 0.0 < r["pb_eps_lower"] <= r["pb_eps_upper"]
        assert r["pb_eps_upper"] <= r["rdp_eps"]
        # PRV's printed value is its upper estimate; its interval is about +-0.01 wide,
        # so the certified pb interval must overlap [prv - 0.03, prv]
        assert r["pb_eps_lower"] <= r["prv_eps"]
        assert r["pb_eps_upper"] >= r["prv_eps"] - 0.03
        assert 0.0 <= r["test_acc"] <= 1.0
    # more steps, more privacy spent (the certified intervals do not overlap)
    assert rows[1]["pb_eps_lower"] > rows[0]["pb_eps_upper"]
    assert rows[-1]["test_acc"] > 0.5            # it learns (chance is 0.1)
    assert "certified:" in res.stdout
    assert "Traceback" not in res.stderr
    # the budget CSV starts afresh at each run: one header, one row per epoch
    again = run_example("train_digits.py", "--epochs", "1", "--seed", "0",
                        "--budget-csv", str(budget_csv))
    assert again.returncode == 0, again.stderr
    lines = budget_csv.read_text().splitlines()
    assert lines[0].startswith("step,") and len(lines) == 2


def test_train_digits_rejects_bad_flags():
    res = run_example("train_digits.py", "--delta", "2", timeout=120)
    assert res.returncode == 2
    assert "--delta" in res.stderr


def test_plot_tensorboard_budget_writes_only_where_told(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    module = load_example("plot_tensorboard_budget")
    default_out = Path(module.parse_args([]).out).resolve()
    assert default_out.parent == (REPO / "examples" / "output").resolve()   # git-ignored
    tracked = REPO / "docs" / "img" / "tensorboard_epsilon.png"
    before = tracked.read_bytes() if tracked.exists() else None
    out = tmp_path / "tb.png"
    res = run_example("plot_tensorboard_budget.py", "--epochs", "1", "--out", str(out),
                      "--logdir", str(tmp_path / "tb"))
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 0 and "read 29 steps" in res.stdout
    assert (tracked.read_bytes() if tracked.exists() else None) == before


@pytest.mark.parametrize("name,flags,names", [
    ("plot_tensorboard_budget.py", ["--epochs", "0"], "--epochs"),
    ("plot_tensorboard_budget.py", ["--delta", "2"], "--delta"),
    ("plot_tensorboard_budget.py", ["--sigma", "-1"], "--sigma"),
    ("plot_tensorboard_budget.py", ["--batch-size", "0"], "--batch-size"),
    ("plot_tensorboard_budget.py", ["--max-epsilon", "nan"], "--max-epsilon"),
    ("train_digits.py", ["--max-epsilon", "-1"], "--max-epsilon"),
    ("train_digits.py", ["--sigma", "inf"], "--sigma"),
    ("train_digits.py", ["--sigma", "1e-9"], "--sigma"),
    ("train_digits.py", ["--max-grad-norm", "0"], "--max-grad-norm"),
    ("train_digits.py", ["--lr", "nan"], "--lr"),
])
def test_examples_refuse_bad_flags_before_training(name, flags, names, capsys):
    # plot_tensorboard_budget had no checks (--epochs 0 ended in an AttributeError after
    # training, --delta 2 and --sigma -1 in a ValueError from the tracker); train_digits
    # let --max-epsilon -1 and --sigma inf reach the guard and Opacus
    if name == "plot_tensorboard_budget.py":
        pytest.importorskip("tensorboard")
    module = load_example(name)
    with pytest.raises(SystemExit) as exc:
        module.parse_args(flags)
    assert exc.value.code == 2
    assert names in capsys.readouterr().err


def test_which_epsilon_refuses_bad_flags(tmp_path, capsys):
    # --quick --write-doc had silently written nothing; an --img that is a file had
    # raised FileExistsError after a minute of tables
    module = load_example("which_epsilon.py")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for flags, name in ((["--quick", "--write-doc"], "--write-doc"),
                        (["--img", str(a_file)], "--img")):
        with pytest.raises(SystemExit) as exc:
            module.main(flags)
        assert exc.value.code == 2
        assert name in capsys.readouterr().err
