"""Test-suite settings: how hard the property-based fuzzers try. The gate runs the bounded
``rlsim-gate`` profile; ``--rlsim-slow`` runs the ``rlsim-slow`` profile."""

from datetime import timedelta

from hypothesis import settings

settings.register_profile("rlsim-gate", max_examples=40, deadline=timedelta(seconds=10))
settings.register_profile("rlsim-slow", max_examples=500, deadline=timedelta(seconds=20))


def pytest_configure(config):
    settings.load_profile("rlsim-slow" if config.getoption("rlsim_slow", False) else "rlsim-gate")
