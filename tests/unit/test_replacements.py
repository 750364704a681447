"""Whole restarts and replacements in place are different things: ``restarts`` counts a run
restarted whole (every worker new), ``replacements`` the workers a framework replaced while the
others kept their state (torchft's replica groups under Ray Train)."""

from __future__ import annotations

from pathlib import Path

from rlsim.checks import CHECKS
from rlsim.history import Outcome

REPLACED = {"ts": 20.0, "source": "trainer", "type": "worker_replaced", "cause": "ActorDiedError",
            "workers": [{"rank": 1, "ip": "127.77.0.13", "pid": 23}],
            "replaced": [{"rank": 1, "ip": "127.77.0.12", "pid": 12}]}
RESTART = {"ts": 30.0, "source": "trainer", "type": "restart", "restart": 1}


def verdict(name: str, value, *events: dict):
    o = Outcome(scenario=None, run_dir=Path("."), timeline=list(events))
    return CHECKS[name].judge(o, CHECKS[name].params(value))


def test_a_replacement_in_place_is_not_a_restart():
    assert verdict("restarts", 0, REPLACED).ok
    assert "1 replacement(s) in place besides" in verdict("restarts", 0, REPLACED).message
    replaced = verdict("replacements", 1, REPLACED)
    assert replaced.ok and replaced.value == 1
    assert replaced.message == ("1 replacement(s) in place (rank 1: 127.77.0.12 -> 127.77.0.13 "
                                "after ActorDiedError), expected >= 1 and <= 1")


def test_a_whole_restart_is_not_a_replacement():
    assert not verdict("replacements", 1, RESTART).ok
    assert verdict("replacements", {"max": 0}, RESTART).ok
    assert verdict("restarts", 1, RESTART).ok


def test_a_replacement_with_only_its_required_fields_reads():
    bare = {"ts": 1.0, "source": "trainer", "type": "worker_replaced", "workers": [{}]}
    assert verdict("replacements", 1, bare).ok
