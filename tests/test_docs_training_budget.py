"""Every Python snippet of docs/training-budget.md runs as written, and prints what it says.

Each snippet runs in its own interpreter, in a temporary folder (its ``runs/`` files go
there).  A snippet whose first line is ``# continues the "<section>" example`` runs
after the snippet of that section.  When the text after a snippet says
"prints `...`" (or shows a block after "prints"), that output is checked too.
The "Command line" section is left to tests/test_cli.py (its examples are shell runs).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _quoted_output import contains

DOC = Path(__file__).resolve().parents[1] / "docs" / "training-budget.md"
CONTINUES = re.compile(r'^# continues the "(.+)" example')
NEEDS = {"torch": "torch", "opacus": "opacus", "pytorch_lightning": "pytorch_lightning",
         "transformers": "transformers", "TensorBoardSink(": "tensorboard"}


def snippets():
    """(section, code, expected outputs) for each Python block, continuations joined."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    out, by_section = [], {}
    section, i = None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.strip() == "```python" and section != "Command line":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            code = "\n".join(lines[i + 1:j]) + "\n"
            match = CONTINUES.match(code)
            if match:
                code = by_section[match.group(1)] + "\n" + code
            by_section.setdefault(section, code)
            out.append((section, code, expected_after(lines, j + 1)))
            i = j
        i += 1
    return out


def expected_after(lines, k):
    """What the prose right after a snippet says it prints."""
    while k < len(lines) and not lines[k].strip():
        k += 1
    if k >= len(lines) or not lines[k].startswith("prints"):
        return []
    inline = re.match(r"prints(?: \([^)]*\))? `([^`]+)`", lines[k])
    if inline:
        return [inline.group(1)]
    k += 1
    while k < len(lines) and lines[k].strip() != "```":
        k += 1
    block = []
    for line in lines[k + 1:]:
        if line.strip() == "```":
            break
        block.append(line.split("time=")[0])    # wall-clock fields cannot match
    return block


SNIPPETS = snippets()


def test_the_page_has_the_snippets_it_promises():
    sections = [s for s, _, _ in SNIPPETS]
    for name in ("BudgetTracker", "BudgetGuard", "PyTorch Lightning",
                 "Hugging Face transformers", "Resuming"):
        assert name in sections


@pytest.mark.parametrize("section,code,expected", SNIPPETS,
                         ids=[f"{i}-{s.split()[0]}" for i, (s, _, _) in enumerate(SNIPPETS)])
def test_snippet_runs_as_written(section, code, expected, tmp_path):
    for marker, module in NEEDS.items():
        if marker in code:
            pytest.importorskip(module)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    res = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    for item in expected:
        assert contains(res.stdout, item), f"{item!r} not printed; stdout:\n{res.stdout[-2000:]}"
    if "LoggingSink()" in code and "logging.basicConfig" in code or "addHandler" in code:
        # the whole line as the page quotes it (what the bounds assume included)
        line = ("pb_accountant INFO privacy budget at step 3 (epoch 0, step): epsilon in "
                "[1.28051, 1.28053] at delta=1e-05 (noise_multiplier=1, sample_rate=0.05; "
                "sampler=poisson, neighbouring=add_remove)\n")
        assert line in res.stderr
        assert line.rstrip("\n") in DOC.read_text(encoding="utf-8")
