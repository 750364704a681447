"""Write rlsim's event log from your own trainer: ``<run_dir>/events.jsonl``, what scenarios judge.

Dependency-free (the standard library only): copy the calls into any trainer. A scenario with
``trainer: {adapter: events, command: [...]}`` reads this file as the run goes::

    from rlsim.events import EventLog

    log = EventLog()                      # RLSIM_RUN_DIR, set by the runner (or a path)
    log.emit("resume", from_step=4)       # after loading a checkpoint
    log.emit("step_end", step=5, metrics={"train/loss": 0.3})
    log.emit("checkpoint_saved", step=5, path="/ckpt/global_step_5")
    log.emit("run_end", status="completed", step=20)

One JSON object per line, appended and flushed to disk as it happens:
``{"ts": <unix seconds>, "type": <name>, "attempt": <n>, ...fields}``. The types, the fields
every event of the type must carry (:data:`REQUIRED`), and the optional ones the checks read
when present (an event without them is read as saying nothing of them):

==================  ============================================================================
step_end            step; optional metrics (``final_step``; ``reward_improves``: metrics
                    ``rollout/reward_mean``)
checkpoint_saved    step; optional path
resume              from_step (``resumed_from_step``)
worker_died         optional cause, message (the trainer noticed a loss: ``detected_within_s``)
stalled             optional cause, call, stuck (the workers that did not answer), message: a
                    step made no progress within the trainer's own timeout, nothing died (a hung
                    rank, a frozen node: ``detected_within_s``)
node_lost           optional ip
preemption_notice   optional ip, deadline_in_s: Ray announced that a node of the run is
                    preempted (a drain with a deadline) and the trainer heard it
                    (``detected_within_s``)
restart             optional restart (count), cause: the run restarted whole, every worker new,
                    from a checkpoint or from scratch (``restarts``)
worker_replaced     workers (rank, ip, pid: the new ones); optional replaced (the ones lost),
                    cause: a framework replaced these workers in place while the others kept
                    their state and went on (torchft's replica groups): not a restart
                    (``replacements``)
error               optional kind, message (``fails``)
run_end             status (completed | failed); optional step (``completes``)
placement           workers: where each rank runs, ``{"roles": [...], "ip", "pid"}`` each in
                    rank order (a fault aimed at a role's rank hits the node hosting it)
==================  ============================================================================

``attempt`` is RLSIM_ATTEMPT (0 for the first launch, n for the n-th relaunch).

A fault the scenario fires at a step (``at: {step: N}``) holds the run there: the runner lists
those steps in RLSIM_HOLD_STEPS, and :meth:`EventLog.emit` of the first ``step_end`` at or past
each returns only once rlsim has fired the fault (it writes ``<run_dir>/released-<N>``), so the
fault lands at step N however long it takes to inject, never a step or a checkpoint later. A
trainer that writes the file itself does not wait: its faults land when rlsim gets to them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rlsim.files import append_line

RUN_DIR_VAR = "RLSIM_RUN_DIR"
ATTEMPT_VAR = "RLSIM_ATTEMPT"
HOLD_VAR = "RLSIM_HOLD_STEPS"
# A runner that never releases (killed): the launch goes on after this much holding in all,
# however many steps are held (it was per step: 40 held steps waited 41 times as long)
HOLD_BUDGET_S = 300.0
HOLD_STEP_MAX = 10**9  # a scenario's step (rlsim.fields.Step)
HOLD_VAR_MAX_CHARS = 100_000  # ten thousand held steps

# each type with the fields its events must carry; every other field is optional
REQUIRED: dict[str, tuple[str, ...]] = {
    "step_end": ("step",), "checkpoint_saved": ("step",), "resume": ("from_step",),
    "worker_died": (), "stalled": (), "node_lost": (), "preemption_notice": (), "restart": (),
    "worker_replaced": ("workers",),
    "error": (), "run_end": ("status",), "placement": ("workers",)}
EVENT_TYPES = frozenset(REQUIRED)


class EventLog:
    """Appends events to ``<run_dir>/events.jsonl`` (``run_dir`` defaults to RLSIM_RUN_DIR)."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        where = run_dir or os.environ.get(RUN_DIR_VAR)
        if not where:
            raise ValueError(f"EventLog needs a run directory: pass one, or set {RUN_DIR_VAR} "
                             "(the scenario runner sets it for the command it starts)")
        self.path = Path(where) / "events.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        attempt = os.environ.get(ATTEMPT_VAR, "0")
        if not (attempt.isascii() and attempt.isdigit()):
            raise ValueError(f"{ATTEMPT_VAR}={attempt!r}: the launch's number, 0 for the first; "
                             "the scenario runner sets it (unset it to log as launch 0)")
        self.attempt = int(attempt)
        self.holds = Holds(self.path.parent)

    def emit(self, type: str, **fields) -> dict:
        """Append one event; a type outside :data:`EVENT_TYPES` is refused (no check reads it)."""
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}; known: {sorted(EVENT_TYPES)}")
        event = {"ts": round(time.time(), 4), "type": type, "attempt": self.attempt, **fields}
        # opened per event and flushed to disk: a killed trainer loses nothing
        append_line(self.path, json.dumps(event, default=str))
        self.holds.after(event)
        return event


