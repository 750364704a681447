"""The same training loop in one process, no Ray: one Worker hosts every role (world size 1).

The baseline `bench/trainer.py` measures the Ray roles against, and a fast way to test engines and
algorithms; it has no fault tolerance and no checkpoints of its own.
"""

from __future__ import annotations

import time

from trainer.config import TrainerConfig
from trainer.data import PromptLoader, load_prompts
from trainer.driver import ALGORITHMS, _mix
from trainer.memory import fit, gpu_capacity
from trainer.placement import Plan, WorkerSlot
from trainer.worker import Worker


class InProcessRoles:
    """``trainer.groups.Roles``'s interface over one in-process Worker hosting every role."""

    def __init__(self, cfg: TrainerConfig) -> None:
        roles = {r: 0 for r in cfg.roles()}
        slot = WorkerSlot(0, 0, (0,), roles)
        self.plan = Plan(1, 1, "colocated", (slot,), {r: 1 for r in roles})
        micro, _ = fit(cfg, self.plan, gpu_capacity(cfg))
        self.w = Worker(cfg.model_dump(), self.plan, slot, micro, gpu_capacity(cfg))
        self.w.setup(("127.0.0.1", self.w.open_store()[1]), 0, 1)

    def generate(self, prompts, seeds):
        return self.w.generate(prompts, seeds)

    def reward(self, prompts, seqs):
        return self.w.reward(prompts, seqs)

    def logprobs(self, role, seqs):
        return self.w.logprobs(role, seqs)

    def values(self, seqs):
        return self.w.values(seqs)

    def train(self, role, batch):
        return self.w.train(role, batch)

    def sync_weights(self):
        self.w.load_weights(self.w.export_weights())


def run_inprocess(cfg: TrainerConfig) -> list[dict]:
    """Train ``cfg.total_steps`` steps in this process; the metrics of every step."""
    roles = InProcessRoles(cfg)
    prompts = load_prompts(cfg.data.path)
    loader = PromptLoader(len(prompts), cfg.data.prompts_per_step, cfg.seed)
    out = []
    for step in range(cfg.total_steps):
        t0 = time.monotonic()
        idx = loader.next_indices()
        m = ALGORITHMS[cfg.algorithm](roles, prompts[idx], [_mix(cfg.seed, step, i) for i in idx],
                                      cfg)
        out.append(m | {"perf/step_s": time.monotonic() - t0})
    roles.w.shutdown()
    return out
