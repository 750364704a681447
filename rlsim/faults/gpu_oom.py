"""gpu_oom: take GPU memory on one node. On fake GPUs through the trainer's memory ledger (the
reserve file its workers read before each phase); heal gives it back."""

import json

from rlsim.faults.base import Fault

RESERVE_FILE = "faults/gpu_reserve.json"  # trainer.memory.RESERVE_FILE


class GpuOom(Fault):
    name = "gpu_oom"

    def inject(self):
        node = self.ctx.node(self.params.node)
        address = self.ctx.cluster.nodes()[node].address
        self.path = self.ctx.run_dir / RESERVE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        table = json.loads(self.path.read_text()) if self.path.exists() else {}
        table[address] = table.get(address, 0.0) + self.params.gb
        self.path.write_text(json.dumps(table))
        self.address, self.injected = address, True
        return {"node": node, "address": address, "gb": self.params.gb}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        self.path.unlink(missing_ok=True)
        return {"address": self.address}
