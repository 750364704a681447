"""What every fault is: one module with its parameters (``Params``), the backend capabilities it
needs (``needs``), ``inject()`` and ``undo()``; never anything that touches the trainer.

A fault records what it actually did (pids killed, rules applied, file changed) in the dict
``inject`` returns, and keeps in ``held`` (plain JSON data) what its ``undo`` needs, once there is
something to undo. ``heal()`` undoes it once (safe twice). Two engines drive the same classes: the
scenario runner's nemesis (:mod:`rlsim.scenario.nemesis`), which heals through one guarded path
when ``for_s`` is up or at the end whatever happened, and ``rlsim fault`` by hand
(:mod:`rlsim.faults.ledger`), which writes ``held`` into the cluster's fault ledger and heals from
there in a later process. ``setup()`` and ``teardown()`` run before the trainer starts and after
it exited, for a fault that must prepare the ground (a small disk under the checkpoints).
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlsim.backends.base import Backend, CutsNetwork, Unsupported
from rlsim.faults import footprint as trainer_footprint
from rlsim.faults.footprint import Look
from rlsim.fields import Strict, World, named_roles, problem
from rlsim.host.iptables import Drop


@dataclass
class FaultContext:
    """What a fault may touch: the cluster, the run's directory (files only), a seeded RNG, the
    worker table the trainer logged (role, rank -> pid and address: the reference trainer's
    ``placement`` event, Ray Train's workers by world rank) and, for trainers that log none, the
    scenario's role -> Ray actor class pattern (``trainer.roles``)."""

    cluster: Backend
    run_dir: Path
    rng: random.Random
    workers: list[dict[str, Any]] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)
    # where the worker table is known, the actor classes beside its ranks that are the trainer
    # (its adapter's core_actors: a framework's controller)
    core: tuple[str, ...] = ()
    # a reader of the cluster's GCS kept open between faults (open_reader): a fault's reach is
    # read as it fires, in milliseconds, not after a connection's set-up
    _gcs: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    _reader: Any = field(default=None, repr=False)
    _index: dict[str, int] | None = field(default=None, repr=False)

    def open_reader(self) -> None:
        """Connect to the GCS now (Ray imported, before the trainer starts), for
        :meth:`footprint`; :meth:`close` ends it."""
        from rlsim.backends.ray_state import reader
        from rlsim.host.home import auth_token_path

        if self._reader is None:
            self._reader = self._gcs.enter_context(reader(self.cluster.address,
                                                          str(auth_token_path())))
        self.index_of("")

    def close(self) -> None:
        self._reader = None
        self._gcs.close()

    def forget_reader(self) -> None:
        """Drop the reader without closing it (a thread may still wait on it): the next
        :meth:`footprint` connects again; :meth:`close` still ends it."""
        self._reader = None

    def node(self, ref: int | str) -> int:
        """A node index; ``random`` picks a non-head node from the scenario's seeded RNG."""
        if ref == "random":
            return self.rng.randrange(1, self.cluster.spec.nodes)
        return int(ref)

    def target(self, params) -> tuple[int, dict[str, Any] | None]:
        """The node ``params`` (a :class:`rlsim.fields.NodeTarget`) names, and how it was aimed
        (``{"role", "rank", "node", "pid"}``; None for an index): a role's rank is resolved
        now, to the node hosting it at this moment."""
        if getattr(params, "role", None) is None:
            return self.node(params.node), None
        host = role_process(self, params.role, params.rank)
        node = self.node_at(host["ip"], f"{params.role} rank {params.rank}")
        return node, {"role": params.role, "rank": params.rank, "node": node,
                      "pid": host["pid"]}

    def index_of(self, address: str) -> int | None:
        """The index of the node at ``address``, or None (a node's address never changes: the
        cluster is asked once)."""
        if self._index is None:
            self._index = {n.address: n.index for n in self.cluster.nodes()}
        return self._index.get(address)

    def node_at(self, address: str, what: str) -> int:
        """The index of the node at ``address`` (where ``what`` runs)."""
        if (index := self.index_of(address)) is None:
            raise ValueError(f"{what} runs at {address}, which is no node of this cluster")
        return index

    def groups(self, groups: list[list[int | str]]) -> tuple[list[list[int]], dict[str, list]]:
        """Node groups whose entries may name roles (``rollout``: every node hosting one of its
        ranks; ``rollout:1``: the node of that rank), as node indices now, and what each role
        entry resolved to."""
        resolved, aimed = [], {}
        for group in groups:
            nodes: list[int] = []
            for entry in group:
                if isinstance(entry, int):
                    hit = [entry]
                else:
                    role, _, rank = entry.partition(":")
                    hosts = [role_process(self, role, int(rank))] if rank else \
                        role_hosts(self, role)[0]
                    if not hosts:
                        raise ValueError(f"role {role!r} has no rank running now: nothing to "
                                         "aim at")
                    hit = sorted({self.node_at(h["ip"], entry) for h in hosts})
                    aimed[entry] = hit
                nodes += [n for n in hit if n not in nodes]
            resolved.append(nodes)
        seen = [n for g in resolved for n in g]
        if dup := sorted({n for n in seen if seen.count(n) > 1}):
            raise ValueError(f"node(s) {dup} fall in two groups once roles are placed "
                             f"({aimed}); name groups that cannot share a node")
        return resolved, aimed

    def footprint(self) -> list[dict[str, Any]]:
        """Everything of the trainer's jobs in Ray now (:func:`rlsim.faults.footprint.trainer`:
        actors, tasks leased or running, placement-group bundles, drivers), each ``{"kind",
        "class", "pid", "ip", "node"}`` and its ``ranks`` where the worker table says: what a
        fault must reach of the trainer."""
        return self.look().footprint

    def look(self) -> Look:
        """One read of the GCS: the trainer's footprint, the cluster's nodes Ray does not hold
        alive (index -> why) and what of the trainer could not be read (None: all of it)."""
        self.open_reader()
        seen = trainer_footprint.survey(self._reader)
        return Look(trainer_footprint.trainer(seen, self.index_of, self.workers, self.core),
                    trainer_footprint.down(seen, dict(self._index or {})), seen.unread)


