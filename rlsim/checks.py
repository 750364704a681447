"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

The one registry of checks: each is a parameter model and a judge side by side, registered with
:func:`check`, with an optional scalar shorthand (``restarts: 1`` for ``restarts: {min: 1, max:
1}``). The scenario schema validates ``expect`` entries against :data:`CHECKS`. Each judge returns
a :class:`Verdict`: whether the expectation held, a sentence in the scenario's words, the figure
measured (seconds, steps) and the timeline lines that show it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from rlsim.contract import DETECTION_EVENTS
from rlsim.fields import (
    DAY,
    Bounds,
    NodeIndex,
    PatternTooSlow,
    Role,
    Step,
    Strict,
    World,
    first_error,
    regex,
    search,
)
from rlsim.files import Damaged, read_file, read_json_lines, shown, why_not_read
from rlsim.history import HARNESS_EVENTS, MAX_HISTORY, Outcome, is_number, read_events
from rlsim.registry import Registry
from rlsim.result import Verdict


@dataclass(frozen=True)
class Check:
    """One check: its parameters, its judge, and how a scalar shorthand reads (None: no
    shorthand; the function gets the scalar and returns the long form's mapping, or raises
    ValueError saying what to write)."""

    name: str
    Params: type[Strict]
    judge: Callable[[Outcome, Any], Verdict]
    scalar: Callable[[str, Any], dict] | None = None
    # trainer event types (or "metrics.jsonl") the judge reads: a scenario whose adapter cannot
    # observe them is refused when read (rlsim.adapters)
    needs: tuple[str, ...] = ()
    # the column head of its value where that is a figure people compare across runs and
    # clusters (seconds to detect, to recover, to a failure; restarts): reports and JUnit
    # properties carry it
    figure: str | None = None
    # checks that cannot hold in the same run (a run that completes does not fail)
    excludes: tuple[str, ...] = ()
    # it compares the run with its fault-free twin (same config and seed, same cluster, trained
    # first): the runner trains one when a scenario asks for such a check. "timed": it compares
    # the twin's timings, which hold only for a twin trained on the machine as it is now (a twin
    # kept from a run under other load steps at another pace), so the twin is trained afresh
    twin: bool | Literal["timed"] = False
    # why it can never pass in this scenario, as (field, what and the fix), or None: given its
    # parameters, the scenario and the World (the trainer's steps, where the adapter knows them)
    cannot: Callable[[Any, Any, World], tuple[str, str] | None] | None = None

    def cannot_pass(self, params, scenario, world: World) -> tuple[str, str] | None:
        return self.cannot(params, scenario, world) if self.cannot else None

    def params(self, value: Any) -> Strict:
        """The parameters of an ``expect`` entry, long form or shorthand; ValueError says which
        field is wrong and how to write it."""
        if value is None:
            value = {}
        elif not isinstance(value, dict):
            if self.scalar is None:
                raise ValueError(f"{self.name}: write the mapping form ({self.name}: {{...}}), "
                                 f"not {value!r}")
            try:
                value = self.scalar(self.name, value)
            except ValueError as e:
                raise ValueError(f"{self.name}: {e}") from None
        try:
            return self.Params.model_validate(value)
        except ValidationError as e:
            raise ValueError(first_error(e, self.name)) from None
        except Exception as e:  # noqa: BLE001 - a plugin's validator with a bug: named
            raise ValueError(f"{self.name}: the check's own validator failed ({type(e).__name__}: "
                             f"{e}); that is a bug of the package that provides "
                             f"{self.name!r}") from None


    def __call__(self, o: Outcome, params) -> Verdict:
        return self.judge(o, params)


# name -> Check, from the entry point group rlsim.checks (the ones below, and any package's)
CHECKS: Registry = Registry("rlsim.checks", "check", lambda c: c.name,
                            accepts=lambda c: isinstance(c, Check),
                            kind="Check (made with @rlsim.checks.check)")


def check(Params: type[Strict], scalar: Callable[[str, Any], dict] | None = None,
          needs: tuple[str, ...] = (), figure: str | None = None,
          excludes: tuple[str, ...] = (), twin: bool | Literal["timed"] = False,
          cannot: Callable[[Any, Any, World], tuple[str, str] | None] | None = None):
    """Make the decorated judge a :class:`Check` of its name (register it with an entry point in
    the group ``rlsim.checks``; rlsim's own are in its pyproject.toml). ``cannot``: why it can
    never pass in a scenario (refused when the scenario is read)."""
    def make(judge: Callable[[Outcome, Any], Verdict]) -> Check:
        return Check(judge.__name__, Params, judge, scalar, needs, figure, excludes, twin,
                     cannot)
    return make


def _needs_a_fault(what: str, disruptive: bool = False):
    """A ``cannot`` for a check that judges a fault's effect: refused with none to judge."""
    def cannot(params, scenario, world: World) -> tuple[str, str] | None:
        has = scenario.disrupts if disruptive else bool(scenario.faults)
        if not has:
            kind = "disruptive fault (one that kills, cuts or stalls)" if disruptive else "fault"
            return "", f"the scenario has no {kind}: {what}; add one, or drop the check"
        return None
    return cannot


