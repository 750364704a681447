"""Generated input for the scenario loader: random YAML documents, random bytes, YAML-ish text and
mutations of the shipped scenarios. Whatever comes in, ``load`` returns a valid Scenario or raises
:class:`ScenarioError` whose every line names the file; never another exception."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.scenario.loader import ScenarioError, discover, load
from rlsim.scenario.schema import Scenario

ROOT = Path(__file__).parents[2]
SHIPPED = [p.read_bytes() for p in discover(ROOT / "scenarios")]
BASE = {"name": "s", "trainer": {"config": "grpo_tiny"},
        "expect": [{"completes": {}}]}
ODD = ["[/oops]", "[red]", "&a", "*a", "!!python/object", "<<", "node", "random", "step",
       "event", "for_s", "at", "faults", "cluster", "overrides", "gcs", "workers:9", "", " ", "\t",
       "é", "\u2028", "\x85", "%", "@", "`"]
KEYS = st.one_of(st.sampled_from(ODD), st.text(max_size=8))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD), st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=20)
YAMLISH = st.text(alphabet="{}[]:,-&*!|>?'\"#%@`\\\n\t ab01.e+~", max_size=200)

SETTINGS = settings(max_examples=60, deadline=timedelta(seconds=5),
                    suppress_health_check=[HealthCheck.too_slow])


def contract(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gen.yaml"
        path.write_bytes(content)
        try:
            result = load(path)
        except ScenarioError as e:
            lines = str(e).splitlines()
            assert lines, "an empty message"
            for line in lines:
                assert line.startswith(f"{path}:"), line
            return
        assert isinstance(result, Scenario)


def dump(value) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode()


@SETTINGS
@given(VALUES)
def test_any_yaml_document(value):
    contract(dump(value))


@SETTINGS
@given(st.sampled_from(["cluster", "trainer", "faults", "expect", "seed", "tags"]), VALUES)
def test_any_value_in_a_valid_scenario(key, value):
    """Deep into the schema: one section of an otherwise valid scenario replaced."""
    contract(dump({**BASE, key: value}))


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes(data):
    contract(data)


@SETTINGS
@given(YAMLISH)
def test_yaml_punctuation(text):
    contract(text.encode())


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SHIPPED)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["delete", "insert", "flip", "duplicate"]))
        if op == "delete":
            del data[at:at + draw(st.integers(1, 40))]
        elif op == "insert":
            data[at:at] = draw(st.one_of(YAMLISH.map(str.encode), st.binary(max_size=8)))
        elif op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        else:
            line_start = data.rfind(b"\n", 0, at) + 1
            line_end = data.find(b"\n", at)
            line_end = len(data) if line_end < 0 else line_end + 1
            data[line_end:line_end] = data[line_start:line_end]
    return bytes(data)


@SETTINGS
@given(mutated())
def test_mutated_shipped_scenarios(content):
    contract(content)
