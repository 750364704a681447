"""gpu_lost: one GPU of a node fails (an Xid, a device fallen off the bus; Llama 3's largest cause
of interruptions): the process holding fake GPU ``gpu`` of node ``node`` dies of it, and the node
comes back advertising one GPU fewer, as a node does once the dead device is drained and it is
rebooted.

How: the GPU is written into the run's lost-GPU ledger (:data:`rlsim.contract.GPU_LOST_FILE`);
the worker whose CUDA_VISIBLE_DEVICES holds it, on that node, sees it within a quarter second,
records ``Fatal GPU error: ... Xid 79`` in its crash log and exits (a trainer of your own that
does not read the ledger has its process killed instead, after ``wait_s``). The node is then
restarted with one GPU fewer (recorded in the cluster's state, so it stays that way; everything
that ran on the node goes with the restart) and the ledger entry is cleared: the GPUs the node
advertises now all work. The trainer must re-place on what is left (an elastic placement) or wait
for a spare, by its policy. Nothing to undo: the device is gone for the cluster's life.
"""

from __future__ import annotations

import json
import time

from pydantic import Field

from rlsim.backends.base import LosesGpus, SignalsProcesses
from rlsim.contract import GPU_LOST_FILE
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget
from rlsim.files import read_json, write_file


class GpuLost(Fault):
    name = "gpu_lost"
    node_state = "restarting"
    by_hand = True
    cli_args = ("node", "gpu")
    may_down_node = True
    needs = (LosesGpus, SignalsProcesses)
    harms_real_cluster = True
    spares_head = True

    class Params(NodeTarget):
        gpu: int = Field(ge=0, le=63, description="the GPU's id on the node, as Ray hands it "
                         "out (CUDA_VISIBLE_DEVICES)")
        wait_s: float = Field(10.0, gt=0, le=600, description="how long the process holding "
                              "the GPU may take to die of it before it is killed")

    @classmethod
    def cluster_problem(cls, params, shape):
        from rlsim.faults.restart_node import RestartNode

        shapes = getattr(shape, "node_shapes", None)
        if shapes is not None and any(n.cuda_devices for n in shapes()):
            return "node", ("the cluster's GPUs stand on real devices (cluster.cuda_devices): "
                            "gpu_lost fails a fake GPU through the trainer's lost-GPU ledger, "
                            "which a real device does not read; run it on fake GPUs")
        if shapes is not None and (found := cls._gpu_problem(params, [n.gpus for n in shapes()])):
            return "gpu", found
        restart = RestartNode.Params.model_validate(
            {"node": params.node} if params.node is not None else
            {"role": params.role, "rank": params.rank})
        return RestartNode.cluster_problem(restart, shape) or super().cluster_problem(params,
                                                                                       shape)

    @staticmethod
    def _gpu_problem(params, gpus: list[int]) -> str | None:
        """Why GPU ``params.gpu`` may be missing where the fault lands (``gpus``: each node's
        count, the head first), or None. A node named: that node has it. ``random``: every node
        but the head has it (the pick may be any). A role's rank: some node but the head has it
        (the rank may be anywhere; the node it is on is checked again when the fault fires)."""
        def ids(n: int) -> str:
            return f"{n} GPU(s), ids 0-{n - 1}" if n else "no GPU"
        gpu, others = params.gpu, dict(enumerate(gpus))
        others.pop(0, None)
        if isinstance(params.node, int):
            have = gpus[params.node] if params.node < len(gpus) else gpu + 1
            return None if gpu < have else f"node {params.node} has {ids(have)}: " + \
                ("name one of them" if have else "name a node with GPUs")
        if params.node == "random" and (short := [i for i, n in others.items() if gpu >= n]):
            low = min(others.values())
            return (f"node: random may pick node {short[0]}, which has {ids(gpus[short[0]])}: "
                    + (f"name a GPU below {low}, which every node but the head has, or name "
                       "the node" if low else "name a node with GPUs instead of random"))
        if params.role is not None and others and gpu >= (most := max(others.values())):
            return (f"{params.role} rank {params.rank} runs on a node other than the head, and "
                    f"none of those has a GPU {gpu} (" + (f"the most is {most}): name a GPU "
                    f"below {most}" if most else "they have none): give them GPUs"))
        return None

    def inject(self):
        cluster = self.ctx.cluster
        node = self.target()
        ip = cluster.nodes()[node].address
        holder = next((w for w in self.ctx.workers if w.get("ip") == ip and str(self.params.gpu)
                       in str(w.get("cuda") or "").split(",")), None)
        ledger = self.ctx.run_dir / GPU_LOST_FILE
        self._mark(ledger, ip, add=True)
        died_of_it = None
        try:
            if holder is not None:
                died_of_it = self._wait_gone(ip, holder["pid"])
            info = cluster.lose_gpu(node)
        finally:
            self._mark(ledger, ip, add=False)
        return {"node": node, "gpu": self.params.gpu, "address": ip,
                "holder_pid": holder["pid"] if holder else None, "died_of_it": died_of_it,
                "alive": info.alive}

    def _mark(self, ledger, ip: str, add: bool) -> None:
        try:  # the ledger as a record: a link, a FIFO or damage is no ledger
            lost = read_json(ledger)
        except (OSError, ValueError):
            lost = {}
        if not isinstance(lost, dict):
            lost = {}
        if add:
            lost.setdefault(ip, []).append(self.params.gpu)
        else:
            lost.pop(ip, None)
        ledger.parent.mkdir(parents=True, exist_ok=True)
        write_file(ledger, json.dumps(lost))

    def _wait_gone(self, ip: str, pid: int) -> bool:
        """Whether the holder died of its GPU within ``wait_s`` (else it is killed)."""
        deadline = time.monotonic() + self.params.wait_s
        while time.monotonic() < deadline:
            try:
                self.ctx.cluster.signal_process(ip, pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.1)
        try:
            self.ctx.cluster.signal_process(ip, pid, 9)
        except ProcessLookupError:
            return True
        return False

    def said(self, did):
        how = {True: "its process died of it", False: "its process was killed",
               None: "no process held it"}[did["died_of_it"]]
        return (f"lost GPU {did['gpu']} of node {did['node']} ({how}); the node is back with "
                "one GPU fewer")
