"""kill_role: SIGKILL the process of one rank of one role (an actor crash, not a node loss).

The process is found in the worker table the trainer logged (role, rank -> pid); the fault signals
that pid only, on whatever node it lives.
"""

import os
import signal

from rlsim.faults.base import Fault


class KillRole(Fault):
    name = "kill_role"

    def inject(self):
        p = self.params
        hosts = [w for w in self.ctx.workers if p.role in w.get("roles", [])]
        if p.rank >= len(hosts):
            raise ValueError(f"kill_role: role {p.role!r} has {len(hosts)} ranks in the trainer's "
                             f"placement; rank {p.rank} does not exist")
        worker = hosts[p.rank]  # the table lists workers in index order; ranks follow it
        os.kill(worker["pid"], signal.SIGKILL)
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}
