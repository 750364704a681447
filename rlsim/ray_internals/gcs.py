"""Ray's GCS and raylets asked directly: its tables read without a driver, and the few RPCs rlsim
sends (warm workers, a drain with a deadline, removing leftovers). Each use is a capability of
:mod:`rlsim.ray_internals`; where it is missing the function here takes Ray's plain
path or says what it could not do. Ray is imported inside the functions (about 0.4 s)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

from rlsim import ray_internals as ri
from rlsim.ray_internals.settings import AUTH_MODE_VAR, USE_TLS_VAR

# a GCS method every Ray release here serves, with an empty request: the cheapest question that
# passes (or fails) the GCS's token check
CLUSTER_ID_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
KILL_ACTOR_METHOD = "/ray.rpc.ActorInfoGcsService/KillActorViaGcs"
REMOVE_GROUP_METHOD = "/ray.rpc.PlacementGroupInfoGcsService/RemovePlacementGroup"
DRAIN_METHOD = "/ray.rpc.autoscaler.AutoscalerStateService/DrainNode"
PRESTART_METHOD = "/ray.rpc.NodeManagerService/PrestartWorkers"
TASK_EVENTS_METHOD = "/ray.rpc.TaskInfoGcsService/GetTaskEvents"
# the namespaces of Ray's own jobs: the dashboard's drivers (``_ray_internal_dashboard``: Ray's
# job_head leaves out every namespace starting ``_ray_internal``) and Ray Jobs' supervisor actors
# (dashboard/modules/job/common.py); their work is never a user's (a test reads both in Ray)
RAY_OWN_NAMESPACES = ("_ray_internal", "SUPERVISOR_ACTOR_RAY_NAMESPACE")
# A plain task's states while it holds a worker of a node: leased there (its owner pushed it to a
# worker the raylet granted), fetching its arguments there, or running. Before, it has no node;
# after (FINISHED, FAILED), it holds none.
HELD_TASK_STATES = frozenset({"SUBMITTED_TO_WORKER", "PENDING_ARGS_FETCH",
                              "PENDING_OBJ_STORE_MEM_AVAIL", "GETTING_AND_PINNING_ARGS",
                              "RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT"})
# A plain task's states while it waits for a node (a retry of one whose node died, one whose
# resources no node has): listed on no node, what a stalled trainer may be waiting on
WAITING_TASK_STATES = frozenset({"PENDING_NODE_ASSIGNMENT", "PENDING_ARGS_AVAIL"})
TASK_EVENTS_LIMIT = 10_000  # the GCS keeps up to 100,000 by default; the held ones are few
TASK_EVENTS_TIMEOUT_S = 2.0  # inside the nemesis's 3 s bound on a fault's reach


def _set_auth(token_path: str) -> None:
    """The auth settings, in this process. Ray's C++ reads them once, when Ray is imported: in a
    process that imported Ray first (a user's script with ``import ray`` at its top) every GCS
    call was refused, and the first wait for a cluster's nodes spent its whole timeout on
    "Unauthenticated" retries before it said the nodes were not alive. There Ray's config is
    read again (auth_reread)."""
    env = ri.connect_env(token_path)
    os.environ.update(env)
    if not env or "ray._raylet" not in sys.modules or not ri.available("auth_reread"):
        return  # Ray reads them when it is imported (or cannot again: see auth_reread)
    from ray._raylet import AuthenticationMode, Config, get_authentication_mode

    if get_authentication_mode() != AuthenticationMode.TOKEN:
        Config.initialize("")


def join_open_cluster(gcs_address: str) -> None:
    """Before this process joins, as a driver, a Ray cluster rlsim did not start (a substrate)
    whose GCS answers without a token: Ray's auth mode off in this process. A process that is
    in token mode (rlsim's own clusters: the pytest plugin sets it at start-up) checks a token on
    the calls it serves, and the open cluster's GCS presents none: it took the driver for dead
    and cancelled every actor the driver owned before it ran. rlsim's own clusters are read
    with the token again afterwards (:func:`_set_auth`, read again as this is)."""
    if os.environ.get(AUTH_MODE_VAR, "disabled") == "disabled" or \
            auth_in_force(gcs_address) != "none":
        return
    os.environ[AUTH_MODE_VAR] = "disabled"
    if "ray._raylet" in sys.modules and ri.available("auth_reread"):
        from ray._raylet import Config

        Config.initialize("")


class GcsReader:
    """Ray's read-only view of one GCS (Ray's ``GlobalState``, no driver, no ``ray.init``):
    the tables as Ray's own ``ray.nodes()``/``ray.state`` return them, and (trainer_reach) the
    GCS's task events, asked over one gRPC channel kept for the reader's life."""

    def __init__(self, gs, gcs_address: str = "", token_path: str = "") -> None:
        self._gs = gs
        self._address, self._token_path = gcs_address, token_path
        self._calls = contextlib.ExitStack()
        self._call = None

    def close(self) -> None:
        self._call = None
        self._calls.close()

    def node_table(self) -> list[dict]:
        """One dict per registration (a restarted node appears twice)."""
        return self._gs.node_table()

    def actor_table(self) -> dict[str, dict]:
        return self._gs.actor_table(None)

    def job_table(self) -> list[dict]:
        return self._gs.job_table()

    def available_resources_per_node(self) -> dict[str, dict]:
        """Free resources by node id; {} where this Ray cannot say (free_per_node)."""
        if not ri.available("free_per_node"):
            return {}
        return self._gs.available_resources_per_node()

    def _accessor(self):
        # Ray 2.52 renamed the lazy connect (_check_connected + the global_state_accessor
        # attribute before it); both are probed by gcs_reads
        gs = self._gs
        if hasattr(gs, "_connect_and_get_accessor"):
            return gs._connect_and_get_accessor()
        gs._check_connected()
        return gs.global_state_accessor

    def live_actors(self) -> list[dict]:
        """The actors not dead, each ``{"class", "name", "pid", "ip", "module", "job",
        "state"}`` (its process, the module of its class: whose it is)."""
        from ray.core.generated import gcs_pb2

        state = gcs_pb2.ActorTableData.ActorState
        return [{"class": a.class_name, "name": a.name, "pid": a.pid,
                 "ip": a.address.ip_address, "job": a.job_id.hex(),
                 "module": a.function_descriptor.python_function_descriptor.module_name,
                 "state": state.Name(a.state)}
                for a in map(gcs_pb2.ActorTableData.FromString,
                             self._accessor().get_actor_table(None, None))
                if a.state != state.Value("DEAD")]

    def placed_bundles(self) -> list[dict]:
        """Each bundle of the placement groups not removed that Ray placed on a node, as
        ``{"group", "name", "bundle", "node_id", "job", "state"}`` (ids hex): what a node holds
        reserved for a job. [] where this Ray cannot say (trainer_reach)."""
        if not ri.available("trainer_reach"):
            return []
        from ray.core.generated import gcs_pb2

        removed = gcs_pb2.PlacementGroupTableData.PlacementGroupState.Value("REMOVED")
        found = []
        for raw in self._accessor().get_placement_group_table():
            g = gcs_pb2.PlacementGroupTableData.FromString(raw)
            if g.state == removed:
                continue
            for b in g.bundles:
                if b.node_id:  # an unplaced bundle has no node yet
                    found.append({"group": g.placement_group_id.hex(), "name": g.name,
                                  "bundle": b.bundle_id.bundle_index, "node_id": b.node_id.hex(),
                                  "job": g.creator_job_id.hex(), "state": gcs_pb2.
                                  PlacementGroupTableData.PlacementGroupState.Name(g.state)})
        return found

    def live_jobs(self) -> list[dict]:
        """The jobs whose driver is connected, as ``{"job", "pid", "ip", "namespace",
        "entrypoint"}``: where each driver runs and what made it. [] where this Ray cannot say
        (trainer_reach)."""
        if not ri.available("trainer_reach"):
            return []
        from ray.core.generated import gcs_pb2

        jobs = map(gcs_pb2.JobTableData.FromString, self._accessor().get_job_table(
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True))
        return [{"job": j.job_id.hex(), "pid": j.driver_pid,
                 "ip": j.driver_address.ip_address,
                 "namespace": j.config.ray_namespace, "entrypoint": j.entrypoint}
                for j in jobs if not j.is_dead]

    def held_tasks(self) -> list[dict] | None:
        """The plain tasks (not actors' methods, not drivers) that hold a worker of a node now,
        leased there or running (:data:`HELD_TASK_STATES`), and those waiting for a node
        (:data:`WAITING_TASK_STATES`, ``node_id`` empty), from the GCS's task events, as
        ``{"name", "job", "node_id", "pid", "state", "attempt"}``. Workers report their events
        about once a second, so a task leased in the last second may not be listed yet. None
        where this Ray cannot say (trainer_reach)."""
        if not ri.available("trainer_reach"):
            return None
        from ray.core.generated import common_pb2, gcs_pb2
        from ray.core.generated import gcs_service_pb2 as rpc

        if self._call is None:
            self._call = self._calls.enter_context(_rpc(self._address, self._token_path))
        filters = rpc.GetTaskEventsRequest.Filters(exclude_driver=True)
        for done in ("FINISHED", "FAILED"):  # the GCS keeps them all: ask for the rest only
            filters.state_filters.append(rpc.GetTaskEventsRequest.Filters.StateFilter(
                state=done, predicate=rpc.FilterPredicate.Value("NOT_EQUAL")))
        reply = self._call(TASK_EVENTS_METHOD, rpc.GetTaskEventsRequest(
            limit=TASK_EVENTS_LIMIT, filters=filters), rpc.GetTaskEventsReply,
            timeout=TASK_EVENTS_TIMEOUT_S)
        if reply.status.code:  # a refusal is not an empty answer
            raise RuntimeError(f"the GCS refused GetTaskEvents: {reply.status.message}")
        normal = common_pb2.TaskType.Value("NORMAL_TASK")
        found = []
        for t in reply.events_by_task:
            update: gcs_pb2.TaskStateUpdate = t.state_updates
            if t.task_info.type != normal or not update.state_ts_ns:
                continue
            state = common_pb2.TaskStatus.Name(max(update.state_ts_ns.items(),
                                                   key=lambda kv: kv[1])[0])
            held = state in HELD_TASK_STATES and update.node_id
            if held or state in WAITING_TASK_STATES:
                found.append({"name": t.task_info.name or t.task_info.func_or_class_name,
                              "job": t.job_id.hex(),
                              "node_id": update.node_id.hex() if held else "",
                              "pid": update.worker_pid or None, "state": state,
                              "attempt": t.attempt_number})
        return found

    def objects(self) -> list[dict]:
        """The actors not dead, placement groups not removed and jobs whose driver is
        connected, as dicts of :class:`rlsim.backends.ray_state.RayObject`'s fields."""
        from ray.core.generated import gcs_pb2

        accessor = self._accessor()
        actors = [gcs_pb2.ActorTableData.FromString(a)
                  for a in accessor.get_actor_table(None, None)]
        groups = [gcs_pb2.PlacementGroupTableData.FromString(g)
                  for g in accessor.get_placement_group_table()]
        found = []
        actor_state = gcs_pb2.ActorTableData.ActorState
        for a in actors:
            if a.state == actor_state.Value("DEAD"):
                continue
            fd = a.function_descriptor.python_function_descriptor
            found.append({"kind": "actor", "id": a.actor_id.hex(),
                          "name": a.class_name + (f" {a.name!r}" if a.name else ""),
                          "module": fd.module_name, "job": a.job_id.hex(),
                          "detached": a.is_detached, "node": a.address.ip_address,
                          "state": actor_state.Name(a.state)})
        group_state = gcs_pb2.PlacementGroupTableData.PlacementGroupState
        for g in groups:
            if g.state == group_state.Value("REMOVED"):
                continue
            found.append({"kind": "placement group", "id": g.placement_group_id.hex(),
                          "name": g.name or "(unnamed)", "job": g.creator_job_id.hex(),
                          "detached": g.is_detached, "state": group_state.Name(g.state),
                          "creator": g.creator_actor_id.hex()})
        for job in self.job_table():
            if not job["IsDead"]:
                found.append({"kind": "job", "id": job["JobID"],
                              "name": f"driver pid {job.get('DriverPid')}", "job": job["JobID"],
                              "node": job.get("DriverIPAddress", ""), "state": "RUNNING"})
        return found


@contextlib.contextmanager
def reader(gcs_address: str, token_path: str) -> Iterator[GcsReader]:
    """A :class:`GcsReader` of the GCS at ``gcs_address`` (with the cluster's token where this
    Ray has token auth), disconnected on exit."""
    ri.require("gcs_reads")
    _set_auth(token_path)
    from ray._private.state import GlobalState
    from ray._raylet import GcsClientOptions

    gs = GlobalState()
    gs._initialize_global_state(GcsClientOptions.create(
        gcs_address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False))
    read = GcsReader(gs, gcs_address, token_path)
    try:
        yield read
    finally:
        read.close()
        gs.disconnect()


def wait_registered(gcs_address: str, node_id: str, timeout_s: float = 30.0) -> None:
    """Return once node ``node_id`` is alive in the GCS's node table (polled every 20 ms), or
    after ``timeout_s`` (the caller's own wait then says what is missing)."""
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


# ---- RPCs ----------------------------------------------------------------------------------------


def _metadata() -> tuple:
    """The token this process presents (Ray's own loader), or none where Ray has no token auth."""
    if not ri.token_auth():
        return ()
    from ray._private.authentication.grpc_authentication_client_interceptor import (
        _get_authentication_metadata_tuple,
    )

    return _get_authentication_metadata_tuple()


@contextlib.contextmanager
def _rpc(address: str, token_path: str):
    """A caller of one of Ray's gRPC services at ``address`` (a GCS, a raylet's node manager)
    with the cluster's token: ``call(method, request, reply=None, timeout=10)`` returns the
    reply parsed as ``reply`` (a message class), or its bytes."""
    _set_auth(token_path)
    import grpc

    channel = grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)])
    metadata = _metadata()

    def call(method: str, request, reply=None, timeout: float = 10):
        return channel.unary_unary(
            method, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString if reply else bytes)(
            request, timeout=timeout, metadata=metadata)

    try:
        yield call
    finally:
        channel.close()


