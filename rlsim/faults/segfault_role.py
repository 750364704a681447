"""segfault_role: the process of one rank of one role dies of SIGSEGV, as a crash in native code
(a CUDA kernel, a communication library, a bad extension) ends it, not of SIGKILL as an
operator's or the OOM killer's kill does. Its node, its peers and Ray stay up. Nothing to heal.

The process is found as :mod:`rlsim.faults.kill_role` finds it: the trainer's worker table, or
the Ray actor class ``trainer.roles`` names for a trainer that logs none.
"""

import signal

from rlsim.backends.base import SignalsProcesses
from rlsim.faults.base import Fault
from rlsim.faults.kill_role import KillRole, role_process


class SegfaultRole(Fault):
    name = "segfault_role"
    needs = (SignalsProcesses,)
    harms_real_cluster = True

    Params = KillRole.Params  # one rank of one role, found as kill_role finds it

    @classmethod
    def trainer_problem(cls, params, trainer, adapter):
        return KillRole.trainer_problem(params, trainer, adapter)

    def inject(self):
        p = self.params
        worker = role_process(self.ctx, p.role, p.rank, self.name)
        self.ctx.cluster.signal_process(worker["ip"], worker["pid"], signal.SIGSEGV)
        return {"role": p.role, "rank": p.rank, "pid": worker["pid"], "ip": worker["ip"]}

    def said(self, did):
        return f"crashed {did['role']} rank {did['rank']} with SIGSEGV (pid {did['pid']} on " \
               f"{did['ip']})"

    def undo(self):
        return {}
