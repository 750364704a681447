"""The tiny trainer configs' speed, and what the Ray roles cost, measured side by side in one run.

    .venv/bin/python bench/training.py [--steps 20] [--configs grpo_tiny ppo_tiny]

For each config: the same steps (same seeds, same sampled batches) through
  * ``python -m trainer`` on a 2-node rlsim cluster (Ray role groups, 2 ranks, gloo across nodes),
  * the same workers' code in this one process (``trainer.inprocess``: one rank, no Ray),
then steps/s and tokens/s (median step, first step excluded), wall time including start-up, and the
Ray/in-process ratio, and for how many steps both saw identical rewards: sampling is seeded per
prompt, so they agree until 2 ranks' float reductions (vs 1 rank's) flip a sample.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlsim.ray_internals import export_auth_env  # noqa: E402

export_auth_env()  # before Ray is imported (below, through trainer)

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rlsim.backends.local import LocalCluster  # noqa: E402
from rlsim.host.spec import ClusterSpec  # noqa: E402
from trainer.config import PRESETS, load_config  # noqa: E402
from trainer.inprocess import run_inprocess  # noqa: E402

ROOT = Path(__file__).parents[1]


def tokens_per_step(cfg) -> int:
    return cfg.data.prompts_per_step * cfg.rollout.n_samples * (7 + cfg.rollout.response_length)


def on_cluster(cluster: LocalCluster, config: Path, steps: int) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "trainer", "--config", str(config), f"run_dir={run_dir}",
               f"total_steps={steps}", "save_freq=0"]
        t0 = time.monotonic()
        out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **cluster.driver_env()},
                             capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
        if out.returncode:
            raise SystemExit(f"trainer failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
        rows = [json.loads(x) for x in Path(run_dir, "metrics.jsonl").read_text().splitlines()]
    return wall, rows


def in_process(config: Path, steps: int) -> tuple[float, list[dict]]:
    t0 = time.monotonic()
    rows, _ = run_inprocess(load_config(config, [f"total_steps={steps}"]))
    return time.monotonic() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=["grpo_tiny", "ppo_tiny"])
    args = ap.parse_args()
    os.chdir(ROOT)
    table = Table(title=f"trainer: {args.steps} steps per run, 2 cores")
    for col in ("config", "runner", "median step s", "steps/s", "tokens/s", "wall s (start-up)",
                "final reward", "step ratio ray/inproc", "steps with equal rewards"):
        table.add_column(col, justify="right" if col != "runner" else "left")
    spec = ClusterSpec(name="bench-trainer", nodes=2, gpus_per_node=1)
    with LocalCluster(spec) as cluster:
        for name in args.configs:
            config = PRESETS / f"{name}.yaml"
            cfg = load_config(config)
            results = {"ray, 2 nodes": on_cluster(cluster, config, args.steps),
                       "one process": in_process(config, args.steps)}
            medians = {k: statistics.median(r["perf/step_s"] for r in rows[1:])
                       for k, (_, rows) in results.items()}
            rewards = [[r["rollout/reward_mean"] for r in rows] for _, rows in results.values()]
            same = next((i for i, (a, b) in enumerate(zip(*rewards, strict=True)) if a != b),
                        len(rewards[0]))
            for runner, (wall, rows) in results.items():
                med = medians[runner]
                startup = wall - sum(r["perf/step_s"] for r in rows)
                ratio = medians["ray, 2 nodes"] / medians["one process"]
                table.add_row(name, runner, f"{med:.3f}", f"{1 / med:.2f}",
                              f"{tokens_per_step(cfg) / med:,.0f}", f"{wall:.1f} ({startup:.1f})",
                              f"{rows[-1]['rollout/reward_mean']:.3f}",
                              f"{ratio:.2f}x" if runner == "one process" else "",
                              str(same) if runner == "one process" else "")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
