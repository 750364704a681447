"""``rlsim down --all`` removes only what this rlsim home made: a chain or a container of another
home (another user, another CI job) on the same machine is left standing."""
import contextlib
import os
import subprocess
import sys
import uuid

import pytest

from rlsim.backends.docker_engine import HOME_LABEL, LABEL, engine_problem
from rlsim.host.iptables import Firewall
from rlsim.plugin.session import require

pytestmark = [pytest.mark.integration, pytest.mark.root]
FOREIGN = "f0f0f0f0"  # a home id no path of this test hashes to


def _down_all(home) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLSIM_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "rlsim", "down", "--all"], env=env,
                          capture_output=True, text=True, timeout=120)


def _ipt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)


def test_down_all_leaves_another_homes_chain(tmp_path):
    require(Firewall.available())
    chain = f"RLSIM-{FOREIGN}-1"
    _ipt("-N", chain)
    try:
        out = _down_all(tmp_path / "home")
        assert out.returncode == 0, out.stderr
        assert _ipt("-n", "-L", chain).returncode == 0, "another home's chain was removed"
    finally:
        _ipt("-F", chain)
        _ipt("-X", chain)


@pytest.mark.docker
def test_down_all_leaves_another_homes_network_and_volume(tmp_path):
    require(engine_problem())
    import docker

    client = docker.from_env()
    name = f"rlsim-foreign-{uuid.uuid4().hex[:8]}"
    foreign = {LABEL: "foreign-session", HOME_LABEL: FOREIGN}
    net = client.networks.create(name, driver="bridge", internal=True, labels=foreign)
    vol = client.volumes.create(name, labels=foreign)
    try:
        out = _down_all(tmp_path / "home")
        assert out.returncode == 0, out.stderr
        assert client.networks.list(names=[name]), "another home's network was removed"
        assert client.volumes.list(filters={"name": name}), "another home's volume was removed"
    finally:
        for thing in (net, vol):
            with contextlib.suppress(docker.errors.NotFound):
                thing.remove()
