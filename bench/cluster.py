"""Cluster bring-up, failure detection and memory, measured side by side in one run.

    .venv/bin/python bench/cluster.py [--nodes 4] [--gpus 8] [--repeat 3] [--skip-defaults]
                                      [--no-main-job]
    .venv/bin/python bench/cluster.py --plain [--bringups 3]
    .venv/bin/python bench/cluster.py --scale 4,8,16,32,64 [--gpus 8]

Rows: time until NODES x GPUS are alive with (the scenarios' shape and Ray's test cluster started
``--bringups`` times in turn, medians compared)
  * rlsim's local backend (own 127.x address per node, dashboard + Jobs API on the head),
    without the dashboard (the processes Ray's test cluster starts), and without the dashboard
    or the worker nodes' log monitors, as the reference trainer's scenarios run it; for that one
    also the CPU time bring-up spent over the machine's cores, the floor on this machine, and a
    table of where that CPU goes by process,
  * Ray's in-process test cluster ``ray.cluster_utils.Cluster`` (one IP for all nodes),
  * sequential ``ray start`` (head with dashboard, then workers), each on its own 127.x address,
and the README main job (``rlsim run scenarios/node_failure_mid_run.yaml`` as typed, its twin
kept by the bench's first run), then seconds from SIGKILL of a worker node to Ray declaring it
dead (rlsim's tuned health checks and Ray's defaults), and RSS per node. Needs root (cgroups)
for the ``ray start`` baseline cleanup.
``--scale`` instead starts one cluster of each size in turn: time to ready, CPU, host memory, a
worker node's RSS, PSS and USS (see memory_mb) and kill-to-dead against the node count.
``--plain`` instead starts the scenarios' shape on rlsim's fast path and on Ray's plain path
(``RLSIM_RAY_PLAIN=all``: what a Ray whose internals rlsim's probes do not find gets), in turn,
and compares their medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from rlsim import ray_internals as ri
from rlsim.backends.local import LocalCluster
from rlsim.backends.ray_state import node_table
from rlsim.host import cgroups, procs, state
from rlsim.host.spec import ClusterSpec, HealthChecks

RAY_DEFAULTS = HealthChecks(initial_delay_ms=5000, period_ms=3000, timeout_ms=10000,
                            failure_threshold=5)
BIN = Path(sys.executable).parent


def rss_mb(pids: list[int]) -> float:
    return memory_mb(pids)["rss"]


def memory_mb(pids: list[int]) -> dict[str, float]:
    """The processes' memory, three ways: RSS (every page they map, shared libraries counted in
    full by each process), PSS (shared pages split between the processes that map them: summed
    over all processes it is what the machine holds) and USS (pages only they map: what stopping
    them frees)."""
    total = {"rss": 0, "pss": 0, "uss": 0}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            m = psutil.Process(pid).memory_full_info()
            for k in total:
                total[k] += getattr(m, k)
    return {k: v / 2**20 for k, v in total.items()}


def worker_memory_mb(infos: list) -> dict[str, float]:
    """A worker node's memory (:func:`memory_mb`), the mean over the nodes after the head (0
    without). PSS is what the machine holds for it: a page its agents share with their zygote
    counted once over all the processes that map it."""
    per_node = [memory_mb(n.pids) for n in infos[1:]]  # smaps read once a node
    return {k: statistics.mean(m[k] for m in per_node) if per_node else 0.0
            for k in ("rss", "pss", "uss")}


def time_rlsim(nodes: int, gpus: int, dashboard: bool = True, forward_logs: bool = True,
               plain: bool = False) -> tuple[float, dict[str, float]]:
    """Seconds to ready, the nodes' RSS, and ``cpu_s``: the CPU time bring-up spent (every
    process of the cluster at ready, and the launcher), the floor under its wall time being
    ``cpu_s`` over the machine's cores. ``plain``: every acceleration off (Ray's plain path)."""
    spec = ClusterSpec(name="bench-up", nodes=nodes, gpus_per_node=gpus, dashboard=dashboard,
                       forward_logs=forward_logs)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with _plain(plain), LocalCluster(spec) as c:
        ready = c.timings["ready_s"]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        launcher = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
        by_kind = {"launcher (rlsim.backends.node_start)": launcher}
        on_nodes = set()
        for n in c.nodes():
            for pid in n.pids:
                kind = _process_name(pid)
                by_kind[kind] = by_kind.get(kind, 0.0) + _own_cpu_s(pid)
                on_nodes.add(pid)
        # the cluster's processes of no node: the zygote the nodes' agents are forked from
        for pid in set(procs.find(c.state.session)) - on_nodes:
            kind = _process_name(pid)
            by_kind[kind] = by_kind.get(kind, 0.0) + _own_cpu_s(pid)
        cpu = sum(by_kind.values())
        time.sleep(3)  # let agents settle before measuring memory
        infos = c.nodes()
        worker = worker_memory_mb(infos)
        mem = {
            "head": rss_mb(infos[0].pids),
            "worker": worker["rss"], "worker_pss": worker["pss"], "worker_uss": worker["uss"],
            "cpu_s": cpu,
            "cpu_by_kind": by_kind,
        }
    return ready, mem


@contextlib.contextmanager
def _plain(on: bool):
    """While inside, with ``on``: Ray's plain path for every acceleration, in this process and
    the cluster's (rlsim.ray_internals)."""
    if not on:
        yield
        return
    os.environ[ri.PLAIN_VAR] = "all"
    try:
        yield
    finally:
        del os.environ[ri.PLAIN_VAR]