def released(run_dir: str | Path, step: int) -> Path:
    """The file rlsim writes once the faults due at ``step`` have fired."""
    return Path(run_dir) / f"released-{step}"


class Holds:
    """The steps (RLSIM_HOLD_STEPS, comma-separated) at which the run waits for rlsim to fire
    the faults due there: :meth:`after` a ``step_end`` at or past one, until :func:`released`
    exists. All the holds of a launch together wait :data:`HOLD_BUDGET_S` at most: once it is
    spent (the runner is gone), no step is held any more, and that is said once."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.steps = hold_steps(os.environ.get(HOLD_VAR, ""))
        self.spent_s = 0.0  # held so far, this launch

    def after(self, event: dict) -> None:
        if event.get("type") != "step_end" or not self.steps:
            return
        try:
            step = int(event["step"])
        except (KeyError, TypeError, ValueError):
            return
        while self.steps and self.steps[0] <= step:
            self._wait(self.steps.pop(0))

    def _wait(self, step: int) -> None:
        marker = released(self.dir, step)
        left = HOLD_BUDGET_S - self.spent_s
        start = time.monotonic()
        while not marker.exists():
            if time.monotonic() - start >= left:
                self.spent_s = HOLD_BUDGET_S
                print(f"rlsim: no word from the runner at step {step} (no {marker}): the "
                      f"launch's {HOLD_BUDGET_S:.0f} s of holding are spent; going on, holding "
                      f"no step any more", file=sys.stderr, flush=True)
                self.steps.clear()
                return
            time.sleep(0.01)
        self.spent_s += time.monotonic() - start


def hold_steps(raw: str) -> list[int]:
    """The steps of RLSIM_HOLD_STEPS (``raw``), sorted and distinct; ValueError naming the
    variable, what is wrong and the fix where it is not comma-separated steps
    (0-:data:`HOLD_STEP_MAX`)."""
    fix = (f"the steps where a fault is due, comma-separated, each 0-{HOLD_STEP_MAX}, e.g. "
           "'3,7'; the scenario runner sets it (unset it to hold nowhere)")
    if len(raw) > HOLD_VAR_MAX_CHARS:
        raise ValueError(f"{HOLD_VAR} is {len(raw)} characters long (at most "
                         f"{HOLD_VAR_MAX_CHARS}); fix: {fix}")
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    for p in parts:
        if not (p.isascii() and p.isdigit()):
            raise ValueError(f"{HOLD_VAR}={_shown(raw)}: {_shown(p)} is not a step; fix: {fix}")
        if len(p) > len(str(HOLD_STEP_MAX)) or int(p) > HOLD_STEP_MAX:
            raise ValueError(f"{HOLD_VAR}={_shown(raw)}: step {_shown(p)} is past "
                             f"{HOLD_STEP_MAX}; fix: {fix}")
    return sorted({int(p) for p in parts})


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:40]) + f"... ({len(text)} characters)"
