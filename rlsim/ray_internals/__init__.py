"""Every use rlsim makes of Ray's private surface, in one place, each a named capability with a
probe.

Ray promises nothing of ``ray._private``, ``ray._raylet``, ``ray.core.generated``, its raw gRPC
methods, its undocumented ``RAY_`` settings or the command lines it builds: any release may rename
them, and Ray ignores a setting it no longer knows without a word. rlsim leans on them for speed
(nodes that start in a fraction of Ray's own time, workers forked warm) and for a few things Ray's
public API cannot do without a driver (read the GCS's tables, drain a node with a deadline). So:

- only this package (its modules :mod:`.gcs`, :mod:`.launch`, :mod:`.worker_setup`,
  :mod:`.node_agent`, :mod:`.train`) touches that surface; ``tests/unit/test_layers.py`` fails
  on any other use in rlsim or the reference trainer;
- each use is a :class:`Capability` whose probe reads the installed Ray's files (a module, a
  function's parameters, a message in a generated proto, a setting compiled into ``_raylet.so``)
  without importing Ray and without a cluster;
- where a probe fails, rlsim takes Ray's plain path (Ray's own worker set-up, agents and waits,
  no warm workers, Ray's own CLI), slower but with the same verdicts, and the timeline, ``rlsim
  doctor`` and ``rlsim ray`` say which were in force and why not. A capability marked
  ``required`` has no plain path: rlsim says so in one line, with the Ray version, instead of a
  traceback.

``RLSIM_RAY_PLAIN=all`` (every acceleration: what only saves time) or a comma-separated list of
capability names (``token_auth`` among them, to rehearse a Ray without it) takes the plain path on
purpose: to compare bring-up both ways, or to rehearse an older Ray's behaviour on this one.

This module imports only the standard library and ``packaging``; Ray is imported by the functions
of the modules beside it that need it, never here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import mmap
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

# The Ray releases the matrix (ci/ray_matrix.py) runs; pyproject's range says the same.
SUPPORTED_RAY = (Version("2.48.0"), Version("2.61.0"))  # from, up to (excluded)
SUPPORTED_TEXT = ">=2.48,<2.61"
PLAIN_VAR = "RLSIM_RAY_PLAIN"  # "all" or capability names: take Ray's plain path for those
# Root may start a cluster no token protects only when the user says so (see `auth_refusal`).
ALLOW_OPEN_VAR = "RLSIM_ALLOW_UNAUTHENTICATED"
TOKEN_AUTH_SINCE = "2.52"  # the first Ray release whose GCS checks RAY_AUTH_MODE=token
# the first Ray release whose dashboard starts its modules from a forkserver (before: spawned)
DASHBOARD_FORKSERVER_SINCE = "2.59"
# The first Ray release seen whose raylet keeps a detached actor's worker port from later drivers
# (2.48, 2.52 and 2.53 did not; 2.54, 2.55 and 2.60 do: the substrate's detach test on each)
DETACHED_PORTS_SINCE = "2.54"


# The settings (RAY_<name>, read by Ray's C++ from the environment) each capability sets
HEALTH_FLAGS = ("RAY_health_check_initial_delay_ms", "RAY_health_check_period_ms",
                "RAY_health_check_timeout_ms", "RAY_health_check_failure_threshold")
QUIET_FLAGS = ("RAY_enable_metrics_collection",)
CONNECT_FLAGS = ("RAY_raylet_client_connect_timeout_milliseconds",
                 "RAY_raylet_client_num_connect_attempts")
NO_IDLE_FLAGS = ("RAY_enable_worker_prestart", "RAY_prestart_worker_first_driver")
PRELOAD_FLAGS = ("RAY_preload_python_modules",)
RECONNECT_FLAGS = ("RAY_gcs_rpc_server_reconnect_timeout_s",)
ALL_FLAGS = (*HEALTH_FLAGS, *QUIET_FLAGS, *CONNECT_FLAGS, *NO_IDLE_FLAGS, *PRELOAD_FLAGS,
             *RECONNECT_FLAGS, "RAY_AUTH_MODE")


class RayInternalsError(RuntimeError):
    """A capability rlsim cannot do without is missing from the installed Ray."""


# ---- what the installed Ray has, read from its files ---------------------------------------------


class RaySurface:
    """The files of one Ray install (``root`` is the ``ray`` package's folder), read, never
    imported: a probe costs milliseconds and starts nothing."""

    def __init__(self, root: Path | None, version: str | None = None) -> None:
        self.root = root
        self.version = version
        self.read: set[str] = set()  # the files of the install its probes read (see _record)

    @functools.cache  # noqa: B019 - one surface per install, kept for the process
    def source(self, rel: str) -> str | None:
        """The text of ``ray/<rel>``, or None where it is not there."""
        if self.root is None:
            return None
        self.read.add(rel)
        try:
            return (self.root / rel).read_text(errors="replace")
        except OSError:
            return None

    @functools.cache  # noqa: B019
    def _tree(self, rel: str) -> ast.Module | None:
        text = self.source(rel)
        try:
            return ast.parse(text) if text is not None else None
        except SyntaxError:
            return None

    def function(self, rel: str, qualname: str) -> ast.FunctionDef | None:
        """The definition of ``qualname`` (``f`` or ``Class.method``) in ``ray/<rel>``."""
        tree = self._tree(rel)
        if tree is None:
            return None
        scope: list[ast.stmt] = tree.body
        *outer, name = qualname.split(".")
        for part in outer:
            found = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == part),
                         None)
            if found is None:
                return None
            scope = found.body
        return next((n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                     and n.name == name), None)

    def params(self, rel: str, qualname: str) -> set[str] | None:
        """The parameter names of ``qualname`` in ``ray/<rel>``, or None where it is absent."""
        fn = self.function(rel, qualname)
        if fn is None:
            return None
        a = fn.args
        return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}

    def required(self, rel: str, qualname: str) -> set[str] | None:
        """The parameters of ``qualname`` a call must give (no default; ``self`` left out)."""
        fn = self.function(rel, qualname)
        if fn is None:
            return None
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        bare = positional[:len(positional) - len(a.defaults)]
        bare += [p for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None]
        return {p.arg for p in bare} - {"self", "cls"}

    def function_source(self, rel: str, qualname: str) -> str:
        fn, text = self.function(rel, qualname), self.source(rel)
        return ast.get_source_segment(text, fn) or "" if fn is not None and text else ""

    @functools.cache  # noqa: B019
    def _descriptor(self, rel: str):
        """The FileDescriptorProto a generated ``*_pb2.py`` registers (its serialized literal,
        decoded with protobuf: no Ray import)."""
        tree = self._tree(rel)
        if tree is None:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == \
                    "AddSerializedFile" and node.args and isinstance(node.args[0], ast.Constant):
                from google.protobuf import descriptor_pb2

                return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
        return None

    def message(self, rel: str, name: str) -> set[str] | None:
        """The field names of message ``name`` (``Outer.Inner`` for a nested one) in the
        generated ``ray/<rel>``, with the value names of the enums declared in it; None where
        there is no such message."""
        fd = self._descriptor(rel)
        if fd is None:
            return None
        scope = fd.message_type
        found = None
        for part in name.split("."):
            found = next((m for m in scope if m.name == part), None)
            if found is None:
                return None
            scope = found.nested_type
        enums = [*found.enum_type, *fd.enum_type]
        return {f.name for f in found.field} | {v.name for e in enums for v in e.value}

    @functools.cache  # noqa: B019
    def compiled(self, names: tuple[bytes, ...]) -> frozenset[bytes]:
        """Which of ``names`` (NUL-terminated strings, such as a ``RAY_`` setting's name) Ray's
        core library was built with: Ray reads each of its settings from the environment under
        a name it compiles in, and ignores any other."""
        if self.root is None:
            return frozenset()
        self.read.add("_raylet.so")
        try:
            with open(self.root / "_raylet.so", "rb") as f, \
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return frozenset(n for n in names if m.find(n + b"\0") >= 0)
        except (OSError, ValueError):
            return frozenset()

    def flags_known(self, *flags: str) -> list[str]:
        """Those of ``flags`` (``RAY_name``) the installed Ray does not read (one scan of
        ``_raylet.so`` for every setting rlsim uses)."""
        known = self.compiled(tuple(f.encode() for f in sorted({*ALL_FLAGS, *flags})))
        return [f for f in flags if f.encode() not in known]


@functools.cache
def surface() -> RaySurface:
    """The installed Ray's files (found, not imported)."""
    spec = importlib.util.find_spec("ray")
    root = Path(spec.origin).parent if spec and spec.origin else None
    try:
        version = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return RaySurface(root, version)


def ray_version() -> str | None:
    return surface().version


def version_problem(version: str | None = None) -> str | None:
    """Why the installed Ray (or ``version``) is outside the range rlsim is proven on, or None."""
    version = version or ray_version()
    if version is None:
        return "Ray is not installed; fix: pip install 'ray[default]" + SUPPORTED_TEXT + "'"
    try:
        v = Version(version)
    except InvalidVersion:
        return f"Ray {version!r} is not a release version rlsim can place"
    if SUPPORTED_RAY[0] <= Version(v.base_version) < SUPPORTED_RAY[1]:
        return None
    return (f"Ray {version} is outside the releases rlsim is proven on ({SUPPORTED_TEXT}, "
            "each run by its Ray matrix); rlsim may still work, taking Ray's plain path where "
            "its probes find the internals changed")


# ---- capabilities --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Capability:
    """One use of Ray's private surface: what it buys, the path rlsim takes without it, and a
    probe that says why it cannot be used (None: it can)."""

    name: str
    gives: str
    plain: str
    probe: Callable[[RaySurface], str | None] = field(repr=False)
    required: bool = False  # no plain path: rlsim cannot run without it
    # only speed: Ray's plain path gives the same verdicts, slower (RLSIM_RAY_PLAIN=all)
    acceleration: bool = False


@dataclass(frozen=True)
class Status:
    name: str
    available: bool
    why: str  # why not, where not available
    gives: str
    plain: str
    required: bool

    def line(self) -> str:
        return (f"{self.name}: in force ({self.gives})" if self.available else
                f"{self.name}: plain path ({self.plain}), because {self.why}")


def _all_of(*probes: Callable[[RaySurface], str | None]) -> Callable[[RaySurface], str | None]:
    def probe(s: RaySurface) -> str | None:
        return next((why for p in probes if (why := p(s))), None)
    return probe


def _has_params(rel: str, qualname: str, *names: str) -> Callable[[RaySurface], str | None]:
    """``qualname`` in ``ray/<rel>`` takes ``names``, and needs no other argument (rlsim calls
    it, or stands in for it, with those alone)."""
    def probe(s: RaySurface) -> str | None:
        got = s.params(rel, qualname)
        if got is None:
            return f"ray/{rel} has no {qualname}"
        missing = [n for n in names if n not in got]
        if missing:
            return f"ray/{rel}: {qualname} takes no {', '.join(missing)}"
        needs = sorted((s.required(rel, qualname) or set()) - set(names))
        return f"ray/{rel}: {qualname} also needs {', '.join(needs)}" if needs else None
    return probe


def _leads_with(rel: str, qualname: str, *names: str) -> Callable[[RaySurface], str | None]:
    """``qualname`` in ``ray/<rel>`` takes ``names`` first, in order (rlsim wraps it: the
    wrapper reads those and hands every argument on)."""
    def probe(s: RaySurface) -> str | None:
        fn = s.function(rel, qualname)
        if fn is None:
            return f"ray/{rel} has no {qualname}"
        first = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)][:len(names)]
        return None if first == list(names) else (
            f"ray/{rel}: {qualname} takes ({', '.join(first)}) first, not {', '.join(names)}")
    return probe


