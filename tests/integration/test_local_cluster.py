"""Real local clusters: bring-up, kill/restart, pause, network faults, teardown, two at once.

Each test starts real Ray nodes (seconds each); kept to 2-3 nodes so the suite stays fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from waits import alive, wait_until

from rlsim.backends.local import LocalCluster
from rlsim.host import cgroups, iptables, procs, state
from rlsim.host.iptables import Firewall
from rlsim.host.spec import ClusterSpec
from rlsim.plugin.session import require

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared():
    """One 2-node cluster for the tests that leave it as they found it (each heals what it did):
    a bring-up is ~6 s of a 2-core machine. A node's shape, its actors' GPU ids and Ray Jobs are
    checked on every backend in test_backend_compliance."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    with LocalCluster(ClusterSpec(name=f"pt-shared-{worker}-{os.getpid()}", nodes=2,
                                  gpus_per_node=8)) as cluster:
        yield cluster


def leftovers(st: state.ClusterState) -> dict:
    return {
        "procs": procs.find(st.session),
        "cgroups": st.session in cgroups.sessions(),
        "chain": iptables.chain_name(st.slot) in iptables.rlsim_chains(),
        "state": state.load(st.spec.name) is not None,
        "dir": st.root.exists(),
    }


def _without_token(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "RAY_ADDRESS": address}


def test_a_trainer_without_the_token_is_refused_in_one_line(shared, tmp_path):
    """The most common first mistake: a driver started without the token settings. The cluster
    refuses it; the trainer asks the GCS once before Ray's own connect (which retries ~20 s,
    printing a warning a second), says in one line what is wrong and what to export, exits 2."""
    out = subprocess.run([sys.executable, "-m", "trainer", "--config",
                          "grpo_tiny", f"run_dir={tmp_path}/run"],
                         env=_without_token(shared.address), capture_output=True, text=True,
                         timeout=120)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"trainer: ClusterUnreachable: cannot join the Ray cluster at "
                               f"{shared.address}: InvalidAuthToken") \
        and "export RAY_AUTH_MODE=token" in lines[0]
    assert not (tmp_path / "run" / "ray_connect.log").exists()  # refused before Ray's connect
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert '"kind": "cluster_unreachable"' in events


def test_a_wrong_token_is_refused_in_one_line_by_trainer_doctor_and_launcher(shared, tmp_path):
    """A token file that is not the cluster's (another cluster's, a stale one): the trainer,
    ``rlsim doctor`` and the launchers' wait each say so in one line and exit 2. Without any
    token settings the doctor and the wait say what to export."""
    wrong = tmp_path / "token"
    wrong.write_text("0" * 64)
    with_wrong = {**_without_token(shared.address), "RAY_AUTH_MODE": "token",
                  "RAY_AUTH_TOKEN_PATH": str(wrong)}
    out = subprocess.run([sys.executable, "-m", "trainer", "--config",
                          "grpo_tiny", f"run_dir={tmp_path}/run"],
                         env=with_wrong, capture_output=True, text=True, timeout=120)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, lines
    assert "InvalidAuthToken" in lines[0] and "check RAY_AUTH_TOKEN_PATH" in lines[0]
    rlsim = str(Path(sys.executable).parent / "rlsim")
    for env, fix in ((with_wrong, "RAY_AUTH_TOKEN_PATH names the cluster's own token file"),
                     (_without_token(shared.address), "needs RAY_AUTH_MODE=token")):
        for cmd, who in (([rlsim, "doctor", "--ray-address", shared.address], "rlsim doctor"),
                         ([sys.executable, "-m", "rlsim.launch.wait", "--address",
                           shared.address, "--nodes", "2", "--timeout", "30"], "rlsim wait")):
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            said = (out.stdout + out.stderr).strip()
            assert out.returncode == 2, said
            assert said.startswith(f"{who}: the Ray cluster at {shared.address} refuses this "
                                   "process (InvalidAuthToken") and fix in said, said


@pytest.mark.root
def test_teardown_leaves_no_process_rule_cgroup_or_state():
    require(Firewall.available())
    cluster = LocalCluster(ClusterSpec(name=f"leak-{os.getpid()}", nodes=2, gpus_per_node=1))
    with cluster:
        st = cluster.state
        cluster.partition([[1]])
        cluster.pause_node(1)
        assert leftovers(st)["procs"] and leftovers(st)["chain"]
    assert leftovers(st) == {
        "procs": [], "cgroups": False, "chain": False, "state": False, "dir": False
    }
    cluster.stop()  # safe twice


