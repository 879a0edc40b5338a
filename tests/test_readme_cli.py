"""Every ``$ pb-accountant ...`` command quoted in the CLI sections of README.md and
docs/training-budget.md prints exactly what the page shows (outputs are deterministic:
no timings unless ``--timing``)."""
import re
import shlex
from pathlib import Path

import pytest

from _quoted_output import same

ROOT = Path(__file__).resolve().parents[1]

# (file, heading that opens its CLI section); the section ends at the next heading of
# the same or a higher level
SECTIONS = [("README.md", "### The `pb-accountant` command line"),
            ("docs/training-budget.md", "## Command line")]


def _section(path: str, heading: str) -> str:
    text = (ROOT / path).read_text()
    start = text.index(heading + "\n")
    level = len(heading.split(" ")[0])
    rest = text[start + len(heading) + 1:]
    end = re.search(rf"^#{{1,{level}}} ", rest, flags=re.M)
    return rest[:end.start()] if end else rest


def _examples(path: str, heading: str):
    """[(command line, expected output)] of every fenced block in the section."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", _section(path, heading),
                            flags=re.S | re.M):
        command, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    out.append((command, "\n".join(lines)))
                command, lines = line[2:], []
            elif command is not None:
                lines.append(line)
        if command is not None:
            out.append((command, "\n".join(lines)))
    return out


EXAMPLES = [(path, cmd, expected) for path, heading in SECTIONS
            for cmd, expected in _examples(path, heading)]


def test_the_sections_quote_each_command():
    for path, heading in SECTIONS:
        examples = _examples(path, heading)
        assert examples, path
        assert all(cmd.startswith("pb-accountant ") for cmd, _ in examples), path
    readme = [cmd.split()[1] for cmd, _ in _examples(*SECTIONS[0])]
    assert {"epsilon", "delta", "noise", "compare", "curve"} <= set(readme)
    assert any("--batch-size" in c and "--dataset-size" in c and "--epochs" in c
               for c, _ in _examples(*SECTIONS[0]))


@pytest.mark.parametrize("path,command,expected", EXAMPLES,
                         ids=[f"{p}: {c[14:70]}" for p, c, _ in EXAMPLES])
def test_quoted_command_prints_what_the_page_shows(capsys, monkeypatch, path, command,
                                                  expected):
    from pb_accountant.integrations.cli import main
    argv = shlex.split(command)[1:]
    if argv[0] in ("compare",) or "--compare" in argv:
        peers = next((argv[i + 1] for i, a in enumerate(argv) if a == "--peers"), "opacus")
        if "opacus" in peers:
            pytest.importorskip("opacus")
        if "pld" in peers:
            pytest.importorskip("dp_accounting")
    monkeypatch.chdir(ROOT)
    status = main(argv)
    captured = capsys.readouterr()
    shown = (captured.out + captured.err).rstrip("\n")
    assert same(shown, expected.rstrip("\n")), f"{path} shows for `{command}`:\n{expected}\n" \
                                           f"but it prints:\n{shown}"
    assert status == (2 if "error:" in shown else 0)
