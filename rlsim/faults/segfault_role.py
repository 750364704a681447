"""segfault_role: the process of one rank of one role dies of SIGSEGV, as a crash in native code
(a CUDA kernel, a communication library, a bad extension) ends it, not of SIGKILL as an
operator's or the OOM killer's kill does. Its node, its peers and Ray stay up. Nothing to heal.

The process is found as :mod:`rlsim.faults.kill_role` finds it: the trainer's worker table, or
the Ray actor class ``trainer.roles`` names for a trainer that logs none.
"""

import signal

from rlsim.faults.kill_role import SignalRole


class SegfaultRole(SignalRole):
    name = "segfault_role"
    signum = signal.SIGSEGV

    def inject(self):
        return self.send()

    def said(self, did):
        return f"crashed {did['role']} rank {did['rank']} with SIGSEGV (pid {did['pid']} on " \
               f"{did['ip']})"

    def undo(self):
        return {}
