import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from rlsim.host import state
from rlsim.host.home import auth_token_path
from rlsim.host.spec import ClusterSpec


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path))
    return tmp_path


def test_spec_rejects_bad_names_and_shapes():
    with pytest.raises(ValidationError, match="cluster name"):
        ClusterSpec(name="Bad Name")
    with pytest.raises(ValidationError):
        ClusterSpec(nodes=0)
    with pytest.raises(ValidationError):
        ClusterSpec(unknown=1)


def test_reserve_gives_distinct_slots_and_refuses_a_live_duplicate_name(home):
    a = state.reserve(ClusterSpec(name="a"), "local", detached=False)
    b = state.reserve(ClusterSpec(name="b"), "local", detached=False)
    assert a.slot != b.slot
    with pytest.raises(RuntimeError, match="rlsim down a"):
        state.reserve(ClusterSpec(name="a"), "local", detached=False)


def test_a_cluster_whose_owner_died_is_abandoned_and_its_slot_reused(home, monkeypatch):
    from rlsim.host import slots

    # this home's registry alone: another job's cluster starting meanwhile would listen in a
    # slot of this machine and move the second pick (seen in a gate)
    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    st = state.reserve(ClusterSpec(name="old"), "local", detached=False)
    st.owner_pid = int(dead.stdout)
    state.save(st)
    assert [s.spec.name for s in state.abandoned()] == ["old"]
    again = state.reserve(ClusterSpec(name="old"), "local", detached=False)
    assert again.slot == st.slot and again.owner_pid == os.getpid()


def test_a_cluster_whose_owners_pid_now_names_another_process_is_abandoned(home, monkeypatch):
    """After a reboot, or on a machine restored from a snapshot, a state's owner pid may belong
    to a later process: the owner's start time tells them apart. A state written before the
    start time was recorded goes by the pid alone, as before."""
    from rlsim.host import slots

    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    st = state.reserve(ClusterSpec(name="restored"), "local", detached=False)
    assert st.owner_started == slots.start_time(os.getpid()) is not None
    assert state.abandoned() == []
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st.owner_pid = other.pid  # the pid reused by a process that started later
        state.save(st)
        assert [s.spec.name for s in state.abandoned()] == ["restored"]
        raw = st.model_dump(mode="json")
        del raw["owner_started"]  # an older rlsim's state: the pid alone, alive
        assert state.owner_alive(state.ClusterState.model_validate(raw))
    finally:
        other.kill()
        other.wait()


def test_auth_token_is_private_and_stable(home):
    p = auth_token_path()
    assert p.stat().st_mode & 0o777 == 0o600
    assert auth_token_path().read_text() == p.read_text()


def test_a_substrate_clusters_state_is_listed_and_reaped_without_a_backend_to_attach(
        home, monkeypatch):
    """A cluster on a substrate (rlsim.backends.substrate) has no backend `rlsim status` or the
    reaper can attach to: status names its owner, and once the owner is gone the reaper removes
    its state as a local cluster's (its nodes ended on their machines with the owner's hosts)."""
    import json

    from typer.testing import CliRunner

    from rlsim.backends.reaper import reap_abandoned
    from rlsim.commands import app
    from rlsim.host import slots

    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    st = state.reserve(ClusterSpec(name="spread"), "substrate", detached=False)
    out = CliRunner().invoke(app, ["status", "--json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)
    assert row["backend"] == "substrate" and row["owner_pid"] == os.getpid()
    assert "held by its owner" in row["note"]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    st.owner_pid = int(dead.stdout)
    state.save(st)
    assert reap_abandoned() == ["spread"]
    assert state.load("spread") is None


def test_a_detached_cluster_on_a_substrate_is_never_abandoned_by_this_machine(home, monkeypatch):
    """Its processes run on the substrate's machines, which this one need not be: with its owner
    gone and none of its processes here, it is still not the reaper's (only `rlsim down` ends
    it); the same cluster not detached is."""
    from rlsim.host import slots

    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    st = state.reserve(ClusterSpec(name="spread"), "substrate", detached=True)
    st.owner_pid, st.on = int(dead.stdout), "10.0.0.1:6379"
    state.save(st)
    assert state.abandoned() == []
    st.detached = False
    state.save(st)
    assert [s.spec.name for s in state.abandoned()] == ["spread"]


def test_rlsim_down_keeps_a_detached_substrate_cluster_it_cannot_reach(home, monkeypatch):
    """Its substrate does not answer: its nodes may run on, so `rlsim down` says so and keeps
    the state (the way back to them) instead of forgetting the cluster; `rlsim status` names the
    address that did not answer."""
    import json

    from typer.testing import CliRunner

    from rlsim.commands import app
    from rlsim.host import slots

    monkeypatch.setattr(slots.listeners, "listening", lambda: [])
    st = state.reserve(ClusterSpec(name="away"), "substrate", detached=True)
    st.on, st.machines = "127.0.0.1:9", ["127.0.0.1"]  # the discard port: nothing answers
    state.save(st)
    out = CliRunner().invoke(app, ["down", "away"])
    assert out.exit_code == 1, out.output
    assert "--on 127.0.0.1:9: nothing answers there" in out.output
    assert "its state is kept" in out.output and state.load("away") is not None
    assert f"delete {state.state_path('away')} if its machines are gone" in " ".join(
        out.output.split()), out.output
    shown = CliRunner().invoke(app, ["status", "--json"])
    [row] = json.loads(shown.output)
    assert "nothing answers there" in row["note"], row
