"""What a simulated cluster is (its spec) and what rlsim remembers of a running one (its state)."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlsim.net.alloc import MAX_NODES, ClusterPlan, plan_cluster

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def rlsim_home() -> Path:
    """Where rlsim keeps state, tokens and node temp dirs (``RLSIM_HOME``, default /tmp/.rlsim).

    Kept short on purpose: Ray puts unix sockets under it and socket paths are limited to 107 bytes.
    """
    return Path(os.environ.get("RLSIM_HOME", "/tmp/.rlsim"))


def home_id() -> str:
    """Eight hex digits naming this home on the machine: what rlsim creates outside the home
    (iptables chains, container labels, docker networks) carries it, so that a reaper or
    ``down --all`` touches only what this home made, never another user's or CI job's."""
    return hashlib.sha256(str(rlsim_home().resolve()).encode()).hexdigest()[:8]


class HealthChecks(BaseModel):
    """GCS health-check settings for every node. Tuned far below Ray's production defaults
    (5000 ms initial delay, 3000 ms period, 10000 ms timeout, 5 failures) so that a dead node is
    declared dead in about a second instead of tens of seconds."""

    model_config = ConfigDict(extra="forbid")

    initial_delay_ms: int = Field(1000, ge=0)
    period_ms: int = Field(300, ge=50)
    timeout_ms: int = Field(1000, ge=50)
    failure_threshold: int = Field(3, ge=1)

    def env(self) -> dict[str, str]:
        return {
            "RAY_health_check_initial_delay_ms": str(self.initial_delay_ms),
            "RAY_health_check_period_ms": str(self.period_ms),
            "RAY_health_check_timeout_ms": str(self.timeout_ms),
            "RAY_health_check_failure_threshold": str(self.failure_threshold),
        }


class ClusterSpec(BaseModel):
    """The shape of a simulated cluster. Node 0 is the head."""

    model_config = ConfigDict(extra="forbid")

    name: str = "rlsim"
    nodes: int = Field(4, ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(8, ge=0, le=64)
    gpu_memory_gb: float = Field(80.0, gt=0)
    cpus_per_node: int = Field(4, ge=1)
    object_store_mb: int = Field(128, ge=64)
    health: HealthChecks = Field(default_factory=HealthChecks)
    ready_timeout_s: float = Field(60.0, gt=0, description="bound on one node's (re)start; a "
                                   "whole cluster's start gets it once per node")
    dashboard: bool = Field(
        True, description="run the head's dashboard (the Jobs API: `ray job submit`); a "
                          "scenario's trainer is a plain driver and needs none")
    ray_version: dict[int, str] = Field(
        default_factory=dict,
        description="node index -> the Ray version its package reports (docker only: that node's "
                    "container sees a ray/_version.py saying so, as if built from another image)")
    python: dict[int, str] = Field(
        default_factory=dict,
        description="node index -> the Python interpreter that node runs (docker only: a path on "
                    "the host, e.g. the distribution's /usr/bin/python3 beside a pyenv or venv "
                    "Python; it imports the same environment, so it must be the same minor "
                    "version)")
    node_local: list[str] = Field(
        default_factory=list,
        description="directories each node has its own copy of, as on a node-local disk (docker: "
                    "a volume per node mounted at that path, inside the shared mounts)")
    mounts: list[str] = Field(
        default_factory=list,
        description="host directories every node sees read-write at the same path (docker; "
                    "local nodes share the host's filesystem anyway)")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                f"cluster name {v!r} must be 1-32 of a-z, 0-9, '-', '_' and start with a letter "
                "or digit"
            )
        return v


class ClusterState(BaseModel):
    """What rlsim records about a running cluster, in ``<home>/clusters/<name>.json``.

    Enough for another shell (``rlsim status``, ``rlsim down``) or a reaper to find everything the
    cluster created: its processes by ``session``, its iptables chain by ``slot``.
    """

    spec: ClusterSpec
    slot: int
    session: str
    backend: str = "local"
    owner_pid: int
    detached: bool = False
    created: float = Field(default_factory=time.time)
    cgroups: bool = Field(False, description="node i lives in cgroup rlsim/<session>/n<i>")
    pids: dict[int, int] = Field(default_factory=dict, description="node index -> raylet pid")

    @property
    def plan(self) -> ClusterPlan:
        return plan_cluster(self.slot, self.spec.nodes)

    @property
    def root(self) -> Path:
        return rlsim_home() / "run" / self.spec.name

    def node_dir(self, index: int) -> Path:
        return self.root / f"n{index}"
