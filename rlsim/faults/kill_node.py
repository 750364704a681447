"""kill_node: SIGKILL every process of one node (its cgroup), as when a machine dies."""

from rlsim.faults.base import Fault


class KillNode(Fault):
    name = "kill_node"

    def inject(self):
        node = self.ctx.node(self.params.node)
        pids = self.ctx.cluster.kill_node(node)
        self.injected = True
        return {"node": node, "pids": pids, "address": self.ctx.cluster.nodes()[node].address}

    def heal(self):
        """A killed node stays dead (use restart_node to bring it back): nothing to heal."""
        return None
