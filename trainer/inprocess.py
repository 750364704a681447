"""The same training loop in one process, no Ray: one Worker hosts every role (world size 1).

The baseline `bench/trainer.py` measures the Ray roles against, and a fast way to test engines and
algorithms; it has no fault tolerance and no checkpoints of its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from trainer.config import TrainerConfig
from trainer.data import PromptLoader, load_prompts
from trainer.driver import ALGORITHMS, _mix
from trainer.host import Host
from trainer.memory import fit, gpu_capacity
from trainer.placement import Plan, WorkerSlot


class InProcessRoles:
    """``trainer.groups.Roles``'s interface over one in-process Host of every role."""

    def __init__(self, cfg: TrainerConfig) -> None:
        roles = {r: 0 for r in cfg.roles()}
        slot = WorkerSlot(0, 0, (0,), roles)
        self.plan = Plan(1, 1, "colocated", (slot,), {r: 1 for r in roles})
        micro, _ = fit(cfg, self.plan, gpu_capacity(cfg))
        self.w = Host(cfg.model_dump(), self.plan, slot, micro, gpu_capacity(cfg))
        # one world-size-1 process group for the life of the process: DeepSpeed caches its groups,
        # so a second run in the same process must reuse the first one's
        first = not torch.distributed.is_initialized()
        self.w.setup(("127.0.0.1", self.w.open_store()[1]) if first else None, 0, 1)

    def generate(self, prompts, seeds):
        return self.w.generate(prompts, seeds)

    def reward(self, prompts, seqs):
        return self.w.reward(prompts, seqs)

    def logprobs(self, role, seqs):
        return self.w.logprobs(role, seqs)

    def values(self, seqs):
        return self.w.values(seqs)

    def compute(self, fn, *args):
        return self.w.compute(fn, *args)

    def train(self, role, batch):
        return self.w.train(role, batch)

    def sync_weights(self):
        self.w.load_weights(self.w.export_weights())


def run_inprocess(cfg: TrainerConfig, first_step: int = 0, load: Path | None = None,
                  save: Path | None = None) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Train steps ``first_step`` .. ``cfg.total_steps`` in this process, optionally starting from
    a worker checkpoint ``load`` and writing one to ``save``; the metrics of every step and the
    actor's final weights."""
    roles = InProcessRoles(cfg)
    prompts = load_prompts(cfg.data.path)
    loader = PromptLoader(len(prompts), cfg.data.prompts_per_step, cfg.seed)
    if load is not None:
        roles.w.load(str(load))
        loader.load_state(json.loads((load / "loader.json").read_text()))
        roles.sync_weights()
    out = []
    for step in range(first_step, cfg.total_steps):
        t0 = time.monotonic()
        idx = loader.next_indices()
        m = ALGORITHMS[cfg.algorithm](roles, prompts[idx], [_mix(cfg.seed, step, i) for i in idx],
                                      cfg)
        out.append(m | {"perf/step_s": time.monotonic() - t0})
    if save is not None:
        roles.w.save(str(save))
        (save / "loader.json").write_text(json.dumps(loader.state()))
    return out, roles.w.export_weights()