def role_hosts(ctx: FaultContext, role: str) -> tuple[list[dict], str]:
    """Every rank of ``role`` in rank order, each a ``{"ip", "pid"}``, and where they were
    read: the worker table the trainer logged, or the alive Ray actors whose class matches the
    scenario's ``trainer.roles`` pattern (ranked by node address, then pid)."""
    if role in ctx.roles:
        import ipaddress

        from rlsim.backends.ray_state import alive_actors
        from rlsim.fields import search
        from rlsim.host.home import auth_token_path

        pattern = ctx.roles[role]
        actors = alive_actors(ctx.cluster.address, str(auth_token_path()))
        hosts = sorted((a for a in actors if search(pattern, a["class"])),
                       key=lambda a: (ipaddress.ip_address(a["ip"]), a["pid"]))
        return hosts, f"alive Ray actors whose class matches {pattern!r}"
    # the table lists workers in index order; ranks follow it
    return [w for w in ctx.workers if role in w.get("roles", [])], \
        "ranks in the trainer's worker table"


def role_process(ctx: FaultContext, role: str, rank: int) -> dict:
    """The process (``ip``, ``pid``) of rank ``rank`` of ``role``; ValueError naming the ranks
    that exist when it is not running now."""
    hosts, where = role_hosts(ctx, role)
    if rank >= len(hosts):
        have = f"ranks 0-{len(hosts) - 1}" if hosts else "no rank"
        raise ValueError(f"role {role!r} has {have} running now ({len(hosts)} {where}); rank "
                         f"{rank} does not exist")
    return hosts[rank]


class NoParams(Strict):
    pass