def _has_text(rel: str, *texts: str, what: str = "") -> Callable[[RaySurface], str | None]:
    def probe(s: RaySurface) -> str | None:
        text = s.source(rel)
        if text is None:
            return f"ray/{rel} is not there"
        missing = [t for t in texts if t not in text]
        return f"ray/{rel} has no {what or ', '.join(missing)}" if missing else None
    return probe


def _in_function(rel: str, qualname: str, *texts: str) -> Callable[[RaySurface], str | None]:
    def probe(s: RaySurface) -> str | None:
        body = s.function_source(rel, qualname)
        if not body:
            return f"ray/{rel} has no {qualname}"
        missing = [t for t in texts if t not in body]
        return f"ray/{rel}: {qualname} no longer builds {', '.join(missing)}" if missing else None
    return probe


def _flags(*flags: str) -> Callable[[RaySurface], str | None]:
    def probe(s: RaySurface) -> str | None:
        unknown = s.flags_known(*flags)
        return (f"this Ray does not read {', '.join(unknown)} (not compiled into _raylet.so)"
                if unknown else None)
    return probe


def _compiled_in(*names: str) -> Callable[[RaySurface], str | None]:
    """Cython names (``ray._raylet.Config.initialize``) Ray's core library was built with."""
    def probe(s: RaySurface) -> str | None:
        known = s.compiled(tuple(n.encode() for n in names))
        missing = [n for n in names if n.encode() not in known]
        return f"_raylet.so has no {', '.join(missing)}" if missing else None
    return probe


