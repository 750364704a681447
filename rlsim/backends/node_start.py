"""Start Ray nodes of one rlsim cluster: ``python -m rlsim.backends.node_start NAME I [I ...]``.

Runs in a child process of its own so that the caller never carries the cluster's labels or Ray's
process-global state. Nodes start one after another through Ray's ``Node`` class (what
``ray start`` and ``ray.cluster_utils.Cluster`` use), which is thread-unsafe and CPU-bound on a
small machine: measured here, starting three worker nodes in parallel processes took 5.0 s against
3.3 s one after another. Processes are detached (no reaper, no fate sharing): they outlive this
launcher and are found again by their ``RLSIM_SESSION`` / ``RLSIM_NODE`` environment labels.

Prints one JSON object per started node on stdout: ``{"index": i, "raylet_pid": pid}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rlsim.backends import redis_store
from rlsim.contract import MEMORY_LABEL
from rlsim.host import cgroups, procs, state
from rlsim.host.home import auth_token_path
from rlsim.host.state import ClusterState

ADDRESSES_VAR = "RLSIM_NODE_ADDRESSES"  # docker nodes: every node's address, JSON
# Each node also advertises its fake GPUs under this name, as Ray's own release tests do: a
# framework that runs on the CPU but places one worker per GPU asks for it (Ray Train refuses
# "GPU" in resources_per_worker with use_gpu=False; {"MOCK_GPU": 1} places the same way).
GPU_ALIAS = "MOCK_GPU"
# What Ray sets on a node whose GPUs it recognises: a resource of 1 named after the accelerator
# type, and a label. User labels may not use Ray's "ray.io/" prefix; Ray's autoscaler sets such
# labels for the nodes it launches through RAY_OVERRIDE_LABELS, and so does the launcher.
ACCELERATOR_RESOURCE = "accelerator_type:"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
OVERRIDE_LABELS_VAR = "RAY_OVERRIDE_LABELS"


def cluster_env(st: ClusterState) -> dict[str, str]:
    """Environment shared by every process of the cluster (never set in the caller's process)."""
    return {
        **procs.labels(st.session),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(auth_token_path()),
        "RAY_USAGE_STATS_ENABLED": "0",
        # No metrics export: a raylet otherwise waits for its dashboard agent's exporter before
        # it registers (0.7 s a node here: 4 x 8 up in 7.5 s instead of 8.7 s), and nothing of a
        # simulated cluster reads the metrics (Ray's own `ray.util.metrics` calls become no-ops)
        "RAY_enable_metrics_collection": "0",
        # No idle workers forked ahead of demand: on 2 cores they steal CPU from bring-up. The
        # scenario runner asks each raylet for the ones its trainer will use instead
        # (StartedCluster.prestart_workers).
        "RAY_enable_worker_prestart": "0",
        "RAY_prestart_worker_first_driver": "0",
        # the head's metrics servers inside the cluster's own port block
        "AUTOSCALER_METRIC_PORT": str(st.layout.autoscaler_metrics_port),
        "DASHBOARD_METRIC_PORT": str(st.layout.dashboard_metrics_port),
        # As after `source .venv/bin/activate; ray start`: a Ray Job's entrypoint (`python
        # train.py`) and any other command a node runs find the nodes' own Python and packages
        "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                 os.environ.get("PATH", os.defpath)]),
        **st.spec.health.env(),
        # the modules a worker imports before it registers (Ray's --worker-preload-modules)
        **({"RAY_preload_python_modules": ",".join(st.spec.preload_modules)}
           if st.spec.preload_modules else {}),
    }


def ray_params(st: ClusterState, index: int, addresses: list[str] | None = None):
    """Ray's parameters for node ``index``. ``addresses`` replace the plan's loopback addresses
    for nodes that live in their own network namespace (docker); the dashboard then listens on
    the container's loopback."""
    from ray._private.parameter import RayParams

    plan = st.layout
    node = plan.nodes[index]
    spec = st.spec
    p = node.ports
    address = addresses[index] if addresses else node.address
    gcs_address = f"{addresses[0]}:{plan.gcs_port}" if addresses else plan.gcs_address
    shape = spec.node_shapes()[index]
    gpus = st.gpus_left.get(index, shape.gpus)  # fewer once one was lost (gpu_lost)
    kwargs = dict(
        node_ip_address=address,
        num_cpus=shape.cpus,
        num_gpus=gpus,
        resources={**shape.resources, f"rlsim_node_{index}": 1.0,
                   **({GPU_ALIAS: gpus} if gpus else {}),
                   **({ACCELERATOR_RESOURCE + shape.accelerator: 1.0} if shape.accelerator
                      else {})},
        labels={**shape.labels, "rlsim-node-index": str(index),
                MEMORY_LABEL: f"{shape.gpu_memory_gb:g}"},
        memory=int(shape.memory_gb * 2**30) if shape.memory_gb else None,
        object_store_memory=spec.object_store_mb * 1024 * 1024,
        temp_dir=str(st.node_dir(index)),
        node_manager_port=p.node_manager,
        object_manager_port=p.object_manager,
        metrics_agent_port=p.metrics_agent,
        dashboard_agent_listen_port=p.dashboard_agent_listen,
        runtime_env_agent_port=p.runtime_env_agent,
        metrics_export_port=p.metrics_export,
        min_worker_port=p.min_worker,
        max_worker_port=p.max_worker,
    )
    if index == 0:
        kwargs.update(
            gcs_server_port=plan.gcs_port,
            include_dashboard=spec.dashboard,
            dashboard_host="127.0.0.1" if addresses else address,
            dashboard_port=plan.dashboard_port,
            **redis_store.head_params(st),
        )
    else:
        # Each node has its own temp dir here, so the head's log monitor sees only the head's
        # logs: a worker node forwards its actors' prints ("(TaskRunner pid=N, ip=X) ...") to
        # their drivers only with a monitor of its own (spec.forward_logs).
        kwargs.update(gcs_address=gcs_address, include_log_monitor=spec.forward_logs)
    return RayParams(**kwargs)


def start_node(st: ClusterState, index: int, addresses: list[str] | None = None) -> int:
    """Start node ``index`` and return its raylet's pid. Must run in a launcher process."""
    import ray._private.node
    import ray._private.utils

    os.environ[procs.NODE_VAR] = str(index)
    if st.cgroups:
        cgroups.NodeGroup(st.session, index).enter()
    st.node_dir(index).mkdir(parents=True, exist_ok=True)
    params = ray_params(st, index, addresses)
    accelerator = st.spec.node_shapes()[index].accelerator
    if accelerator:
        os.environ[OVERRIDE_LABELS_VAR] = json.dumps({ACCELERATOR_LABEL: accelerator})
    try:
        node = ray._private.node.Node(params, head=index == 0, shutdown_at_exit=False,
                                      spawn_reaper=False)
    finally:
        os.environ.pop(OVERRIDE_LABELS_VAR, None)
    # What `ray start` writes and Ray's "auto" address reads in this node's temp dir: a Ray Job's
    # supervisor resolves its driver's RAY_ADDRESS from it. Without it Ray falls back to any
    # gcs_server process on the machine, which with two clusters at once (pytest -n 2) was
    # another cluster's.
    gcs = f"{addresses[0]}:{st.layout.gcs_port}" if addresses else st.layout.gcs_address
    ray._private.utils.write_ray_address(gcs, params.temp_dir)
    return node.all_processes["raylet"][0].process.pid


def _reap_forever() -> None:
    """PID 1 of a container adopts every orphan (Ray workers whose raylet died): reap them."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


def main(argv: list[str]) -> int:
    name, indices = argv[0], [int(i) for i in argv[1:]]
    st = state.load(name)
    if st is None:
        print(f"no rlsim cluster named {name!r} is registered", file=sys.stderr)
        return 2
    os.environ.update(cluster_env(st))
    addresses = json.loads(os.environ[ADDRESSES_VAR]) if ADDRESSES_VAR in os.environ else None
    if addresses is not None:  # PID 1 of a docker node: start it, then keep the container alive
        pid = start_node(st, indices[0], addresses)
        print(json.dumps({"index": indices[0], "raylet_pid": pid}), flush=True)
        _reap_forever()
    for index in indices:
        pid = start_node(st, index)
        print(json.dumps({"index": index, "raylet_pid": pid}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
