"""The reference trainer's run logs across a kill mid-line: the next attempt's first line is whole,
so the judge reads every row of metrics.jsonl (a row never finished was never a row)."""

from __future__ import annotations

import json

import pytest

from rlsim.checks.baseline import _metrics
from rlsim.history import read_events
from trainer.events import RunLog


def _killed_mid_line(run_dir, name: str, text: str) -> None:
    with open(run_dir / name, "a") as f:
        f.write(text)  # what a SIGKILL between two writes of one line leaves


def test_a_resumed_run_after_a_kill_mid_row_is_read_whole(tmp_path):
    log = RunLog(tmp_path)
    log.metrics(1, {"loss": 0.5})
    log.close()
    _killed_mid_line(tmp_path, "metrics.jsonl", '{"step": 2, "attempt": 0, "lo')
    log = RunLog(tmp_path)
    log.attempt = 1
    log.metrics(2, {"loss": 0.25})
    log.close()
    rows, note = _metrics(tmp_path)
    assert rows == {1: {"step": 1, "loss": 0.5}, 2: {"step": 2, "loss": 0.25}}, rows
    assert note == ""


def test_a_resumed_run_after_a_kill_mid_event_keeps_every_event(tmp_path):
    log = RunLog(tmp_path)
    log.emit("run_start")
    log.close()
    _killed_mid_line(tmp_path, "events.jsonl", '{"ts": 1.0, "type": "step_e')
    log = RunLog(tmp_path)
    log.emit("run_start")
    log.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["type"] for x in (lines[0], lines[2])] == ["run_start", "run_start"]
    assert [e["type"] for e in read_events(tmp_path / "events.jsonl")] == ["run_start"] * 2


@pytest.mark.parametrize("name", ["metrics.jsonl", "events.jsonl"])
def test_a_whole_log_is_appended_to_as_it_is(tmp_path, name):
    (tmp_path / name).write_text('{"step": 1}\n')
    RunLog(tmp_path).close()
    assert (tmp_path / name).read_text() == '{"step": 1}\n'
