"""Filesystems the harness mounts under a run's directory, and an unmount that keeps what was
written there:

- a size-capped tmpfs (the ``disk_full`` fault) whose source names the cluster session that
  mounted it;
- a real block device (the ``slow_storage`` fault): ext4 on a sparse file of the session's run
  directory, through a loop device, so that its writes can be throttled per device (a tmpfs has
  no device to throttle). The image's name carries the session, so a reaper finds the mount
  through the loop device's backing file; the loop device is freed with its last unmount.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from rlsim.host import programs

PREFIX = "rlsim-disk-"
FILLER = ".rlsim-disk-full"  # the file that takes a capped filesystem's free space
KEEP_OUT = (FILLER, "lost+found")  # what an unmount does not keep


def mount_table() -> str:
    """Which mount table this process sees: its kernel's boot id and its mount namespace. Two
    processes say the same only where they share one kernel's mounts (network namespaces of one
    machine do; two machines never, though their first namespaces' numbers may be equal)."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot}/{os.stat('/proc/self/ns/mnt').st_ino}"


def source(session: str) -> str:
    return f"{PREFIX}{session}"


def mount(path: Path, mb: int, session: str) -> None:
    """A tmpfs of ``mb`` MiB at ``path`` (an empty directory)."""
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0755", source(session),
                          str(path)], capture_output=True, text=True)
    if out.returncode:
        raise OSError(f"cannot mount a {mb} MiB tmpfs at {path}: {out.stderr.strip()}")


def mount_device(path: Path, mb: int, session: str, images: Path) -> str:
    """An ext4 file system of ``mb`` MiB at ``path`` (an empty directory) on a loop device over
    a sparse image in ``images``; returns the device as ``major:minor``."""
    images.mkdir(parents=True, exist_ok=True)
    n = 0
    while (image := images / f"{source(session)}-{n}.img").exists():
        n += 1
    with open(image, "xb") as f:
        f.truncate(mb << 20)
    if (mkfs := shutil.which("mkfs.ext4", path=programs.search_path())) is None:
        image.unlink()
        raise OSError(f"cannot put a {mb} MiB ext4 device at {path}: mkfs.ext4 is not installed "
                      f"(Debian: apt-get install e2fsprogs)")
    for cmd in ([mkfs, "-q", "-F", "-m", "0", str(image)],
                ["mount", "-t", "ext4", "-o", "loop", str(image), str(path)]):
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            image.unlink(missing_ok=True)
            raise OSError(f"cannot put a {mb} MiB ext4 device at {path} ({Path(cmd[0]).name}): "
                          f"{out.stderr.strip()}")
    (path / "lost+found").rmdir()  # the trainer's folder holds what the trainer writes only
    device = device_of(path)
    # A v1 blkio cap outlives its loop device (it is kept by device number in the hierarchy's
    # top group): one left by a run killed before it healed would cap this new device from its
    # first write. Lifted here, where the device is born and no cap of ours can hold yet.
    from rlsim.host import cgroups
    with contextlib.suppress(OSError, RuntimeError):
        cgroups.throttle_writes(device, None, cgroups.io_groups_of([]))
    return device


def device_of(path: Path) -> str:
    """The block device of the file system at ``path``, as ``major:minor``."""
    dev = os.stat(path).st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


def _backing_file(src: str) -> str:
    """The image behind loop device ``src`` (/dev/loopN), or ''."""
    try:
        return Path(f"/sys/block/{Path(src).name}/loop/backing_file").read_text().strip()
    except OSError:
        return ""


def _mounts() -> list[tuple[str, Path]]:
    """(source, mount point) of every mount this process sees."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        src, point, *_ = line.split()
        found.append((src, Path(point.replace("\\040", " "))))
    return found


def mounted(session: str) -> list[Path]:
    """Mount points of this session's filesystems, deepest first."""
    found = [point for src, point in _mounts() if src == source(session) or (
        src.startswith("/dev/loop") and Path(_backing_file(src)).name.startswith(
            f"{source(session)}-"))]
    return sorted(found, key=lambda p: -len(p.parts))


def unmount_keeping(path: Path) -> None:
    """Unmount the filesystem at ``path`` and leave its files (a filler left there aside) in a
    plain directory there."""
    keep = path.with_name(f".{path.name}.rlsim-unmounting")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(path, keep, symlinks=True, ignore=lambda _d, names: [n for n in names
                                                                       if n in KEEP_OUT])
    unmount(path)
    for child in keep.iterdir():
        child.rename(path / child.name)
    keep.rmdir()


def unmount_device_keeping(path: Path) -> None:
    """Unmount the device file system at ``path`` (``mount_device``), keep its files in a plain
    directory there and delete its image."""
    src = next((src for src, point in _mounts() if point == path), "")
    image = _backing_file(src) if src.startswith("/dev/loop") else ""
    unmount_keeping(path)
    if image and Path(image).name.startswith(PREFIX):
        Path(image).unlink(missing_ok=True)


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