# -- shorthands: each reads (check name, scalar) into the long form's mapping ----------------------
def _true(name: str, value: Any) -> dict:
    if value is not True:
        raise ValueError(f"write `{name}: true` (or `{name}: {{}}`), not {value!r}")
    return {}


def _count(*fields: str) -> Callable[[str, Any], dict]:
    """A whole number that fills ``fields`` (``restarts: 1`` is exactly one)."""
    def read(name: str, value: Any) -> dict:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"write a whole number (`{name}: 1`) or the mapping form, not "
                             f"{value!r}")
        return dict.fromkeys(fields, value)
    return read


def _seconds(name: str, value: Any) -> dict:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"write a number of seconds (`{name}: 30`) or the mapping form, not "
                         f"{value!r}")
    return {"seconds": value}


def _text(field_name: str) -> Callable[[str, Any], dict]:
    def read(name: str, value: Any) -> dict:
        if not isinstance(value, str):
            raise ValueError(f"write a string (`{name}: ...` is its {field_name}) or the mapping "
                             f"form, not {value!r}")
        return {field_name: value}
    return read


def _line(e: dict, t0: float) -> str:
    extra = {k: v for k, v in e.items() if k not in ("ts", "source", "type", "metrics")}
    reward = (e.get("metrics") or {}).get("rollout/reward_mean") \
        if isinstance(e.get("metrics"), dict) else None
    if is_number(reward):
        extra["reward"] = round(reward, 3)
    return f"+{e['ts'] - t0:7.2f}s {e['source']:7} {e['type']:18} {json.dumps(extra)[:160]}"


def _end(o: Outcome) -> dict | None:
    ends = o.trainer("run_end")
    return ends[-1] if ends else None


def _interesting(o: Outcome) -> list[str]:
    """The timeline without its step_end lines, except the last (how far training got)."""
    last = o.trainer("step_end")[-1:]
    keep = [e for e in o.timeline if e["type"] != "step_end" or any(e is x for x in last)]
    return [_line(e, o.started) for e in keep][-25:]


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


def _started_at(o: Outcome, attempt) -> float:
    """When launch ``attempt`` started (0 where unknown)."""
    return next((e["ts"] for e in o.rlsim("trainer_started") if e.get("attempt") == attempt),
                0.0)


def stalled_said(e: dict) -> str:
    """A ``trainer_stalled`` event (the progress watchdog ended the run) in words: after which
    fault, how long silent, what of the trainer Ray held on dead nodes, its last line."""
    bound = e.get("bound_s")
    end = "the launch was killed and relaunched (relaunch.on_stall)" if e.get("relaunched") \
        else "the run was ended"
    words = [f"the trainer stalled after {e.get('fault', 'a fault')}: no progress for "
             f"{e.get('seconds', '?')} s (trainer.progress_watchdog_s: {bound}), so {end}"]
    if e.get("unread"):
        words.append(f"what it waits on could not be read ({e['unread']})")
    if e.get("died"):
        words.append(f"its actors that died since: {e['died']}")
    if e.get("alive"):
        words.append(f"alive and waiting: {e['alive']}")
    if e.get("on_dead_nodes"):
        words.append(f"Ray still held of it on dead nodes: {e['on_dead_nodes']}")
    if e.get("unplaced"):
        words.append(f"waiting for a place: {e['unplaced']}")
    if isinstance(e.get("down"), dict) and e["down"] and not e.get("on_dead_nodes"):
        words.append(f"nodes down: {', '.join(f'{n} ({why})' for n, why in e['down'].items())}")
    last = [line for line in e.get("last_lines") or [] if isinstance(line, str)]
    if last:
        words.append(f"its last line: {' '.join(last[-1].split())[:200]}")
    return "; ".join(words)


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
    elif not errors:
        msg = f"expected a failure matching {p.pattern!r}, but the trainer logged no error " \
              f"(exit {o.returncode})"
    elif not matched:
        msg = f"the trainer failed, but not with {p.pattern!r}: {text[:300]}"
    else:
        msg = f"the failure came after {took:.1f} s, expected within {p.within_s} s"
    return Verdict("fails", ok, msg, took, _interesting(o))


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


def _restarts(o: Outcome) -> list[dict]:
    """In-process restarts (the trainer's ``restart``) and relaunches by the runner, in order."""
    return sorted(o.trainer("restart") + o.rlsim("relaunch"), key=lambda e: e["ts"])


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


def _first_fault(o: Outcome) -> dict | None:
    hits = [e for e in o.rlsim("fault_injected") if e.get("disruptive")]
    return hits[0] if hits else None


class WithinS(Strict):
    seconds: float = Field(gt=0, le=DAY)


@check(WithinS, _seconds, figure="detected in (s)",
       cannot=_needs_a_fault("there is nothing to detect", disruptive=True))
