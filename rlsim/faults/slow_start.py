"""slow_start: the roles starting on one node come up late, as an engine does while it
compiles its kernels or loads a cold cache. The node, its raylet and agents, and the work
already running there are fine; only what starts there is late.

How: the node's Ray workers are looked at every :data:`LOOK_S`. Each worker not running work
when the fault fired (the idle ones then, and each new one as it appears) is stopped (SIGSTOP)
as the fault first sees it, and goes on (SIGCONT) ``seconds`` later. A role placed on the node
meanwhile lands in a stopped worker: its actor's creation and first calls answer up to
``seconds`` late (an idle worker held since the fault fired has less of its time left when the
role lands in it). Holding a worker before its role lands is what makes this certain: a warm
worker takes its actor and sets it up in milliseconds, faster than any look. The raylet's agents
and object spilling's workers are never held. A new worker held past Ray's
``worker_register_timeout_seconds`` (60 s by default) before it registered is replaced by its
raylet, as a worker that starts too slowly is; the replacement is held too. Healing lets every
held worker go on at once and holds no new one: heal it at the trainer's ``restart``
(``heal_at: {event: restart}``) for a start that is slow once (a cold compile cache, warm
after), or leave it in force for every start to be slow.

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

LOOK_S = 0.05  # a new worker joins its raylet in about a second here
UNDO_WAIT_S = 30.0  # a look at the node in flight when healing (a substrate machine's answer)


class SlowStart(Fault):
    name = "slow_start"
    impairs = "slow to start"
    by_hand = False
    needs = (HoldsWorkers,)
    harms_real_cluster = True

    class Params(NodeTarget):
        seconds: float = Field(gt=0, le=DAY, description="how long each worker of the node "
                               "that was not running work when the fault fired is held, from "
                               "when the fault first sees it")

    def inject(self):
        node = self.target()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._until: dict[int, float] = {}  # held now: pid -> when it goes on
        self.caught: list[int] = []  # every worker held, in the order seen
        self.trouble: str | None = None  # the last look at the node that failed, if any
        self._thread: threading.Thread | None = None
        found = self.ctx.cluster.workers(node)
        self._spared = {pid for pid, work in found.items() if work}  # up already: not a start
        self.held = {"node": node}  # from here on, a failure still heals what was held
        self._hold(node)
        self._thread = threading.Thread(target=self._watch, args=(node,),
                                        name="rlsim-slow-start", daemon=True)
        self._thread.start()
        address = next((n.address for n in self.ctx.cluster.nodes() if n.index == node), None)
        return {"node": node, "address": address, "seconds": self.params.seconds,
                "idle": len(found) - len(self._spared), "running": len(self._spared)}

    def said(self, did):
        return (f"held back what starts on node {did['node']} by up to {did['seconds']:g} s "
                f"({did['idle']} idle worker(s) held at once; {did['running']} running work "
                "left alone)")

    def touched(self, did, footprint):
        """What of the trainer is on the node, once the fault has held a worker there: a fault
        that held nothing (no role started there while it was in force) reached nothing."""
        return super().touched(did, footprint) if getattr(self, "caught", None) else []

    def _hold(self, node: int) -> None:
        """Hold the node's workers not seen yet; let go on those whose time is up."""
        with self._lock:
            if self._stop.is_set():
                return
            now = time.monotonic()
            due = [pid for pid, until in self._until.items() if until <= now]
            if due:
                self.ctx.cluster.signal_workers(node, due, signal.SIGCONT)
                for pid in due:
                    del self._until[pid]
            started = [pid for pid in self.ctx.cluster.workers(node)
                       if pid not in self._spared and pid not in self.caught]
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
        if self._thread is not None:
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
