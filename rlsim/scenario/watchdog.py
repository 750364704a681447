"""The progress watchdog: after a disruptive fault the trainer must show progress within a bound,
or the run ends there, saying what it waits on.

A trainer that meets a fault it cannot handle does not always fail: it may wait forever on a
request to a server that died with its node, a collective whose peer is gone, a queue nobody fills.
Without a watchdog such a run sits silent until the scenario's ``timeout_s`` (often half an hour),
and the verdict says only that time ran out. The watchdog turns that into a FAIL within
``trainer.progress_watchdog_s`` of the fault, naming the fault, how long the trainer was silent,
its last output lines and what of it Ray holds on dead nodes.

What counts as progress is what the adapter sees: any event of the trainer (a step, an error, a
checkpoint, a resume, an exit), and, for an adapter that sees no steps (a plain program), any new
output. The clock starts at the latest of the fault and the launch's last sign of progress, and
only for a launch that has shown one: a relaunch starting up (importing, placing, loading a model)
is not judged until its first event, since how long that takes is the scenario's ``timeout_s``'s
business. This module is the pure rule; the runner feeds it times and acts on its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_S = 45.0  # a trainer that noticed a fault says something well within this


@dataclass
class Watchdog:
    """The rule, fed monotonic times: :meth:`launch` at each launch, :meth:`sign` at each sign of
    progress, :meth:`fault` at each fault fired; :meth:`silent_s` says when it bites."""

    bound_s: float | None  # None: no watchdog
    fault_at: float | None = None  # the last fault fired
    sign_at: float | None = None  # the current launch's last sign of progress
    signs: int = 0  # of the current launch

    def launch(self, now: float) -> None:
        """A new launch: nothing of it seen yet."""
        self.sign_at, self.signs = now, 0

    def sign(self, now: float) -> None:
        """The current launch showed progress."""
        self.sign_at, self.signs = now, self.signs + 1

    def fault(self, now: float) -> None:
        """A disruptive fault fired: from now on the trainer must keep showing progress."""
        self.fault_at = now

    def silent_s(self, now: float) -> float | None:
        """How long the trainer has been silent since a fault, once that is past the bound;
        None while it is within it, before any fault, or while the launch starts up."""
        if self.bound_s is None or self.fault_at is None or not self.signs:
            return None
        silent = now - max(self.fault_at, self.sign_at or self.fault_at)
        return silent if silent > self.bound_s else None