def detected_within_s(o: Outcome, p) -> Verdict:
    fault = _first_fault(o)
    if fault is None:
        return Verdict("detected_within_s", False, "no fault was injected",
                       evidence=_interesting(o))
    # the first sign the trainer noticed: its own event, or its exit with an error (not the
    # exit of a launch the watchdog killed: the harness noticed that, not the trainer)
    killed = {e.get("attempt") for e in o.rlsim("trainer_exited") if any(
        s["ts"] <= e["ts"] and s["ts"] >= _started_at(o, e.get("attempt"))
        for s in o.rlsim("trainer_stalled"))}
    signs = [e for e in o.trainer() if e["type"] in DETECTION_EVENTS] + \
        [e for e in o.rlsim("trainer_exited") if e["returncode"] and e.get("attempt") not in
         killed]
    seen = sorted((e for e in signs if e["ts"] >= fault["ts"]), key=lambda e: e["ts"])
    if not seen:
        stalled = o.rlsim("trainer_stalled")
        return Verdict("detected_within_s", False, f"the trainer never reported the "
                       f"{fault['fault']} (no worker_died, node_lost or error event, no failed "
                       "exit)" + (f"; {stalled_said(stalled[0])}" if stalled else ""),
                       evidence=_interesting(o))
    took = seen[0]["ts"] - fault["ts"]
    return Verdict("detected_within_s", took <= p.seconds,
                   f"{seen[0]['type']} {took:.2f} s after {fault['fault']} (limit {p.seconds} s)",
                   took, _interesting(o))


@check(WithinS, _seconds, needs=("step_end",), figure="longest without a step (s)")
def progress_within_s(o: Outcome, p) -> Verdict:
    """No stretch without a step longer than ``seconds``, from the trainer's start to the end of
    its training: its last step where the run completed (the teardown after it is a figure of
    the report, not a stall), its last exit where it did not (a run that stopped stepping until
    it was killed). A start-up stall counts: a first step that never came within the bound
    fails, naming the last event. A step a framework dropped from its reports does not make a
    stall: only the time between the steps reported counts. The gray failure's check, where
    nothing dies and the run only slows or stops."""
    steps = o.trainer("step_end")
    started = o.rlsim("trainer_started")
    begin = started[0]["ts"] if started else steps[0]["ts"] if steps else None
    exits = o.rlsim("trainer_exited")
    completed = any(e.get("status") == "completed" for e in o.trainer("run_end"))
    if begin is None:
        return Verdict("progress_within_s", False, "the trainer never started",
                       evidence=_interesting(o))
    if not steps:
        end = exits[-1]["ts"] if exits else max(e["ts"] for e in o.timeline)
        last = [e for e in o.timeline if begin <= e["ts"] <= end]
        return Verdict("progress_within_s", False,
                       f"no step in the {end - begin:.1f} s after the trainer started (limit "
                       f"{p.seconds} s); the last event: {last[-1]['type'] if last else 'none'}",
                       round(end - begin, 2), _interesting(o))
    tail = [] if completed else [e["ts"] for e in exits[-1:] if e["ts"] > steps[-1]["ts"]]
    marks = sorted([begin] + [e["ts"] for e in steps] + tail)
    gaps = [(b - a, a, b) for a, b in itertools.pairwise(marks)]
    gap, start, end = max(gaps, default=(0.0, marks[0], marks[0]))
    during = [e for e in o.timeline if start <= e["ts"] < end and e["type"] != "step_end"]
    last = (during or [e for e in steps if e["ts"] <= start])[-1]
    return Verdict("progress_within_s", gap <= p.seconds,
                   f"longest without a step: {gap:.1f} s (limit {p.seconds} s), from "
                   f"+{start - o.started:.1f} s; the last event in it: {last['type']}",
                   round(gap, 2), _interesting(o))


@check(WithinS, _seconds, needs=("step_end",), figure="recovered in (s)")
def recovered_within_s(o: Outcome, p) -> Verdict:
    fault = _first_fault(o)
    restarts_ = [e for e in _restarts(o) if fault and e["ts"] >= fault["ts"]]
    if fault is None or not restarts_:
        return Verdict("recovered_within_s", False, "no restart after the fault",
                       evidence=_interesting(o))
    after = [e for e in o.trainer("step_end") if e["ts"] > restarts_[0]["ts"]]
    if not after:
        return Verdict("recovered_within_s", False, "training never resumed after the restart",
                       evidence=_interesting(o))
    took = after[0]["ts"] - fault["ts"]
    return Verdict("recovered_within_s", took <= p.seconds,
                   f"training resumed (step {after[0]['step']}) {took:.2f} s after "
                   f"{fault['fault']} (limit {p.seconds} s)", took, _interesting(o))


