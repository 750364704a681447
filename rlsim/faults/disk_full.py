"""disk_full: the trainer's checkpoint storage runs out of space mid-run (a real ENOSPC).

Before the trainer starts, the directory (``path``, relative to the run directory: its
``checkpoints`` by default) gets a filesystem of its own, ``size_mb`` MiB (the backend's
``cap_disk``: a tmpfs on the local backend). When the fault fires, a filler file takes every free
byte of it; heal deletes the filler. After the run the filesystem is unmounted and what the trainer
wrote there is left in a plain directory at the same path.

What the reference trainer does about it: a save the storage refuses is dropped (its partial files
removed, a ``checkpoint_write_failed`` event naming the directory and the free space) and training
goes on; the last complete checkpoint stays the resume point. A failed final save fails the run.
"""

from __future__ import annotations

import os

from pydantic import Field

from rlsim.backends.base import CapsDisk
from rlsim.faults.base import StorageFault
from rlsim.fields import RunPath, Strict
from rlsim.host.disk import FILLER


class DiskFull(StorageFault):
    name = "disk_full"
    needs = (CapsDisk,)

    class Params(Strict):
        path: RunPath = Field("checkpoints", description="directory in the run directory")
        size_mb: int = Field(256, ge=8, le=1 << 16,
                             description="size of the filesystem mounted there")

    needs_root = "mounting a size-capped filesystem needs root"

    def mount(self, path):
        self.ctx.cluster.cap_disk(path, self.params.size_mb)

    def unmount(self, path):
        self.ctx.cluster.uncap_disk(path)

    def inject(self):
        free = _free(self.dir)
        self.filler = self.dir / FILLER
        self.held = {"path": str(self.filler)}
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.posix_fallocate(fd, 0, free)
        finally:
            os.close(fd)
        self.watch_writes(own=self.filler)
        return {"path": str(self.dir), "filled_mb": round(free / 2**20, 1),
                "free_mb": round(_free(self.dir) / 2**20, 2)}

    def undo(self):
        touched = self.writes()
        self.filler.unlink(missing_ok=True)
        return {"path": str(self.dir), "free_mb": round(_free(self.dir) / 2**20, 1),
                "touched": touched}


def _free(path) -> int:
    """Bytes an unprivileged writer may still write there."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
