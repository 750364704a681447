"""``rlsim plan --rehearse``: create a launch's placement groups, in its order and shapes, on a
simulated cluster of the planned shape, each waited for a bounded time, and report which Ray
placed where and which it could not (instead of waiting forever, as the frameworks do). Everything
is torn down after.

The groups are created by a driver of their own (``python -m rlsim.plan.rehearse``, reading the
groups as JSON on stdin): Ray's driver state stays out of the rlsim process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rlsim.plan.model import Placement

NODE_PIN = "rlsim_node_{}"  # a resource every simulated node has: 0.001 of it pins a bundle


def rehearse(p: Placement, timeout_s: float) -> dict:
    """Run the rehearsal on a fresh local cluster shaped like ``p.nodes``; the result as data."""
    from rlsim.backends.local import LocalCluster
    from rlsim.host.spec import ClusterSpec

    per_node = max(n.gpus for n in p.nodes)
    cpus = {n.cpus for n in p.nodes}
    # unset CPUs: enough for any framework's bundles (verl asks 3 a GPU), as on real GPU nodes
    cpu_count = int(cpus.pop()) if len(cpus) == 1 and None not in cpus else 4 * per_node + 4
    spec = ClusterSpec(name=f"plan-{os.getpid()}", nodes=len(p.nodes), gpus_per_node=per_node,
                       cpus_per_node=max(1, cpu_count), dashboard=False, forward_logs=False,
                       node={i: {"gpus": n.gpus} for i, n in enumerate(p.nodes)
                             if n.gpus != per_node})
    groups = [{"name": g.name, "strategy": "STRICT_PACK" if g.strategy == "NODE" else g.strategy,
               "bundles": [{**b, **({NODE_PIN.format(g.node): 0.001} if g.node is not None
                                    else {})} for b in g.bundles()]}
              for g in p.layout.groups]
    with LocalCluster(spec) as cluster:
        out = subprocess.run(
            [sys.executable, "-m", "rlsim.plan.rehearse"],
            input=json.dumps({"groups": groups, "timeout_s": timeout_s,
                              "addresses": [n.address for n in cluster.nodes()]}),
            env={**os.environ, **cluster.driver_env()}, capture_output=True, text=True,
            timeout=60 + timeout_s * (len(groups) + 1))
    if out.returncode:
        raise RuntimeError(f"rehearsal driver exited {out.returncode}: {out.stderr[-1500:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(cluster=", ".join(f"node {i}: {n.gpus} GPUs" for i, n in enumerate(p.nodes))
                  + f", {cpu_count} CPUs each", timeout_s=timeout_s)
    return result


def main() -> int:
    import time

    import ray
    from ray.util.placement_group import (
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

    from rlsim.ray_internals.gcs import free_per_node

    job = json.loads(sys.stdin.read())
    ray.init(logging_level="ERROR", log_to_driver=False)
    index = {a: i for i, a in enumerate(job["addresses"])}
    where = {n["NodeID"]: index.get(n["NodeManagerAddress"]) for n in ray.nodes()}
    made, results = [], []
    try:
        for g in job["groups"]:
            t0 = time.monotonic()
            pg = placement_group(g["bundles"], strategy=g["strategy"])
            made.append(pg)
            placed = pg.wait(job["timeout_s"])
            table = placement_group_table(pg)
            free = free_per_node()
            results.append({
                "name": g["name"], "placed": placed, "seconds": round(time.monotonic() - t0, 3),
                "state": table.get("state"),
                "nodes": sorted({where.get(n) for n in table.get("bundles_to_node_id", {})
                                 .values()} - {None}),
                "free": ", ".join(f"node {where.get(n)}: {r.get('GPU', 0):g} GPUs "
                                  f"{r.get('CPU', 0):g} CPUs"
                                  for n, r in sorted(free.items(), key=lambda x: str(
                                      where.get(x[0])))),
            })
    finally:
        for pg in made:
            remove_placement_group(pg)
    print(json.dumps({"groups": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
