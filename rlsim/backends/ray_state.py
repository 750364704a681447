"""Ask a cluster's GCS which nodes it sees. Imports Ray lazily (about 0.4 s)."""

from __future__ import annotations

import contextlib
import os


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


def leftovers(gcs_address: str, token_path: str) -> list[str]:
    """What finished jobs left in the cluster: live actors, placement groups not removed, jobs
    whose driver is still connected. Empty on a cluster ready for the next job."""
    with global_state(gcs_address, token_path) as gs:
        actors = gs.actor_table(None)
        groups = gs.placement_group_table()
        jobs = gs.job_table()
    found = [f"actor {a.get('Name') or a['ActorClassName']} ({actor_id[:8]}) {a['State']}"
             for actor_id, a in actors.items() if a["State"] != "DEAD"]
    found += [f"placement group {pg_id[:8]} {pg['state']}" for pg_id, pg in groups.items()
              if pg["state"] != "REMOVED"]
    found += [f"job {job['JobID']} (driver pid {job.get('DriverPid')}) still running"
              for job in jobs if not job["IsDead"]]
    return found


def alive_nodes(gcs_address: str, token_path: str,
                exclude_ids: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Alive registrations in Ray's node table by node address, leaving out ``exclude_ids`` (a
    killed node the GCS has not declared dead yet)."""
    return {entry["NodeManagerAddress"]: entry for entry in node_table(gcs_address, token_path)
            if entry["Alive"] and entry["NodeID"] not in exclude_ids}
