"""A scenario's history (Jepsen's history), the one record every judge reads: the trainer's events
read from its growing ``events.jsonl``, rlsim's own events (faults, cluster, doctor, Ray's view)
recorded as they happen, and the :class:`Outcome` the checks judge once the run is over.

What happened is written here once, by whoever knew it: a fault writes what it means into its
``fault_injected`` event (whether it is disruptive, which nodes it hits, what state it puts them
in), so that the checks and the report read it from the history and never re-derive it from the
fault's name. ``timeline.jsonl`` is this record on disk (:func:`read_events` reads it back).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlsim.files import read_file, write_file

# the event types the runner records for every adapter (source rlsim): Ray's own (its node and
# actor deaths), a fault that could not be injected (a story whose refusal is the point counts
# it with an ``event`` check), and a trainer the progress watchdog ended (rlsim.scenario.watchdog)
RAY_EVENTS = frozenset({"ray_node_dead", "ray_actor_died"})  # rlsim.scenario.watch's
HARNESS_EVENTS = RAY_EVENTS | {"fault_error", "trainer_stalled"}
MAX_HISTORY = 256 << 20  # a timeline or event log read back whole (a day of a chatty trainer)


class Judged(Protocol):
    """What the checks need of the scenario (a :class:`rlsim.scenario.schema.Scenario`): its name
    and its ``expect`` entries as (check name, validated parameters)."""

    name: str

    def checks(self) -> list[tuple[str, Any]]: ...


@dataclass(frozen=True)
class Leftover:
    """Something a run left behind, and whose it is: the ``trainer``'s (its job's actors,
    placement groups, a driver still connected), one of ``ray``'s own libraries' (a detached
    actor Ray Data or Ray Train keeps by design: ``library`` says which), or ``rlsim``'s (a rule,
    a frozen node, a process that outlived teardown: a bug of rlsim's). ``fix`` says what
    removes it."""

    kind: str
    what: str
    owner: str
    node: str = ""
    library: str = ""
    fix: str = ""

    def line(self) -> str:
        where = f" on {self.node}" if self.node else ""
        lib = f" ({self.library})" if self.library else ""
        return f"{self.kind} {self.what}{where}{lib}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass
class Outcome:
    """What happened: the merged timeline, the trainer's exit and output, leaks after teardown."""

    scenario: Judged
    run_dir: Path
    timeline: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    output: str = ""
    started: float = 0.0
    leaks: list[Leftover] = field(default_factory=list)
    leaks_waited_s: float | None = None  # how long Ray was given to clean up (None: not asked)
    baseline_dir: Path | None = None
    baseline_about: dict | None = None  # the twin: its key, when it was made, whether kept
    refusal: str | None = None  # why the cluster did not form, when it did not

    def trainer(self, type: str | None = None) -> list[dict]:
        return [e for e in self.timeline if e["source"] == "trainer"
                and (type is None or e["type"] == type)]

    def rlsim(self, type: str | None = None) -> list[dict]:
        return [e for e in self.timeline if e["source"] == "rlsim"
                and (type is None or e["type"] == type)]


def new_lines(path: Path, offset: int, final: bool = False) -> tuple[list[str], int]:
    """The complete lines a growing file gained after byte ``offset``, and the offset after them.
    A line still being written waits for the next call, unless ``final`` (the writer is gone)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    complete = chunk if final else chunk[: chunk.rfind(b"\n") + 1]
    return complete.decode(errors="replace").splitlines(), offset + len(complete)


class EventTail:
    """New lines of a growing ``events.jsonl``, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.events = path, 0, []

    def poll(self) -> list[dict]:
        lines, self.offset = new_lines(self.path, self.offset)
        new = [e for e in map(_event, lines) if e is not None]
        self.events += new
        return new

    def exited(self, attempt: int, returncode: int) -> list[dict]:
        """Nothing: a trainer that writes its own events writes its end too."""
        return []


class Recorder:
    """Appends to an outcome's timeline: rlsim's events (``emit``) and the trainer's."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def emit(self, type: str, ts: float | None = None, **fields) -> None:
        self.outcome.timeline.append({"ts": ts or round(time.time(), 4), "source": "rlsim",
                                      "type": type, **fields})

    def trainer(self, event: dict) -> None:
        self.outcome.timeline.append({**event, "source": "trainer"})

    def write(self, path: Path) -> None:
        """The timeline, ordered by time (a fault that blocked is logged when it returned)."""
        self.outcome.timeline.sort(key=lambda e: e["ts"])
        write_file(path, "".join(json.dumps(e, default=str) + "\n"
                                 for e in self.outcome.timeline))


def read_events(path: Path) -> list[dict]:
    """The events of a JSON-lines file: objects with a numeric ``ts`` and a string ``type``
    (a line cut short by a killed writer, or written by hand wrong, is skipped)."""
    lines = read_file(path, MAX_HISTORY).decode(errors="replace").splitlines()
    return [e for e in map(_event, lines) if e is not None]


def _event(line: str) -> dict | None:
    """One line as an event: an object with a numeric ``ts`` and a string ``type``, else None
    (skipped, as a line cut short by a killed writer is)."""
    try:
        e = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(e, dict) and is_number(e.get("ts")) and isinstance(e.get("type"), str)
    return e if ok else None


def is_number(v) -> bool:
    """A JSON number (a bool is not one)."""
    return isinstance(v, int | float) and not isinstance(v, bool)
