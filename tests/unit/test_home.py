"""The rlsim home is trusted only when it is this user's own, and the reaper never reaches past it
or past its own session: a hostile home is planted in a temp dir and must be refused with nothing
outside it written or deleted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.backends.reaper import reap, reap_abandoned
from rlsim.host import home as home_dir
from rlsim.host import state
from rlsim.host.home import HomeError, auth_token_path, rlsim_home
from rlsim.host.spec import ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.ray_internals.session import socket_path_problem

OTHER_UID = 65534  # nobody


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("RLSIM_HOME", str(h))
    return h


@pytest.fixture
def outside(tmp_path):
    """A directory outside the home holding a victim file and directory."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "victim").write_text("precious")
    return d


def dead_pid() -> int:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                         capture_output=True, text=True)
    return int(out.stdout)


def untouched(outside: Path, names: set[str]) -> None:
    assert (outside / "victim").read_text() == "precious"
    assert {p.name for p in outside.iterdir()} == names


def test_default_home_is_per_user_and_private(monkeypatch, tmp_path):
    monkeypatch.delenv("RLSIM_HOME", raising=False)
    assert rlsim_home() == Path(f"/tmp/rlsim-{os.geteuid()}")
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "h"))
    assert home_dir.home().stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("plant,needle", [
    (lambda h, o: (h.mkdir(), os.chown(h, OTHER_UID, -1)), f"belongs to uid {OTHER_UID}"),
    (lambda h, o: (h.mkdir(), os.chmod(h, 0o777)), "writable by group or others"),
    (lambda h, o: h.symlink_to(o), "is a symlink"),
    (lambda h, o: os.chown(h.parent, OTHER_UID, -1), "above the rlsim home"),
    (lambda h, o: os.chmod(h.parent, 0o777), "writable by others without the sticky bit"),
    (lambda h, o: (h.mkdir(0o700), (h / "clusters").symlink_to(o)), "clusters is a symlink"),
    (lambda h, o: (h.mkdir(0o700), (h / "lock").symlink_to(o / "victim")), "lock is a symlink"),
    (lambda h, o: (h.mkdir(0o700), (h / "lock").write_text(""),
                   os.chown(h / "lock", OTHER_UID, -1)), "lock belongs to uid"),
])
def test_a_hostile_home_is_refused_naming_the_path(home, outside, plant, needle):
    plant(home, outside)
    with pytest.raises(HomeError, match=needle) as e:
        state.reserve(ClusterSpec(name="a"), "local", detached=False)
    assert "RLSIM_HOME" in str(e.value) or "chmod" in str(e.value)
    untouched(outside, {"victim"})


def test_the_token_is_never_written_through_a_link_nor_taken_from_someone_else(home, outside):
    home.mkdir(0o700)
    (home / "auth_token").symlink_to(outside / "victim")
    with pytest.raises(HomeError, match="auth_token is a symlink"):
        auth_token_path()
    (home / "auth_token").unlink()
    (home / "auth_token").write_text("guessable")
    os.chmod(home / "auth_token", 0o644)
    with pytest.raises(HomeError, match="mode 644, not 600"):
        auth_token_path()
    os.chmod(home / "auth_token", 0o600)
    os.chown(home / "auth_token", OTHER_UID, -1)
    with pytest.raises(HomeError, match="belongs to uid"):
        auth_token_path()
    untouched(outside, {"victim"})


def test_planted_temp_names_are_not_written_through(home, outside):
    (home / "clusters").mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    (home / "auth_token.tmp").symlink_to(outside / "victim")
    (home / "clusters" / "a.json.tmp").symlink_to(outside / "victim")
    token = auth_token_path()
    st = state.reserve(ClusterSpec(name="a"), "local", detached=False)
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) == 64
    assert state.load("a") == st
    untouched(outside, {"victim"})


def test_the_reaper_refuses_a_run_dir_that_leads_outside(home, outside):
    st = state.reserve(ClusterSpec(name="evil"), "local", detached=False)
    st.owner_pid = dead_pid()
    state.save(st)
    shutil.rmtree(home / "run", ignore_errors=True)
    (home / "run").symlink_to(outside)
    (outside / "evil").mkdir()  # where a reaper that follows links would delete
    (outside / st.root.name).mkdir(exist_ok=True)
    try:
        reap_abandoned()
    except HomeError as e:
        refused = str(e)
    else:
        refused = ""
    untouched(outside, {"victim", "evil", st.root.name})
    assert "run is a symlink" in refused
    assert state.load("evil") == st


