"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

How the run ended and what it did: it completed, failed as expected, or the cluster refused to
form; the last step it committed and the step it resumed from; its restarts and the workers a
framework replaced in place; where its workers were placed; whether its reward rose.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rlsim.checks.base import (
    _count,
    _interesting,
    _restarts,
    _text,
    _true,
    check,
    stalled_said,
)
from rlsim.fields import DAY, Bounds, NodeIndex, Role, Step, Strict, World, regex, search
from rlsim.history import Outcome, is_number
from rlsim.result import Verdict


def _end(o: Outcome) -> dict | None:
    ends = o.trainer("run_end")
    return ends[-1] if ends else None


class Completes(Strict):
    pass


@check(Completes, _true, needs=("run_end",), excludes=("fails", "refused"))
def completes(o: Outcome, p) -> Verdict:
    """The trainer finished: its last launch exited 0 and its end (run_end) says completed. A
    trainer that logs no end of its own (adapter plain, or one read from its output) is judged
    by its exit code, and the verdict says so."""
    end = _end(o)
    ok = o.returncode == 0 and end is not None and end["status"] == "completed"
    errors = [str(e.get("message", e.get("kind", "an error")))[:300] for e in o.trainer("error")]
    said = " ".join((errors[-1] if errors else _last_words(o.output)).split())
    if ok:
        msg = "the trainer completed" + (": it exited 0 (it logs no end of its own: its exit "
                                         "code is the verdict)" if end.get("from") == "exit"
                                         else "")
        if stalled := o.rlsim("trainer_stalled"):
            msg += (f", after {len(stalled)} relaunch(es) of a stalled launch "
                    f"({stalled_said(stalled[-1])})")
    elif stalled := o.rlsim("trainer_stalled"):
        msg = stalled_said(stalled[-1])
    elif o.returncode == 0 and not o.trainer():
        msg = ("the trainer exited 0 but wrote no rlsim events (run_end missing): a program "
               "that writes none is judged by its exit code with `adapter: plain`")
    else:
        msg = (f"the trainer did not complete (exit {o.returncode}; run_end "
               f"{end['status'] if end else 'missing'}){': ' + said if said else ''}")
    tail = [] if ok else [f"output | {line}" for line in _tail(o.output)]
    return Verdict("completes", ok, msg, evidence=_interesting(o) + tail)


def _tail(output: str, lines: int = 8) -> list[str]:
    """The last lines of the trainer's output (its traceback ends there), cut to width."""
    return [line[:300] for line in output.rstrip().splitlines()[-lines:]]