def _metrics(run_dir: Path, twin: bool = False) -> tuple[dict[int, dict], str]:
    """Each step's row of ``run_dir``'s ``metrics.jsonl`` (``perf/`` and ``attempt`` fields left
    out; a step logged again after a restart, as last logged) and a note for the verdict. A last
    line cut short is what a killed run leaves: it is left out and the note says so; in the
    twin's record (``twin``) it is damage. Raises Damaged naming the file, the row and the fix
    for a row that is not an object with an integer ``step``, or a file not read as rlsim reads
    records (a link, a FIFO, over :data:`MAX_HISTORY`)."""
    path = run_dir / "metrics.jsonl"
    fix = ("train the twin again (`--fresh-twin`)" if twin else
           "the trainer writes one JSON object per line, with its integer step")
    try:
        values, torn = read_json_lines(path, MAX_HISTORY)
    except FileNotFoundError:
        return {}, ""
    except (OSError, Damaged) as e:
        raise Damaged(f"{e}: {fix}") from None
    if torn and twin:
        raise Damaged(f"{shown(path)}: its last line is cut short: {fix}")
    rows = {}
    for n, row in enumerate(values, 1):
        if not isinstance(row, dict) or type(row.get("step")) is not int:
            raise Damaged(f"{shown(path)}: row {n} is not a metrics row (a JSON object with an "
                          f"integer step): {fix}")
        rows[row["step"]] = {k: v for k, v in row.items() if not k.startswith(("perf/", "attempt"))}
    return rows, (f"; the last line of the run's {path.name} was cut short (a run killed "
                  "mid-write leaves it so) and is left out" if torn else "")


class MatchesBaseline(Strict):
    weights: bool = Field(True, description="also compare the final weights")
    rtol: float = Field(0.0, ge=0, description="relative tolerance per metric and weight "
                        "(0: exact, the reference trainer's promise)")
    atol: float = Field(0.0, ge=0, description="absolute tolerance per metric and weight")


@check(MatchesBaseline, _true, needs=("metrics.jsonl",), twin=True)
def matches_baseline(o: Outcome, p) -> Verdict:
    """Every step's metrics (and the final weights) equal the fault-free twin's: bit for bit by
    default; within ``|run - twin| <= atol + rtol * |twin|`` for trainers whose numbers are not
    bit-exact (non-deterministic kernels, another reduction order after a rebuild)."""
    if o.baseline_dir is None:
        return Verdict("matches_baseline", False, "the baseline twin did not run")
    try:
        a, torn = _metrics(o.run_dir)
        b, _ = _metrics(o.baseline_dir, twin=True)
    except Damaged as e:
        return Verdict("matches_baseline", False, str(e) + _twin(o))
    if not b:
        return Verdict("matches_baseline", False, "the baseline twin logged no metrics")
    differ = [s for s in sorted(set(a) | set(b)) if not _close_rows(a.get(s), b.get(s), p)]
    tol = f"rtol={p.rtol:g}, atol={p.atol:g}" if p.rtol or p.atol else ""
    if differ:
        s = differ[0]
        return Verdict("matches_baseline", False, f"metrics differ from the fault-free twin from "
                       f"step {s} on ({len(differ)} steps): run {a.get(s)} vs twin {b.get(s)}"
                       + (f" ({tol})" if tol else "") + torn + _twin(o))
    msg = f"all {len(a)} steps' metrics {f'are within {tol} of' if tol else 'equal'} the " \
        "fault-free twin's"
    if p.weights:
        same, what = _same_weights(o.run_dir, o.baseline_dir, max(a), p.rtol, p.atol)
        if not same:
            return Verdict("matches_baseline", False, what + torn + _twin(o))
        msg += "; " + what
    return Verdict("matches_baseline", True, msg + torn + _twin(o))


def _twin(o: Outcome) -> str:
    """How a verdict names the twin it compared against: its key and when it was made."""
    about = o.baseline_about
    if not about:
        return ""
    made = about.get("made")
    try:  # a record's time is read back: 1e300 or NaN there is no date, and no traceback
        made = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(made)) \
            if is_number(made) else "?"  # (localtime(None) is now)
    except (ValueError, OverflowError, OSError):
        made = "?"
    how = "kept from an earlier run" if about.get("cached") else "trained for this run"
    if isinstance(damaged := about.get("replaced_damaged"), str):
        how += f", replacing a damaged record ({damaged})"
    return f" (twin {shown(str(about.get('key', '?')))[:40]}, {how}, made {made})"


def _close_rows(run: dict | None, twin: dict | None, p) -> bool:
    """One step's metrics: the same names, each value equal (or, for numbers, within the
    tolerance)."""
    if run is None or twin is None or run.keys() != twin.keys():
        return run == twin
    return all(_close(run[k], twin[k], p.rtol, p.atol) for k in run)


def _close(x, y, rtol: float, atol: float) -> bool:
    numbers = (int, float)
    if not (rtol or atol) or not (isinstance(x, numbers) and isinstance(y, numbers)):
        return x == y
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= atol + rtol * abs(y)


