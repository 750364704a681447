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


def test_auth_token_is_private_and_stable(home):
    p = auth_token_path()
    assert p.stat().st_mode & 0o777 == 0o600
    assert auth_token_path().read_text() == p.read_text()
