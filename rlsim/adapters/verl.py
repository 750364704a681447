"""verl (volcengine/verl), read as it prints and saves; the formats come from verl's source
(v0.4.1 to v0.7.x, checked at commit b178a3cd of 2026-01-29):

- ``verl/utils/logger/aggregate_logger.py`` ``concat_dict_to_str``: one console line per step,
  ``step:N - key:value - ...``, numbers only, values ``f"{v:.3f}"`` up to v0.4.1 and
  ``pprint.pformat(v)`` since (so ``np.float64(0.0042)``); printed inside verl's ``TaskRunner``
  actor, so the driver shows it as ``(TaskRunner pid=N) step:...``. Step 0 is the validation
  before training, not a step. tqdm's bar may share the line (``...s/it]step:2 - ...``).
- ``verl/utils/tracking.py`` ``FileLogger`` (``trainer.logger=[console,file]``, v0.6.0 on):
  ``{"step": N, "data": {...}}`` per line to ``VERL_FILE_LOGGER_PATH``. It truncates the file
  when it opens it, so each launch gets its own, ``<run_dir>/verl-metrics-<attempt>.jsonl``
  (unless the scenario's env names one). A step both sources show counts once.
- ``verl/trainer/ppo/ray_trainer.py`` ``_save_checkpoint``: prints
  ``local_global_step_folder: <default_local_dir>/global_step_N``, writes ``actor/``,
  ``critic/``, ``data.pt``, then ``latest_checkpointed_iteration.txt`` (the step, no newline)
  last: a save is complete when that file names it. ``_load_checkpoint`` with
  ``trainer.resume_mode=auto`` prints ``Resuming from <...>/global_step_N``.
- The reward: ``critic/score/mean`` (``metric_utils.compute_data_metrics``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlsim.adapters.base import TrainerLaunch, resolve
from rlsim.adapters.logs import LogAdapter, Reader, finite, number, read_text
from rlsim.history import new_lines

STEP = re.compile(r"(?:^|\])step:(?P<step>\d+)(?: - (?P<rest>.*))?$")
# up to v0.7 printed; v0.9's trainer (``verl/trainer/ppo/v1/trainer_base.py``) logs, through a
# logging format that puts ``INFO:<time>:`` in front
SAVING = re.compile(r"(?:^local_global_step_folder: |(?:^|:)Saving checkpoint to )"
                    r"(?P<path>\S*global_step_\d+)$")
RESUMING = re.compile(r"(?:^|:)Resuming from (?P<path>\S*global_step_(?P<step>\d+))"
                      r"(?:, setting global step to \d+)?$")
TRACKER = "latest_checkpointed_iteration.txt"
FILE_LOGGER_VAR = "VERL_FILE_LOGGER_PATH"


def metrics_of(rest: str | None) -> dict[str, float]:
    pairs = (item.split(":", 1) for item in (rest or "").split(" - ") if ":" in item)
    return finite({k: number(v) for k, v in pairs})


class VerlReader(Reader):
    reward_key = "critic/score/mean"

    def __init__(self, trainer, run_dir: Path) -> None:
        super().__init__(trainer, run_dir)
        self.roots: set[Path] = set()
        self.saved: dict[Path, str] = {}
        self.seen: set[tuple[int, int]] = set()  # (attempt, step): console and file count once
        self.attempt, self.file_offset = -1, 0

    def start(self) -> list[dict]:
        self.attempt, self.file_offset = self.attempt + 1, 0
        return []

    def _step(self, step: int, metrics: dict[str, float]) -> list[dict]:
        if step == 0 or (self.attempt, step) in self.seen:
            return []
        self.seen.add((self.attempt, step))
        return [self.step_end(step, metrics)]

    def line(self, text: str, actor: str | None) -> list[dict]:
        if m := STEP.search(text):
            return self._step(int(m["step"]), metrics_of(m["rest"]))
        if m := SAVING.search(text):
            root = resolve(m["path"], self.trainer.workdir).parent
            self.saved.setdefault(root, read_text(root / TRACKER) or "")
            self.roots.add(root)
        elif m := RESUMING.search(text):
            return [{"type": "resume", "from_step": int(m["step"]), "path": m["path"]}]
        return []

    def files(self) -> list[dict]:
        new = []
        for root in self.roots:
            step = (read_text(root / TRACKER) or "").strip()
            if step.isdigit() and step != self.saved[root]:
                self.saved[root] = step
                new.append({"type": "checkpoint_saved", "step": int(step),
                            "path": str(root / f"global_step_{step}")})
        return self._file_logger() + new

    def _file_logger(self) -> list[dict]:
        path = Path(self.trainer.env.get(FILE_LOGGER_VAR) or
                    self.run_dir / f"verl-metrics-{self.attempt}.jsonl")
        rows, self.file_offset = new_lines(path, self.file_offset)
        new = []
        for row in rows:
            try:
                entry = json.loads(row)
                step, data = int(entry["step"]), entry["data"]
            except (ValueError, KeyError, TypeError):
                continue
            new += self._step(step, finite({k: v if isinstance(v, (int, float)) and not
                                            isinstance(v, bool) else None
                                            for k, v in data.items()}))
        return new


class VerlAdapter(LogAdapter):
    name = "verl"
    reader = VerlReader

    def env(self, trainer, launch: TrainerLaunch) -> dict[str, str]:
        if FILE_LOGGER_VAR in trainer.env:
            return {}
        return {FILE_LOGGER_VAR: str(launch.run_dir / f"verl-metrics-{launch.attempt}.jsonl")}