def remove(gcs_address: str, token_path: str, objects: list[tuple[str, str, str]]) -> list[str]:
    """Kill the actors and remove the placement groups among ``objects`` (``(kind, id, name)``)
    through the GCS (its own RPCs, no driver); what could not be removed, in words."""
    if not ri.available("gcs_removal"):
        why = ri.status("gcs_removal").why
        return [f"{kind} {name} ({id_[:8]}): not removed ({why})" for kind, id_, name in objects
                if kind in ("actor", "placement group")]
    import grpc
    from ray.core.generated import gcs_service_pb2 as rpc

    failed = []
    with _rpc(gcs_address, token_path) as call:
        for kind, id_, name in objects:
            if kind == "actor":
                method, request = KILL_ACTOR_METHOD, rpc.KillActorViaGcsRequest(
                    actor_id=bytes.fromhex(id_), force_kill=True, no_restart=True)
            elif kind == "placement group":
                method, request = REMOVE_GROUP_METHOD, rpc.RemovePlacementGroupRequest(
                    placement_group_id=bytes.fromhex(id_))
            else:
                continue
            try:
                call(method, request, timeout=5)
            except grpc.RpcError as e:
                failed.append(f"{kind} {name} ({id_[:8]}): {e.code().name}")
    return failed


def drain(gcs_address: str, token_path: str, node_id: str, deadline_ms: int,
          message: str) -> str | None:
    """Ask the GCS to drain node ``node_id`` for preemption with a deadline (unix ms): what a
    cloud's spot reclaim or a KubeRay scale-down sends through Ray's autoscaler. Ray stops
    placing work there and tells whoever asks (``get_draining_nodes``); it kills nothing itself.
    Returns None when accepted, else Ray's reason. Without drain_rpc, ``ray drain-node``."""
    if not ri.available("drain_rpc"):
        return _drain_by_cli(gcs_address, token_path, node_id, deadline_ms, message)
    from ray.core.generated import autoscaler_pb2 as pb

    with _rpc(gcs_address, token_path) as call:
        reply = call(DRAIN_METHOD,
                     pb.DrainNodeRequest(node_id=bytes.fromhex(node_id),
                                         reason=pb.DrainNodeReason.Value(
                                             "DRAIN_NODE_REASON_PREEMPTION"),
                                         reason_message=message,
                                         deadline_timestamp_ms=deadline_ms),
                     pb.DrainNodeReply)
    return None if reply.is_accepted else (reply.rejection_reason_message or "rejected")


