"""A plain program (``adapter: plain``: a Ray script, Ray Data, Tune; it writes no rlsim events) is
a first-class trainer: it completes by exiting 0, its output's marks are events a fault can wait
for, and the checks and triggers that need steps are refused when the scenario is read.

The program is a real process writing its output where the runner puts it
(``trainer-<attempt>.log`` beside the run directory), read by the adapter's own event source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsim import commands as cli
from rlsim.adapters import ADAPTERS
from rlsim.checks import CHECKS
from rlsim.history import Outcome, Recorder
from rlsim.scenario.nemesis import reached
from rlsim.scenario.schema import At, Scenario

MARKS = {"tasks_running": "^chaos: tasks running"}


def scenario(adapter: str = "plain", **trainer) -> Scenario:
    return Scenario.model_validate({"name": "s", "trainer": {
        "adapter": adapter, "command": ["{python}", "job.py"], **trainer},
        "expect": [{"completes": True}]})


def launch(out: Path, attempt: int, code: str) -> int:
    """Run ``code`` as the program, its output in ``trainer-<attempt>.log``; its exit code."""
    with (out / f"trainer-{attempt}.log").open("w") as log:
        return subprocess.run([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                              timeout=60).returncode


def run(tmp_path: Path, sc: Scenario, programs: list[str]) -> Outcome:
    """The launches of ``programs`` read as the runner reads them (poll, then the exit), into an
    outcome's timeline."""
    run_dir = tmp_path / "out" / "run"
    run_dir.mkdir(parents=True)
    source = ADAPTERS[sc.trainer.adapter].events(sc.trainer, run_dir)
    o = Outcome(sc, run_dir)
    log = Recorder(o)
    for attempt, code in enumerate(programs):
        if attempt:
            log.emit("relaunch", attempt=attempt, returncode=o.returncode)
        o.returncode = launch(run_dir.parent, attempt, code)
        o.output += (run_dir.parent / f"trainer-{attempt}.log").read_text()
        for e in source.poll() + source.exited(attempt, o.returncode):
            log.trainer(e)
    return o


def judge(name: str, o: Outcome, params=True):
    return CHECKS[name](o, CHECKS[name].params(params))


def test_a_plain_program_completes_by_exiting_0_and_the_verdict_says_so(tmp_path):
    o = run(tmp_path, scenario(), ["print('every result arrived')"])
    v = judge("completes", o)
    assert v.ok, v.message
    assert "exited 0" in v.message and "exit code is the verdict" in v.message
    assert [e["type"] for e in o.trainer()] == ["run_end"]


def test_a_plain_program_that_fails_then_passes_on_a_relaunch_completes_once(tmp_path):
    o = run(tmp_path, scenario(relaunch={"max": 1}),
            ["raise SystemExit('chaos: at-least-once delivery failed: wave 3 parent 1')",
             "print('ok')"])
    assert judge("completes", o).ok
    r = judge("restarts", o, 1)
    assert r.ok and "1 of them relaunches" in r.message, r.message


def test_a_plain_program_that_exits_non_zero_does_not_complete_and_its_error_is_named(tmp_path):
    o = run(tmp_path, scenario(), ["raise KeyError('wave 3')"])
    v = judge("completes", o)
    assert not v.ok
    assert "exit 1; run_end failed): 'wave 3'" in v.message, v.message
    assert "output | KeyError: 'wave 3'" in v.evidence
    assert judge("fails", o, "KeyError").ok  # the driver's traceback is an error event


def test_a_program_that_writes_no_events_under_adapter_events_is_pointed_at_plain(tmp_path):
    o = run(tmp_path, scenario("events"), ["print('done')"])
    v = judge("completes", o)
    assert not v.ok
    assert "wrote no rlsim events" in v.message and "adapter: plain" in v.message, v.message


