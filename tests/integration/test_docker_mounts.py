"""What a docker node sees of rlsim's home: the token and its cluster's state read-only, its own
node dir read-write, and nothing else (no other cluster, no other node, nothing writable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlsim.host import state
from rlsim.host.home import auth_token_path, rlsim_home
from rlsim.host.spec import ClusterSpec
from rlsim.plugin.session import require

pytestmark = pytest.mark.integration

# Run inside a node: what it can read, write and list of the home. Prints one JSON object.
LOOK = r"""
import json, os, sys
home, token, own_state, node_dir, probe = sys.argv[1:6]

def write(path):
    try:
        with open(path, "a"):
            return "ok"
    except OSError as e:
        return e.strerror

out = {"token": open(token).read(), "writes": {}}
for path in (token, own_state, os.path.join(home, probe),
             os.path.join(home, "clusters", probe), os.path.join(home, "run", probe),
             os.path.join(node_dir, probe)):
    out["writes"][path] = write(path)
out["clusters"] = sorted(os.listdir(os.path.join(home, "clusters")))
out["run_dir"] = sorted(os.listdir(os.path.dirname(node_dir)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cluster():
    from rlsim.backends.docker import DockerCluster, engine_problem

    require(engine_problem())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    spec = ClusterSpec(name=f"pt-mounts-{worker}-{os.getpid()}", nodes=2, gpus_per_node=1,
                       dashboard=False)
    with DockerCluster(spec) as backend:
        yield backend
    assert backend.leaks() == [], backend.leaks()


def _look(cluster, index: int, probe: str) -> dict:
    home, st = rlsim_home(), cluster.state
    args = [str(home), str(auth_token_path()), str(state.state_path(st.spec.name)),
            str(st.node_dir(index)), probe]
    out = subprocess.run(cluster.node_command(index, [sys.executable, "-c", LOOK, *args]),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index", [0, 1])
def test_a_node_reads_the_token_writes_only_its_own_dir_and_sees_no_other_cluster(cluster,
                                                                                   index):
    home, st = rlsim_home(), cluster.state
    probe = f".mount-probe-{os.getpid()}-{index}"
    outside = [home / probe, home / "clusters" / probe, home / "run" / probe]
    try:
        seen = _look(cluster, index, probe)
    finally:  # what a node wrongly wrote into the home must not stay there
        for path in [*outside, st.node_dir(index) / probe]:
            path.unlink(missing_ok=True)
    token, own_state = auth_token_path(), state.state_path(st.spec.name)
    assert seen["token"] == token.read_text()
    refused = {str(p): seen["writes"][str(p)] for p in [token, own_state, *outside]}
    assert refused == {p: "Read-only file system" for p in refused}
    assert seen["writes"][str(st.node_dir(index) / probe)] == "ok"
    assert seen["clusters"] == [own_state.name]  # no other cluster's state
    assert seen["run_dir"] == [f"n{index}"]  # no other node's (or cluster's) dir


def test_the_cluster_runs_a_driver_on_the_head(cluster):
    assert [n.index for n in cluster.nodes() if n.alive] == [0, 1]
    code = "import ray; ray.init(logging_level='ERROR'); print(len(ray.nodes()))"
    out = subprocess.run(cluster.driver_command([sys.executable, "-c", code]),
                         env={**os.environ, **cluster.driver_env()}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "2"
