"""What one simulated node offers: the real node types a cluster can look like (``like``), one
node's own shape where it differs from the rest (``node: {3: {gpus: 4}}``), and the shape each node
ends up with. Pure data: :class:`rlsim.host.spec.ClusterShape` uses it, the launcher reads
:class:`ResolvedNode` to start each node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# Resource names Ray or rlsim set on every node: a custom resource of the same name would clash
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "MOCK_GPU")
RESERVED_RESOURCE_PREFIXES = ("accelerator_type:", "node:", "rlsim_node_")
RESERVED_LABEL_PREFIXES = ("ray.io/", "rlsim-")
ACCELERATOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A label key as Ray checks it (an optional DNS-name prefix and "/", then a name of up to 63
# alphanumerics, '-', '_', '.'); values likewise, or empty
LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?"
                          r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

# Ray's default object store on a node: 30% of its available memory, at most 200 GB
# (ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION and DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES)
OBJECT_STORE_SHARE = 0.3
OBJECT_STORE_CAP_GIB = 200e9 / 2**30


def ray_memory_gib(ram_gib: float) -> float:
    """Ray's ``memory`` resource on a node of ``ram_gib`` GiB started with Ray's defaults: the
    memory less the object store's share. (A running node subtracts what its OS already uses, a
    few GiB, too: the figure is that much above what ``ray status`` shows there.)"""
    return round(ram_gib - min(OBJECT_STORE_SHARE * ram_gib, OBJECT_STORE_CAP_GIB), 1)


@dataclass(frozen=True)
class NodeType:
    """A real GPU node type, with its figures as its vendor publishes them."""

    name: str
    gpus: int
    gpu_name: str  # as NVML (nvidia-smi) names the GPU: what Ray derives the accelerator type from
    accelerator: str  # what Ray reports for it: the resource accelerator_type:<X>, the label
    gpu_memory_gb: float
    cpus: int  # logical CPUs (vCPUs, hyperthreads): what Ray counts as the node's CPU
    ram_gib: float
    source: str

    def shape(self) -> dict:
        """The cluster-shape fields this node type gives a node (``memory_gb`` as Ray would
        advertise it there: :func:`ray_memory_gib`)."""
        return {"gpus_per_node": self.gpus, "gpu_memory_gb": self.gpu_memory_gb,
                "cpus_per_node": self.cpus, "memory_gb": ray_memory_gib(self.ram_gib),
                "accelerator": self.accelerator}


_AWS_P5 = "https://aws.amazon.com/ec2/instance-types/p5/"
_AWS_P4 = "https://aws.amazon.com/ec2/instance-types/p4/"
_GCP = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
NODE_TYPES: dict[str, NodeType] = {t.name: t for t in (
    NodeType("p5.48xlarge", 8, "NVIDIA H100 80GB HBM3", "H100", 80, 192, 2048, _AWS_P5),
    NodeType("p5en.48xlarge", 8, "NVIDIA H200", "H200", 141, 192, 2048, _AWS_P5),
    NodeType("p4de.24xlarge", 8, "NVIDIA A100-SXM4-80GB", "A100", 80, 96, 1152, _AWS_P4),
    NodeType("p4d.24xlarge", 8, "NVIDIA A100-SXM4-40GB", "A100", 40, 96, 1152, _AWS_P4),
    NodeType("g6e.12xlarge", 4, "NVIDIA L40S", "L40S", 48, 48, 384,
             "https://aws.amazon.com/ec2/instance-types/g6e/"),
    NodeType("g5.48xlarge", 8, "NVIDIA A10G", "A10G", 24, 192, 768,
             "https://docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html"),
    NodeType("a3-highgpu-8g", 8, "NVIDIA H100 80GB HBM3", "H100", 80, 208, 1872 * 1e9 / 2**30,
             _GCP),
    NodeType("a2-ultragpu-8g", 8, "NVIDIA A100-SXM4-80GB", "A100", 80, 96, 1360 * 1e9 / 2**30,
             _GCP),
    NodeType("a2-highgpu-8g", 8, "NVIDIA A100-SXM4-40GB", "A100", 40, 96, 680 * 1e9 / 2**30,
             _GCP),
    # 2x Xeon Platinum 8480C (56 cores each, 2 threads a core), 2 TB
    NodeType("dgx-h100", 8, "NVIDIA H100 80GB HBM3", "H100", 80, 224, 2048,
             "https://www.nvidia.com/en-us/data-center/dgx-h100/"),
    # the 640 GB model: 2x AMD EPYC 7742 (64 cores each, 2 threads a core), 2 TB
    NodeType("dgx-a100", 8, "NVIDIA A100-SXM4-80GB", "A100", 80, 256, 2048,
             "https://www.nvidia.com/en-us/data-center/dgx-a100/"),
)}


def node_type_problem(name: str) -> str | None:
    """Why ``name`` is not a node type rlsim knows, or None."""
    if name in NODE_TYPES:
        return None
    return f"no node type {name!r}: use one of {', '.join(NODE_TYPES)}"


def resources_problem(resources: dict[str, float]) -> str | None:
    """Why custom resources cannot be a node's (a name Ray or rlsim sets itself), or None."""
    for name, amount in resources.items():
        if name in RESERVED_RESOURCES or name.startswith(RESERVED_RESOURCE_PREFIXES):
            return (f"{name!r} is set by Ray or rlsim on every node; give your resource another "
                    f"name (e.g. custom_{name.split(':')[0]})")
        if not name or len(name) > 128 or any(c.isspace() for c in name):
            return f"{name!r}: a resource name is 1-128 characters without spaces"
        if not 0 <= amount <= 1e9:
            return f"{name}: {amount:g} must be between 0 and 1e9"
    return None


