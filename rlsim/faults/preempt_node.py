"""preempt_node: a node reclaimed with notice (a cloud's spot or preemptible VM, a KubeRay
scale-down): Ray's own drain of the node with the preemption reason and a deadline ``notice_s``
from now, then the kill at the deadline, as the cloud would.

The drain is the one Ray's autoscaler sends (its ``DrainNode`` RPC): Ray places nothing new on the
node and tells whoever asks (``ray._private.state.state.get_draining_nodes()``, which Ray Serve
polls) that the node ends at the deadline. It kills nothing busy: a drained node's raylet exits
by itself only once nothing runs there (an idle node goes at once). What a trainer does with the
notice is what the scenario tells apart: one that checkpoints when it hears it resumes from that
step after the kill; one that does not loses the steps since its last periodic save. The node
stays dead afterwards (``restart_node`` brings one back).
"""

from __future__ import annotations

import threading

from pydantic import Field

from rlsim.backends.base import DrainsNodes, KillsNodes
from rlsim.faults.base import Fault
from rlsim.fields import DAY, NodeTarget


class PreemptNode(Fault):
    name = "preempt_node"
    node_state = "draining"
    by_hand = True
    holds_node = True
    restored_by = "restart_node"
    may_down_node = True
    needs = (DrainsNodes, KillsNodes)
    harms_real_cluster = True
    spares_head = True

    class Params(NodeTarget):
        notice_s: float = Field(30.0, gt=0, le=DAY, description="from the notice to the kill "
                                "(GCP gives spot VMs 30 s, AWS 120 s)")

    @classmethod
    def trainer_problem(cls, params, trainer, adapter):
        if params.notice_s >= trainer.timeout_s:
            return "notice_s", (f"{params.notice_s:g} s of notice outlasts the whole run "
                                f"(trainer.timeout_s {trainer.timeout_s:g}): the node would "
                                "never be reclaimed; give a shorter notice or a longer timeout")
        return super().trainer_problem(params, trainer, adapter)

    @classmethod
    def cluster_problem(cls, params, shape):
        if params.node == 0:
            return "node", ("node 0 is the head: its GCS holds the cluster, so nothing would "
                            "be left to hear the notice; preempt a worker node (kill_head is "
                            "the head's story)")
        return super().cluster_problem(params, shape)

    def inject(self):
        node = self.target()
        notice = self.params.notice_s
        node_id = self.ctx.cluster.drain_node(
            node, notice, f"rlsim preempt_node: node {node} is reclaimed in {notice:g} s")
        self.killed: list[int] | None = None
        # Not a daemon: by hand, `rlsim fault` stays until the deadline's kill is done.
        self._kill = threading.Timer(notice, self._at_deadline, args=(node, node_id))
        self._kill.name = "rlsim-preempt-node"
        self._kill.start()
        return {"node": node, "notice_s": notice, "node_id": node_id,
                "address": self.ctx.cluster.nodes()[node].address}

    def _at_deadline(self, node: int, node_id: str) -> None:
        """The reclaim: the machine that was drained goes, unless it is gone already (Ray ends an
        idle drained node itself) and a restarted node, a new registration, took its place."""
        now = self.ctx.cluster.nodes()[node]
        if now.alive and now.node_id == node_id:
            self.killed = self.ctx.cluster.kill_node(node)

    def said(self, did):
        return (f"drained node {did['node']} for preemption (Ray's notice, deadline in "
                f"{did['notice_s']:g} s); it is killed at the deadline")

    def teardown(self):
        """A run that ended before the deadline: the pending kill is called off (the node stays
        drained; the cluster is not reused)."""
        timer = getattr(self, "_kill", None)
        if timer is None or not timer.is_alive():
            return None
        timer.cancel()
        return {"kill_called_off": True}
