"""The nemesis: faults fire when due, heal after for_s, and every heal (timed or final) goes
through one guarded path that logs and keeps going."""

import random
import time
from pathlib import Path

from rlsim.faults import FAULTS
from rlsim.faults.base import Fault, FaultContext
from rlsim.history import Outcome, Recorder
from rlsim.scenario import nemesis as nem
from rlsim.scenario.schema import FaultEntry


class Flaky(Fault):
    """Injects fine; its heal fails the first time it is asked."""

    name = "kill_node"
    Params = FAULTS["kill_node"].Params
    calls: list[str] = []

    def inject(self):
        self.held = {}
        Flaky.calls.append("inject")
        return {"node": 1}

    def undo(self):
        Flaky.calls.append("undo")
        raise OSError("rule already gone")


class Plain(Fault):
    name = "pause_node"
    Params = FAULTS["pause_node"].Params

    def inject(self):
        self.held = {}
        return {"node": 2}

    def undo(self):
        return {"node": 2, "resumed": 3}


def test_timed_and_final_heals_share_one_guarded_path(monkeypatch):
    monkeypatch.setitem(nem.FAULTS, "kill_node", Flaky)
    monkeypatch.setitem(nem.FAULTS, "pause_node", Plain)
    entries = [FaultEntry.model_validate(e) for e in (
        {"at": {"step": 1}, "kill_node": {"node": 1}, "for_s": 0.01},
        {"at": {"step": 2}, "pause_node": {"node": 2}})]
    outcome = Outcome(scenario=None, run_dir=Path("."))
    n = nem.Nemesis(entries, FaultContext(None, Path("."), random.Random(0)), Recorder(outcome))
    n.tick([{"type": "step_end", "step": 1}], 0.0)
    time.sleep(0.02)
    n.tick([{"type": "step_end", "step": 2}], 0.1)  # the timed heal raises: logged, not raised
    n.heal_all()  # the flaky fault is healed once only; the other one heals
    types = [(e["type"], e.get("fault")) for e in outcome.timeline]
    assert types == [("fault_injected", "kill_node"), ("fault_injected", "pause_node"),
                     ("fault_heal_error", "kill_node"), ("fault_healed", "pause_node")]
    assert Flaky.calls == ["inject", "undo"]


def test_heal_at_waits_for_its_event_after_the_fault_fired_not_for_a_clock(monkeypatch):
    monkeypatch.setitem(nem.FAULTS, "pause_node", Plain)
    entry = FaultEntry.model_validate({"at": {"step": 2}, "pause_node": {"node": 2},
                                       "heal_at": {"event": "resume"}})
    outcome = Outcome(scenario=None, run_dir=Path("."))
    n = nem.Nemesis([entry], FaultContext(None, Path("."), random.Random(0)), Recorder(outcome))
    early = {"ts": time.time() - 5, "type": "resume", "from_step": 0}  # before the fault
    n.tick([early, {"ts": time.time(), "type": "step_end", "step": 2}], 1.0)
    n.tick([early], 600.0)  # no clock heals it: ten minutes on, still in force
    assert [e["type"] for e in outcome.timeline] == ["fault_injected"]
    n.tick([early, {"ts": time.time() + 1, "type": "resume", "from_step": 2}], 601.0)
    assert [e["type"] for e in outcome.timeline] == ["fault_injected", "fault_healed"]


def test_for_s_and_heal_at_together_are_refused():
    import pytest

    with pytest.raises(ValueError, match="give for_s or heal_at, not both"):
        FaultEntry.model_validate({"at": {"step": 2}, "pause_node": {"node": 2}, "for_s": 3,
                                   "heal_at": {"event": "resume"}})


class Interrupted(Plain):
    """Ctrl-C lands while it injects, after its effect is in force."""

    def inject(self):
        import os
        import signal

        self.held = {}
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler would have run here, before the return
        return {"node": 2}


def test_ctrl_c_inside_an_injection_waits_until_the_fault_is_recorded_then_heals_it(monkeypatch):
    import signal

    import pytest

    monkeypatch.setitem(nem.FAULTS, "pause_node", Interrupted)
    # Python's own Ctrl-C, whatever a test or the runner's worker left installed before
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    entry = FaultEntry.model_validate({"at": {"step": 1}, "pause_node": {"node": 2}})
    outcome = Outcome(scenario=None, run_dir=Path("."))
    n = nem.Nemesis([entry], FaultContext(None, Path("."), random.Random(0)), Recorder(outcome))
    try:
        with pytest.raises(KeyboardInterrupt):
            n.tick([{"type": "step_end", "step": 1}], 0.0)
    finally:
        signal.signal(signal.SIGINT, previous)
    n.heal_all()  # as the runner's finally does
    assert [e["type"] for e in outcome.timeline] == ["fault_injected", "fault_healed"]


def test_a_killed_trainer_that_does_not_exit_has_the_fired_faults_healed_first():
    """A trainer blocked by a fault in force (writes to a capped device, a frozen node) dies
    only once it is lifted: the runner heals what fired, then waits again."""
    import subprocess

    from rlsim.scenario import runner

    calls = []

    class Blocked:
        def wait(self, timeout=None):
            calls.append(("wait", timeout))
            if timeout is not None:
                raise subprocess.TimeoutExpired("trainer", timeout)

    class Healer:
        def heal_fired(self):
            calls.append(("heal_fired",))

    runner._wait_killed(Blocked(), Healer())
    assert calls == [("wait", runner.STOP_WAIT_S), ("heal_fired",), ("wait", None)]


def test_the_runner_holds_step_faults_and_releases_each_once_fired(tmp_path, monkeypatch):
    monkeypatch.setitem(nem.FAULTS, "pause_node", Plain)
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
