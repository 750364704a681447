"""slow_node: a fail-slow machine: the node's CPU throttled to ``cpu`` cores (its cgroup's CPU
quota), for ``for_s`` or until healed; nothing dies, the run gets slower.

How: the node's cgroup gets a CFS quota of ``cpu`` cores per 100 ms period (cgroup2 ``cpu.max``,
or the v1 cpu twin on hybrid hosts, see :mod:`rlsim.host.cgroups`; in the docker backend, the
container's own, ``docker update --cpus``). Every process of the node shares it, the ones it forks
meanwhile too. Heal lifts the quota.
"""

from pydantic import Field

from rlsim.backends.base import ThrottlesCpu
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class SlowNode(Fault):
    name = "slow_node"
    impairs = "slowed"
    by_hand = True
    needs = (ThrottlesCpu,)
    harms_real_cluster = True

    class Params(NodeTarget):
        cpu: float = Field(gt=0, le=1024, description="CPU cores the whole node may use (0.2: "
                           "a fifth of one core)")

    @classmethod
    def cluster_problem(cls, params, shape):
        shapes = getattr(shape, "node_shapes", None)
        if shapes is not None:
            nodes = shapes()
            aimed = [nodes[params.node]] if isinstance(params.node, int) and \
                params.node < len(nodes) else nodes
            if params.cpu >= max(n.cpus for n in aimed):
                most = max(n.cpus for n in aimed)
                return "cpu", (f"{params.cpu:g} cores is not below the {most:g} the node has: "
                               "the quota would slow nothing; give fewer (0.2 is a fifth of a "
                               "core)")
        return super().cluster_problem(params, shape)

    def inject(self):
        node = self.target()
        before = self.ctx.cluster.throttle_cpu(node, self.params.cpu)
        self.held = {"node": node, "before": before}
        return {"node": node, "cpu": self.params.cpu}

    def said(self, did):
        return f"throttled node {did['node']} to {did['cpu']} CPU cores"

    def undo(self):
        """Lift the quota; its measured effect: how often the node's processes were held back
        while it was in force (none: nothing there wanted the CPU, the run was not slowed)."""
        node, before = self.held["node"], self.held.get("before")
        after = self.ctx.cluster.throttle_cpu(node, None)
        if before is None or after is None:
            return {"node": node}
        held_back = {k: round(after[k] - before[k], 3) for k in ("periods", "seconds")}
        return {"node": node, "effect": {"changed": held_back["periods"] > 0,
                                         "throttled": held_back}}
