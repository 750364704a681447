"""Failures users reported in 2026, as their reported code would run them. The catalogue's
scenarios run the fixed trainer and pass; here the same scenarios run the reported behaviour,
and rlsim must fail them, naming what was hit.

- verl-omni#433: a rollout engine dies where the error is swallowed, so the trainer waits
  forever in its replay buffer's ``sample()`` (``WAIT=forever``): failed in seconds, not at a CI
  timeout, naming the dead engine.
- modal training-gym PR#307 (slime): an early health probe kills a slow-starting engine for
  good. engine_start_slow with no restart left (``max_restarts: 0``) is that code: its run
  fails on the rollout's start, and the failure names the rollout rank and its node.
- ROLL#348: two jobs on one machine, one ending with ``ray stop --force``. As the catalogue's
  neighbour_job_ended tells it (another user's job), the trainer is untouched: every one of its
  cluster's processes that the ``ray stop`` reached for refused it. As the same user (the
  report) it would kill the trainer's cluster, and every other Ray cluster of that user on the
  machine, so the fault refuses that user and nothing here plays it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rlsim.scenario.loader import load
from rlsim.scenario.runner import play

pytestmark = [pytest.mark.integration]

CATALOGUE = Path(__file__).resolve().parents[2] / "scenarios"


def test_the_swallowed_engine_error_fails_in_seconds_naming_the_engine(tmp_path):
    (tmp_path / "trainers").mkdir()
    shutil.copy(CATALOGUE / "trainers" / "replay_buffer.py", tmp_path / "trainers")
    text = (CATALOGUE / "engine_error_swallowed.yaml").read_text()
    assert "WAIT: bounded" in text
    (tmp_path / "s.yaml").write_text(text.replace("WAIT: bounded", "WAIT: forever"))
    result = play(load(tmp_path / "s.yaml"), tmp_path / "out")
    assert not result.ok
    verdicts = {v.check: v for v in result.checks}
    progress = verdicts["progress_within_s"]
    assert not progress.ok and "what died in it: Engine (pid " in progress.message, \
        progress.message
    assert not verdicts["completes"].ok and not verdicts["blamed"].ok  # the trainer said nothing
    timeline = result.outcome.timeline
    fault = next(e for e in timeline if e["type"] == "fault_injected")
    stalled = next(e for e in timeline if e["type"] == "trainer_stalled")
    assert stalled["ts"] - fault["ts"] < 30, stalled  # rlsim's watchdog, not a CI timeout


def test_an_early_probe_that_gives_up_for_good_fails_naming_the_slow_engine(tmp_path):
    text = (CATALOGUE / "engine_start_slow.yaml").read_text()
    assert "fault_tolerance: {init_timeout_s: 6}" in text
    (tmp_path / "s.yaml").write_text(text.replace(
        "fault_tolerance: {init_timeout_s: 6}",
        "fault_tolerance: {init_timeout_s: 6, max_restarts: 0}"))
    result = play(load(tmp_path / "s.yaml"), tmp_path / "out")
    assert not result.ok
    verdicts = {v.check: v for v in result.checks}
    assert not verdicts["completes"].ok and not verdicts["restarts"].ok
    assert verdicts["blamed"].ok, verdicts["blamed"].message  # it says which, then gives up
    error = next(e for e in result.outcome.timeline
                 if e["type"] == "error" and e.get("source") == "trainer")
    # the rollout's set-up never returned (Ray 2.48: its placement group's readiness check)
    assert error["kind"] == "start_timeout" and "rollout rank 0" in error["message"], error


@pytest.mark.root
@pytest.mark.slow  # the catalogue's neighbour_job_ended is the gate's
def test_another_users_job_ending_with_ray_stop_leaves_the_trainer_untouched(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the other user's job is started as that user: root only")
    result = play(load(CATALOGUE / "neighbour_job_ended.yaml"), tmp_path / "out")
    assert result.ok, {v.check: v.message for v in result.checks}
    ended = next(e for e in result.outcome.timeline if e["type"] == "fault_injected")
    said = ended["ray_stop"]
    # it stopped its own job's Ray, and reached for this cluster's processes in vain
    assert said["stopped"] > 0 and said["refused_of_this_cluster"] > 0, ended
    assert ended["job_tasks"] > 0 and not ended["gone"], ended


@pytest.mark.slow
def test_a_start_slow_every_time_fails_after_its_restarts_without_a_reconnect(tmp_path):
    """Every start on the rollout's node slow (the fault never healed): each attempt times out
    naming the rollout, the run fails once its restarts are spent, and the driver never
    reconnects as if Ray had lost its job (one slow start among workers that answered is no
    sign of that)."""
    text = (CATALOGUE / "engine_start_slow.yaml").read_text()
    assert "    heal_at: {event: restart}\n" in text
    assert "slow_start: {node: 1, seconds: 300}" in text  # far longer than three attempts
    text = text.replace("    heal_at: {event: restart}\n", "").replace(
        "fault_tolerance: {init_timeout_s: 6}", "fault_tolerance: {init_timeout_s: 6, "
        "max_restarts: 2}")
    (tmp_path / "s.yaml").write_text(text)
    result = play(load(tmp_path / "s.yaml"), tmp_path / "out")
    timeline = result.outcome.timeline
    restarts = [e for e in timeline if e["type"] == "restart" and e.get("source") == "trainer"]
    assert [e["cause"] for e in restarts] == ["start_timeout", "start_timeout"], restarts
    assert not [e for e in timeline if e["type"] == "driver_reconnected"]
    error = next(e for e in timeline if e["type"] == "error" and e.get("source") == "trainer")
    assert error["kind"] == "start_timeout" and "rollout rank 0" in error["message"], error
