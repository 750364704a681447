"""partition: cut node groups off from the rest and from each other (Jepsen's grudge, iptables)."""

from rlsim.faults.base import FirewallFault


class Partition(FirewallFault):
    name = "partition"

    def inject(self):
        self.rules = self.ctx.cluster.partition(self.params.groups)
        self.injected = True
        return {"groups": self.params.groups, "rules": len(self.rules)}
