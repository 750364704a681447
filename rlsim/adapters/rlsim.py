"""The reference trainer (``trainer/``): ``python -m trainer --config ... key=value``; it writes
every event type the checks read, and per-step metrics for ``matches_baseline``."""

from __future__ import annotations

import json

from rlsim.adapters.base import Adapter, TrainerLaunch, resolve
from trainer.events import EVENT_TYPES


class RlsimAdapter(Adapter):
    name = "rlsim"
    observes = EVENT_TYPES | {"metrics.jsonl"}

    def command(self, trainer, launch: TrainerLaunch) -> list[str]:
        return [launch.python, "-m", "trainer", "--config", str(resolve(trainer.config)),
                f"run_dir={launch.run_dir}", *overrides(trainer)]


def overrides(trainer) -> list[str]:
    """The section's overrides as the trainer's ``key=value`` arguments. JSON is flow-style YAML:
    the trainer parses each value back with yaml.safe_load."""
    return [f"{k}={json.dumps(v)}" for k, v in trainer.overrides.items()]
