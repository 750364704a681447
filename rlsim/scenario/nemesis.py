"""The nemesis (Jepsen's word): fires the scenario's faults when due, heals each when its ``for_s``
is up, and heals all at the end whatever happened. Every heal, timed or final, goes through
:meth:`Nemesis.heal`, which logs the result and never lets one fault's failure stop the others.

When a fault is due is decided by :class:`Schedule` against the trainer's own events (steps and
event types) and the clock.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from rlsim.faults import FAULTS, Fault, FaultContext
from rlsim.history import Recorder
from rlsim.scenario.schema import FaultEntry


class Schedule:
    """Which faults are due now, given the trainer's events and the clock."""

    def __init__(self, entries: list[FaultEntry]) -> None:
        self.pending = list(enumerate(entries))

    def due(self, events: list[dict], elapsed: float) -> list[tuple[int, FaultEntry]]:
        fire = [(i, e) for i, e in self.pending if _reached(e, events, elapsed)]
        self.pending = [p for p in self.pending if p not in fire]
        return fire


def _reached(entry: FaultEntry, events: list[dict], elapsed: float) -> bool:
    return reached(entry.at, events, elapsed)


def reached(at, events: list[dict], elapsed: float) -> bool:
    """Whether ``at`` (a step, an event, seconds after the trainer started) has happened."""
    if at.seconds is not None:
        return elapsed >= at.seconds
    wanted = at.event or "step_end"
    return any(e["type"] == wanted and (at.step is None or e.get("step", 0) >= at.step)
               for e in events)


class Nemesis:
    """The scenario's faults, made once (``setup`` may prepare the ground before the trainer
    starts), fired by :meth:`tick` and healed through :meth:`heal`."""

    def __init__(self, entries: list[FaultEntry], ctx: FaultContext, log: Recorder,
                 on_progress=None) -> None:
        self.ctx, self.log, self.on_progress = ctx, log, on_progress
        self.schedule = Schedule(entries)
        self.faults: dict[int, Fault] = {i: FAULTS[e.kind](e.params, ctx)
                                         for i, e in enumerate(entries)}
        self.fired: list[Fault] = []
        self.heal_at: list[tuple[float, Fault]] = []  # for_s: healed at a monotonic time
        self.heal_when: list[tuple[object, float, Fault]] = []  # heal_at: (when, fired at)

    def setup(self) -> None:
        """Each fault's preparation, before the trainer starts (raises: the scenario fails)."""
        for fault in self.faults.values():
            fault.setup()

    def tick(self, events: list[dict], elapsed: float) -> None:
        """Fire what is due; heal what has lasted its ``for_s`` or reached its ``heal_at``."""
        for i, entry in self.schedule.due(events, elapsed):
            self._fire(i, entry)
        now = time.monotonic()
        for when, fault in [h for h in self.heal_at if h[0] <= now]:
            self.heal_at.remove((when, fault))
            self.heal(fault)
        for h in [h for h in self.heal_when
                  if reached(h[0], [e for e in events if e.get("ts", 0) >= h[1]], elapsed)]:
            self.heal_when.remove(h)  # only what happened after the fault fired counts
            self.heal(h[2])

    def _fire(self, i: int, entry: FaultEntry) -> None:
        fault = self.faults[i]
        self.fired.append(fault)
        with _signals_held():  # injected and recorded whole, or not at all
            fired = time.time()  # detection is timed from the moment the fault starts
            try:
                did = fault.inject()
            except Exception as e:  # noqa: BLE001 - a fault that cannot fire is part of the story
                self.log.emit("fault_error", fault=entry.kind, index=i,
                              message=str(e) or type(e).__name__)
                return
            self.log.emit("fault_injected", ts=round(fired, 4), **{
                **did, **fault.meaning(did), "fault": entry.kind, "index": i,
                "took_s": round(time.time() - fired, 3)})
        if self.on_progress:
            self.on_progress({"type": "fault_injected", "fault": entry.kind, **did})
        if entry.for_s:
            self.heal_at.append((time.monotonic() + entry.for_s, fault))
        if entry.heal_at is not None:
            self.heal_when.append((entry.heal_at, fired, fault))

    def heal(self, fault: Fault) -> None:
        """Heal one fault (safe twice), logging what was undone or why it could not be."""
        self._guarded(fault, fault.heal, "fault_healed", "fault_heal_error")

    def heal_fired(self) -> None:
        """Heal every fault that fired, last fired first."""
        for fault in reversed(self.fired):
            self.heal(fault)

    def heal_all(self) -> None:
        """Heal every fault, last fired first, then tear down what ``setup`` prepared."""
        self.heal_fired()
        for fault in reversed(self.faults.values()):
            self._guarded(fault, fault.teardown, "fault_torn_down", "fault_teardown_error")

    def _guarded(self, fault: Fault, step, done: str, failed: str) -> None:
        """Run ``step`` of ``fault``; log what it did, or why it failed, and never raise: the
        other faults must still be healed and torn down. The event carries the fault's
        ``index`` in the scenario, as ``fault_injected`` does (the report pairs them by it)."""
        index = next(i for i, f in self.faults.items() if f is fault)
        try:
            result = step()
            if result is not None:  # what it did, then whose it was (never overwritten)
                self.log.emit(done, **{**result, "fault": fault.name, "index": index})
        except Exception as e:  # noqa: BLE001 - keep going with the others
            self.log.emit(failed, fault=fault.name, index=index, message=str(e))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside wait for its end, then act as they would have (the
    first of them; Python runs handlers in the main thread only, so elsewhere nothing is held).
    A Ctrl-C that landed inside a fault's injection, after its rules were in force but before it
    returned what it did, healed the rules through the cluster's teardown and left the timeline
    without the fault or its heal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[tuple[int, object]] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    old = {s: h for s, h in old.items() if h is not None}  # None: not Python's to put back
    for s in old:
        signal.signal(s, lambda signum, frame: got.append((signum, frame)))
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if got:
            signum, frame = got[0]
            handler = old[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)