def labels_problem(labels: dict[str, str]) -> str | None:
    """Why labels cannot be a node's (Ray's and rlsim's own prefixes, Ray's syntax), or None."""
    for key, value in labels.items():
        if key.startswith(RESERVED_LABEL_PREFIXES):
            return (f"{key!r}: the prefixes {', '.join(RESERVED_LABEL_PREFIXES)} are Ray's and "
                    "rlsim's own (an accelerator type is set as accelerator); use another key")
        if not LABEL_KEY_RE.match(key):
            return (f"{key!r} is not a label key: up to 63 letters, digits, '-', '_', '.' "
                    "(starting and ending with a letter or digit), optionally after a DNS "
                    "prefix and '/'")
        if not LABEL_VALUE_RE.match(value):
            return (f"{key}={value!r}: a label value is up to 63 letters, digits, '-', '_', "
                    "'.', starting and ending with a letter or digit")
    return None


def accelerator_problem(accelerator: str | None) -> str | None:
    if accelerator is not None and not ACCELERATOR_RE.match(accelerator):
        return (f"accelerator {accelerator!r}: write an accelerator type as Ray names it, e.g. "
                "H100, A100, L40S")
    return None


CUDA_ID_RE = re.compile(r"^(\d+|(GPU|MIG)-[0-9A-Za-z/-]+)$")


def cuda_devices_problem(devices: str | None) -> str | None:
    """What is wrong with a ``cuda_devices`` value (CUDA_VISIBLE_DEVICES' form), or None."""
    if devices is None:
        return None
    ids = devices.split(",")
    if not all(CUDA_ID_RE.match(i) for i in ids):
        return (f"cuda_devices {devices!r}: write the host's GPUs as CUDA_VISIBLE_DEVICES lists "
                "them, comma-separated ordinals or UUIDs, e.g. '0' or '0,1' or 'GPU-8f3c...'")
    return None


def visible_devices(devices: str, gpus: int) -> str:
    """The CUDA_VISIBLE_DEVICES of a node with ``gpus`` GPUs standing on the real ``devices``:
    GPU j is device j mod len(devices), so fewer devices than GPUs are shared (one real GPU can
    stand behind every GPU of every node). Ray gives the worker that holds GPU j that entry."""
    ids = devices.split(",")
    return ",".join(ids[j % len(ids)] for j in range(gpus))