def _drain_by_cli(gcs_address: str, token_path: str, node_id: str, deadline_ms: int,
                  message: str) -> str | None:
    remaining = max(0, round(deadline_ms / 1000 - time.time()))
    done = subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "drain-node", "--address", gcs_address,
         "--node-id", node_id, "--reason", "DRAIN_NODE_REASON_PREEMPTION",
         "--reason-message", message, "--deadline-remaining-seconds", str(remaining)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, **ri.connect_env(token_path)})
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"ray drain-node exited {done.returncode}"])[-1]


def prestart(raylet: str, token_path: str, count: int, keep_alive_s: int) -> bool:
    """Ask the raylet at ``raylet`` (host:port of its node manager) to start ``count`` idle
    Python workers now, kept ``keep_alive_s`` seconds, bound to no job: the next actors placed
    there (of any job with no runtime environment of its own) take them instead of forking
    cold ones. False where this Ray cannot be asked (warm_workers): nothing started."""
    if not ri.available("warm_workers"):
        return False
    from ray.core.generated import common_pb2
    from ray.core.generated import node_manager_pb2 as pb

    with _rpc(raylet, token_path) as call:
        call(PRESTART_METHOD,
             pb.PrestartWorkersRequest(language=common_pb2.PYTHON, num_workers=count,
                                       keep_alive_duration_secs=keep_alive_s),
             pb.PrestartWorkersReply)
    return True


