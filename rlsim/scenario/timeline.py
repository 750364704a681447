"""A scenario's history (Jepsen's history): the trainer's events read from its growing
``events.jsonl``, rlsim's own events (faults, cluster, doctor) recorded as they happen, and the
:class:`Outcome` the checks judge once the run is over."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Judged(Protocol):
    """What the checks need of the scenario (a :class:`rlsim.scenario.schema.Scenario`)."""

    name: str

    def checks(self) -> list[tuple[str, Any]]: ...


@dataclass
class Outcome:
    """What happened: the merged timeline, the trainer's exit and output, leaks after teardown."""

    scenario: Judged
    run_dir: Path
    timeline: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    output: str = ""
    started: float = 0.0
    leaks: list[str] = field(default_factory=list)
    baseline_dir: Path | None = None
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
        new = [json.loads(line) for line in lines if line.strip()]
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
        path.write_text("".join(json.dumps(e, default=str) + "\n"
                                for e in self.outcome.timeline))
