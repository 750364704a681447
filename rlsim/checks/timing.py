"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

How long things took, in seconds from the fault or the trainer's start: until the trainer
noticed the first disruptive fault, until training resumed after it, the longest stretch
without a step; and the throughput against the fault-free twin, in the fault's window and after
its heal (the window arithmetic is pure, over ``step_end`` times).
"""

from __future__ import annotations

import itertools

from pydantic import Field, model_validator

from rlsim.checks.base import (
    _first_fault,
    _interesting,
    _needs_a_fault,
    _ratio,
    _restarts,
    _seconds,
    _twin,
    check,
    stalled_said,
)
from rlsim.contract import DETECTION_EVENTS
from rlsim.fields import DAY, Strict
from rlsim.history import Outcome, read_events
from rlsim.result import Verdict


def _started_at(o: Outcome, attempt) -> float:
    """When launch ``attempt`` started (0 where unknown)."""
    return next((e["ts"] for e in o.rlsim("trainer_started") if e.get("attempt") == attempt),
                0.0)


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
                   f"+{start - o.started:.1f} s; the last event in it: {last['type']}"
                   + _died_in(during), round(gap, 2), _interesting(o))


def _died_in(during: list[dict]) -> str:
    """What Ray saw die in a stretch without a step (its actors' class and node), in words: the
    engine a swallowed error left the trainer waiting on, named."""
    died = [f"{e.get('class') or 'an actor'} (pid {e.get('pid', '?')}, node "
            f"{e.get('node', '?')}, {e.get('address', '?')})"
            for e in during if e["type"] == "ray_actor_died"]
    return f"; what died in it: {', '.join(died[:5])}" if died else ""


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


# -- throughput against the twin, by window --------------------------------------------------------
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


@check(ThroughputWithin, _ratio("ratio"), needs=("step_end",), figure="throughput vs twin",
       twin="timed",
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
