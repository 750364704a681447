"""Put a mount of this host into a container's mount namespace, and take it out again.

Why: a container sees the run directory through a bind mount made when it started, and a file
system mounted under that directory on the host later stays out of the container's view (the
host's mounts are private: nothing propagates). The ``slow_storage`` fault mounts a real device
under the run directory after the nodes are up; each node container gets the same mount grafted
into its own namespace: ``open_tree`` clones the host's mount, ``setns`` enters the container's
namespace and ``move_mount`` attaches the clone there. Both views are one file system (one
superblock), so what one node writes every node and the harness read.

Run as its own process (``python -m rlsim.host.mountns graft|drop ...``): ``setns`` into a mount
namespace refuses a process with threads, and the harness has some.
"""

from __future__ import annotations

import ctypes
import os
import sys

_OPEN_TREE, _MOVE_MOUNT = 428, 429  # x86_64 and aarch64 share the numbers of these new calls
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 4
_AT_FDCWD, _CLONE_NEWNS, _MNT_DETACH = -100, 0x00020000, 2


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def graft(source: str, pid: int, target: str) -> None:
    """Mount what is mounted at ``source`` here at ``target`` in process ``pid``'s namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    tree = _check(libc.syscall(_OPEN_TREE, _AT_FDCWD, source.encode(),
                               _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC), f"open_tree {source}")
    _enter(libc, pid)
    _check(libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, target.encode(),
                        _MOVE_MOUNT_F_EMPTY_PATH), f"move_mount to {target}")


def drop(pid: int, target: str) -> None:
    """Unmount ``target`` in process ``pid``'s namespace (lazily: a writer there keeps its files
    until it closes them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _enter(libc, pid)
    _check(libc.umount2(target.encode(), _MNT_DETACH), f"umount {target}")


def _enter(libc, pid: int) -> None:
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(libc.setns(fd, _CLONE_NEWNS), f"setns into the mount namespace of pid {pid}")
    finally:
        os.close(fd)


def command(action: str, *args: str | int) -> list[str]:
    """The command line that runs ``action`` (graft, drop) in a process of its own."""
    return [sys.executable, "-m", "rlsim.host.mountns", action, *map(str, args)]


if __name__ == "__main__":
    act, *rest = sys.argv[1:]
    try:
        if act == "graft":
            graft(rest[0], int(rest[1]), rest[2])
        else:
            drop(int(rest[0]), rest[1])
    except OSError as e:
        sys.exit(f"rlsim.host.mountns {act}: {e}")