def _same_weights(run: Path, twin: Path, step: int, rtol: float = 0.0,
                  atol: float = 0.0) -> tuple[bool, str]:
    """Whether the final exports at ``step`` hold the same tensors, all of them, each equal (or
    within the tolerances), and the sentence that says so. A tensor missing from either side,
    or empty on either (an emptied export holds no weights to compare), fails naming it, as
    does an export that is missing or cannot be read."""
    rel = Path("checkpoints") / f"global_step_{step}" / "hf" / "model.safetensors"
    with contextlib.suppress(OSError):  # a link is followed: never to the twin's own file
        if os.path.samefile(run / rel, twin / rel):
            return False, (f"the run's final HF export ({rel}) is the twin's own file: there is "
                           "nothing of the run's to compare")
    exports = {}
    for side, root in (("run", run), ("twin", twin)):
        try:
            exports[side] = _safetensors(root / rel)
        except FileNotFoundError:
            return False, (f"no final HF export at step {step} to compare ({rel}: the {side} "
                           "has none)")
        except ValueError as e:
            return False, str(e)
        if not exports[side]:
            return False, f"the {side}'s final HF export at step {step} holds no tensors ({rel})"
    x, y = exports["run"], exports["twin"]
    bad = [(k, why) for k in sorted(set(x) | set(y))
           if (why := _tensor_problem(x.get(k), y.get(k), rtol, atol))]
    same = "bit-identical" if not (rtol or atol) else f"within rtol={rtol:g}, atol={atol:g}"
    if not bad:
        return True, f"final weights {same} ({len(x)} tensors)"
    name, why = bad[0]
    return False, (f"final weights differ in {len(bad)} tensors (first: {shown(name)[:80]}"
                   + ("" if why == "differs" else f", {why}") + ")")


def _tensor_problem(a: tuple | None, b: tuple | None, rtol: float, atol: float) -> str | None:
    """What is wrong with one tensor of the run's export (``a``) against the twin's (``b``),
    as :func:`_safetensors` reads them (None: absent); None when they agree."""
    for t, side in ((a, "run"), (b, "twin")):
        if t is None:
            return f"missing from the {side}'s export"
        if not t[2]:
            return f"empty in the {side}'s export"
    same = a == b if not (rtol or atol) else _tensors_close(a, b, rtol, atol)
    return None if same else "differs"


# safetensors' dtypes as numpy reads them (BF16: the high half of a float32)
_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                 "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?", "BF16": "<u2"}


def _safetensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Each tensor of a safetensors file: its dtype, shape and bytes, read from the format's
    8-byte header length and JSON header (no torch: importing it cost `rlsim run` 1.3 s).
    FileNotFoundError when there is none; ValueError naming the file for one that is not read
    (a FIFO, over :data:`MAX_WEIGHTS`) or whose header does not describe its bytes (offsets
    outside the data, a size that is not the shape's). A link is followed: the export is the
    trainer's own, and frameworks link weights from a cache."""
    try:
        data = read_file(path, MAX_WEIGHTS, follow=True)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ValueError(f"{e}: the weights cannot be compared") from None
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    try:
        if not 0 < size <= len(data) - 8:
            raise ValueError("no header")
        header = json.loads(data[8:8 + size])
        body = data[8 + size:]
        return {name: _tensor(t, body) for name, t in header.items() if name != "__metadata__"}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as e:
        raise ValueError(f"{shown(path)} is not a safetensors file ({why_not_read(e)}): the "
                         "weights cannot be compared") from None


MAX_WEIGHTS = 1 << 30  # a final export read whole (as the twins' store keeps it)
_ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1}


def _tensor(t: dict, body: bytes) -> tuple[str, tuple[int, ...], bytes]:
    """One entry of a safetensors header as its dtype, shape and bytes; ValueError where the
    entry does not describe bytes of ``body`` (a sliced past end is no tensor of the file)."""
    dtype, shape, (begin, end) = t["dtype"], tuple(t["shape"]), t["data_offsets"]
    if not (isinstance(dtype, str) and all(type(n) is int and n >= 0 for n in shape)
            and type(begin) is int and type(end) is int and 0 <= begin <= end <= len(body)):
        raise ValueError(f"a tensor's entry {str(t)[:80]} does not fit the file")
    if dtype in _ITEM_BYTES and end - begin != math.prod(shape) * _ITEM_BYTES[dtype]:
        raise ValueError(f"a tensor of shape {list(shape)} {dtype} holds {end - begin} bytes")
    return dtype, shape, body[begin:end]


def _tensors_close(a: tuple, b: tuple, rtol: float, atol: float) -> bool:
    """Whether two tensors (:func:`_safetensors`) agree within the tolerances, as
    ``torch.allclose``: same dtype and shape, |a - b| <= atol + rtol * |b| everywhere, NaN
    never close."""
    import numpy as np

    if a[:2] != b[:2] or a[0] not in _NUMPY_DTYPES:
        return a == b

    def values(t):
        v = np.frombuffer(t[2], dtype=_NUMPY_DTYPES[t[0]])
        if t[0] == "BF16":
            v = (v.astype(np.uint32) << 16).view(np.float32)
        return v.astype(np.float64)
    return bool(np.allclose(values(a), values(b), rtol=rtol, atol=atol, equal_nan=False))


