"""A fault due at a step holds the trainer there until it fired: the trainer's side
(:class:`rlsim.events.Holds`, through EventLog.emit; the runner's is in test_nemesis). Without
it a trainer ran on while rlsim read the cluster and injected: Ray Train's controller took step
4's checkpoint before the kill aimed at step 3 landed, and the run resumed from 4, not 2."""

import threading

import pytest

from rlsim.events import HOLD_VAR, EventLog, released


def _emit_in_thread(log: EventLog, step: int) -> threading.Thread:
    t = threading.Thread(target=log.emit, args=("step_end",), kwargs={"step": step}, daemon=True)
    t.start()
    return t


def test_the_trainer_waits_at_a_held_step_until_released(tmp_path, monkeypatch):
    monkeypatch.setenv(HOLD_VAR, "3")
    log = EventLog(tmp_path)
    log.emit("step_end", step=2)  # not held: returns at once
    t = _emit_in_thread(log, 3)
    t.join(0.3)
    assert t.is_alive()  # waiting for rlsim
    released(tmp_path, 3).touch()
    t.join(5)
    assert not t.is_alive()
    log.emit("step_end", step=3)  # a held step waits once
    assert [line.count('"step_end"') for line in log.path.read_text().splitlines()] == [1, 1, 1]


def test_a_step_past_the_held_one_waits_too(tmp_path, monkeypatch):
    """A trainer whose steps go by 2 holds at the first step at or past the fault's."""
    monkeypatch.setenv(HOLD_VAR, "3,5")
    log = EventLog(tmp_path)
    t = _emit_in_thread(log, 4)
    released(tmp_path, 3).touch()
    t.join(0.3)
    assert not t.is_alive()  # 3 released; 5 not reached
    t = _emit_in_thread(log, 6)
    t.join(0.3)
    assert t.is_alive()
    released(tmp_path, 5).touch()
    t.join(5)
    assert not t.is_alive()


def test_no_holds_by_default_and_bad_values_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(HOLD_VAR, raising=False)
    EventLog(tmp_path).emit("step_end", step=10**6)  # returns
    monkeypatch.setenv(HOLD_VAR, "3,x")
    with pytest.raises(ValueError, match="RLSIM_HOLD_STEPS='3,x'"):
        EventLog(tmp_path)
