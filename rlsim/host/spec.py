"""What a simulated cluster is: its shape (nodes, GPUs, what each offers) and its spec (the shape,
its name and how its nodes run). What rlsim remembers of a running one is
:mod:`rlsim.host.state`."""

from __future__ import annotations

import os
import re
from typing import Literal

from packaging.version import InvalidVersion, Version
from pydantic import ConfigDict, Field, field_validator, model_validator

from rlsim.fields import DAY
from rlsim.host.health import HealthChecks
from rlsim.host.layout import CPU_WORKER_ROOM, MAX_NODES, worker_ports
from rlsim.host.shape import NODE_TYPES, NodeShape, ResolvedNode, ShapeChecks, resolve

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
SESSION_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}-([0-9a-f]{8})$")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a cluster (it becomes a file name in the home), or None."""
    if NAME_RE.match(name):
        return None
    return (f"cluster name {name!r} must be 1-32 of a-z, 0-9, '-', '_' and start with a letter "
            "or digit")


class ClusterShape(ShapeChecks):
    """How many nodes and what each offers: the one model of a cluster's shape, with its one set
    of defaults and limits. The CLI's options, the pytest fixture, a scenario's ``cluster``
    section and the cluster spec the runner starts all are this model (or extend it)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    nodes: int = Field(2, ge=1, le=MAX_NODES, description="nodes, the head included")
    gpus_per_node: int = Field(8, ge=0, le=64, description="fake GPUs each node advertises")
    gpu_memory_gb: float = Field(80.0, gt=0, le=4096, description="GiB per fake GPU")
    cpus_per_node: int = Field(4, ge=1, le=1024, description="CPUs each node advertises")
    memory_gb: float | None = Field(
        None, gt=0, le=1024 * 1024,
        description="GiB of Ray's `memory` resource each node advertises (what bundles and "
                    "actors that ask for memory are placed against); unset, each node advertises "
                    "Ray's estimate from the whole host's memory, as every node shares it")
    accelerator: str | None = Field(
        None, description="the accelerator type each node reports, as Ray reports a real GPU "
                          "node's (e.g. H100, A100, L40S): the resource accelerator_type:<X> and "
                          "the label ray.io/accelerator-type")
    cuda_devices: str | None = Field(
        None, description="the host's real GPUs behind the nodes' GPUs, as CUDA_VISIBLE_DEVICES "
                          "lists them ('0', '0,1', GPU UUIDs): a node's GPU j is device j mod "
                          "their number, so one real GPU can stand behind every GPU of every "
                          "node. Each node's raylet is given that CUDA_VISIBLE_DEVICES and Ray "
                          "hands each worker its GPU's entry. Unset: fake GPUs, which a trainer "
                          "treats as the CPU (RLSIM_FAKE_GPUS) even on a host with real ones "
                          "(local backend)")
    env: dict[str, str] = Field(
        default_factory=dict, description="environment every node's processes start with (a Ray "
                                          "worker inherits its raylet's): what a framework's "
                                          "workers read that its driver does not pass on, e.g. "
                                          "{VLLM_CPU_KVCACHE_SPACE: '1'}")
    cuda_standin: bool = Field(
        False, description="the device stand-in on every node whose GPUs are fake: torch in the "
                           "node's Python processes sees the GPUs Ray gave the process as CUDA "
                           "devices whose memory is the host's (docs/concepts/"
                           "device-standin.md), so a framework with no CPU path runs unmodified; "
                           "NCCL groups become gloo groups on the node's address")
    resources: dict[str, float] = Field(
        default_factory=dict, description="custom resources each node advertises, as "
                                          "`ray start --resources` gives them")
    labels: dict[str, str] = Field(
        default_factory=dict, description="labels each node carries, as `ray start --labels` "
                                          "gives them")
    like: str | None = Field(
        None, description="a real node type (rlsim.host.shape.NODE_TYPES, e.g. p5.48xlarge) whose "
                          "GPUs, GPU memory, accelerator type, CPUs and memory every node "
                          "takes; fields given beside it win")
    node: dict[int, NodeShape] = Field(
        default_factory=dict,
        description="node index -> that node's own shape where it differs (gpus, gpu_memory_gb, "
                    "cpus, memory_gb, accelerator, like; resources and labels add to the "
                    "cluster's), e.g. {3: {gpus: 4, accelerator: A100, gpu_memory_gb: 40}}")
    ready_timeout_s: float = Field(60.0, gt=0, le=DAY, description="bound on one node's "
                                   "(re)start; a whole cluster's start gets it once per node")
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
    gcs_ft: Literal["none", "redis"] = Field(
        "none", description="redis: the GCS keeps its tables in a Redis server the cluster runs "
                            "beside the head (Ray's GCS fault tolerance), so a head restarted "
                            "at its address recovers them (local backend)")

    @model_validator(mode="before")
    @classmethod
    def _apply_like(cls, data):
        # the node type's figures fill what the cluster leaves out; what it gives wins (an
        # unknown name is left to _like_ok, which names the field)
        if isinstance(data, dict) and isinstance(data.get("like"), str) and \
                data["like"] in NODE_TYPES:  # (a list there is _like_ok's to name, no TypeError)
            data = {**NODE_TYPES[data["like"]].shape(), **data}
        return data

    @field_validator("env")
    @classmethod
    def _env_ok(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env: {key!r} is not a variable name (letters, digits and _, "
                                 "not starting with a digit)")
            if key.startswith("RLSIM_") or key in ("CUDA_VISIBLE_DEVICES", "PYTHONPATH"):
                raise ValueError(f"env: {key} is set by rlsim on every node (its labels, the "
                                 "nodes' GPUs, the device stand-in's start-up hook); fix: drop it")
        return v

    @model_validator(mode="after")
    def _nodes_ok(self) -> ClusterShape:
        bad = [i for i in self.node if not 0 <= i < self.nodes]
        if bad:
            raise ValueError(f"node {bad[0]} has a shape of its own, but the cluster has nodes "
                             f"0..{self.nodes - 1} (nodes={self.nodes}): shape one of those or "
                             "start more nodes")
        if self.cuda_devices is not None and self.gpus_per_node == 0 and not any(
                n.gpus for n in self.node.values()):
            raise ValueError("cuda_devices needs GPUs: the real devices stand behind the nodes' "
                             "GPUs; give the nodes GPUs or drop cuda_devices")
        if self.cuda_standin and any(n.cuda_devices for n in self.node_shapes()):
            raise ValueError("cuda_standin with cuda_devices: the stand-in refuses to start where "
                             "a real GPU is visible, and real devices need one; fix: drop one of "
                             "them")
        if self.cuda_standin and not any(n.gpus and not n.cuda_devices
                                         for n in self.node_shapes()):
            raise ValueError("cuda_standin needs fake GPUs: it stands in for them on nodes that "
                             "have GPUs and no cuda_devices; give the nodes GPUs (gpus_per_node) "
                             "or drop cuda_standin")
        if self.accelerator is not None and self.gpus_per_node == 0:
            raise ValueError("an accelerator type needs GPUs: Ray reports one only on nodes that "
                             "have GPUs; give the nodes GPUs or drop the accelerator")
        for n in self.node_shapes():
            where = f"node {n.index}: " if n.index in self.node else ""
            if self.node.get(n.index) and self.node[n.index].cuda_devices and not n.gpus:
                raise ValueError(f"{where}cuda_devices needs GPUs: the real devices stand "
                                 "behind the node's GPUs; give the node GPUs or drop them")
            if self.node.get(n.index) and self.node[n.index].accelerator and not n.gpus:
                raise ValueError(f"{where}an accelerator type needs GPUs: Ray reports one only "
                                 "on nodes that have GPUs; give the node GPUs or drop its "
                                 "accelerator")
            # a node runs a worker per fake GPU and per CPU task at once, the driver and an agent
            # beside them; each holds a port of the node's range, and with none left Ray cannot
            # start a worker (the driver then prints "No available ports" and the task waits).
            # CPUs count up to CPU_WORKER_ROOM (see there)
            need = n.gpus + min(n.cpus, CPU_WORKER_ROOM) + 2
            have = worker_ports(self.nodes)
            if need > have:
                gpus = "gpus" if where else "gpus_per_node"
                raise ValueError(
                    f"{where}nodes={self.nodes} with {gpus}={n.gpus}: each node may run {need} "
                    f"Ray workers at once (one per GPU, up to {CPU_WORKER_ROOM} for CPU tasks, "
                    f"the driver and an agent) but has {have} worker ports in a cluster of "
                    f"{self.nodes} nodes; use fewer nodes or GPUs per node")
        return self

    def node_shapes(self) -> list[ResolvedNode]:
        """Each node's shape, node 0 (the head) first."""
        fields = self.model_dump(include={"gpus_per_node", "gpu_memory_gb", "cpus_per_node",
                                          "memory_gb", "accelerator", "resources", "labels",
                                          "cuda_devices"})
        return [resolve(i, fields, self.node.get(i)) for i in range(self.nodes)]

    def gpus(self) -> int:
        """GPUs of the whole cluster."""
        return sum(n.gpus for n in self.node_shapes())

    def shape(self) -> dict:
        """The shape's fields alone (what a subclass adds left out)."""
        return self.model_dump(include=set(ClusterShape.model_fields))


