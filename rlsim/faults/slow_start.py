"""slow_start: the roles starting on one node come up ``seconds`` late, as an engine does while
it compiles its kernels or loads a cold cache. The node, its raylet and agents, and the workers
already running there are fine; only what starts there is late.

How: the node's Ray workers are looked at every :data:`LOOK_S`. A worker that takes a task or
an actor (its title leaves ``ray::IDLE`` for ``ray::Worker.__init__``, ``ray::Worker.setup``)
is stopped (SIGSTOP) when the fault sees it and goes on (SIGCONT) ``seconds`` later. Workers
already running something when the fault fired are left alone, and so are the raylet's agents
and object spilling's workers; an idle worker is held only once it takes work (registered with
its raylet long before). Healing lets every held worker go on at once and holds no new one:
heal it at the trainer's ``restart`` (``heal_at: {event: restart}``) for a start that is slow
once (a cold compile cache, warm after), or leave it in force for every start to be slow.

Needs the node's cgroup (Ray's retitling of a worker overwrites the labels in its environment,
by which a node without one finds its processes). The looking runs on a thread of the process
that injected it (the scenario runner), so it is not offered by hand.
"""

from __future__ import annotations

import signal
import threading
import time

from pydantic import Field

from rlsim.backends.base import HoldsWorkers
from rlsim.faults.base import Fault
from rlsim.fields import DAY, NodeTarget

LOOK_S = 0.05  # a role's set-up (a model built, an engine loaded) takes longer than this
UNDO_WAIT_S = 30.0  # a look at the node in flight when healing (a substrate machine's answer)


class SlowStart(Fault):
    name = "slow_start"
    impairs = "slow to start"
    by_hand = False
    needs = (HoldsWorkers,)
    harms_real_cluster = True

    class Params(NodeTarget):
        seconds: float = Field(gt=0, le=DAY, description="how much later each role that "
                               "starts on the node comes up: each worker there is held this "
                               "long from when it takes a task or an actor")

    def inject(self):
        node = self.target()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._until: dict[int, float] = {}  # held now: pid -> when it goes on
        self.caught: list[int] = []  # every worker held, in the order seen
        self.trouble: str | None = None  # the last look at the node that failed, if any
        found = self.ctx.cluster.workers(node)
        self._spared = {pid for pid, work in found.items() if work}  # up already: not a start
        self._thread = threading.Thread(target=self._watch, args=(node,),
                                        name="rlsim-slow-start", daemon=True)
        self._thread.start()
        self.held = {"node": node}
        address = next((n.address for n in self.ctx.cluster.nodes() if n.index == node), None)
        return {"node": node, "address": address, "seconds": self.params.seconds,
                "idle": len(found) - len(self._spared), "running": len(self._spared)}

    def said(self, did):
        return (f"held back what starts on node {did['node']} by {did['seconds']:g} s "
                f"({did['idle']} idle worker(s) there; {did['running']} running work left "
                "alone)")

    def touched(self, did, footprint):
        """What of the trainer is on the node, once the fault has held a worker there: a fault
        that held nothing (no role started there while it was in force) reached nothing."""
        return super().touched(did, footprint) if getattr(self, "caught", None) else []

    def _hold(self, node: int) -> None:
        """Hold the node's workers that took work since the last look; let go on those whose
        time is up."""
        with self._lock:
            if self._stop.is_set():
                return
            now = time.monotonic()
            due = [pid for pid, until in self._until.items() if until <= now]
            if due:
                self.ctx.cluster.signal_workers(node, due, signal.SIGCONT)
                for pid in due:
                    del self._until[pid]
            started = [pid for pid, work in self.ctx.cluster.workers(node).items()
                       if work and pid not in self._spared and pid not in self.caught]
            for pid in self.ctx.cluster.signal_workers(node, started, signal.SIGSTOP):
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
        self._thread.join(timeout=UNDO_WAIT_S)
        node = self.held["node"]
        if not self._lock.acquire(timeout=UNDO_WAIT_S):
            raise RuntimeError(f"slow_start: a look at node {node} has not returned for "
                               f"{UNDO_WAIT_S:g} s; workers {sorted(self._until)} may still be "
                               "stopped (SIGCONT them)")
        try:
            went_on = self.ctx.cluster.signal_workers(node, list(self._until), signal.SIGCONT)
            self._until.clear()
        finally:
            self._lock.release()
        return {"node": node, "held": len(self.caught), "let_go": len(went_on),
                **({"trouble": self.trouble} if self.trouble else {})}
