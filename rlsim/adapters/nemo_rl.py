"""NeMo-RL (NVIDIA-NeMo/RL), read as it prints and saves; the formats come from its source
(v0.4.0 to HEAD, checked at commit 7ea279ab of 2026-08-22):

- ``nemo_rl/algorithms/grpo.py`` ``grpo_train`` prints a banner per step,
  ``========================= Step N/M =========================`` (N counts within the epoch,
  M is min(dataloader length, max_num_steps)), then ``📊 Training Results:`` with
  ``  • Loss: x``, ``  • Avg Reward: x`` (``Avg Total Reward`` with dynamic sampling) and
  ``  • Total step time: x s``, the step's last line read here. The loop runs in the driver: no
  Ray prefix. The global step is counted: one per step, from the step resumed at.
- ``nemo_rl/utils/checkpoint.py`` ``CheckpointManager``: ``<checkpoint_dir>/tmp_step_N`` is
  renamed ``step_N`` when complete, with ``training_info.json``; the directory is
  ``checkpointing.checkpoint_dir`` (a Hydra-style override on the command line), default
  ``results/grpo`` as in NeMo-RL's example configs.
- Resume: automatic, from the highest complete ``step_N`` (``get_latest_checkpoint_path``), and
  unannounced: a launch that starts with one resumes from it (unless the command says
  ``checkpointing.enabled=false``).
"""

from __future__ import annotations

import re

from rlsim.adapters.base import resolve
from rlsim.adapters.logs import LogAdapter, Reader, filled, flag, number

BANNER = re.compile(r"^={3,} Step (?P<n>\d+)/(?P<m>\d+) ={3,}$")
RESULT = re.compile(r"^\s*• (?P<name>Loss|Avg Reward|Avg Total Reward|Total step time): "
                    r"(?P<v>\S+?)s?$")
NAMES = {"Loss": "loss", "Avg Reward": "avg_reward", "Avg Total Reward": "avg_reward",
         "Total step time": "step_time_s"}
STEP_DIR = re.compile(r"^step_(?P<step>\d+)$")


class NemoRLReader(Reader):
    reward_key = "avg_reward"

    def __init__(self, trainer, run_dir) -> None:
        super().__init__(trainer, run_dir)
        self.root = resolve(flag(filled(trainer, run_dir), ("checkpointing.checkpoint_dir",),
                                 "results/grpo"), trainer.workdir)
        self.enabled = flag(filled(trainer, run_dir), ("checkpointing.enabled",), "true").lower() \
            not in ("false", "0")
        self.saved = self._complete()
        self.step, self.metrics = 0, {}

    def _complete(self) -> set[int]:
        try:
            return {int(m["step"]) for p in self.root.iterdir()
                    if (m := STEP_DIR.match(p.name)) and (p / "training_info.json").exists()}
        except OSError:
            return set()

    def start(self) -> list[dict]:
        self.step, self.metrics = max(self.saved, default=0) if self.enabled else 0, {}
        return [{"type": "resume", "from_step": self.step,
                 "path": str(self.root / f"step_{self.step}")}] if self.step else []

    def line(self, text: str, actor: str | None) -> list[dict]:
        if BANNER.match(text):
            self.metrics = {}
        elif m := RESULT.match(text):
            value = number(m["v"])
            if value is not None:
                self.metrics[NAMES[m["name"]]] = value
            if m["name"] == "Total step time":
                self.step += 1
                return [self.step_end(self.step, self.metrics)]
        return []

    def files(self) -> list[dict]:
        new = sorted(self._complete() - self.saved)
        self.saved.update(new)
        return [{"type": "checkpoint_saved", "step": s, "path": str(self.root / f"step_{s}")}
                for s in new]


class NemoRLAdapter(LogAdapter):
    name = "nemo_rl"
    reader = NemoRLReader
