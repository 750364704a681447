"""host_oom: cap one node's memory (cgroup2 ``memory.max`` on the node's cgroup) so the kernel
OOM-kills inside it, as when a host runs out of RAM; heal lifts the cap.

Needs the memory controller on the cgroup2 hierarchy rlsim uses. On hybrid hosts (cgroup v1 memory,
as on the development machine) it refuses with a clear error: v1 cannot move a running process's
memory charge into a new group (``move_charge_at_immigrate`` is gone), so a cap would not bite.
"""

import contextlib

from rlsim import cgroups
from rlsim.faults.base import Fault


class HostOom(Fault):
    name = "host_oom"

    def inject(self):
        st = self.ctx.cluster.state
        self.node = self.ctx.node(self.params.node)
        group = cgroups.NodeGroup(st.session, self.node) if st.cgroups else None
        if group is None or not (group.path / "memory.max").exists():
            raise RuntimeError("host_oom needs the cgroup2 memory controller on rlsim's node "
                               "cgroups (enable it in cgroup.subtree_control, or run on a "
                               "cgroup2-only host)")
        self.knob = group.path / "memory.max"
        self.knob.write_text(str(self.params.mb * 2**20))
        self.injected = True
        return {"node": self.node, "memory_max_mb": self.params.mb}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        with contextlib.suppress(OSError):  # the node (and its cgroup) may be gone
            self.knob.write_text("max")
        return {"node": self.node}