def _proto(rel: str, message: str, *fields: str) -> Callable[[RaySurface], str | None]:
    """A message of ``ray/core/generated/<rel>`` with ``fields`` (field or enum value names)."""
    def probe(s: RaySurface) -> str | None:
        names = s.message(f"core/generated/{rel}", message)
        if names is None:
            return f"ray/core/generated/{rel} has no message {message}"
        missing = [f for f in fields if f not in names]
        return (f"ray/core/generated/{rel}: {message} has no {', '.join(missing)}" if missing
                else None)
    return probe


def _any_of(*probes: Callable[[RaySurface], str | None]) -> Callable[[RaySurface], str | None]:
    def probe(s: RaySurface) -> str | None:
        whys = [p(s) for p in probes]
        return None if any(w is None for w in whys) else "; ".join(w for w in whys if w)
    return probe


def _python_forkserver(_s: RaySurface) -> str | None:
    """Python's side of dashboard_forkserver: its forkserver's layout, whatever the Ray
    (standard library only, as this module)."""
    from rlsim.ray_internals.forkserver import python_problem

    return python_problem()


AUTH_CLIENT = "_private/authentication/grpc_authentication_client_interceptor.py"

CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        "node_start", "nodes started in-process through Ray's Node class, with every port of the "
        "node's own block", "none: rlsim cannot start a simulated node",
        _all_of(_has_params("_private/parameter.py", "RayParams.__init__", "node_ip_address",
                            "num_gpus", "resources", "labels", "temp_dir", "node_manager_port",
                            "object_manager_port", "metrics_agent_port",
                            "dashboard_agent_listen_port", "runtime_env_agent_port",
                            "metrics_export_port", "min_worker_port", "max_worker_port",
                            "gcs_server_port", "include_dashboard", "dashboard_port",
                            "gcs_address", "include_log_monitor"),
                _has_params("_private/node.py", "Node.__init__", "ray_params", "head",
                            "shutdown_at_exit", "spawn_reaper")),
        required=True),
    Capability(
        "gcs_reads", "the GCS's node, actor, placement-group and job tables read without a "
        "driver", "none: rlsim cannot watch a cluster",
        _all_of(_has_params("_private/state.py", "GlobalState._initialize_global_state",
                            "gcs_options"),
                _has_params("_private/state.py", "GlobalState.node_table", "self"),
                _has_params("_private/state.py", "GlobalState.actor_table", "actor_id"),
                _has_params("_private/state.py", "GlobalState.job_table", "self"),
                _any_of(_has_params("_private/state.py", "GlobalState._connect_and_get_accessor",
                                    "self"),
                        _has_params("_private/state.py", "GlobalState._check_connected",
                                    "self")),
                _proto("gcs_pb2.py", "ActorTableData", "function_descriptor", "is_detached"),
                _proto("gcs_pb2.py", "PlacementGroupTableData", "creator_job_id",
                       "creator_actor_id")),
        required=True),
    Capability(
        "token_auth", "the cluster refuses any process without its token (RAY_AUTH_MODE=token)",
        f"an unauthenticated cluster (Ray has token auth from {TOKEN_AUTH_SINCE}): root needs "
        f"{ALLOW_OPEN_VAR}=1 to start one",
        _all_of(_has_text(AUTH_CLIENT, "def _get_authentication_metadata_tuple"),
                _flags("RAY_AUTH_MODE"))),
    Capability(
        "auth_reread", "a process that imported Ray before it was given the token settings "
        "still presents the token (Ray's config read again, as Ray does when it turns token auth "
        "on for its own process)", "such a process is refused by the cluster: give it the settings "
        "before it imports Ray (rlsim.ray_internals.export_auth_env)",
        _all_of(_compiled_in("ray._raylet.Config.initialize"),
                _has_text("_private/authentication/authentication_utils.py",
                          "get_authentication_mode", "AuthenticationMode"))),
    Capability(
        "driver_address", "a driver of a substrate joins it from the address that routes to the "
        "substrate's GCS", "Ray picks the driver's address from this machine's hostname (on a "
        "machine whose hostname names loopback, the actors it owns die at once: their workers "
        "cannot reach it)",
        _in_function("_private/worker.py", "init", 'kwargs.pop("_node_ip_address"')),
    Capability(
        "fast_health_checks", "a dead node declared dead in about a second (health checks "
        "every 300 ms)", "Ray's default health checks (a dead node seen after about 12 s)",
        _flags(*HEALTH_FLAGS)),
    Capability(
        "quiet_nodes", "no metrics exporters (a node registers 0.7 s sooner)",
        "Ray's metrics collection on every node", _flags(*QUIET_FLAGS),
        acceleration=True),
    Capability(
        "fast_local_connect", "a node's processes retry their raylet's socket every 50 ms",
        "Ray's 1 s between tries", _flags(*CONNECT_FLAGS),
        acceleration=True),
    Capability(
        "no_idle_workers", "no idle workers forked ahead of demand while nodes start",
        "Ray's idle workers, one per CPU, at each node's start", _flags(*NO_IDLE_FLAGS),
        acceleration=True),
    Capability(
        "preload_modules", "workers import the trainer's heavy modules before they register",
        "each actor imports them when it starts", _flags(*PRELOAD_FLAGS),
        acceleration=True),
    Capability(
        "driver_gcs_timeout", "a driver whose head is gone exits after the trainer's "
        "gcs_reconnect_timeout_s", "Ray's 60 s before a driver gives up on its GCS",
        _flags(*RECONNECT_FLAGS)),
    Capability(
        "registration_poll", "a node's start returns as soon as the GCS lists it (polled every "
        "20 ms)", "Ray's wait, which asks again a whole second after a miss",
        _all_of(_has_params("_private/services.py", "get_node", "gcs_address", "node_id"),
                _has_params("_private/services.py", "_get_gcs_client_options",
                            "gcs_server_address")),
        acceleration=True),
    Capability(
        "no_api_server", "a head without the dashboard starts no dashboard process at all",
        "Ray's minimal dashboard process on the head (0.9 s)",
        _has_params("_private/node.py", "Node.start_api_server", "include_dashboard",
                    "raise_on_failure"),
        acceleration=True),
    Capability(
        "dashboard_beside", "the head's dashboard starts beside the nodes: its raylet and the "
        "other nodes no longer wait for the dashboard's URL (the cluster is ready once both are)",
        "every node waits for the head's dashboard to publish its URL (3 s here)",
        _all_of(_has_params("_private/node.py", "Node.start_api_server", "include_dashboard",
                            "raise_on_failure"),
                _has_text("_private/node.py",
                          "self._webui_url, process_info = ray._private.services.start_api_server(",
                          "webui=self._webui_url"),
                _leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                _in_function("_private/services.py", "start_api_server",
                             "ray_constants.PROCESS_TYPE_DASHBOARD")),
        acceleration=True),
    Capability(
        "worker_setup", "workers exec'd straight into Ray's default_worker.py (0.4 s of CPU "
        "saved each), forked from one import where a zygote runs",
        "Ray's own setup_worker.py for every worker, no zygote",
        _all_of(_has_params("_private/parameter.py", "RayParams.__init__", "setup_worker_path"),
                _has_text("_private/workers/setup_worker.py", "--serialized-runtime-env-context",
                          "--language")),
        acceleration=True),
    Capability(
        "forked_agents", "each node's dashboard and runtime-env agents forked from one import",
        "each agent imports Ray for itself (0.5 s of CPU each, two a node)",
        _all_of(_leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                _has_text("_private/ray_constants.py", "PROCESS_TYPE_RAYLET"),
                _in_function("_private/services.py", "start_raylet",
                             '"--dashboard_agent_command={}"',
                             '"--runtime_env_agent_command={}"'),
                _has_text("dashboard/consts.py",
                          "RAY_enable_pipe_based_agent_to_parent_health_check"),
                _has_text("_private/runtime_env/agent/main.py", "create_check_raylet_task"),
                _has_text("dashboard/agent.py", "create_check_raylet_task")),
        acceleration=True),
    Capability(
        "forked_dashboard", "the head's dashboard forked from the agents' import, where Ray's "
        "dashboard modules were imported once (with forked_agents)",
        "the dashboard imports Ray and its modules for itself (1.5 s of the head's start here)",
        _all_of(_leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                _in_function("_private/services.py", "start_api_server",
                             "ray_constants.PROCESS_TYPE_DASHBOARD", '"dashboard.py"',
                             "unbuffered=False"),
                _has_text("dashboard/dashboard.py", 'if __name__ == "__main__":'),
                _in_function("dashboard/utils.py", "get_all_modules",
                             "pkgutil.walk_packages", "ray.dashboard.modules.__path__")),
        acceleration=True),
    Capability(
        "dashboard_forkserver", "the dashboard's modules started from a forkserver forked from "
        "the dashboard as it starts, holding its imports (with forked_dashboard)",
        "Python's forkserver, a fresh interpreter, imports Ray and the dashboard's modules again "
        "before the first module starts (1.1 s of CPU here)",
        _all_of(_in_function("dashboard/subprocesses/handle.py", "select_start_method",
                             'return "forkserver"'),
                _has_text("dashboard/subprocesses/handle.py",
                          'multiprocessing.get_context("forkserver")'),
                _python_forkserver),
        acceleration=True),
    Capability(
        "lean_agent", "a node's dashboard agent loads no dashboard modules where the cluster "
        "has no dashboard (1.5 s of CPU a node)", "Ray's full dashboard agent on every node",
        _all_of(_has_params("dashboard/utils.py", "get_all_modules", "module_type"),
                _has_text("dashboard/agent.py", '"--minimal"'),
                _leads_with("_private/services.py", "start_ray_process", "command",
                            "process_type"),
                _in_function("_private/services.py", "start_raylet",
                             '"--dashboard_agent_command={}"'),
                _any_of(_has_params("_private/utils.py", "get_dashboard_dependency_error"),
                        _has_params("_private/utils.py",
                                    "check_dashboard_dependencies_installed"))),
        acceleration=True),
    Capability(
        "job_address_file", "a Ray Job's supervisor finds its own cluster's GCS (two clusters "
        "on one machine)", "Ray's guess, which may pick another cluster's GCS",
        _has_params("_private/utils.py", "write_ray_address", "ray_address", "temp_dir")),
    Capability(
        "warm_workers", "idle workers started on each node ahead of the trainer's actors "
        "(PrestartWorkers)", "the trainer's actors start their workers when placed",
        _proto("node_manager_pb2.py", "PrestartWorkersRequest", "keep_alive_duration_secs"),
        acceleration=True),
    Capability(
        "drain_rpc", "a node drained for preemption with a deadline through the GCS (DrainNode)",
        "`ray drain-node`, Ray's own CLI, with the same reason and deadline",
        _proto("autoscaler_pb2.py", "DrainNodeRequest", "deadline_timestamp_ms",
               "DRAIN_NODE_REASON_PREEMPTION")),
    Capability(
        "gcs_removal", "a finished run's leftover actors and placement groups removed through "
        "the GCS", "leftovers reported, not removed",
        _all_of(_proto("gcs_service_pb2.py", "KillActorViaGcsRequest", "no_restart"),
                _proto("gcs_service_pb2.py", "RemovePlacementGroupRequest"))),
    Capability(
        "trainer_reach", "a fault's reach counts everything of the trainer's jobs on the nodes "
        "it hits: its plain tasks leased or running there (the GCS's task events), its "
        "placement-group bundles placed there and its drivers", "a fault's reach counts the "
        "trainer's actors only (a program of plain tasks reads as reached by nothing)",
        _all_of(_proto("gcs_service_pb2.py", "GetTaskEventsRequest", "limit", "filters"),
                _proto("gcs_service_pb2.py", "GetTaskEventsRequest.Filters", "exclude_driver",
                       "state_filters", "NOT_EQUAL"),
                _proto("gcs_service_pb2.py", "GetTaskEventsReply", "events_by_task", "status"),
                _proto("gcs_pb2.py", "TaskEvents", "task_info", "state_updates", "job_id",
                       "attempt_number"),
                _proto("gcs_pb2.py", "TaskStateUpdate", "node_id", "worker_pid", "state_ts_ns"),
                _proto("common_pb2.py", "TaskInfoEntry", "type", "name", "func_or_class_name",
                       "NORMAL_TASK", "RUNNING", "SUBMITTED_TO_WORKER", "FINISHED", "FAILED"),
                _proto("common_pb2.py", "Bundle", "bundle_id", "node_id"),
                _proto("gcs_pb2.py", "PlacementGroupTableData", "bundles", "state", "REMOVED"),
                _proto("gcs_pb2.py", "JobTableData", "driver_address", "driver_pid", "config",
                       "is_dead", "entrypoint"),
                _proto("common_pb2.py", "JobConfig", "ray_namespace"),
                # the job table read as Ray's own job_table reads it (GcsReader.live_jobs)
                _in_function("_private/state.py", "GlobalState.job_table",
                             "skip_submission_job_info_field=True",
                             "skip_is_running_tasks_field=True"))),
    Capability(
        "draining_nodes", "a trainer sees Ray's preemption notices (draining nodes and their "
        "deadlines)", "no notice: the run learns of a preemption when the node dies",
        _has_params("_private/state.py", "GlobalState.get_draining_nodes", "self")),
    Capability(
        "free_per_node", "`rlsim plan --rehearse` shows each node's free GPUs and CPUs after "
        "placing", "the rehearsal says where groups were placed, not what was left",
        _has_params("_private/state.py", "GlobalState.available_resources_per_node", "self")),
    Capability(
        "version_stamp", "a docker node claims another Ray version (ray_version_mismatch)",
        "the version-mismatch story cannot be staged: refused with this reason",
        _has_text("_version.py", "version = ")),
    Capability(
        "train_callbacks", "Ray Train jobs observed through RAY_TRAIN_CALLBACKS (Train V2's "
        "controller callbacks)", "the ray_train adapter refuses: it cannot see the job",
        _all_of(_has_text("train/v2/_internal/callbacks/env_callback.py", "RAY_TRAIN_CALLBACKS"),
                _has_text("train/v2/_internal/execution/callback.py", "class ControllerCallback",
                          "class WorkerGroupCallback", "class ReportCallback",
                          "def after_report", "def after_controller_state_update"),
                _has_text("train/v2/_internal/execution/controller/state.py",
                          "class RestartingState", "class ReschedulingState",
                          "class ErroredState", "class FinishedState",
                          "training_failed_error"),
                _has_params("train/v2/_internal/execution/worker_group/worker_group.py",
                            "WorkerGroup.get_workers", "self"),
                _has_text("train/v2/_internal/execution/worker_group/worker.py",
                          "distributed_context", "node_ip: str", "pid: int"))),
)
BY_NAME = {c.name: c for c in CAPABILITIES}


