"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

Goodput: the share of the run's wall time spent on the steps it kept (:mod:`rlsim.goodput` says
how it is measured and whose definition it is), at least a bound.
"""

from __future__ import annotations

from pydantic import Field

from rlsim.checks.base import _interesting, _ratio, check
from rlsim.fields import Strict
from rlsim.goodput import DEFINITION, of_outcome, said
from rlsim.history import Outcome
from rlsim.result import Verdict


class Goodput(Strict):
    min: float = Field(gt=0, le=1, description="the share of the run's wall time spent on the "
                       "steps it kept, at least (" + DEFINITION + ")")


@check(Goodput, _ratio("min"), needs=("step_end",), figure="goodput")
def goodput(o: Outcome, p) -> Verdict:
    """At least ``min`` of the run's wall time went into the steps it kept: a fault that cost
    more (a late detection, a restart from an old checkpoint, steps redone) fails it."""
    g = of_outcome(o)
    if g is None or g.get("goodput") is None:
        return Verdict("goodput", False, "no step to count: goodput cannot be measured",
                       evidence=_interesting(o))
    return Verdict("goodput", g["goodput"] >= p.min,
                   f"{said(g)}; expected at least {p.min}", g["goodput"], _interesting(o))
