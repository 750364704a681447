"""host_oom: the node runs out of RAM and the kernel's OOM killer picks a victim.

How: the node's memory cgroup is capped at what it uses now (no free memory left), then a hog
process inside the node takes ``mb`` MiB more. The kernel must free that much, and it kills the
process with the highest OOM score in the node: Ray gives its workers ``oom_score_adj`` 1000, so the
victim is the biggest Ray worker, as when a real host runs out of memory. The hog holds its memory
until heal (``for_s`` or the end of the run), so workers restarted on the node meanwhile are killed
as they grow. Heal kills the hog and lifts the cap.

Needs memory accounting for the node: the local backend's node cgroup (cgroup2 with the memory
controller, or the v1 memory twin on hybrid hosts, see :mod:`rlsim.cgroups`), or the container's
own memory cgroup in the docker backend.
"""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import time
from pathlib import Path

from rlsim.faults.base import Fault

HOG_START_S = 30.0


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120].strip()
    return "?"


class HostOom(Fault):
    name = "host_oom"

    def inject(self):
        cluster = self.ctx.cluster
        self.node = self.ctx.node(self.params.node)
        self.memory = cluster.memory(self.node)
        before = {pid: _cmdline(pid) for pid in self.memory.pids()}
        kills = self.memory.oom_kills()
        usage = self.memory.usage()
        self.memory.set_limit(usage)
        self.injected = True
        self.ip = cluster.nodes()[self.node].address
        self.hog = subprocess.Popen(
            cluster.node_command(self.node, [sys.executable, "-m", "rlsim.faults._hog",
                                             str(self.params.mb)]),
            stdout=subprocess.PIPE, text=True)
        self.hog_pid = self._wait_held()
        # The victim may take a moment to be reaped after the kernel's SIGKILL.
        time.sleep(0.2)
        gone = sorted(set(before) - set(self.memory.pids()))
        return {
            "node": self.node, "limit_mb": round(usage / 2**20), "hog_mb": self.params.mb,
            "hog": "holding" if self.hog_pid else f"exited {self.hog.returncode}",
            "oom_kills": self.memory.oom_kills() - kills,
            "killed": [f"{pid} {before[pid]}" for pid in gone],
        }

    def _wait_held(self) -> int | None:
        """The hog's pid (as its node sees it) once it holds its memory; None if it died."""
        ready, _, _ = select.select([self.hog.stdout], [], [], HOG_START_S)
        words = (self.hog.stdout.readline() if ready else "").split()
        if words[:1] == ["held"]:
            return int(words[3])
        if self.hog.poll() is None:  # neither holding nor dead: do not leave it half-way
            self.hog.kill()
        self.hog.wait()
        return None

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        if self.hog_pid is not None:
            with contextlib.suppress(Exception):  # the node (and the hog) may be gone
                self.ctx.cluster.kill_process(self.ip, self.hog_pid)
        if self.hog.poll() is None:
            self.hog.kill()
        self.hog.wait()
        with contextlib.suppress(OSError, RuntimeError):  # the node's cgroup may be gone
            self.memory.set_limit(None)
        return {"node": self.node}
