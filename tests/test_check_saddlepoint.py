"""benchmarks/check_saddlepoint.py, the third opinion the README cites for seed-31 #86 and
#124: ``--only`` reads the settings of the suite ``--seed`` names, never another seed's."""
import os

import pytest

from _benchmarks import BENCHMARKS as BENCH, load_benchmark


@pytest.fixture(scope="module")
def saddle():
    return load_benchmark("check_saddlepoint")


def test_only_reads_the_seed_it_is_given(saddle, capsys):
    """Seed 31's #86 (three segments at q 0.086): pb's bracket and PLD's answer from that
    seed's table, with the saddle-point estimate inside the bracket, as the README says.
    (The option used to read seed 12's settings whatever table it was given.)"""
    saddle.main(["--seed", "31", "--only", "86",
                 "--csv", os.path.join(BENCH, "results", "random_suite_seed31.csv")])
    line = capsys.readouterr().out
    assert "#86: delta 1.13e-11  pb [190.699623, 190.774856]" in line
    assert "(inside;" in line and "PLD 190.717240" in line


def test_another_seed_without_its_table_prints_no_peers(saddle, capsys):
    """Seed 12's table is the default for seed 12 alone: its peers' answers belong to
    other settings."""
    saddle.main(["--seed", "31", "--only", "134"])
    line = capsys.readouterr().out
    assert line.startswith("#134: delta 5.95e-14  pb [2.170523, 2.170550]")
    assert "PLD" not in line and "PRV" not in line
