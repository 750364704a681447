"""slow_storage: the checkpoint storage turns slow (a degraded disk, a congested network file
system): writes there are throttled to ``write_mbps`` MB/s, so a save takes longer than a step.
Nothing fails; the run waits on its saves unless it saves off the training path.

How: before the trainer starts, the directory (``path``, relative to the run directory:
``checkpoints`` by default) gets a real block device of its own, ``size_mb`` MiB of ext4 on a loop
device over a sparse file of the cluster's run directory (a tmpfs has no device to throttle).
When the fault fires, the device's writes are capped in every cgroup that writes to it (the
nodes' and the host's flusher threads', v1 ``blkio.throttle.write_bps_device`` or cgroup2
``io.max``; see :mod:`rlsim.host.cgroups`). A write the trainer makes durable (its checkpoints are
fsynced) waits for the device; heal lifts the cap. After the run the device is unmounted and what
the trainer wrote there is left in a plain directory at the same path. On the docker backend the
host's mount is grafted into each node container at the same path.
"""

from __future__ import annotations

from pydantic import Field

from rlsim.backends.base import SlowsDisk
from rlsim.faults.base import StorageFault
from rlsim.fields import RunPath, Strict


class SlowStorage(StorageFault):
    name = "slow_storage"
    needs = (SlowsDisk,)
    impairs = "slow storage"

    class Params(Strict):
        path: RunPath = Field("checkpoints", description="directory in the run directory")
        write_mbps: float = Field(gt=0, le=1e5, description="write bandwidth left, MB/s "
                                  "(10^6 bytes a second)")
        size_mb: int = Field(256, ge=16, le=1 << 16,
                             description="size of the device file system mounted there")

    needs_root = "mounting a loop device and throttling it need root"

    def mount(self, path):
        self.device = self.ctx.cluster.mount_disk(path, self.params.size_mb)

    def unmount(self, path):
        self.ctx.cluster.unmount_disk(path)

    def inject(self):
        groups = self.ctx.cluster.throttle_disk(self.dir, self.params.write_mbps)
        self.held = {"path": str(self.dir)}
        self.watch_writes()
        return {"path": str(self.dir), "device": self.device,
                "write_mbps": self.params.write_mbps, "cgroups": len(groups)}

    def said(self, did):
        return f"throttled writes to {did['path']} to {did['write_mbps']} MB/s"

    def undo(self):
        self.ctx.cluster.throttle_disk(self.dir, None)
        return {"path": str(self.dir), "touched": self.writes()}
