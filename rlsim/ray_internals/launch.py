"""Starting the Ray processes of a simulated node: Ray's own ``Node`` class with the node's
parameters, the settings every process of the cluster reads, and the accelerations rlsim adds
where the installed Ray has what they need (each a capability of
:mod:`rlsim.ray_internals`): the registration polled, no dashboard process where the
head has no dashboard, the agents' commands rewritten so that they are forked from one import
or run lean, workers started through :mod:`.worker_setup`.

Used by the launcher process (:mod:`rlsim.backends.node_start`) alone: the patches below live and
die with it. Each rewrite of a raylet's command counts its matches (:data:`REWRITES`), so a Ray
that builds its command otherwise is seen (nothing rewritten), not silently slower.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from rlsim import ray_internals as ri
from rlsim.ray_internals import installed, settings
from rlsim.ray_internals.worker_setup import AGENT_FLAG, FORKSERVER_FLAG

# What a raylet runs to start a worker: Ray's setup_worker.py without its imports (see there)
WORKER_SETUP = str(Path(__file__).with_name("worker_setup.py"))
LEAN_AGENT_MODULE = "rlsim.ray_internals.node_agent"
# What a node's agents import before they serve: forked from one process that imported them
# (each agent imported them itself, 0.5 s of CPU apiece, two agents a node, before its raylet
# registers)
AGENT_MODULES = ["ray.dashboard.agent", "ray._private.runtime_env.agent.main"]
# What the same zygote imports too where the cluster runs the dashboard: the dashboard's own
# script (its head forked from there, forked_dashboard) and every module of Ray's dashboard,
# which the head and each node's full agent import by walking the package at their start
# (0.25 s of CPU apiece here)
DASHBOARD_MODULES = ["ray.dashboard.dashboard", "ray.dashboard.modules.*"]
DASHBOARD_AGENT_FLAG = "--dashboard_agent_command="
RUNTIME_ENV_AGENT_FLAG = "--runtime_env_agent_command="
# raylet commands seen, and agent commands rewritten, by kind ("lean", "forked")
REWRITES: Counter[str] = Counter()
# the wrappers of Ray's start_ray_process installed in this launcher ("agents", "dashboard")
_INSTALLED: set[str] = set()


def node_env(*, token_path: str, metrics_ports: tuple[int, int],
             preload_modules: list[str], forked_agents: bool) -> dict[str, str]:
    """The Ray settings every process of a simulated cluster reads (never set in the caller's
    process): each only where this Ray reads it (a setting Ray does not know is left out and
    its capability reported as not in force)."""
    autoscaler_port, dashboard_port = metrics_ports
    return {
        **ri.connect_env(token_path),
        settings.USAGE_STATS_VAR: "0",
        # No metrics export: a raylet otherwise waits for its dashboard agent's exporter before
        # it registers (0.7 s a node here: 4 x 8 up in 7.5 s instead of 8.7 s), and nothing of a
        # simulated cluster reads the metrics (Ray's own `ray.util.metrics` calls become no-ops)
        **ri.flag_env("quiet_nodes", {settings.METRICS_FLAG: "0"}),
        # A raylet connects to its own object store, started by a thread of its own a moment
        # before; a first try that finds no socket yet waited 1000 ms (Ray's default) before
        # the next: seen here on every second node start, 1.0 s to the millisecond. Tries every
        # 50 ms instead, as many as keep Ray's 10 s in all (10 x 1 s), for every process of the
        # node that connects to a local socket (workers to their raylet too)
        **ri.flag_env("fast_local_connect", {settings.CONNECT_TIMEOUT_FLAG: "50",
                                             settings.CONNECT_ATTEMPTS_FLAG: "200"}),
        # No idle workers forked ahead of demand: on 2 cores they steal CPU from bring-up. The
        # scenario runner asks each raylet for the ones its trainer will use instead
        # (StartedCluster.prestart_workers).
        **ri.flag_env("no_idle_workers", {settings.PRESTART_FLAG: "0",
                                          settings.PRESTART_FIRST_DRIVER_FLAG: "0"}),
        # the head's metrics servers inside the cluster's own port block
        settings.AUTOSCALER_METRIC_PORT_VAR: str(autoscaler_port),
        settings.DASHBOARD_METRIC_PORT_VAR: str(dashboard_port),
        # the modules a worker imports before it registers (Ray's --worker-preload-modules)
        **(ri.flag_env("preload_modules", {settings.PRELOAD_FLAG: ",".join(
            preload_modules)}) if preload_modules else {}),
        **({settings.PIPE_CHECK_VAR: "1"} if forked_agents else {}),
    }


def ray_params(kwargs: dict, head: dict | None):
    """Ray's ``RayParams`` for one node: ``kwargs`` (what every node gets), ``head`` (what the
    head adds; None for another node), and rlsim's worker set-up where worker_setup is in
    force."""
    ri.require("node_start")
    from ray._private.parameter import RayParams

    extra = {"setup_worker_path": WORKER_SETUP} if ri.available("worker_setup") else {}
    return RayParams(**kwargs, **(head or {}), **extra)


def install(spawn_lock: threading.Lock, *, lean: bool, forked: bool) -> None:
    """Patch Ray in this (launcher) process for the accelerations in force: the registration
    polled (releasing ``spawn_lock`` while it waits), agents lean (``lean``: a cluster without
    the dashboard) and forked (``forked``: an agent zygote runs). Safe to call again."""
    if ri.available("registration_poll"):
        _poll_registration_often(spawn_lock)
    if ri.available("dashboard_beside"):
        _signal_dashboard_spawn()
    lean = lean and ri.available("lean_agent")
    forked = forked and ri.available("forked_agents")
    if lean or forked:
        _agent_commands(lean=lean, forked=forked)


def _poll_registration_often(spawn_lock: threading.Lock) -> None:
    """Make Ray's ``Node()`` see its raylet registered as soon as it is, and let other nodes
    start meanwhile.

    ``Node()`` returns once the GCS knows its raylet, asking through the C++
    ``GlobalStateAccessor::GetNode``, which asks again only a whole second after a miss. Wrapped,
    Ray's call is made once the node table shows the node (polled every 20 ms), and answers at
    its first try; during the wait the thread gives up ``spawn_lock``.
    """
    import ray._private.services as services

    from rlsim.ray_internals.gcs import wait_registered

    if getattr(services.get_node, "rlsim_polled", False):
        return
    get_node = services.get_node

    def get_node_when_registered(gcs_address, node_id):
        spawn_lock.release()
        try:
            wait_registered(gcs_address, node_id)
        finally:
            spawn_lock.acquire()
        return get_node(gcs_address, node_id)

    get_node_when_registered.rlsim_polled = True
    services.get_node = get_node_when_registered


@functools.cache
def node_class():
    """Ray's ``Node`` (what ``ray start`` and ``ray.cluster_utils.Cluster`` use), less the
    dashboard process when the head runs without the dashboard (no_api_server), and with the
    dashboard's start beside the rest of the cluster where it runs one (dashboard_beside)."""
    import ray._private.node

    none = ri.available("no_api_server")
    beside = ri.available("dashboard_beside")
    if not (none or beside):
        return ray._private.node.Node
    base = ray._private.node.Node

    class Node(base):
        def start_api_server(self, *, include_dashboard, raise_on_failure):
            # With include_dashboard=False Ray still starts its dashboard process, with one
            # module, usage stats (which rlsim turns off), and waits for it to publish its URL:
            # 0.9 s of the head's start here, 0.7 s of CPU. Without it the cluster is as Ray
            # leaves one whose dashboard failed to start: no URL published, nothing else
            # touched.
            if include_dashboard is False and none:
                return
            if include_dashboard is False or not beside:
                base.start_api_server(self, include_dashboard=include_dashboard,
                                      raise_on_failure=raise_on_failure)
                return
            _start_dashboard_beside(self, base, include_dashboard, raise_on_failure)

    return Node


