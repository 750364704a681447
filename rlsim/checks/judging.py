"""Judging a run: every check its scenario names, in its order, over its history."""

from __future__ import annotations

from rlsim.checks.base import CHECKS
from rlsim.checks.reach import FaultsLanded
from rlsim.fields import PatternTooSlow
from rlsim.history import Outcome
from rlsim.result import Verdict


def judge(o: Outcome) -> list[Verdict]:
    """Every check of the scenario over its history, in the scenario's order, then
    ``faults_landed`` where the scenario has faults and does not name it: a fault that did
    nothing fails any scenario, unless it says so."""
    checks = o.scenario.checks()
    implied = [("faults_landed", FaultsLanded())] if o.scenario.faults and not any(
        name == "faults_landed" for name, _ in checks) else []
    return [_judged(name, o, params) for name, params in [*checks, *implied]]


def _judged(name: str, o: Outcome, params) -> Verdict:
    try:
        return CHECKS[name].judge(o, params)
    except PatternTooSlow as e:  # a failed check saying why, never a hung or crashed judge
        return Verdict(name, False, str(e))
