"""Ask a cluster's GCS what it holds: its nodes, its live actors, placement groups and jobs (and
remove some of them). Straight from the GCS's tables and RPCs, no driver; imports Ray lazily (about
0.4 s)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass


def connect_env(token_path: str) -> dict[str, str]:
    """What a process needs in its environment to talk to an rlsim cluster (token auth on)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}


def export_auth_env() -> None:
    """Put the rlsim token-auth settings into this process's environment, unless already set.

    Call it before anything imports ``ray``: Ray's C++ config reads ``RAY_AUTH_MODE`` once, when
    ``ray`` is first imported, and a process that imported Ray without it can never connect to a
    token-auth cluster (the pytest plugin does this at start-up).
    """
    from rlsim.host.home import auth_token_path

    for key, value in connect_env(str(auth_token_path())).items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def global_state(gcs_address: str, token_path: str):
    """Ray's read-only view of a GCS (no driver, no ``ray.init``).

    Sets the auth variables in this process first: Ray's C++ layer reads them once.
    """
    os.environ.update(connect_env(token_path))
    from ray._private.state import GlobalState
    from ray._raylet import GcsClientOptions

    gs = GlobalState()
    gs._initialize_global_state(
        GcsClientOptions.create(
            gcs_address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False
        )
    )
    try:
        yield gs
    finally:
        gs.disconnect()


def node_table(gcs_address: str, token_path: str) -> list[dict]:
    """Ray's node table: one dict per registration (a restarted node appears twice)."""
    with global_state(gcs_address, token_path) as gs:
        return gs.node_table()


def alive_actors(gcs_address: str, token_path: str) -> list[dict]:
    """Ray's alive actors: ``{"class", "pid", "ip"}`` each, from the GCS's actor table."""
    with global_state(gcs_address, token_path) as gs:
        actors = gs.actor_table(None)
    return [{"class": a["ActorClassName"], "pid": a["Pid"], "ip": a["Address"]["IPAddress"]}
            for a in actors.values() if a["State"] == "ALIVE"]


def alive_nodes(gcs_address: str, token_path: str,
                exclude_ids: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Alive registrations in Ray's node table by node address, leaving out ``exclude_ids`` (a
    killed node the GCS has not declared dead yet). A GCS that does not answer (its process
    killed while the head's others live on) sees nobody alive, as a dead head does."""
    os.environ.update(connect_env(token_path))  # before Ray is imported: it reads them once
    from ray.exceptions import RaySystemError

    if not _listens(gcs_address):  # Ray's client would retry for 15 s, then raise
        return {}
    try:
        table = node_table(gcs_address, token_path)
    except RaySystemError:  # "Failed to connect to GCS"
        return {}
    return {entry["NodeManagerAddress"]: entry for entry in table
            if entry["Alive"] and entry["NodeID"] not in exclude_ids}


def _listens(address: str, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class RayObject:
    """One live object in a cluster's GCS: an actor, a placement group or a job, with what tells
    whose it is (the module of an actor's class, its job, whether it outlives its job)."""

    kind: str          # "actor", "placement group" or "job"
    id: str            # hex
    name: str          # an actor's class (and name), a group's name, a job's entrypoint
    module: str = ""   # the Python module an actor's class comes from
    job: str = ""      # the job that made it
    detached: bool = False
    node: str = ""     # the address of the node it runs on
    state: str = ""
    creator: str = ""  # a placement group's creating actor (hex), if an actor made it


def ray_objects(gcs_address: str, token_path: str) -> list[RayObject]:
    """The actors not dead, placement groups not removed and jobs whose driver is connected,
    read straight from the GCS's tables (no driver)."""
    from ray.core.generated import gcs_pb2

    with global_state(gcs_address, token_path) as gs:
        accessor = gs._connect_and_get_accessor()
        actors = [gcs_pb2.ActorTableData.FromString(a)
                  for a in accessor.get_actor_table(None, None)]
        groups = [gcs_pb2.PlacementGroupTableData.FromString(g)
                  for g in accessor.get_placement_group_table()]
        jobs = gs.job_table()
    found = []
    dead = gcs_pb2.ActorTableData.ActorState.Value("DEAD")
    for a in actors:
        if a.state == dead:
            continue
        fd = a.function_descriptor.python_function_descriptor
        name = a.class_name + (f" {a.name!r}" if a.name else "")
        found.append(RayObject("actor", _hex(a.actor_id), name, fd.module_name,
                               _hex(a.job_id), a.is_detached, a.address.ip_address,
                               gcs_pb2.ActorTableData.ActorState.Name(a.state)))
    removed = gcs_pb2.PlacementGroupTableData.PlacementGroupState.Value("REMOVED")
    for g in groups:
        if g.state == removed:
            continue
        found.append(RayObject("placement group", _hex(g.placement_group_id),
                               g.name or "(unnamed)", job=_hex(g.creator_job_id),
                               detached=g.is_detached,
                               state=gcs_pb2.PlacementGroupTableData.PlacementGroupState.Name(
                                   g.state),
                               creator=_hex(g.creator_actor_id)))
    for job in jobs:
        if not job["IsDead"]:
            found.append(RayObject("job", job["JobID"], f"driver pid {job.get('DriverPid')}",
                                   job=job["JobID"], node=job.get("DriverIPAddress", ""),
                                   state="RUNNING"))
    return found


def remove(gcs_address: str, token_path: str, objects: list[RayObject]) -> list[str]:
    """Kill the actors and remove the placement groups among ``objects`` through the GCS (its
    own RPCs, no driver); what could not be removed, in words."""
    import grpc
    from ray.core.generated import gcs_service_pb2 as rpc

    failed = []
    with _rpc(gcs_address, token_path) as call:
        for obj in objects:
            if obj.kind == "actor":
                method = "/ray.rpc.ActorInfoGcsService/KillActorViaGcs"
                request = rpc.KillActorViaGcsRequest(actor_id=bytes.fromhex(obj.id),
                                                     force_kill=True, no_restart=True)
            elif obj.kind == "placement group":
                method = "/ray.rpc.PlacementGroupInfoGcsService/RemovePlacementGroup"
                request = rpc.RemovePlacementGroupRequest(placement_group_id=bytes.fromhex(
                    obj.id))
            else:
                continue
            try:
                call(method, request, timeout=5)
            except grpc.RpcError as e:
                failed.append(f"{obj.kind} {obj.name} ({obj.id[:8]}): {e.code().name}")
    return failed


@contextlib.contextmanager
def _rpc(address: str, token_path: str):
    """A caller of one of Ray's gRPC services at ``address`` (a GCS, a raylet's node manager)
    with the cluster's token: ``call(method, request, reply=None, timeout=10)`` returns the
    reply parsed as ``reply`` (a message class), or its bytes."""
    os.environ.update(connect_env(token_path))  # before Ray is imported: it reads them once
    import grpc
    from ray._private.authentication.grpc_authentication_client_interceptor import (
        _get_authentication_metadata_tuple,
    )

    channel = grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)])

    def call(method: str, request, reply=None, timeout: float = 10):
        return channel.unary_unary(
            method, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString if reply else bytes)(
            request, timeout=timeout, metadata=_get_authentication_metadata_tuple())

    try:
        yield call
    finally:
        channel.close()


