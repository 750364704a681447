"""A docker cluster's network faults: the plan's drops, written for loopback nodes, as iptables
rules inside each node container's own network namespace (chains ``RLSIM-IN`` and
``RLSIM-OUT`` there, entered with ``nsenter``; gone with the container). The docker backend
(:mod:`rlsim.backends.docker`) holds one per cluster as its ``firewall``.
"""

from __future__ import annotations

import subprocess

from rlsim.host import iptables
from rlsim.host.iptables import Drop


class ContainerFirewall:
    """The plan's drops (written for loopback nodes: sender cgroup -> address) applied inside the
    nodes' network namespaces: a drop from node a to node b's address becomes an OUTPUT rule in
    a's namespace; "from anyone but the node" becomes an INPUT rule in the node's namespace."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster  # the DockerCluster whose nodes these are

    @staticmethod
    def available() -> str | None:
        """None: rules apply inside each node's own namespace (its container has NET_ADMIN)."""
        return None

    def _rules(self, drop: Drop) -> list[tuple[int, list[str]]]:
        """Where a drop goes: a drop between two nodes is applied at both ends (OUTPUT in the
        sender's namespace, INPUT in the receiver's), so that it holds, like a firewall on the
        network, while either end restarts (a new container has a new, empty namespace)."""
        plan_addrs = {n.address: n.index for n in self.cluster._st.layout.nodes}
        addrs = self.cluster.addresses
        sender = iptables.node_of(drop.src) if drop.src else None
        target = plan_addrs[drop.dst] if drop.dst else None
        ports = []
        if drop.ports:
            lo, hi = drop.ports
            ports = ["-p", "tcp", "--dport", f"{lo}:{hi}" if hi != lo else str(lo)]
        verdict = ["-j", "REJECT"] if drop.reject else ["-j", "DROP"]
        if drop.exclude_src:  # everyone but the node itself
            return [(target, ["RLSIM-IN", "!", "-i", "lo", *ports, *verdict])]
        return [(sender, ["RLSIM-OUT", "-d", addrs[target], *ports, *verdict]),
                (target, ["RLSIM-IN", "-s", addrs[sender], *ports, *verdict])]

    def _ipt(self, index: int, args: list[str], check: bool = True) -> int:
        pid = self.cluster._state(index)["Pid"]
        if not pid:
            return 1
        out = subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", "5", *args],
                             capture_output=True, text=True)
        if check and out.returncode:
            raise iptables.IptablesError(f"iptables {' '.join(args)} in node {index}: "
                                         f"{out.stderr.strip()}")
        return out.returncode

    def _ensure_chains(self, index: int) -> None:
        for chain, hook in (("RLSIM-IN", "INPUT"), ("RLSIM-OUT", "OUTPUT")):
            if self._ipt(index, ["-N", chain], check=False) == 0:
                self._ipt(index, ["-I", hook, "-j", chain])

    def apply(self, drops: list[Drop]) -> list[Drop]:
        for drop in drops:
            for index, rule in self._rules(drop):
                if self.cluster._state(index)["Running"]:  # a stopped node has no namespace
                    self._ensure_chains(index)
                    self._ipt(index, ["-A", *rule])
        return drops

    def remove(self, drops: list[Drop]) -> None:
        for drop in drops:
            for index, rule in self._rules(drop):
                self._ipt(index, ["-D", *rule], check=False)  # a killed node took its rules

    def heal(self) -> None:
        for index in range(self.cluster.spec.nodes):
            for chain in ("RLSIM-IN", "RLSIM-OUT"):
                self._ipt(index, ["-F", chain], check=False)