def _forced_plain() -> set[str]:
    """The capabilities ``RLSIM_RAY_PLAIN`` turns off: names, ``all`` for every acceleration."""
    names = {n.strip() for n in os.environ.get(PLAIN_VAR, "").split(",") if n.strip()}
    if names & {"all", "1", "true", "yes"}:
        names |= {c.name for c in CAPABILITIES if c.acceleration}
    return names


def probe(name: str, s: RaySurface | None = None) -> Status:
    """Whether capability ``name`` can be used with the installed Ray (or ``s``), and why not."""
    cap = BY_NAME[name]
    s = s or surface()
    if s.root is None:
        why = "Ray is not installed"
    elif name in _forced_plain() and s is surface():
        why = f"{PLAIN_VAR} turned it off"
    else:
        why = cap.probe(s)
    return Status(name, why is None, why or "", cap.gives, cap.plain, cap.required)


RECORD_NAME = "ray_probes.json"


def _record_key(s: RaySurface) -> dict:
    """What a record of probe answers holds for: this install of Ray, and these probes (this
    file defines every one of them; ``record.py`` how they are kept)."""
    from rlsim.ray_internals import record

    probes = hashlib.sha256(Path(__file__).read_bytes() + Path(record.__file__).read_bytes())
    return {"root": str(s.root), "version": s.version, "probes": probes.hexdigest()}