def drain(gcs_address: str, token_path: str, node_id: str, deadline_ms: int,
          message: str) -> str | None:
    """Ask the GCS to drain node ``node_id`` for preemption with a deadline (unix ms): what a
    cloud's spot reclaim or a KubeRay scale-down sends through Ray's autoscaler (its
    ``DrainNode`` RPC, as ``ray drain-node`` calls it). Ray stops placing work there and tells
    whoever asks (``get_draining_nodes``); it kills nothing itself. Returns None when accepted,
    else Ray's reason."""
    from ray.core.generated import autoscaler_pb2 as pb

    with _rpc(gcs_address, token_path) as call:
        reply = call("/ray.rpc.autoscaler.AutoscalerStateService/DrainNode",
                     pb.DrainNodeRequest(node_id=bytes.fromhex(node_id),
                                         reason=pb.DrainNodeReason.Value(
                                             "DRAIN_NODE_REASON_PREEMPTION"),
                                         reason_message=message,
                                         deadline_timestamp_ms=deadline_ms),
                     pb.DrainNodeReply)
    return None if reply.is_accepted else (reply.rejection_reason_message or "rejected")


def prestart(raylet: str, token_path: str, count: int, keep_alive_s: int) -> None:
    """Ask the raylet at ``raylet`` (host:port of its node manager) to start ``count`` idle
    Python workers now, kept ``keep_alive_s`` seconds, bound to no job: the next actors placed
    there (of any job with no runtime environment of its own) take them instead of forking
    cold ones (Ray's ``PrestartWorkers`` RPC)."""
    from ray.core.generated import common_pb2
    from ray.core.generated import node_manager_pb2 as pb

    with _rpc(raylet, token_path) as call:
        call("/ray.rpc.NodeManagerService/PrestartWorkers",
             pb.PrestartWorkersRequest(language=common_pb2.PYTHON, num_workers=count,
                                       keep_alive_duration_secs=keep_alive_s),
             pb.PrestartWorkersReply)


def _hex(raw: bytes) -> str:
    return raw.hex()
