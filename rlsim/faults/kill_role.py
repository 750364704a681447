"""kill_role: SIGKILL the process of one rank of one role (an actor crash, not a node loss).

The process is found in the worker table the reference trainer logged (role, rank -> pid, ip).
For a trainer of the user's own, the scenario names each role's Ray actor class by a pattern
(``trainer.roles: {actor: "ActorRolloutRefWorker|WorkerDict"}``, searched in the class name);
the role's ranks are its alive actors in node order (by address), then by pid. The backend
signals that pid only, on the host that runs it.
"""

import ipaddress
import re
from typing import ClassVar

from rlsim.backends.base import KillsProcesses, SignalsProcesses
from rlsim.backends.ray_state import alive_actors
from rlsim.faults.base import Fault
from rlsim.fields import Rank, Role, Strict
from rlsim.host.home import auth_token_path


class KillRole(Fault):
    name = "kill_role"
    needs = (KillsProcesses,)
    harms_real_cluster = True

    class Params(Strict):
        role: Role
        rank: Rank = 0

    @classmethod
    def trainer_problem(cls, params, trainer, adapter):
        """A trainer that logs no worker table (``placement``) is searched by actor class."""
        if "placement" in adapter.observes or params.role in trainer.roles:
            return None
        return "role", (f"adapter {adapter.name} logs no worker table, so rlsim finds role "
                        f"{params.role!r} by its Ray actor class: add trainer.roles: "
                        f"{{{params.role}: <class name pattern>}}")

    def inject(self):
        p = self.params
        worker = role_process(self.ctx, p.role, p.rank, self.name)
        self.ctx.cluster.kill_process(worker["ip"], worker["pid"])
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}


def role_process(ctx, role: str, rank: int, fault: str) -> dict:
    """The process (``ip``, ``pid``) of rank ``rank`` of ``role``: from the worker table the
    trainer logged, or by Ray actor class for a trainer that logs none (``trainer.roles``)."""
    if role in ctx.roles:
        pattern = ctx.roles[role]
        actors = alive_actors(ctx.cluster.address, str(auth_token_path()))
        hosts = sorted((a for a in actors if re.search(pattern, a["class"])),
                       key=lambda a: (ipaddress.ip_address(a["ip"]), a["pid"]))
        where = f"alive Ray actors whose class matches {pattern!r}"
    else:  # the table lists workers in index order; ranks follow it
        hosts = [w for w in ctx.workers if role in w.get("roles", [])]
        where = "ranks in the trainer's placement"
    if rank >= len(hosts):
        raise ValueError(f"{fault}: role {role!r} has {len(hosts)} {where}; rank {rank} does "
                         "not exist")
    return hosts[rank]


class SignalRole(Fault):
    """What ``hang_role`` and ``segfault_role`` share: one signal (``signum``) to the process of
    one rank of one role, found as :class:`KillRole` finds it (not a fault of its own)."""

    signum: ClassVar[int]
    needs = (SignalsProcesses,)
    harms_real_cluster = True
    Params = KillRole.Params

    @classmethod
    def trainer_problem(cls, params, trainer, adapter):
        return KillRole.trainer_problem(params, trainer, adapter)

    def send(self) -> dict:
        p = self.params
        worker = role_process(self.ctx, p.role, p.rank, self.name)
        self.ctx.cluster.signal_process(worker["ip"], worker["pid"], self.signum)
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}
