"""The KubeRay launcher ``rlsim launch kuberay`` writes: one RayJob (ray.io/v1). KubeRay starts a
cluster of a CPU head and ``--nodes`` GPU workers (``nvidia.com/gpu`` limits), submits the
entrypoint to it once the head is up, and deletes the cluster when the job ends
(``shutdownAfterJobFinishes``), or when ``activeDeadlineSeconds`` pass. The entrypoint waits
(bounded) until every GPU worker joined, runs the doctor and the scenarios with ``--backend
real``, and writes the report to a PersistentVolumeClaim (``rlsim-reports``, create it first)
mounted on the head at ``--report-dir``.

``rlsim launch kuberay-substrate`` writes a RayCluster instead: CPU pods that host simulated
clusters (a substrate, :mod:`rlsim.backends.substrate`), kept until deleted.

Each is validated against KubeRay's own CRD schema (rlsim/launch/schemas/kuberay-*.json.gz, from
ray-project/kuberay's ray-operator/config/crd/bases/), and against its pruning: a field the schema
does not know is refused, where Kubernetes would drop it without a word.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shlex
from importlib import metadata
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlsim.launch.model import Launch, head_steps, schema_problems

SCHEMAS = Path(__file__).parent / "schemas"
CLAIM = "rlsim-reports"
SHARED_CLAIM = "rlsim-shared"
SUBSTRATE = "rlsim-substrate"


def rayjob(launch: Launch) -> dict:
    if launch.gpus_per_node < 1:
        raise ValueError("--gpus-per-node: a KubeRay worker group of GPU nodes needs at least "
                         "1 GPU each (the wait counts nodes with that many GPUs)")
    if not launch.image:
        raise ValueError("--image: KubeRay runs every node as a pod of a container image; give "
                         "one with rlsim and Ray installed")
    report = f'{shlex.quote(launch.report_dir)}/"$(date +%Y%m%d-%H%M%S)"'
    # the job's driver runs on the head: Ray Jobs gives it the cluster's GCS as RAY_ADDRESS;
    # the cluster's own auth mode (KubeRay's default: none) unless the pod sets one
    steps = ['export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"', f"REPORT={report}",
             *head_steps(launch, "$RAY_ADDRESS", "$REPORT"), "exit $status"]
    mount = [{"name": "reports", "mountPath": launch.report_dir}]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rlsim-acceptance"},
        "spec": {
            "entrypoint": "bash -c " + _quote("; ".join(steps)),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 300,
            "activeDeadlineSeconds": launch.seconds,
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {"num-gpus": "0"},
                    "template": {"spec": {
                        "containers": [{"name": "ray-head", "image": launch.image,
                                        "volumeMounts": mount}],
                        "volumes": [{"name": "reports",
                                     "persistentVolumeClaim": {"claimName": CLAIM}}]}},
                },
                "workerGroupSpecs": [{
                    "groupName": "gpu",
                    "replicas": launch.nodes, "minReplicas": launch.nodes,
                    "maxReplicas": launch.nodes,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-worker", "image": launch.image,
                        "resources": {"limits": {"nvidia.com/gpu": launch.gpus_per_node},
                                      "requests": {"nvidia.com/gpu": launch.gpus_per_node}},
                    }]}},
                }],
            },
        },
    }


def schema(kind: str = "RayJob") -> dict:
    """KubeRay's schema of ``kind`` (RayJob, RayCluster) and where it came from."""
    return json.loads(gzip.decompress((SCHEMAS / f"kuberay-{kind.lower()}.json.gz").read_bytes()))


def problems(doc: dict) -> list[str]:
    """Where ``doc`` breaks KubeRay's CRD schema of its kind (empty: valid)."""
    s = schema(doc.get("kind", "RayJob"))["schema"]
    return schema_problems(s, doc) + pruned(s, doc)


