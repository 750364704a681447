"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

How many events of a type the run logged: the trainer's own, or Ray's that the runner records,
optionally only those matching a pattern or logged before the first disruptive fault.
"""

from __future__ import annotations

import json

from pydantic import Field, field_validator

from rlsim.checks.base import _first_fault, _interesting, _text, check
from rlsim.fields import Bounds, regex, search
from rlsim.history import HARNESS_EVENTS, Outcome
from rlsim.result import Verdict


class Event(Bounds):
    """An event of this type appears at least ``min`` and at most ``max`` times: one the trainer
    logs, or one of Ray's own that the runner records (``ray_node_dead``, ``ray_actor_died``).
    ``matching``: count only the events whose fields (as JSON) match this regular expression,
    e.g. the one whose message says the engine died ``during rollout.generate``."""

    type: str
    min: int = Field(1, ge=0, le=10**6)
    matching: str | None = Field(None, max_length=500)
    before_fault: bool = Field(False, description="count only the events logged before the "
                               "first disruptive fault fired (all of them where none fired): "
                               "with max: 0, what the fault must have come before, e.g. the "
                               "save it interrupts")

    @field_validator("matching")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            regex(pattern)
        return pattern


@check(Event, _text("type"))
def event(o: Outcome, p) -> Verdict:
    # Ray's own events (rlsim.scenario.watch) are the runner's; every other type the trainer's
    found = (o.rlsim if p.type in HARNESS_EVENTS else o.trainer)(p.type)
    if p.matching is not None:
        found = [e for e in found if search(p.matching, json.dumps(e, default=str))]
    fault = _first_fault(o) if p.before_fault else None
    if fault is not None:
        found = [e for e in found if e["ts"] < fault["ts"]]
    n = len(found)
    ok = n >= p.min and (p.max is None or n <= p.max)
    bound = f"at least {p.min}" + (f" and at most {p.max}" if p.max is not None else "")
    which = f" matching {p.matching!r}" if p.matching is not None else ""
    if p.before_fault:
        which += f" before {fault['fault']}" if fault else " (no fault fired: all of them)"
    return Verdict("event", ok, f"{n} {p.type!r} event(s){which}, expected {bound}", n,
                   _interesting(o))
