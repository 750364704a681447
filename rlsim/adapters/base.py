"""What an adapter is: how a scenario starts a trainer and where the trainer's events come from.

An adapter turns what a trainer shows (the files it writes, its output) into the timeline events
the checks judge (``step_end``, ``checkpoint_saved``, ``resume``, ``error``, ``run_end``...). Each
says which event types it can observe (:attr:`Adapter.observes`); a scenario whose checks need an
event its adapter cannot see is refused when the file is read, naming the check and the adapter,
never passed silently.
"""

from __future__ import annotations

import os
import shutil
import string
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from rlsim.history import EventTail


def resolve(path: str | Path, base: Path) -> Path:
    """``path`` absolute, or relative to ``base``: the one rule for a relative path (a scenario's
    paths against its folder, a trainer's printed paths against the folder it runs in)."""
    p = Path(path)
    return p if p.is_absolute() else base / p


# what a command may name: the harness's interpreter, the run's directory, the launch (0 first,
# n for the n-th relaunch) and the cluster's GCS address
PLACEHOLDERS = ("python", "run_dir", "attempt", "ray_address")


@dataclass(frozen=True)
class TrainerLaunch:
    """One start of the trainer: what the placeholders of its command stand for."""

    python: str
    run_dir: Path
    attempt: int
    ray_address: str

    def fill(self, arg: str) -> str:
        return arg.format_map({"python": self.python, "run_dir": str(self.run_dir),
                               "attempt": str(self.attempt), "ray_address": self.ray_address})


@dataclass(frozen=True)
class TrainerFacts:
    """What a scenario is checked against when it is read, as the adapter knows it: the steps
    the trainer runs and the setting that changes them, the ranks of each role it runs (None:
    not known)."""

    total_steps: int | None
    steps_knob: str = "trainer.total_steps"
    ranks: dict[str, int] | None = None


class TrainerProblem(ValueError):
    """The trainer section cannot run as written: ``where`` is the key path in the scenario file
    (for its line), ``field`` the field as the user writes it; the message says what and the
    fix."""

    def __init__(self, where: tuple, field: str, message: str) -> None:
        super().__init__(message)
        self.where, self.field = where, field


class EventSource(Protocol):
    def poll(self) -> list[dict]:
        """The trainer events that appeared since the last call (each a dict with ts, type)."""

    def exited(self, attempt: int, returncode: int) -> list[dict]:
        """Events the launch's exit says (a trainer that logs no end of its own), after the
        last poll of that launch."""


class Adapter:
    """One way of driving a trainer. Subclasses set ``name`` and ``observes`` and build the
    command and the event source; they never touch the cluster."""

    # It always records where each rank runs (a ``placement`` event): a fault aimed at a role's
    # rank finds it there. Otherwise only a trainer that logs placement itself, or the
    # scenario's ``trainer.roles`` (role -> Ray actor class), says where a role runs.
    worker_table: ClassVar[bool] = False
    # Where the worker table is known, the trainer is its ranks and these actor classes (a
    # framework's controller): what a fault must reach. A framework's helpers elsewhere (Ray
    # Train's PreemptionWatcher, a num_cpus=0 poller) are not; without a worker table every
    # actor of the run is.
    core_actors: ClassVar[tuple[str, ...]] = ()
    # The scenario's cluster runs Ray's dashboard: Ray's libraries (Ray Train, Ray Data, Ray
    # Jobs) read its address from the GCS, and without it Ray Train's PlacementGroupCleaner dies
    # at start-up (``Could not read 'dashboard' from GCS``): a job's teardown then differs from a
    # real cluster's. Only a trainer that uses none of them (the reference trainer, a plain
    # driver) may run on the leaner cluster.
    needs_dashboard: ClassVar[bool] = True

    # It reads the scenario's ``trainer.marks`` (event name -> pattern) from the trainer's
    # output: a line that matches is an event of that name (rlsim.adapters.plain)
    reads_marks: ClassVar[bool] = False
    # What a scenario whose check or trigger needs an event this adapter cannot see is told to
    # do: the end of its refusal
    unseen_fix: ClassVar[str] = "drop the check or use an adapter that sees it"

    name: ClassVar[str]
    # trainer event types this adapter can put into the timeline; "metrics.jsonl" where the run
    # also leaves per-step metrics a twin can be compared with
    observes: ClassVar[frozenset[str]]

    def command(self, trainer, launch: TrainerLaunch) -> list[str]:
        """The argv of one launch of the scenario's ``trainer`` section: by default its
        ``command`` with the placeholders filled in."""
        return [launch.fill(arg) for arg in trainer.command]

    def env(self, trainer, launch: TrainerLaunch) -> dict[str, str]:
        """What this adapter adds to each launch's environment (after the scenario's ``env``)."""
        return {}

    def resolve_paths(self, trainer, folder: Path) -> None:
        """Make the paths of the ``trainer`` section this adapter reads itself absolute against
        the scenario's ``folder``. Default: none (a command's own arguments are the command's,
        relative to where it runs)."""

    def warm_workers(self, trainer, nodes: list | None = None) -> tuple[list[str], list[int]]:
        """What the trainer's actors import first, and how many of them it places on each node
        with GPUs (head first, then by address): the runner has that many workers started,
        with those modules imported, before each launch. ``nodes``: the cluster's node shapes
        (``ClusterSpec.node_shapes()``), where the count may say that nothing will be placed on
        them (a run refused before its workers start). Default: none known."""
        return [], []

    def inputs(self, trainer) -> list[Path]:
        """The files whose contents decide the run's numbers besides its command (a fault-free
        twin trained once serves every scenario with the same). Default: what the command and
        its ``prepare`` name that is a file (a script, a config given by path), and the Python
        files of the folder the trainer runs in: an edited ``train.py`` trains a new twin. Code
        imported from anywhere else counts only through the versions the key holds (Python,
        rlsim, Ray, torch, vLLM): ``--fresh-twin`` after changing it."""
        return trainer_files(trainer)

    def facts(self, trainer, refusals: list[str]) -> TrainerFacts | None:
        """Check the trainer section against what can be known before it runs; its facts, or
        None when the trainer refuses it in words matching one of ``refusals`` (the patterns of
        the scenario's ``fails`` checks: that refusal is the story). Raises TrainerProblem.
        Default: the program the command starts exists (and, run by ``{python}``, its
        script); ``total_steps`` as the section says."""
        check_program(trainer.command, trainer.workdir, "command")
        if trainer.prepare:
            check_program(trainer.prepare, trainer.workdir, "prepare")
        return TrainerFacts(trainer.total_steps)

    def events(self, trainer, run_dir: Path) -> EventSource:
        """Where this run's trainer events come from: by default the ``events.jsonl`` the
        trainer appends to in its run directory."""
        return EventTail(run_dir / "events.jsonl")


