"""What a scenario file says, as pydantic models: cluster, trainer, faults on a schedule, checks.

A scenario reads top to bottom as a story::

    name: node_failure_mid_run
    tags: [node_failure]
    cluster: {nodes: 3, gpus_per_node: 2}
    trainer: {config: fixtures/trainer/grpo_tiny.yaml, overrides: {save_freq: 5}}
    faults:
      - at: {step: 7}
        kill_node: {node: 1}
    expect:
      - completes: {}
      - restarts: {min: 1}
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlsim.spec import per_node_problem

NodeRef = int | Literal["random"]
DAY = 86400.0  # no fault, wait or run in a scenario lasts longer
OVERRIDE_KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PORT_NAMES = re.compile(r"^(gcs|dashboard|client|(workers|daemons):(\d{1,2}))$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e}); escape special characters "
                         "with a backslash") from None
    return pattern


class ClusterSection(_Strict):
    nodes: int = Field(3, ge=1, le=16)
    gpus_per_node: int = Field(2, ge=0, le=64)
    gpu_memory_gb: float = Field(80.0, gt=0, le=4096)
    backend: Literal["local", "docker", "real"] = "local"
    ready_timeout_s: float = Field(60, gt=0, le=DAY, description="bound on one node's (re)start (a "
                                   "cluster's start: once per node)")
    ray_version: dict[int, str] = Field(
        default_factory=dict,
        description="node index -> the Ray version that node's package reports (docker: a node "
                    "built from another image)")
    python: dict[int, str] = Field(
        default_factory=dict,
        description="node index -> the Python interpreter that node runs (docker: a path on the "
                    "host, as if that node's image shipped another Python release)")
    checkpoint_storage: Literal["shared", "node_local"] = Field(
        "shared",
        description="shared: every node sees the trainer's checkpoint directory (NFS, a shared "
                    "volume); node_local: each node has its own disk there (docker)")
    skip_on: dict[Literal["local", "docker", "real"], str] = Field(
        default_factory=dict,
        description="backend -> why this scenario's story does not hold there (it is skipped "
                    "with that reason)")

    @model_validator(mode="after")
    def _versions_on_nodes(self) -> ClusterSection:
        # the interpreter's form only: the host that runs the scenario must have it, or skips it
        problem = per_node_problem(self.nodes, self.ray_version, self.python, on_this_host=False)
        if problem:
            raise ValueError(problem)
        return self


class TrainerSection(_Strict):
    config: str = Field(description="trainer YAML, relative to the repository root or absolute")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted key -> value")

    @field_validator("overrides")
    @classmethod
    def _keys_ok(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        for key in overrides:
            if not OVERRIDE_KEY.match(key):
                raise ValueError(f"override key {key!r} is not a trainer config key: write a "
                                 "dotted name such as total_steps or actor.lr")
        return overrides
    timeout_s: float = Field(300, gt=0, le=7 * DAY, description="the whole run, faults included")


class At(_Strict):
    """When a fault fires: at a trainer step, seconds after the trainer started, or an event."""

    step: int | None = Field(None, ge=1)
    seconds: float | None = Field(None, ge=0, le=DAY)
    event: str | None = None

    @model_validator(mode="after")
    def _one_trigger(self) -> At:
        if self.seconds is not None and (self.step is not None or self.event is not None):
            raise ValueError("give `seconds`, or `step`, or `event` (with an optional `step`)")
        if self.seconds is None and self.step is None and self.event is None:
            raise ValueError("say when: {step: N}, {seconds: S} or {event: NAME}")
        return self


# -- faults: parameters of each, by name -----------------------------------------------------------
class KillNode(_Strict):
    node: NodeRef


class RestartNode(_Strict):
    node: NodeRef


class PauseNode(_Strict):
    node: NodeRef


class Partition(_Strict):
    groups: list[list[int]] = Field(min_length=1,
                                    description="node groups cut off from the rest and each other")

    @field_validator("groups")
    @classmethod
    def _each_node_once(cls, groups: list[list[int]]) -> list[list[int]]:
        seen: set[int] = set()
        for group in groups:
            if not group:
                raise ValueError("an empty group cuts nothing off: drop it")
            for n in group:
                if n in seen:
                    raise ValueError(f"node {n} is named twice; a node is in one group at most")
                seen.add(n)
        return groups


class BlockPort(_Strict):
    node: int = Field(description="the node whose port is blocked")
    port: str | int | list[int] = Field(
        description="gcs | dashboard | workers:<i> | 6379 | [lo, hi]")
    sources: list[int] | None = Field(None, description="nodes that lose it (default: all others)")

    @field_validator("port")
    @classmethod
    def _port_ok(cls, port: str | int | list[int]) -> str | int | list[int]:
        if isinstance(port, str) and not PORT_NAMES.match(port):
            raise ValueError(f"unknown port name {port!r}; use gcs, dashboard, client, "
                             "workers:<node>, daemons:<node>, a port number or [low, high]")
        ports = [port] if isinstance(port, int) else port if isinstance(port, list) else []
        if isinstance(port, list) and len(port) != 2:
            raise ValueError(f"a port range is [low, high], got {len(port)} numbers")
        for n in ports:
            if not 1 <= n <= 65535:
                raise ValueError(f"port {n} is out of range: TCP ports are 1-65535")
        if len(ports) == 2 and ports[0] > ports[1]:
            raise ValueError(f"port range {port}: the low end comes first")
        return port


class KillRole(_Strict):
    role: Literal["actor", "rollout", "ref", "critic", "reward"]
    rank: int = Field(0, ge=0, le=4096)


class CorruptCheckpoint(_Strict):
    mode: Literal["truncate", "bitflip", "delete"] = "bitflip"
    which: Literal["latest"] = "latest"


class GpuOom(_Strict):
    node: NodeRef
    gb: float = Field(gt=0, le=4096, description="GiB taken on every GPU of the node")


class HostOom(_Strict):
    node: NodeRef
    mb: int = Field(128, gt=0, le=1 << 20,
                    description="MiB a hog takes on the node once it has no free memory")


class KillHead(_Strict):
    pass


FAULTS: dict[str, type[_Strict]] = {
    "kill_node": KillNode, "restart_node": RestartNode, "pause_node": PauseNode,
    "partition": Partition, "block_port": BlockPort, "kill_role": KillRole,
    "corrupt_checkpoint": CorruptCheckpoint, "gpu_oom": GpuOom, "host_oom": HostOom,
    "kill_head": KillHead,
}


class FaultEntry(BaseModel):
    """``{at: {...}, <fault>: {...}, for_s: S}``: one fault, when, and for how long."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    at: At
    for_s: float | None = Field(None, gt=0, le=DAY,
                                description="heal after S seconds (else at the end)")

    @model_validator(mode="after")
    def _one_fault(self) -> FaultEntry:
        names = list(self.model_extra or {})
        unknown = [n for n in names if n not in FAULTS]
        if unknown:
            raise ValueError(f"unknown fault {unknown[0]!r}; known: {', '.join(FAULTS)}")
        if len(names) != 1:
            raise ValueError(f"one fault per entry, found {names or 'none'}")
        try:
            FAULTS[names[0]].model_validate(self.model_extra[names[0]] or {})
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise ValueError(f"{names[0]}.{field}: {msg}") from None
        return self

    @property
    def kind(self) -> str:
        return next(iter(self.model_extra))

    @property
    def params(self) -> _Strict:
        return FAULTS[self.kind].model_validate(self.model_extra[self.kind] or {})