class Fault:
    name: ClassVar[str] = "fault"
    Params: ClassVar[type[Strict]] = NoParams
    needs: ClassVar[tuple[type, ...]] = ()  # capability Protocols of rlsim.backends.base
    # It hits the cluster or the trainer's processes, so the trainer must notice (the checks time
    # detection and recovery from the first such fault); a fault on files only is not.
    disruptive: ClassVar[bool] = True
    # It can leave a node down after it is healed (killed, or declared dead by Ray while cut off
    # or frozen): a cluster it ran on is stopped, not handed to the next scenario.
    may_down_node: ClassVar[bool] = False
    # On a real cluster it destroys work or capacity someone may depend on (kills nodes or
    # processes, takes GPU memory, damages checkpoints): refused there without --allow-disruptive
    harms_real_cluster: ClassVar[bool] = False
    # What it does to the nodes it hits, written into its ``fault_injected`` event (the history)
    # so that checks and the report read it there: ``node_state`` changes a node until something
    # else does ("dead" after a kill, "restarting" while a restart takes); ``impairs`` is the state
    # the nodes are in while the fault is in force ("paused", "cut off", ...).
    node_state: ClassVar[str | None] = None
    impairs: ClassVar[str | None] = None
    # By hand (``rlsim fault NAME <name-with-hyphens> ARGS``): whether the fault may be applied to a
    # running cluster with no trainer (it needs no worker table, no run directory of a trainer),
    # which parameters its positional arguments fill, in order, and how what it did is said
    by_hand: ClassVar[bool] = False
    cli_args: ClassVar[tuple[str, ...]] = ("node",)
    # The node it hits stays out of service until the fault is undone (a kill, a freeze): by hand
    # a second such fault on that node is refused
    holds_node: ClassVar[bool] = False
    # A fault with nothing to undo whose effect another fault ends (a kill: ``restart_node``): by
    # hand, healing it injects that one on the same node
    restored_by: ClassVar[str | None] = None
    # Aimed at a role's rank, it refuses the head: taking the head down (its GCS with it) is
    # another story than losing the node of a rank (kill_head); a rank placed there is said so
    spares_head: ClassVar[bool] = False
    # The faults whose effect on the same node this one ends when injected (a restart ends a kill
    # and a freeze), and the by-hand verb that undoes this fault on one node (``resume-node``)
    ends: ClassVar[tuple[str, ...]] = ()
    undo_verb: ClassVar[str | None] = None

    def __init__(self, params, ctx: FaultContext) -> None:
        self.params, self.ctx = params, ctx
        self.held: dict[str, Any] | None = None
        # how a fault aimed at a role's rank found its node (FaultContext.target), for the history
        self.aimed: dict[str, Any] | None = None

    def target(self) -> int:
        """The node this fault hits: its ``node``, or the node hosting its ``role``'s ``rank``
        now (recorded in :attr:`aimed`), held to the same checks as a node named by index (a
        fault that spares the head refuses a rank placed there)."""
        node, self.aimed = self.ctx.target(self.params)
        if self.aimed is not None and node == 0 and self.spares_head:
            raise ValueError(f"{self.params.role} rank {self.params.rank} runs on the head (node "
                             f"0) now: {self.name} there would take the head and its GCS with it, "
                             "another story (kill_head); aim at a rank on another node, or give "
                             "the head no GPUs (cluster.node: {0: {gpus: 0}}) so no rank lands "
                             "there")
        if self.aimed is not None:
            as_index = self.params.model_copy(update={"node": node, "role": None})
            if found := self.cluster_problem(as_index, self.ctx.cluster.spec):
                raise ValueError(f"{self.params.role} rank {self.params.rank} runs on node "
                                 f"{node} now: {found[1]}")
        return node

    @property
    def injected(self) -> bool:
        """Whether there is something to undo (``held`` says what)."""
        return self.held is not None

    @classmethod
    def action(cls) -> str:
        """Its name as ``rlsim fault`` takes it: ``kill-node`` for ``kill_node``."""
        return cls.name.replace("_", "-")

    def said(self, did: dict[str, Any]) -> str:
        """What ``inject`` did (``did``), in one line for a person. Default: the record."""
        shown = ", ".join(f"{k} {v}" for k, v in did.items())
        return f"{self.name}: {shown}"

    @classmethod
    def cluster_problem(cls, params, shape) -> tuple[str, str] | None:
        """Why these parameters cannot apply to a cluster of ``shape`` (a ``ClusterShape``), as
        (field, what is wrong and the fix), or None: every node its fields name (by their type,
        :class:`rlsim.fields.Refers`) is in the cluster. Read with the scenario, and by hand
        before anything is done. Subclasses add what they know (a head that cannot restart)."""
        return problem(params, World(shape.nodes))

    @classmethod
    def trainer_problem(cls, params, trainer, adapter) -> tuple[str, str] | None:
        """Why these parameters cannot apply to the scenario's ``trainer`` section driven by
        ``adapter`` (what it can observe), as (field, what and the fix), or None. Default: a
        role it names can be found when it fires: the adapter always records the trainer's
        worker table, or the scenario's ``trainer.roles`` names the role's actor class."""
        if getattr(adapter, "worker_table", False):
            return None
        for field_name, role in named_roles(params):
            if role not in trainer.roles:
                return field_name, (f"adapter {adapter.name} logs no worker table, so rlsim "
                                    f"finds role {role!r} by its Ray actor class: add "
                                    f"trainer.roles: {{{role}: <class name pattern>}}")
        return None

    @classmethod
    def from_text(cls, name: str, text: str):
        """A parameter given on the command line, as the value its model reads: whole numbers
        as numbers, ``1,2`` as a list where the field takes one."""
        many = "list" in str(cls.Params.model_fields[name].annotation)
        if "," in text and not many:
            raise ValueError(f"{text}: one node at a time; fix: run it once per node")
        values = [_number(t) for t in text.split(",")]
        return values if many else values[0]

    @classmethod
    def held_until_healed(cls) -> bool:
        """Whether it keeps something in force until healed (``for_s``, ``--for`` apply)."""
        return cls.undo is not Fault.undo

    @classmethod
    def missing(cls, backend: type) -> list[type]:
        """The capabilities this fault needs that the backend class lacks."""
        return [need for need in cls.needs if not issubclass(backend, need)]

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this machine cannot inject the fault at all (no privilege), or None."""
        return None

    @classmethod
    def check_backend(cls, backend: type, name: str, others: dict[str, type]) -> None:
        """Raise Unsupported when ``backend`` (called ``name``) cannot inject this fault, saying
        which of ``others`` (name -> class) can; or when this machine cannot (a missing part,
        which strict CI fails on)."""
        lacking = cls.missing(backend)
        if not lacking:
            if reason := cls.unavailable():
                raise Unsupported(f"fault {cls.name!r}: {reason}", missing_part=True)
            return
        able = [n for n, other in others.items() if not cls.missing(other)]
        what = _plain(lacking[0].__doc__ or lacking[0].__name__).rstrip(".")
        where = (f"it runs on {', '.join(f'--backend {n}' for n in able)}" if able
                 else "no backend offers it here")
        raise Unsupported(f"fault {cls.name!r} needs to {what[0].lower() + what[1:]}, which "
                          f"--backend {name} cannot do; {where}")

    def meaning(self, did: dict[str, Any]) -> dict[str, Any]:
        """What this injection means, for the history: whether the trainer must notice it, the
        node indices it hits and the state it puts them in (see the class attributes), and how
        it was aimed where it named a role's rank."""
        return {"disruptive": self.disruptive, "nodes": self.nodes_hit(did),
                "node_state": self.node_state, "impairs": self.impairs,
                **({"aimed": self.aimed} if self.aimed else {})}

    def remedies(self, did: dict[str, Any], down: dict[int, str]) -> bool:
        """Whether this injection was a remedy, not an attack: a fault that ends others (a
        restart ends a kill, a freeze, a preemption: ``ends``) fired at nodes that were all down
        (``down``: index -> why, from the run's own faults and Ray's node table). A remedy is
        judged by whether it brought back what it names, never by what of the trainer it hit;
        the same fault at a live node is a disruptive reboot."""
        nodes = self.nodes_hit(did)
        return bool(self.ends) and bool(nodes) and all(n in down for n in nodes)

    def takes_down(self) -> bool:
        """Whether the nodes it hits are out of service until something ends it (a kill, a
        freeze, a preemption; the head's kill)."""
        return self.holds_node or self.node_state == "dead"

    def touched(self, did: dict[str, Any], footprint: list[dict]) -> list[dict]:
        """What of the trainer this injection reached, of ``footprint`` (everything of the
        trainer's jobs just before it, :meth:`FaultContext.footprint`). Default: what is on the
        nodes it hit."""
        nodes = set(self.nodes_hit(did))
        return [a for a in footprint if a["node"] in nodes]

    def nodes_hit(self, did: dict[str, Any]) -> list[int]:
        """The nodes ``inject`` acted on (``did``: what it returned). Default: its ``node``."""
        node = did.get("node")
        return [node] if isinstance(node, int) and not isinstance(node, bool) else []

    def setup(self) -> None:
        """Before the trainer starts. Default: nothing to prepare."""

    def inject(self) -> dict[str, Any]:
        raise NotImplementedError

    def heal(self) -> dict[str, Any] | None:
        """Undo what ``inject`` did, once; None when there was nothing (left) to undo."""
        if self.held is None:
            return None
        try:  # once: an undo that failed is not tried again (it is said, in force)
            return self.undo()
        finally:
            self.held = None

    def undo(self) -> dict[str, Any] | None:
        """What healing this fault does. Default: nothing to undo (a kill stays a kill)."""
        return None

    def teardown(self) -> dict[str, Any] | None:
        """After the trainer exited and every fault was healed. Default: nothing."""
        return None


