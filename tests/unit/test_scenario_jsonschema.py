"""The scenario files' JSON Schema (``rlsim schema``): generated from the models that read a
scenario, it accepts every catalogue scenario and what ``rlsim init`` writes, rejects the bad
inputs ``rlsim validate`` rejects (the shape half of them: the cluster- and trainer-dependent half
is validate's alone), and the copy shipped in the package is what the code generates now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.scenario.jsonschema import SHIPPED, scenario_schema, text
from rlsim.scenario.loader import ScenarioError, read

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = Draft202012Validator(scenario_schema())
BASE = {"name": "x", "trainer": {"config": "grpo_tiny"}, "expect": [{"completes": True}]}


def test_the_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(scenario_schema())


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_catalogue_scenario_validates(path):
    errors = [f"{list(e.path)}: {e.message[:200]}"
              for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


BAD = {
    "an unknown section": {**BASE, "faultz": []},
    "an unknown fault": {**BASE, "faults": [{"at": {"step": 1}, "kill_nodes": {"node": 1}}]},
    "two faults in one entry": {**BASE, "faults": [
        {"at": {"step": 1}, "kill_node": {"node": 1}, "pause_node": {"node": 1}}]},
    "an entry without a fault": {**BASE, "faults": [{"at": {"step": 1}}]},
    "a fault without when": {**BASE, "faults": [{"kill_node": {"node": 1}}]},
    "a parameter of the wrong type": {**BASE, "faults": [
        {"at": {"step": 1}, "kill_node": {"node": "one"}}]},
    "a misspelt parameter": {**BASE, "faults": [{"at": {"step": 1}, "kill_node": {"nod": 1}}]},
    "a negative for_s": {**BASE, "faults": [
        {"at": {"step": 1}, "pause_node": {"node": 1}, "for_s": -1}]},
    "an unknown check": {**BASE, "expect": [{"completed": True}]},
    "a shorthand of the wrong type": {**BASE, "expect": [{"restarts": "one"}]},
    "two checks in one entry": {**BASE, "expect": [{"completes": True, "restarts": 0}]},
    "no trainer": {"name": "x", "expect": [{"completes": True}]},
    "a name with spaces": {**BASE, "name": "Bad Name"},
    "no expectation": {**BASE, "expect": []},
    "a loss over 100%": {**BASE, "faults": [
        {"at": {"step": 1}, "degrade_link": {"nodes": [1], "loss_pct": 101}}]},
}


@pytest.mark.parametrize("doc", BAD.values(), ids=BAD.keys())
def test_bad_input_is_rejected_by_the_schema_as_by_validate(doc, tmp_path):
    assert list(VALIDATOR.iter_errors(doc)), "the schema accepted it"
    with pytest.raises(ScenarioError):
        read(yaml.safe_dump(doc), tmp_path / "bad.yaml")


def test_shorthands_and_long_forms_both_validate():
    doc = {**BASE, "expect": [{"restarts": 1}, {"restarts": {"min": 1}}, {"completes": {}},
                              {"detected_within_s": 10}, {"fails": "ResourceTimeout"},
                              {"throughput_within": {"ratio": 0.8, "after": 0.5}}]}
    assert list(VALIDATOR.iter_errors(doc)) == []


def test_the_shipped_schema_is_what_the_code_generates():
    assert SHIPPED.read_text() == text(), (
        "rlsim/scenario/scenario.schema.json is stale: regenerate it with "
        "`rlsim schema --out rlsim/scenario/scenario.schema.json`")


def test_rlsim_schema_prints_it_and_writes_it(tmp_path):
    printed = CliRunner().invoke(cli.app, ["schema"])
    assert printed.exit_code == 0 and json.loads(printed.output) == json.loads(text())
    wrote = CliRunner().invoke(cli.app, ["schema", "--out", str(tmp_path / "s.json")])
    assert wrote.exit_code == 0 and (tmp_path / "s.json").read_text() == text()


def test_init_writes_the_schema_and_points_its_scenarios_at_it(tmp_path):
    done = CliRunner().invoke(cli.app, ["init", str(tmp_path / "p")])
    assert done.exit_code == 0, done.output
    schema = tmp_path / "p" / ".rlsim" / "scenario.schema.json"
    validator = Draft202012Validator(json.loads(schema.read_text()))
    for scenario in (tmp_path / "p" / "scenarios").glob("*.yaml"):
        first = scenario.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../.rlsim/scenario.schema.json"
        assert (scenario.parent / first.split("=", 1)[1]).resolve() == schema.resolve()
        assert list(validator.iter_errors(yaml.safe_load(scenario.read_text()))) == []
