"""kill_node: SIGKILL every process of one node (its cgroup), as when a machine dies."""

from rlsim.backends.base import KillsNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class KillNode(Fault):
    name = "kill_node"
    node_state = "dead"
    by_hand = True
    holds_node = True
    restored_by = "restart_node"
    may_down_node = True
    needs = (KillsNodes,)
    harms_real_cluster = True
    spares_head = True

    Params = NodeTarget

    def inject(self):
        """A killed node stays dead (restart_node brings one back): nothing to undo."""
        node = self.target()
        pids = self.ctx.cluster.kill_node(node)
        return {"node": node, "pids": pids, "address": self.ctx.cluster.nodes()[node].address}

    def said(self, did):
        return f"killed node {did['node']} ({len(did['pids'])} processes)"
