"""partition: cut node groups off from the rest and from each other (Jepsen's grudge, iptables)."""

from pydantic import Field, field_validator

from rlsim.faults.base import FirewallFault
from rlsim.fields import Strict


class Partition(FirewallFault):
    name = "partition"
    impairs = "cut off"
    may_down_node = True

    class Params(Strict):
        groups: list[list[int]] = Field(
            min_length=1, description="node groups cut off from the rest and each other")

        @field_validator("groups")
        @classmethod
        def _each_node_once(cls, groups: list[list[int]]) -> list[list[int]]:
            seen: set[int] = set()
            for group in groups:
                if not group:
                    raise ValueError("an empty group cuts nothing off: drop it")
                for n in group:
                    if n in seen:
                        raise ValueError(f"node {n} is named twice; a node is in one group at "
                                         "most")
                    seen.add(n)
            return groups

    def nodes_hit(self, did):
        return sorted({n for group in did["groups"] for n in group})

    def inject(self):
        self.rules = self.ctx.cluster.partition(self.params.groups)
        self.injected = True
        return {"groups": self.params.groups, "rules": len(self.rules)}
