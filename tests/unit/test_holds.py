"""A fault due at a step holds the trainer there until it fired: the trainer's side
(:class:`rlsim.events.Holds`, through EventLog.emit; the runner's is in test_nemesis). Without
it a trainer ran on while rlsim read the cluster and injected: Ray Train's controller took step
4's checkpoint before the kill aimed at step 3 landed, and the run resumed from 4, not 2."""

import threading
import time

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


def test_the_holds_of_a_launch_share_one_budget(tmp_path, monkeypatch, capsys):
    """A runner that never releases (killed) held each step for the whole limit: 40 held steps
    waited 41 times 300 s. Now the launch's holds together wait HOLD_BUDGET_S: with all but a
    moment of it spent at earlier steps, the next unreleased step goes on within that moment
    (the 30 s join is the bound: per step, it waited 300 s), and no later step is held."""
    from rlsim import events

    monkeypatch.setenv(HOLD_VAR, "3,5,7")
    log = EventLog(tmp_path)
    log.holds.spent_s = events.HOLD_BUDGET_S - 0.05  # held at earlier steps
    t = _emit_in_thread(log, 3)
    t.join(30)
    assert not t.is_alive()
    assert log.holds.steps == [] and log.holds.spent_s == events.HOLD_BUDGET_S
    log.emit("step_end", step=9)  # past 5 and 7: not held
    said = capsys.readouterr().err
    assert said.count("rlsim: no word from the runner") == 1, said
    assert "at step 3" in said and "300 s of holding are spent" in said, said


def test_a_released_hold_counts_against_the_budget(tmp_path, monkeypatch):
    from rlsim import events

    monkeypatch.setenv(HOLD_VAR, "3")
    log = EventLog(tmp_path)
    t = _emit_in_thread(log, 3)
    deadline = time.monotonic() + 30
    while log.holds.steps and time.monotonic() < deadline:  # its step taken: it holds
        t.join(0.01)
    assert log.holds.steps == [] and t.is_alive()
    seen = time.monotonic()  # held since before now, until released after now + 0.05 s
    while time.monotonic() - seen < 0.05:
        t.join(0.01)
    released(tmp_path, 3).touch()
    t.join(30)
    assert not t.is_alive() and 0.05 <= log.holds.spent_s < events.HOLD_BUDGET_S


@pytest.mark.parametrize("raw, words", [
    ("1" * 5000, "step '1111111111111111111111111111111111111111'... (5000 characters) is past "
                 "1000000000"),
    ("3,1000000001", "step '1000000001' is past 1000000000"),
    ("3,-1", "'-1' is not a step"),
    ("3,\u00b2", "'\u00b2' is not a step"),
    ("1," * 60_000, "is 120000 characters long (at most 100000)"),
])
def test_a_bad_hold_variable_names_itself_and_the_fix(tmp_path, monkeypatch, raw, words):
    """5,000 digits were answered with Python's own integer-limit message."""
    monkeypatch.setenv(HOLD_VAR, raw)
    with pytest.raises(ValueError) as e:
        EventLog(tmp_path)
    said = str(e.value)
    assert said.startswith("RLSIM_HOLD_STEPS") and words in said, said
    assert "fix: the steps where a fault is due, comma-separated, each 0-1000000000" in said
    assert len(said) < 400, said
