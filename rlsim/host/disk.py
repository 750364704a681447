"""Size-capped filesystems the harness mounts under a run's directory (the ``disk_full`` fault):
a tmpfs whose source names the cluster session that mounted it, so a reaper finds and unmounts
what an interrupted run left, and an unmount that keeps what was written there."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PREFIX = "rlsim-disk-"
FILLER = ".rlsim-disk-full"  # the file that takes a capped filesystem's free space


def source(session: str) -> str:
    return f"{PREFIX}{session}"


def mount(path: Path, mb: int, session: str) -> None:
    """A tmpfs of ``mb`` MiB at ``path`` (an empty directory)."""
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0755", source(session),
                          str(path)], capture_output=True, text=True)
    if out.returncode:
        raise OSError(f"cannot mount a {mb} MiB tmpfs at {path}: {out.stderr.strip()}")


def mounted(session: str) -> list[Path]:
    """Mount points of this session's filesystems, deepest first."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        src, point, *_ = line.split()
        if src == source(session):
            found.append(Path(point.replace("\\040", " ")))
    return sorted(found, key=lambda p: -len(p.parts))


def unmount_keeping(path: Path) -> None:
    """Unmount the filesystem at ``path`` and leave its files (a filler left there aside) in a
    plain directory there."""
    keep = path.with_name(f".{path.name}.rlsim-unmounting")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(path, keep, symlinks=True, ignore=lambda _d, names: [n for n in names
                                                                       if n == FILLER])
    unmount(path)
    for child in keep.iterdir():
        child.rename(path / child.name)
    keep.rmdir()


def unmount(path: Path) -> None:
    out = subprocess.run(["umount", str(path)], capture_output=True, text=True)
    if out.returncode:  # busy: a process still has a file open there; detach it now
        out = subprocess.run(["umount", "--lazy", str(path)], capture_output=True, text=True)
    if out.returncode:
        raise OSError(f"cannot unmount {path}: {out.stderr.strip()}")


def unmount_all(session: str) -> None:
    """Unmount whatever this session left mounted (files on it are lost: the run is over)."""
    for point in mounted(session):
        unmount(point)
