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

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlsim.backends.base import Backend, CutsNetwork, Unsupported
from rlsim.fields import Strict, World, problem
from rlsim.host.iptables import Drop


@dataclass
class FaultContext:
    """What a fault may touch: the cluster, the run's directory (files only), a seeded RNG, the
    worker table the trainer logged (pids and addresses, to find one rank's process) and, for
    trainers that log none, the scenario's role -> Ray actor class pattern (``trainer.roles``)."""

    cluster: Backend
    run_dir: Path
    rng: random.Random
    workers: list[dict[str, Any]] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)

    def node(self, ref: int | str) -> int:
        """A node index; ``random`` picks a non-head node from the scenario's seeded RNG."""
        if ref == "random":
            return self.rng.randrange(1, self.cluster.spec.nodes)
        return int(ref)


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
    # The faults whose effect on the same node this one ends when injected (a restart ends a kill
    # and a freeze), and the by-hand verb that undoes this fault on one node (``resume-node``)
    ends: ClassVar[tuple[str, ...]] = ()
    undo_verb: ClassVar[str | None] = None

    def __init__(self, params, ctx: FaultContext) -> None:
        self.params, self.ctx = params, ctx
        self.held: dict[str, Any] | None = None

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
        ``adapter`` (what it can observe), as (field, what and the fix), or None. Default:
        nothing to check."""
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
        what = (lacking[0].__doc__ or lacking[0].__name__).strip().rstrip(".")
        where = (f"it runs on {', '.join(f'--backend {n}' for n in able)}" if able
                 else "no backend offers it here")
        raise Unsupported(f"fault {cls.name!r} needs to {what[0].lower() + what[1:]}, which "
                          f"--backend {name} cannot do; {where}")

    def meaning(self, did: dict[str, Any]) -> dict[str, Any]:
        """What this injection means, for the history: whether the trainer must notice it, the
        node indices it hits and the state it puts them in (see the class attributes)."""
        return {"disruptive": self.disruptive, "nodes": self.nodes_hit(did),
                "node_state": self.node_state, "impairs": self.impairs}

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

