"""``rlsim down --all`` removes only what this rlsim home made: a chain or a container of another
home (another user, another CI job) on the same machine is left standing."""
import contextlib
import os
import subprocess
import sys
import uuid

import pytest

from rlsim.backends.docker_engine import HOME_LABEL, LABEL, engine_problem
from rlsim.host.home import home_id
from rlsim.host.iptables import Firewall, chain_name
from rlsim.plugin.session import require

pytestmark = [pytest.mark.integration, pytest.mark.root]
FOREIGN = "f0f0f0f0"  # a home id no path of this test hashes to


def _down_all(home) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLSIM_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "rlsim", "down", "--all"], env=env,
                          capture_output=True, text=True, timeout=120)


def _ipt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)


def _home_id(home, monkeypatch) -> str:
    """The id ``rlsim down`` gives the home ``home`` (what it names its chains and labels by)."""
    monkeypatch.setenv("RLSIM_HOME", str(home))
    mine = home_id()
    assert mine != FOREIGN
    return mine


def test_down_all_leaves_another_homes_chain(tmp_path, monkeypatch):
    require(Firewall.available())
    home = tmp_path / "home"
    chain, own = f"RLSIM-{FOREIGN}-1", chain_name(1, home=_home_id(home, monkeypatch))
    _ipt("-N", chain)
    _ipt("-N", own)
    try:
        # something to tell apart: a chain of another home, and one of this home's that
        # `down --all` must remove (with nothing of its own to remove, a sweep that removed
        # nothing at all would pass too)
        assert _ipt("-n", "-L", chain).returncode == 0, f"could not create {chain}"
        assert _ipt("-n", "-L", own).returncode == 0, f"could not create {own}"
        out = _down_all(home)
        assert out.returncode == 0, out.stderr
        assert _ipt("-n", "-L", own).returncode != 0, "down --all left this home's own chain"
        assert _ipt("-n", "-L", chain).returncode == 0, "another home's chain was removed"
    finally:
        for name in (chain, own):
            _ipt("-F", name)
            _ipt("-X", name)


@pytest.mark.docker
def test_down_all_leaves_another_homes_network_and_volume(tmp_path, monkeypatch):
    require(engine_problem())
    import docker

    client = docker.from_env()
    home = tmp_path / "home"
    tag = uuid.uuid4().hex[:8]
    name, own = f"rlsim-foreign-{tag}", f"rlsim-own-{tag}"
    foreign = {LABEL: "foreign-session", HOME_LABEL: FOREIGN}
    # this home's, of a session no state file knows (the home is empty): an orphan to remove
    mine = {LABEL: "orphaned-session", HOME_LABEL: _home_id(home, monkeypatch)}
    things = [client.networks.create(name, driver="bridge", internal=True, labels=foreign),
              client.volumes.create(name, labels=foreign),
              client.networks.create(own, driver="bridge", internal=True, labels=mine),
              client.volumes.create(own, labels=mine)]
    try:
        # something to tell apart: another home's network and volume, and this home's that
        # `down --all` must remove (a sweep that removed nothing at all would pass otherwise)
        for n in (name, own):
            assert [x.name for x in client.networks.list(names=[n])] == [n], n
            assert [x.name for x in client.volumes.list(filters={"name": n})] == [n], n
        out = _down_all(home)
        assert out.returncode == 0, out.stderr
        assert not client.networks.list(names=[own]), "down --all left this home's network"
        assert not client.volumes.list(filters={"name": own}), "down --all left this home's volume"
        assert client.networks.list(names=[name]), "another home's network was removed"
        assert client.volumes.list(filters={"name": name}), "another home's volume was removed"
    finally:
        for thing in things:
            with contextlib.suppress(docker.errors.NotFound):
                thing.remove()
