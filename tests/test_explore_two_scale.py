"""benchmarks/explore_two_scale.py, the measurement behind docs/method.md §3's two-scale
leaves: its bracket must hold check_ctd's estimate, and its upper bound must improve on
the engine's split pair on the same grids where the leaf is much coarser than the bulk."""
import importlib.util
import os

import pytest


def _load(name):
    path = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def explore():
    return _load("explore_two_scale")


def test_two_scale_bracket_holds_the_reference_and_is_inside_the_one_scale_one(explore):
    """sigma 0.6, q 3e-5, 2^14 steps, delta 1e-6: the leaf spacing is 32 times the bulk's;
    measured [0.15295889, 0.15296781] against [0.15292679, 0.15313958] on the engine's
    default grids, reference 0.15296462."""
    sigma, q, log2_steps, delta = 0.6, 3e-5, 14, 1e-6
    bounds, info = explore.two_scale_bounds(sigma, q, log2_steps, delta)
    assert info["H"] >= 16 * info["h"]          # the leaf is far coarser than the bulk
    ref = explore.reference(sigma, q, log2_steps, delta, bounds.upper)
    assert 0 < bounds.lower <= ref <= bounds.upper
    one_scale = explore.ordinary_bounds(sigma, q, log2_steps, delta, 0)
    assert one_scale.lower < bounds.lower and bounds.upper < one_scale.upper
    assert bounds.width < one_scale.width / 5
