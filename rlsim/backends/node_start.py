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
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlsim import ray_internals as ri
from rlsim import standin
from rlsim.backends import redis_store
from rlsim.contract import FAKE_GPUS_VAR, MEMORY_LABEL
from rlsim.host import cgroups, listeners, procs, state
from rlsim.host.home import auth_token_path, home_id
from rlsim.host.shape import visible_devices
from rlsim.host.state import ClusterState
from rlsim.ray_internals import launch
from rlsim.ray_internals.worker_setup import AGENT_ZYGOTE_VAR, ZYGOTE_VAR

ADDRESSES_VAR = "RLSIM_NODE_ADDRESSES"  # docker nodes: every node's address, JSON
# Each node also advertises its fake GPUs under this name, as Ray's own release tests do: a
# framework that runs on the CPU but places one worker per GPU asks for it (Ray Train refuses
# "GPU" in resources_per_worker with use_gpu=False; {"MOCK_GPU": 1} places the same way).
GPU_ALIAS = "MOCK_GPU"
# What Ray sets on a node whose GPUs it recognises: a resource of 1 named after the accelerator
# type, and a label. User labels may not use Ray's "ray.io/" prefix; Ray's autoscaler sets such
# labels for the nodes it launches, and so does the launcher (launch.start).
ACCELERATOR_RESOURCE = "accelerator_type:"
ACCELERATOR_LABEL = "ray.io/accelerator-type"


def cluster_env(st: ClusterState, addresses: list[str] | None = None) -> dict[str, str]:
    """Environment shared by every process of the cluster (never set in the caller's process);
    ``addresses``: the nodes' own, where they are not the plan's (docker)."""
    return {
        **procs.labels(st.session),
        # Ray's libraries resolve their cluster from RAY_ADDRESS, else by looking for a GCS
        # process on the machine: with two clusters on one machine (two scenarios at once, or a
        # user's own Ray beside) Ray Train's PlacementGroupCleaner found both, raised "Found
        # multiple active Ray instances" and lost its monitor thread. On a real cluster each
        # machine has one; here every process of a node is told its own.
        "RAY_ADDRESS": f"{addresses[0]}:{st.layout.gcs_port}" if addresses else
        st.layout.gcs_address,
        **launch.node_env(token_path=str(auth_token_path()),
                          metrics_ports=(st.layout.autoscaler_metrics_port,
                                         st.layout.dashboard_metrics_port),
                          preload_modules=st.spec.preload_modules,
                          forked_agents=bool(st.cgroups) and ri.available("forked_agents")),
        # As after `source .venv/bin/activate; ray start`: a Ray Job's entrypoint (`python
        # train.py`) and any other command a node runs find the nodes' own Python and packages
        "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                 os.environ.get("PATH", os.defpath)]),
        **ri.health_check_env(**st.spec.health.model_dump()),
    }


def ray_params(st: ClusterState, index: int, addresses: list[str] | None = None):
    """Ray's parameters for node ``index``. ``addresses`` replace the plan's loopback addresses
    for nodes that live in their own network namespace (docker) or on a machine of their own (a
    substrate); the dashboard then listens on the container's loopback (docker) or the head
    machine's address (a substrate: its drivers run on any machine)."""
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
        # Each node has its own temp dir here, so the head's log monitor sees only the head's
        # logs: a worker node forwards its actors' prints ("(TaskRunner pid=N, ip=X) ...") to
        # their drivers only with a monitor of its own (spec.forward_logs); the head's forwards
        # the head's actors' prints.
        include_log_monitor=spec.forward_logs,
    )
    if index != 0:
        return launch.ray_params({**kwargs, "gcs_address": gcs_address}, None)
    return launch.ray_params(kwargs, dict(
        gcs_server_port=plan.gcs_port,
        include_dashboard=spec.dashboard,
        # a substrate's driver, `ray job submit` included, may run on any of its machines
        dashboard_host=address if st.backend == "substrate" or not addresses else "127.0.0.1",
        dashboard_port=plan.dashboard_port,
        **redis_store.head_params(st),
    ))


