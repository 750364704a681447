"""kill_role: SIGKILL the process of one rank of one role (an actor crash, not a node loss).

The process is found in the worker table the trainer logged (role, rank -> pid, ip); the backend
signals that pid only, on the host that runs it.
"""

from typing import Literal

from pydantic import Field

from rlsim.backends.base import KillsProcesses
from rlsim.faults.base import Fault
from rlsim.params import Strict


class KillRole(Fault):
    name = "kill_role"
    needs = (KillsProcesses,)

    class Params(Strict):
        role: Literal["actor", "rollout", "ref", "critic", "reward"]
        rank: int = Field(0, ge=0, le=4096)

    def inject(self):
        p = self.params
        hosts = [w for w in self.ctx.workers if p.role in w.get("roles", [])]
        if p.rank >= len(hosts):
            raise ValueError(f"kill_role: role {p.role!r} has {len(hosts)} ranks in the trainer's "
                             f"placement; rank {p.rank} does not exist")
        worker = hosts[p.rank]  # the table lists workers in index order; ranks follow it
        self.ctx.cluster.kill_process(worker["ip"], worker["pid"])
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}