class ShapeChecks(BaseModel):
    """What a shape's ``like``, ``accelerator``, ``resources`` and ``labels`` must be, wherever
    they are given: a cluster's (:class:`rlsim.host.spec.ClusterShape`) or one node's."""

    @field_validator("like", check_fields=False)
    @classmethod
    def _like_ok(cls, v: str | None) -> str | None:
        if v is not None and (problem := node_type_problem(v)):
            raise ValueError(problem)
        return v

    @field_validator("accelerator", check_fields=False)
    @classmethod
    def _accelerator_ok(cls, v: str | None) -> str | None:
        if problem := accelerator_problem(v):
            raise ValueError(problem)
        return v

    @field_validator("cuda_devices", check_fields=False)
    @classmethod
    def _cuda_devices_ok(cls, v: str | None) -> str | None:
        if problem := cuda_devices_problem(v):
            raise ValueError(problem)
        return v

    @field_validator("resources", "labels", check_fields=False)
    @classmethod
    def _names_ok(cls, v: dict, info: ValidationInfo) -> dict:
        check = resources_problem if info.field_name == "resources" else labels_problem
        if problem := check(v):
            raise ValueError(problem)
        return v


class NodeShape(ShapeChecks):
    """One node's own shape, where it differs from the cluster's: what it leaves out, the node
    takes from its ``like`` node type, then from the cluster."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    like: str | None = Field(None, description="a real node type (rlsim.host.shape.NODE_TYPES)")
    gpus: int | None = Field(None, ge=0, le=64, description="fake GPUs")
    gpu_memory_gb: float | None = Field(None, gt=0, le=4096, description="GiB per fake GPU")
    cpus: int | None = Field(None, ge=1, le=1024, description="CPUs")
    memory_gb: float | None = Field(None, gt=0, le=1024 * 1024,
                                    description="GiB of Ray's memory resource")
    accelerator: str | None = Field(None, description="accelerator type (e.g. A100)")
    cuda_devices: str | None = Field(
        None, description="the host's real GPUs behind this node's GPUs (see the cluster's "
                          "cuda_devices)")
    resources: dict[str, float] = Field(default_factory=dict,
                                        description="custom resources, added to the cluster's")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="labels, added to the cluster's")


@dataclass(frozen=True)
class ResolvedNode:
    """What one node of a cluster advertises, all defaults and overrides applied."""

    index: int
    gpus: int
    gpu_memory_gb: float
    cpus: int
    memory_gb: float | None
    accelerator: str | None
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    cuda_devices: str | None = None

    def describe(self) -> str:
        """One line: e.g. ``8x H100 80G, 192 CPU, 1862 GiB``."""
        return describe(self.gpus, self.accelerator, self.gpu_memory_gb, self.cpus,
                        self.memory_gb)


def describe(gpus: int, accelerator: str | None, gpu_memory_gb: float | str | None, cpus: float,
             memory_gb: float | None) -> str:
    """A node's shape in one line, as ``rlsim status`` shows it: ``8x H100 80G, 192 CPU,
    1862 GiB`` (``no GPU``; the memory left out where unknown)."""
    gpu = "no GPU" if not gpus else f"{gpus}x {accelerator or 'GPU'}" + (
        f" {float(gpu_memory_gb):g}G" if gpu_memory_gb else "")
    return f"{gpu}, {cpus:g} CPU" + (f", {memory_gb:.0f} GiB" if memory_gb else "")


def resolve(index: int, cluster: dict, own: NodeShape | None) -> ResolvedNode:
    """Node ``index``'s shape: its own fields, else its ``like`` node type's, else the
    cluster's (``cluster``: the cluster-shape fields, its preset already applied). A GPU-less
    node reports no accelerator type (Ray sets one only where it finds GPUs)."""
    own = own or NodeShape()
    preset = NODE_TYPES[own.like].shape() if own.like else {}

    def pick(own_value, cluster_field: str):
        if own_value is not None:
            return own_value
        return preset.get(cluster_field, cluster[cluster_field])

    gpus = pick(own.gpus, "gpus_per_node")
    accelerator = pick(own.accelerator, "accelerator") if gpus else None
    return ResolvedNode(
        index=index, gpus=gpus, gpu_memory_gb=pick(own.gpu_memory_gb, "gpu_memory_gb"),
        cpus=pick(own.cpus, "cpus_per_node"), memory_gb=pick(own.memory_gb, "memory_gb"),
        accelerator=accelerator, resources={**cluster["resources"], **own.resources},
        labels={**cluster["labels"], **own.labels},
        cuda_devices=pick(own.cuda_devices, "cuda_devices") if gpus else None)
