"""One backend compliance suite, run against every backend: the same observable behaviour from a
local (loopback processes), a docker (container) cluster and, where one is given, a cluster spread
over a substrate's machines (RLSIM_TEST_SUBSTRATE). Each backend gets one 3-node cluster
for the module; every test heals what it did, so the order below is also a story."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from waits import alive, wait_until

from rlsim.backends import DEFAULT, chosen, cluster_class, names
from rlsim.host.spec import ClusterSpec
from rlsim.plugin.session import require

pytestmark = pytest.mark.integration
NODES, GPUS = 3, 2
# nodes shaped like a user's (what `rlsim cluster --memory-gb --accelerator --resources --label`
# give), the same on every backend; the last node smaller, of another type (--node 2:...)
SHAPE = {"memory_gb": 2.5, "accelerator": "A100", "resources": {"nvme": 1.0},
         "labels": {"pool": "rlsim-b"},
         "node": {2: {"like": "g6e.12xlarge", "gpus": 1, "labels": {"tier": "small"}}}}


# A substrate (a Ray cluster of machines the simulated nodes spread over,
# rlsim.backends.substrate) is asked for by its GCS address: test_machines.py runs this suite
# inside one of the namespace machines it made, with the address of the Ray cluster it started
# on them
SUBSTRATE = os.environ.get("RLSIM_TEST_SUBSTRATE")
# (backend named, substrate's address) as a user asks for a cluster: the registry chooses
CHOICES = [(name, None) for name in names(starts=True)] + [(DEFAULT, SUBSTRATE)] * bool(SUBSTRATE)


@pytest.fixture(scope="module", params=CHOICES, ids=lambda choice: chosen(*choice))
def cluster(request, tmp_path_factory):  # every backend that starts clusters
    name, on = chosen(*request.param), request.param[1]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    shared = tmp_path_factory.mktemp(f"shared-{name}")  # every node sees it
    spec = ClusterSpec(name=f"pt-comp-{name}-{worker}-{os.getpid()}", nodes=NODES,
                       gpus_per_node=GPUS, mounts=[str(shared)], **SHAPE)
    cls = cluster_class(name)
    if (refused := cls.refusal(spec, False)) is not None and refused.missing_part:
        require(str(refused))  # no engine here: fails under RLSIM_STRICT, as in CI
    backend = cls.make(spec, on=on)
    # started from a shell whose PATH lacks the virtualenv (`.venv/bin/rlsim cluster` without
    # activating it): the nodes' processes must still find its python (Ray Jobs below)
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join(p for p in path.split(os.pathsep) if p != VENV_BIN)
    try:
        backend.start()
    finally:
        os.environ["PATH"] = path
    with backend:
        yield backend
    assert backend.leaks() == [], backend.leaks()


VENV_BIN = str(Path(sys.executable).parent)


def driver(cluster, code: str, env: dict | None = None) -> str:
    """Run ``code`` as a driver of ``cluster`` (on the head for docker); its last line."""
    out = subprocess.run(cluster.driver_command([sys.executable, "-c", code], env),
                         env={**os.environ, **cluster.driver_env(), **(env or {})},
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_every_node_has_its_own_address_and_a_driver_sees_every_gpu_and_its_shape(cluster):
    nodes = cluster.nodes()
    assert [n.index for n in nodes if n.alive] == list(range(NODES))
    assert len({n.address for n in nodes}) == NODES
    code = ("import ray, json; ray.init(logging_level='ERROR'); print(json.dumps(["
            "ray.cluster_resources()['GPU'], ray.cluster_resources()['MOCK_GPU'], "
            "{n['NodeManagerAddress']: (n['Resources'], n['Labels']) for n in ray.nodes() "
            "if n['Alive']}]))")
    gpus, alias, seen = json.loads(driver(cluster, code))
    assert gpus == alias == cluster.spec.gpus() == 2 * GPUS + 1  # MOCK_GPU: for CPU-only code
    assert sorted(seen) == sorted(n.address for n in nodes)  # what Ray sees is what was made
    for info, shape in zip(nodes, cluster.spec.node_shapes(), strict=True):
        resources, labels = seen[info.address]  # each node is shaped as asked
        assert (resources["GPU"], resources["CPU"]) == (shape.gpus, shape.cpus)
        assert resources["memory"] == int(shape.memory_gb * 2**30) and resources["nvme"] == 1
        assert resources[f"accelerator_type:{shape.accelerator}"] == 1
        assert labels["ray.io/accelerator-type"] == shape.accelerator
        assert labels["pool"] == "rlsim-b" and labels.get("tier") == ("small" if shape.index == 2
                                                                       else None)
        assert info.shape() == shape.describe()  # what `rlsim status` shows
    assert nodes[2].shape() == "1x L40S 48G, 48 CPU, 269 GiB"  # like g6e.12xlarge, 1 GPU

    def ray_status_totals() -> bool:  # Ray's autoscaler state lags a node's join by seconds
        out = subprocess.run(cluster.driver_command([f"{VENV_BIN}/ray", "status"]),
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, **cluster.driver_env()})
        return re.search(r"/56\.0 CPU\b.*/5\.0 GPU\b", out.stdout, re.S) is not None

    wait_until(ray_status_totals, 60, "`ray status` totalling 4 + 4 + 48 CPUs and 5 GPUs")


GPU_ACTORS = """
import json, os, ray
ray.init(logging_level="ERROR")
@ray.remote(num_gpus=1)
class Holder:
    def seen(self):
        return (ray.util.get_node_ip_address(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                [str(i) for i in ray.get_gpu_ids()])
holders = [Holder.remote() for _ in range(%d)]
print(json.dumps(ray.get([h.seen.remote() for h in holders])))
"""


def test_actors_holding_fake_gpus_see_them_as_on_a_real_node(cluster):
    """Ray hands each actor its own GPU ids and sets CUDA_VISIBLE_DEVICES to them, as on a node
    with real GPUs: one actor per GPU of the cluster, each on a GPU of its own."""
    seen = json.loads(driver(cluster, GPU_ACTORS % cluster.spec.gpus()))
    for _, visible, ids in seen:
        assert visible is not None and visible.split(",") == ids and len(ids) == 1
    per_node = {(ip, ids[0]) for ip, _, ids in seen}
    assert len(per_node) == len(seen)  # no two actors share a GPU of one node
    assert sorted(sum(ip == n.address for ip, _, _ in seen) for n in cluster.nodes()) == [1, 2, 2]


def test_a_ray_job_with_plain_python_runs(cluster):
    """`ray job submit -- python ...` as on a cluster started from an activated environment:
    the entrypoint's python is the nodes' own, with Ray and the project importable; the
    submitter finds the Jobs API from RAY_ADDRESS, as Ray's CLI does."""
    entry = ["python", "-c", "import ray, sys, trainer; print('JOB-PYTHON', sys.executable)"]
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != VENV_BIN)
    cmd = cluster.driver_command([f"{VENV_BIN}/ray", "job", "submit", "--", *entry],
                                 {"PATH": path})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                         env={**os.environ, **cluster.driver_env(), "PATH": path})
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert f"JOB-PYTHON {VENV_BIN}/python" in out.stdout, out.stdout[-2000:]


