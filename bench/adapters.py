"""What rlsim costs a trainer of the user's own: the harness's CPU while the trainer runs, as a
share of the trainer's wall time (target: at most 2%).

    .venv/bin/python bench/adapters.py [--steps 2000] [--scenarios PATH...]

Two tables, measured in one run:

1. **Reading, offline**: each output-reading adapter (verl, openrlhf, nemo_rl) reads a log of
   ``--steps`` steps in its framework's format (built from fixtures/formats), one step per poll as
   a trainer prints it, then polls with nothing new as the runner does every 100 ms; the
   ray_train callback is called once per report as Ray Train's controller does. CPU per step,
   per idle poll, and the idle share (an idle poll's CPU every 100 ms).
2. **Live**: whole scenarios on a local cluster. A sampler reads the CPU time of this process (the
   runner: its 100 ms poll loop, the adapter, the nemesis) and of the Ray watch process (the GCS
   read every 0.5 s) between the trainer's start and its exit; their sum against the trainer's
   wall time is the overhead. The watch's start-up (importing Ray, about half a second) is a
   fixed cost that a trainer of seconds feels and one of hours does not: the steady overhead
   leaves each launch's first seconds out, and is what the target is read against. The
   trainer's own processes are not counted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from rlsim.host.home import auth_token_path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))
FORMATS = ROOT / "fixtures" / "formats"
TARGET = 0.02
SETTLED_S = 3.0
DEFAULT_SCENARIOS = ["scenarios/verl_worker_lost.yaml", "scenarios/nemo_rl_worker_lost.yaml",
                     "scenarios/ray_train_node_lost.yaml"]


def step_lines(adapter: str, step: int) -> list[str]:
    """One step as the framework prints it, from the format fixtures' lines."""
    if adapter == "verl":
        line = next(x for x in (FORMATS / "verl" / "trainer-0.part1.log").read_text()
                    .splitlines() if "step:1 - " in x)
        return [line.replace("step:1 - ", f"step:{step} - ")]
    if adapter == "openrlhf":
        line = (FORMATS / "openrlhf" / "trainer-0.log").read_text().splitlines()[0]
        return [line.replace("Global step 1:", f"Global step {step}:")]
    text = (FORMATS / "nemo_rl" / "trainer-0.log").read_text()
    block = text[text.index("=" * 25 + " Step 1/4"):text.index("=" * 25 + " Step 2/4")]
    return re.sub(r"Step 1/4", f"Step {step}/999", block).splitlines()


def offline(steps: int) -> Table:
    from rlsim.adapters import ADAPTERS
    from rlsim.scenario.schema import Scenario

    table = Table(title=f"reading, offline: {steps} steps, one per poll")
    for col in ("adapter", "µs per step", "µs per idle poll", "idle share (poll every 100 ms)"):
        table.add_column(col, justify="right")
    for adapter in ("verl", "openrlhf", "nemo_rl"):
        with tempfile.TemporaryDirectory() as tmp:
            sc = Scenario.model_validate({"name": "b", "trainer": {
                "adapter": adapter, "command": ["x", f"--ckpt.path={tmp}/ckpt",
                                                f"checkpointing.checkpoint_dir={tmp}/ckpt"]},
                "expect": [{"completes": {}}]})
            run_dir = Path(tmp) / "run"
            run_dir.mkdir()
            src = ADAPTERS[adapter].events(sc.trainer, run_dir)
            log = (Path(tmp) / "trainer-0.log").open("a")
            busy = 0.0
            for step in range(1, steps + 1):
                log.write("\n".join(step_lines(adapter, step)) + "\n")
                log.flush()
                t0 = time.process_time()
                events = src.poll()
                busy += time.process_time() - t0
                assert events and events[-1]["step"] == step, (adapter, step, events)
            t0 = time.process_time()
            for _ in range(steps):
                src.poll()
            idle = (time.process_time() - t0) / steps
            log.close()
        table.add_row(adapter, f"{busy / steps * 1e6:.0f}", f"{idle * 1e6:.0f}",
                      f"{idle / 0.1:.3%}")
    table.add_row("ray_train (callback)", f"{callback_cost(steps) * 1e6:.0f}", "-", "-")
    return table


