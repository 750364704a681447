"""A plain program: a Ray script, a Ray Data pipeline, a Tune sweep, any command that writes no
rlsim events. It is judged by what any scheduler sees of a job:

- ``run_end``: when a launch exits, ``completed`` for exit 0, else ``failed`` (``completes``
  reads the exit code; a relaunch by the runner, ``trainer.relaunch``, is its only restart);
- ``error``: each exception line of the driver's own traceback (as :mod:`rlsim.adapters.logs`);
- marks: the first line of each launch's output that ``trainer.marks`` names (event name ->
  pattern), as an event of that name: what a fault waits for (``at: {event: tasks_running}``)
  instead of racing the clock.

It has no steps, checkpoints or metrics: checks and triggers that need them are refused when the
scenario is read (:attr:`PlainAdapter.unseen_fix` says why and what to do instead).
"""

from __future__ import annotations

from pathlib import Path

from rlsim.adapters.base import TrainerFacts, TrainerProblem, check_program
from rlsim.adapters.logs import LogAdapter, Reader
from rlsim.fields import PatternTooSlow, search


class MarkReader(Reader):
    """Turns the first output line matching each of ``trainer.marks`` into that mark's event,
    once per launch (a trigger needs the first; a chatty line must not fill the timeline)."""

    def __init__(self, trainer, run_dir: Path) -> None:
        super().__init__(trainer, run_dir)
        self.seen: set[str] = set()

    def start(self) -> list[dict]:
        self.seen = set()  # a new launch: its marks are its own
        return []

    def line(self, text: str, actor: str | None) -> list[dict]:
        found = []
        for name, pattern in (self.trainer.marks or {}).items():
            if name in self.seen:
                continue
            try:
                hit = search(pattern, text)
            except PatternTooSlow:  # checked when read; a line made to defeat it is no mark
                hit = False
            if hit:
                self.seen.add(name)
                found.append({"type": name, "line": text[:300],
                              **({"actor": actor} if actor else {})})
        return found


class PlainAdapter(LogAdapter):
    """Any command, judged by its exit code and its output (see the module's docstring)."""

    name = "plain"
    observes = frozenset({"run_end", "error"})
    reads_marks = True
    reader = MarkReader
    unseen_fix = ("a plain program writes no rlsim events, so rlsim sees its exit code and "
                  "output, never its steps, checkpoints or metrics; drop the check, or have "
                  "the program write rlsim's events (rlsim.events) and use adapter events")

    def facts(self, trainer, refusals: list[str]) -> TrainerFacts:
        """The command (and ``prepare``) can start; ``total_steps`` is refused: a plain program
        logs no steps, so no check or fault could use it."""
        check_program(trainer.command, trainer.workdir, "command")
        if trainer.prepare:
            check_program(trainer.prepare, trainer.workdir, "prepare")
        if trainer.total_steps is not None:
            raise TrainerProblem(("trainer", "total_steps"), "trainer.total_steps",
                                 "a plain program (adapter plain) logs no steps, so nothing "
                                 "could count them; drop total_steps (or write rlsim's events "
                                 "and use adapter events)")
        return TrainerFacts(None)