def test_a_cluster_is_torn_down_in_the_home_it_was_started_in(tmp_path):
    """RLSIM_HOME changed while the cluster runs (a test's monkeypatch still in force when
    pytest stops the clusters its scenarios kept) does not move its teardown: its state file,
    run directory and cgroups go from its own home, and nothing is made in the other."""
    cluster = LocalCluster(ClusterSpec(name=f"homed-{os.getpid()}", nodes=1, gpus_per_node=1))
    other = tmp_path / "other-home"
    with cluster:
        st = cluster.state
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RLSIM_HOME", str(other))
            cluster.stop()
            assert cluster.leaks() == []
    assert leftovers(st) == {
        "procs": [], "cgroups": False, "chain": False, "state": False, "dir": False
    }
    assert not other.exists()


def test_two_clusters_at_once_do_not_collide():
    specs = [ClusterSpec(name=f"twin{i}-{os.getpid()}", nodes=2, gpus_per_node=2) for i in (0, 1)]
    clusters = [LocalCluster(s) for s in specs]
    errors: list[BaseException] = []

    def start(c: LocalCluster) -> None:
        try:
            c.start()
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=start, args=(c,)) for c in clusters]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        a, b = (c.state for c in clusters)
        assert a.slot != b.slot
        assert not {n.address for n in a.layout.nodes} & {n.address for n in b.layout.nodes}
        assert a.layout.port_range != b.layout.port_range
        assert all(alive(c) == [0, 1] for c in clusters)
        # Ray's "auto" address (a Ray Job's driver gets it) resolves, on every node, to the
        # node's own cluster, never to the other gcs_server running on the machine
        from ray._private.services import get_ray_address_from_environment

        for st in (a, b):
            for i in range(2):
                assert get_ray_address_from_environment("auto", str(st.node_dir(i))) == \
                    st.layout.gcs_address
        clusters[0].kill_node(1)  # a fault in one leaves the other untouched
        wait_until(lambda: alive(clusters[0]) == [0], 15, "node death in cluster 0")
        assert alive(clusters[1]) == [0, 1]
    finally:
        for c in clusters:
            c.stop()


