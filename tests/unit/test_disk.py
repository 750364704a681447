"""Size-capped filesystems for disk_full: a real tmpfs, a real ENOSPC, files kept on unmount,
and the reaper's sweep of what an interrupted run left mounted (root only)."""

import errno
import os

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
