"""The README's commands and its engine example stay true."""
import re
from pathlib import Path

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
