"""The one writer and the one reader: nothing rlsim writes follows a symlink or changes a mode it
did not set, and nothing it reads blocks, runs without end or reads through a planted link."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.files import FileRefused, append_line, new_file, read_file, write_file


@pytest.fixture
def victim(tmp_path):
    """A file someone else owns the content of: what a planted symlink points at."""
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    path.chmod(0o600)
    return path


def _plant(path, kind: str, victim) -> None:
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling symlink":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "folder":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "character device":  # what /dev/null is (rlsim often runs as root)
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    else:
        import socket
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


KINDS = ["symlink", "dangling symlink", "folder", "FIFO", "character device", "socket"]


@pytest.mark.parametrize("kind", KINDS)
def test_only_a_regular_file_or_nothing_is_ever_replaced(tmp_path, victim, kind):
    if kind == "character device" and os.geteuid() != 0:
        pytest.skip("making a device needs root")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "junit.xml"
    _plant(target, kind, victim)
    before = os.lstat(target)
    with pytest.raises(FileRefused, match=f"is {'a symlink' if 'symlink' in kind else 'a ' + kind}"
                       r".*replaces only a regular file; remove it or choose another place"):
        write_file(target, "<testsuite/>", 0o755)
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert [p.name for p in out.iterdir()] == ["junit.xml"]  # no temp file left


def test_a_regular_file_is_replaced_whole_and_a_missing_folder_named(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    write_file(target, "[]", 0o640)
    assert target.read_text() == "[]" and stat.S_IMODE(target.stat().st_mode) == 0o640
    with pytest.raises(FileRefused, match="missing, the folder of .* does not exist: create it"):
        write_file(tmp_path / "missing" / "x.json", "[]")
    (tmp_path / "afile").write_text("")
    with pytest.raises(FileRefused, match="is not a folder"):
        write_file(tmp_path / "afile" / "x.json", "[]")


def test_reads_refuse_links_fifos_devices_folders_and_oversized_files(tmp_path, victim):
    (tmp_path / "link").symlink_to(victim)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 101)
    cases = {tmp_path / "link": "is a symlink", tmp_path / "fifo": "is a FIFO",
             tmp_path: "is a folder", "/dev/zero": "is a character device",
             tmp_path / "big": "larger than 100 bytes"}
    for path, said in cases.items():
        with pytest.raises(FileRefused, match=said):
            read_file(path, limit=100)
    assert read_file(tmp_path / "link", follow=True) == b"precious\n"  # a file the user named


def test_appends_and_new_files_never_go_through_a_link(tmp_path, victim):
    (tmp_path / "events.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        append_line(tmp_path / "events.jsonl", "{}")
    (tmp_path / "trainer-0.log").symlink_to(victim)
    with pytest.raises(FileExistsError):
        new_file(tmp_path / "trainer-0.log")
    assert victim.read_text() == "precious\n"


def test_rlsim_report_rewrites_no_file_a_planted_link_points_at(tmp_path, victim):
    root = tmp_path / "report"
    root.mkdir()
    (root / "summary.json").write_text(json.dumps([
        {"scenario": "a", "ok": True, "seconds": 1.0, "checks": []}]))
    for name in ("junit.xml", "signoff.html", "report.html"):
        (root / name).symlink_to(victim)
    result = CliRunner().invoke(cli.app, ["report", str(root)])
    assert result.exit_code == 2, result.output
    assert "is a symlink, where rlsim writes a file" in result.output
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert all((root / n).is_symlink() for n in ("junit.xml", "signoff.html", "report.html"))


def test_a_summary_that_is_a_link_or_a_fifo_is_refused_not_read(tmp_path, victim):
    root = tmp_path / "report"
    root.mkdir()
    (root / "summary.json").symlink_to(victim)
    result = CliRunner().invoke(cli.app, ["report", str(root)])
    assert result.exit_code == 2 and "is a symlink" in result.output, result.output
    (root / "summary.json").unlink()
    os.mkfifo(root / "summary.json")
    done = []
    worker = threading.Thread(target=lambda: done.append(
        CliRunner().invoke(cli.app, ["report", str(root)])))
    worker.start()
    worker.join(30)
    assert done and done[0].exit_code == 2 and "is a FIFO" in done[0].output


def test_rlsim_launch_does_not_write_or_chmod_through_a_planted_script(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rlsim-acceptance.sbatch").symlink_to(victim)
    result = CliRunner().invoke(cli.app, ["launch", "slurm", "--nodes", "2", "--gpus-per-node",
                                          "8", "--out", str(out)])
    assert result.exit_code == 2 and "is a symlink" in result.output, result.output
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    (out / "rlsim-acceptance.sbatch").unlink()
    result = CliRunner().invoke(cli.app, ["launch", "slurm", "--nodes", "2", "--gpus-per-node",
                                          "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert os.access(out / "rlsim-acceptance.sbatch", os.X_OK)


def test_json_records_that_do_not_parse_are_damaged_naming_the_line(tmp_path):
    from rlsim.files import Damaged, read_json, read_json_lines

    path = tmp_path / "r.json"
    for text, said in (("{", "r.json is not JSON"), ("[" * 100_000, "nested too deep"),
                       (b"\xff\xfe{", "is not JSON")):
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        with pytest.raises(Damaged, match=said):
            read_json(path)
    path.write_text('{"a": 1}\n\n[2]\n{"cut": ')
    assert read_json_lines(path) == ([{"a": 1}, [2]], True)  # the last line never finished
    path.write_text('{"a": 1}\n[2]')
    assert read_json_lines(path) == ([{"a": 1}, [2]], False)
    path.write_text('{"a": 1}\n{"cut": \n[2]\n')
    with pytest.raises(Damaged, match="line 2 is not JSON"):
        read_json_lines(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(FileRefused, match="is a FIFO"):
        read_json(path)
    with pytest.raises(FileRefused, match="is a FIFO"):
        read_json_lines(path)


def test_a_file_is_hashed_streamed_and_one_over_the_bound_refused_unread(tmp_path):
    import errno
    import hashlib

    from rlsim.files import hash_file

    small = tmp_path / "train.py"
    small.write_bytes(b"x" * (3 << 20))
    assert hash_file(small, 4 << 20).hexdigest() == hashlib.sha256(small.read_bytes()).hexdigest()
    sparse = tmp_path / "big.py"
    with open(sparse, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of nothing on disk: read whole, a MemoryError
    with pytest.raises(FileRefused) as refused:
        hash_file(sparse, 64 << 20)
    assert refused.value.errno == errno.EFBIG and "big.py is larger than" in str(refused.value)
    os.mkfifo(tmp_path / "fifo.py")
    with pytest.raises(FileRefused, match="is a FIFO"):
        hash_file(tmp_path / "fifo.py", 1 << 20)