def test_a_state_file_cannot_name_a_session_outside(home):
    state.clusters_dir()
    st = state.reserve(ClusterSpec(name="evil"), "local", detached=False)
    raw = json.loads(st.model_dump_json())
    raw.update(session="../../outside-deadbeef", owner_pid=dead_pid())
    (home / "clusters" / "evil.json").write_text(json.dumps(raw))
    entry = state.load_entry("evil")
    assert isinstance(entry, state.Corrupt) and entry.session is None and entry.slot == st.slot
    assert reap_abandoned() == []  # a corrupt file is not the reaper's to judge
    assert state.load_entry("evil") == entry


def test_a_reaper_late_for_an_old_session_spares_the_new_cluster_of_that_name(home, monkeypatch):
    from rlsim.host import slots

    # this home's registry alone: another job's cluster listening in a lower slot that ends
    # between the two picks hands the new cluster that slot instead (seen in a gate: 4, then 0)
    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    old = state.reserve(ClusterSpec(name="x"), "local", detached=False)
    old.owner_pid = dead_pid()
    state.save(old)
    [seen] = state.abandoned()  # what a reaper read before a new "x" started
    new = state.reserve(ClusterSpec(name="x"), "local", detached=False)
    new.root.mkdir(parents=True)
    reap(seen)
    assert state.load("x") == new
    assert new.root.is_dir()
    assert new.root != old.root and new.slot == old.slot


def test_a_corrupt_state_file_holds_its_slot_and_name(home):
    a = state.reserve(ClusterSpec(name="a"), "local", detached=False)
    path = home / "clusters" / "a.json"
    path.write_text(path.read_text()[:-5])  # torn
    b = state.reserve(ClusterSpec(name="b"), "local", detached=False)
    assert b.slot != a.slot
    with pytest.raises(RuntimeError, match="rlsim down a"):
        state.reserve(ClusterSpec(name="a"), "local", detached=False)
    path.write_text("not json at all")  # slot unknown: it may hold any
    with pytest.raises(RuntimeError, match=f"{path} does not parse"):
        state.reserve(ClusterSpec(name="c"), "local", detached=False)


def test_state_files_of_a_cluster_are_private_and_renamed_into_place(home):
    st = state.reserve(ClusterSpec(name="a"), "local", detached=False)
    state.save(st)
    assert (home / "clusters" / "a.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in (home / "clusters").iterdir()] == ["a.json"]


@pytest.mark.parametrize("top", ["/tmp/rlsim-0", "/tmp/rlsim-4194304"])
def test_the_longest_node_socket_path_fits_under_the_default_homes(top, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", top)
    st = ClusterState(spec=ClusterSpec(nodes=16), slot=0, session="a" * 32 + "-0123abcd",
                      owner_pid=1, backend="local")
    assert socket_path_problem(st.node_dir(15)) is None
    monkeypatch.setenv("RLSIM_HOME", "/tmp/" + "d" * 40)
    st = ClusterState(spec=ClusterSpec(nodes=16), slot=0, session="a-0123abcd", owner_pid=1,
                      backend="local")
    assert "set RLSIM_HOME to a shorter directory" in socket_path_problem(st.node_dir(15))


@pytest.mark.parametrize("raw,slot", [
    ('{"slot": ' + "9" * 5000 + ', "session": "a-0123abcd"', None),  # no int of 5,000 digits
    ('{"slot": 3, "spec": {"name": "a", "like": []}}', 3),  # a validator met a list: no TypeError
    ('{"slot": 4, ' + '"spec": [' * 50_000, 4),  # past any parser's depth
    ('{"slot": 2, "spec": {"name": "\x1b[2Ka\\n"}}', 2),
])
def test_a_damaged_state_file_is_corrupt_never_a_traceback(home, raw, slot):
    state.clusters_dir()
    path = home / "clusters" / "a.json"
    path.write_text(raw)
    path.chmod(0o600)
    [entry] = state.scan()
    assert isinstance(entry, state.Corrupt) and entry.slot == slot, entry
    assert entry.reason.isprintable() and "\x1b" not in entry.reason, entry.reason
    assert "rlsim down a" in entry.fix
