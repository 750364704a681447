"""Filesystems mounted over a run's directory by this process, where every node sees them
(:mod:`rlsim.host.disk`): the local backend's nodes are process trees of this host, and a
substrate's machines that share this kernel's mounts (network namespaces of it) see the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from rlsim.host import disk
from rlsim.host.state import ClusterState


class DisksHereNeed(Protocol):
    """What a cluster that takes :class:`DisksHere` must give it: its running state (the
    session that labels a mount, the run directory that holds a device's image), which
    :class:`StartedCluster` gives, and ``_check_mounts``, which :class:`DisksHere` gives as
    "every node sees this process's mounts" and a backend narrows."""

    @property
    def _st(self) -> ClusterState:
        """The running cluster's state; RuntimeError when it is not running."""

    def _check_mounts(self, path: Path) -> None:
        """Raise (in words, with the fix) where a node would not see a mount at ``path`` made
        here; nothing where every node does."""


class DisksHere:
    """``cap_disk`` and ``mount_disk`` (``CapsDisk``, ``SlowsDisk``) for nodes that see this
    process's mounts, for a cluster that gives what :class:`DisksHereNeed` says;
    ``_check_mounts`` says where they would not."""

    def _check_mounts(self, path: Path) -> None:
        """Nothing: every node sees a mount made here (a backend whose nodes may not says
        so)."""

    def cap_disk(self: DisksHereNeed, path: Path, mb: int) -> None:
        """A tmpfs of ``mb`` MiB at ``path``: every node writes there. Unmounted by
        ``uncap_disk``, or by the reaper if the run is interrupted."""
        self._check_mounts(path)
        disk.mount(path, mb, self._st.session)

    def uncap_disk(self, path: Path) -> None:
        disk.unmount_keeping(path)

    def mount_disk(self: DisksHereNeed, path: Path, mb: int) -> str:
        """ext4 on a loop device at ``path`` (its image in the cluster's run directory): every
        node sees it there."""
        self._check_mounts(path)
        return disk.mount_device(path, mb, self._st.session, self._st.root)

    def unmount_disk(self, path: Path) -> None:
        disk.unmount_device_keeping(path)
