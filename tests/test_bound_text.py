"""``bound_text`` shows a bound rounded outward, so the text is still a bound (rounded
to the nearest, an upper bound 1.8344205 showed as 1.834420, below itself)."""
from decimal import Decimal

import numpy as np

from pb_accountant.results import bound_text


def test_bound_text_rounds_outward_by_less_than_one_unit():
    rng = np.random.default_rng(7)
    values = np.concatenate((rng.uniform(0, 10, 3000), 10.0 ** rng.uniform(-12, 4, 3000), 10.0 ** rng.uniform(4, 308, 300),
                             [0.0, 1.0, 1.8344205, 4.0040953, 2.0 ** -40]))
    for decimals in (0, 4, 6):
        unit = Decimal(1).scaleb(-decimals)
        for x in values.tolist():
            up, low = Decimal(bound_text(x, True, decimals)), Decimal(bound_text(x, False, decimals))
            assert low <= Decimal(x) <= up
            assert up - low <= unit and up - Decimal(x) < unit and Decimal(x) - low < unit
            assert len(bound_text(x, True, decimals).partition(".")[2]) == decimals


def test_bound_text_of_special_values():
    assert bound_text(float("inf"), True) == "inf"
    assert bound_text(1.8344205, False) == "1.834420" and bound_text(1.8344205, True) == "1.834421"
    assert bound_text(-1e-9, True) == "0.000000" and bound_text(2.0, True, 4) == "2.0000"
    # (past 28 digits the default decimal context had raised InvalidOperation)
    assert bound_text(1e30, True) == "1000000000000000019884624838656.000000"
    assert Decimal(bound_text(1e300, False, 2)) == Decimal(1e300)
