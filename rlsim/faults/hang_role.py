"""hang_role: freeze the process of one rank of one role (SIGSTOP), not its node: a hung rank, a
rollout engine stuck in a weight push. Its node, its peers and Ray stay up; the process holds its
sockets and answers nothing. Healed by SIGCONT when ``for_s`` is up or at the end of the run
(a process the trainer killed meanwhile, to restart, has nothing left to thaw).

The process is found as :mod:`rlsim.faults.kill_role` finds it: the trainer's worker table, or
the Ray actor class ``trainer.roles`` names for a trainer that logs none.
"""

import signal

from rlsim.faults.kill_role import SignalRole


class HangRole(SignalRole):
    name = "hang_role"
    signum = signal.SIGSTOP

    def inject(self):
        did = self.send()
        self.held = {"ip": did["ip"], "pid": did["pid"]}
        return did

    def said(self, did):
        return f"froze {did['role']} rank {did['rank']} (pid {did['pid']} on {did['ip']})"

    def undo(self):
        try:
            self.ctx.cluster.signal_process(self.held["ip"], self.held["pid"], signal.SIGCONT)
        except ProcessLookupError:  # killed meanwhile (the trainer restarted): nothing to thaw
            return {"pid": self.held["pid"], "thawed": False}
        return {"pid": self.held["pid"], "thawed": True}
