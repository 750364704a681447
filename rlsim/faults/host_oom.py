"""host_oom: the node runs out of RAM and the kernel's OOM killer picks a victim.

How: the node's memory cgroup is capped at what it uses now (no free memory left), then a hog
process inside the node takes ``mb`` MiB more. The kernel must free that much, and it kills the
process with the highest OOM score in the node: Ray gives its workers ``oom_score_adj`` 1000, so the
victim is the biggest Ray worker, as when a real host runs out of memory. The hog holds its memory
until heal (``for_s`` or the end of the run), so workers restarted on the node meanwhile are killed
as they grow. Heal kills the hog and lifts the cap.

Needs memory accounting in the node's cgroup: cgroup2 with the memory controller, or the v1 memory
hierarchy on hybrid hosts (see :mod:`rlsim.cgroups`).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from rlsim import cgroups, procs
from rlsim.faults.base import Fault

HOG_START_S = 30.0


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120].strip()
    return "?"


class HostOom(Fault):
    name = "host_oom"

    def inject(self):
        st = self.ctx.cluster.state
        self.node = self.ctx.node(self.params.node)
        if not st.cgroups:
            raise RuntimeError(f"host_oom needs rlsim's node cgroups: {cgroups.available()}")
        self.group = cgroups.NodeGroup(st.session, self.node)
        before = {pid: _cmdline(pid) for pid in self.group.pids()}
        kills = self.group.oom_kills()
        usage = self.group.memory_usage()
        self.group.set_memory_limit(usage)
        self.injected = True
        env = {**os.environ, procs.SESSION_VAR: st.session, procs.NODE_VAR: str(self.node)}
        self.hog = subprocess.Popen(
            [sys.executable, "-m", "rlsim.faults._hog", st.session, str(self.node),
             str(self.params.mb)],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        held = self._wait_held()
        # The victim may take a moment to be reaped after the kernel's SIGKILL.
        time.sleep(0.2)
        gone = sorted(set(before) - set(self.group.pids()))
        return {
            "node": self.node, "limit_mb": round(usage / 2**20), "hog_mb": self.params.mb,
            "hog": "holding" if held else f"exited {self.hog.returncode}",
            "oom_kills": self.group.oom_kills() - kills,
            "killed": [f"{pid} {before[pid]}" for pid in gone],
        }

    def _wait_held(self) -> bool:
        ready, _, _ = select.select([self.hog.stdout], [], [], HOG_START_S)
        line = self.hog.stdout.readline() if ready else ""
        if line.startswith("held"):
            return True
        if self.hog.poll() is None:  # neither holding nor dead: do not leave it half-way
            self.hog.kill()
        self.hog.wait()
        return False

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        if self.hog.poll() is None:
            self.hog.kill()
        self.hog.wait()
        with contextlib.suppress(OSError, RuntimeError):  # the node (and its cgroup) may be gone
            self.group.set_memory_limit(None)
        return {"node": self.node}
