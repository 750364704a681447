"""A fault due at a step holds the trainer there until it fired: the trainer's side
(:class:`rlsim.events.Holds`, through EventLog.emit) and the runner's (Nemesis.hold_steps and
release). Without it a trainer ran on while rlsim read the cluster and injected: Ray Train's
controller took step 4's checkpoint before the kill aimed at step 3 landed, and the run resumed
from 4, not 2."""

import random
import threading
import time
from pathlib import Path

import pytest

from rlsim.events import HOLD_VAR, EventLog, released
from rlsim.faults import FAULTS
from rlsim.faults.base import Fault, FaultContext
from rlsim.history import Outcome, Recorder
from rlsim.scenario import nemesis as nem
from rlsim.scenario.schema import FaultEntry


class Quick(Fault):
    name = "pause_node"
    Params = FAULTS["pause_node"].Params

    def inject(self):
        self.held = {}
        return {"node": 2}

    def undo(self):
        return {"node": 2}


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


def test_the_runner_holds_step_faults_and_releases_each_once_fired(tmp_path, monkeypatch):
    monkeypatch.setitem(nem.FAULTS, "pause_node", Quick)
    entries = [FaultEntry.model_validate(e) for e in (
        {"at": {"step": 3}, "pause_node": {"node": 2}, "for_s": 60},
        {"at": {"step": 5, "event": "step_end"}, "pause_node": {"node": 2}, "for_s": 60},
        {"at": {"seconds": 30}, "pause_node": {"node": 2}},
        {"at": {"event": "checkpoint_saved", "step": 4}, "pause_node": {"node": 2}})]
    outcome = Outcome(scenario=None, run_dir=tmp_path)
    n = nem.Nemesis(entries, FaultContext(None, tmp_path, random.Random(0)), Recorder(outcome))
    assert n.hold_steps() == (3, 5)  # only faults due at a step_end
    n.release(tmp_path)
    assert not list(tmp_path.glob("released-*"))
    n.tick([{"ts": time.time(), "type": "step_end", "step": 3}], 1.0)
    n.release(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("released-*")) == ["released-3"]
    assert n.hold_steps() == (5,)  # a relaunch holds only where a fault is still due
    n.tick([{"ts": time.time(), "type": "step_end", "step": 5}], 2.0)
    n.release(tmp_path)
    assert sorted(p.name for p in Path(tmp_path).glob("released-*")) == ["released-3",
                                                                         "released-5"]
    n.heal_all()
