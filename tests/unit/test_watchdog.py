"""The progress watchdog's rule (rlsim.scenario.watchdog), as data: when a trainer that went
silent after a fault is ended, and when it is left alone; and how the verdict says it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsim.checks import Completes, WithinS, completes, detected_within_s
from rlsim.history import Outcome
from rlsim.scenario.loader import read
from rlsim.scenario.watchdog import DEFAULT_S, Watchdog


def test_a_trainer_silent_after_a_fault_is_ended_past_the_bound():
    dog = Watchdog(45)
    dog.launch(0)
    dog.sign(10)  # a step
    dog.fault(20)
    assert dog.silent_s(64) is None  # within 45 s of the fault
    assert dog.silent_s(66) == pytest.approx(46)


def test_progress_after_the_fault_restarts_the_clock():
    dog = Watchdog(45)
    dog.launch(0)
    dog.sign(10)
    dog.fault(20)
    dog.sign(50)  # it noticed, or stepped on
    assert dog.silent_s(90) is None
    assert dog.silent_s(96) == pytest.approx(46)


def test_no_fault_no_watchdog():
    dog = Watchdog(45)
    dog.launch(0)
    dog.sign(1)
    assert dog.silent_s(10_000) is None  # a slow trainer: timeout_s's business


def test_a_relaunch_starting_up_is_not_judged_until_its_first_event():
    dog = Watchdog(45)
    dog.launch(0)
    dog.sign(5)
    dog.fault(10)
    dog.launch(12)  # the trainer exited and was launched again: importing, placing, loading
    assert dog.silent_s(300) is None
    dog.sign(300)  # its first step
    assert dog.silent_s(346) == pytest.approx(46)


def test_null_turns_it_off():
    dog = Watchdog(None)
    dog.launch(0)
    dog.sign(1)
    dog.fault(2)
    assert dog.silent_s(1e9) is None


def test_the_scenario_key_defaults_and_is_bounded(tmp_path):
    base = ("name: s\ncluster: {nodes: 2, gpus_per_node: 1}\ntrainer: {config: grpo_tiny%s}\n"
            "expect: [completes: true]\n")
    def watchdog(extra: str):
        return read(base % extra, tmp_path / "s.yaml").trainer.progress_watchdog_s

    assert watchdog("") == DEFAULT_S == 45
    assert watchdog(", progress_watchdog_s: 120") == 120
    assert watchdog(", progress_watchdog_s: null") is None
    for bad in ("1", "'45'", "true", "1e12"):
        with pytest.raises(ValueError, match="progress_watchdog_s"):
            watchdog(f", progress_watchdog_s: {bad}")


def test_completes_names_the_stall_and_what_it_waits_on():
    stalled = {"ts": 5.0, "source": "rlsim", "type": "trainer_stalled", "seconds": 45.3,
               "bound_s": 45, "fault": "restart_node (faults[0])",
               "last_lines": ["step 3", "pending: 0, running: 2, finished: 0, failure: 6"],
               "down": {"1": "restart_node (faults[0])"},
               "on_dead_nodes": "node 1 (vLLMHttpServer x2)", "unplaced": None,
               "died": "node 1 (AgentLoopWorkerTQ, WorkerDict x2)",
               "alive": "node 0 (TaskRunnerV1)"}
    o = Outcome(SimpleNamespace(name="s"), Path("."), [stalled], returncode=-9)
    v = completes(o, Completes())
    assert not v.ok
    assert v.message == (
        "the trainer stalled after restart_node (faults[0]): no progress for 45.3 s "
        "(trainer.progress_watchdog_s: 45), so the run was ended; its actors that died since: "
        "node 1 (AgentLoopWorkerTQ, WorkerDict x2); alive and waiting: node 0 (TaskRunnerV1); "
        "Ray still held of it on dead nodes: node 1 (vLLMHttpServer x2); its last line: "
        "pending: 0, running: 2, finished: 0, failure: 6"), v.message


def test_a_stall_relaunched_is_not_the_trainer_noticing_and_completes_says_it():
    """relaunch.on_stall: the watchdog killed the first launch (exit -9) and the relaunch
    completed. The kill is the harness's doing: detection is not timed from it; completes passes
    and says the run went through a stall."""
    def ev(ts, type_, **kw):
        return {"ts": ts, "source": "rlsim", "type": type_, **kw}

    timeline = [
        ev(0.0, "trainer_started", attempt=0),
        ev(10.0, "fault_injected", fault="restart_node", index=0, disruptive=True),
        ev(40.5, "trainer_stalled", seconds=30.1, bound_s=30, fault="restart_node (faults[0])",
           relaunched=True, last_lines=["pending: 0, running: 2"]),
        ev(40.7, "trainer_exited", attempt=0, returncode=-9),
        ev(41.0, "trainer_started", attempt=1),
        ev(300.0, "trainer_exited", attempt=1, returncode=0),
        {"ts": 299.0, "source": "trainer", "type": "run_end", "status": "completed"},
    ]
    o = Outcome(SimpleNamespace(name="s"), Path("."), timeline, returncode=0)
    done = completes(o, Completes())
    assert done.ok and "after 1 relaunch(es) of a stalled launch" in done.message, done.message
    assert "so the launch was killed and relaunched (relaunch.on_stall)" in done.message
    seen = detected_within_s(o, WithinS(seconds=60))
    assert not seen.ok and seen.message.startswith(
        "the trainer never reported the restart_node"), seen.message
    assert "no progress for 30.1 s" in seen.message
