"""A failure users reported in 2026, as its reported code would run it: verl-omni#433, a rollout
engine that dies where the error is swallowed, so the trainer waits forever in its replay
buffer's ``sample()``. The catalogue's engine_error_swallowed runs the fixed trainer (a bounded
``sample()``) and passes; here the same scenario runs the reported code (``WAIT=forever``) and
rlsim must fail it in seconds, not at a CI timeout, naming the dead engine."""

from __future__ import annotations

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
