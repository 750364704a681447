"""Goodput (rlsim.goodput and the ``goodput`` check) and blame (the ``blamed`` check), judged on
timelines recorded from real runs of the catalogue (tests/fixtures/timelines) and on small ones
built to fail."""

from __future__ import annotations

import json
from pathlib import Path

from rlsim.checks import CHECKS
from rlsim.goodput import measure, of_outcome
from rlsim.history import Outcome

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "timelines"


def recorded(name: str, twin: bool = False, tmp_path: Path | None = None) -> Outcome:
    rows = [json.loads(x) for x in (RECORDED / f"{name}.jsonl").read_text().splitlines()]
    o = Outcome(scenario=None, run_dir=Path("."), timeline=rows, started=rows[0]["ts"])
    if twin:
        (tmp_path / "events.jsonl").write_bytes((RECORDED / f"{name}.twin.jsonl").read_bytes())
        o.baseline_dir = tmp_path
    return o


def judge(name: str, o: Outcome, value):
    check = CHECKS[name]
    return check.judge(o, check.params(value))


def steps(*spans, attempt=0, start=0.0):
    """A launch's events: run_start at ``start``, then a step_end after each span."""
    out, t = [{"ts": start, "type": "run_start", "attempt": attempt}], start
    for step, span in spans:
        t += span
        out.append({"ts": t, "type": "step_end", "step": step, "attempt": attempt})
    return out


def test_a_clean_run_is_its_steps_and_a_redone_step_counts_once():
    clean = measure(steps((1, 1.0), (2, 1.0), (3, 1.0)))
    assert clean == {"wall_s": 3.0, "productive_s": 3.0, "goodput": 1.0, "steps": 3,
                     "redone": 0}
    # steps 1-3, lost at 3; relaunched after 2 s, resumed from step 1 (1 s to load), 2-3 again,
    # step 2 slower the second time: the kept run of a step is its last
    resumed = steps((1, 1.0), (2, 1.0), (3, 1.0)) + [
        {"ts": 5.0, "type": "run_start", "attempt": 1},
        {"ts": 6.0, "type": "resume", "from_step": 1, "attempt": 1}] + \
        steps((2, 2.0), (3, 1.0), attempt=1, start=6.0)[1:]
    g = measure(resumed)
    assert g["wall_s"] == 9.0 and g["productive_s"] == 4.0 and g["redone"] == 2
    assert g["goodput"] == 0.4444


def test_the_recorded_node_loss_lost_time_against_its_twin(tmp_path):
    g = of_outcome(recorded("node_failure_mid_run", twin=True, tmp_path=tmp_path))
    assert g["steps"] == 20 and g["redone"] == 2  # lost at step 7, resumed from step 5
    assert 0 < g["goodput"] < g["twin_goodput"] <= 1
    assert g["vs_twin"] > 1 and g["lost_per_fault_s"] == g["lost_s"] > 0


def test_the_goodput_check_holds_to_its_bound_and_says_the_figures(tmp_path):
    o = recorded("node_failure_mid_run", twin=True, tmp_path=tmp_path)
    g = of_outcome(o)["goodput"]
    assert judge("goodput", o, g).ok and judge("goodput", o, {"min": g}).value == g
    low = judge("goodput", o, min(g + 0.05, 1.0))
    assert not low.ok and "redone after a resume" in low.message and "twin" in low.message
    none = Outcome(scenario=None, run_dir=Path("."), timeline=[])
    assert not judge("goodput", none, 0.1).ok


def test_the_recorded_kills_are_blamed_on_what_they_hit():
    v = judge("blamed", recorded("node_failure_mid_run"), 0)
    assert v.ok and "127.77.0.11" in v.message and v.value < 5
    v = judge("blamed", recorded("actor_killed_by_class"), {"fault": 0})
    assert v.ok and ("pid" in v.message or "127.77.0.11" in v.message)


def _blame(said: dict) -> Outcome:
    fault = {"ts": 1.0, "source": "rlsim", "type": "fault_injected", "fault": "kill_role",
             "index": 0, "disruptive": True, "role": "rollout", "rank": 0, "pid": 4242,
             "ip": "127.77.0.11"}
    return Outcome(scenario=None, run_dir=Path("."), started=0.0, timeline=[
        fault, {"ts": 2.0, "source": "trainer", **said}])


def test_a_trainer_that_names_nothing_or_the_wrong_node_is_not_blaming_right():
    vague = judge("blamed", _blame({"type": "worker_died", "message": "a worker died"}), 0)
    assert not vague.ok and "named none of what it hit (127.77.0.11, pid 4242, rollout rank 0)" \
        in vague.message
    wrong = judge("blamed", _blame({"type": "node_lost", "ip": "127.77.0.12"}), 0)
    assert not wrong.ok and "named 127.77.0.12, not what the fault hit" in wrong.message
    by_rank = judge("blamed", _blame({"type": "error", "message": "rollout rank 0 timed out"}), 0)
    assert by_rank.ok and "rollout rank 0" in by_rank.message
    not_10 = judge("blamed", _blame({"type": "error", "message": "rollout rank 10 died"}), 0)
    assert not not_10.ok
    unfired = Outcome(scenario=None, run_dir=Path("."), timeline=[])
    assert "never fired" in judge("blamed", unfired, 0).message


def test_blaming_a_fault_the_scenario_does_not_have_is_refused_when_read(tmp_path):
    import pytest

    from rlsim.scenario.loader import ScenarioError, load

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ncluster: {nodes: 2, gpus_per_node: 1}\ntrainer: {config: "
                    "grpo_tiny}\nfaults:\n  - at: {step: 2}\n    kill_node: {node: 1}\n"
                    "expect:\n  - blamed: {fault: 1}\n")
    with pytest.raises(ScenarioError, match=r"no faults\[1\] to blame; name one of 0..0"):
        load(path)


def test_fails_says_a_run_that_went_on_to_exit_0_after_an_error_did_not_fail():
    """A first launch that failed and a relaunch that completed is no failure: the verdict says
    the last launch exited 0, not that the trainer failed with the wrong error."""
    o = Outcome(scenario=None, run_dir=Path("."), returncode=0, started=0.0, timeline=[
        {"ts": 1.0, "source": "trainer", "type": "error", "kind": "worker_died",
         "message": "actor rank 1 died"}])
    v = judge("fails", o, {"pattern": "data_changed"})
    assert not v.ok and "last launch exited 0" in v.message and "worker_died" in v.message
    o.returncode = 2
    assert "failed, but not with 'data_changed'" in judge("fails", o, "data_changed").message