# -- expectations ------------------------------------------------------------------------------
class Completes(_Strict):
    pass


class Fails(_Strict):
    pattern: str = Field(".*", description="regex the trainer's error must match")
    within_s: float | None = Field(None, gt=0, le=DAY, description="after the trainer started")

    _pattern = field_validator("pattern")(_regex)


class ResumedFromStep(_Strict):
    step: int = Field(ge=0)


class Restarts(_Strict):
    min: int = Field(0, ge=0)
    max: int | None = Field(None, ge=0)


class FinalStep(_Strict):
    step: int = Field(ge=0)


class DetectedWithinS(_Strict):
    seconds: float = Field(gt=0, le=DAY)


class RecoveredWithinS(_Strict):
    seconds: float = Field(gt=0, le=DAY)


class MatchesBaseline(_Strict):
    weights: bool = Field(True, description="also compare final weights bit for bit")


class RewardImproves(_Strict):
    by: float = Field(0.1, description="mean of the last 5 steps minus the first 5")


class NoLeaks(_Strict):
    pass


class Refused(_Strict):
    """The cluster refuses to form (a node cannot join) before any training, in words that
    match ``pattern``."""

    pattern: str = Field(".*", description="regex the start-up error must match")

    _pattern = field_validator("pattern")(_regex)


