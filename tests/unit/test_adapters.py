"""Adapters as data: how a scenario's trainer section becomes a command, and the event writer a
trainer of the user's own calls (rlsim.events)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.adapters import ADAPTERS, TrainerLaunch
from rlsim.adapters.base import placeholder_problem
from rlsim.events import EventLog
from rlsim.scenario.runner import trainer_command
from rlsim.scenario.schema import Scenario

LAUNCH = TrainerLaunch(python="/py", run_dir=Path("/out/run"), attempt=2,
                       ray_address="127.77.0.10:1")


def scenario(trainer: dict) -> Scenario:
    return Scenario.model_validate({"name": "s", "trainer": trainer, "expect": [{"completes": {}}]})


def test_a_command_gets_its_placeholders_filled_and_the_rest_as_written():
    sc = scenario({"adapter": "events", "command": ["{python}", "t.py", "--dir={run_dir}",
                                                      "{attempt}", "{ray_address}", "{{x}}"]})
    assert ADAPTERS["events"].command(sc.trainer, LAUNCH) == [
        "/py", "t.py", "--dir=/out/run", "2", "127.77.0.10:1", "{x}"]


def test_the_reference_trainer_runs_through_the_same_registry():
    sc = scenario({"config": "grpo_tiny", "overrides": {"save_freq": 5}})
    assert sc.trainer.adapter == "rlsim"
    cmd = trainer_command(sc, Path("/out/run"))
    assert cmd[1:3] == ["-m", "trainer"] and cmd[4].endswith("grpo_tiny")
    assert cmd[5:] == ["run_dir=/out/run", "save_freq=5"]


@pytest.mark.parametrize("arg,problem", [
    ("{python}", None), ("plain", None), ("{{literal}}", None),
    ("{rundir}", "unknown placeholder {rundir}"), ("{run_dir", "expected '}'"),
])
def test_placeholders_are_checked_before_anything_runs(arg, problem):
    found = placeholder_problem(arg)
    assert (found is None) if problem is None else (problem in found)


def test_the_event_writer_appends_what_the_checks_read(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("RLSIM_ATTEMPT", "1")
    log = EventLog()
    log.emit("resume", from_step=3)
    log.emit("step_end", step=4, metrics={"train/loss": 0.5})
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["type"], r["attempt"]) for r in rows] == [("resume", 1), ("step_end", 1)]
    assert rows[0]["from_step"] == 3 and rows[1]["metrics"] == {"train/loss": 0.5}
    with pytest.raises(ValueError, match="unknown event type 'stepend'"):
        log.emit("stepend", step=1)


def test_the_event_writer_names_the_setting_it_lacks(monkeypatch):
    monkeypatch.delenv("RLSIM_RUN_DIR", raising=False)
    with pytest.raises(ValueError, match="RLSIM_RUN_DIR"):
        EventLog()


def test_ray_is_watched_for_own_trainers_and_where_a_scenario_names_its_events():
    own = scenario({"adapter": "events", "command": ["/bin/true"]})
    ours = scenario({"config": "grpo_tiny"})
    named = Scenario.model_validate({"name": "s", "trainer": {"config": "x.yaml"},
                                     "expect": [{"event": "ray_node_dead"}]})
    assert (own.watches_ray, ours.watches_ray, named.watches_ray) == (True, False, True)


def test_attempt_in_an_override_is_the_launchs_number(tmp_path):
    """What a user changed before relaunching (the data): ``{attempt}`` in a string override,
    at any depth, is 0 for the first launch and n for the n-th relaunch."""
    from rlsim.adapters.rlsim import overrides
    from rlsim.scenario.schema import TrainerSection

    trainer = TrainerSection(config="grpo_tiny", overrides={
        "data": {"path": "data/prompts-{attempt}.jsonl"}, "save_freq": 2})
    assert overrides(trainer) == ['data={"path": "data/prompts-0.jsonl"}', "save_freq=2"]
    assert overrides(trainer, 1)[0] == 'data={"path": "data/prompts-1.jsonl"}'


def test_the_checkpoints_record_of_its_data_tells_changed_prompts_from_reformatted():
    import numpy as np

    from trainer.data import fingerprint

    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    same = fingerprint("a.jsonl", a.copy())
    assert fingerprint("b.jsonl", a)["sha256"] == same["sha256"]  # the tokens, not the file
    assert fingerprint("a.jsonl", a[::-1])["sha256"] != same["sha256"]
    assert fingerprint("a.jsonl", a[:1])["prompts"] == 1
