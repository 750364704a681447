"""slow_start: the roles starting on one node take ``seconds`` longer to come up, as an engine
does while it compiles its kernels or loads a cold cache. The node, its raylet and the workers
already running work elsewhere are fine; only what starts there is late.

How: every Ray worker process of the node (titled ``ray::``: the idle ones waiting for work,
and each new one as it appears, looked for every :data:`LOOK_S`) is stopped (SIGSTOP) when the
fault first sees it, and goes on (SIGCONT) ``seconds`` later. A role placed on the node in the
meantime lands in a stopped worker, so its actor's creation and its first calls answer
``seconds`` late. Healing lets every held worker go on at once and holds no new one: heal it
at the trainer's ``restart`` (``heal_at: {event: restart}``) for a start that is slow once (a
cold compile cache, warm after), or leave it in force for every start to be slow.

The holding runs on a thread of the process that injected it (the scenario runner), so it is
not offered by hand.
"""

from __future__ import annotations

import threading
import time

from pydantic import Field

from rlsim.backends.base import HoldsWorkers
from rlsim.faults.base import Fault
from rlsim.fields import DAY, NodeTarget

LOOK_S = 0.05  # a worker joins its raylet, then takes its actor: seconds on this machine


class SlowStart(Fault):
    name = "slow_start"
    impairs = "slow to start"
    by_hand = False
    needs = (HoldsWorkers,)
    harms_real_cluster = True

    class Params(NodeTarget):
        seconds: float = Field(gt=0, le=DAY, description="how much later each role that "
                               "starts on the node comes up (each worker there is held this "
                               "long from when the fault first sees it)")

    def inject(self):
        node = self.target()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._until: dict[int, float] = {}  # held now: pid -> when it goes on
        self.caught: list[int] = []  # every worker held, in the order seen
        self.trouble: str | None = None  # the last look at the node that failed, if any
        self.held = {"node": node}
        self._hold(node)
        self._thread = threading.Thread(target=self._watch, args=(node,),
                                        name="rlsim-slow-start", daemon=True)
        self._thread.start()
        address = next((n.address for n in self.ctx.cluster.nodes() if n.index == node), None)
        return {"node": node, "address": address, "seconds": self.params.seconds,
                "held": len(self.caught)}

    def said(self, did):
        return (f"held back what starts on node {did['node']} by {did['seconds']:g} s "
                f"({did['held']} idle worker(s) held at once)")

    def _hold(self, node: int) -> None:
        """Hold the node's workers not seen yet; let go on those whose time is up."""
        with self._lock:
            if self._stop.is_set():
                return
            now = time.monotonic()
            due = [pid for pid, until in self._until.items() if until <= now]
            if due:
                self.ctx.cluster.continue_workers(node, due)
                for pid in due:
                    del self._until[pid]
            for pid in self.ctx.cluster.stop_workers(node, self.caught):
                self.caught.append(pid)
                self._until[pid] = now + self.params.seconds

    def _watch(self, node: int) -> None:
        while not self._stop.wait(LOOK_S):
            try:
                self._hold(node)
            except Exception as e:  # noqa: BLE001 - the node went (killed): its workers too
                self.trouble = f"{type(e).__name__}: {e}"[:300]

    def undo(self):
        self._stop.set()
        self._thread.join(timeout=30)
        node = self.held["node"]
        with self._lock:
            went_on = self.ctx.cluster.continue_workers(node, list(self._until))
            self._until.clear()
        return {"node": node, "held": len(self.caught), "let_go": len(went_on),
                **({"trouble": self.trouble} if self.trouble else {})}
