"""A trainer fed through a replay buffer by a rollout engine, as verl-omni's is: each step a
producer thread wakes the engine (an actor on its own node), has it generate, and puts the samples
into the buffer; the training loop takes its batch with ``sample()``.

The reported failure (verl-omni#433, 2026-08): the engine died while waking and the producer
caught the error and only logged it, so ``sample()`` waited forever on a buffer nobody fills and
the job hung until a CI timeout. ``WAIT=forever`` is that code. ``WAIT=bounded`` (the default) is
the fix: ``sample()`` waits at most ``SAMPLE_TIMEOUT_S`` and then raises, naming the engine, its
node and what the producer caught; the job exits non-zero and its relaunch resumes from its newest
checkpoint. Writes rlsim's event log through ``rlsim.events``; Ray's public API alone.

    python scenarios/trainers/replay_buffer.py RUN_DIR   (RAY_ADDRESS set; STEPS, SAVE_EVERY,
                                                         WAIT, SAMPLE_TIMEOUT_S from the env)
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlsim.events import EventLog


@ray.remote(num_cpus=0, num_gpus=1)
class Engine:
    """The rollout engine: asleep between steps (its weights offloaded), woken to generate."""

    def where(self) -> tuple[str, int]:
        return ray.util.get_node_ip_address(), os.getpid()

    def wake_up(self) -> None:
        time.sleep(0.05)

    def generate(self, step: int, n: int) -> list[float]:
        return [((step * 31 + i) % 97) / 97 for i in range(n)]


@ray.remote(num_cpus=0, num_gpus=1)
class Learner:
    def update(self, samples: list[float]) -> float:
        time.sleep(0.05)
        return sum(samples) / len(samples)


class EngineLost(RuntimeError):
    """``sample()`` waited its bound and the buffer stayed empty: the engine that fills it is
    named, with what the producer caught."""


def latest(ckpt: Path) -> int:
    steps = [int(p.stem.split("_")[-1]) for p in ckpt.glob("global_step_*.json")]
    return max(steps, default=0)


def main(run_dir: Path) -> int:
    steps, every = int(os.environ.get("STEPS", "8")), int(os.environ.get("SAVE_EVERY", "2"))
    bounded = os.environ.get("WAIT", "bounded") == "bounded"
    sample_timeout = float(os.environ.get("SAMPLE_TIMEOUT_S", "5"))
    log, ckpt = EventLog(run_dir), run_dir / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    start = latest(ckpt)
    if start:
        log.emit("resume", from_step=start)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level="ERROR")
    pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)
    learner = Learner.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    engine = Engine.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 1)).remote()
    ip, pid = ray.get(engine.where.remote(), timeout=60)
    engine_name = f"rollout rank 0 (Engine pid {pid} on {ip})"
    buffer: queue.Queue = queue.Queue()
    caught: list[str] = []

    def produce(step: int) -> None:
        try:
            ray.get(engine.wake_up.remote())
            buffer.put(ray.get(engine.generate.remote(step, 8)))
        except Exception as e:  # noqa: BLE001 - the reported code: logged, never raised
            caught.append(" ".join(str(e).split())[:300])
            print(f"rollout: generation failed: {caught[-1]}", file=sys.stderr, flush=True)

    step = start
    try:
        for step in range(start + 1, steps + 1):
            threading.Thread(target=produce, args=(step,), daemon=True).start()
            if bounded:
                try:
                    samples = buffer.get(timeout=sample_timeout)
                except queue.Empty:
                    raise EngineLost(f"{engine_name} filled no sample within {sample_timeout} s"
                                     f": {caught[-1] if caught else 'no error was caught'}"
                                     ) from None
            else:
                samples = buffer.get()
            loss = ray.get(learner.update.remote(samples), timeout=60)
            log.emit("step_end", step=step, metrics={"train/loss": loss})
            if step % every == 0 or step == steps:
                tmp = ckpt / f".tmp_step_{step}.json"
                tmp.write_text(json.dumps({"step": step}))
                tmp.rename(ckpt / f"global_step_{step}.json")
                log.emit("checkpoint_saved", step=step, path=str(ckpt / f"global_step_{step}.json"))
    except (EngineLost, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
        message = " ".join(str(e).split())[:500]
        log.emit("worker_died", cause=type(e).__name__, message=message)
        log.emit("error", kind="engine_lost", message=message)
        log.emit("run_end", status="failed", step=step)
        print(f"replay_buffer: {message}", flush=True)
        return 1
    log.emit("run_end", status="completed", step=steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
