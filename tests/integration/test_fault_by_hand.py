"""`rlsim fault` on a running cluster, local and docker: each action does what it prints, is
listed by `rlsim status` while in force, heals by hand or on its own (`--for`), and stopping the
cluster ends a pending self-heal too."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest
from typer.testing import CliRunner
from waits import alive, wait_until

from rlsim import commands as cli
from rlsim.backends.local import LocalCluster
from rlsim.host.spec import ClusterSpec
from rlsim.plugin.session import require

pytestmark = pytest.mark.integration


# docker in the slow tier (~35 s of the test command on 2 cores): the faults are the backend
# methods the docker scenarios and the compliance suite already run there
@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.slow)])
def cluster(request):
    from rlsim.host.iptables import Firewall

    require(Firewall.available())
    spec = ClusterSpec(name=f"pt-fault-{request.param}-{os.getpid()}", nodes=3, gpus_per_node=1,
                       dashboard=False, forward_logs=False)
    if request.param == "docker":
        from rlsim.backends.docker import DockerCluster, engine_problem

        require(engine_problem())
        backend = DockerCluster(spec)
    else:
        backend = LocalCluster(spec)
    with backend:
        yield backend
    assert backend.leaks() == [], backend.leaks()


def fault(c, *args: str) -> str:
    result = CliRunner().invoke(cli.app, ["fault", c.spec.name, *args])
    assert result.exit_code == 0, result.output
    return result.output


def in_force(c) -> list[dict]:
    result = CliRunner().invoke(cli.app, ["status", c.spec.name, "--json"])
    return json.loads(result.output)[0]["faults"]


def test_partition_heals_itself_after_for(cluster):
    gcs = cluster.port("gcs")[0]
    # 8 s: the two probes and the status below, each a process of its own, must see the cut
    # before it heals (with 2 s, a fresh-clone gate's load let it heal before the status)
    out = fault(cluster, "partition", "2", "--for", "8")
    assert "cut node(s) [2] off from [0, 1]" in out and "heals itself in 8 s" in out
    assert not cluster.probe(2, 0, gcs) and cluster.probe(1, 0, gcs)
    assert [f["action"] for f in in_force(cluster)] == ["partition"]
    wait_until(lambda: not in_force(cluster) and cluster.probe(2, 0, gcs), 30,
               "the partition healing itself")


def connect_ms(c, src: int, dst: int, port: int, times: int = 9) -> float:
    """The median time a process of node ``src`` takes to open a TCP connection to node
    ``dst`` (a SYN and its SYN-ACK: one round trip)."""
    import subprocess
    import sys

    address = c.nodes()[dst].address
    code = ("import socket,time;ts=[]\n"
            f"for _ in range({times}):\n"
            "    t=time.monotonic()\n"
            f"    socket.create_connection(({address!r}, {port}), timeout=10).close()\n"
            "    ts.append((time.monotonic()-t)*1000)\n"
            "print(sorted(ts)[len(ts)//2])")
    out = subprocess.run(c.node_command(src, [sys.executable, "-c", code]), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


def test_degrade_link_delays_its_packets_both_ways_until_healed(cluster):
    from rlsim.host import delayer, procs

    gcs = cluster.port("gcs")[0]
    out = fault(cluster, "degrade-link", "2", "--delay-ms", "40")
    assert "degraded the link of node(s) [2]: 40 ms" in out
    assert connect_ms(cluster, 2, 0, gcs) >= 75  # the SYN and the SYN-ACK wait 40 ms each
    assert connect_ms(cluster, 1, 0, gcs) < 30  # a link node 2 is not on
    assert [f["action"] for f in in_force(cluster)] == ["degrade-link"]
    assert "healed 1 fault(s)" in fault(cluster, "heal")
    assert connect_ms(cluster, 2, 0, gcs) < 30 and in_force(cluster) == []
    assert not [p for p in procs.find(cluster.state.session) if delayer.is_delayer(p)]


def test_preempt_node_is_rays_drain_then_the_kill_at_the_deadline(cluster):
    from ray.core.generated.common_pb2 import NodeDeathInfo

    from rlsim.backends.ray_state import node_table
    from rlsim.host.home import auth_token_path

    if not cluster.nodes()[2].alive:
        # the partition test's 2 s cut outlasts the tuned health checks (3 misses of 300 ms,
        # each waiting 1 s) when the machine is busy, and Ray declares the node dead for good
        fault(cluster, "restart-node", "2")
    node_id = cluster.nodes()[2].node_id
    out = fault(cluster, "preempt-node", "2", "--notice-s", "3")
    assert "drained node 2 for preemption" in out and "restart-node 2" in out
    # Ray's own record of the drain: the node's end announced as a preemption. Idle (no trainer
    # here), its raylet exits at once, as Ray ends a drained node with nothing left to run; a
    # busy one lives until the kill at the deadline (scenarios/preempted_node.yaml).
    [row] = [n for n in node_table(cluster.address, str(auth_token_path()))
             if n["NodeID"] == node_id]
    assert row["DeathReason"] == NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED, row
    wait_until(lambda: alive(cluster) == [0, 1], 30, "node 2 gone")
    assert in_force(cluster)[0]["action"] == "preempt-node"
    fault(cluster, "restart-node", "2")
    assert alive(cluster) == [0, 1, 2] and in_force(cluster) == []


def test_gpu_lost_brings_the_node_back_with_one_gpu_fewer_for_good(cluster):
    out = fault(cluster, "gpu-lost", "2", "0")
    assert "lost GPU 0 of node 2 (no process held it)" in out
    assert [n.gpus for n in cluster.nodes()] == [1, 1, 0]
    from rlsim.host import state

    assert state.load(cluster.spec.name).gpus_left == {2: 0}
    fault(cluster, "restart-node", "2")  # a restart does not bring the device back
    assert [n.gpus for n in cluster.nodes()] == [1, 1, 0]
    refused = CliRunner().invoke(cli.app, ["fault", cluster.spec.name, "gpu-lost", "2", "0"])
    assert refused.exit_code != 0 and "no GPU left" in refused.output


def test_block_port_from_one_node_and_heal(cluster):
    gcs = cluster.port("gcs")[0]
    out = fault(cluster, "block-port", "0", "gcs", "--from", "2")
    assert "from node(s) [2]" in out and "undo: rlsim fault" in out
    assert not cluster.probe(2, 0, gcs) and cluster.probe(1, 0, gcs)
    assert in_force(cluster)[0]["params"]["port"] == "gcs"
    assert "healed 1 fault(s)" in fault(cluster, "heal")
    assert cluster.probe(2, 0, gcs) and in_force(cluster) == []


def test_kill_and_restart_a_node(cluster):
    refused = CliRunner().invoke(cli.app, ["fault", cluster.spec.name, "kill-node", "0"])
    assert refused.exit_code == 2 and "node 0 is the head" in refused.output
    fault(cluster, "kill-node", "2")
    wait_until(lambda: alive(cluster) == [0, 1], 20, "node 2 declared dead")
    assert in_force(cluster)[0]["action"] == "kill-node"
    assert "node 2 is back" in fault(cluster, "restart-node", "2")
    assert alive(cluster) == [0, 1, 2] and in_force(cluster) == []


def test_bad_fault_arguments_are_refused_in_words_and_change_nothing(cluster):
    name = cluster.spec.name
    for args, said in ((["block-port", "1", "\u00b2"], "unknown port name"),
                       (["block-port", "1", "0"], "a TCP port is 1-65535"),
                       (["block-port", "1", "99999"], "a TCP port is 1-65535"),
                       (["pause-node", "1", "--for", "inf"], "--for inf: give seconds"),
                       (["pause-node", "1,2"], "one node at a time"),
                       (["pause-node", "1", "--from", "0"], "--from names the sources")):
        result = CliRunner().invoke(cli.app, ["fault", name, *args])
        assert result.exit_code == 2 and said in result.output, (args, result.output)
    assert in_force(cluster) == [] and alive(cluster) == [0, 1, 2]
    fault(cluster, "pause-node", "2")
    again = CliRunner().invoke(cli.app, ["fault", name, "kill-node", "2"])
    assert again.exit_code == 2 and "node 2 is already down (pause-node)" in again.output
    assert [f["action"] for f in in_force(cluster)] == ["pause-node"]
    fault(cluster, "kill-node", "1")
    # a ledger that does not parse: status says so, every other action refuses, heal still heals
    # and names the killed node its lost entry would have restarted
    (cluster.state.root / "faults.json").write_text('[{"act')
    seen = json.loads(CliRunner().invoke(cli.app, ["status", name, "--json"]).output)[0]
    assert "the fault ledger does not parse" in seen["faults_error"]
    refused = CliRunner().invoke(cli.app, ["fault", name, "partition", "1"])
    assert refused.exit_code == 2 and f"rlsim fault {name} heal" in refused.output
    said = " ".join(fault(cluster, "heal").split())
    assert f"node 1 is down: rlsim fault {name} restart-node 1" in said, said
    assert in_force(cluster) == []
    fault(cluster, "restart-node", "1")
    wait_until(lambda: alive(cluster) == [0, 1, 2], 20, "node 2 thawed, node 1 back")


def test_status_answers_at_once_while_the_head_is_paused(cluster):
    """A paused head has no GCS to ask (Ray's client would retry ~15 s, then raise): status lists
    the pause and sees no node alive."""
    fault(cluster, "pause-node", "0")
    try:
        result = CliRunner().invoke(cli.app, ["status", cluster.spec.name, "--json"])
        assert result.exit_code == 0, result.output
        [seen] = json.loads(result.output)
        assert [f["action"] for f in seen["faults"]] == ["pause-node"]
        assert not any(n["alive"] for n in seen["nodes"])
    finally:
        fault(cluster, "resume-node", "0")
    wait_until(lambda: alive(cluster) == [0, 1, 2], 20, "every node seen again")


def test_stopping_the_cluster_ends_a_pending_self_heal(cluster):
    fault(cluster, "pause-node", "1", "--for", "120")
    helpers = [p for p in psutil.process_iter(["cmdline"])
               if "rlsim.faults.ledger" in " ".join(p.info["cmdline"] or [])
               and cluster.spec.name in p.info["cmdline"]]
    assert len(helpers) == 1
    fault(cluster, "resume-node", "1")
    assert in_force(cluster) == []
    cluster.stop()  # what `rlsim down` does: the helper carries the cluster's session label
    deadline = time.monotonic() + 10
    while helpers[0].is_running() and helpers[0].status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the self-heal helper outlived its cluster"
        time.sleep(0.1)