class ThroughputWithin(Strict):
    ratio: float = Field(gt=0, le=1, description="the run's steps per second over its "
                         "fault-free twin's, at least (0.8: a fifth slower at most; a run with a "
                         "fault is not faster than without, so at most 1)")
    after: float | None = Field(None, gt=0, le=1, description="the ratio the window after "
                                "the heal must reach, where it differs (default: ratio); with "
                                "below, a run whose own steps while the fault held were at most "
                                "below of its own after the heal has recovered too")
    below: float | None = Field(None, gt=0, le=10, description="the ratio in the fault's window "
                                "must also be at most this, against the twin or against the "
                                "run's own first steps after the heal (as many as the fault's "
                                "window had, at least 5): a gray fault that cost no speed "
                                "did not happen (0.8: at least a fifth slower while in force)")

    @model_validator(mode="after")
    def _a_window_can_pass(self):
        if self.below is not None and self.below < self.ratio:
            raise ValueError(f"below {self.below:g} is under ratio {self.ratio:g}: no speed "
                             "is both; swap them")
        return self


def _ratio(name: str, value: Any) -> dict:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"write a ratio (`{name}: 0.8`) or the mapping form, not {value!r}")
    return {"ratio": value}


def step_seconds(steps: list[dict]) -> dict[int, tuple[float, float]]:
    """Each step's (start, end) from ``step_end`` events: it starts where the step before it
    ended (the first has no start and is left out); a step redone after a restart counts as it
    was last done, its start the last event before it, so a restart's cost falls in its window."""
    spans: dict[int, tuple[float, float]] = {}
    for before, e in itertools.pairwise(sorted(steps, key=lambda e: e["ts"])):
        spans[e["step"]] = (before["ts"], e["ts"])
    return spans


OWN_AFTER_MIN = 5  # steps after the heal the run's own pace is read from, at least


def own_ratio(run: dict[int, tuple[float, float]], twin: dict[int, tuple[float, float]],
              start: float, heal: float | None) -> tuple[float, int] | None:
    """The run's steps per second in the fault's window over its own right after the heal,
    and how many steps after it was read from: as many as the window had (at least
    :data:`OWN_AFTER_MIN`), the nearest in time, so that a machine whose load changed later
    does not move the reference (a gate's other tests: flapping_link's 30 steps under the flaps
    were 0.66 of its own first 30 after, 0.98 of all 67 after); None where either window has
    no step."""
    windows = _windows(run, twin, start, heal)
    after = windows["after"][:max(len(windows["during"]), OWN_AFTER_MIN)]
    took = {name: sum(run[s][1] - run[s][0] for s in steps)
            for name, steps in (("during", windows["during"]), ("after", after))}
    if not windows["during"] or not after or not took["during"] or not took["after"]:
        return None
    return (len(windows["during"]) / took["during"]) / (len(after) / took["after"]), len(after)


def _windows(run: dict[int, tuple[float, float]], twin: dict[int, tuple[float, float]],
             start: float, heal: float | None) -> dict[str, list[int]]:
    """The steps both ran in the fault's window (steps that end after ``start`` and begin
    before ``heal``) and after it (steps begun after ``heal``), in order."""
    windows: dict[str, list[int]] = {"during": [], "after": []}
    for step, (a, b) in sorted(run.items()):
        if step not in twin:
            continue
        if b > start and (heal is None or a < heal):
            windows["during"].append(step)
        elif heal is not None and a >= heal:
            windows["after"].append(step)
    return windows


def window_ratios(run: dict[int, tuple[float, float]], twin: dict[int, tuple[float, float]],
                  start: float, heal: float | None) -> dict[str, tuple[float, int] | None]:
    """The run's throughput over the twin's on the same steps, (ratio, steps), for the fault's
    window and the window after it (:func:`_windows`); None where a window has no step both
    ran."""
    windows = _windows(run, twin, start, heal)
    out: dict[str, tuple[float, int] | None] = {}
    for name, steps in windows.items():
        took = sum(run[s][1] - run[s][0] for s in steps)
        out[name] = (sum(twin[s][1] - twin[s][0] for s in steps) / took, len(steps)) \
            if steps and took > 0 else None
    return out


@check(ThroughputWithin, _ratio, needs=("step_end",), figure="throughput vs twin", twin="timed",
       cannot=_needs_a_fault("it compares the fault's window with the twin's"))