def gpu_env(cuda_devices: str | None, gpus: int) -> dict[str, str]:
    """The environment that says what a node's ``gpus`` GPUs are: the real ``cuda_devices``
    behind them (its raylet's CUDA_VISIBLE_DEVICES, whose entries Ray hands its workers), or
    fake, which a trainer takes for the CPU (:data:`rlsim.contract.FAKE_GPUS_VAR`)."""
    if cuda_devices and gpus:
        return {"CUDA_VISIBLE_DEVICES": visible_devices(cuda_devices, gpus)}
    return {FAKE_GPUS_VAR: "1"}


# what this launcher's environment held before a node's own variables replaced them
_BEFORE: dict[str, str | None] = {}


def _own_env(st: ClusterState, index: int, gpus: int, shape, addresses) -> None:
    """Node ``index``'s own variables in this launcher's environment, which the node about to
    start inherits, after putting back what an earlier node's replaced: the cluster's ``env``
    (cluster.env), then, on a node of a cluster that asked for the device stand-in
    (:mod:`rlsim.standin`), its variables (every node but those given real devices: a node of no
    GPUs too, where torch sees no CUDA device, as on a CPU node)."""
    for key, value in _BEFORE.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _BEFORE.clear()
    own = dict(st.spec.env)
    if st.spec.cuda_standin and not shape.cuda_devices:
        ledger = st.root / standin.LEDGER_DIR
        ledger.mkdir(exist_ok=True)
        address = addresses[index] if addresses else st.layout.nodes[index].address
        own.update(standin.deepspeed_env({**os.environ, **own}))
        own.update(standin.node_env(gpus, shape.gpu_memory_gb, shape.accelerator, address,
                                    ledger, os.environ.get("PYTHONPATH")))
    for key, value in own.items():
        _BEFORE[key] = os.environ.get(key)
        os.environ[key] = value


# Ray's Node() reads this process's environment and its processes are born in this process's
# cgroups: one node at a time may be set up and spawned. A node start holds the lock except while
# it waits for its raylet to register, most of a node's start (the raylet waits for its two
# agents, Python processes that import for 0.6-0.9 s here), so those waits overlap.
_SPAWN_LOCK = threading.Lock()


def start_node(st: ClusterState, index: int, addresses: list[str] | None = None) -> int:
    """Start node ``index`` and return its raylet's pid. Must run in a launcher process; safe
    to call from several threads at once."""
    launch.install(_SPAWN_LOCK, lean=not st.spec.dashboard,
                   forked=AGENT_ZYGOTE_VAR in os.environ)
    shape = st.spec.node_shapes()[index]
    accelerator = shape.accelerator
    with _SPAWN_LOCK:
        os.environ[procs.NODE_VAR] = str(index)
        # the node's GPUs: real devices (Ray hands each worker its GPU's entry of the raylet's
        # CUDA_VISIBLE_DEVICES), or fake ones, which a trainer must not take for a real GPU of
        # the host that happens to have the ordinal Ray gives them
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        os.environ.pop(FAKE_GPUS_VAR, None)
        gpus = st.gpus_left.get(index, shape.gpus)
        os.environ.update(gpu_env(shape.cuda_devices, gpus))
        _own_env(st, index, gpus, shape, addresses)
        if st.cgroups:
            cgroups.NodeGroup(st.session, index).enter()
        st.node_dir(index).mkdir(parents=True, exist_ok=True)
        params = ray_params(st, index, addresses)
        pid = launch.start(params, head=index == 0,
                           labels={ACCELERATOR_LABEL: accelerator} if accelerator else None)
    gcs = f"{addresses[0]}:{st.layout.gcs_port}" if addresses else st.layout.gcs_address
    launch.write_address(gcs, params.temp_dir)
    return pid