class ClusterSpec(ClusterShape):
    """A simulated cluster to start: its shape, its name and how its nodes run. Node 0 is the
    head."""

    model_config = ConfigDict(extra="forbid")

    name: str = "rlsim"
    object_store_mb: int = Field(128, ge=64)
    health: HealthChecks = Field(default_factory=HealthChecks)
    dashboard: bool = Field(
        True, description="run the head's dashboard (the Jobs API: `ray job submit`); a "
                          "scenario's trainer is a plain driver and needs none")
    forward_logs: bool = Field(
        True, description="every node runs Ray's log monitor, which forwards the prints of the "
                          "node's actors to their drivers, as each machine of a real cluster "
                          "does; off, no node runs one: actors' prints stay in each node's "
                          "worker logs, and each node is one process (~80 MB, 0.7 s of CPU to "
                          "start) lighter")
    preload_modules: list[str] = Field(
        default_factory=list,
        description="Python modules every Ray worker of the cluster imports before it takes "
                    "work (Ray's worker preload): a trainer's actors then start on a worker that "
                    "has imported torch already")
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
        problem = name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _per_node_ok(self) -> ClusterSpec:
        problem = per_node_problem(self.nodes, self.ray_version, self.python)
        if problem:
            raise ValueError(problem)
        return self