def cut_apart(groups: list[list[int]], footprint: list[dict]) -> list[dict]:
    """The trainer's processes (actors, tasks, drivers; a bundle is a reservation that talks to
    nobody) a cut between ``groups`` (the nodes in none form one more) separates from another of
    the trainer's ends: another of its processes, or the head's GCS, which every one keeps
    talking to. A cut with all of them on one side touches none of them."""
    side = {n: i for i, group in enumerate(groups) for n in group}
    alive = [a for a in trainer_footprint.processes(footprint) if a["node"] is not None]
    ends = {a["node"] for a in alive} | {0}
    return [a for a in alive if any(side.get(a["node"], -1) != side.get(e, -1) for e in ends)]


def where_trainer_is(footprint: list[dict]) -> str | None:
    """Where the trainer was, in words (``node 0 (RayTrainWorker x2); node 2 (task f x3,
    driver)``), or None where nothing of it was seen in Ray."""
    return trainer_footprint.where(footprint)


class FirewallFault(Fault):
    """A fault made of iptables rules (``held["rules"]``): healing removes exactly those rules."""

    needs = (CutsNetwork,)

    def hold_rules(self, rules: list[Drop]) -> None:
        self.held = {"rules": [asdict(r) for r in rules]}

    def undo(self):
        rules = [Drop(**{**r, "ports": tuple(r["ports"]) if r["ports"] else None})
                 for r in self.held["rules"]]
        self.ctx.cluster.remove_rules(rules)
        return {"rules_removed": len(rules)}