def test_block_port_cuts_one_source_only_and_heals(cluster):
    gcs = cluster.port("gcs")[0]
    assert cluster.probe(1, 0, gcs)
    rules = cluster.block_port(0, "gcs", sources=[1])
    assert rules and not cluster.probe(1, 0, gcs)
    assert cluster.probe(2, 0, gcs)
    cluster.heal_network()
    cluster.heal_network()  # safe twice
    assert cluster.probe(1, 0, gcs)


def test_doctor_names_a_blocked_port_with_both_nodes_and_finds_shared_storage(cluster, tmp_path):
    from rlsim import doctor

    shared = Path(cluster.spec.mounts[0]) / f"doctor-{tmp_path.name}"  # every node sees it
    clean = doctor.examine(cluster, str(shared))
    assert clean.findings == [] and clean.seen == {i: [0, 1, 2] for i in range(NODES)}
    assert not any(shared.iterdir())  # the markers are gone again
    shared.rmdir()
    gcs = cluster.port("gcs")[0]
    cluster.block_port(0, "gcs", sources=[2])
    try:
        report = doctor.examine(cluster)
    finally:
        cluster.heal_network()
    [f] = report.findings
    assert (f.level, f.check) == ("error", "ports")
    assert f.message.startswith(f"node 2 ({cluster.nodes()[2].address}) cannot reach node 0 "
                                f"({cluster.nodes()[0].address}) port {gcs} (gcs)")


def test_partition_cuts_a_node_off_both_ways_and_heal_restores_it(cluster):
    require(cluster.firewall.available())  # local: iptables as root; docker: in the node
    gcs = cluster.port("gcs")[0]
    manager = cluster.state.layout.nodes[2].ports.node_manager
    assert cluster.probe(1, 2, manager)
    cluster.partition([[2]])
    assert not cluster.probe(1, 2, manager) and not cluster.probe(2, 0, gcs)
    assert cluster.probe(1, 0, gcs)
    wait_until(lambda: alive(cluster) == [0, 1], 30, "the GCS declaring the cut-off node dead")
    cluster.heal_network()
    assert cluster.probe(2, 0, gcs)
    cluster.restart_node(2)  # declared dead, its raylet is gone for good: bring it back
    assert alive(cluster) == [0, 1, 2]


def test_kill_marks_the_node_dead_and_restart_rejoins_on_the_same_address(cluster):
    before = cluster.nodes()[1]
    assert cluster.kill_node(1)
    wait_until(lambda: alive(cluster) == [0, 2], 20, "the GCS declaring node 1 dead")
    info = cluster.restart_node(1)
    assert info.alive and info.address == before.address and info.node_id != before.node_id


def test_pause_freezes_the_node_until_resumed(cluster):
    cluster.pause_node(1)
    wait_until(lambda: alive(cluster) == [0, 2], 30, "the GCS declaring the frozen node dead")
    cluster.resume_node(1)
    cluster.resume_node(1)  # safe twice
    cluster.restart_node(1)
    assert alive(cluster) == [0, 1, 2]


def test_a_cpu_quota_holds_until_lifted_and_shows_as_residue_meanwhile(cluster):
    cluster.throttle_cpu(1, 0.2)
    assert "node 1 has a CPU quota" in cluster.fault_residue()
    assert alive(cluster) == [0, 1, 2]  # slow, not dead
    cluster.throttle_cpu(1, None)
    cluster.throttle_cpu(1, None)  # safe twice
    assert not [r for r in cluster.fault_residue() if "CPU quota" in r]


def test_bad_node_index_and_head_restart_are_refused_in_words(cluster):
    with pytest.raises(IndexError, match=f"nodes 0..{NODES - 1}"):
        cluster.kill_node(7)
    with pytest.raises(NotImplementedError, match="GCS fault tolerance"):
        cluster.restart_node(0)