def _last_words(output: str) -> str:
    """What a trainer that logs no error said last: the exception line its traceback ends with
    (``KeyError: 'x'``), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines[-40:]):
        if re.match(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return lines[-1][:300] if lines else ""


class Fails(Strict):
    pattern: str = Field(".*", description="regex the trainer's error must match")
    within_s: float | None = Field(None, gt=0, le=DAY, description="after the trainer started")

    _pattern = field_validator("pattern")(regex)


@check(Fails, _text("pattern"), needs=("error",), figure="failed after (s)",
       excludes=("completes", "refused"))
def fails(o: Outcome, p) -> Verdict:
    errors = o.trainer("error")
    text = " | ".join(f"{e.get('kind', 'error')}: {e.get('message', '')}" for e in errors)
    matched = bool(errors) and search(p.pattern, text)
    took = (errors[-1]["ts"] - o.started) if errors else None
    in_time = took is not None and (p.within_s is None or took <= p.within_s)
    ok = o.returncode not in (0, None) and matched and in_time
    if ok:
        msg = f"failed as expected after {took:.1f} s: {text[:300]}"
    elif o.returncode == 0:  # an earlier launch's error, and a relaunch that went on to the end
        msg = f"expected a failure matching {p.pattern!r}, but the trainer's last launch exited " \
              f"0 (its errors before: {text[:300] or 'none'})"
    elif not errors:
        msg = f"expected a failure matching {p.pattern!r}, but the trainer logged no error " \
              f"(exit {o.returncode})"
    elif not matched:
        msg = f"the trainer failed, but not with {p.pattern!r}: {text[:300]}"
    else:
        msg = f"the failure came after {took:.1f} s, expected within {p.within_s} s"
    return Verdict("fails", ok, msg, took, _interesting(o))


class Refused(Strict):
    """The cluster refuses to form (a node cannot join) before any training, in words that
    match ``pattern``."""

    pattern: str = Field(".*", description="regex the start-up error must match")

    _pattern = field_validator("pattern")(regex)


@check(Refused, _text("pattern"), excludes=("completes", "fails"))
def refused(o: Outcome, p) -> Verdict:
    ok = o.refusal is not None and search(p.pattern, o.refusal)
    if ok:
        msg = f"the cluster refused to form: {o.refusal[:300]}"
    elif o.refusal is None:
        msg = f"expected the cluster to refuse to form ({p.pattern!r}), but it came up"
    else:
        msg = f"the cluster refused to form, but not with {p.pattern!r}: {o.refusal[:300]}"
    return Verdict("refused", ok, msg, evidence=_interesting(o))


class FinalStep(Strict):
    step: Step


def _final_step_cannot(params, scenario, world: World) -> tuple[str, str] | None:
    completes = any(name == "completes" for name, _ in scenario.checks())
    if completes and world.total_steps is not None and params.step < world.total_steps:
        return "step", (f"{params.step} is short of the run's {world.total_steps} steps, and the "
                        f"scenario expects it to complete (at step {world.total_steps}); expect "
                        f"{world.total_steps}, or drop completes")
    return None


@check(FinalStep, _count("step"), needs=("step_end",), cannot=_final_step_cannot)
def final_step(o: Outcome, p) -> Verdict:
    """The last step the trainer committed: the highest its steps, its checkpoints and its end
    report (a framework may drop the reports in flight when it replaces workers, and a later
    report, a checkpoint or the end still carries the step it reached)."""
    steps = [e.get("step") for e in o.trainer()
             if e["type"] in ("step_end", "checkpoint_saved", "run_end")]
    last = max((s for s in steps if is_number(s)), default=0)
    return Verdict("final_step", last == p.step, f"last step {last}, expected {p.step}", last)


class ResumedFromStep(Strict):
    step: Step


@check(ResumedFromStep, _count("step"), needs=("resume",))
def resumed_from_step(o: Outcome, p) -> Verdict:
    steps = [e["from_step"] for e in o.trainer("resume")]
    ok = p.step in steps
    return Verdict("resumed_from_step", ok, f"resumed from step(s) {steps or 'none'}, expected "
                   f"{p.step}", evidence=_interesting(o))


class Restarts(Bounds):
    pass


@check(Restarts, _count("min", "max"), figure="restarts")
def restarts(o: Outcome, p) -> Verdict:
    """Whole restarts of the run (every worker new, from a checkpoint or from scratch: the
    trainer's ``restart``) and relaunches by the runner; a worker a framework replaced in place
    while the others kept their state is not one (``replacements``)."""
    n = len(_restarts(o))
    ok = n >= p.min and (p.max is None or n <= p.max)
    want = f">= {p.min}" + (f" and <= {p.max}" if p.max is not None else "")
    relaunched = len(o.rlsim("relaunch"))
    what = f" ({relaunched} of them relaunches)" if relaunched else ""
    replaced = len(o.trainer("worker_replaced"))
    what += f"; {replaced} replacement(s) in place besides" if replaced else ""
    return Verdict("restarts", ok, f"{n} restart(s){what}, expected {want}", n, _interesting(o))


class Replacements(Bounds):
    pass


@check(Replacements, _count("min", "max"), needs=("worker_replaced",), figure="replacements")
def replacements(o: Outcome, p) -> Verdict:
    """Workers a framework replaced in place while the others kept their state and went on
    (the trainer's ``worker_replaced``: torchft's replica groups under Ray Train), counted once
    per replacement, whatever the number of workers in it."""
    found = o.trainer("worker_replaced")
    n = len(found)
    ok = n >= p.min and (p.max is None or n <= p.max)
    want = f">= {p.min}" + (f" and <= {p.max}" if p.max is not None else "")
    said = "; ".join(_replacement(e) for e in found)
    return Verdict("replacements", ok, f"{n} replacement(s) in place"
                   + (f" ({said})" if said else "") + f", expected {want}", n, _interesting(o))


def _replacement(e: dict) -> str:
    """One replacement in words: which ranks, where from and to, why."""
    new = e.get("workers") if isinstance(e.get("workers"), list) else []
    old = {w.get("rank"): w for w in (e.get("replaced") or []) if isinstance(w, dict)}
    moves = [f"rank {w.get('rank')}: {old[w.get('rank')].get('ip')} -> {w.get('ip')}"
             if w.get("rank") in old else f"rank {w.get('rank')} on {w.get('ip')}"
             for w in new if isinstance(w, dict)]
    return ", ".join(moves) + (f" after {e['cause']}" if e.get("cause") else "")


class PlacedOn(Strict):
    """Every placement of the trainer's workers (those holding ``role``, or all) lands on the
    nodes ``nodes`` (indices) only: e.g. never on a smaller spare node of a mixed cluster."""

    nodes: list[NodeIndex] = Field(min_length=1)
    role: Role | None = Field(None, description="actor, critic, ref, reward or rollout")


@check(PlacedOn, needs=("placement",))
def placed_on(o: Outcome, p) -> Verdict:
    ready = o.rlsim("cluster_ready")
    index = {address: i for i, address in enumerate(ready[-1]["nodes"])} if ready else {}
    landed = [[index.get(w["ip"], w["ip"]) for w in e["workers"]
               if p.role is None or p.role in w["roles"]] for e in o.trainer("placement")]
    used = sorted({n for nodes in landed for n in nodes}, key=str)
    ok = bool(landed) and set(used) <= set(p.nodes)
    who = f"{p.role} workers" if p.role else "the workers"
    msg = (f"{who} landed on node(s) {used} in {len(landed)} placement(s), expected only on "
           f"{p.nodes}" if landed else "the trainer logged no placement")
    return Verdict("placed_on", ok, msg, evidence=_interesting(o))


class RewardImproves(Strict):
    by: float = Field(0.1, description="mean of the last 5 steps minus the first 5")


def _reward_cannot(params, scenario, world: World) -> tuple[str, str] | None:
    if world.total_steps is not None and world.total_steps < 10:
        return "", (f"the run has {world.total_steps} steps; the check compares its first 5 "
                    f"with its last 5: give {world.steps_knob} 10 or more, or drop the check")
    return None


@check(RewardImproves, needs=("step_end",), cannot=_reward_cannot)
def reward_improves(o: Outcome, p) -> Verdict:
    rewards = [e["metrics"]["rollout/reward_mean"] for e in o.trainer("step_end")
               if isinstance(e.get("metrics"), dict)
               and is_number(e["metrics"].get("rollout/reward_mean"))]
    if len(rewards) < 10:
        return Verdict("reward_improves", False, f"only {len(rewards)} steps logged "
                       "rollout/reward_mean; need 10")
    gain = sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5
    return Verdict("reward_improves", gain >= p.by, f"reward rose by {gain:.3f} (first 5 vs last "
                   f"5 steps), expected at least {p.by}", gain)