def _file_stamps(s: RaySurface, rels) -> dict[str, list[int] | None]:
    stamps = {}
    for rel in sorted(rels):
        try:
            st = os.stat(s.root / rel)
            stamps[rel] = [st.st_mtime_ns, st.st_size]
        except OSError:
            stamps[rel] = None
    return stamps


def _record_path() -> Path | None:
    """The record of the installed Ray in the rlsim home (one per install: venvs of several Ray
    releases share a home), where the home exists (a process of a container node,
    or one that never made a home, probes without one)."""
    try:
        from rlsim.host.home import home, rlsim_home

        if not rlsim_home().is_dir():
            return None
        install = hashlib.sha256(str(surface().root).encode()).hexdigest()[:12]
        return home() / RECORD_NAME.replace(".json", f"-{install}.json")
    except Exception:  # noqa: BLE001 - a home rlsim refuses: probe without a record
        return None


_record_damage: list[str] = []  # what was wrong with the kept record this process read


@functools.cache
def _installed_answers() -> dict[str, str | None]:
    """Every capability's probe of the installed Ray (None: in force, else why not). Probing
    parses a dozen of Ray's files and scans _raylet.so (0.23 s here, in every rlsim process:
    the CLI and the node launcher it waits for each paid it), so the answers are kept in the
    rlsim home, keyed by the install, its version and these probes, with the size and mtime of
    every file the probes read: a Ray reinstalled, upgraded or edited is probed again. A record
    read back damaged (its checksum, its shape, a FIFO: :mod:`.record`) is probed again too, and
    :func:`record_note` says so."""
    from rlsim.ray_internals import record

    _record_damage.clear()
    s = surface()
    path = _record_path() if s.root is not None else None
    key = _record_key(s) if path is not None else None
    if path is not None:
        kept, damage = record.read(path, key, lambda rels: _file_stamps(s, rels), set(BY_NAME))
        if kept is not None:
            return kept
        if damage:
            _record_damage[:] = [damage]
    answers = {c.name: (c.probe(s) if s.root is not None else "Ray is not installed")
               for c in CAPABILITIES}
    if path is not None:
        from rlsim.files import write_file

        kept = record.make(key, _file_stamps(s, s.read), answers)
        try:
            write_file(path, json.dumps(kept, indent=1), mode=0o600)
        except OSError as e:  # answered all the same; the next process probes
            if _record_damage:
                _record_damage.append(f"not rewritten: {e}")
    return answers


