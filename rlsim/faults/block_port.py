"""block_port: one node's port or port range unreachable (from some nodes, or from all others)."""

from rlsim.faults.base import FirewallFault


class BlockPort(FirewallFault):
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