def plain_against_fast(nodes: int, gpus: int, bringups: int) -> None:
    """The scenarios' shape on the fast path and on Ray's plain path, in turn; medians."""
    runs: dict[bool, list] = {False: [], True: []}
    for _ in range(bringups):
        for plain in (False, True):
            runs[plain].append(time_rlsim(nodes, gpus, dashboard=False, forward_logs=False,
                                          plain=plain))
    t = Table(title=f"rlsim bench: {nodes}x{gpus} bring-up, fast path against Ray's plain path "
                    f"(Ray {ri.ray_version()}, {os.cpu_count()} cores, medians of {bringups})")
    for col in ("path", "ready", "CPU s", "all runs", "vs fast"):
        t.add_column(col)
    fast = statistics.median(r[0] for r in runs[False])
    for plain, label in ((False, "fast (every acceleration in force)"),
                         (True, "plain (RLSIM_RAY_PLAIN=all)")):
        ready = statistics.median(r[0] for r in runs[plain])
        cpu = statistics.median(r[1]["cpu_s"] for r in runs[plain])
        t.add_row(label, f"{ready:.2f} s", f"{cpu:.2f}",
                  " ".join(f"{r[0]:.2f}" for r in runs[plain]), f"{ready / fast:.2f}x")
    Console().print(t)


def time_cli(nodes: int, gpus: int) -> dict[str, float]:
    """``rlsim cluster --detach`` as a user types it (dashboard and Jobs API up), timed from the
    command's start to its exit: ``wall``; ``ready`` is what it prints (from its cluster's start
    to every node registered), ``imports`` a bare ``import rlsim.commands`` in a fresh interpreter,
    ``down`` the ``rlsim down`` after it."""
    rlsim = str(Path(sys.executable).parent / "rlsim")
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import rlsim.commands"], check=True)
    imports = time.monotonic() - t
    t = time.monotonic()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([rlsim, "cluster", "--nodes", str(nodes), "--fake-gpus", str(gpus),
                          "--detach", "--name", "bench-cli"], capture_output=True, text=True,
                         timeout=300)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the CPU it took: the command and the launcher it waited for, and what runs on of the
    # cluster (its nodes' processes, the zygote, the dashboard's module processes)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    if (st := state.load("bench-cli")) is not None:
        cpu += sum(_own_cpu_s(pid) for pid in procs.find(st.session))
    t = time.monotonic()
    subprocess.run([rlsim, "down", "bench-cli"], capture_output=True, timeout=120)
    down = time.monotonic() - t
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    m = re.search(r"ready in ([\d.]+) s", out.stdout)
    return {"wall": wall, "ready": float(m.group(1)) if m else float("nan"),
            "imports": imports, "down": down, "cpu_s": cpu}