def test_a_mark_is_an_event_once_per_launch_and_a_fault_waits_for_it(tmp_path):
    sc = scenario(marks=MARKS, relaunch={"max": 1})
    program = ("import sys\nprint('starting')\nprint('chaos: tasks running (14 per wave)')\n"
               "print('chaos: tasks running again')\nsys.exit({rc})")
    o = run(tmp_path, sc, [program.format(rc=1), program.format(rc=0)])
    marks = [(e["attempt"], e["line"]) for e in o.trainer("tasks_running")]
    assert marks == [(0, "chaos: tasks running (14 per wave)"),
                     (1, "chaos: tasks running (14 per wave)")]
    at = At(event="tasks_running")
    assert reached(at, o.trainer(), elapsed=0.0)
    assert not reached(at, o.trainer("run_end"), elapsed=0.0)


# -- refused when read: each exits 2 with one line naming the field, why and the fix ---------------
PLAIN = "trainer: {adapter: plain, command: [/bin/true]}\n"
REFUSED = [
    ("a check that needs steps", PLAIN + "expect: [{completes: true}, {final_step: 10}]\n",
     [":3: expect[1]: check final_step needs step_end, which adapter plain cannot observe",
      "a plain program writes no rlsim events", "drop the check",
      "use adapter events"]),
    ("a check that needs the twin's metrics",
     PLAIN + "expect: [{completes: true}, {matches_baseline: true}]\n",
     [":3: expect[1]: check matches_baseline needs metrics.jsonl, which adapter plain"]),
    ("a check that needs a resume", PLAIN + "expect: [{resumed_from_step: 3}]\n",
     [":3: expect[0]: check resumed_from_step needs resume"]),
    ("a fault at a step",
     PLAIN + "faults:\n  - at: {step: 3}\n    restart_node: {node: 1}\nexpect: [completes: true]\n",
     [":4: faults[0].at.step: the trainer never logs an event 'step_end' (adapter plain)",
      "wait on an event or seconds instead"]),
    ("total_steps", "trainer: {adapter: plain, command: [/bin/true], total_steps: 5}\n"
     "expect: [completes: true]\n",
     [":2: trainer.total_steps: a plain program (adapter plain) logs no steps", "drop"]),
    ("marks where the adapter reads none",
     "trainer: {adapter: events, command: [/bin/true], marks: {up: x}}\n"
     "expect: [completes: true]\n",
     [":2: trainer: marks: adapter events does not read marks", "adapter plain does"]),
    ("a mark that would pass for a step",
     "trainer: {adapter: plain, command: [/bin/true], marks: {step_end: x}}\n"
     "expect: [completes: true]\n",
     [":2: trainer.marks: 'step_end' is an event rlsim already knows", "name it otherwise"]),
    ("a mark that is no event name",
     "trainer: {adapter: plain, command: [/bin/true], marks: {Tasks Up: x}}\n"
     "expect: [completes: true]\n",
     [":2: trainer.marks: 'Tasks Up' is not an event name", "tasks_running"]),
]


@pytest.mark.parametrize("body,words", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_a_plain_program_cannot_show_is_refused_when_read(tmp_path, capsys, monkeypatch,
                                                               body, words):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\n" + body)
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", str(path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert e.value.code == 2, text
    assert len(text.strip().splitlines()) == 1, text
    for word in words:
        assert word in text, text


def test_the_catalogue_story_of_a_plain_program_validates(capsys):
    root = Path(__file__).resolve().parents[2]
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", str(root / "scenarios" / "ray_tasks_node_restart.yaml")])
    assert e.value.code == 0, capsys.readouterr()


def test_init_writes_a_plain_program_a_starter_it_can_run(tmp_path):
    """``rlsim init --adapter plain``: its node_lost story waits for a time, not a step the
    program never logs (the starter is read as validate reads it, or nothing is written)."""
    from typer.testing import CliRunner

    (tmp_path / "job.py").write_text("print('done')\n")
    done = CliRunner().invoke(cli.app, ["init", str(tmp_path), "--adapter", "plain",
                                        "--command", "python job.py"])
    assert done.exit_code == 0, done.output
    story = (tmp_path / "scenarios" / "node_lost.yaml").read_text()
    assert "at: {seconds: 20}" in story and "adapter: plain" in story