def throughput_within(o: Outcome, p) -> Verdict:
    """Steps per second against the fault-free twin over the same steps, judged separately in
    the first fault's window (from its injection to its heal) and after its heal: a gray failure
    costs speed, not correctness, and a run that stays slow after the heal has not recovered."""
    faults = o.rlsim("fault_injected")
    if o.baseline_dir is None or not faults:
        return Verdict("throughput_within", False, "the baseline twin did not run" if faults
                       else "no fault was injected", evidence=_interesting(o))
    events = o.baseline_dir / "events.jsonl"
    twin = step_seconds([e for e in (read_events(events) if events.exists() else [])
                         if e["type"] == "step_end"])
    if not twin:
        return Verdict("throughput_within", False, "the baseline twin logged no steps")
    fault = faults[0]
    healed = [e["ts"] for e in o.rlsim("fault_healed") if e.get("index") == fault.get("index")]
    run = step_seconds(o.trainer("step_end"))
    ratios = window_ratios(run, twin, fault["ts"], healed[0] if healed else None)
    parts = [f"{name}: {r[0]:.2f} of the twin's steps/s over {r[1]} steps" if r else
             f"{name}: no steps" for name, r in ratios.items() if r or name == "during"]
    limits = {"during": p.ratio, "after": p.ratio if p.after is None else p.after}
    judged = {name: r[0] for name, r in ratios.items() if r}
    want = f"{p.ratio}" if p.after is None else f"{p.ratio} during, {p.after} after"
    # The twin trained minutes before, and a busy machine can slow it, or the run, by half:
    # the run's own steps after the heal are a second reference taken under the same load.
    mine = own_ratio(run, twin, fault["ts"], healed[0] if healed else None) \
        if p.below is not None else None
    own = mine[0] if mine else None
    # Recovered after the heal: back to the limit of the twin's speed, or (with ``below``)
    # clearly faster than while the fault held, under the same load (a gate's load halved a
    # healed slow_node's pace against a twin trained a minute earlier: 0.41 of it after, its
    # own steps while throttled 0.49 of its own after)
    recovered = own is not None and own <= p.below
    ok = bool(judged) and all(r >= limits[name] or (name == "after" and recovered)
                              for name, r in judged.items())
    if p.below is not None:
        if own is not None:
            parts.append(f"during against its own after the heal: {own:.2f} (its first "
                         f"{mine[1]} steps after)")
        ok = ok and "during" in judged and (judged["during"] <= p.below or recovered)
        want += (f" (after: or its own during at most {p.below} of its own after), and at "
                 f"most {p.below} during, against the twin or its own after")
    return Verdict("throughput_within", ok, f"{fault['fault']}: " + "; ".join(parts) +
                   f" (at least {want} expected)" + _twin(o),
                   round(min(judged.values()), 3) if judged else None, _interesting(o))


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


class FaultsLanded(Strict):
    pass


@check(FaultsLanded, _true)
def faults_landed(o: Outcome, p) -> Verdict:
    """Every fault of the scenario fired and did what it is for: reached the trainer, or (a
    remedy) brought back what it names. Every scenario with faults is
    judged by it (it need not be written): a fault whose injection failed fails it (unless an
    ``event`` check counts ``fault_error``: the refusal is the story), as does one that never
    fired although the run went on to its end; a disruptive one that reached nothing of the
    trainer's jobs (actors, tasks leased or running, placement-group bundles, drivers) nor cut
    any of it off (its ``fault_injected`` event: ``touched``, or where the trainer was,
    ``trainer_at``; a fault held until healed also by what the trainer started under it, its
    ``fault_reached`` event) unless its entry says ``may_miss: true``; a remedy (a restart of a
    node that was down: ``remedy``) whose node did not come back (``alive``); a
    storage fault while the trainer wrote nothing under its path (its heal: ``touched``); a gray
    fault whose measured effect was none (its heal: ``effect``)."""
    sc = o.scenario
    by = {kind: {e["index"]: e for e in o.rlsim(kind)} for kind in (
        "fault_injected", "fault_reached", "fault_error", "fault_healed", "fault_torn_down")}
    refusal_expected = any(name == "event" and params.type == "fault_error"
                           for name, params in sc.checks())
    story_ends = any(name in ("fails", "refused") for name, _ in sc.checks())
    bad, said = [], []
    for i, entry in enumerate(sc.faults):
        what = f"{entry.kind} (faults[{i}])"
        if i in by["fault_error"]:
            line = f"{what} could not be injected: {by['fault_error'][i]['message'][:300]}"
            (said if refusal_expected else bad).append(line)
        elif i not in by["fault_injected"]:
            line = f"{what} never fired: the run ended before it was due"
            (said if story_ends or o.refusal is not None else bad).append(line)
        else:
            ok, line = _landed(what, {**by["fault_injected"][i], **by["fault_reached"].get(i, {})},
                               by["fault_healed"].get(i) or by["fault_torn_down"].get(i))
            missed_on_purpose = not ok and entry.may_miss
            (said if ok or entry.may_miss else bad).append(
                line + ("; the scenario means it to miss (may_miss)" if missed_on_purpose
                        else ""))
    return Verdict("faults_landed", not bad, "; ".join(bad or said) or "no fault to judge",
                   len(bad), evidence=bad + said)


