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