def _number(text: str):
    """``3`` -> 3, ``0.5`` -> 0.5; anything else stays text (its model says what is wrong)."""
    for kind in (int, float):
        try:
            return kind(text) if text.isascii() else text
        except ValueError:
            continue
    return text


class StorageFault(Fault):
    """A fault on the trainer's storage: the run's directory ``params.path`` on a file system of
    its own (``mount``), mounted before the trainer starts, while it is still empty, and
    unmounted after the trainer exits (``unmount``) with what was written there kept."""

    disruptive = False  # storage only: the trainer meets it at its next save
    needs_root: ClassVar[str] = "mounting a file system needs root"

    @classmethod
    def unavailable(cls) -> str | None:
        import os

        return cls.needs_root if os.geteuid() != 0 else None

    def watch_writes(self, own: Path | None = None) -> None:
        """From now on, what the trainer writes under the fault's directory is counted
        (:meth:`writes`); ``own`` is the fault's own file there, never counted."""
        self._own, self._since, self._before = own, time.time_ns(), self._files()

    def _files(self) -> dict[str, tuple[int, int, bool]]:
        """Every entry under the directory: relative path -> (size, mtime ns, is a folder)."""
        out = {}
        for path in [self.dir, *self.dir.rglob("*")]:
            if path == getattr(self, "_own", None):
                continue
            with contextlib.suppress(OSError):
                st = path.lstat()
                out[str(path.relative_to(self.dir))] = (st.st_size, st.st_mtime_ns,
                                                        path.is_dir())
        return out

    def writes(self) -> dict[str, Any]:
        """What the trainer wrote under the directory since :meth:`watch_writes`: files created
        or grown (and their new bytes), folders whose entries changed (a save that failed and
        removed its temporary folder still changes its parent's)."""
        after = self._files()
        files = dirs = grown = 0
        for rel, (size, mtime, is_dir) in after.items():
            if mtime < self._since:
                continue
            if is_dir:
                dirs += 1
            else:
                files += 1
                grown += max(0, size - self._before.get(rel, (0, 0, False))[0])
        return {"path": str(self.dir), "files": files, "dirs": dirs, "bytes": grown}

    def mount(self, path: Path) -> None:
        raise NotImplementedError

    def unmount(self, path: Path) -> None:
        raise NotImplementedError

    def setup(self) -> None:
        self.dir = self.ctx.run_dir / self.params.path
        if self.dir.exists() and any(self.dir.iterdir()):
            raise FileExistsError(f"{self.name}: {self.dir} already holds files; a file system "
                                  "is mounted over it before the trainer starts, so start from "
                                  "an empty run")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mount(self.dir)
        self.mounted = True

    def teardown(self):
        if not getattr(self, "mounted", False):
            return None
        self.mounted = False
        self.unmount(self.dir)
        return {"path": str(self.dir), "unmounted": True}


def _plain(doc: str) -> str:
    """A capability's docstring as a user reads it: one line, cross-references as plain names
    (``:mod:`rlsim.host.links``` -> ``rlsim.host.links``)."""
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", " ".join(doc.split()))
