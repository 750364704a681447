"""restart_node: kill one node and start it again at the same address (a reboot)."""

from rlsim.faults.base import Fault


class RestartNode(Fault):
    name = "restart_node"

    def inject(self):
        node = self.ctx.node(self.params.node)
        info = self.ctx.cluster.restart_node(node)
        return {"node": node, "address": info.address, "alive": info.alive}
