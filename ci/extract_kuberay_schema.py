"""Write a KubeRay CRD's OpenAPI schema (KubeRay's own, ray-operator/config/crd/bases/
ray.io_<plural>.yaml) as gzipped JSON, with where it came from: what `rlsim launch kuberay`'s
RayJob and `rlsim launch kuberay-substrate`'s RayCluster are validated against
(rlsim/launch/schemas).

    python ci/extract_kuberay_schema.py KUBERAY_GIT_DIR rayjobs \
        > rlsim/launch/schemas/kuberay-rayjob.json.gz
    python ci/extract_kuberay_schema.py KUBERAY_GIT_DIR rayclusters \
        > rlsim/launch/schemas/kuberay-raycluster.json.gz
"""
import gzip
import json
import subprocess
import sys

import yaml

repo, plural = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "rayjobs"
path = f"ray-operator/config/crd/bases/ray.io_{plural}.yaml"
commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                        check=True).stdout.strip()
tag = subprocess.run(["git", "-C", repo, "describe", "--tags"], capture_output=True,
                     text=True).stdout.strip()
crd = yaml.safe_load(subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"],
                                    capture_output=True, text=True, check=True).stdout)
version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
out = {"source": "github.com/ray-project/kuberay", "commit": commit, "describe": tag,
       "file": path, "apiVersion": f"{crd['spec']['group']}/{version['name']}",
       "kind": crd["spec"]["names"]["kind"], "schema": version["schema"]["openAPIV3Schema"]}
sys.stdout.buffer.write(gzip.compress(json.dumps(out, separators=(",", ":")).encode(), 9))
