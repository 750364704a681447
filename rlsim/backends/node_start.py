"""Start Ray nodes of one rlsim cluster: ``python -m rlsim.backends.node_start NAME I [I ...]``.

Runs in a child process of its own so that the caller never carries the cluster's labels or Ray's
process-global state. Nodes start through Ray's ``Node`` class (what ``ray start`` and
``ray.cluster_utils.Cluster`` use): the head first, then the others from one thread each, which
take turns setting up and spawning and overlap only while their raylets start (see
``_SPAWN_LOCK``). Separate launcher processes were slower here (three worker nodes 5.0 s against
3.3 s one after another): each launcher's imports cost the CPU the overlap saved. Processes are
detached (no reaper, no fate sharing): they outlive this launcher and are found again by their
``RLSIM_SESSION`` / ``RLSIM_NODE`` environment labels.

Prints one JSON object per started node on stdout: ``{"index": i, "raylet_pid": pid}``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlsim.backends import redis_store
from rlsim.backends.worker_setup import AGENT_FLAG, AGENT_ZYGOTE_VAR, ZYGOTE_VAR
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
# What a raylet runs to start a worker: Ray's setup_worker.py without its imports (see there)
WORKER_SETUP = str(Path(__file__).with_name("worker_setup.py"))


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
        # A raylet connects to its own object store, started by a thread of its own a moment
        # before; a first try that finds no socket yet waited 1000 ms (Ray's default) before
        # the next: seen here on every second node start, 1.0 s to the millisecond. Tries every
        # 50 ms instead, as many as keep Ray's 10 s in all (10 x 1 s), for every process of the
        # node that connects to a local socket (workers to their raylet too)
        "RAY_raylet_client_connect_timeout_milliseconds": "50",
        "RAY_raylet_client_num_connect_attempts": "200",
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
        setup_worker_path=WORKER_SETUP,
    )
    if index == 0:
        kwargs.update(
            # its log monitor forwards the head's actors' prints, as a worker node's does
            include_log_monitor=spec.forward_logs,
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


def _wait_registered(gcs_address: str, node_id: str, timeout_s: float = 30.0) -> None:
    """Return once node ``node_id`` is alive in the GCS's node table (polled every 20 ms)."""
    import ray._private.services
    from ray._private.state import GlobalState

    gs = GlobalState()
    gs._initialize_global_state(ray._private.services._get_gcs_client_options(gcs_address))
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(n["NodeID"] == node_id and n["Alive"] for n in gs.node_table()):
                return
            time.sleep(0.02)
    finally:
        gs.disconnect()


def _poll_registration_often() -> None:
    """Make Ray's ``Node()`` see its raylet registered as soon as it is, and let other nodes
    start meanwhile.

    ``Node()`` returns once the GCS knows its raylet, asking through the C++
    ``GlobalStateAccessor::GetNode``, which asks again only a whole second after a miss. Wrapped,
    Ray's call is made once the node table shows the node (polled every 20 ms), and answers at
    its first try; during the wait the thread gives up ``_SPAWN_LOCK``. This process exists only
    to start nodes: the wrapper lives and dies with it.
    """
    import ray._private.services as services

    if getattr(services.get_node, "rlsim_polled", False):
        return
    get_node = services.get_node

    def get_node_when_registered(gcs_address, node_id):
        _SPAWN_LOCK.release()
        try:
            _wait_registered(gcs_address, node_id)
        finally:
            _SPAWN_LOCK.acquire()
        return get_node(gcs_address, node_id)

    get_node_when_registered.rlsim_polled = True
    services.get_node = get_node_when_registered


@functools.cache
def _node_class():
    """Ray's ``Node`` (what ``ray start`` and ``ray.cluster_utils.Cluster`` use), less the
    dashboard process when the head runs without the dashboard."""
    import ray._private.node

    class Node(ray._private.node.Node):
        def start_api_server(self, *, include_dashboard, raise_on_failure):
            # With include_dashboard=False Ray still starts its dashboard process, with one
            # module, usage stats (which rlsim turns off), and waits for it to publish its URL:
            # 0.9 s of the head's start here, 0.7 s of CPU. Without it the cluster is as Ray
            # leaves one whose dashboard failed to start: no URL published, nothing else
            # touched.
            if include_dashboard is not False:
                super().start_api_server(include_dashboard=include_dashboard,
                                         raise_on_failure=raise_on_failure)

    return Node


