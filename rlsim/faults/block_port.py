"""block_port: one node's port or port range unreachable (from some nodes, or from all others)."""

from rlsim.faults.base import Fault


class BlockPort(Fault):
    name = "block_port"

    def inject(self):
        p = self.params
        ports = p.port
        if isinstance(ports, int):
            ports = (ports, ports)
        elif isinstance(ports, list):
            ports = (ports[0], ports[-1])
        self.rules = self.ctx.cluster.block_port(p.node, ports, p.sources)
        self.injected = True
        return {"node": p.node, "port": p.port, "ports": list(self.rules[0].ports)
                if self.rules else [], "sources": p.sources, "rules": len(self.rules)}

    def heal(self):
        if not self.injected:
            return None
        self.injected = False
        self.ctx.cluster.firewall.remove(self.rules)
        return {"rules_removed": len(self.rules)}
