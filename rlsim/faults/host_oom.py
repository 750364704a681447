"""host_oom: the node runs out of RAM and the kernel's OOM killer picks a victim.

How: the node's memory cgroup is capped at what it uses now plus room for a hog to start, then
the hog, inside the node, takes ``mb`` MiB more. The kernel must free that much and kills the
process with the highest OOM score in the node: Ray marks its workers ``oom_score_adj`` 1000, so
the victim is the biggest Ray worker, as when a real host runs out of memory. Once the kernel has
killed (bounded wait), the hog lets go: the pressure peak has passed. The cap stays until heal
(``for_s`` or the end of the run).

The node's daemons must not be the victim (a dead dashboard agent ends the raylet and the node;
a lost node is ``kill_node``'s story). Capped at usage exactly, merely starting the hog made the
kernel kill, and its second victim was the dashboard agent (CI under ``-n 2``, dmesg). Hence the
start room, and the hog marks itself 500, between the workers and the daemons (see ``_hog``).
Holding the memory longer, so that restarted workers were killed again, hit the same race: a
worker is marked 1000 a moment after it forks.

Needs memory accounting for the node: the local backend's node cgroup (cgroup2 with the memory
controller, or the v1 memory twin on hybrid hosts, see :mod:`rlsim.host.cgroups`), or the
container's own memory cgroup in the docker backend.
"""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import time
from pathlib import Path

from pydantic import Field

from rlsim.backends.base import KillsProcesses, LimitsMemory, RunsInNodes
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget

HOG_START_S = 30.0
KILL_WAIT_S = 5.0
# Room for the hog's own start (python, ~15 MiB) above what the node uses: capped at usage exactly,
# merely starting it made the kernel kill before the hog had marked itself (see ``_hog``), and the
# second victim then was the dashboard agent (dmesg).
START_HEADROOM = 32 * 2**20


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120].strip()
    return "?"


class HostOom(Fault):
    name = "host_oom"
    impairs = "memory squeezed"
    needs = (LimitsMemory, RunsInNodes, KillsProcesses)
    harms_real_cluster = True

    class Params(NodeTarget):
        mb: int = Field(128, gt=0, le=1 << 20,
                        description="MiB a hog takes on the node once it has no free memory")

    def inject(self):
        cluster = self.ctx.cluster
        self.node = self.target()
        self.memory = cluster.memory(self.node)
        before = {pid: _cmdline(pid) for pid in self.memory.pids()}
        kills = self.memory.oom_kills()
        usage = self.memory.usage() + START_HEADROOM
        self.memory.set_limit(usage)
        self.held = {"node": self.node}
        self.ip = cluster.nodes()[self.node].address
        self.hog = subprocess.Popen(
            cluster.node_command(self.node, [sys.executable, "-m", "rlsim.faults._hog",
                                             str(self.params.mb)]),
            stdout=subprocess.PIPE, text=True)
        self.hog_pid = self._wait_held()
        deadline = time.monotonic() + KILL_WAIT_S
        while self.memory.oom_kills() == kills and time.monotonic() < deadline:
            time.sleep(0.05)
        # The victim may take a moment to be reaped after the kernel's SIGKILL.
        time.sleep(0.2)
        gone = sorted(set(before) - set(self.memory.pids()))
        hog = "held, then let go" if self.hog_pid else f"exited {self.hog.returncode}"
        self._stop_hog()
        return {
            "node": self.node, "limit_mb": round(usage / 2**20), "hog_mb": self.params.mb,
            "hog": hog,
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

    def _stop_hog(self) -> None:
        """Kill the hog (inside the node, then its launcher here); safe twice."""
        if self.hog_pid is not None:
            with contextlib.suppress(Exception):  # the node (and the hog) may be gone
                self.ctx.cluster.kill_process(self.ip, self.hog_pid)
            self.hog_pid = None
        if self.hog.poll() is None:
            self.hog.kill()
        self.hog.wait()

    def undo(self):
        self._stop_hog()
        with contextlib.suppress(OSError, RuntimeError):  # the node's cgroup may be gone
            self.memory.set_limit(None)
        return {"node": self.node}
