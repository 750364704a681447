"""Filesystems under a run's directory: disk_full's size-capped tmpfs (a real ENOSPC, files kept
on unmount), slow_storage's loop device (writes really throttled), and the reaper's sweep of what
an interrupted run left mounted (root only)."""

import errno
import os
import time

import pytest

from rlsim.host import disk

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def test_a_capped_directory_fills_up_and_keeps_its_files(tmp_path):
    where = tmp_path / "run" / "checkpoints"
    where.mkdir(parents=True)
    disk.mount(where, 8, "test-session-disk")
    try:
        assert disk.mounted("test-session-disk") == [where]
        (where / "global_step_1").mkdir()
        (where / "global_step_1" / "weights").write_bytes(b"w" * 1000)
        with open(where / disk.FILLER, "wb") as f:
            st = os.statvfs(where)
            os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)
        with pytest.raises(OSError) as e:
            (where / "more").write_bytes(b"x" * 100_000)
        assert e.value.errno == errno.ENOSPC
    finally:
        disk.unmount_keeping(where)
    assert disk.mounted("test-session-disk") == []
    assert (where / "global_step_1" / "weights").read_bytes() == b"w" * 1000
    assert not (where / disk.FILLER).exists()


def test_what_an_interrupted_run_left_mounted_is_swept(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        disk.mount(tmp_path / name, 8, "test-session-sweep")
    disk.unmount_all("test-session-sweep")
    assert disk.mounted("test-session-sweep") == []


def test_a_device_directory_is_throttled_for_real_and_keeps_its_files(tmp_path):
    """slow_storage's device: ext4 on a loop device; a write capped at 1 MB/s takes its time
    when made durable (fsync), and the files outlive the unmount, the image does not."""
    from rlsim.host import cgroups

    if cgroups.io_groups_of([]) == []:
        pytest.skip("no v1 blkio hierarchy here to throttle the device in")
    where = tmp_path / "run" / "checkpoints"
    where.mkdir(parents=True)
    dev = disk.mount_device(where, 32, "test-session-dev", tmp_path / "images")
    groups = cgroups.io_groups_of([os.getpid()])
    try:
        assert disk.mounted("test-session-dev") == [where] and list(where.iterdir()) == []
        assert cgroups.throttle_writes(dev, 1_000_000, groups)
        assert cgroups.write_limit(dev, groups[0]) == 1_000_000
        start = time.monotonic()
        with open(where / "weights", "wb") as f:
            f.write(b"w" * 2_000_000)
            f.flush()
            os.fsync(f.fileno())
        assert time.monotonic() - start > 1.0  # 2 MB at 1 MB/s, less the first burst
        cgroups.throttle_writes(dev, None, groups)
        assert cgroups.write_limit(dev, groups[0]) is None
    finally:
        cgroups.throttle_writes(dev, None, groups)
        disk.unmount_device_keeping(where)
    assert disk.mounted("test-session-dev") == []
    assert (where / "weights").stat().st_size == 2_000_000
    assert list((tmp_path / "images").iterdir()) == []


def test_an_interrupted_runs_device_is_swept_with_its_loop_device(tmp_path):
    (tmp_path / "d").mkdir()
    disk.mount_device(tmp_path / "d", 16, "test-session-devsweep", tmp_path)
    loops = disk.mounted("test-session-devsweep")
    assert loops == [tmp_path / "d"]
    disk.unmount_all("test-session-devsweep")
    assert disk.mounted("test-session-devsweep") == []


def test_a_cap_left_on_a_loop_device_number_does_not_hold_a_new_device(tmp_path):
    """A run killed before it healed leaves its v1 blkio cap in the top group, kept by device
    number: the next device on that loop device starts uncapped."""
    import subprocess

    from rlsim.host import cgroups

    top = cgroups.io_groups_of([])
    if top == []:
        pytest.skip("no v1 blkio hierarchy here to throttle the device in")
    free = subprocess.run(["losetup", "-f"], capture_output=True, text=True).stdout.strip()
    stale = f"{os.major(os.stat(free).st_rdev)}:{os.minor(os.stat(free).st_rdev)}" \
        if os.path.exists(free) else "7:0"
    cgroups.throttle_writes(stale, 200_000, top)
    where = tmp_path / "d"
    where.mkdir()
    try:
        dev = disk.mount_device(where, 16, "test-session-stale", tmp_path / "images")
        if dev != stale:  # another process took that loop device meanwhile
            cgroups.throttle_writes(stale, None, top)
        assert cgroups.write_limit(dev, top[0]) is None
        assert cgroups.write_limit(stale, top[0]) is None
    finally:
        cgroups.throttle_writes(stale, None, top)
        disk.unmount_all("test-session-stale")
