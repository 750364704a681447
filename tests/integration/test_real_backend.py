"""``--backend real`` against a cluster rlsim did not start for the scenario: the runner only gets
its address, places node agents and injects through them (here the cluster happens to be an rlsim
local one, started by the fixture; nothing of it is handed to the runner but the address)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsim.backends.local import LocalCluster
from rlsim.backends.real import (
    NodeAgent,
    NotThisCluster,
    RealCluster,
    Unsupported,
    descendants,
    snapshot,
)
from rlsim.checks import judge
from rlsim.host import procs
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

KILL_NODE = """
name: real_kill_node
cluster: {nodes: 3, gpus_per_node: 1}
trainer:
  config: grpo_tiny
  overrides: {save_freq: 5, total_steps: 10}
faults:
  - at: {step: 6}
    kill_node: {node: 1}
  - at: {step: 2}
    gpu_oom: {node: 2, gb: 10}
expect:
  - completes: {}
  - restarts: {min: 1}
  - resumed_from_step: {step: 5}
  - detected_within_s: {seconds: 10}
  - no_leaks: {}
"""


# slow tier (about 65 s of the test command on 2 cores: a cluster and a whole scenario); the
# node agent's kill paths run in the test command below (kill_role, kill_head, a wrapped agent)
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.rlsim_cluster(nodes=3, gpus_per_node=1)
def test_kill_node_through_the_node_agent(rlsim_cluster, tmp_path: Path):
    path = tmp_path / "real_kill_node.yaml"
    path.write_text(KILL_NODE)
    outcome = run_scenario(load(path), tmp_path / "out", backend="real",
                           ray_address=rlsim_cluster.address)
    verdicts = judge(outcome)
    # fake GPUs: gpu_oom's real allocation is refused, and a fault that did not land fails the
    # scenario (faults_landed), naming it; every other check holds
    failed = {v.check: v.message for v in verdicts if not v.ok}
    assert list(failed) == ["faults_landed"], failed
    assert "gpu_oom (faults[1]) could not be injected" in failed["faults_landed"]
    fired = {e["fault"]: e for e in outcome.timeline if e["type"].startswith("fault_")}
    # node 1 is the second node by address (127.x.y.11); the agent killed its raylet and workers
    assert fired["kill_node"]["type"] == "fault_injected"
    assert len(fired["kill_node"]["pids"]) >= 2
    assert rlsim_cluster.nodes()[1].alive is False
    # fake GPUs: the real allocation is refused in words, and the run goes on
    assert fired["gpu_oom"]["type"] == "fault_error"
    assert "no CUDA device is visible on" in fired["gpu_oom"]["message"]


def test_faults_that_need_the_host_are_refused_before_anything_starts(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text(KILL_NODE.replace("kill_node: {node: 1}", "partition: {groups: [[1]]}"))
    with pytest.raises(Unsupported, match="fault 'partition' needs to drop traffic between nodes "
                       ".* --backend real cannot do; it runs on --backend local"):
        run_scenario(load(path), tmp_path / "out", backend="real", ray_address="127.0.0.2:1")
    assert not (tmp_path / "out").exists()


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` has exited (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


def _gcs_pid(cluster: LocalCluster) -> int:
    pids = [p for p in procs.find(cluster.state.session)
            if Path(f"/proc/{p}/comm").read_text().strip() == "gcs_server"]
    assert len(pids) == 1, pids
    return pids[0]


@pytest.mark.integration
@pytest.mark.rlsim_cluster(nodes=2, gpus_per_node=0, dashboard=False)
def test_kill_role_signals_only_a_ray_worker_of_that_nodes_raylet(rlsim_cluster):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ip1 = rlsim_cluster.nodes()[1].address
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        with RealCluster(rlsim_cluster.address) as cluster:

            @ray.remote(num_cpus=0)
            class Role:
                def pid(self) -> int:
                    return os.getpid()

            def on(i: int):
                return Role.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                    cluster.nodes()[i].node_id, soft=False)).remote()

            role0, role1 = on(0), on(1)
            pid0, pid1 = ray.get([role0.pid.remote(), role1.pid.remote()], timeout=60)
            # a pid of this host that is no Ray worker: the old agent killed it as asked
            with pytest.raises(NotThisCluster, match=rf"pid {bystander.pid} \(sleep: sleep 600\) "
                                                     "is not a process of this node's raylet"):
                cluster.kill_process(ip1, bystander.pid)
            # a worker, but of the other node's raylet
            with pytest.raises(NotThisCluster, match=rf"pid {pid0} .* not a process of this node"):
                cluster.kill_process(ip1, pid0)
            assert bystander.poll() is None and not _gone(pid0, timeout=0)
            assert cluster.kill_process(ip1, pid1) == pid1
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(role1.pid.remote(), timeout=60)
            assert ray.get(role0.pid.remote(), timeout=60) == pid0
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.integration
@pytest.mark.rlsim_cluster(nodes=2, gpus_per_node=0, dashboard=False)
def test_kill_node_finds_the_raylet_when_the_agent_runs_under_a_wrapper(rlsim_cluster, tmp_path):
    """A worker started through a wrapper (a profiler, an environment manager) has the wrapper as
    its parent: the old agent killed the wrapper and itself, and the node stayed up."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"\nexit $?\n')  # python as a child
    wrapper.chmod(0o755)
    raylet1, raylet0 = rlsim_cluster.state.pids[1], rlsim_cluster.state.pids[0]
    with RealCluster(rlsim_cluster.address) as cluster:
        agent = ray.remote(num_cpus=0, max_restarts=0)(NodeAgent).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.nodes()[1].node_id,
                                                               soft=False),
            runtime_env={"py_executable": str(wrapper)},
        ).remote(False)
        where = ray.get(agent.where.remote(), timeout=120)
        assert Path(f"/proc/{where['parent']}/comm").read_text().strip() == "wrap.sh"
        node1 = set(descendants(snapshot(), raylet1))
        pids = ray.get(agent.kill_node.remote(False), timeout=60)
        assert raylet1 in pids and where["parent"] in pids
        assert set(pids) <= node1  # nothing of node 0, of this test or of the host besides
        assert _gone(raylet1)
        assert not _gone(raylet0, timeout=0)


KILL_HEAD = """
import json, os, sys
from rlsim.backends.real import RealCluster
from rlsim.host.spec import ClusterSpec
cluster = RealCluster(sys.argv[1], ClusterSpec(nodes=1)).start()
print(json.dumps(cluster.kill_node(0)), flush=True)
os._exit(0)  # the GCS is gone: nothing left to disconnect from
"""


@pytest.mark.integration
@pytest.mark.rlsim_cluster(nodes=1, gpus_per_node=0, dashboard=False)
def test_kill_head_leaves_another_clusters_gcs_on_the_host_alive(rlsim_cluster):
    other = ClusterSpec(name=f"{rlsim_cluster.spec.name}-other", nodes=1, gpus_per_node=0,
                        dashboard=False)
    with LocalCluster(other) as bystander:
        ours, theirs = _gcs_pid(rlsim_cluster), _gcs_pid(bystander)
        env = {**os.environ, **rlsim_cluster.driver_env()}
        out = subprocess.run([sys.executable, "-c", KILL_HEAD, rlsim_cluster.address], env=env,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        pids = json.loads(out.stdout.strip().splitlines()[-1])
        assert ours in pids and rlsim_cluster.state.pids[0] in pids
        assert theirs not in pids and bystander.state.pids[0] not in pids
        assert _gone(ours)
        assert not _gone(theirs, timeout=0)
        assert [n.alive for n in bystander.nodes()] == [True]
