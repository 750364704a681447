"""partition: cut node groups off from the rest and from each other (Jepsen's grudge, iptables)."""

from pydantic import Field

from rlsim.faults.base import FirewallFault, cut_apart
from rlsim.fields import NodeGroups, Strict


class Partition(FirewallFault):
    name = "partition"
    impairs = "cut off"
    by_hand = True
    cli_args = ("groups",)
    may_down_node = True

    class Params(Strict):
        groups: NodeGroups = Field(description="node groups cut off from the rest and each "
                                   "other")

    @classmethod
    def from_text(cls, field, text):  # by hand: one group, the rest of the cluster the other
        return [super().from_text(field, text)] if field == "groups" else \
            super().from_text(field, text)

    @classmethod
    def cluster_problem(cls, params, shape):
        cut = {n for group in params.groups for n in group}
        if len(params.groups) == 1 and cut >= set(range(shape.nodes)):  # roles: when it fires
            return "groups", ("that is every node: a partition cuts some nodes off from the "
                              "rest; name fewer")
        return super().cluster_problem(params, shape)

    def nodes_hit(self, did):
        return sorted({n for group in did["groups"] for n in group})

    def inject(self):
        groups, self.aimed = self.ctx.groups(self.params.groups)
        rules = self.ctx.cluster.partition(groups)
        self.hold_rules(rules)
        return {"groups": groups, "rules": len(rules)}

    def touched(self, did, footprint):
        return cut_apart(did["groups"], footprint)

    def said(self, did):
        cut = self.nodes_hit(did)
        rest = [i for i in range(self.ctx.cluster.spec.nodes) if i not in cut]
        groups = " and ".join(str(g) for g in did["groups"])
        return f"cut node(s) {groups} off from {rest} ({did['rules']} iptables rules)"