def start_nodes(st: ClusterState, indices: list[int]) -> None:
    """Start the head first when it is among ``indices`` (the others join its GCS), then the
    rest at once, printing each started node's line as it comes up; raise the first failure
    after every start has ended. (Starting the others while the head's raylet starts measured
    slower here, 6.3-7.2 s against 4.7-4.9 s for 4 x 8: on 2 cores every agent's imports
    compete, the head's too.)"""

    def start(index: int) -> None:
        pid = start_node(st, index)
        with _PRINT_LOCK:
            print(json.dumps({"index": index, "raylet_pid": pid,
                              "rewrites": launch.rewrites()}), flush=True)

    if 0 in indices:
        if holders := listeners.at(listeners.listening(), st.layout.head.address,
                                   st.layout.gcs_port):
            raise RuntimeError(
                f"cluster {st.spec.name!r}: {holders[0]} already listens, before its head "
                f"started: its GCS would not bind, and its nodes would join whatever holds that "
                f"port. Stop what listens there (`ss -ltnp 'sport = {st.layout.gcs_port}'`)")
        start(0)
    rest = [i for i in indices if i != 0]
    check_own_gcs(st)
    # a few at a time: on 2 cores three worker nodes start in 2.4 s at once and 3.1 s in turn,
    # but 31 at once would each take the whole fleet's CPU time to register
    with concurrent.futures.ThreadPoolExecutor(min(4, max(1, len(rest)))) as pool:
        futures = [pool.submit(start, i) for i in rest]
    for f in futures:
        f.result()
    # the head's dashboard, started beside the other nodes: the cluster is ready once it is up
    launch.wait_dashboards()
    # what the GCS holds now, every node registered: the caller's first look at the nodes,
    # without importing Ray for it (0.6 s of the CLI's bring-up here)
    from rlsim.backends.ray_state import launch_view

    try:
        view = launch_view(st.layout.gcs_address, str(auth_token_path()))
    except Exception:  # noqa: BLE001 - no view: the caller asks the GCS itself
        return
    print(json.dumps({"alive": view}), flush=True)


_PRINT_LOCK = threading.Lock()