DASHBOARD_AGENT_FLAG = "--dashboard_agent_command="
RUNTIME_ENV_AGENT_FLAG = "--runtime_env_agent_command="


def _agent_commands(lean: bool, forked: bool) -> None:
    """Rewrite the agent commands of every raylet this launcher starts. ``lean``: the dashboard
    agent runs through :mod:`rlsim.backends.node_agent` (no dashboard modules), for a cluster
    without the dashboard. ``forked``: both agents start through
    :mod:`rlsim.backends.worker_setup`, forked from the cluster's agent zygote.

    Ray builds the agents' commands inside ``services.start_raylet`` and hands the raylet a
    ``--dashboard_agent_command`` and a ``--runtime_env_agent_command``; the raylet's command is
    rewritten on its way to ``start_ray_process``. This process exists only to start nodes: the
    wrapper lives and dies with it.
    """
    import ray
    import ray._private.ray_constants as ray_constants
    import ray._private.services as services
    import ray._private.utils

    if getattr(services.start_ray_process, "rlsim_agents", False):
        return
    if lean:
        # Ray decides whether an agent runs "--minimal" by importing the dashboard's
        # dependencies (aiohttp, opentelemetry, prometheus: 0.86 s of this launcher's CPU, before
        # the head's raylet starts); the agents of this cluster run minimal whatever is installed
        ray._private.utils.get_dashboard_dependency_error = lambda: ImportError(
            "rlsim: this cluster runs no dashboard")
    start = services.start_ray_process
    script = subprocess.list2cmdline([str(Path(ray.__file__).parent / "dashboard" / "agent.py")])
    # what Ray runs an agent with (a memory profiler's command instead is left alone)
    python_u = subprocess.list2cmdline([sys.executable, "-u"]) + " "
    fork = subprocess.list2cmdline([sys.executable, WORKER_SETUP, AGENT_FLAG, "-u"]) + " "

    def rewrite(arg: str) -> str:
        if lean and arg.startswith(DASHBOARD_AGENT_FLAG):
            arg = arg.replace(script, "-m rlsim.backends.node_agent", 1)
        for flag in (DASHBOARD_AGENT_FLAG, RUNTIME_ENV_AGENT_FLAG):
            if forked and arg.startswith(flag + python_u):
                arg = flag + fork + arg[len(flag + python_u):]
        return arg

    def start_agents(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [rewrite(arg) for arg in command]
        return start(command, process_type, *args, **kwargs)

    start_agents.rlsim_agents = True
    services.start_ray_process = start_agents


# Ray's Node() reads this process's environment and its processes are born in this process's
# cgroups: one node at a time may be set up and spawned. A node start holds the lock except while
# it waits for its raylet to register, most of a node's start (the raylet waits for its two
# agents, Python processes that import for 0.6-0.9 s here), so those waits overlap.
_SPAWN_LOCK = threading.Lock()


def start_node(st: ClusterState, index: int, addresses: list[str] | None = None) -> int:
    """Start node ``index`` and return its raylet's pid. Must run in a launcher process; safe
    to call from several threads at once."""
    import ray._private.utils

    _poll_registration_often()
    _agent_commands(lean=not st.spec.dashboard, forked=AGENT_ZYGOTE_VAR in os.environ)
    accelerator = st.spec.node_shapes()[index].accelerator
    with _SPAWN_LOCK:
        os.environ[procs.NODE_VAR] = str(index)
        if st.cgroups:
            cgroups.NodeGroup(st.session, index).enter()
        st.node_dir(index).mkdir(parents=True, exist_ok=True)
        params = ray_params(st, index, addresses)
        if accelerator:
            os.environ[OVERRIDE_LABELS_VAR] = json.dumps({ACCELERATOR_LABEL: accelerator})
        try:
            node = _node_class()(params, head=index == 0, shutdown_at_exit=False,
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


def start_nodes(st: ClusterState, indices: list[int]) -> None:
    """Start the head first when it is among ``indices`` (the others join its GCS), then the
    rest at once, printing each started node's line as it comes up; raise the first failure
    after every start has ended. (Starting the others while the head's raylet starts measured
    slower here, 6.3-7.2 s against 4.7-4.9 s for 4 x 8: on 2 cores every agent's imports
    compete, the head's too.)"""

    def start(index: int) -> None:
        pid = start_node(st, index)
        with _PRINT_LOCK:
            print(json.dumps({"index": index, "raylet_pid": pid}), flush=True)

    if 0 in indices:
        start(0)
    rest = [i for i in indices if i != 0]
    # a few at a time: on 2 cores three worker nodes start in 2.4 s at once and 3.1 s in turn,
    # but 31 at once would each take the whole fleet's CPU time to register
    with concurrent.futures.ThreadPoolExecutor(min(4, max(1, len(rest)))) as pool:
        futures = [pool.submit(start, i) for i in rest]
    for f in futures:
        f.result()


_PRINT_LOCK = threading.Lock()


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
    start_zygotes(st)
    start_nodes(st, indices)
    return 0


# What `import ray` imports from outside Ray (measured with torch already imported: 0.17 of
# its 0.28 s of CPU here). None of them reads Ray's per-worker settings, so the zygote imports
# them for every worker; Ray itself each worker imports (rlsim.backends.zygote.NEVER_HERE). One
# that is not installed (another Ray release) only leaves its import to the workers.
RAY_DEPENDENCIES = ["google.protobuf.message_factory", "google.protobuf.internal.builder",
                    "grpc", "requests", "jsonschema", "yaml", "psutil", "msgpack", "filelock",
                    "attrs", "packaging.version", "uvloop", "tqdm", "pdb"]


def zygote_modules(st: ClusterState) -> list[str]:
    """What the cluster's zygote imports for its workers: the preloaded modules, less the
    trainer's own (a worker imports those itself, in its node's environment) and vLLM's (its
    engine starts processes and threads of its own: not forked from a shared parent here),
    then Ray's dependencies; nothing where the workers preload nothing."""
    modules = [m for m in st.spec.preload_modules if m.split(".")[0] not in ("trainer", "vllm")]
    return [*modules, *RAY_DEPENDENCIES] if modules else []


# What a node's agents import before they serve: forked from one process that imported them
# (each agent imported them itself, 0.5 s of CPU apiece, two agents a node, before its raylet
# registers)
AGENT_MODULES = ["ray.dashboard.agent", "ray._private.runtime_env.agent.main"]
# An agent forked from the agent zygote has the zygote for its parent. Ray's default watch on
# the raylet compares the agent's parent with RAY_RAYLET_PID and ends an agent whose parent
# differs (five checks, 2 s); with the pipe check the raylet hands each agent a pipe on stdin,
# which the client passes on, and the agent ends when it reads the end of it: the raylet gone.
PIPE_CHECK_VAR = "RAY_enable_pipe_based_agent_to_parent_health_check"


def start_zygotes(st: ClusterState) -> None:
    """Where node cgroups exist (a forked process is found by its node's cgroup): one zygote
    forks the nodes' agents (:data:`AGENT_MODULES`), and, where the workers preload something,
    another forks the workers (:mod:`rlsim.backends.zygote`). Started once per cluster, before
    any node, outside every node's cgroup (a node kill must not end them); a node started later
    (a restart) finds them by their variables, set in this process's environment."""
    if not st.cgroups:
        return
    os.environ[PIPE_CHECK_VAR] = "1"  # before the agent zygote imports Ray's dashboard constants
    _start_zygote(st, "agents", AGENT_ZYGOTE_VAR, AGENT_MODULES, agents=True)
    if modules := zygote_modules(st):
        _start_zygote(st, "zygote", ZYGOTE_VAR, modules)


def _start_zygote(st: ClusterState, name: str, var: str, modules: list[str],
                  agents: bool = False) -> None:
    from rlsim.backends import zygote

    path = zygote.socket_path(st.root, name)
    os.environ[var] = path
    if zygote.answers(path):
        return
    with open(st.root / f"{name}.log", "a") as log:
        subprocess.Popen([sys.executable, "-m", "rlsim.backends.zygote", path, ",".join(modules),
                          *(["--agents"] if agents else [])],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
