"""docs/which-epsilon.md quotes numbers: they are what examples/which_epsilon.py computes.

Every cell of the side-by-side table is recomputed (rounded outward as the page says,
so a quoted bound is still a bound), and every row of the Chua et al. table; the
cube lower bound is checked against the certified max-of-batches lower bound (same
statistic: agreement to a relative 5e-3).
"""
import re
from pathlib import Path

import pytest

from _examples import load_example
from pb_accountant import bound_text

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "which-epsilon.md"


ex = load_example("which_epsilon")


def _table(first_header: str):
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


SIDE = _table("| dataset | sigma | epochs |")
CHUA = _table("| epsilon | shuffle lower (pb) |")


def test_the_tables_are_there():
    assert len(SIDE) == len(ex.SETTINGS) * len(ex.DATASETS)
    assert len(CHUA) == len(ex.CHUA_EPS)


@pytest.mark.parametrize("row", SIDE, ids=lambda r: f"{r[0]}-sigma{r[1]}-{r[2]}ep")
def test_side_by_side_cells(row):
    name, sigma, epochs, *cells = row
    n = ex.DATASETS[name]
    assert len(cells) == len(ex.COLUMNS)
    for (sampler, relation), cell in zip(ex.COLUMNS, cells):
        lo_txt, up_txt = re.fullmatch(r"\[(\S+), (\S+)\]", cell).groups()
        b = ex.bounds(sampler, relation, n, ex.BATCH, float(sigma), int(epochs))
        assert b.sampler == sampler and b.neighbouring == relation
        # quoted: lower rounded down, upper rounded up, to two decimals
        assert lo_txt == bound_text(b.lower, False, 2), (sampler, relation)
        assert up_txt == bound_text(b.upper, True, 2), (sampler, relation)
        assert float(lo_txt) <= b.lower <= b.upper <= float(up_txt)


def test_chua_table():
    rows = ex.chua_rows()
    for quoted, (e, s_lo, cube, s_up, closed, p_lo, p_up) in zip(CHUA, rows):
        assert float(quoted[0]) == e
        computed = [s_lo, cube, s_up, closed, p_lo, p_up]
        digits = [4, 4, 4, 4, 3, 3]
        for text, value, d in zip(quoted[1:], computed, digits):
            assert text == f"{value:.{d}g}", (e, text, value)
        # the certified lower bound and the cube bound: one statistic
        assert s_lo == pytest.approx(cube, rel=5e-3)
        # the shuffle upper bound is the unamplified Gaussian of one epoch
        assert s_up >= closed * (1 - 1e-9) and s_up == pytest.approx(closed, rel=1e-3)
        assert 0.0 <= s_lo <= s_up and 0.0 <= p_lo <= p_up


def test_quick_run_prints_a_table(capsys):
    assert ex.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| dataset | sigma | epochs |") and "MNIST" in out


def test_readme_section_quotes_the_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Which sampler? Which epsilon?")[1].split("\n## ")[0]
    row = next(r for r in SIDE if r[:3] == ["CIFAR-10", "1", "100"])
    poisson, shuffle_rs, poisson_ro, shuffle_ro = row[3], row[5], row[6], row[8]
    assert f"Poisson gives {poisson}" in section
    assert f"gives {shuffle_rs} under replace_special" in section
    assert shuffle_ro[1:].split(",")[0] in section and poisson_ro.split(", ")[1][:-1] in section
    assert "docs/which-epsilon.md" in section