class DoctorWarns(_Strict):
    """The pre-flight ``rlsim doctor`` (run before the trainer starts) reported a finding that
    matches ``pattern``."""

    pattern: str = Field(description="regex one of the doctor's findings must match")

    _pattern = field_validator("pattern")(_regex)


class DoctorClean(_Strict):
    """The pre-flight ``rlsim doctor`` reported no finding at all."""


class Event(_Strict):
    """A trainer event of this type appears at least ``min`` and at most ``max`` times."""

    type: str
    min: int = Field(1, ge=0)
    max: int | None = Field(None, ge=0)


CHECKS: dict[str, type[_Strict]] = {
    "completes": Completes, "fails": Fails, "resumed_from_step": ResumedFromStep,
    "restarts": Restarts, "final_step": FinalStep, "detected_within_s": DetectedWithinS,
    "recovered_within_s": RecoveredWithinS, "matches_baseline": MatchesBaseline,
    "reward_improves": RewardImproves, "no_leaks": NoLeaks, "event": Event, "refused": Refused,
    "doctor_warns": DoctorWarns, "doctor_clean": DoctorClean,
}


class Scenario(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,62}$")
    tags: list[str] = Field(default_factory=list)
    description: str = ""
    seed: int = 0
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    trainer: TrainerSection
    faults: list[FaultEntry] = Field(default_factory=list)
    expect: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("expect")
    @classmethod
    def _checks(cls, expect: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, entry in enumerate(expect):
            if len(entry) != 1:
                raise ValueError(f"expect[{i}]: one check per entry, found {list(entry)}")
            (name, params), = entry.items()
            if name not in CHECKS:
                raise ValueError(f"expect[{i}]: unknown check {name!r}; known: {', '.join(CHECKS)}")
            try:
                CHECKS[name].model_validate(params or {})
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(str(x) for x in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                raise ValueError(f"expect[{i}].{name}.{field}: {msg}") from None
        return expect

    @model_validator(mode="after")
    def _nodes(self) -> Scenario:
        last = self.cluster.nodes - 1
        for i, fault in enumerate(self.faults):
            where = f"faults[{i}].{fault.kind}"
            for field in ("node", "sources", "groups"):
                for n in _nodes(getattr(fault.params, field, None)):
                    if not 0 <= n <= last:
                        raise ValueError(f"{where}.{field}: node {n} is outside the cluster "
                                         f"(nodes 0-{last})")
            if getattr(fault.params, "node", None) == "random" and last < 1:
                raise ValueError(f"{where}.node: random picks a node other than the head, and "
                                 "this cluster has only the head: name node 0 or add nodes")
            port = getattr(fault.params, "port", None)
            m = PORT_NAMES.match(port) if isinstance(port, str) else None
            if m and m.group(3) is not None and int(m.group(3)) > last:
                raise ValueError(f"{where}.port: {port!r} names node {m.group(3)}, outside the "
                                 f"cluster (nodes 0-{last})")
        return self

    def checks(self) -> list[tuple[str, _Strict]]:
        return [(name, CHECKS[name].model_validate(p or {}))
                for entry in self.expect for name, p in entry.items()]


def _nodes(value) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [n for v in value for n in _nodes(v)]
    return []
