"""A trainer's events read as documented (rlsim.events): every event type carrying only the fields
it must, every optional field absent, goes through the live table, every check and the report's
drawing without an error (a hand-written events.jsonl with ``step_end`` events and no
``metrics`` once ended ``rlsim run`` in a KeyError)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsim.checks import CHECKS
from rlsim.commands.scenarios import follow
from rlsim.events import EVENT_TYPES, REQUIRED
from rlsim.history import Outcome
from rlsim.report.figure import figure
from rlsim.report.lanes import story

VALUES = {"step": 3, "from_step": 2, "status": "completed", "workers": []}
# each check with parameters that make it read the events (the shorthand where it has one)
PARAMS = {"completes": True, "fails": {}, "resumed_from_step": 2, "restarts": 1,
          "replacements": 1,
          "placed_on": {"role": "actor", "nodes": [0]}, "final_step": 3,
          "detected_within_s": 5, "recovered_within_s": 5, "progress_within_s": 5,
          "matches_baseline": True, "throughput_within": 0.5, "reward_improves": {},
          "no_leaks": True, "event": {"type": "step_end", "matching": "3"}, "refused": {},
          "doctor_warns": {"pattern": "x"}, "doctor_clean": True, "faults_landed": True,
          "goodput": 0.1, "blamed": 0}


def minimal(type_: str, ts: float) -> dict:
    return {"ts": ts, "type": type_, "source": "trainer", **{f: VALUES[f] for f in REQUIRED[type_]}}


def timeline() -> list[dict]:
    events = [minimal(t, 10.0 + i) for i, t in enumerate(sorted(EVENT_TYPES))]
    return events + [{"ts": 9.0, "source": "rlsim", "type": "fault_injected", "index": 0,
                      "fault": "kill_node", "disruptive": True}]


def test_the_table_a_trainer_author_reads_names_every_type_and_its_required_fields():
    """The module's table (what an author copies from) and :data:`REQUIRED` (what the checks
    hold events to) say the same types, each with its required fields first in its row."""
    import rlsim.events as events

    table = events.__doc__.split("==================  ")[1]
    rows: dict[str, str] = {}
    for line in table.splitlines()[1:]:
        if line[:1].strip():  # a row starts at the margin; its continuation lines are indented
            name, _, text = line.partition(" ")
            rows[name] = text.strip()
        elif rows and line.strip():
            rows[list(rows)[-1]] += " " + line.strip()
    assert set(rows) == set(REQUIRED), set(rows) ^ set(REQUIRED)
    for name, fields in REQUIRED.items():
        said = rows[name].split(";")[0].split(":")[0]
        assert all(f in said for f in fields), (name, fields, rows[name])
        assert not fields or not said.startswith("optional"), (name, rows[name])
    assert all(set(f) <= set(VALUES) for f in REQUIRED.values())


def test_the_live_table_takes_every_type_with_its_required_fields_only():
    state = {"step": 0, "reward": 0.0, "faults": 0, "restarts": 0, "last": "starting"}
    for e in timeline():
        follow(state, e)
    assert state["step"] == 3 and state["reward"] == 0.0 and state["restarts"] == 1
    follow(state, {"ts": 1.0, "type": "step_end", "step": 4, "metrics": None})
    follow(state, {"ts": 1.0, "type": "step_end", "step": 5,
                   "metrics": {"rollout/reward_mean": 0.25}})
    assert state["step"] == 5 and state["reward"] == 0.25


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_check_judges_events_with_their_required_fields_only(name):
    assert name in PARAMS, f"give check {name} parameters in PARAMS"
    params = CHECKS[name].params(PARAMS[name])
    sc = SimpleNamespace(name="s", faults=[], checks=lambda: [(name, params)])
    o = Outcome(sc, Path("/nonexistent"), timeline(), returncode=0, started=5.0)
    verdict = CHECKS[name](o, params)
    assert isinstance(verdict.ok, bool) and verdict.message


def test_the_report_draws_events_with_their_required_fields_only():
    events = [{"ts": 5.0, "source": "rlsim", "type": "scenario_start"},
              {"ts": 6.0, "source": "rlsim", "type": "cluster_ready", "nodes": ["127.77.0.10"]},
              *timeline()]
    drawn = figure(story(events))
    assert drawn.data  # the steps' line and the marks