def time_main_job() -> dict[str, float]:
    """The README's main job as a user types it, ``rlsim run scenarios/node_failure_mid_run.yaml``
    from the repository (the twin kept under the rlsim home by an earlier run: the first run of
    the bench trains it), timed from the command's start to its exit."""
    rlsim = str(Path(sys.executable).parent / "rlsim")
    root = Path(__file__).parents[1]
    t = time.monotonic()
    out = subprocess.run([rlsim, "run", "scenarios/node_failure_mid_run.yaml", "--report",
                          "/tmp/rlsim-bench-main-job"], cwd=root, capture_output=True, text=True,
                         timeout=600)
    wall = time.monotonic() - t
    if out.returncode != 0 or "PASS node_failure_mid_run" not in out.stdout:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return {"wall": wall, "cached": "kept from an earlier run" in out.stdout}


RAY_CLUSTER_CODE = """
import time, ray
from ray.cluster_utils import Cluster
t = time.monotonic()
c = Cluster()
for _ in range({nodes}):
    c.add_node(num_cpus=1, num_gpus={gpus}, include_dashboard=False)
c.wait_for_nodes()
print(time.monotonic() - t)
c.shutdown()
"""


def time_ray_cluster_utils(nodes: int, gpus: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", RAY_CLUSTER_CODE.format(nodes=nodes, gpus=gpus)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"},
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def time_ray_start(nodes: int, gpus: int) -> float:
    """Sequential `ray start`, every process inside one cgroup so that cleanup touches nothing
    else (no `ray stop`, which would also stop a user's own Ray)."""
    group = cgroups.NodeGroup("bench-raystart", 0)
    group.path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    head, port, tmp = "127.78.0.10", 30500, "/tmp/.rlsim-bench-raystart"
    enter = f"echo $$ > {group.path / 'cgroup.procs'}; exec "
    t = time.monotonic()
    try:
        for i in range(nodes):
            addr = f"127.78.0.{10 + i}"
            base = 30600 + i * 50
            args = (
                f"{BIN}/ray start --node-ip-address {addr} --num-gpus {gpus} --num-cpus 1 "
                f"--node-manager-port {base} --object-manager-port {base + 1} "
                f"--metrics-export-port {base + 2} --dashboard-agent-grpc-port {base + 3} "
                f"--dashboard-agent-listen-port {base + 4} --runtime-env-agent-port {base + 5} "
                f"--min-worker-port {base + 10} --max-worker-port {base + 49} "
            )
            if i == 0:
                args += (f"--head --port {port} --temp-dir {tmp} --include-dashboard true "
                         f"--dashboard-host {head} --dashboard-port {port + 1}")
            else:
                args += f"--address {head}:{port}"
            subprocess.run(["sh", "-c", enter + args], env=env, check=True,
                           capture_output=True, timeout=120)
        while sum(1 for n in node_table(f"{head}:{port}", "/dev/null") if n["Alive"]) < nodes:
            time.sleep(0.05)
        return time.monotonic() - t
    finally:
        cgroups.remove_session("bench-raystart")
        subprocess.run(["rm", "-rf", tmp])


def time_detection(health: HealthChecks, repeat: int) -> list[float]:
    spec = ClusterSpec(name="bench-kill", nodes=2, gpus_per_node=1, health=health)
    out = []
    with LocalCluster(spec) as c:
        for _ in range(repeat):
            time.sleep(health.initial_delay_ms / 1000 + 0.5)
            t = time.monotonic()
            c.kill_node(1)
            while c.nodes()[1].alive:
                time.sleep(0.02)
            out.append(time.monotonic() - t)
            c.restart_node(1)
    return out


