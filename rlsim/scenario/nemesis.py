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

from rlsim.events import released
from rlsim.faults import FAULTS, Fault, FaultContext
from rlsim.faults.base import where_trainer_is
from rlsim.faults.footprint import Look, kinds
from rlsim.faults.footprint import where as said_where
from rlsim.files import write_file
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


def _at_step(entry: FaultEntry) -> int | None:
    """The step of a fault due at a ``step_end`` (``at: {step: N}``), else None."""
    at = entry.at
    return at.step if at.seconds is None and at.event in (None, "step_end") else None


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
        self._placed: dict | None = None  # the trainer's latest placement event, learned
        # held faults that reached none of the trainer when they fired (its actors not started
        # yet): index -> (fault, what it did), looked at again while in force
        self.reaching: dict[int, tuple[Fault, dict]] = {}
        self._next_look = 0.0
        self.heal_at: list[tuple[float, Fault]] = []  # for_s: healed at a monotonic time
        self.heal_when: list[tuple[object, float, Fault]] = []  # heal_at: (when, fired at)
        self.held: set[int] = set()  # steps a launch waits at (rlsim.events), not yet released
        # the nodes this run's faults took out of service and nothing brought back yet: index ->
        # (what took it, the fault); a fault that ends such faults fired there is a remedy
        self.down: dict[int, tuple[str, Fault]] = {}
        # when the last disruptive fault (not a remedy) fired, monotonic: the progress
        # watchdog's clock (rlsim.scenario.watchdog)
        self.disrupted_at: float | None = None

    def setup(self) -> None:
        """Each fault's preparation, before the trainer starts (raises: the scenario fails), and
        the GCS reader a disruptive fault's reach is read with, connected now (never while a
        fault is due)."""
        for fault in self.faults.values():
            fault.setup()
        if any(f.disruptive for f in self.faults.values()):
            try:
                self.ctx.open_reader()
            except Exception as e:  # noqa: BLE001 - read when a fault fires, or said unknown
                self.log.emit("fault_reach_unread", message=f"{type(e).__name__}: {e}"[:300])

    def hold_steps(self) -> tuple[int, ...]:
        """The steps at which the next launch waits until the faults due there fired: those of
        the faults not fired yet that are due at a step."""
        steps = {s for _, e in self.schedule.pending if (s := _at_step(e)) is not None}
        self.held |= steps
        return tuple(sorted(steps))

    def release(self, run_dir) -> None:
        """Let the trainer go on past each held step whose faults have all fired."""
        due = {_at_step(e) for _, e in self.schedule.pending}
        for step in sorted(self.held - due):
            self.held.discard(step)
            write_file(released(run_dir, step), b"")

    def tick(self, events: list[dict], elapsed: float) -> None:
        """Learn where the trainer placed its workers (its latest ``placement`` event: a fault
        aimed by role and rank lands there); fire what is due; heal what has lasted its
        ``for_s`` or reached its ``heal_at``."""
        placed = next((e for e in reversed(events) if e.get("type") == "placement"), None)
        if placed is not None and placed is not self._placed:
            self._placed, self.ctx.workers = placed, placed.get("workers")
        for i, entry in self.schedule.due(events, elapsed):
            self._fire(i, entry)
        now = time.monotonic()
        if self.reaching and now >= self._next_look:
            self._next_look = now + LOOK_AGAIN_S
            self._look_again()
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
        look, unseen = self._look() if fault.disruptive else (Look([]), None)
        down = {**look.down, **{n: why for n, (why, _) in self.down.items()}}
        with _signals_held():  # injected and recorded whole, or not at all
            fired = time.time()  # detection is timed from the moment the fault starts
            try:
                did = fault.inject()
            except Exception as e:  # noqa: BLE001 - a fault that cannot fire is part of the story
                self.log.emit("fault_error", fault=entry.kind, index=i,
                              message=str(e) or type(e).__name__)
                return
            remedy = fault.remedies(did, down)
            self.log.emit("fault_injected", ts=round(fired, 4), **{
                **did, **fault.meaning(did), "fault": entry.kind, "index": i,
                "took_s": round(time.time() - fired, 3),
                **(_remedy(fault, did, down) if remedy else
                   _reach(fault, did, look, unseen) if fault.disruptive else {}),
                **({"may_miss": True} if entry.may_miss else {})})
        self._note_down(i, fault, did)
        if fault.disruptive and not remedy:
            self.disrupted_at = time.monotonic()
        if fault.disruptive and not remedy and fault.held_until_healed() and not fault.touched(
                did, look.footprint):
            self.reaching[i] = (fault, did)  # rules, a throttle: the trainer may start under it
        if self.on_progress:
            self.on_progress({"type": "fault_injected", "fault": entry.kind, **did})
        if entry.for_s:
            self.heal_at.append((time.monotonic() + entry.for_s, fault))
        if entry.heal_at is not None:
            self.heal_when.append((entry.heal_at, fired, fault))

    def _note_down(self, i: int, fault: Fault, did: dict) -> None:
        """What the fault just fired did to the nodes' service: a kill, a freeze or a
        preemption takes its nodes down; a restart brings them up, or leaves them down where
        they did not come back."""
        for node in fault.nodes_hit(did):
            if fault.ends and did.get("alive", True):
                self.down.pop(node, None)
            elif fault.ends:
                self.down[node] = (f"{fault.name} (faults[{i}]), which did not bring it back",
                                   fault)
            if fault.takes_down():
                self.down[node] = (f"{fault.name} (faults[{i}])", fault)

    def _look(self) -> tuple[Look, str | None]:
        """The trainer's footprint and the nodes Ray holds down, now, or why they could not be
        read within :data:`FOOTPRINT_WAIT_S` (the GCS gone or frozen by an earlier fault): a
        fault's reach is then not known, never guessed, and the fault fires on time all the
        same."""
        got: list = []

        def read() -> None:
            try:
                got.append((self.ctx.look(), None))
            except Exception as e:  # noqa: BLE001 - the fault still fires; its reach unknown
                got.append((Look([]), f"{type(e).__name__}: {e}"[:300]))

        reader = threading.Thread(target=read, name="rlsim-fault-reach", daemon=True)
        reader.start()
        reader.join(FOOTPRINT_WAIT_S)
        if got:
            return got[0]
        self.ctx.forget_reader()  # the thread may still hold it: a new one next time
        return Look([]), f"the GCS did not answer within {FOOTPRINT_WAIT_S:g} s"

    def waits_on(self) -> dict:
        """What of the trainer Ray holds now, for a trainer that stalled after a fault: its
        actors, tasks, bundles and drivers on nodes that are down (``on_dead_nodes``, in words),
        those on no node (being placed or restarting: ``unplaced``), the nodes down and why; or
        why it could not be read (``unread``)."""
        look, unseen = self._look()
        if unseen is not None:
            return {"unread": unseen}
        down = {**look.down, **{n: why for n, (why, _) in self.down.items()}}
        dead = [a for a in look.footprint if a.get("node") in down]
        unplaced = [a for a in look.footprint if a.get("node") is None]
        return {"down": {str(n): why for n, why in sorted(down.items())},
                "on_dead_nodes": said_where(dead), "unplaced": said_where(unplaced),
                "alive": said_where([a for a in look.footprint
                                          if a not in dead and a not in unplaced]),
                **({"unread": look.unread} if look.unread else {})}

    def _look_again(self) -> None:
        """The held faults that reached none of the trainer when they fired, against its
        actors now: one that reaches some (the trainer's actors started under it) says so in a
        ``fault_reached`` event, once."""
        look, unseen = self._look()
        if unseen is not None:
            return
        for i, (fault, did) in list(self.reaching.items()):
            if touched := fault.touched(did, look.footprint):
                del self.reaching[i]
                self.log.emit("fault_reached", fault=fault.name, index=i,
                              touched=touched[:MAX_TOUCHED], touched_count=len(touched),
                              touched_kinds=kinds(touched))

    def heal(self, fault: Fault) -> None:
        """Heal one fault (safe twice), logging what was undone or why it could not be."""
        self.reaching = {i: r for i, r in self.reaching.items() if r[0] is not fault}
        if self._guarded(fault, fault.heal, "fault_healed", "fault_heal_error"):
            # a freeze thawed: its nodes are in service again (a failed thaw leaves them down)
            self.down = {n: d for n, d in self.down.items() if d[1] is not fault}

    def heal_fired(self) -> None:
        """Heal every fault that fired, last fired first."""
        for fault in reversed(self.fired):
            self.heal(fault)

    def heal_all(self) -> None:
        """Heal every fault, last fired first, then tear down what ``setup`` prepared."""
        self.heal_fired()
        for fault in reversed(self.faults.values()):
            self._guarded(fault, fault.teardown, "fault_torn_down", "fault_teardown_error")
        self.ctx.close()

    def _guarded(self, fault: Fault, step, done: str, failed: str) -> bool:
        """Run ``step`` of ``fault``; log what it did, or why it failed, and never raise: the
        other faults must still be healed and torn down. The event carries the fault's
        ``index`` in the scenario, as ``fault_injected`` does (the report pairs them by it).
        True where ``step`` did something and did not fail."""
        index = next(i for i, f in self.faults.items() if f is fault)
        try:
            result = step()
            if result is not None:  # what it did, then whose it was (never overwritten)
                self.log.emit(done, **{**result, "fault": fault.name, "index": index})
        except Exception as e:  # noqa: BLE001 - keep going with the others
            self.log.emit(failed, fault=fault.name, index=index, message=str(e))
            return False
        return result is not None


