"""Filesystems mounted over a run's directory by this process, where every node sees them
(:mod:`rlsim.host.disk`): the local backend's nodes are process trees of this host, and a
substrate's machines that share this kernel's mounts (network namespaces of it) see the same.
"""

from __future__ import annotations

from pathlib import Path

from rlsim.host import disk


class DisksHere:
    """``cap_disk`` and ``mount_disk`` (``CapsDisk``, ``SlowsDisk``) for nodes that see this
    process's mounts; ``_check_mounts`` says where they would not."""

    def _check_mounts(self, path: Path) -> None:
        """Raise (in words, with the fix) where a node would not see a mount at ``path`` made
        here; nothing where every node does."""

    def cap_disk(self, path: Path, mb: int) -> None:
        """A tmpfs of ``mb`` MiB at ``path``: every node writes there. Unmounted by
        ``uncap_disk``, or by the reaper if the run is interrupted."""
        self._check_mounts(path)
        disk.mount(path, mb, self._st.session)

    def uncap_disk(self, path: Path) -> None:
        disk.unmount_keeping(path)

    def mount_disk(self, path: Path, mb: int) -> str:
        """ext4 on a loop device at ``path`` (its image in the cluster's run directory): every
        node sees it there."""
        self._check_mounts(path)
        return disk.mount_device(path, mb, self._st.session, self._st.root)

    def unmount_disk(self, path: Path) -> None:
        disk.unmount_device_keeping(path)
