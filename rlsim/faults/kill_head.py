"""kill_head: SIGKILL node 0 (GCS, dashboard, the driver's Ray connection): the cluster is gone."""

from rlsim.backends.base import KillsNodes
from rlsim.faults.base import Fault


class KillHead(Fault):
    name = "kill_head"
    node_state = "dead"
    may_down_node = True
    needs = (KillsNodes,)
    harms_real_cluster = True

    def inject(self):
        pids = self.ctx.cluster.kill_node(0)
        return {"node": 0, "pids": pids}

    def touched(self, did, footprint):
        """The GCS is gone: every actor of the trainer has lost it."""
        return list(footprint)