def _landed(what: str, e: dict, healed: dict | None) -> tuple[bool, str]:
    """Whether one injected fault did what it is for, and what that was, in words: a remedy
    (``remedy``: a restart of a node that was down) brought back what it names; a disruptive
    fault reached something of the trainer; a fault on files met its writes; a gray fault
    changed something."""
    effect = (healed or {}).get("effect")
    if effect is not None and not effect.get("changed"):
        return False, (f"{what} was in force but changed nothing of the trainer: "
                       f"{json.dumps({k: v for k, v in effect.items() if k != 'changed'})}")
    if e.get("remedy"):
        return _restored(what, e)
    if e.get("reach_unknown"):
        return True, f"{what} fired; what it reached could not be read ({e['reach_unknown']})"
    if e.get("disruptive", True):
        return _reached(what, e)
    touched = (healed or {}).get("touched")
    if touched is None:  # a file fault with nothing to measure: what it did is its record
        path = e.get("path") or "the trainer's files"
        return True, f"{what} changed {path}"
    if not touched.get("files") and not touched.get("dirs"):
        return False, (f"{what} was in force while the trainer wrote nothing under "
                       f"{touched.get('path')}: it met nothing of the trainer")
    return True, (f"{what} met the trainer's writes: {touched.get('files', 0)} file(s), "
                  f"{touched.get('bytes', 0)} bytes under {touched.get('path')}")


def _restored(what: str, e: dict) -> tuple[bool, str]:
    """A remedy judged by what it restored (its record's ``alive``: Ray's node table after it),
    never by what of the trainer it hit."""
    nodes = _nodes_said(e.get("nodes"))
    was = "; ".join(f"node {d.get('node')} was down from {d.get('by')}"
                    for d in e.get("was_down") or [] if isinstance(d, dict))
    was = f" ({was})" if was else ""
    if e.get("alive") is False:
        return False, (f"{what} was to bring back {nodes}{was}, but it is not alive in Ray's "
                       "node table after the restart")
    if e.get("alive") is None:
        return True, f"{what} fired at {nodes}{was}; it records nothing of whether it is back"
    return True, f"{what} brought {nodes} back{was}: alive in Ray's node table again"


# what a disruptive fault can reach of the trainer, as said (a record made before kinds were
# recorded lists actors only)
REACH_NOUNS = {"actor": "actors", "task": "tasks", "bundle": "placement-group bundles",
               "driver": "drivers"}
NO_TRAINER_ACTOR = "the trainer had no Ray actor alive"  # trainer_at in records before kinds


def _reached(what: str, e: dict) -> tuple[bool, str]:
    """A disruptive fault judged by what of the trainer's jobs it reached (``touched``)."""
    partial = f"; {e['reach_partial']}" if e.get("reach_partial") else ""
    if not e.get("touched_count"):
        hit = _nodes_said(e.get("nodes"))
        return False, (f"{what} hit {hit} and reached nothing of the trainer there (no actor, "
                       "task, placement-group bundle or driver of its jobs, or none it cut "
                       f"off); {_trainer_was(e)}{partial}")
    touched = [a for a in e.get("touched") or [] if isinstance(a, dict)]
    kinds = e.get("touched_kinds") or {}
    if not isinstance(kinds, dict) or not kinds:
        kinds = {}
        for a in touched:
            kinds[a.get("kind") or "actor"] = kinds.get(a.get("kind") or "actor", 0) + 1
    if not kinds:  # a count with nothing listed: a record made before kinds, of actors
        kinds = {"actor": e["touched_count"]}
    nodes = sorted({a.get("node") for a in touched} - {None}, key=str)
    where = f" on node(s) {nodes}" if nodes else ""
    named = {k: ", ".join(sorted({str(a.get("class")) for a in touched
                                  if (a.get("kind") or "actor") == k})) for k in kinds}
    if len(kinds) == 1:
        kind = next(iter(kinds))
        names = f" ({named[kind]})" if named[kind] and kind != "driver" else ""
        return True, (f"{what} reached {e['touched_count']} of the trainer's "
                      f"{REACH_NOUNS.get(kind, kind + 's')}{names}{where}{partial}")
    parts = ", ".join(f"{n} {REACH_NOUNS.get(k, k + 's') if n > 1 else k}"
                      + (f" ({named[k]})" if named[k] and k != "driver" else "")
                      for k, n in kinds.items())
    return True, f"{what} reached the trainer's jobs{where}: {parts}{partial}"


def _nodes_said(nodes) -> str:
    """``node 1``, ``nodes [1, 2]``, or ``its target`` where the record names none."""
    if not isinstance(nodes, list) or not nodes:
        return "its target"
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {nodes}"


def _trainer_was(e: dict) -> str:
    """Where the trainer was when a fault reached none of it, as the end of a sentence."""
    if "trainer_at" not in e:
        return "where the trainer was is not recorded"
    at = e["trainer_at"]
    if at == NO_TRAINER_ACTOR:
        return "the trainer had no Ray actor alive then"
    if not at:
        return ("nothing of the trainer was alive in Ray then (no actor, task, bundle or driver "
                "of its jobs: it had not started yet, or had ended)")
    return f"the trainer was {'' if str(at).startswith('not placed') else 'on '}{at}"


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



class _Figures(Mapping):
    """Check name -> column head of the checks whose value is a figure people compare across
    runs and clusters (from :data:`CHECKS`, on first use); the report, the sign-off page and
    JUnit properties carry them."""

    def _all(self) -> dict[str, str]:
        return {name: c.figure for name, c in CHECKS.items() if c.figure}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


FIGURES = _Figures()
