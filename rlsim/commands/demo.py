"""``rlsim demo``: the default job, a cluster with a task on every node and the tiny GRPO run."""

from __future__ import annotations

import os
import time

import typer

from rlsim.commands.cluster import default, print_connect, start_cluster, table, to_spec
from rlsim.commands.console import console, styled
from rlsim.files import read_json_lines


def _run_on_every_node(c) -> list[tuple[int, str, str]]:
    """One tiny Ray task pinned to each node; returns (index, address seen, GPU ids seen)."""
    os.environ.update(c.driver_env())
    import ray

    @ray.remote(num_cpus=0.01, num_gpus=1)
    def where(i: int) -> tuple[int, str, str]:
        return i, ray.util.get_node_ip_address(), ",".join(map(str, ray.get_gpu_ids()))

    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    try:
        refs = [
            where.options(resources={f"rlsim_node_{i}": 0.01}).remote(i)
            for i in range(c.spec.nodes)
        ]
        return ray.get(refs, timeout=60)
    finally:
        ray.shutdown()


def demo(
    nodes: int = typer.Option(default("nodes"), "--nodes", "-n"),
    fake_gpus: int = typer.Option(default("gpus_per_node"), "--fake-gpus", "-g"),
    train: bool = typer.Option(True, "--train/--no-train", help="also run the tiny GRPO trainer"),
) -> None:
    """The default job: bring up NODES x FAKE_GPUS, run a task on every node, train the tiny GRPO
    config across two nodes, tear down.
    Exit 0: every task ran where it should and the reward rose; 1: it did not, or the cluster did
    not start; 2: a bad option."""
    t0 = time.monotonic()
    spec = to_spec("demo", {"nodes": "--nodes", "gpus_per_node": "--fake-gpus"},
                 name=f"demo-{os.getpid()}", nodes=nodes, gpus_per_node=fake_gpus)
    c = start_cluster(spec, False)
    try:
        console.print(table(c, c.nodes()))
        console.print(f"ready in {c.timings['ready_s']:.1f} s")
        print_connect(c)
        results = _run_on_every_node(c)
        ok = True
        for i, addr, gpu in results:
            want = c.state.layout.nodes[i].address if c.state else "?"
            good = addr == want
            ok &= good
            verdict = "ok" if good else f"WRONG (expected {want})"
            console.print(f"task on node {i}: ran at {addr} with GPU {gpu} {verdict}")
        if train:
            ok &= _train_tiny(c)
    finally:
        c.stop()
    console.print(f"torn down; whole run {time.monotonic() - t0:.1f} s")
    if not ok:
        raise typer.Exit(1)


def _train_tiny(c) -> bool:
    """``python -m trainer --config grpo_tiny`` (the preset shipped with the package) on the
    cluster; prints the reward curve's ends from the run's metrics."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="rlsim-demo-") as run_dir:
        cmd = [sys.executable, "-m", "trainer", "--config", "grpo_tiny", f"run_dir={run_dir}"]
        console.print("training: " + " ".join(cmd[1:]))
        t0 = time.monotonic()
        out = subprocess.run(cmd, env={**os.environ, **c.driver_env()}, capture_output=True,
                             text=True, timeout=600)
        metrics = Path(run_dir, "metrics.jsonl")
        rows = read_json_lines(metrics)[0] if metrics.exists() else []
    if out.returncode or not rows:
        console.print(styled(("trainer failed", "red"),
                             f"\n{out.stdout[-2000:]}{out.stderr[-2000:]}"))
        return False
    first = sum(r["rollout/reward_mean"] for r in rows[:5]) / min(5, len(rows))
    last = sum(r["rollout/reward_mean"] for r in rows[-5:]) / min(5, len(rows))
    console.print(f"trained {len(rows)} GRPO steps in {time.monotonic() - t0:.1f} s: reward "
                  f"{first:.3f} (first 5 steps) -> {last:.3f} (last 5)")
    return last > first
