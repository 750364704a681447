"""host_oom: cap one node's memory so the kernel OOM-kills inside it, as when a host runs out of
RAM; heal lifts the cap. cgroup2 ``memory.max`` on the node's cgroup where the memory controller
is enabled there; otherwise (hybrid hosts) a cgroup-v1 memory group holding the node's processes.
"""

import contextlib
from pathlib import Path

from rlsim import cgroups
from rlsim.faults.base import Fault

V1 = Path("/sys/fs/cgroup/memory")


class HostOom(Fault):
    name = "host_oom"

    def inject(self):
        st = self.ctx.cluster.state
        if not st.cgroups:
            raise RuntimeError("host_oom needs per-node cgroups (root and cgroup2)")
        self.node = self.ctx.node(self.params.node)
        group = cgroups.NodeGroup(st.session, self.node)
        limit = str(self.params.mb * 2**20)
        if (group.path / "memory.max").exists():
            self.knob, self.v1 = group.path / "memory.max", None
            self.knob.write_text(limit)
        elif V1.is_dir():
            self.v1 = V1 / f"rlsim-{st.session}-n{self.node}"
            self.v1.mkdir(exist_ok=True)
            self.knob = self.v1 / "memory.limit_in_bytes"
            self.knob.write_text(limit)
            for pid in group.pids():
                with contextlib.suppress(OSError):  # exited meanwhile
                    (self.v1 / "cgroup.procs").write_text(str(pid))
        else:
            raise RuntimeError("host_oom: no memory controller (cgroup2 memory.max or v1 memory)")
        self.injected = True
        return {"node": self.node, "memory_max_mb": self.params.mb, "knob": str(self.knob)}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        with contextlib.suppress(OSError):
            self.knob.write_text("max" if self.v1 is None else "-1")
        if self.v1 is not None:
            for pid in (self.v1 / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (V1 / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                self.v1.rmdir()
        return {"node": self.node}
