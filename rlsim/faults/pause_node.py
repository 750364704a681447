"""pause_node: freeze one node (cgroup freeze), a straggler or a hung machine; heal thaws it."""

from rlsim.faults.base import Fault


class PauseNode(Fault):
    name = "pause_node"

    def inject(self):
        self.node = self.ctx.node(self.params.node)
        pids = self.ctx.cluster.pause_node(self.node)
        self.injected = True
        return {"node": self.node, "pids": len(pids)}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        return {"node": self.node, "resumed": len(self.ctx.cluster.resume_node(self.node))}
