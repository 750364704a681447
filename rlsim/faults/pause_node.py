"""pause_node: freeze one node (cgroup freeze), a straggler or a hung machine; heal thaws it."""

from rlsim.backends.base import PausesNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeRef, Strict


class PauseNode(Fault):
    name = "pause_node"
    impairs = "paused"
    may_down_node = True
    needs = (PausesNodes,)
    harms_real_cluster = True

    class Params(Strict):
        node: NodeRef

    def inject(self):
        self.node = self.ctx.node(self.params.node)
        pids = self.ctx.cluster.pause_node(self.node)
        self.injected = True
        return {"node": self.node, "pids": len(pids)}

    def undo(self):
        return {"node": self.node, "resumed": len(self.ctx.cluster.resume_node(self.node))}
