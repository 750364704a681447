"""kill_role: SIGKILL the process of one rank of one role (an actor crash, not a node loss).

The process is found in the worker table the reference trainer logged (role, rank -> pid, ip).
For a trainer of the user's own, the scenario names each role's Ray actor class by a pattern
(``trainer.roles: {actor: "ActorRolloutRefWorker|WorkerDict"}``, searched in the class name);
the role's ranks are its alive actors in node order (by address), then by pid. The backend
signals that pid only, on the host that runs it.
"""

from typing import ClassVar

from rlsim.backends.base import KillsProcesses, SignalsProcesses
from rlsim.faults.base import Fault, role_process
from rlsim.fields import Rank, Role, Strict


class KillRole(Fault):
    name = "kill_role"
    needs = (KillsProcesses,)
    harms_real_cluster = True

    class Params(Strict):
        role: Role
        rank: Rank = 0

    def inject(self):
        p = self.params
        worker = role_process(self.ctx, p.role, p.rank)
        self.ctx.cluster.kill_process(worker["ip"], worker["pid"])
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}

    def touched(self, did, footprint):
        """The one process it signalled, where it is one of the trainer's actors."""
        return [a for a in footprint if (a["ip"], a["pid"]) == (did["ip"], did["pid"])]


class SignalRole(Fault):
    """What ``hang_role`` and ``segfault_role`` share: one signal (``signum``) to the process of
    one rank of one role, found as :class:`KillRole` finds it (not a fault of its own)."""

    signum: ClassVar[int]
    needs = (SignalsProcesses,)
    harms_real_cluster = True
    Params = KillRole.Params

    touched = KillRole.touched

    def send(self) -> dict:
        p = self.params
        worker = role_process(self.ctx, p.role, p.rank)
        self.ctx.cluster.signal_process(worker["ip"], worker["pid"], self.signum)
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}
