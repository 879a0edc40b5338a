"""docs/floating-point.md's small-delta table ("today" column) and its get_delta_bounds
figure are what the accountant answers today (each bound rounded outward to the digits
the page shows)."""
import math
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path

import pytest

from pb_accountant import PrivacyBucketsAccountant

PAGE = Path(__file__).resolve().parents[1] / "docs" / "floating-point.md"

#: the table's setting column -> history
SETTINGS = {
    "sigma 2, q 0.05, 5,000 steps": [(2.0, 0.05, 5000)],
    "sigma 3, q 0.001, 100,000 steps": [(3.0, 0.001, 100_000)],
    "sigma 1.5, q 0.0002, 10^6 steps": [(1.5, 0.0002, 10 ** 6)],
    "sigma 1.1, q 0.01, 1,000 steps": [(1.1, 0.01, 1000)],
    "Gaussian q 1, sigma 50, 10^6 steps": [(50.0, 1.0, 10 ** 6)],
}


def _rows():
    text = PAGE.read_text()
    table = text[text.index("| setting (fresh accountant, both bounds)"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        low, up = (c.strip() for c in cells[3].split(","))
        rows.append((cells[0], float(cells[1]), low, up, cells[4]))
    return rows


def _outward(value: float, shown: str, upper: bool) -> str:
    places = len(shown.split(".")[1]) if "." in shown else 0
    q = Decimal(1).scaleb(-places)
    return str(Decimal(value).quantize(q, rounding=ROUND_CEILING if upper else ROUND_FLOOR))


def test_the_table_has_every_row():
    assert len(_rows()) == 8
    assert {r[0] for r in _rows()} == set(SETTINGS)


@pytest.mark.parametrize("setting,delta,low,up,width", _rows(),
                         ids=[f"{r[0]} @ {r[1]:g}" for r in _rows()])
def test_small_delta_table_row(setting, delta, low, up, width):
    acc = PrivacyBucketsAccountant()
    acc.history = SETTINGS[setting]
    b = acc.get_epsilon_bounds(delta)
    assert _outward(b.lower, low, upper=False) == low
    assert _outward(b.upper, up, upper=True) == up
    shown = width.rstrip("%")
    places = len(shown.split(".")[1])
    assert round((b.upper - b.lower) / b.upper * 100, places) == float(shown)


def test_delta_query_floor_figure():
    text = " ".join(PAGE.read_text().split())
    shown = re.search(r"at eps 5 it answers \[0, ([0-9.e-]+)\]", text).group(1)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.1, 0.01, 1000)]
    b = acc.get_delta_bounds(5.0)
    assert b.lower == 0.0 and b.notes
    assert f"{b.upper:.3g}" == shown and math.isfinite(b.upper)
