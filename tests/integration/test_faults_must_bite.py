"""Catalogue scenarios that could once pass with their fault doing nothing now fail without it.

Each is played with its fault disabled: the fault entry still fires on time and is recorded where
the real one would have hit (so ``faults_landed`` sees a fault that reached the trainer's
nodes), but it changes nothing: no throttle, no cut, no delay, no kill. Each scenario's own
expectations must then fail: a gray fault must cost speed (``throughput_within``'s ``below``), a
kill during a save must interrupt the save and cost a restart, a lost head must fail the run
with the head's loss. Slow tier: five scenarios with their twins, about 4 minutes here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.faults import FAULTS
from rlsim.faults.base import role_process
from rlsim.scenario import nemesis
from rlsim.scenario.loader import load
from rlsim.scenario.runner import play

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.root]
CATALOGUE = Path(__file__).parents[2] / "scenarios"


def disabled(cls):
    """``cls`` that aims and records as the real fault does, and does nothing."""

    class Disabled(cls):
        def inject(self):
            p, did = self.params, {"disabled": True}
            if "groups" in type(p).model_fields and getattr(p, "groups", None) is not None:
                did["groups"], self.aimed = self.ctx.groups(p.groups)
            elif hasattr(p, "link"):
                did["groups"], self.aimed = self.ctx.groups(p.link())
            elif getattr(p, "role", None) is not None:  # the rank's process, found, left alone
                worker = role_process(self.ctx, p.role, p.rank)
                did.update(role=p.role, rank=p.rank, pid=worker["pid"], ip=worker["ip"])
            elif "node" in type(p).model_fields:
                did["node"] = self.target()
            else:
                did["node"] = 0
            return did

        def undo(self):
            return None

    Disabled.__name__ = f"Disabled{cls.__name__}"
    return Disabled


@pytest.mark.parametrize(("scenario", "fault", "failing"), [
    ("slow_node", "slow_node", {"throughput_within"}),
    ("flapping_link", "flap_link", {"throughput_within"}),
    ("degraded_link", "degrade_link", {"throughput_within"}),
    ("node_lost_while_saving", "kill_node", {"restarts", "event"}),
    ("head_lost", "kill_head", {"fails"}),
    ("engine_error_swallowed", "kill_role", {"restarts", "event", "blamed"}),
    ("rollout_worker_frozen", "hang_role", {"restarts", "event", "blamed"}),
    ("engine_start_slow", "slow_start", {"restarts", "event", "blamed"}),
    ("neighbour_job_ended", "neighbour_job", {"faults_landed"}),
    ("epoch_boundary_resume", "kill_role", {"restarts", "resumed_from_step", "blamed"}),
    ("resume_with_changed_data", "kill_role", {"fails", "restarts"}),
])
def test_the_scenario_fails_with_its_fault_disabled(tmp_path, monkeypatch, scenario, fault,
                                                    failing):
    monkeypatch.setitem(nemesis.FAULTS, fault, disabled(FAULTS[fault]))
    result = play(load(CATALOGUE / f"{scenario}.yaml"), tmp_path / scenario)
    failed = {v.check for v in result.checks if not v.ok}
    assert not result.ok and failing <= failed, {v.check: v.message for v in result.checks}