def callback_cost(reports: int) -> float:
    """CPU seconds per report of the ray_train callback (Ray Train calls it once per report)."""
    from ray.train.v2._internal.execution.training_report import _TrainingReport

    from rlsim.adapters.ray_train_callback import RlsimCallback

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLSIM_RUN_DIR"] = tmp
        cb = RlsimCallback()
        t0 = time.process_time()
        for step in range(1, reports + 1):
            m = {"step": step, "loss": 1.0 / step}
            cb.after_report(_TrainingReport(checkpoint=None, metrics=m, validation=False),
                            [m, m, m])
        return (time.process_time() - t0) / reports


class Sampler(threading.Thread):
    """Every 0.25 s: (time, this process's CPU less the sampler's own, the Ray watch processes'
    CPU). Walking /proc for the watch costs this thread more than the runner spends."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float, float]] = []
        self.stop = threading.Event()
        self.me = psutil.Process()

    def run(self) -> None:
        watch: dict[int, float] = {}
        while not self.stop.is_set():
            for child in self.me.children(recursive=True):
                try:
                    if "rlsim.scenario.watch" in " ".join(child.cmdline()):
                        t = child.cpu_times()
                        watch[child.pid] = t.user + t.system
                except psutil.Error:
                    pass
            t = self.me.cpu_times()
            own = time.thread_time()
            self.samples.append((time.time(), t.user + t.system - own, sum(watch.values())))
            time.sleep(0.25)

    def between(self, a: float, b: float) -> tuple[float, float]:
        inside = [s for s in self.samples if a <= s[0] <= b]
        if len(inside) < 2:
            return 0.0, 0.0
        return inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2]


def live(paths: list[str]) -> Table:
    from rlsim.scenario.loader import load
    from rlsim.scenario.runner import run_scenario

    table = Table(title="live: harness CPU while the trainer runs (local cluster); steady: "
                  f"from {SETTLED_S:.0f} s after each launch (the watch's start-up left out)")
    for col in ("scenario", "adapter", "trainer wall s", "runner CPU s", "watch CPU s",
                "overhead", "steady overhead", "target"):
        table.add_column(col, justify="right")
    for path in paths:
        sc = load(ROOT / path)
        sampler = Sampler()
        sampler.start()
        with tempfile.TemporaryDirectory() as tmp:
            out = run_scenario(sc, Path(tmp) / sc.name)
        sampler.stop.set()
        sampler.join()
        starts = [e["ts"] for e in out.rlsim("trainer_started")]
        exits = [e["ts"] for e in out.rlsim("trainer_exited")]
        wall = runner = watch = settled = settled_cpu = 0.0
        for a, b in zip(starts, exits, strict=False):
            wall += b - a
            r, w = sampler.between(a, b)
            runner, watch = runner + r, watch + w
            if b - a > 2 * SETTLED_S:
                settled += b - a - SETTLED_S
                settled_cpu += sum(sampler.between(a + SETTLED_S, b))
        share = (runner + watch) / wall if wall else float("nan")
        steady = settled_cpu / settled if settled else float("nan")
        table.add_row(sc.name, sc.trainer.adapter, f"{wall:.1f}", f"{runner:.2f}",
                      f"{watch:.2f}", f"{share:.1%}", f"{steady:.1%}" if settled else "-",
                      "-" if not settled else "met" if steady <= TARGET else
                      f"over {TARGET:.0%}")
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--scenarios", nargs="*", default=DEFAULT_SCENARIOS)
    args = ap.parse_args()

    # Ray fixes its auth mode at import: rlsim's clusters answer to rlsim's token
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN_PATH", str(auth_token_path()))
    console = Console(width=120)
    console.print(offline(args.steps))
    if args.scenarios:
        console.print(live(args.scenarios))


if __name__ == "__main__":
    main()
