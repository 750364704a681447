"""The reference trainer (``trainer/``): ``python -m trainer --config ... key=value``; it writes
every event type the checks read, and per-step metrics for ``matches_baseline``."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
from pathlib import Path

from rlsim.adapters.base import (
    Adapter,
    TrainerFacts,
    TrainerLaunch,
    TrainerProblem,
    resolve,
)
from rlsim.fields import search
from trainer.events import RUN_EVENT_TYPES


class RlsimAdapter(Adapter):
    name = "rlsim"
    # all but worker_replaced: it never replaces a worker in place (a lost rank ends the attempt,
    # and the whole trainer restarts from its checkpoint), so a check counting replacements, or a
    # fault waiting for one, would judge or wait on something that never comes
    observes = (RUN_EVENT_TYPES - {"worker_replaced"}) | {"metrics.jsonl"}
    unseen_fix = ("the reference trainer never replaces a worker in place: a lost rank restarts "
                  "the whole trainer from its checkpoint; count those with restarts, or drop "
                  "the check")
    worker_table = True  # its placement event, every time the workers stand
    needs_dashboard = False  # a plain driver: no Ray library reads the dashboard's address

    def command(self, trainer, launch: TrainerLaunch) -> list[str]:
        return [launch.python, "-m", "trainer", "--config", trainer.config,
                f"run_dir={launch.run_dir}", *overrides(trainer, launch.attempt)]


    def resolve_paths(self, trainer, folder: Path) -> None:
        """``config`` is a preset's name, or a file relative to the scenario's folder."""
        from trainer.config import is_preset

        if trainer.config is not None and not is_preset(trainer.config):
            trainer.config = str(resolve(trainer.config, folder))

    def warm_workers(self, trainer, nodes: list | None = None) -> tuple[list[str], list[int]]:
        """What a worker of the reference trainer imports before its first step: torch,
        TorchDynamo (torch.use_deterministic_algorithms and DeepSpeed's ZeRO load it: 1.3-1.9 s
        of an actor's set-up on two cores) and the worker's module; on a host whose torch is a
        CPU build, also DeepSpeed where a training role runs on it (0.4 s) and vLLM's engine
        where the rollouts run on it (9.3 s). The plan's workers per logical node; none where
        the config does not load, or where ``nodes`` cannot hold the plan (too few GPU nodes, or
        GPUs the fake-GPU memory ledger finds too small): the run says why, before any worker
        starts, and workers started for it would be imports no one uses."""
        from trainer.config import load_config
        from trainer.placement import plan_placement

        try:
            with contextlib.chdir(trainer.workdir):
                cfg = load_config(trainer.config, overrides(trainer))
                plan = plan_placement(cfg)
        except Exception:  # noqa: BLE001 - a config that cannot run fails in its own words
            return [], []
        modules = ["torch", "torch._dynamo", "trainer.host"]
        if _torch_cpu_build():
            engines = {cfg.actor.engine} | ({cfg.critic.engine} if cfg.algorithm == "ppo"
                                            else set())
            modules += ["deepspeed"] * ("deepspeed" in engines)
            modules += ["vllm.entrypoints.llm"] * (cfg.rollout.engine == "vllm")
        places = nodes is None or _places(cfg, plan, nodes)
        return modules, [len(plan.on_node(k)) for k in range(plan.nnodes)] if places else []

    def inputs(self, trainer) -> list[Path]:
        """Its config file and the reference trainer's code."""
        import trainer as package
        from trainer.config import config_path

        return [config_path(trainer.config), *sorted(Path(package.__file__).parent.rglob("*.py"))]

    def facts(self, trainer, refusals: list[str]) -> TrainerFacts | None:
        """The reference trainer's config with the scenario's overrides, as the runner will start
        it, through its own pre-flight (data, model, resume, placement)."""
        from trainer.config import is_preset, load_config, preflight, presets
        from trainer.errors import ConfigError
        from trainer.placement import plan_placement

        where = (("trainer", "config"), "trainer.config")
        if is_preset(trainer.config) and trainer.config not in presets():
            raise TrainerProblem(*where, f"no preset {trainer.config!r} (the presets: "
                                 f"{', '.join(presets())}); or give the path of a YAML file of "
                                 "your own, relative to the scenario's folder")
        config = Path(trainer.config)
        if not is_preset(trainer.config) and config.exists() and not config.is_file():
            raise TrainerProblem(*where, _not_a_file(config))
        if not is_preset(trainer.config) and not config.is_file():
            raise TrainerProblem(*where, f"no such trainer config {trainer.config!r}; a path is "
                                 "relative to the scenario's folder; or name a preset "
                                 f"({', '.join(presets())})")
        try:
            with contextlib.chdir(trainer.workdir):  # the trainer's relative paths are its cwd's
                cfg = load_config(trainer.config, overrides(trainer))
                if "run_dir" not in trainer.overrides:  # the runner's: in its report folder
                    cfg = cfg.model_copy(update={"run_dir": str(trainer.workdir / "reports")})
                data = Path(cfg.data.path)
                if data.exists() and not data.is_file() and not data.is_dir():
                    # a device or a pipe would be read without end
                    raise ConfigError(f"data.path={cfg.data.path!r} is not a regular file. Fix: "
                                      "point data.path at a jsonl file such as "
                                      "trainer/presets/digits.jsonl (the default)")
                preflight(cfg)
                plan = plan_placement(cfg)
        except ConfigError as e:
            if any(search(pattern, str(e)) for pattern in refusals):
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


def overrides(trainer, attempt: int = 0) -> list[str]:
    """The section's overrides as the trainer's ``key=value`` arguments, ``{attempt}`` in a
    string value made the launch's number (0 for the first, n for the n-th relaunch: what a
    user changed before relaunching, such as the data). JSON is flow-style YAML: the trainer
    parses each value back with yaml.safe_load."""
    return [f"{k}={json.dumps(_at(v, attempt))}" for k, v in trainer.overrides.items()]


def _at(value, attempt: int):
    if isinstance(value, str):
        return value.replace("{attempt}", str(attempt))
    if isinstance(value, dict):
        return {k: _at(v, attempt) for k, v in value.items()}
    if isinstance(value, list):
        return [_at(v, attempt) for v in value]
    return value


def _torch_cpu_build() -> bool:
    """Whether the torch installed here has no GPU library beside it (libtorch_cuda, _hip).
    DeepSpeed and vLLM ask CUDA for its devices when imported, which fixes the devices a process
    sees: a worker that imported them before Ray gave it CUDA_VISIBLE_DEVICES would see every
    GPU of a real host. Only with fake GPUs may a warm worker import them ahead."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    lib = Path(spec.origin).parent / "lib"
    return lib.is_dir() and not any(lib.glob("libtorch_cuda*")) \
        and not any(lib.glob("libtorch_hip*"))


def _places(cfg, plan, nodes: list) -> bool:
    """Whether the reference trainer would place its workers on nodes of these shapes: as many
    nodes with the plan's GPUs as it asks for, and room on their GPUs by the fake-GPU memory
    ledger (the trainer reads the first GPU node's memory, head first, as here)."""
    from trainer.memory import fits, gpu_capacity

    gpu_nodes = [n for n in nodes if n.gpus >= plan.gpus_per_node]
    return len(gpu_nodes) >= plan.nnodes and \
        fits(cfg, plan, gpu_capacity(cfg, gpu_nodes[0].gpu_memory_gb))