def record_note() -> str | None:
    """What to tell the user of the kept probe answers, once this process has read them: that
    the record was damaged and Ray probed again instead (None: nothing to tell)."""
    _installed_answers()
    if not _record_damage:
        return None
    damage, *unwritten = _record_damage
    return (f"the kept probe answers were damaged ({damage}): Ray's files were probed again"
            + (f"; the record was {unwritten[0]}" if unwritten else ", and the record rewritten"))


@functools.cache
def _installed(name: str, forced: frozenset[str]) -> Status:
    cap = BY_NAME[name]
    why = _installed_answers()[name]
    if name in forced and surface().root is not None:
        why = f"{PLAIN_VAR} turned it off"
    return Status(name, why is None, why or "", cap.gives, cap.plain, cap.required)


def status(name: str) -> Status:
    """:func:`probe` of the installed Ray, once per process (and per ``RLSIM_RAY_PLAIN``)."""
    return _installed(name, frozenset(_forced_plain()))


def available(name: str) -> bool:
    return status(name).available


def statuses() -> list[Status]:
    return [status(c.name) for c in CAPABILITIES]


def require(name: str) -> None:
    """Raise :class:`RayInternalsError` naming the Ray version and the range when capability
    ``name`` (one rlsim cannot do without) is missing."""
    st = status(name)
    if not st.available:
        raise RayInternalsError(
            f"rlsim cannot use Ray {ray_version()}: {st.why} ({st.gives}). rlsim is proven on "
            f"Ray {SUPPORTED_TEXT}; fix: install a Ray release in that range")


