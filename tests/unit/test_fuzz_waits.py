"""Property-based fuzzing of the values that set a wait (as ``test_fuzz_new_surfaces`` fuzzes
other surfaces): ``cluster.health`` in a scenario and ``RLSIM_HOLD_STEPS`` in a trainer's
environment. The property, for each: taken, and then the wait it sets is within its bound
(600 s to declare a node dead, steps 0-10^9), or refused with a message naming the field or
variable and the fix; never a traceback, Python's own integer-limit message, or a wait read at
face value.

Bounded for the gate (the ``rlsim-gate`` profile); ``--rlsim-slow`` runs ``rlsim-slow``."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.events import HOLD_STEP_MAX, hold_steps
from rlsim.host.health import DEAD_WITHIN_MAX_S, LIMITS
from rlsim.scenario.loader import ScenarioError, read

FUZZ = settings(deadline=timedelta(seconds=10), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

ODD = ["", " ", "3", " 3", "3.0", "1e11", "1.0e11", "0x10", "-1", "nan", ".inf", "true", "²",
       "1_000", "٣"]
NUMBERS = st.one_of(st.integers(-10, 10**12), st.sampled_from([0, 1, 49, 50, 100, 101, 60_000,
                                                                60_001, 10**6, 10**11]))
HEALTH_VALUES = st.one_of(NUMBERS, st.booleans(), st.none(), st.floats(), st.sampled_from(ODD),
                          st.text(max_size=6), st.lists(NUMBERS, max_size=2))
BASE = ("name: s\ncluster: {nodes: 2, gpus_per_node: 1}\n"
        "trainer: {config: grpo_tiny}\nexpect: [{completes: true}]\n")


@FUZZ
@given(st.dictionaries(st.sampled_from([*LIMITS, "failure_thresold", "period"]), HEALTH_VALUES,
                       max_size=4))
def test_cluster_health(health):
    text = BASE.replace("gpus_per_node: 1}", "gpus_per_node: 1, health: "
                        + yaml.safe_dump(health, default_flow_style=True, width=10**6).strip()
                        + "}")
    try:
        sc = read(text, Path(tempfile.gettempdir()) / "fuzz-health.yaml")
    except ScenarioError as e:
        said = str(e)
        assert "cluster.health" in said and "Traceback" not in said, said
        assert "integer string conversion" not in said, said
        return
    h = sc.cluster.health
    assert h.dead_within_s() <= DEAD_WITHIN_MAX_S
    for name, (least, most, _, _) in LIMITS.items():
        value = getattr(h, name)
        assert type(value) is int and least <= value <= most, (name, value)


HOLD_TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.integers(-5, 2 * HOLD_STEP_MAX), st.sampled_from(ODD)),
             max_size=6).map(lambda xs: ",".join(map(str, xs))),
    st.integers(1, 6000).map(lambda n: "7" * n),
    st.integers(1, 3).map(lambda n: "1," * (50_000 * n)),
)


@FUZZ
@given(HOLD_TEXT)
def test_hold_steps(raw):
    try:
        steps = hold_steps(raw)
    except ValueError as e:
        said = str(e)
        assert said.startswith("RLSIM_HOLD_STEPS") and "fix: " in said, said
        assert "integer string conversion" not in said and len(said) < 600, said
        return
    assert steps == sorted(set(steps))
    assert all(type(s) is int and 0 <= s <= HOLD_STEP_MAX for s in steps), steps