def check_own_gcs(st: ClusterState) -> None:
    """Raise unless the GCS at the cluster's address is a process of this cluster: a node that
    joined another cluster's GCS (one of another home, on the same address) would register
    there, and each cluster would see nodes and jobs of the other's."""
    plan = st.layout
    found = listeners.at(listeners.listening(), plan.head.address, plan.gcs_port)
    if not found:
        raise RuntimeError(f"cluster {st.spec.name!r}: nothing listens at its GCS "
                           f"{plan.gcs_address}: its head is down")
    if not listeners.held_by({sock.inode for sock in found}, procs.find(st.session, 0)):
        raise RuntimeError(
            f"cluster {st.spec.name!r}: what listens at its GCS address {found[0]} is not its "
            f"head's GCS (another cluster's, or another program's): its nodes are not started "
            f"there. Stop what holds port {plan.gcs_port} (`ss -ltnp 'sport = "
            f"{plan.gcs_port}'`)")


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
    addresses = json.loads(os.environ[ADDRESSES_VAR]) if ADDRESSES_VAR in os.environ else None
    os.environ.update(cluster_env(st, addresses))
    if addresses is not None:  # PID 1 of a docker node: start it, then keep the container alive
        if st.backend == "substrate":  # (or a substrate's node: then its machine's zygotes)
            start_zygotes(st, f"-{os.stat('/proc/self/ns/net').st_ino}")
        pid = start_node(st, indices[0], addresses)
        launch.wait_dashboards()
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
    then Ray's dependencies; nothing where the workers preload nothing, nor where a node's GPUs
    are real (``cuda_devices``): a parent that touched CUDA (torch asks for devices at times
    when imported) leaves its forked children unable to use it, so those workers start as Ray
    starts them."""
    if any(n.cuda_devices for n in st.spec.node_shapes()):
        return []
    modules = [m for m in st.spec.preload_modules if m.split(".")[0] not in ("trainer", "vllm")]
    return [*modules, *RAY_DEPENDENCIES] if modules else []


def start_zygotes(st: ClusterState, machine: str = "") -> None:
    """Where node cgroups exist (a forked process is found by its node's cgroup): one zygote
    forks the nodes' agents (:data:`launch.AGENT_MODULES`, where forked_agents is in force), and,
    where the workers preload something and start through rlsim's worker set-up, another forks
    the workers (:mod:`rlsim.backends.zygote`; the home's, shared by its clusters that preload
    the same modules, where the cluster is not on a substrate). Started once per cluster, before
    any node, outside every node's cgroup (a node kill must not end them); a node started later
    (a restart) finds them by their variables, set in this process's environment.

    On a substrate each machine has its own (``machine``: its network namespace, in their
    names): a process forked by a zygote lives in the zygote's network namespace, and one
    machine's would bind its addresses on another machine. They end with the cluster's
    session on that machine (:func:`rlsim.host.nodeops.end_session`)."""
    if not st.cgroups:
        return
    if ri.available("forked_agents"):  # cluster_env set the pipe check: before it imports
        dashboard = launch.DASHBOARD_MODULES if st.spec.dashboard and ri.available(
            "forked_dashboard") else []
        _start_zygote(st, f"agents{machine}", AGENT_ZYGOTE_VAR,
                      launch.AGENT_MODULES + dashboard, agents=True)
    if ri.available("worker_setup") and (modules := zygote_modules(st)):
        _start_zygote(st, f"zygote{machine}", ZYGOTE_VAR, modules, shared=not machine)


def _start_zygote(st: ClusterState, name: str, var: str, modules: list[str],
                  agents: bool = False, shared: bool = False) -> None:
    """``shared``: the home's zygote for these modules (:func:`rlsim.backends.zygote.
    start_shared`), reached through links in the cluster's run directory. A zygote that cannot
    be started (a lock or log file it refuses, one held or stuck past its bound) is said in a
    line on this launcher's stderr, and the workers start as Ray starts them (none answers at
    ``var``'s path): slower, never a failed cluster start."""
    from rlsim.backends import zygote, zygote_guard

    path = zygote.socket_path(st.root, name)
    os.environ[var] = path
    if zygote.answers(path):
        return
    try:
        if shared:
            _start_shared_zygote(st, path, modules)
            return
        # a new log, never opened through a link planted at its name (the last one kept as .1)
        with zygote_guard.fresh_log(str(st.root / f"{name}.log")) as log:
            subprocess.Popen([sys.executable, "-m", "rlsim.backends.zygote", path,
                              ",".join(modules), *(["--agents"] if agents else [])],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    except (zygote_guard.ZygoteRefused, OSError) as e:  # TimeoutError included
        print(f"rlsim: no {name} for cluster {st.spec.name!r}, its workers start without one: "
              f"{zygote_guard.brief(str(e), 400)}", file=sys.stderr, flush=True)


def _start_shared_zygote(st: ClusterState, path: str, modules: list[str]) -> None:
    """Start (or find) the home's zygote for ``modules`` and link ``path`` to it."""
    from rlsim.backends import zygote, zygote_guard

    env = _shared_zygote_env(st)
    key = shared_zygote_key(env, modules)
    env[procs.ZYGOTE_HOME_VAR] = home_id()
    target = zygote.shared_path(st.root.parent, key)
    for link, to in ((path, target), (zygote.ready_path(path), zygote.ready_path(target))):
        if not (os.path.islink(link) and os.readlink(link) == to):
            zygote_guard.link(link, to)  # in place at once: a worker finds one
    zygote.start_shared(st.root.parent, key, modules, env)


def shared_zygote_key(env: dict[str, str], modules: list[str]) -> str:
    """The key of the home's zygote that preloads ``modules`` in ``env``
    (:func:`_shared_zygote_env`): launchers that differ in any of these get one each. The v1
    groups a forked worker's node groups nest under (hybrid hosts) are read from the zygote's
    own: launchers in other v1 groups get another zygote."""
    v1 = [str(cgroups.v1_base(c)) for c in ("memory", "cpu")]
    return hashlib.sha256(json.dumps([sys.executable, modules, sorted(env.items()), v1])
                          .encode()).hexdigest()[:12]


def _shared_zygote_env(st: ClusterState) -> dict[str, str]:
    """The environment of a zygote this home's clusters share: this launcher's, less what rlsim
    sets per cluster (its labels, its Ray settings and zygotes) and pytest's per-test variables,
    none of which the modules it imports read. Its key too: a cluster with any other variable
    set otherwise gets a zygote of its own."""
    own = {procs.SESSION_VAR, procs.HOME_VAR, procs.NODE_VAR, ZYGOTE_VAR, AGENT_ZYGOTE_VAR,
           *cluster_env(st)} - {"PATH"}
    # the device stand-in is put in force in each worker it forks (rlsim.standin.activate),
    # never in the zygote: clusters with and without it share one
    return standin.without({k: v for k, v in os.environ.items()
                            if k not in own and not k.startswith("PYTEST_")})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
