"""Ask a cluster's GCS what it holds: its nodes, its live actors, placement groups and jobs (and
remove some of them). Straight from the GCS's tables and RPCs, no driver, through
:mod:`rlsim.ray_internals.gcs`; imports Ray lazily (about 0.4 s)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rlsim.ray_internals import connect_env


def reader(gcs_address: str, token_path: str):
    """Ray's read-only view of a GCS (no driver, no ``ray.init``): a context manager yielding a
    :class:`rlsim.ray_internals.gcs.GcsReader`."""
    from rlsim.ray_internals import gcs

    return gcs.reader(gcs_address, token_path)


def node_table(gcs_address: str, token_path: str) -> list[dict]:
    """Ray's node table: one dict per registration (a restarted node appears twice)."""
    with reader(gcs_address, token_path) as gs:
        return gs.node_table()


def alive_actors(gcs_address: str, token_path: str) -> list[dict]:
    """Ray's alive actors: ``{"class", "pid", "ip"}`` each, from the GCS's actor table."""
    with reader(gcs_address, token_path) as gs:
        actors = gs.actor_table()
    return [{"class": a["ActorClassName"], "pid": a["Pid"], "ip": a["Address"]["IPAddress"]}
            for a in actors.values() if a["State"] == "ALIVE"]


def live_actors(gcs_address: str, token_path: str) -> list[dict]:
    """The actors not dead: ``{"class", "name", "pid", "ip", "module", "job", "state"}`` each
    (an actor still being placed has pid 0)."""
    with reader(gcs_address, token_path) as gs:
        return gs.live_actors()


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
    return by_address(table, exclude_ids)


def by_address(table: list[dict], exclude_ids: frozenset[str] = frozenset()) -> dict[str, dict]:
    """The alive registrations of a node table by node address, less ``exclude_ids``."""
    return {entry["NodeManagerAddress"]: entry for entry in table
            if entry["Alive"] and entry["NodeID"] not in exclude_ids}


# What a registration's entry keeps when it travels as JSON (a launcher's view, below)
VIEW_FIELDS = ("NodeID", "NodeManagerAddress", "Alive", "Resources", "Labels")


def launch_view(gcs_address: str, token_path: str) -> list[dict]:
    """The alive registrations, as a node launcher reports them once its nodes registered: the
    fields :class:`rlsim.backends.base.NodeInfo` reads (JSON)."""
    return [{k: entry.get(k) for k in VIEW_FIELDS}
            for entry in alive_nodes(gcs_address, token_path).values()]


def _listens(address: str, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``.

    Deliberately the kernel's accept alone, not :func:`rlsim.ray_internals.gcs.no_answer`
    (a greeting, then a request with a deadline): this is polled by every wait on an rlsim
    cluster's nodes (local, docker, substrate ``nodes()``, a node launcher's view), and a False
    here is read as "nobody alive", i.e. a dead head. On a loaded 2-core machine a busy GCS can
    miss a seconds' deadline while it is alive; the kernel accepts for it regardless. A paused
    head (SIGSTOP: it accepts and answers nothing) is seen by the local and docker backends
    before they ask."""
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
    with reader(gcs_address, token_path) as gs:
        return [RayObject(**o) for o in gs.objects()]


def remove(gcs_address: str, token_path: str, objects: list[RayObject]) -> list[str]:
    """Kill the actors and remove the placement groups among ``objects`` through the GCS (its
    own RPCs, no driver); what could not be removed, in words."""
    from rlsim.ray_internals import gcs

    return gcs.remove(gcs_address, token_path, [(o.kind, o.id, o.name) for o in objects])
