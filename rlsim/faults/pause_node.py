"""pause_node: freeze one node (cgroup freeze), a straggler or a hung machine; heal thaws it."""

from rlsim.backends.base import PausesNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class PauseNode(Fault):
    name = "pause_node"
    impairs = "paused"
    by_hand = True
    holds_node = True
    undo_verb = "resume-node"
    may_down_node = True
    needs = (PausesNodes,)
    harms_real_cluster = True
    spares_head = True

    Params = NodeTarget

    def inject(self):
        node = self.target()
        pids = self.ctx.cluster.pause_node(node)
        self.held = {"node": node}
        return {"node": node, "pids": len(pids)}

    def said(self, did):
        return f"froze node {did['node']} ({did['pids']} processes)"

    def undo(self):
        node = self.held["node"]
        return {"node": node, "resumed": len(self.ctx.cluster.resume_node(node))}
