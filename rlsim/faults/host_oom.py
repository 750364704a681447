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
controller, or the v1 memory twin on hybrid hosts, see :mod:`rlsim.host.cgroups`), the
container's own memory cgroup in the docker backend, or the node's cgroup on its machine, squeezed
there by the machine's host actor, on a substrate. The steps are :mod:`rlsim.host.squeeze`'s.
"""

from __future__ import annotations

from pydantic import Field

from rlsim.backends.base import SqueezesMemory
from rlsim.faults.base import Fault
from rlsim.fields import NodeTarget


class HostOom(Fault):
    name = "host_oom"
    impairs = "memory squeezed"
    needs = (SqueezesMemory,)
    harms_real_cluster = True

    class Params(NodeTarget):
        mb: int = Field(128, gt=0, le=1 << 20,
                        description="MiB a hog takes on the node once it has no free memory")

    def inject(self):
        node = self.target()
        self.held = {"node": node}
        return {"node": node, **self.ctx.cluster.squeeze_memory(node, self.params.mb)}

    def undo(self):
        node = self.held["node"]
        self.ctx.cluster.lift_memory(node)
        return {"node": node}