def test_cli_detach_status_down():
    name = f"cli-{os.getpid()}"
    rlsim = [sys.executable, "-m", "rlsim"]
    up = subprocess.run(
        [*rlsim, "cluster", "--nodes", "2", "--fake-gpus", "2", "--name", name, "--detach"],
        capture_output=True, text=True, timeout=120,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "RAY_ADDRESS=127.77." in up.stdout
        out = subprocess.run([*rlsim, "status", name, "--json"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        (info,) = json.loads(out.stdout)
        assert [(n["index"], n["alive"], n["gpus"]) for n in info["nodes"]] == [
            (0, True, 2), (1, True, 2)
        ]
        assert len({n["address"] for n in info["nodes"]}) == 2
        session = state.load(name).session
    finally:
        down = subprocess.run([*rlsim, "down", name], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert procs.find(session) == [] and state.load(name) is None


def test_bad_cluster_name_and_unknown_node_give_clear_errors(shared):
    with pytest.raises(IndexError, match="nodes 0..1"):
        shared.kill_node(5)
    with pytest.raises(NotImplementedError, match="GCS fault tolerance"):
        shared.restart_node(0)
    with pytest.raises(KeyError, match="known: "):
        shared.port("nope")


def test_status_of_a_cluster_whose_head_died_answers_at_once(rlsim_cluster):
    rlsim_cluster.kill_node(0)
    t = time.monotonic()
    assert [n.alive for n in rlsim_cluster.nodes()] == [False, False]
    assert time.monotonic() - t < 5


def test_the_cluster_answers_only_over_loopback(shared, tmp_path):
    """Ray binds its daemons to every interface: each listening port of the cluster lies in its
    slot's block, which the loopback guard refuses on every other interface. Checked from a
    network namespace this test makes, joined to the host by a veth pair of its own: a port
    outside the block answers there, the GCS port refuses at once."""
    require(Firewall.available())
    st = shared.state
    lo, hi = st.layout.port_block
    listening = {(c.laddr.ip, c.laddr.port)
                 for pid in procs.find(st.session)
                 for c in _listening(pid)}
    assert listening, "the cluster's processes listen on nothing?"
    outside = {a for a in listening if not (lo <= a[1] <= hi or a[0].startswith("127."))}
    assert not outside, f"listening outside the guarded block {lo}-{hi}: {sorted(outside)}"
    rules = subprocess.run(["iptables", "-w", "5", "-S", iptables.guard_chain(st.slot)],
                           capture_output=True, text=True).stdout
    assert f"! -i lo -p tcp -m tcp --dport {lo}:{hi}" in rules, rules
    with _namespace_peer() as (run_in_ns, host_ip):
        with socket.create_server(("0.0.0.0", 0)) as control:  # outside every slot's block
            assert _connect(run_in_ns, host_ip, control.getsockname()[1]) == "connected"
        assert _connect(run_in_ns, host_ip, st.layout.gcs_port) == "ConnectionRefusedError"


def _listening(pid: int) -> list:
    import psutil

    try:
        return [c for c in psutil.Process(pid).net_connections("tcp")
                if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []


@contextlib.contextmanager
def _namespace_peer():
    """A network namespace joined to the host by a veth pair (10.213.<pid % 250>.1 here, .2
    there), all made and removed by this test: traffic never leaves the machine."""
    tag = os.getpid() % 10000
    ns, host_if, ns_if = f"rlsimt{tag}", f"rlh{tag}", f"rln{tag}"
    net = f"10.213.{tag % 250}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    try:
        ip("netns", "add", ns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{net}.1/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", ns_if)
        ip("-n", ns, "link", "set", ns_if, "up")
        yield (lambda argv: subprocess.run(["ip", "netns", "exec", ns, *argv], text=True,
                                           capture_output=True, timeout=30)), f"{net}.1"
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _connect(run_in_ns, host: str, port: int) -> str:
    code = (f"import socket\ntry:\n socket.create_connection(({host!r}, {port}), timeout=5)"
            ".close()\n print('connected')\nexcept OSError as e:\n print(type(e).__name__)")
    return run_in_ns([sys.executable, "-c", code]).stdout.strip()


WHO_AM_I = """
import json, os, ray
ray.init()
@ray.remote(num_cpus=0, resources={"rlsim_node_1": 0.01})
class Who:
    def me(self):
        return {"pid": os.getpid(), "parent": os.getppid(), "node": os.environ.get("RLSIM_NODE"),
                "job": os.environ.get("RAY_JOB_ID")}
who = Who.options(name="who", lifetime="detached").remote()  # outlives this driver
print(json.dumps(ray.get(who.me.remote(), timeout=120)))
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: an orphan waits for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _who_am_i(cluster: LocalCluster) -> dict:
    out = subprocess.run([sys.executable, "-c", WHO_AM_I], capture_output=True, text=True,
                         env={**os.environ, **cluster.driver_env(),
                              "RAY_ADDRESS": cluster.address}, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_workers_fork_from_the_homes_zygote_into_their_nodes_cgroup(monkeypatch):
    """With preloaded modules and node cgroups, a worker is forked from the zygote the home's
    clusters share (rlsim.backends.zygote), carries the environment its raylet gave it, lives in
    its node's cgroup (a node kill ends it) and is found by it, as the reaper finds it. The
    zygote serves a second cluster, outlives the first to end and ends with the home's last
    cluster: nothing of it, or of its workers, is left. A home of its own: in a shared one,
    another job's cluster would keep the zygote."""
    require(cgroups.available())
    home = Path(tempfile.mkdtemp(prefix="rz-", dir="/tmp"))
    monkeypatch.setenv("RLSIM_HOME", str(home))
    first, second = (LocalCluster(ClusterSpec(name=f"zyg{n}-{os.getpid()}", nodes=2,
                                              gpus_per_node=1, preload_modules=["json"]))
                     for n in (1, 2))
    try:
        with first:
            with second:
                st = second.state
                pidfiles = list((home / "run").glob("z-*.pid"))
                assert len(pidfiles) == 1, pidfiles  # one zygote for both clusters
                zygote = int(pidfiles[0].read_text())
                me = _who_am_i(second)
                assert me["parent"] == zygote
                assert me["node"] == "1" and me["job"]  # the raylet's environment, not the zygote's
                assert me["pid"] in cgroups.NodeGroup(st.session, 1).pids()
                assert me["pid"] in procs.find(st.session, 1)  # by its node's cgroup
                assert me["pid"] not in procs.find(first.state.session)
                second.kill_node(1)
                wait_until(lambda: me["pid"] not in procs.find(st.session), 15,
                           "the forked worker's end")
            assert leftovers(st) == {
                "procs": [], "cgroups": False, "chain": False, "state": False, "dir": False
            }
            assert _running(zygote)  # the first cluster still uses it
            assert _who_am_i(first)["parent"] == zygote
            st = first.state
        assert leftovers(st) == {
            "procs": [], "cgroups": False, "chain": False, "state": False, "dir": False
        }
        assert not _running(zygote) and not list((home / "run").glob("z-*"))
    finally:
        first.stop()
        second.stop()
        shutil.rmtree(home, ignore_errors=True)


ENV_VAR_TASK = """
import os, ray
ray.init()
@ray.remote(num_cpus=0, resources={"rlsim_node_1": 0.01}, runtime_env={"env_vars": {"X": "set"}})
def x():
    print("printed on node 1")  # reaches the driver through node 1's log monitor
    return os.environ.get("X")
print("X=" + ray.get(x.remote(), timeout=120), flush=True)
import time; time.sleep(1.5)  # the log monitor's next read of the worker's file
"""


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _agents(st: state.ClusterState, index: int) -> dict[int, int]:
    """Node ``index``'s agents (pid -> parent pid), found by its cgroup: by the titles Ray gives
    them, or, where this Ray gives a forked agent none (2.48: it keeps its zygote's command
    line), as the processes forked from the agent zygote that listen on a port (its log
    monitor listens on none)."""
    import psutil

    found = {}
    for pid in cgroups.NodeGroup(st.session, index).pids():
        with contextlib.suppress(OSError, psutil.Error):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            titled = cmd.startswith((b"ray::DashboardAgent", b"ray::RuntimeEnvAgent"))
            untitled = b"--agents" in cmd.split(b"\0") and any(
                c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections())
            if titled or untitled:
                found[pid] = _parent(pid)
    return found


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _forked(st: state.ClusterState, index: int) -> list[int]:
    """Node ``index``'s processes forked from the agent zygote (its agents, its log monitor)."""
    found = []
    for pid in cgroups.NodeGroup(st.session, index).pids():
        with contextlib.suppress(OSError):
            if b"--agents" in Path(f"/proc/{_parent(pid)}/cmdline").read_bytes().split(b"\0"):
                found.append(pid)
    return found


def test_agents_fork_from_the_agent_zygote_and_live_and_die_with_their_node(tmp_path):
    """With node cgroups, each node's two agents and its log monitor (and the head's dashboard)
    are forked from the cluster's agent zygote, in the node's cgroup: a runtime environment is
    still set up on that node (the runtime env agent serves it), what a task prints there reaches
    the driver (the log monitor forwards it), a node kill ends them, a restarted node gets new
    ones, and nothing
    outlives the cluster."""
    require(cgroups.available())
    cluster = LocalCluster(ClusterSpec(name=f"agz-{os.getpid()}", nodes=2, gpus_per_node=1))
    with cluster:
        st = cluster.state
        # what start() saw ready (the launcher's view of the GCS) is what the GCS says
        assert [(n.index, n.node_id, n.gpus, n.alive) for n in cluster.ready_nodes] == \
            [(n.index, n.node_id, n.gpus, n.alive) for n in cluster.nodes()]
        assert all(n.alive and n.node_id for n in cluster.ready_nodes)
        agents = _agents(st, 1)
        assert len(agents) == 2, agents
        for parent in set(agents.values()):
            cmd = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
            assert b"rlsim.backends.zygote" in cmd and b"--agents" in cmd, cmd
        forked = _forked(st, 1)
        assert len(forked) == 3 and set(agents) < set(forked), forked  # and the log monitor
        assert cluster.rewrites.get("log_monitor") == 2, cluster.rewrites
        # the head's dashboard too (forked_dashboard), in the head's cgroup: its two agents,
        # its log monitor, its autoscaler monitor and the dashboard, whose module processes it
        # starts itself
        assert cluster.rewrites.get("dashboard") == 1, cluster.rewrites
        assert cluster.rewrites.get("monitor") == 1, cluster.rewrites
        assert "forked_dashboard" in cluster.ray_report()["in_force"]
        zygote_pid = set(agents.values())
        head = [pid for pid in cgroups.NodeGroup(st.session, 0).pids()
                if _parent(pid) in zygote_pid]
        assert len(head) == 5, head
        # the dashboard's: its module processes, from a forkserver forked from the dashboard
        # (dashboard_forkserver: 2.59 on), else through Ray's own (exec'd) or spawned (2.48)
        on_head = cgroups.NodeGroup(st.session, 0).pids()
        children = [pid for pid in on_head if _parent(pid) in head]
        if "dashboard_forkserver" in cluster.ray_report()["in_force"]:
            assert cluster.rewrites.get("forkserver") == 1, cluster.rewrites
            servers = [pid for pid in children if b"--agents" in _cmdline(pid)]
            assert len(servers) == 1, children
            modules = [pid for pid in on_head if _parent(pid) == servers[0]]
            assert len(modules) >= 5, modules
        else:
            assert any(b"from multiprocessing." in _cmdline(pid) for pid in children), children
        out = subprocess.run([sys.executable, "-c", ENV_VAR_TASK], capture_output=True, text=True,
                             env={**os.environ, **cluster.driver_env(),
                                  "RAY_ADDRESS": cluster.address}, timeout=180)
        # the log monitor's line may land in the middle of the driver's own on its stdout
        assert out.returncode == 0 and "X=set" in out.stdout, out.stdout + out.stderr
        assert "printed on node 1" in out.stdout + out.stderr, out.stdout + out.stderr
        cluster.kill_node(1)
        wait_until(lambda: not set(agents) & set(procs.find(st.session)), 15, "the agents' end")
        cluster.restart_node(1)
        again = _agents(st, 1)
        assert len(again) == 2 and not set(again) & set(agents), again
    assert leftovers(st) == {
        "procs": [], "cgroups": False, "chain": False, "state": False, "dir": False
    }


def test_a_cluster_on_rays_plain_path_without_token_auth(tmp_path):
    """Every acceleration off and no token auth (RLSIM_RAY_PLAIN=all,token_auth: what a Ray
    without them gets): `rlsim cluster` claims no token and says the cluster is open, root is
    refused it until it opts in, a driver with the address alone runs a task, the doctor reads
    the auth mode from the GCS itself and names every plain path, and nothing was rewritten."""
    rlsim = str(Path(sys.executable).parent / "rlsim")
    name = f"pt-plain-{os.getpid()}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")},
           "RLSIM_RAY_PLAIN": "all,token_auth"}
    start = [rlsim, "cluster", "--nodes", "2", "--fake-gpus", "2", "--detach", "--name", name]
    if os.geteuid() == 0:
        refused = subprocess.run(start, env={k: v for k, v in env.items()
                                             if k != "RLSIM_ALLOW_UNAUTHENTICATED"},
                                 capture_output=True, text=True, timeout=120)
        said = " ".join((refused.stdout + refused.stderr).split())
        assert refused.returncode == 1 and "refusing to start a cluster as root" in said, said
        assert "RLSIM_ALLOW_UNAUTHENTICATED=1" in said and state.load(name) is None
        env["RLSIM_ALLOW_UNAUTHENTICATED"] = "1"
    up = subprocess.run(start, env=env, capture_output=True, text=True, timeout=300)
    try:
        said = up.stdout + up.stderr
        assert up.returncode == 0, said
        assert "RAY_AUTH_MODE" not in said and "RAY_AUTH_TOKEN_PATH" not in said
        assert "# this cluster is unauthenticated" in " ".join(said.split())
        address = state.load(name).layout.gcs_address
        task = subprocess.run(
            [sys.executable, "-c", "import ray; ray.init(); print(ray.get(ray.remote("
             "lambda: 6 * 7).remote()), ray.cluster_resources()['GPU'])"],
            env={**env, "RAY_ADDRESS": address}, capture_output=True, text=True, timeout=120)
        assert task.stdout.split()[-2:] == ["42", "4.0"], task.stdout + task.stderr
        doctor = subprocess.run([rlsim, "doctor", name, "--json"], env=env, capture_output=True,
                                text=True, timeout=120)
        ray = json.loads(doctor.stdout)["ray"]
        assert ray["auth"] == "none", ray
        assert {"token_auth", "worker_setup", "forked_agents", "lean_agent", "warm_workers",
                "registration_poll", "no_api_server"} <= set(ray["plain"]), ray["plain"]
    finally:
        subprocess.run([rlsim, "down", name], env=env, capture_output=True, timeout=120)
    assert state.load(name) is None