def per_node_problem(nodes: int, ray_version: dict[int, str], python: dict[int, str],
                     on_this_host: bool = True) -> str | None:
    """Why a cluster's per-node settings cannot hold, or None: every index a node of the cluster,
    every Ray version PEP 440, every interpreter an absolute path (and, ``on_this_host``, an
    executable here; see :func:`python_problem`)."""
    for field, values in (("ray_version", ray_version), ("python", python)):
        bad = [i for i in values if not 0 <= i < nodes]
        if bad:
            return (f"{field} names node {bad[0]}; the cluster has nodes 0..{nodes - 1}: use "
                    "one of those indices")
    for index, version in ray_version.items():
        if problem := ray_version_problem(version):
            return f"node {index}: {problem}"
    for index, path in python.items():
        if problem := python_problem(path, on_this_host):
            return f"node {index}: {problem}"
    return None


def ray_version_problem(version: str) -> str | None:
    """Why ``version`` cannot be a node's Ray version, or None. The string ends up inside Python
    source in the node (its ray/_version.py), so only a plain PEP 440 version will do."""
    try:
        Version(version)
    except InvalidVersion:
        return f"ray_version {version!r} is not a PEP 440 version: write it as e.g. '2.59.0'"
    if version != version.strip():
        return f"ray_version {version!r} has surrounding whitespace: write it as e.g. '2.59.0'"
    return None


def python_problem(path: str, on_this_host: bool = True) -> str | None:
    """Why ``path`` cannot be a node's Python interpreter (it is executed as given), or None.
    ``on_this_host=False`` checks only its form: a scenario file names an interpreter that the
    host running it must have, and a host without it skips the scenario, naming the part."""
    if not os.path.isabs(path):
        return (f"python {path!r} is not an absolute path: give the interpreter's full path, "
                "e.g. /usr/bin/python3")
    if not on_this_host:
        return None
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return (f"python {path!r} is not an executable file on this host: install it or give "
                "another interpreter's full path")
    return None