def scale_row(nodes: int, gpus: int) -> dict[str, float]:
    """One cluster of ``nodes`` as ``rlsim cluster`` starts it (dashboard on the head): time to
    ready, the CPU its processes burned getting there, host memory it takes, RSS per worker node,
    and seconds from SIGKILL of its last node to Ray declaring that node dead."""
    before = psutil.virtual_memory().used
    spec = ClusterSpec(name="bench-scale", nodes=nodes, gpus_per_node=gpus)
    with LocalCluster(spec) as c:
        ready = c.timings["ready_s"]
        time.sleep(3)  # let agents settle before measuring memory
        infos = c.nodes()
        cpu = sum(_cpu_s(pid) for n in infos for pid in n.pids)
        used = (psutil.virtual_memory().used - before) / 2**20
        worker = worker_memory_mb(infos)
        parts = {_process_name(pid): memory_mb([pid]) for pid in infos[-1].pids}
        kill = 0.0
        if nodes > 1:
            t = time.monotonic()
            c.kill_node(nodes - 1)
            while c.nodes()[nodes - 1].alive:
                time.sleep(0.02)
            kill = time.monotonic() - t
        t = time.monotonic()
    down = time.monotonic() - t
    return {"ready": ready, "cpu": cpu, "host_mb": used, "worker": worker, "parts": parts,
            "kill": kill, "down": down, "leaks": c.leaks()}


def _process_name(pid: int) -> str:
    """A node process by what it is: Ray's title for its agents, the module or script of a plain
    Python process (the zygote, the log monitor), else the executable."""
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(pid)
        args = p.cmdline()
        if p.name().startswith("ray::") or not args:
            return p.name()
        if any("multiprocessing." in a for a in args):  # the dashboard's forkserver, tracker
            return "dashboard's forkserver and resource tracker"
        if "--agents" in p.parent().cmdline():  # forked from the agent zygote: no title of its own
            return ("dashboard (forked from the agent zygote)" if any(
                "multiprocessing.forkserver" in " ".join(c.cmdline()) for c in p.children())
                else "log monitor (forked from the agent zygote)")
        if "-m" in args[1:-1]:  # python -m MODULE (the agents' zygote)
            return args[args.index("-m") + 1]
        script = next((a for a in args[1:] if a.endswith(".py")), args[0])
        return Path(script).name
    return str(pid)


def _own_cpu_s(pid: int) -> float:
    with contextlib.suppress(psutil.Error):
        return sum(psutil.Process(pid).cpu_times()[:2])
    return 0.0


def _cpu_s(pid: int) -> float:
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(pid)
        return sum(sum(x.cpu_times()[:2]) for x in [p, *p.children(recursive=True)])
    return 0.0


