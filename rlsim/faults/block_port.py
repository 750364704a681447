"""block_port: one node's port or port range unreachable (from some nodes, or from all others)."""

from pydantic import Field, field_validator

from rlsim.faults.base import FirewallFault
from rlsim.faults.footprint import processes
from rlsim.fields import PORT_NAMES, NodeOrRole, NodeTarget


class BlockPort(FirewallFault):
    name = "block_port"
    impairs = "port blocked"
    by_hand = True
    cli_args = ("node", "port")

    class Params(NodeTarget):
        """The node whose port is blocked: ``node``, or a role's rank (``role``, ``rank``)."""

        port: str | int | list[int] = Field(
            description="gcs | dashboard | workers:<i> | 6379 | [lo, hi]")
        sources: list[NodeOrRole] | None = Field(
            None, description="nodes that lose it, or roles' nodes (default: all others)")

        @field_validator("port")
        @classmethod
        def _port_ok(cls, port: str | int | list[int]) -> str | int | list[int]:
            if isinstance(port, str) and not PORT_NAMES.match(port):
                raise ValueError(f"unknown port name {port!r}; use gcs, dashboard, client, "
                                 "workers:<node>, daemons:<node>, a port number or [low, high]")
            ports = [port] if isinstance(port, int) else port if isinstance(port, list) else []
            if isinstance(port, list) and len(port) != 2:
                raise ValueError(f"a port range is [low, high], got {len(port)} numbers")
            for n in ports:
                if not 1 <= n <= 65535:
                    raise ValueError(f"port {n} is out of range: a TCP port is 1-65535")
            if len(ports) == 2 and ports[0] > ports[1]:
                raise ValueError(f"port range {port}: the low end comes first")
            return port

    @classmethod
    def cluster_problem(cls, params, shape):
        if params.sources is not None and params.node is not None and \
                params.node in params.sources:
            return "sources", (f"node {params.node} is the node whose port is blocked: a node "
                               "always reaches its own ports; drop it from sources")
        m = PORT_NAMES.match(params.port) if isinstance(params.port, str) else None
        if m and m.group(3) is not None and int(m.group(3)) >= shape.nodes:
            return "port", (f"{params.port!r} names node {m.group(3)}, outside the cluster "
                            f"(nodes 0-{shape.nodes - 1})")
        return super().cluster_problem(params, shape)

    @classmethod
    def from_text(cls, field, text):
        if field == "port":  # a number is a port, anything else a port's name
            return int(text) if text.isascii() and text.isdigit() else text
        return super().from_text(field, text)

    def inject(self):
        p = self.params
        ports = p.port
        if isinstance(ports, int):
            ports = (ports, ports)
        elif isinstance(ports, list):
            ports = (ports[0], ports[-1])
        node = self.target()
        sources = None
        if p.sources is not None:
            [sources], aimed = self.ctx.groups([p.sources])
            self.aimed = {**(self.aimed or {}), **aimed} or None
            if node in sources:
                raise ValueError(f"node {node}, whose port is blocked, is among the sources "
                                 f"once roles are placed ({sources}): name other sources")
        rules = self.ctx.cluster.block_port(node, ports, sources)
        self.hold_rules(rules)
        return {"node": node, "port": p.port, "ports": list(rules[0].ports) if rules else [],
                "sources": sources, "rules": len(rules)}

    def touched(self, did, footprint):
        """Every actor talks to the head's GCS: blocking it (``port: gcs``) cuts the actors on
        the sources off. Another port is used by whoever connects to it: the trainer's actors on the
        blocked node are cut off when another of its ends (an actor, the GCS) is a source."""
        node = did["node"]
        sources = did["sources"] if did["sources"] is not None else \
            [i for i in range(self.ctx.cluster.spec.nodes) if i != node]
        talking = processes(footprint)  # a bundle is a reservation: a blocked port cuts nothing
        if did["port"] == "gcs":
            return [a for a in talking if a["node"] in sources]
        ends = {a["node"] for a in talking if a["node"] is not None} | {0}
        return [a for a in talking if a["node"] == node] if ends & set(sources) else []

    def said(self, did):
        who = f"from node(s) {did['sources']}" if did["sources"] else "from every other node"
        lo, hi = did["ports"] or ("?", "?")
        return f"blocked node {did['node']}'s port(s) {lo}-{hi} ({did['port']}) {who}"
