"""What a finished run left on its cluster, and whose it is: the ``no_leaks`` check's facts.

Read after the trainer exited and every fault was healed, whatever becomes of the cluster next
(kept for the next scenario, given back, or stopped with ``--no-reuse``), with a bounded wait
while Ray cleans up after the job. Each object is attributed by what the GCS says of it:

- an actor whose class comes from a module of ``ray.`` and that is detached is one of Ray's own
  libraries' (Ray Data's autoscaling coordinator, Ray Train's state actor): kept by design, a
  note, never a failure; anything else alive after the job is the trainer's;
- a placement group made by such an actor is that library's; any other the trainer's;
- a job whose driver is still connected is the trainer's (its script left a process running);
- fault rules, frozen or capped nodes (a fault not healed), and processes, cgroups, rules and
  containers that outlive the cluster's teardown are rlsim's: always a failure (our bug).

Pure functions of the GCS's records (:func:`attribute`), apart from reading and removing them.
"""

from __future__ import annotations

import time

from rlsim.history import Leftover

SETTLE_S = 10.0  # Ray removes a finished job's actors and groups asynchronously


def library(module: str) -> str:
    """``ray.data`` for ``ray.data._internal...``: the Ray library a module belongs to, or ""."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ray" and len(parts) > 1 else ""


def attribute(objects: list) -> list[Leftover]:
    """Each live Ray object (:class:`rlsim.backends.ray_state.RayObject`) as a leftover with its
    owner and the usual fix."""
    return [left for _, left in pairs(objects)]


def pairs(objects: list) -> list[tuple[object, Leftover]]:
    """(object, its leftover) for each live Ray object."""
    actors = {o.id: o for o in objects if o.kind == "actor"}
    out = []
    for o in objects:
        if o.kind == "actor":
            out.append((o, _actor(o)))
        elif o.kind == "placement group":
            maker = actors.get(o.creator)
            lib = library(maker.module) if maker is not None and maker.detached else ""
            if lib:
                out.append((o, Leftover("placement group", f"{o.name} ({o.id[:8]}) {o.state}",
                                        "ray", library=lib,
                                        fix=f"none: {lib} keeps it with its actor")))
            else:
                out.append((o, Leftover("placement group", f"{o.name} ({o.id[:8]}) {o.state}",
                                        "trainer", fix="ray.util.remove_placement_group(pg) "
                                        "once the work on it is done (a group outlives its job "
                                        "when detached, or while its driver runs)")))
        elif o.kind == "job":
            out.append((o, Leftover("job", f"{o.id} ({o.name}) still connected", "trainer",
                                    node=o.node, fix="end the trainer's script with "
                                    "ray.shutdown() and exit; a child process it started holds "
                                    "the driver")))
    return out


def _actor(o) -> Leftover:
    what = f"{o.name} ({o.id[:8]}) {o.state}"
    if o.module.startswith("rlsim."):
        return Leftover("actor", what, "rlsim", node=o.node, fix="none of yours: rlsim should "
                        "have removed it; report it")
    lib = library(o.module)
    if lib and o.detached:
        return Leftover("actor", what, "ray", node=o.node, library=lib,
                        fix=f"none: {lib} keeps this detached actor by design")
    if o.detached:
        fix = ("a detached actor outlives the job that made it: ray.kill(ray.get_actor(name, "
               "namespace=...)) when done, or create it without lifetime='detached'")
    else:
        fix = "its job is still running: the trainer's driver has not exited"
    return Leftover("actor", what, "trainer", node=o.node, fix=fix)


def examine(cluster, settle_s: float = SETTLE_S) -> tuple[list[Leftover], float | None]:
    """What the run left on ``cluster`` (a running cluster rlsim started), and how long Ray was
    waited for: until only what Ray's libraries keep is left, at most ``settle_s``. When the
    GCS cannot be asked (the head is down) only the fault residue is read, and the wait is None."""
    from rlsim.backends.ray_state import ray_objects
    from rlsim.host.home import auth_token_path

    found = [Leftover("fault residue", what, "rlsim", fix="a fault was not healed; report it")
             for what in cluster.fault_residue()]
    nodes = cluster.nodes()
    if not nodes or not nodes[0].alive:
        return found, None
    t0 = time.monotonic()
    while True:
        try:
            left = attribute(ray_objects(cluster.address, str(auth_token_path())))
        except Exception as e:  # noqa: BLE001 - a GCS that cannot answer: said, not raised
            return found + [Leftover("gcs", f"could not be asked ({type(e).__name__})", "rlsim",
                                     fix=str(e)[:200])], time.monotonic() - t0
        if all(x.owner == "ray" for x in left) or time.monotonic() - t0 > settle_s:
            return found + left, round(time.monotonic() - t0, 2)
        time.sleep(0.2)  # Ray has no notification for "job fully cleaned up"


def tidy(cluster) -> tuple[list[str], list[str]]:
    """Remove what Ray's libraries left before the cluster is handed on (it would show in the
    next scenario's view): (what was removed, what could not be), in words."""
    from rlsim.backends.ray_state import ray_objects, remove
    from rlsim.host.home import auth_token_path

    token = str(auth_token_path())
    theirs = [o for o, left in pairs(ray_objects(cluster.address, token)) if left.owner == "ray"]
    failed = remove(cluster.address, token, theirs) if theirs else []
    return [f"{o.kind} {o.name} ({o.id[:8]})" for o in theirs], failed
