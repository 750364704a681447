"""The KubeRay launcher ``rlsim launch kuberay`` writes: one RayJob (ray.io/v1). KubeRay starts a
cluster of a CPU head and ``--nodes`` GPU workers (``nvidia.com/gpu`` limits), submits the
entrypoint to it once the head is up, and deletes the cluster when the job ends
(``shutdownAfterJobFinishes``), or when ``activeDeadlineSeconds`` pass. The entrypoint waits
(bounded) until every GPU worker joined, runs the doctor and the scenarios with ``--backend
real``, and writes the report to a PersistentVolumeClaim (``rlsim-reports``, create it first)
mounted on the head at ``--report-dir``.

Validated against KubeRay's own RayJob CRD schema (rlsim/launch/schemas/kuberay-rayjob.json.gz,
from ray-project/kuberay's ray-operator/config/crd/bases/ray.io_rayjobs.yaml).
"""

from __future__ import annotations

import gzip
import json
import shlex
from pathlib import Path

import yaml

from rlsim.launch.model import Launch, head_steps, schema_problems

SCHEMA = Path(__file__).parent / "schemas" / "kuberay-rayjob.json.gz"
CLAIM = "rlsim-reports"


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


def schema() -> dict:
    """KubeRay's RayJob schema and where it came from."""
    return json.loads(gzip.decompress(SCHEMA.read_bytes()))


def problems(doc: dict) -> list[str]:
    """Where ``doc`` breaks KubeRay's RayJob CRD schema (empty: valid)."""
    return schema_problems(schema()["schema"], doc)


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
