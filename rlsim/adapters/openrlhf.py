"""OpenRLHF (OpenRLHF/OpenRLHF), read as it prints and saves; the formats come from its source
(v0.5.x to v0.11.0, checked at commit 3c3be623, tag v0.11.0):

- ``openrlhf/trainer/ppo_trainer.py`` ``fit``: ``logger.info(f"✨ Global step {global_step}:
  {log_status}")`` (v0.8.5 on; the async trainer without the sparkle), after the logger's prefix
  ``INFO 11-24 01:02:03 ppo_trainer.py:547]``; the status is a Python dict repr. Versions before
  v0.8.5 print no step line (only tqdm's postfix): their steps are not seen.
- Checkpoints (``openrlhf/utils/deepspeed/deepspeed.py`` ``save_ckpt``, DeepSpeed's
  ``save_checkpoint``): ``<ckpt path>/_actor/global_step{N}/`` and DeepSpeed's ``latest`` tag
  file beside it, naming the newest tag (``global_step{N}``), written after the tag's files. The
  path is ``--ckpt.path`` (v0.10.2 on) or ``--ckpt_path``, default
  ``./ckpt/checkpoints_ppo_ray``.
- Resume (``--ckpt.load_enable``, before v0.10.2 ``--load_checkpoint``): the policy actor prints
  ``Loading the checkpoint: <ckpt path>/_actor`` (``Loaded the checkpoint: ...,
  consumed_samples: ...`` before v0.8.0); the step is the one DeepSpeed loads, the ``latest`` tag.
- The reward: ``reward`` (the experience's mean reward).
"""

from __future__ import annotations

import ast
import re

from rlsim.adapters.base import resolve
from rlsim.adapters.logs import (
    LogAdapter,
    Reader,
    filled,
    finite,
    flag,
    number,
    read_text,
)

STEP = re.compile(r"Global step (?P<step>\d+): (?P<status>\{.*\})\s*$")
PAIR = re.compile(r"'(?P<k>[^']+)': (?P<v>[^,}]+)")
LOADING = re.compile(r"^Load(?:ing|ed) the checkpoint: (?P<path>[^,]+)")
TAG = re.compile(r"^global_step(?P<step>\d+)$")
DEFAULT_PATH = "./ckpt/checkpoints_ppo_ray"


def status_of(text: str) -> dict[str, float]:
    """The status dict's numbers; a repr that is not a literal (a tensor) is read pair by pair."""
    try:
        status = ast.literal_eval(text)
        return finite({k: number(repr(v)) for k, v in status.items()})
    except (ValueError, SyntaxError, AttributeError):
        return finite({m["k"]: number(m["v"]) for m in PAIR.finditer(text)})


def tag_step(actor_dir) -> int | None:
    m = TAG.match((read_text(actor_dir / "latest") or "").strip())
    return int(m["step"]) if m else None


class OpenRLHFReader(Reader):
    reward_key = "reward"

    def __init__(self, trainer, run_dir) -> None:
        super().__init__(trainer, run_dir)
        self.actor_dir = resolve(flag(filled(trainer, run_dir), ("--ckpt.path", "--ckpt_path"),
                                      DEFAULT_PATH), trainer.workdir) / "_actor"
        self.saved = tag_step(self.actor_dir)

    def line(self, text: str, actor: str | None) -> list[dict]:
        if m := STEP.search(text):
            return [self.step_end(int(m["step"]), status_of(m["status"]))]
        if m := LOADING.search(text):
            step = tag_step(resolve(m["path"].strip(), self.trainer.workdir))
            return [] if step is None else [{"type": "resume", "from_step": step,
                                             "path": m["path"].strip()}]
        return []

    def files(self) -> list[dict]:
        step = tag_step(self.actor_dir)
        if step is None or step == self.saved:
            return []
        self.saved = step
        return [{"type": "checkpoint_saved", "step": step,
                 "path": str(self.actor_dir / f"global_step{step}")}]


class OpenRLHFAdapter(LogAdapter):
    name = "openrlhf"
    reader = OpenRLHFReader
