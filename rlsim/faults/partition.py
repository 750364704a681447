"""partition: cut node groups off from the rest and from each other (Jepsen's grudge, iptables)."""

from rlsim.faults.base import Fault


class Partition(Fault):
    name = "partition"

    def inject(self):
        self.rules = self.ctx.cluster.partition(self.params.groups)
        self.injected = True
        return {"groups": self.params.groups, "rules": len(self.rules)}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        self.ctx.cluster.firewall.remove(self.rules)
        return {"rules_removed": len(self.rules)}