def summary() -> dict:
    """What the timeline, ``rlsim doctor --json`` and ``rlsim ray --json`` say of the installed
    Ray: its version, whether rlsim is proven on it, and each capability in force or not, why."""
    all_ = statuses()
    return {"version": ray_version(), "python": sys.version.split()[0],
            "outside_range": version_problem(),
            "in_force": [s.name for s in all_ if s.available],
            "plain": {s.name: s.why for s in all_ if not s.available}}


def cluster_report(rewrites: dict[str, int] | None, *, lean: bool, forked: bool) -> dict:
    """:func:`summary` for one simulated cluster: an acceleration this cluster has no use for is
    under ``unused`` (``lean``: it runs without the dashboard; ``forked``: its nodes have
    cgroups, which the agent zygote needs), and one whose rewrite of Ray's raylet command
    matched fewer agent commands than the launcher saw raylets (``rewrites``, counted by
    :mod:`.launch`; None: not counted) is on Ray's plain path, with the counts."""
    report = {**summary(), "unused": {}, "rewrites": rewrites}
    in_force, plain = report["in_force"], report["plain"]
    for name, wanted, kind, per_raylet, why in (
            ("lean_agent", lean, "lean", 1, "the cluster runs the dashboard"),
            ("forked_agents", forked, "forked", 2, "the nodes have no cgroups")):
        if name not in in_force:
            continue
        if not wanted:
            in_force.remove(name)
            report["unused"][name] = why
        elif rewrites and rewrites.get("raylets"):
            want, got = rewrites["raylets"] * per_raylet, rewrites.get(kind, 0)
            if got < want:
                in_force.remove(name)
                plain[name] = (f"{got} of {want} agent commands in Ray's raylet commands had "
                               "the form rlsim rewrites")
    # the dashboard's two: its fork, and its forkserver's (which needs the dashboard forked)
    for name, kind in (("forked_dashboard", "dashboard"), ("dashboard_forkserver", "forkserver")):
        if name not in in_force:
            continue
        if lean or not forked:
            in_force.remove(name)
            report["unused"][name] = ("the cluster runs no dashboard" if lean else
                                      "the nodes have no cgroups")
        elif rewrites and rewrites.get("raylets") and not rewrites.get(kind):
            in_force.remove(name)
            plain[name] = "Ray's dashboard command had no form rlsim rewrites"
    return report


