"""What of the trainer a fault can reach: everything of the trainer's jobs in Ray, by node.

A disruptive fault is judged by what it reached (``faults_landed``), so what the trainer *is* in
Ray must be whole: its actors (Ray Train's workers, engines, a framework's controller), the plain
tasks leased or running on a node, the placement-group bundles its jobs reserved there and its
drivers. A program of plain tasks with retries (Ray's own chaos test) has no actor at all, and
read as reached by nothing.

Each entry of a footprint is ``{"kind", "class", "pid", "ip", "node"}``: ``kind`` is ``actor``,
``task``, ``bundle`` or ``driver``; ``class`` the actor's class, the task's name, the placement
group's name (and ``bundle``, its index) or ``driver``; ``node`` the cluster's index of the node
it is on (None: on none of the cluster's nodes, or not placed yet); ``ranks`` (role -> rank)
where the trainer's worker table names the process. What the GCS said is read once
(:func:`survey`); the rest are pure functions of it, tested as data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlsim import ray_internals
from rlsim.ray_internals.gcs import RAY_OWN_NAMESPACES

KINDS = ("actor", "task", "bundle", "driver")  # in the order they are said
# Ray's own drivers (the dashboard's, Ray Jobs' supervisors) and rlsim's (its agents on a real
# cluster, a substrate's host actors): never the trainer's
NOT_THE_TRAINERS = (*RAY_OWN_NAMESPACES, "rlsim")


@dataclass
class Seen:
    """What the GCS held at one moment: its live actors, node table (every registration), the
    placement-group bundles placed on nodes, the jobs whose driver is connected, and the plain
    tasks holding a node's worker (None: not read, ``unread`` says why)."""

    actors: list[dict[str, Any]]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    bundles: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] | None = None
    unread: str | None = None


@dataclass(frozen=True)
class Look:
    """What :meth:`rlsim.faults.base.FaultContext.look` read of the GCS at one moment: the
    trainer's footprint, the cluster's nodes Ray holds not alive (index -> why), and what of the
    trainer could not be read (None: all of it)."""

    footprint: list[dict[str, Any]]
    down: dict[int, str] = field(default_factory=dict)
    unread: str | None = None


def survey(gs) -> Seen:
    """Ask the GCS (``gs``: a :class:`rlsim.ray_internals.gcs.GcsReader`) what it holds
    of every job. Tasks that cannot be read (a Ray without the task events rlsim reads, a GCS that
    did not answer that question in time) leave ``tasks`` None and say why; the rest must read."""
    seen = Seen(gs.live_actors(), gs.node_table(), gs.placed_bundles(), gs.live_jobs())
    try:
        seen.tasks = gs.held_tasks()
    except Exception as e:  # noqa: BLE001 - the rest of the reach still counts; said
        seen.unread = f"the trainer's tasks could not be read ({type(e).__name__}: {e})"[:300]
    if seen.tasks is None and seen.unread is None:
        st = ray_internals.status("trainer_reach")
        seen.unread = f"tasks, bundles and drivers not counted: {st.plain} ({st.why})"
    return seen


def trainer(seen: Seen, index_of: Callable[[str], int | None],
            workers: list[dict] = (), core: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The trainer's footprint in ``seen`` (see the module's docstring). Its actors: where a
    worker table is known (``workers``), its ranks and the adapter's ``core`` actor classes, not
    its helpers; else every actor not rlsim's own. Its jobs: those of its actors, and where no
    worker table is known every job with a driver but Ray's and rlsim's own. Then every task,
    bundle and driver of those jobs. An actor not alive (being placed, restarting) is on no
    node."""
    ranks = _ranks(workers)
    actors = [a for a in seen.actors if a["module"].split(".")[0] != "rlsim"
              and (not ranks or (a["ip"], a["pid"]) in ranks or a["class"] in core)]
    jobs = _trainer_jobs(seen, actors, bool(ranks))
    where = _node_addresses(seen.nodes)
    found = [_actor(a, index_of, ranks) for a in actors]
    for t in seen.tasks or []:
        if t["job"] in jobs:
            ip = where.get(t["node_id"], "")
            found.append(_entry("task", t["name"], t["pid"], ip, index_of))
    for b in seen.bundles:
        if b["job"] in jobs:
            ip = where.get(b["node_id"], "")
            group = b["name"] or f"placement group {b['group'][:8]}"
            found.append({**_entry("bundle", group, None, ip, index_of), "bundle": b["bundle"]})
    for j in seen.jobs:
        if j["job"] in jobs:
            found.append(_entry("driver", "driver", j["pid"], j["ip"], index_of))
    return found


def _ranks(workers) -> dict[tuple, dict[str, int]]:
    """(ip, pid) -> role -> rank, from the trainer's worker table (in index order)."""
    ranks: dict[tuple, dict[str, int]] = {}
    for role in dict.fromkeys(r for w in workers for r in w.get("roles", [])):
        for rank, w in enumerate(x for x in workers if role in x.get("roles", [])):
            ranks.setdefault((w.get("ip"), w.get("pid")), {})[role] = rank
    return ranks


