"""Optional test dependencies: property tests skip (not fail) without hypothesis.

``from _optional import HealthCheck, given, settings, st`` gives hypothesis's names when
it is installed; otherwise stand-ins under which every ``@given`` test is skipped and
the module's other tests still run.
"""
import pytest

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    HAVE_HYPOTHESIS = True
except ImportError:                      # pragma: no cover - exercised without hypothesis
    HAVE_HYPOTHESIS = False

    class _Anything:
        """Any attribute, call or operator gives another stand-in (strategies unused)."""

        def __getattr__(self, name):
            return _Anything()

        def __call__(self, *args, **kwargs):
            return _Anything()

        def __or__(self, other):
            return _Anything()

        __ror__ = __or__

    HealthCheck = _Anything()
    st = _Anything()
    st.composite = lambda fn: _Anything()

    def given(*args, **kwargs):
        return pytest.mark.skip(reason="hypothesis is not installed")

    def settings(*args, **kwargs):
        return lambda fn: fn

__all__ = ["HAVE_HYPOTHESIS", "HealthCheck", "given", "settings", "st"]