# ---- authentication -----------------------------------------------------------------------------


def token_auth() -> bool:
    """Whether clusters this Ray starts can check a token (and rlsim turns it on)."""
    return available("token_auth")


def connect_env(token_path: str) -> dict[str, str]:
    """What a process needs in its environment to talk to an rlsim cluster: the token settings
    where this Ray has token auth, nothing where it has none (an open cluster)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path} if token_auth() else {}


def open_cluster_line() -> str:
    """One line for a cluster no token protects: why, and what brings the protection."""
    st = status("token_auth")
    return (f"this cluster is unauthenticated: any local process can connect to it and run code "
            f"as {'root' if os.geteuid() == 0 else 'you'} (Ray {ray_version()} has no token auth: "
            f"{st.why}; Ray {TOKEN_AUTH_SINCE} and later have it)")


def detached_actors_problem() -> str | None:
    """Why actors that outlive the command that made them (a substrate's detached host actors)
    must not be left on this Ray, or None. Below :data:`DETACHED_PORTS_SINCE`, once that command
    ended its raylet handed the actor's worker port to a later driver on the same machine (the
    next `rlsim status` or `rlsim down`), whose core worker then aborted: grpc's "address already
    in use". A fix in the raylet's C++, with no trace in Ray's Python to probe: known by the
    release."""
    version = ray_version()
    if version is None or Version(Version(version).base_version) >= Version(DETACHED_PORTS_SINCE):
        return None
    return (f"Ray {version}'s raylet gives a detached actor's worker port to the next driver on "
            f"its machine once the actor's creator ended, and that driver aborts (address "
            f"already in use); Ray {DETACHED_PORTS_SINCE} and later keep it")


def auth_refusal() -> str | None:
    """Why this process must not start a cluster: run as root on a Ray without token auth, the
    cluster would let every local user run code as root, unless ``RLSIM_ALLOW_UNAUTHENTICATED=1``
    says the user takes that risk. None: it may."""
    if token_auth() or os.geteuid() != 0:
        return None
    if os.environ.get(ALLOW_OPEN_VAR, "") in ("1", "true", "yes"):
        return None
    return (f"refusing to start a cluster as root on Ray {ray_version()}: "
            f"{open_cluster_line()}. Fix: install Ray {TOKEN_AUTH_SINCE} or later (token auth), "
            f"run rlsim as an unprivileged user, or export {ALLOW_OPEN_VAR}=1 to accept that "
            "every local user can run code as root while the cluster runs")


def export_auth_env() -> None:
    """Put the token-auth settings into this process's environment, unless already set. Call it
    before anything imports ``ray``: Ray's C++ config reads ``RAY_AUTH_MODE`` once, when ``ray``
    is first imported, and a process that imported Ray without it can never connect to a
    token-auth cluster (the pytest plugin does this at start-up)."""
    from rlsim.host.home import auth_token_path

    for key, value in connect_env(str(auth_token_path())).items():
        os.environ.setdefault(key, value)


def flag_env(capability: str, values: dict[str, str]) -> dict[str, str]:
    """``values`` (``RAY_<setting>`` -> value) where ``capability`` is in force, else nothing:
    a setting Ray does not read is never set, so it cannot silently do nothing."""
    return dict(values) if available(capability) else {}


def health_check_env(initial_delay_ms: int, period_ms: int, timeout_ms: int,
                     failure_threshold: int) -> dict[str, str]:
    """The GCS's health checks of every node, as rlsim tunes them (fast_health_checks)."""
    return flag_env("fast_health_checks", dict(zip(HEALTH_FLAGS, map(str, (
        initial_delay_ms, period_ms, timeout_ms, failure_threshold)), strict=True)))


def driver_env(gcs_reconnect_timeout_s: float) -> dict[str, str]:
    """What a trainer's driver sets before it imports Ray: how long it waits for a lost GCS."""
    return flag_env("driver_gcs_timeout",
                    {RECONNECT_FLAGS[0]: str(int(gcs_reconnect_timeout_s))})
