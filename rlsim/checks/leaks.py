"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

What the trainer or rlsim left behind on the cluster after the run.
"""

from __future__ import annotations

from rlsim.checks.base import _true, check
from rlsim.fields import Strict
from rlsim.history import Outcome
from rlsim.result import Verdict


class NoLeaks(Strict):
    pass


@check(NoLeaks, _true)
def no_leaks(o: Outcome, p) -> Verdict:
    """Nothing the trainer or rlsim left behind (:mod:`rlsim.scenario.leftovers`): what the
    trainer left fails, naming the object, its node and the fix; what Ray's own libraries keep by
    design is a note; what rlsim left always fails (its bug)."""
    bad = [x for x in o.leaks if x.owner != "ray"]
    notes = [x for x in o.leaks if x.owner == "ray"]
    waited = "" if o.leaks_waited_s is None else f" (Ray given {o.leaks_waited_s:.1f} s to " \
        "clean up)"
    said = "; ".join(f"the {x.owner}'s {x.line()}" for x in bad) or "nothing left behind"
    if notes:
        said += "; note, Ray's own libraries keep: " + "; ".join(
            f"{x.kind} {x.what} ({x.library})" for x in notes)
    return Verdict("no_leaks", not bad, said + waited, len(bad),
                   evidence=[x.line() for x in o.leaks])
