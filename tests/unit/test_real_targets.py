"""Which pids the real backend's node agent may signal, decided as data over process records.

The host below runs two Ray clusters (A: GCS port 6379, B: GCS port 6380), a user's shell, and
node A's agent both as a plain worker and as a worker started through a wrapper (a profiler,
an environment manager). Command lines follow what Ray 2.x puts on them.
"""

from __future__ import annotations

import os

import pytest

from rlsim.backends.real import (
    NotThisCluster,
    Proc,
    check_worker,
    descendants,
    find_raylet,
    node_kill_plan,
    snapshot,
)

NODE_A, NODE_B = "a" * 56, "b" * 56
RAYLET = "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet"
GCS = "/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server"


def gcs(pid: int, port: int, node_id: str) -> Proc:
    return Proc(pid, 1, "gcs_server", (GCS, "--log_dir=/tmp/ray/logs", f"--gcs_server_port={port}",
                                       "--node-ip-address=10.0.0.5", f"--node-id={node_id}"))


def raylet(pid: int, node_id: str) -> Proc:
    return Proc(pid, 1, "raylet", (RAYLET, "--node_manager_port=0", f"--node_id={node_id}",
                                   "--node_ip_address=10.0.0.5", "--head"))


HOST = {p.pid: p for p in [
    gcs(100, 6379, NODE_A), raylet(110, NODE_A),
    Proc(111, 110, "ray::Dashboard", ("ray::DashboardAgent",)),
    Proc(112, 110, "ray::NodeAgent", ("ray::NodeAgent.kill_node",)),       # agent A
    Proc(113, 110, "ray::ActorWork", ("ray::ActorWorker.train_step",)),   # a trainer role
    Proc(114, 113, "python3", ("python3", "-c", "compile kernels")),      # that role's child
    Proc(115, 110, "python", ("/venv/bin/python", "/venv/.../default_worker.py", "--x=1")),
    Proc(116, 110, "nsys", ("nsys", "profile", "python")),                # wrapper of agent A'
    Proc(117, 116, "ray::NodeAgent", ("ray::NodeAgent.kill_node",)),      # agent A' (wrapped)
    Proc(118, 110, "wrap.sh", ("/bin/sh", "/tmp/wrap.sh", "/venv/.../default_worker.py")),
    Proc(119, 118, "python", ("/venv/bin/python", "/venv/.../default_worker.py", "--x=1")),
    gcs(200, 6380, NODE_B), raylet(210, NODE_B),
    Proc(211, 210, "ray::RolloutWo", ("ray::RolloutWorker.generate",)),   # cluster B's worker
    Proc(300, 1, "bash", ("-bash",)), Proc(301, 300, "sleep", ("sleep", "600")),
    Proc(302, 300, "python", ("python", "driver.py")),                    # a driver, not agent
]}


def test_kill_node_takes_the_raylet_of_the_agents_node_and_what_is_below_it():
    assert node_kill_plan(HOST, 112, NODE_A, None) == [110, 111, *range(113, 120)]  # 112: the agent


def test_an_agent_behind_a_wrapper_still_finds_its_raylet_not_the_wrapper():
    # its parent is the wrapper: killing the parent and its children would leave the node up
    assert find_raylet(HOST, 117, NODE_A).pid == 110
    assert 110 in node_kill_plan(HOST, 117, NODE_A, None)


def test_kill_head_takes_this_clusters_gcs_by_port_and_leaves_the_other_clusters():
    pids = node_kill_plan(HOST, 112, NODE_A, (6379, frozenset({"10.0.0.5"})))
    assert 100 in pids and 200 not in pids and 210 not in pids and 211 not in pids


def test_a_gcs_on_the_right_port_of_another_address_is_not_this_clusters():
    with pytest.raises(NotThisCluster, match=r"no gcs_server on port 6379 of 10\.0\.0\.9"):
        node_kill_plan(HOST, 112, NODE_A, (6379, frozenset({"10.0.0.9"})))


def test_kill_head_without_its_gcs_on_the_host_signals_nothing():
    with pytest.raises(NotThisCluster, match="no gcs_server on port 7000 .* nothing was signalled"):
        node_kill_plan(HOST, 112, NODE_A, (7000, frozenset({"10.0.0.5"})))


def test_an_agent_whose_parents_hold_no_raylet_of_its_node_is_refused():
    # a driver under a user's shell: the old rule (kill the parent and all its children) took
    # the shell, its sleep and every sibling
    words = r"\(pid 302\) has no raylet .* above it \(pid 300 \(bash: -bash\)\)"
    with pytest.raises(NotThisCluster, match=words):
        node_kill_plan(HOST, 302, NODE_A, None)
    # the right kind of parent but another node's raylet
    with pytest.raises(NotThisCluster, match=f"no raylet of node {NODE_B}"):
        find_raylet(HOST, 112, NODE_B)


def test_a_raylet_is_known_by_its_node_id_not_its_name():
    impostor = {**HOST, 110: Proc(110, 1, "raylet", (RAYLET, "--node_id=" + NODE_B))}
    with pytest.raises(NotThisCluster):
        find_raylet(impostor, 112, NODE_A)


@pytest.mark.parametrize("pid", [113, 115, 117, 119])
def test_a_ray_worker_of_the_raylet_may_be_killed(pid: int):
    check_worker(HOST, pid, 110)


@pytest.mark.parametrize(("pid", "words"), [
    (301, r"pid 301 \(sleep: sleep 600\) is not a process of this node's raylet \(pid 110\)"),
    (211, r"pid 211 \(ray::RolloutWo: .*\) is not a process of this node's raylet"),
    (100, r"pid 100 \(gcs_server: .*\) is not a process of this node's raylet"),
    (110, r"pid 110 \(raylet: .*\) is not a process of this node's raylet"),
    (111, r"pid 111 \(ray::Dashboard: ray::DashboardAgent\) runs under .* not a Ray worker"),
    (114, r"pid 114 \(python3: python3 -c compile kernels\) runs under .* not a Ray worker"),
    (116, r"pid 116 \(nsys: nsys profile python\) runs under .* not a Ray worker"),
    (118, r"pid 118 \(wrap.sh: /bin/sh /tmp/wrap.sh .*\) runs under .* not a Ray worker"),
    (999, r"pid 999 is not running on this host"),
])
def test_a_pid_that_is_not_a_worker_of_the_raylet_is_refused_in_words(pid: int, words: str):
    with pytest.raises(NotThisCluster, match=words):
        check_worker(HOST, pid, 110)


def test_descendants_survive_a_cycle_in_a_torn_snapshot():
    torn = {1: Proc(1, 2, "a"), 2: Proc(2, 1, "b"), 3: Proc(3, 2, "c")}
    assert descendants(torn, 1) == [1, 2, 3]


def test_snapshot_reads_names_with_spaces_and_parentheses(tmp_path):
    entry = tmp_path / "42"
    entry.mkdir()
    (entry / "stat").write_text("42 (odd) name)) S 7 42 42 0 -1\n")
    (entry / "cmdline").write_bytes(b"ray::Odd.run\0\0\0")
    (tmp_path / "self").mkdir()
    assert snapshot(tmp_path) == {42: Proc(42, 7, "odd) name)", ("ray::Odd.run",))}


def test_snapshot_of_this_host_knows_this_process_and_its_parent():
    me = snapshot()[os.getpid()]
    assert me.ppid == os.getppid() and me.cmdline
