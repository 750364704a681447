"""Two homes on one machine never touch each other's things, and a home must be a directory rlsim
can own privately: refused, with the fix, before anything is created."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlsim import commands as cli
from rlsim.host import home, procs
from rlsim.host.cgroups import session_dir
from rlsim.host.home import home_id, home_problem


@pytest.fixture
def sleeper():
    """Start ``sleep`` with the given environment labels; killed at the end."""
    started = []

    def start(env: dict[str, str]) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={"PATH": "/usr/bin:/bin", **env})
        started.append(p)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and procs._labels(p.pid) is None and \
                env.get(procs.HOME_VAR) == home_id():
            time.sleep(0.02)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def test_a_process_of_another_home_with_the_same_session_is_not_ours(sleeper, monkeypatch,
                                                                    tmp_path):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "mine"))
    session = "same-0123abcd"
    theirs = sleeper({procs.SESSION_VAR: session, procs.HOME_VAR: "ffffffff"})
    unlabelled = sleeper({procs.SESSION_VAR: session})  # an older rlsim's, or anyone's
    mine = sleeper(procs.labels(session))
    assert procs.find(session) == [mine.pid]
    assert session in procs.sessions()
    procs.kill_and_wait(session)
    assert theirs.poll() is None and unlabelled.poll() is None and mine.wait(5) is not None


def test_cgroups_and_rules_carry_the_home(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "a"))
    a = session_dir("x-0123abcd")
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "b"))
    b = session_dir("x-0123abcd")
    assert a != b and a.endswith(".x-0123abcd") and a.split(".")[0] != b.split(".")[0]


@pytest.mark.parametrize("path,said", [
    ("/", "system directory"), ("/etc", "system directory"), ("/usr/lib/rlsim", "system"),
    ("/proc/rlsim", "system directory"), ("/sys/kernel", "system directory"),
    ("/dev/shm/rlsim", "system directory"), ("/boot", "system"), ("/var", "system directory"),
    ("/tmp", "system directory"), ("relative/home", "not an absolute path"),
])
def test_a_home_that_is_the_systems_is_refused(path, said):
    from pathlib import Path

    assert said in home_problem(Path(path))


def test_a_home_below_a_file_is_refused_before_anything_is_made(tmp_path, monkeypatch, capsys):
    (tmp_path / "hostname").write_text("box\n")
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "hostname" / "rlsim"))
    with pytest.raises(SystemExit) as e:
        cli.main(["status"])
    assert e.value.code == 2 and "which is a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostname"]


def test_status_with_a_system_home_creates_nothing(monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", "/proc/rlsim")
    with pytest.raises(SystemExit) as e:
        cli.main(["status"])
    assert e.value.code == 2


def test_a_pinned_home_holds_whatever_rlsim_home_says_until_the_block_ends(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "a"))
    with home.pinned(tmp_path / "a"):
        monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "b"))
        assert home.rlsim_home() == tmp_path / "a"
        with home.pinned(None):  # no home to pin: nothing changes
            assert home.rlsim_home() == tmp_path / "a"
    assert home.rlsim_home() == tmp_path / "b"
