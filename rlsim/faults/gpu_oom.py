"""gpu_oom: take GPU memory on one node; heal gives it back.

On fake GPUs it goes through the trainer's memory ledger (the reserve file its workers read before
each phase). On a real cluster (``--backend real``) it is a real CUDA allocation of ``gb`` on each
GPU of the node, held by the node's agent, so the trainer meets CUDA's own OOM.
"""

import json

from rlsim.faults.base import Fault

RESERVE_FILE = "faults/gpu_reserve.json"  # trainer.memory.RESERVE_FILE


class GpuOom(Fault):
    name = "gpu_oom"

    def inject(self):
        self.node = self.ctx.node(self.params.node)
        cluster = self.ctx.cluster
        address = cluster.nodes()[self.node].address
        if cluster.name == "real":
            taken = cluster.hold_gpu(self.node, self.params.gb)
            self.injected = True
            return {"node": self.node, "address": address, "gb": self.params.gb, "held": taken}
        self.path = self.ctx.run_dir / RESERVE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        table = json.loads(self.path.read_text()) if self.path.exists() else {}
        table[address] = table.get(address, 0.0) + self.params.gb
        self.path.write_text(json.dumps(table))
        self.injected = True
        return {"node": self.node, "address": address, "gb": self.params.gb}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        if self.ctx.cluster.name == "real":
            return {"node": self.node, "released": self.ctx.cluster.release_gpu(self.node)}
        self.path.unlink(missing_ok=True)
        return {"node": self.node}
