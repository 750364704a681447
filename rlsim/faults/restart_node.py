"""restart_node: kill one node and start it again at the same address (a reboot)."""

from rlsim.backends.base import RestartsNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class RestartNode(Fault):
    name = "restart_node"
    node_state = "restarting"
    by_hand = True
    ends = ("kill_node", "pause_node", "preempt_node")
    needs = (RestartsNodes,)
    harms_real_cluster = True
    spares_head = True

    Params = NodeTarget

    @classmethod
    def cluster_problem(cls, params, shape):
        if params.node == 0 and shape.gcs_ft == "none":
            return "node", ("node 0 is the head; restarting the head needs GCS fault tolerance "
                            "(gcs_ft: redis in the cluster section: its tables must outlive the "
                            "head), or use kill_head")
        return super().cluster_problem(params, shape)

    def inject(self):
        node = self.target()
        info = self.ctx.cluster.restart_node(node)
        return {"node": node, "address": info.address, "alive": info.alive}

    def said(self, did):
        back = "is back" if did["alive"] else "did not come back"
        return f"node {did['node']} {back} at {did['address']}"
