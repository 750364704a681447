"""The reference trainer (``trainer/``): ``python -m trainer --config ... key=value``; it writes
every event type the checks read, and per-step metrics for ``matches_baseline``."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from rlsim.adapters.base import REPO, Adapter, TrainerFacts, TrainerLaunch, TrainerProblem, resolve
from trainer.events import RUN_EVENT_TYPES


class RlsimAdapter(Adapter):
    name = "rlsim"
    observes = RUN_EVENT_TYPES | {"metrics.jsonl"}

    def command(self, trainer, launch: TrainerLaunch) -> list[str]:
        return [launch.python, "-m", "trainer", "--config", str(resolve(trainer.config)),
                f"run_dir={launch.run_dir}", *overrides(trainer)]


    def facts(self, trainer, refusals: list[str]) -> TrainerFacts | None:
        """The reference trainer's config with the scenario's overrides, as the runner will start
        it, through its own pre-flight (data, model, resume, placement)."""
        from trainer.config import load_config, preflight
        from trainer.errors import ConfigError
        from trainer.placement import plan_placement

        config = resolve(trainer.config)
        if config.exists() and not config.is_file():
            raise TrainerProblem(("trainer", "config"), "trainer.config", _not_a_file(config))
        if not config.is_file():
            raise TrainerProblem(("trainer", "config"), "trainer.config", f"no such trainer "
                                 f"config {trainer.config!r} (looked for {str(config)!r}); use a "
                                 "path under fixtures/trainer/")
        try:
            with contextlib.chdir(REPO):  # the trainer runs there: its relative paths are its
                cfg = load_config(config, overrides(trainer))
                if "run_dir" not in trainer.overrides:  # the runner's: in its report folder
                    cfg = cfg.model_copy(update={"run_dir": str(REPO / "reports")})
                data = Path(cfg.data.path)
                if data.exists() and not data.is_file() and not data.is_dir():
                    # a device or a pipe would be read without end
                    raise ConfigError(f"data.path={cfg.data.path!r} is not a regular file. Fix: "
                                      "point data.path at a jsonl file such as "
                                      "fixtures/data/digits.jsonl")
                preflight(cfg)
                plan = plan_placement(cfg)
        except ConfigError as e:
            if any(re.search(pattern, str(e)) for pattern in refusals):
                return None  # the scenario's story is this refusal
            raise _problem(trainer, " ".join(str(e).split())) from None
        ranks = {role: len(plan.of(role)) for role in cfg.roles()}
        return TrainerFacts(cfg.total_steps, "total_steps in trainer.overrides", ranks)


def _not_a_file(path: Path) -> str:
    kind = "a folder" if path.is_dir() else "a FIFO (named pipe)" if path.is_fifo() else \
        "a device or socket"
    return f"{str(path)!r} is {kind}, not a trainer config file; give a YAML file"


def _problem(trainer, msg: str) -> TrainerProblem:
    """The trainer's refusal placed at the override it names (else at ``trainer.config``)."""
    named = set(re.findall(r"`([\w.]+)`|'?([\w.]+)=", msg))
    named = {n for pair in named for n in pair if n}
    for key in trainer.overrides:
        if any(n == key or n.startswith(key + ".") or key.startswith(n + ".") for n in named):
            return TrainerProblem(("trainer", "overrides", key), f"trainer.overrides.{key}",
                                  f"the trainer refuses its config: {msg}")
    return TrainerProblem(("trainer", "config"), "trainer.config",
                          f"the trainer refuses its config: {msg}")


def overrides(trainer) -> list[str]:
    """The section's overrides as the trainer's ``key=value`` arguments. JSON is flow-style YAML:
    the trainer parses each value back with yaml.safe_load."""
    return [f"{k}={json.dumps(v)}" for k, v in trainer.overrides.items()]
