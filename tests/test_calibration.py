"""pb_accountant.calibration: bounded searches whose answers are certified."""
import math

import pytest

from pb_accountant import PrivacyBucketsAccountant
from pb_accountant import calibration
from pb_accountant.calibration import (MIN_RELATIVE_TOLERANCE, NoiseCalibration,
                                       find_noise_multiplier, find_steps)

DELTA = 1e-5


def eps_upper(sigma, q, steps, delta=DELTA):
    return PrivacyBucketsAccountant().epsilon_after(delta, noise_multiplier=sigma,
                                                     sample_rate=q, num_steps=steps).upper


def test_noise_certifies_the_target_and_is_tight_to_tol():
    res = find_noise_multiplier(2.0, DELTA, 0.05, 60, tol=2e-3)
    assert isinstance(res, NoiseCalibration) and res.certified and res.reason is None
    assert res.epsilon_upper == eps_upper(res.noise_multiplier, 0.05, 60) <= 2.0
    assert res.rejected_noise_multiplier < res.noise_multiplier
    assert res.noise_multiplier <= res.rejected_noise_multiplier * (1 + 2e-3)
    assert eps_upper(res.rejected_noise_multiplier, 0.05, 60) > 2.0
    assert res.rejected_epsilon_upper > 2.0
    assert 3 <= res.evaluations <= 80


def test_noise_result_is_frozen():
    res = find_noise_multiplier(4.0, DELTA, 0.05, 20, tol=0.05)
    with pytest.raises(Exception):
        res.noise_multiplier = 0.0


def test_tiny_tolerance_is_floored_and_terminates():
    res = find_noise_multiplier(2.0, DELTA, 0.05, 20, tol=1e-16)
    assert res.relative_tolerance == MIN_RELATIVE_TOLERANCE
    assert res.certified and res.epsilon_upper <= 2.0
    assert res.evaluations <= 80


def test_max_evaluations_bounds_the_search_and_says_so():
    res = find_noise_multiplier(2.0, DELTA, 0.05, 20, tol=1e-6, max_evaluations=4)
    assert res.evaluations <= 4
    assert res.certified and res.epsilon_upper <= 2.0                  # still certified
    assert res.reason is not None and "stopped after" in res.reason


def test_unreachable_target_gives_a_reason_not_a_sigma():
    res = find_noise_multiplier(1e-6, DELTA, 1.0, 10)
    assert not res.certified and res.noise_multiplier is None
    assert math.isinf(res.epsilon_upper)
    assert "no noise multiplier up to" in res.reason and res.evaluations <= 80


def test_any_noise_meets_a_huge_target_when_delta_is_large():
    res = find_noise_multiplier(50.0, 0.5, 0.001, 1, min_noise_multiplier=0.5)
    assert res.certified and res.noise_multiplier == 0.5
    assert res.rejected_noise_multiplier is None and "any noise multiplier" in res.reason


def test_robust_to_an_upper_bound_that_is_inf_or_jumps(monkeypatch):
    """A fake accountant whose bound is inf below 0.7 and not monotone above it: the
    answer is still a point evaluated and certified, and the search terminates."""
    def fake(delta, sigma, q, steps, accountant=None):
        if sigma < 0.7:
            return math.inf, "beyond the grid"
        jump = 0.3 if 1.0 < sigma < 1.1 else 0.0          # a non-monotone bump
        return 2.0 / sigma + jump, None

    monkeypatch.setattr(calibration, "_upper", fake)
    res = find_noise_multiplier(10.0, DELTA, 0.1, 10, tol=1e-4)
    assert res.certified and fake(DELTA, res.noise_multiplier, 0, 0)[0] <= 10.0
    assert "cannot be certified" in res.reason and "beyond the grid" in res.reason
    res = find_noise_multiplier(1.95, DELTA, 0.1, 10, tol=1e-4)
    assert res.certified and fake(DELTA, res.noise_multiplier, 0, 0)[0] <= 1.95
    assert res.evaluations <= 80


def test_noise_validates_inputs():
    with pytest.raises(ValueError, match="target_epsilon"):
        find_noise_multiplier(0.0, DELTA, 0.1, 10)
    with pytest.raises(ValueError, match="delta"):
        find_noise_multiplier(1.0, 1.5, 0.1, 10)
    with pytest.raises(ValueError, match="sample_rate"):
        find_noise_multiplier(1.0, DELTA, 0.0, 10)
    with pytest.raises(ValueError, match="steps"):
        find_noise_multiplier(1.0, DELTA, 0.1, 0)
    with pytest.raises(ValueError, match="tol"):
        find_noise_multiplier(1.0, DELTA, 0.1, 10, tol=float("nan"))


def test_find_steps_is_the_largest_certified_count():
    res = find_steps(2.0, DELTA, 1.0, 0.05)
    assert res.steps > 0 and res.reason is None
    assert res.epsilon_upper == eps_upper(1.0, 0.05, res.steps) <= 2.0
    assert eps_upper(1.0, 0.05, res.steps + 1) > 2.0
    none = find_steps(1e-3, DELTA, 0.5, 1.0)
    assert none.steps == 0 and none.epsilon_upper == 0.0
    capped = find_steps(100.0, DELTA, 5.0, 0.01, max_steps=64)
    assert capped.steps == 64 and "max_steps" in capped.reason