FOOTPRINT_WAIT_S = 3.0  # a GCS that answers does so in milliseconds
LOOK_AGAIN_S = 0.5  # how often a held fault that reached nothing yet is looked at again
MAX_TOUCHED = 64  # actors listed in a fault_injected event (the count is always whole)


def _reach(fault: Fault, did: dict, look: Look, unseen: str | None) -> dict:
    """What of the trainer a disruptive injection reached, for its ``fault_injected`` event:
    everything of the trainer's jobs it reached (``touched``: actors, tasks, bundles, drivers,
    each with its kind, class, node, pid and role ranks), or where the trainer was when it
    reached nothing (``trainer_at``; null where nothing of it was alive in Ray);
    ``reach_unknown`` when the GCS could not be read, ``reach_partial`` what of the trainer
    could not be (its tasks on a Ray that does not say)."""
    if unseen is not None:
        return {"reach_unknown": unseen}
    touched = fault.touched(did, look.footprint)
    return {"touched": touched[:MAX_TOUCHED], "touched_count": len(touched),
            "touched_kinds": kinds(touched),
            **({} if touched else {"trainer_at": where_trainer_is(look.footprint)}),
            **({"reach_partial": look.unread} if look.unread else {})}


def _remedy(fault: Fault, did: dict, down: dict[int, str]) -> dict:
    """How a remedy is written into its ``fault_injected`` event: not disruptive (detection and
    recovery are timed from the first fault that is), and what each node it hit was down from
    (``was_down``). Whether it brought them back is its own record (``alive``)."""
    return {"disruptive": False, "remedy": True,
            "was_down": [{"node": n, "by": down[n]} for n in fault.nodes_hit(did)]}


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

