"""The worker as Ray and the driver see it: one actor on one placement-group bundle.

:class:`Worker` is the actor class the driver creates (``trainer.groups``); the roles it hosts
live in :class:`trainer.host.Host`, which it makes in its own process. The split keeps torch out
of the driver: naming the actor's class imports this module, and a driver that imported torch
through it spent most of its start there (1.1-2.0 s of a trainer launch on two cores, before its
first step). Everything that crosses between them is numpy arrays and plain values.
"""

from __future__ import annotations

from pathlib import Path

import ray


def crash_log(run_dir: str, pid: int) -> Path:
    """Where worker ``pid`` records a fatal signal (Python's fault handler: ``Fatal Python error:
    Segmentation fault`` and the stack), for the driver to tell a crash from a kill."""
    return Path(run_dir) / "crashes" / f"worker-{pid}.txt"


class Worker:
    """Hosts the roles of one worker slot (see :class:`trainer.host.Host`, which does the work);
    created by ``trainer.groups`` as a Ray actor."""

    def __init__(self, cfg: dict, plan, slot, micro: dict[str, int], capacity: float) -> None:
        from trainer.host import Host  # torch and the roles: in the worker's process only

        self.host = Host(cfg, plan, slot, micro, capacity)

    @ray.method(concurrency_group="watch")
    def alive(self) -> bool:
        """Answers at once, busy or idle (a thread of its own): the driver asks idle workers
        while it waits on others, so a worker that died idle is seen within a second, not at its
        next call; and, past a step's deadline, the busy ones, so that a rank that hangs (a
        frozen process, a deadlocked interpreter) is told from the ranks waiting on it in a
        collective (they answer)."""
        return True

    def where(self) -> dict:
        return self.host.where()

    def open_store(self) -> tuple[str, int]:
        return self.host.open_store()

    def setup(self, store_addr: tuple[str, int] | None, rank: int, world: int) -> dict:
        return self.host.setup(store_addr, rank, world)

    def generate(self, prompts, seeds: list[int]):
        return self.host.generate(prompts, seeds)

    def reward(self, prompts, seqs):
        return self.host.reward(prompts, seqs)

    def logprobs(self, role: str, seqs):
        return self.host.logprobs(role, seqs)

    def values(self, seqs):
        return self.host.values(seqs)

    def compute(self, fn, *args):
        return self.host.compute(fn, *args)

    def train(self, role: str, batch: dict) -> dict[str, float]:
        return self.host.train(role, batch)

    def export_weights(self):
        return self.host.export_weights()

    def load_weights(self, state) -> None:
        self.host.load_weights(state)

    def save(self, path: str) -> None:
        self.host.save(path)

    def load(self, path: str) -> None:
        self.host.load(path)

    def listing(self, path: str) -> tuple[str, list[str]]:
        return self.host.listing(path)

    def shutdown(self) -> None:
        self.host.shutdown()