def scale(sizes: list[int], gpus: int) -> None:
    con = Console(width=150)
    rows = {}
    for n in sizes:
        con.print(f"measuring {n}x{gpus} ...")
        rows[n] = scale_row(n, gpus)
    first = rows[sizes[0]]["ready"]
    t = Table(title=f"rlsim bench: scale, {gpus} fake GPUs a node ({os.cpu_count()} cores, "
                    f"{psutil.virtual_memory().total / 2**30:.0f} GiB)")
    for col in ("nodes", "ready", f"vs {sizes[0]} nodes", "CPU (ready + 3 s)", "host memory",
                "host memory / node", "worker node RSS", "PSS", "USS", "kill -> dead",
                "teardown", "left behind"):
        t.add_column(col)
    for n, r in rows.items():
        w = r["worker"]
        t.add_row(str(n), f"{r['ready']:.1f} s", f"{r['ready'] / first:.1f}x", f"{r['cpu']:.1f} s",
                  f"{r['host_mb'] / 1024:.2f} GiB", f"{r['host_mb'] / n:.0f} MB",
                  f"{w['rss']:.0f} MB", f"{w['pss']:.0f} MB", f"{w['uss']:.0f} MB",
                  f"{r['kill']:.2f} s", f"{r['down']:.1f} s",
                  "; ".join(r["leaks"]) or "nothing")
    con.print(t)
    for n in (n for n in rows if n >= 32):
        ratio = rows[n]["ready"] / first
        con.print(f"target: {n} nodes ready within 12x the time {sizes[0]} take: {ratio:.1f}x, "
                  f"{'met' if ratio <= 12 else 'missed'}")
    parts = Table(title=f"where a worker node's memory goes ({sizes[-1]}x{gpus}, its last node)")
    for col in ("process", "RSS", "PSS", "USS"):
        parts.add_column(col)
    for name, m in sorted(rows[sizes[-1]]["parts"].items(), key=lambda kv: -kv[1]["rss"]):
        parts.add_row(name, *(f"{m[k]:.0f} MB" for k in ("rss", "pss", "uss")))
    con.print(parts)
    w = rows[sizes[-1]]["worker"]
    found = rows[sizes[-1]]["parts"]
    lm = found.get("log_monitor.py") or found.get("log monitor (forked from the agent zygote)") \
        or {"rss": 0.0, "pss": 0.0, "uss": 0.0}
    for label, m in (("as rlsim cluster starts it", w),
                     ("without the log monitor (the reference trainer's scenarios)",
                      {k: w[k] - lm[k] for k in w})):
        con.print(f"target: a worker node <= 150 MB, {label}: RSS {m['rss']:.0f} MB "
                  f"({'met' if m['rss'] <= 150 else 'missed'}), PSS {m['pss']:.0f} MB "
                  f"({'met' if m['pss'] <= 150 else 'missed'}), USS {m['uss']:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bringups", type=int, default=3,
                    help="times the scenarios' shape and Ray's test cluster start, in turn "
                         "(their medians are compared)")
    ap.add_argument("--skip-defaults", action="store_true", help="skip Ray-default detection")
    ap.add_argument("--no-main-job", dest="main_job", action="store_false",
                    help="leave out the README main job's rows")
    ap.add_argument("--scale", help="only the scale table, for these node counts (4,8,16,32)")
    ap.add_argument("--plain", action="store_true", help="only the fast path against Ray's "
                    "plain path (RLSIM_RAY_PLAIN=all), --bringups times each, in turn")
    a = ap.parse_args()
    if a.scale:
        return scale([int(n) for n in a.scale.split(",")], a.gpus)
    if a.plain:
        return plain_against_fast(a.nodes, a.gpus, a.bringups)
    con = Console()
    shape = f"{a.nodes}x{a.gpus}"

    con.print(f"measuring bring-up of {shape} ...")
    ours, mem = time_rlsim(a.nodes, a.gpus)
    alike, _ = time_rlsim(a.nodes, a.gpus, dashboard=False)
    bares, theirs_all, clis, mains = [], [], [], []
    first_main = time_main_job() if a.main_job else None  # trains the twin where none is kept
    for _ in range(a.bringups):  # in turn: a slow spell of the machine falls on both
        bares.append(time_rlsim(a.nodes, a.gpus, dashboard=False, forward_logs=False))
        theirs_all.append(time_ray_cluster_utils(a.nodes, a.gpus))
        clis.append(time_cli(a.nodes, a.gpus))
        if a.main_job:
            mains.append(time_main_job())
    bare, bare_mem = sorted(bares, key=lambda r: r[0])[len(bares) // 2]
    theirs = statistics.median(theirs_all)
    user = sorted(clis, key=lambda r: r["wall"])[len(clis) // 2]
    cli = time_ray_start(a.nodes, a.gpus)
    con.print("measuring failure detection ...")
    tuned = time_detection(HealthChecks(), a.repeat)
    default = [] if a.skip_defaults else time_detection(RAY_DEFAULTS, 1)

    t = Table(title=f"rlsim bench: cluster ({os.cpu_count()} cores)")
    for col in ("measure", "value", "vs Ray Cluster", "target"):
        t.add_column(col)
    t.add_row(f"`rlsim cluster --detach` {shape} as typed, from the command's start to its exit "
              f"(dashboard, Jobs API), median of {a.bringups}", f"{user['wall']:.2f} s",
              f"{user['wall'] / theirs:.2f}x", "<= 0.5x")
    t.add_row("  all runs", " ".join(f"{r['wall']:.2f}" for r in clis), "", "")
    t.add_row("  of which its cluster's start to ready (what it prints)", f"{user['ready']:.2f} s",
              "", "")
    t.add_row("  of which before and after that (imports, checks, printing)",
              f"{user['wall'] - user['ready']:.2f} s", "", "")
    t.add_row("  `import rlsim.commands` alone, in a fresh interpreter", f"{user['imports']:.2f} s",
              "", "")
    cores = os.cpu_count() or 1
    t.add_row(f"  its CPU time / {cores} cores (the floor on this machine)",
              f"{user['cpu_s'] / cores:.2f} s", f"{user['cpu_s'] / cores / theirs:.2f}x", "")
    if mains:
        main = statistics.median(m["wall"] for m in mains)
        t.add_row(f"README main job `rlsim run scenarios/node_failure_mid_run.yaml` as typed "
                  f"(twin kept), median of {a.bringups}", f"{main:.2f} s",
                  f"{main / theirs:.2f}x", "<= 2.0x")
        t.add_row("  all runs", " ".join(f"{m['wall']:.2f}" for m in mains), "", "")
        t.add_row("  the bench's first run (trains the twin where none was kept)",
                  f"{first_main['wall']:.2f} s", f"{first_main['wall'] / theirs:.2f}x", "")
    t.add_row(f"ready {shape}: rlsim local (own IPs, dashboard)", f"{ours:.2f} s",
              f"{ours / theirs:.2f}x", "")
    t.add_row(f"ready {shape}: rlsim local, no dashboard (the processes Ray's Cluster starts)",
              f"{alike:.2f} s", f"{alike / theirs:.2f}x", "")
    t.add_row(f"ready {shape}: rlsim local, no dashboard, no log forwarding (scenarios), "
              f"median of {a.bringups}", f"{bare:.2f} s", f"{bare / theirs:.2f}x", "<= 0.6x")
    t.add_row("  all runs", " ".join(f"{r[0]:.2f}" for r in bares), "", "")
    t.add_row(f"  its CPU time / {cores} cores (the floor on this machine)",
              f"{bare_mem['cpu_s'] / cores:.2f} s", f"{bare_mem['cpu_s'] / cores / theirs:.2f}x",
              "")
    t.add_row(f"ready {shape}: ray.cluster_utils.Cluster (one IP), median of {a.bringups}",
              f"{theirs:.2f} s", "1.00x", "")
    t.add_row("  all runs", " ".join(f"{x:.2f}" for x in theirs_all), "", "")
    t.add_row(f"ready {shape}: sequential ray start (own IPs)", f"{cli:.2f} s",
              f"{cli / theirs:.2f}x", "")
    t.add_row("kill -> dead, rlsim tuned health checks (median)",
              f"{statistics.median(tuned):.2f} s", "", "<= 1 s")
    t.add_row("  all runs", " ".join(f"{x:.2f}" for x in tuned), "", "")
    if default:
        t.add_row("kill -> dead, Ray default health checks", f"{default[0]:.2f} s", "", "")
    t.add_row("RSS head node (gcs, dashboard, raylet, agents)", f"{mem['head']:.0f} MB", "", "")
    t.add_row("RSS head node without the dashboard (scenarios)", f"{bare_mem['head']:.0f} MB",
              "", "")
    t.add_row("memory per worker node (raylet + agents): PSS, what the machine holds for it "
              "(pages its agents share with their zygote split among them)",
              f"{mem['worker_pss']:.0f} MB", "", "<= 250 MB")
    t.add_row("  its USS (what stopping it frees) / RSS (shared pages counted in full by each "
              "process)", f"{mem['worker_uss']:.0f} / {mem['worker']:.0f} MB", "", "")
    con.print(t)
    where = Table(title=f"where the scenarios' {shape} bring-up spends its CPU (the median run; "
                        "each node's dashboard agent runs minimal: "
                        "rlsim.ray_internals.node_agent)")
    for col in ("process", "CPU s (all nodes)", "share"):
        where.add_column(col)
    for kind, secs in sorted(bare_mem["cpu_by_kind"].items(), key=lambda kv: -kv[1]):
        where.add_row(kind, f"{secs:.2f}", f"{100 * secs / bare_mem['cpu_s']:.0f}%")
    con.print(where)


if __name__ == "__main__":
    main()
