"""A state dict whose options or assumptions have keys of mixed types (a foreign or
hand-edited checkpoint) is a ValueError naming the unknown keys, the history unchanged
(sorting the unknown names used to raise a TypeError)."""
import pytest

from pb_accountant import PrivacyBucketsAccountant


@pytest.mark.parametrize("part", ["options", "assumptions"])
def test_mixed_type_keys_are_a_value_error(part):
    saved = PrivacyBucketsAccountant()
    saved.step(noise_multiplier=1.0, sample_rate=0.01)
    state = dict(saved.state_dict(), **{part: {1: 2, "unknown": 3}})
    acc = PrivacyBucketsAccountant()
    acc.step(noise_multiplier=2.0, sample_rate=0.1)
    with pytest.raises(ValueError, match=f"state_dict\\['{part}'\\].*unknown"):
        acc.load_state_dict(state)
    assert acc.history == [(2.0, 0.1, 1)]