def _trainer_jobs(seen: Seen, actors: list[dict], ranked: bool) -> set[str]:
    namespace = {j["job"]: j.get("namespace", "") for j in seen.jobs}
    rlsims = {a["job"] for a in seen.actors if a["module"].split(".")[0] == "rlsim"}
    jobs = {a["job"] for a in actors} | (set() if ranked else set(namespace))
    return {j for j in jobs - rlsims
            if not namespace.get(j, "").startswith(NOT_THE_TRAINERS)}


def _node_addresses(table: list[dict]) -> dict[str, str]:
    """Node id (hex) -> its address, for every registration (a restarted node's old one too)."""
    return {str(n.get("NodeID", "")).lower(): n.get("NodeManagerAddress", "") for n in table}


def _actor(a: dict, index_of, ranks) -> dict[str, Any]:
    placed = a.get("state", "ALIVE") == "ALIVE"
    entry = _entry("actor", a["class"], a["pid"] if placed else None,
                   a["ip"] if placed else "", index_of)
    if placed and (a["ip"], a["pid"]) in ranks:
        entry["ranks"] = ranks[a["ip"], a["pid"]]
    return entry


def _entry(kind: str, name: str, pid, ip: str, index_of) -> dict[str, Any]:
    return {"kind": kind, "class": name, "pid": pid, "ip": ip,
            "node": index_of(ip) if ip else None}


def down(seen: Seen, addresses: dict[str, int]) -> dict[int, str]:
    """The nodes of the cluster (``addresses``: address -> index) with no alive registration in
    the GCS's node table, each with why it counts as down."""
    alive = {n.get("NodeManagerAddress") for n in seen.nodes if n.get("Alive")}
    return {i: "not alive in Ray's node table" for a, i in addresses.items() if a not in alive}


def kind_of(entry: dict) -> str:
    """An entry's kind; an entry recorded before kinds were (every one an actor) is an actor."""
    return entry.get("kind") or "actor"


def kinds(entries: list[dict]) -> dict[str, int]:
    """How many of ``entries`` are of each kind, in :data:`KINDS` order."""
    return {k: n for k in KINDS if (n := sum(kind_of(e) == k for e in entries))}


def processes(footprint: list[dict]) -> list[dict]:
    """The entries that are processes (a bundle is a reservation: nothing in it talks)."""
    return [a for a in footprint if kind_of(a) != "bundle"]


def where(footprint: list[dict]) -> str | None:
    """Where the trainer was, in words: ``node 0 (RayTrainWorker x2, TrainController); node 2
    (task chaos_task x12, bundle of train x2, driver)``; what is on none of the cluster's nodes
    (an actor being placed or restarting, a driver elsewhere) under ``not placed yet, or on no
    node of the cluster``. None where nothing of the trainer was seen."""
    by_node: dict = {}
    for a in footprint:
        by_node.setdefault(a.get("node"), []).append(_shown(a))
    if not by_node:
        return None
    parts = []
    for node, names in sorted(by_node.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        counted = ", ".join(f"{n} x{names.count(n)}" if names.count(n) > 1 else n
                            for n in dict.fromkeys(names))
        place = "not placed yet, or on no node of the cluster" if node is None else f"node {node}"
        parts.append(f"{place} ({counted})")
    return "; ".join(parts)


def _shown(entry: dict) -> str:
    kind = kind_of(entry)
    if kind == "actor":
        return str(entry.get("class"))
    if kind == "driver":
        return "driver"
    if kind == "bundle":
        return f"bundle of {entry.get('class')}"
    return f"{kind} {entry.get('class')}"

