"""Trainers known by their output alone (verl, OpenRLHF, NeMo-RL): what they print and the
checkpoint directories they write become rlsim's events.

Each launch's output is ``trainer-<attempt>.log`` beside the run directory (the driver's stdout
and stderr). Ray forwards every actor's prints to it with a prefix, ``(ClassName pid=N, ip=X)``,
usually coloured: both are taken off and the class name kept, so a reader can tell the driver's
own lines (its traceback) from its actors'. A :class:`Reader` per framework turns lines into
events and looks at the checkpoint directory on every poll. Read this way:

- ``step_end``: the framework's per-step line, with its numeric metrics; the framework's reward
  is also given as ``rollout/reward_mean`` (what ``reward_improves`` reads);
- ``checkpoint_saved`` and ``resume``: from the checkpoint directory and the lines that name it;
- ``error``: each exception line of the driver's own traceback (``RayTaskError(ActorDiedError)``
  counts as ``ActorDiedError``, its cause);
- ``run_end``: when the launch exits, ``completed`` for exit 0, else ``failed``, with the last
  step seen and ``from: exit`` (these frameworks print no end line every version keeps: the exit
  code is the verdict).

None of these frameworks restarts a lost worker in the process: ``restarts`` counts the runner's
relaunches (``trainer.relaunch``).
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path

from rlsim.adapters.base import Adapter, TrainerLaunch
from rlsim.files import read_file
from rlsim.history import new_lines

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RAY_PREFIX = re.compile(r"^\((?P<actor>[^\s()]+) pid=\d+(?:, ip=[^)]*)?\) ?")
REPEATED = re.compile(r" \[repeated \d+x across cluster\]\s*$")
# the last line of a Python traceback, e.g. "ray.exceptions.RayTaskError(ActorDiedError): ..."
EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<kind>[A-Za-z_]\w*(?:Error|Exception))"
                       r"(?:\((?P<cause>[A-Za-z_]\w*)\))?: (?P<message>.*)$")
# a number as Python or numpy print it: 0.25, -1e-05, nan, inf, np.float64(0.0042)
NUMBER = re.compile(r"^(?:np\.(?:float|int|uint)\d+\()?(?P<n>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?"
                    r"|\.\d+(?:[eE][-+]?\d+)?|nan|inf))\)?$")

REWARD = "rollout/reward_mean"
OBSERVES = frozenset({"step_end", "checkpoint_saved", "resume", "error", "run_end"})


def number(text: str) -> float | None:
    """A printed metric value as a float; None for anything else (a bool, a string, a tensor)."""
    m = NUMBER.match(text.strip())
    return float(m["n"]) if m else None


def flag(command: list[str], names: tuple[str, ...], default: str) -> str:
    """The value of ``--name VALUE``, ``--name=VALUE`` or a Hydra ``name=VALUE`` override."""
    for i, arg in enumerate(command):
        for name in names:
            if arg == name and i + 1 < len(command):
                return command[i + 1]
            for prefix in (f"{name}=", f"+{name}=", f"++{name}="):
                if arg.startswith(prefix):
                    return arg[len(prefix):]
    return default


def read_text(path: Path) -> str | None:
    """A small file a framework writes (a tracker naming its last checkpoint), or None."""
    try:
        return read_file(path, 1 << 16).decode(errors="replace")
    except OSError:
        return None


class Reader:
    """One framework's reading of one run (a new instance per run: it keeps state)."""

    reward_key: str = ""

    def __init__(self, trainer, run_dir: Path) -> None:
        self.trainer, self.run_dir = trainer, run_dir

    def start(self) -> list[dict]:
        """Events known when a launch starts, before its first line (a resume the framework
        does without saying so)."""
        return []

    def line(self, text: str, actor: str | None) -> list[dict]:
        """Events one output line says; ``actor`` is the Ray actor class that printed it, None
        for the driver itself."""
        return []

    def files(self) -> list[dict]:
        """Events the checkpoint directory shows since the last look."""
        return []

    def step_end(self, step: int, metrics: dict[str, float]) -> dict:
        if self.reward_key in metrics and REWARD not in metrics:
            metrics = {**metrics, REWARD: metrics[self.reward_key]}
        return {"type": "step_end", "step": step, "metrics": metrics}


def error(text: str, actor: str | None) -> list[dict]:
    """An ``error`` event for an exception line of the driver's traceback."""
    if actor is not None or not (m := EXCEPTION.match(text)):
        return []
    return [{"type": "error", "kind": m["cause"] or m["kind"], "message": m["message"][:2000]}]


class LogSource:
    """The events of a run read from its launches' output, in order, as it grows."""

    def __init__(self, reader: Reader, run_dir: Path) -> None:
        self.reader, self.dir = reader, run_dir.parent
        self.attempt, self.offset, self.started = 0, 0, False
        self.events: list[dict] = []
        self.last_step = 0

    def _read(self, final: bool = False) -> list[dict]:
        new = [] if self.started else self.reader.start()
        self.started = True
        lines, self.offset = new_lines(self.dir / f"trainer-{self.attempt}.log", self.offset,
                                       final)
        for raw in lines:
            text = REPEATED.sub("", ANSI.sub("", raw)).replace("\r", "")
            actor = None
            if m := RAY_PREFIX.match(text):
                actor, text = m["actor"], text[m.end():]
            new += error(text, actor) + self.reader.line(text.rstrip(), actor)
        return new + self.reader.files()

    def _stamp(self, events: list[dict]) -> list[dict]:
        now = round(time.time(), 4)
        for e in events:
            e.setdefault("ts", now)
            e["attempt"] = self.attempt
            if e["type"] == "step_end":
                self.last_step = e["step"]
        self.events += events
        return events

    def poll(self) -> list[dict]:
        return self._stamp(self._read())

    def exited(self, attempt: int, returncode: int) -> list[dict]:
        status = "completed" if returncode == 0 else "failed"
        new = self._stamp(self._read(final=True) + [
            {"type": "run_end", "status": status, "step": self.last_step,
             "returncode": returncode, "from": "exit"}])
        self.attempt, self.offset, self.started = attempt + 1, 0, False
        return new


class LogAdapter(Adapter):
    """A trainer read from its output and checkpoint directory by its framework's ``Reader``."""

    observes = OBSERVES
    reader: type[Reader]

    def events(self, trainer, run_dir: Path) -> LogSource:
        return LogSource(self.reader(trainer, run_dir), run_dir)


def filled(trainer, run_dir: Path) -> list[str]:
    """The command as launched (placeholders filled): where it says its checkpoints go."""
    launch = TrainerLaunch(python=sys.executable, run_dir=run_dir, attempt=0, ray_address="")
    return [launch.fill(arg) for arg in trainer.command]


def finite(metrics: dict[str, float | None]) -> dict[str, float]:
    """The metrics that are numbers (nan and inf kept out: JSON has no spelling for them)."""
    return {k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}
