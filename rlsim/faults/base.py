"""What every fault is: ``inject()`` and ``heal()`` against a backend, never against the trainer.

A fault records what it actually did (pids killed, rules applied, file changed) in the dict
``inject`` returns; ``heal`` is safe to call twice and always runs at the end of a scenario.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlsim.backends.local import LocalCluster


@dataclass
class FaultContext:
    """What a fault may touch: the cluster, the run's directory (files only), a seeded RNG and the
    worker table the trainer logged (pids and addresses, to find one rank's process)."""

    cluster: LocalCluster
    run_dir: Path
    rng: random.Random
    workers: list[dict[str, Any]] = field(default_factory=list)

    def node(self, ref: int | str) -> int:
        """A node index; ``random`` picks a non-head node from the scenario's seeded RNG."""
        if ref == "random":
            return self.rng.randrange(1, self.cluster.spec.nodes)
        return int(ref)


class Fault:
    name: ClassVar[str] = "fault"

    def __init__(self, params, ctx: FaultContext) -> None:
        self.params, self.ctx = params, ctx
        self.injected = False

    def inject(self) -> dict[str, Any]:
        raise NotImplementedError

    def heal(self) -> dict[str, Any] | None:
        """Undo what ``inject`` did, if anything is left to undo. Default: nothing to undo."""
        return None


class FirewallFault(Fault):
    """A fault made of iptables rules (``self.rules``): healing deletes exactly those rules."""

    rules: list

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        self.ctx.cluster.firewall.remove(self.rules)
        return {"rules_removed": len(self.rules)}