# The dashboards started beside their clusters by this launcher and not yet waited for: each its
# thread and the failure it ended with (:func:`wait_dashboards`)
_DASHBOARDS: list[tuple[threading.Thread, list[BaseException]]] = []
# Set by the launcher's start_ray_process once a dashboard process is spawned
_DASHBOARD_SPAWNED = threading.Event()


def _start_dashboard_beside(node, base, include_dashboard, raise_on_failure) -> None:
    """Ray's own dashboard start for ``node`` in a thread of its own: Ray spawns the process,
    then polls the GCS until the dashboard publishes its URL, 3 s here (its modules import and
    fork their processes), while the head's raylet and the other nodes waited. This returns
    once the process is spawned (while the launcher's cgroup and environment are still the
    head's, which the dashboard must be born in), with the URL the raylet is told set to the
    address the dashboard was given; :func:`wait_dashboards` waits for the rest."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            base.start_api_server(node, include_dashboard=include_dashboard,
                                  raise_on_failure=raise_on_failure)
        except BaseException as e:  # raised where the launcher waits for it
            failure.append(e)
        finally:
            _DASHBOARD_SPAWNED.set()  # also when it failed before its process started

    _DASHBOARD_SPAWNED.clear()
    thread = threading.Thread(target=run, name="rlsim-dashboard", daemon=True)
    _DASHBOARDS.append((thread, failure))
    thread.start()
    _DASHBOARD_SPAWNED.wait()
    if node._webui_url is None:
        params = node._ray_params
        node._webui_url = f"{params.dashboard_host}:{params.dashboard_port}"


def wait_dashboards() -> None:
    """Wait for the dashboards this launcher started beside their clusters to publish their
    URLs (what Ray's node start waits for); raise the first one's failure."""
    while _DASHBOARDS:
        thread, failure = _DASHBOARDS.pop(0)
        thread.join()
        if failure:
            raise failure[0]


def _signal_dashboard_spawn() -> None:
    """Wrap Ray's start_ray_process so that a dashboard's spawn sets :data:`_DASHBOARD_SPAWNED`."""
    import ray._private.ray_constants as ray_constants
    import ray._private.services as services

    if "dashboard" in _INSTALLED:
        return
    _INSTALLED.add("dashboard")
    start = services.start_ray_process

    def start_and_signal(command, process_type, *args, **kwargs):
        try:
            return start(command, process_type, *args, **kwargs)
        finally:
            if process_type == ray_constants.PROCESS_TYPE_DASHBOARD:
                _DASHBOARD_SPAWNED.set()

    services.start_ray_process = start_and_signal


def _agent_commands(lean: bool, forked: bool) -> None:
    """Rewrite the agent commands of every raylet this launcher starts. ``lean``: the dashboard
    agent runs through :mod:`.node_agent` (no dashboard modules). ``forked``: both agents start
    through :mod:`.worker_setup`, forked from the cluster's agent zygote.

    Ray builds the agents' commands inside ``services.start_raylet`` and hands the raylet a
    ``--dashboard_agent_command`` and a ``--runtime_env_agent_command``; the raylet's command is
    rewritten on its way to ``start_ray_process``, and each rewrite counted in :data:`REWRITES`.
    """
    import ray
    import ray._private.ray_constants as ray_constants
    import ray._private.services as services
    import ray._private.utils

    if "agents" in _INSTALLED:
        return
    _INSTALLED.add("agents")
    if lean:
        # Ray decides whether an agent runs "--minimal" by importing the dashboard's
        # dependencies (aiohttp, opentelemetry, prometheus: 0.86 s of this launcher's CPU, before
        # the head's raylet starts); the agents of this cluster run minimal whatever is installed
        # (Ray 2.49 renamed the check: both are probed by lean_agent)
        if hasattr(ray._private.utils, "get_dashboard_dependency_error"):
            ray._private.utils.get_dashboard_dependency_error = lambda: ImportError(
                "rlsim: this cluster runs no dashboard")
        else:
            ray._private.utils.check_dashboard_dependencies_installed = lambda: False
    start = services.start_ray_process
    script = subprocess.list2cmdline([str(Path(ray.__file__).parent / "dashboard" / "agent.py")])
    # what Ray runs an agent with (a memory profiler's command instead is left alone)
    python_u = subprocess.list2cmdline([sys.executable, "-u"]) + " "
    fork = subprocess.list2cmdline([sys.executable, WORKER_SETUP, AGENT_FLAG, "-u"]) + " "
    # the monitors forked as the agents are, each counted under its name in REWRITES
    monitors = {ray_constants.PROCESS_TYPE_LOG_MONITOR: "log_monitor",
                ray_constants.PROCESS_TYPE_MONITOR: "monitor"}

    def rewrite(arg: str) -> str:
        if lean and arg.startswith(DASHBOARD_AGENT_FLAG) and script in arg:
            arg = arg.replace(script, f"-m {LEAN_AGENT_MODULE}", 1)
            REWRITES["lean"] += 1
        for flag in (DASHBOARD_AGENT_FLAG, RUNTIME_ENV_AGENT_FLAG):
            if forked and arg.startswith(flag + python_u):
                arg = flag + fork + arg[len(flag + python_u):]
                REWRITES["forked"] += 1
        return arg

    def start_agents(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            REWRITES["raylets"] += 1
            command = [rewrite(arg) for arg in command]
        elif forked and process_type in monitors and \
                list(command[:2]) == [sys.executable, "-u"]:
            # a node's log monitor, and the head's autoscaler monitor, import Ray as its agents
            # do: forked from the same zygote, through the same client (64 x 8 nodes: the log
            # monitors' fork took bring-up's CPU from 165 to 99 s; the head's monitor imported
            # for 0.5 s of CPU while the nodes started)
            command = [sys.executable, WORKER_SETUP, AGENT_FLAG, "-u", *command[2:]]
            REWRITES[monitors[process_type]] += 1
        elif forked and process_type == ray_constants.PROCESS_TYPE_DASHBOARD and \
                ri.available("forked_dashboard") and len(command) > 1 and \
                command[0] == sys.executable and command[1].endswith("dashboard.py"):
            # the head's dashboard, forked from the same zygote once it has imported the
            # dashboard's modules (DASHBOARD_MODULES), while the GCS and the head's raylet
            # started: its own imports were 1.5 s of the 4 x 8 CLI's bring-up here, before it
            # started its module processes (a memory profiler's command is left alone)
            # with its modules' forkserver forked from it before it runs (dashboard_forkserver)
            server = [FORKSERVER_FLAG] if ri.available("dashboard_forkserver") else []
            command = [sys.executable, WORKER_SETUP, AGENT_FLAG, *server, *command[1:]]
            REWRITES["dashboard"] += 1
            REWRITES["forkserver"] += bool(server)
        return start(command, process_type, *args, **kwargs)

    services.start_ray_process = start_agents


def start(params, *, head: bool, labels: dict[str, str] | None = None) -> int:
    """Start one node with Ray's ``Node`` and return its raylet's pid. ``labels``: set as Ray's
    autoscaler sets a launched node's labels (its accelerator type). Must run under the
    caller's spawn lock: Ray's ``Node()`` reads this process's environment."""
    if labels:
        os.environ[settings.OVERRIDE_LABELS_VAR] = json.dumps(labels)
    try:
        node = node_class()(params, head=head, shutdown_at_exit=False, spawn_reaper=False)
    finally:
        os.environ.pop(settings.OVERRIDE_LABELS_VAR, None)
    return node.all_processes["raylet"][0].process.pid


def write_address(gcs_address: str, temp_dir: str) -> None:
    """What `ray start` writes and Ray's "auto" address reads in a node's temp dir: a Ray Job's
    supervisor resolves its driver's RAY_ADDRESS from it. Without it Ray falls back to any
    gcs_server process on the machine, which with two clusters at once (pytest -n 2) was
    another cluster's (job_address_file)."""
    if ri.available("job_address_file"):
        import ray._private.utils

        ray._private.utils.write_ray_address(gcs_address, temp_dir)


def rewrites() -> dict[str, int]:
    return dict(REWRITES)


# ---- a docker node claiming another Ray version ----------------------------------------------


def version_stamp(claimed: str) -> tuple[Path, str]:
    """This environment's ``ray/_version.py`` and its text saying ``claimed`` instead of the
    installed version (a node of ray_version_mismatch mounts it over the real one). The value is
    written as a Python literal (repr), so no string given as a version can become code."""
    ri.require("version_stamp")
    path = installed.surface().root / "_version.py"
    return path, version_source(path.read_text(), installed.ray_version() or "", claimed)


def version_source(source: str, version: str, claimed: str) -> str:
    """Ray's ``_version.py`` ``source`` saying ``claimed`` instead of ``version``."""
    return source.replace(f'version = "{version}"', f"version = {claimed!r}")