# folders of a project that hold no code of its trainer (or too much of other people's)
NOT_CODE = {"__pycache__", "node_modules", "site-packages", "reports", "venv"}
MAX_CODE_FILES = 5000


def trainer_files(trainer) -> list[Path]:
    """The files a trainer's command and ``prepare`` name (relative to where it runs) and the
    ``*.py`` files under that folder (hidden folders and :data:`NOT_CODE` left out; at most
    :data:`MAX_CODE_FILES`), sorted."""
    here = trainer.workdir
    named = set()
    for arg in [*(trainer.command or []), *(trainer.prepare or [])]:
        if "{" in arg:
            continue
        path = here / arg
        try:
            if path.is_file():
                named.add(path.resolve())
        except (OSError, ValueError):
            continue
    code: list[Path] = []
    # left-out folders are not entered at all: a project's .venv alone holds tens of thousands
    # of files, and this runs before every twin
    for folder, dirs, files in os.walk(here):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in NOT_CODE]
        code += [Path(folder, f) for f in files if f.endswith(".py")]
        if len(code) >= MAX_CODE_FILES:
            del code[MAX_CODE_FILES:]
            break
    return sorted(named | {p for p in code if p.is_file()})


def check_program(argv: list[str], here: Path, key: str) -> None:
    """Raise TrainerProblem (``trainer.<key>``) unless the program ``argv`` starts exists here
    (and, run by ``{python}``, its script): a command or a ``prepare`` that cannot start is
    refused when the scenario is read, not found at launch."""
    program, *args = argv
    where, field = ("trainer", key), f"trainer.{key}"
    if program == "{python}":
        script = resolve(args[0], here) if args and args[0].endswith(".py") else None
        if script is not None and not script.is_file():
            raise TrainerProblem(where, field, f"no such script {args[0]!r} (looked for "
                                 f"{str(script)!r}); the {key} runs in the scenario's "
                                 "folder (or trainer.cwd), as a shell there would run it")
    elif "{" not in program:  # a placeholder is filled in at launch
        found = resolve(program, here) if "/" in program else shutil.which(program)
        if found is None or not Path(found).is_file() or not os.access(found, os.X_OK):
            raise TrainerProblem(where, field, f"{program!r} is not an executable here "
                                 "(a relative path is from the folder the command runs in, "
                                 "a bare name is looked up on PATH); fix the path, or start "
                                 "a script with \"{python}\"")


def placeholder_problem(arg: str) -> str | None:
    """Why ``arg`` (one element of a command) cannot be filled in, or None: a placeholder rlsim
    does not know, or one with a format spec or conversion (``{run_dir:>999999999999}`` would
    ask for a string of a trillion characters at launch)."""
    try:
        parts = list(string.Formatter().parse(arg))
    except ValueError as e:
        return f"{arg!r}: {e}; write a literal brace as {{{{ or }}}}"
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            return (f"{arg!r}: unknown placeholder {{{name}}}; known: "
                    + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
        if spec or conversion:
            return (f"{arg!r}: {{{name}}} with a format ({spec or '!' + conversion}): a "
                    f"placeholder is filled in as it is; write {{{name}}}")
    return None