def pruned(schema: dict, doc, path: str = "") -> list[str]:
    """The fields of ``doc`` a structural schema does not know: Kubernetes drops them when it
    stores the object (pruning), so a misspelt ``securityContext`` would leave a pod without
    it and no error anywhere."""
    out: list[str] = []
    if isinstance(doc, dict) and "properties" in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in schema:
        for key, value in doc.items():
            where = f"{path}.{key}" if path else key
            if key not in schema["properties"]:
                out.append(f"{where}: not in the schema; Kubernetes would drop it")
            else:
                out += pruned(schema["properties"][key], value, where)
    elif isinstance(doc, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, value in doc.items():
            out += pruned(schema["additionalProperties"], value, f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(doc):
            out += pruned(schema["items"], value, f"{path}.{i}")
    return out


class Substrate(BaseModel):
    """The RayCluster of CPU pods that hosts simulated clusters."""
    model_config = ConfigDict(extra="forbid")

    machines: int = Field(le=1024, description="CPU pods, the head's included: simulated "
                          "node i runs on pod i, so as many as the largest cluster's nodes")
    image: str = Field(description="the pods' image: rlsim, the driver's Ray release, iptables")
    shared_dir: str = Field(description="where every pod mounts the shared claim: the runs' "
                            "directories (checkpoints, reports) must be seen at one path")
    _one_line = field_validator("image", "shared_dir")(Launch._one_line.__func__)
    _absolute = field_validator("shared_dir")(Launch._absolute.__func__)

    @field_validator("machines")
    @classmethod
    def _two_or_more(cls, v: int) -> int:
        if v < 2:
            raise ValueError("a substrate spreads a simulated cluster over 2 pods or more; one "
                             "machine hosts it without a substrate (drop `on:`)")
        return v


def raycluster(s: Substrate) -> dict:
    # rlsim's nodes run as root on their machine: a network fault's iptables rules match a
    # simulated node's packets by its cgroup (-m cgroup), made under the pod's own, and
    # Kubernetes mounts /sys/fs/cgroup read-only in any container that is not privileged
    def pod(name: str) -> dict:
        security = {"privileged": True, "runAsUser": 0}
        return {"spec": {
            "containers": [{"name": name, "image": s.image, "securityContext": security,
                            "volumeMounts": [{"name": "shared", "mountPath": s.shared_dir}]}],
            "volumes": [{"name": "shared",
                         "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}]}}

    workers = s.machines - 1
    spec: dict = {
        # no GPUs anywhere: the simulated nodes' GPUs are fake, the pods only host processes
        "headGroupSpec": {"rayStartParams": {"num-gpus": "0"}, "template": pod("ray-head")},
        "workerGroupSpecs": [{
            "groupName": "machines", "replicas": workers, "minReplicas": workers,
            "maxReplicas": workers, "rayStartParams": {"num-gpus": "0"},
            "template": pod("ray-worker")}],
    }
    with contextlib.suppress(metadata.PackageNotFoundError):  # the driver's and the pods'
        spec = {"rayVersion": metadata.version("ray"), **spec}  # must be one Ray release
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": SUBSTRATE},
            "spec": spec}


def substrate_script(s: Substrate, name: str) -> str:
    doc = raycluster(s)
    if bad := problems(doc):  # never write a file KubeRay would reject
        raise ValueError("the RayCluster breaks KubeRay's schema: " + "; ".join(bad[:3]))
    crd = schema("RayCluster")
    return (f"# Written by `rlsim launch kuberay-substrate`: a RayCluster of {s.machines} CPU "
            f"pods that host simulated clusters.\n"
            f"# Pods: privileged, as root (iptables rules, the nodes' cgroups); no GPUs.\n"
            f"# Create the ReadWriteMany PersistentVolumeClaim {SHARED_CLAIM!r} first (mounted "
            f"at {s.shared_dir} on every pod:\n# run scenarios from there), then: kubectl apply "
            f"-f {name}\n"
            f"# A scenario on it: cluster: {{on: \"{SUBSTRATE}-head-svc:6379\"}}, run from a pod "
            f"(kubectl exec).\n"
            f"# Valid against KubeRay's RayCluster CRD ({crd['file']} @ {crd['describe']}).\n"
            + yaml.safe_dump(doc, sort_keys=False, width=100))


def script(launch: Launch, name: str) -> str:
    doc = rayjob(launch)
    if bad := problems(doc):  # never write a file KubeRay would reject
        raise ValueError("the RayJob breaks KubeRay's schema: " + "; ".join(bad[:3]))
    s = schema()
    return (f"# Written by `rlsim launch kuberay`: a RayJob on {launch.nodes} GPU worker(s) x "
            f"{launch.gpus_per_node} GPU(s) and a CPU head.\n# Create the PersistentVolumeClaim "
            f"{CLAIM!r} first (the report lands there), then: kubectl apply -f {name}\n"
            f"# Valid against KubeRay's RayJob CRD ({s['file']} @ {s['describe']}).\n"
            + yaml.safe_dump(doc, sort_keys=False, width=100))


def _quote(text: str) -> str:
    return shlex.quote(text)
