"""``rlsim init`` writes all of its starter or nothing, only into folders and files of the project
itself: a link anywhere on the way, a file where a folder goes, a folder or a device where a file
goes, a file it did not write (even with --force): each refused with exit 2, the path and the fix,
before anything is written."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli

STARTER = ["scenarios/clean_run.yaml", "scenarios/node_lost.yaml", ".rlsim/scenario.schema.json",
           "pytest.ini", ".github/workflows/rlsim.yml"]


def tree(root) -> dict[str, tuple[int, int]]:
    """Every entry under ``root`` (links not followed), with its inode and mode."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            out[os.path.relpath(os.path.join(top, name), root)] = (st.st_ino, st.st_mode)
    return out


def init(*args: str):
    return CliRunner().invoke(cli.app, ["init", *args])


# where the plant goes, what it is, what the refusal says
PLANTS = [
    ("scenarios", "link to folder", "scenarios is a symlink"),
    (".rlsim", "dangling link", ".rlsim is a symlink"),
    (".github", "link to folder", ".github is a symlink"),
    (".github/workflows/rlsim.yml", "link to file", "rlsim.yml is a symlink"),
    ("pytest.ini", "dangling link", "pytest.ini is a symlink"),
    (".github", "file", ".github is not a folder"),
    ("scenarios", "file", "scenarios is not a folder"),
    ("scenarios/clean_run.yaml", "folder", "clean_run.yaml is not a regular file"),
    (".rlsim/scenario.schema.json", "fifo", "scenario.schema.json is not a regular file"),
    (".github/workflows/rlsim.yml", "user's file", "rlsim.yml already there"),
]


@pytest.mark.parametrize("where,what,said", PLANTS)
def test_a_plant_on_the_way_is_refused_and_nothing_written(tmp_path, where, what, said):
    project, outside = tmp_path / "project", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious")
    path = project / where
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "link to folder":
        path.symlink_to(outside)
    elif what == "link to file":
        path.symlink_to(outside / "victim")
    elif what == "dangling link":
        path.symlink_to(outside / "nowhere")
    elif what == "file":
        path.write_text("x")
    elif what == "folder":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("name: mine\n")
    before, victims = tree(project), tree(outside)
    for force in ([], ["--force"]):
        done = init(str(project), *force)
        assert done.exit_code == 2, done.output
        assert said in done.output or (force and "not written by rlsim init" in done.output), \
            done.output
        assert "fix:" in done.output
        assert tree(project) == before and tree(outside) == victims
    assert (outside / "victim").read_text() == "precious"


def test_force_replaces_what_init_wrote_and_nothing_else(tmp_path):
    project = tmp_path / "project"
    assert init(str(project)).exit_code == 0
    assert sorted(p for p in tree(project) if os.path.isfile(project / p)) == sorted(STARTER)
    done = init(str(project))
    assert done.exit_code == 2 and "already there" in done.output and "--force" in done.output
    (project / "scenarios" / "node_lost.yaml").write_text(
        (project / "scenarios" / "node_lost.yaml").read_text() + "# my edit\n")
    assert init(str(project), "--force").exit_code == 0  # init's own files, edited or not
    (project / ".github" / "workflows" / "rlsim.yml").write_text("name: mine\n")
    done = init(str(project), "--force")
    assert done.exit_code == 2 and "not written by rlsim init" in done.output
    assert (project / ".github" / "workflows" / "rlsim.yml").read_text() == "name: mine\n"


@pytest.mark.parametrize("where", ["a file", "a dangling link", "a folder that cannot be made"])
def test_a_folder_init_cannot_use_exits_2(tmp_path, where):
    target = tmp_path / "p"
    if where == "a file":
        target.write_text("x")
        said = "is not a folder"
    elif where == "a dangling link":
        target.symlink_to(tmp_path / "nowhere")
        said = "is a dangling symlink"
    else:
        target = "/proc/rlsim-init-test/p"  # no one may make a folder there, root included
        said = "nothing was written"
    done = init(str(target))
    assert done.exit_code == 2 and said in done.output and "fix:" in done.output, done.output


def test_a_write_that_fails_midway_leaves_nothing(tmp_path, monkeypatch):
    from rlsim.commands import init as init_mod

    real, calls = init_mod.write_file, []

    def fail_third(path, text, *a):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(path, text, *a)

    monkeypatch.setattr(init_mod, "write_file", fail_third)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "keep.txt").write_text("mine")
    done = init(str(tmp_path / "p"))
    assert done.exit_code == 2 and "No space left on device" in done.output, done.output
    assert "nothing was written" in done.output
    assert sorted(os.listdir(tmp_path / "p")) == ["keep.txt"]
