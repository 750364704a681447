"""restart_node: kill one node and start it again at the same address (a reboot)."""

from rlsim.backends.base import RestartsNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeRef, Strict


class RestartNode(Fault):
    name = "restart_node"
    node_state = "restarting"
    needs = (RestartsNodes,)
    harms_real_cluster = True

    class Params(Strict):
        node: NodeRef

    def inject(self):
        node = self.ctx.node(self.params.node)
        info = self.ctx.cluster.restart_node(node)
        return {"node": node, "address": info.address, "alive": info.alive}
