"""Local and docker nodes side by side, in one run: bring-up, one node joining, memory.

    .venv/bin/python bench/backends.py [--nodes 4] [--gpus 8]

Rows per backend: seconds until NODES x GPUS are alive (and per node), seconds for one worker node
to rejoin after ``restart_node`` (the per-node join target: <= 5 s), seconds from ``kill_node``
to Ray declaring the node dead, and RSS of the head and of a worker node (every process of the
node: raylet, agents, and for docker the container's launcher). Needs root and a Docker engine.
"""

from __future__ import annotations

import argparse
import time

from cluster import rss_mb
from rich.console import Console
from rich.table import Table

from rlsim.backends.docker import DockerCluster, engine_problem
from rlsim.backends.local import LocalCluster
from rlsim.host import cgroups
from rlsim.host.spec import ClusterSpec
from rlsim.ray_internals import export_auth_env


def node_pids(cluster, index: int) -> list[int]:
    """Every process of node ``index``: its cgroup's (a container's, for docker)."""
    if isinstance(cluster, DockerCluster):
        return cgroups.memory_group_of(cluster.nodes()[index].pids[0]).pids()
    return cluster._pids(index)


def measure(kind: str, nodes: int, gpus: int) -> dict[str, float]:
    spec = ClusterSpec(name=f"bench-{kind}", nodes=nodes, gpus_per_node=gpus)
    cluster = DockerCluster(spec) if kind == "docker" else LocalCluster(spec)
    t0 = time.monotonic()
    with cluster:
        out = {"ready": time.monotonic() - t0}
        time.sleep(2)  # let agents settle before reading memory
        out["rss_head"] = rss_mb(node_pids(cluster, 0))
        out["rss_worker"] = rss_mb(node_pids(cluster, 1))
        t = time.monotonic()
        cluster.restart_node(1)
        out["rejoin"] = time.monotonic() - t
        t = time.monotonic()
        cluster.kill_node(1)
        while any(n.alive for n in cluster.nodes() if n.index == 1):
            time.sleep(0.05)
        out["detect"] = time.monotonic() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    export_auth_env()
    problem = engine_problem()
    if problem:
        raise SystemExit(f"bench/backends.py: {problem}")
    res = {kind: measure(kind, args.nodes, args.gpus) for kind in ("local", "docker")}
    t = Table(title=f"backends, {args.nodes} nodes x {args.gpus} fake GPUs (one run, this machine)")
    for col in ("measure", "local", "docker", "docker/local", "target"):
        t.add_column(col)
    rows = [
        ("ready, whole cluster", "ready", "s", ""),
        ("one worker node rejoins (restart_node)", "rejoin", "s", "docker <= 5 s"),
        ("kill_node -> Ray declares it dead", "detect", "s", ""),
        ("RSS head node", "rss_head", "MB", ""),
        ("RSS per worker node", "rss_worker", "MB", ""),
    ]
    for label, key, unit, target in rows:
        lo, dk = res["local"][key], res["docker"][key]
        t.add_row(label, f"{lo:.2f} {unit}", f"{dk:.2f} {unit}", f"{dk / lo:.2f}x", target)
    per = {k: res[k]["ready"] / args.nodes for k in res}
    t.add_row("ready / nodes", f"{per['local']:.2f} s", f"{per['docker']:.2f} s",
              f"{per['docker'] / per['local']:.2f}x", "")
    Console().print(t)


if __name__ == "__main__":
    main()
