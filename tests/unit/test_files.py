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


def test_a_symlink_at_the_target_is_replaced_never_followed(tmp_path, victim):
    link = tmp_path / "out" / "junit.xml"
    link.parent.mkdir()
    link.symlink_to(victim)
    write_file(link, "<testsuite/>", 0o755)
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not link.is_symlink() and link.read_text() == "<testsuite/>"
    assert stat.S_IMODE(link.stat().st_mode) == 0o755
    assert [p.name for p in link.parent.iterdir()] == ["junit.xml"]  # no temp file left


def test_a_folder_at_the_target_is_refused(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(FileRefused, match="is a folder, where rlsim writes a file"):
        write_file(tmp_path / "summary.json", "[]")


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
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not any((root / n).is_symlink() for n in ("junit.xml", "signoff.html", "report.html"))


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
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    script = out / "rlsim-acceptance.sbatch"
    assert not script.is_symlink() and os.access(script, os.X_OK)