def test_opacus_hook_is_a_thin_adapter_over_find_noise_multiplier(monkeypatch):
    """One noise search: the Opacus hook delegates to calibration.find_noise_multiplier."""
    import pb_accountant.calibration as calibration
    from pb_accountant._opacus_hook import calibrated_noise_multiplier
    calls = []
    real = calibration.find_noise_multiplier

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration, "find_noise_multiplier", spy)
    sigma = calibrated_noise_multiplier(target_epsilon=2.0, target_delta=DELTA,
                                        sample_rate=0.05, steps=60)
    assert len(calls) == 1 and calls[0]["epsilon_tolerance"] == 0.01
    up = eps_upper(sigma, 0.05, 60)
    assert 2.0 - 0.01 <= up <= 2.0


def test_epsilon_tolerance_stops_within_the_absolute_window():
    res = find_noise_multiplier(2.0, DELTA, 0.05, 60, tol=1e-6, epsilon_tolerance=0.05)
    assert res.certified and res.reason is None
    assert 2.0 - 0.05 <= res.epsilon_upper == eps_upper(res.noise_multiplier, 0.05, 60) <= 2.0
    with pytest.raises(ValueError, match="epsilon_tolerance"):
        find_noise_multiplier(2.0, DELTA, 0.05, 60, epsilon_tolerance=-1.0)


def test_a_certified_floor_above_delta_ends_the_search_early():
    # delta 1e-60: 1e-30 is certifiable since issue 12 (the FFT split checks every level)
    res = find_noise_multiplier(1000.0, 1e-60, 0.5, 1000, max_noise_multiplier=1e6)
    assert not res.certified and res.epsilon_upper == math.inf
    assert res.evaluations <= 5
    assert "certified floor" in res.reason and "stays above delta" in res.reason


def test_calibration_is_exported():
    import pb_accountant
    for name in ("find_noise_multiplier", "find_steps", "NoiseCalibration",
                 "StepsCalibration"):
        assert getattr(pb_accountant, name) is getattr(pb_accountant.calibration, name)
        assert name in pb_accountant.__all__


def test_calibration_keeps_what_the_bounds_assume():
    """A sample rate the sizes contradict is calibrated at b/n under fixed-size
    sampling: the result says so, as the accountant's bounds do (it was silent)."""
    res = find_noise_multiplier(1.0, DELTA, 0.5, 200, sampler="fixed_size",
                                neighbouring="replace_one", dataset_size=1000, batch_size=10)
    assert res.certified and any("differs from batch_size/dataset_size" in n
                                 for n in res.notes)
    assert find_noise_multiplier(1.0, DELTA, 0.01, 200).notes == ()


def test_calibration_with_the_accountants_engine_options():
    """``options``: the sigma is certified by an accountant with those options (the one
    that will report the run), whose bound may be looser than the default's."""
    from pb_accountant import PrivacyBucketsAccountant
    options = {"number_of_buckets": 100, "factor": 1.05}
    res = find_noise_multiplier(2.0, DELTA, 0.1, 20, options=options)
    acc = PrivacyBucketsAccountant(**options)
    acc.history = [(res.noise_multiplier, 0.1, 20)]
    assert res.certified and res.epsilon_upper == acc.get_epsilon(DELTA) <= 2.0
    for bad in ({"bogus": 1}, "resolution=0.1", {"resolution": -1.0}, {"sampler": "shuffle"}):
        with pytest.raises(ValueError):
            find_noise_multiplier(2.0, DELTA, 0.1, 20, options=bad)


def test_find_steps_refuses_max_steps_beyond_what_a_query_may_hold():
    """max_steps above MAX_STEPS had been accepted, and the doubling search then failed
    half-way (after 50 evaluations, 13 s) with a ValueError naming ``num_steps``, a
    parameter find_steps does not have: find_steps(1e300, 0.99, 1.0, 1e-20,
    max_steps=10**18).  It is refused up front, naming max_steps and its range."""
    from pb_accountant._validation import MAX_STEPS
    calls = []
    with pytest.raises(ValueError, match=r"max_steps must be an integer >= 1 and <= "):
        find_steps(1e300, 0.99, 1.0, 1e-20, max_steps=10 ** 18,
                   progress=lambda *a: calls.append(a))
    assert calls == []
    assert find_steps(1e300, 0.99, 1.0, 0.01, max_steps=MAX_STEPS,
                      max_evaluations=2).evaluations == 2


@pytest.mark.parametrize("search", ["noise", "steps"])
def test_a_progress_that_is_not_callable_is_refused_before_any_evaluation(search):
    """It had raised TypeError ('str' object is not callable) after the first evaluation."""
    with pytest.raises(ValueError, match="progress"):
        if search == "noise":
            find_noise_multiplier(2.0, DELTA, 0.05, 20, progress="print")
        else:
            find_steps(2.0, DELTA, 1.0, 0.05, progress="print")
