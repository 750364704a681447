"""What every fault is: one module with its parameters (``Params``), the backend capabilities it
needs (``needs``), ``inject()`` and ``undo()``; never anything that touches the trainer.

A fault records what it actually did (pids killed, rules applied, file changed) in the dict
``inject`` returns, and sets ``injected`` once there is something to undo. ``heal()`` undoes it
once (safe twice); the runner's nemesis calls it through one guarded path, when ``for_s`` is up or
at the end whatever happened. ``setup()`` and ``teardown()`` run before the trainer starts and
after it exited, for a fault that must prepare the ground (a small disk under the checkpoints).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlsim.backends.base import Backend, CutsNetwork, Unsupported
from rlsim.fields import Strict


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

    def __init__(self, params, ctx: FaultContext) -> None:
        self.params, self.ctx = params, ctx
        self.injected = False

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
        if not self.injected:
            return None
        self.injected = False
        return self.undo()

    def undo(self) -> dict[str, Any] | None:
        """What healing this fault does. Default: nothing to undo (a kill stays a kill)."""
        return None

    def teardown(self) -> dict[str, Any] | None:
        """After the trainer exited and every fault was healed. Default: nothing."""
        return None


class FirewallFault(Fault):
    """A fault made of iptables rules (``self.rules``): healing removes exactly those rules."""

    needs = (CutsNetwork,)
    rules: list

    def undo(self):
        self.ctx.cluster.remove_rules(self.rules)
        return {"rules_removed": len(self.rules)}