# ---- what a connected driver asks ----------------------------------------------------------------


def draining_nodes() -> dict[str, int]:
    """In a driver connected with ``ray.init``: the nodes Ray is draining, each with its deadline
    (unix ms, 0 for none). {} where this Ray cannot say (draining_nodes)."""
    if not ri.available("draining_nodes"):
        return {}
    import ray._private.state

    return ray._private.state.state.get_draining_nodes()


def free_per_node() -> dict[str, dict]:
    """In a driver connected with ``ray.init``: the free resources of each node by id; {} where
    this Ray cannot say (free_per_node)."""
    if not ri.available("free_per_node"):
        return {}
    import ray._private.state

    return ray._private.state.available_resources_per_node()


# ---- authentication, read from the cluster -------------------------------------------------------


def refusal(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """The GCS's words if it refuses the token this process would present (Ray's own settings,
    read when Ray was imported), else None: accepted, or not known (no Ray, no token auth in
    this Ray, a token setting Ray cannot read, any other error: Ray's own connect then says)."""
    try:
        metadata = _metadata()
    except Exception:  # noqa: BLE001 - no Ray, or a token setting it cannot read: Ray will say
        return None
    try:
        return _unauthenticated(host, port, metadata, timeout_s)
    except ImportError:  # no gRPC: Ray's own connect says
        return None


def auth_in_force(gcs_address: str, timeout_s: float = 3.0) -> str:
    """How the GCS at ``gcs_address`` is protected, asked of the GCS itself with no token:
    ``"token"`` (it refuses), ``"none"`` (it answers anyone) or ``"unknown (why)"``."""
    host, _, port = gcs_address.rpartition(":")
    try:
        refused = _unauthenticated(host.strip("[]"), int(port), (), timeout_s, strict=True)
    except Exception as e:  # noqa: BLE001 - reported, never raised: a doctor's line
        return f"unknown ({type(e).__name__}: {str(e)[:120]})"
    return "token" if refused else "none"


def no_answer(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """Why no Ray GCS answers at ``host:port``, in words, within about twice ``timeout_s``; None
    where one does: its greeting heard (:func:`rlsim.reach.gcs_silence`), then a request answered
    (:func:`unanswered`). Asked before Ray's own connect, which waits minutes on either.

    The one question every front end asks before it hands an address to Ray (``rlsim status``,
    ``down`` and ``doctor``, ``--backend real``, ``rlsim plan --ray-address``, the launchers'
    wait); each says the address and these words in one line. Not for polls during a run
    (:func:`rlsim.backends.ray_state._listens` says why)."""
    from rlsim.reach import gcs_silence

    return gcs_silence(host, port, timeout_s) or unanswered(host, port, timeout_s)


def unanswered(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """What keeps the GCS at ``host:port`` from answering one request (its cluster id) within
    ``timeout_s``, in words; None once it answers anything, a refusal of the token included, or
    where it cannot be asked here (no gRPC; TLS on, which this plain channel does not speak).

    Asked after :func:`rlsim.reach.gcs_silence`, which hears a server's greeting alone: a server
    that greets and then answers nothing (a GCS whose handlers are stuck) passed it, and Ray's own
    connect then waited 45 s per try, twice, printing only warnings."""
    if os.environ.get(USE_TLS_VAR, "0").lower() in ("1", "true"):
        return None
    try:
        import grpc
    except ImportError:
        return None
    try:
        _unauthenticated(host, port, (), timeout_s, strict=True)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"it took the connection but answered no request within {timeout_s:g} s"
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            return f"unavailable: {(e.details() or 'no details').splitlines()[0][:200]}"
    return None


def _unauthenticated(host: str, port: int, metadata: tuple, timeout_s: float,
                     strict: bool = False) -> str | None:
    import grpc

    channel = grpc.insecure_channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
                                    options=[("grpc.enable_http_proxy", 0)])  # as Ray's own
    try:
        channel.unary_unary(CLUSTER_ID_METHOD, request_serializer=bytes,
                            response_deserializer=bytes)(b"", timeout=timeout_s,
                                                         metadata=metadata)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:
            return e.details() or "unauthenticated"
        if strict:
            raise
    finally:
        channel.close()
    return None
