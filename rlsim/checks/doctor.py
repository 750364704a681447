"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

What the pre-flight ``rlsim doctor``, run before the trainer starts, reported.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from rlsim.checks.base import _interesting, _text, _true, check
from rlsim.fields import Strict, regex, search
from rlsim.history import Outcome
from rlsim.result import Verdict


class DoctorWarns(Strict):
    """The pre-flight ``rlsim doctor`` (run before the trainer starts) reported a finding that
    matches ``pattern``."""

    pattern: str = Field(description="regex one of the doctor's findings must match")

    _pattern = field_validator("pattern")(regex)


@check(DoctorWarns, _text("pattern"))
def doctor_warns(o: Outcome, p) -> Verdict:
    findings = [f for e in o.rlsim("doctor") for f in e["findings"]]
    hit = next((f for f in findings if search(p.pattern, f)), None)
    if hit:
        msg = f"the pre-flight doctor warned: {hit[:300]}"
    elif not o.rlsim("doctor"):
        msg = "the pre-flight doctor did not run (see doctor_error / cluster_refused)"
    else:
        msg = (f"the pre-flight doctor found nothing matching {p.pattern!r}: "
               f"{' | '.join(findings)[:300] or 'no findings'}")
    return Verdict("doctor_warns", hit is not None, msg, evidence=_interesting(o))


class DoctorClean(Strict):
    """The pre-flight ``rlsim doctor`` reported no finding at all."""


@check(DoctorClean, _true)
def doctor_clean(o: Outcome, p) -> Verdict:
    runs = o.rlsim("doctor")
    findings = [f for e in runs for f in e["findings"]]
    ok = bool(runs) and not findings
    msg = ("the pre-flight doctor found nothing to report" if ok else
           "the pre-flight doctor did not run (see doctor_error / cluster_refused)" if not runs
           else f"the pre-flight doctor reported: {' | '.join(findings)[:400]}")
    return Verdict("doctor_clean", ok, msg, evidence=_interesting(o))
