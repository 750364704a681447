"""gpu_oom: take GPU memory on one node; heal gives it back.

How the memory is taken is the backend's (``hold_gpu``): on fake GPUs an entry in the trainer's
memory ledger (the reserve file its workers read before each phase); on a real cluster
(``--backend real``) a real CUDA allocation of ``gb`` on each GPU of the node, held by the node's
agent, so the trainer meets CUDA's own OOM.
"""

from pydantic import Field

from rlsim.backends.base import HoldsGpuMemory
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class GpuOom(Fault):
    name = "gpu_oom"
    impairs = "GPU memory held"
    needs = (HoldsGpuMemory,)
    harms_real_cluster = True

    class Params(NodeTarget):
        gb: float = Field(gt=0, le=4096, description="GiB taken on every GPU of the node")

    def inject(self):
        node = self.target()
        address = self.ctx.cluster.nodes()[node].address
        held = self.ctx.cluster.hold_gpu(node, self.params.gb, self.ctx.run_dir)
        self.held = {"node": node}
        return {"node": node, "address": address, "gb": self.params.gb, "held": held}

    def undo(self):
        node = self.held["node"]
        return {"node": node, "released": self.ctx.cluster.release_gpu(node, self.ctx.run_dir)}
