"""``cluster.health``: the GCS's health checks are a wait rlsim makes (a restarted node waits for
Ray to declare its old self dead), so each field is a whole number within a range and together
they bound that wait. A million failures, an initial delay of 1e11 ms, ``"3"``, ``true`` or
``3.0`` were read at face value (days to years of waiting) or coerced."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rlsim.host.health import DEAD_WITHIN_MAX_S, RAY_DEFAULTS, HealthChecks, dead_wait_s
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.loader import ScenarioError, read

BASE = {"name": "s", "cluster": {"nodes": 2, "gpus_per_node": 1},
        "trainer": {"config": "grpo_tiny"}, "expect": [{"completes": True}]}


def _scenario(health: dict) -> None:
    doc = {**BASE, "cluster": {**BASE["cluster"], "health": health}}
    read(yaml.safe_dump(doc), Path(tempfile.gettempdir()) / "health.yaml")


@pytest.mark.parametrize("field, value, words", [
    ("failure_threshold", "3", "'3' is quoted (text), not a whole number: drop the quotes"),
    ("failure_threshold", True, "true is true/false, not a whole number"),
    ("failure_threshold", 3.0, "3.0 is a float, not a whole number"),
    ("failure_threshold", 1_000_000, "1000000 is outside 1-100 failed checks"),
    ("failure_threshold", 0, "0 is outside 1-100"),
    ("initial_delay_ms", 1e11, "100000000000.0 is a float"),
    ("initial_delay_ms", 10**11, "100000000000 is outside 0-60000 ms"),
    ("initial_delay_ms", -1, "-1 is outside 0-60000 ms"),
    ("timeout_ms", "1e4", "'1e4' is text, not a whole number"),
    ("timeout_ms", [1000], "a list is not a number"),
    ("period_ms", None, "None is not a number"),
])
def test_a_bad_field_is_refused_naming_it_and_the_fix(field, value, words):
    with pytest.raises(ScenarioError) as e:
        _scenario({field: value})
    said = str(e.value)
    assert f"cluster.health.{field}: {words}" in said, said
    assert "fix: write a whole number from" in said and f"e.g. {field}: " in said, said
    with pytest.raises(ValidationError, match=field):  # the spec a CLI or fixture builds, too
        ClusterSpec(health={field: value})


def test_a_number_too_long_to_print_is_told_by_its_length():
    """Python refuses to print an int of more than 4300 digits: the message counts them."""
    with pytest.raises(ValidationError) as e:
        HealthChecks(period_ms=10**4000)
    assert "a number of about 4000 digits is outside 50-60000 ms" in str(e.value)


def test_fields_that_together_wait_too_long_are_refused_with_the_sum():
    with pytest.raises(ScenarioError) as e:
        _scenario({"failure_threshold": 99, "period_ms": 5000})
    said = " ".join(str(e.value).split())
    assert "cluster.health: a dead node would be declared dead only after up to 607 s" in said
    assert f"at most {DEAD_WITHIN_MAX_S:.0f} s. Fix: lower failure_threshold" in said, said


@pytest.mark.parametrize("health", [
    {}, RAY_DEFAULTS, {"failure_threshold": 6},  # the catalogue's
    {"initial_delay_ms": 0, "period_ms": 50, "timeout_ms": 50, "failure_threshold": 1},
    {"initial_delay_ms": 60_000, "period_ms": 5000, "timeout_ms": 5000, "failure_threshold": 50},
])
def test_readable_values_are_taken(health):
    _scenario(health)
    assert HealthChecks(**health).dead_within_s() <= DEAD_WITHIN_MAX_S


def test_the_wait_for_a_dead_node_follows_the_settings_and_is_capped():
    assert HealthChecks().dead_within_s() == (1000 + (300 + 1000) * 5) / 1000
    assert HealthChecks(**RAY_DEFAULTS).dead_within_s() == 96.0
    assert dead_wait_s(HealthChecks(), ready_timeout_s=60) == 60  # the node's start bounds it
    assert dead_wait_s(HealthChecks(**RAY_DEFAULTS), ready_timeout_s=60) == 96.0
    # settings no validator saw (built around it) are capped, not read at face value
    huge = HealthChecks.model_construct(initial_delay_ms=10**11, period_ms=300, timeout_ms=1000,
                                        failure_threshold=10**6)
    assert dead_wait_s(huge, ready_timeout_s=60) == DEAD_WITHIN_MAX_S
