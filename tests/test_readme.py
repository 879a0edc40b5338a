"""The README's commands and its engine example stay true."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_opens_with_the_two_commands():
    bash = _blocks("bash")
    assert len(bash) >= 2
    setup_and_run, setup_and_test = bash[0], bash[1]
    assert "pip install torch==2.13.0" in setup_and_run and "examples/train_digits.py" in setup_and_run
    assert "pip install torch==2.13.0" in setup_and_test and "python -m pytest" in setup_and_test
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    test_command = [line for line in setup_and_test.splitlines() if "pytest" in line][0]
    install = test_command.split("&& python -m pytest")[0].split("activate && ")[1]
    assert install.split(" && ")[-1].replace("pip install", "pip install -q") in ci


def test_readme_engine_example_runs(capsys):
    example = next(b for b in _blocks("python") if "PrivacyBucketsAccountant()" in b)
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "EpsilonBounds(" in out and "DeltaBounds(" in out
    acc = namespace["acc"]
    b = acc.get_epsilon_bounds(1e-5)
    assert 0 < b.lower <= b.upper < 2.0


def _normalise_example_output(text):
    """Blank what varies between runs (wall-clock times); keep every bound and accuracy."""
    out = []
    for line in text.strip().splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0].isdigit():          # an epoch row: drop pb_time_s
            line = " ".join(parts[:6])
        line = re.sub(r"steps in [0-9.]+ s \(pb accounting [0-9.]+ s\)",
                      "steps in T s (pb accounting T s)", line)
        out.append(" ".join(line.split()))
    return out


def test_readme_main_example_output_is_what_the_code_prints(tmp_path):
    """The README quotes `python examples/train_digits.py --max-epsilon 4`: same numbers."""
    import os
    import subprocess
    import sys
    for module in ("torch", "opacus", "sklearn"):
        pytest.importorskip(module)
    blocks = _blocks("text")
    quoted = next(b for b in blocks if "budget guard:" in b and "certified:" in b)
    root = README.parent
    env = dict(os.environ, OMP_NUM_THREADS="2")
    res = subprocess.run([sys.executable, str(root / "examples" / "train_digits.py"),
                          "--max-epsilon", "4"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert _normalise_example_output(res.stdout) == _normalise_example_output(quoted)
