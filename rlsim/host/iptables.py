"""Network faults for loopback clusters: iptables rules in a chain of the cluster's own.

On loopback every connection leaves from 127.0.0.1 whatever node opened it, so a rule cannot tell
senders apart by source address. It tells them apart by cgroup instead: each node's processes live
in cgroup ``rlsim/<home id>.<session>/n<i>`` (see :mod:`rlsim.host.cgroups`) and ``-m cgroup
--path`` matches the packets their sockets send. Receivers are matched by the node's own address.

Planning (which packets to drop) is pure data, apart from applying it. Every rule carries the
comment ``rlsim:<home id>:<session>`` and lives in chain ``RLSIM-<home id>-<slot>``, jumped to from
OUTPUT (loopback traffic crosses OUTPUT once per packet, so one rule per direction suffices).
``heal()`` removes the jump, flushes and deletes the chain; it is safe to call any number of times.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlsim.host.cgroups import NodeGroup
from rlsim.host.home import home_id
from rlsim.host.layout import ClusterLayout


@dataclass(frozen=True)
class Drop:
    """Drop packets sent by processes in cgroup ``src`` (or by any process *outside* it when
    ``exclude_src``; None = any sender) to address ``dst``, optionally only TCP to ports lo..hi."""

    src: str | None
    dst: str | None
    ports: tuple[int, int] | None = None
    reject: bool = False
    exclude_src: bool = False

    def args(self, comment: str) -> list[str]:
        out: list[str] = []
        if self.src:
            out += ["-m", "cgroup"] + (["!"] if self.exclude_src else []) + ["--path", self.src]
        if self.dst:
            out += ["-d", self.dst]
        if self.ports:
            lo, hi = self.ports
            out += ["-p", "tcp", "--dport", f"{lo}:{hi}" if hi != lo else str(lo)]
        out += ["-m", "comment", "--comment", comment]
        if self.reject:
            return out + ["-j", "REJECT"] + (["--reject-with", "tcp-reset"] if self.ports else [])
        return out + ["-j", "DROP"]


@dataclass(frozen=True)
class Rule:
    """Any other rule of the cluster's chain: its match and its target, as iptables words (a
    degraded link's marks, its loss and its queue to the delayer; see :mod:`rlsim.host.links`)."""

    match: tuple[str, ...]
    target: tuple[str, ...]

    def args(self, comment: str) -> list[str]:
        return [*self.match, "-m", "comment", "--comment", comment, *self.target]


def grudge(nodes: Sequence[int], groups: Sequence[Sequence[int]]) -> dict[int, set[int]]:
    """Jepsen's grudge: for each node, the nodes it must not reach.

    ``groups`` lists disjoint groups of node indices; nodes named in no group form one more group.
    Nodes in different groups cannot talk. Raises ValueError for unknown or repeated indices.
    """
    seen: set[int] = set()
    for group in groups:
        for n in group:
            if n not in nodes:
                raise ValueError(f"partition names node {n}; the cluster has nodes {list(nodes)}")
            if n in seen:
                raise ValueError(f"partition names node {n} in two groups")
            seen.add(n)
    rest = [n for n in nodes if n not in seen]
    all_groups = [list(g) for g in groups] + ([rest] if rest else [])
    side = {n: i for i, g in enumerate(all_groups) for n in g}
    return {a: {b for b in nodes if side[b] != side[a]} for a in nodes}


def node_cgroup(session: str, index: int) -> str:
    return NodeGroup(session, index).rel


def node_of(cgroup: str) -> int:
    """The node index of a :func:`node_cgroup` path (a drop's sender)."""
    return int(cgroup.rsplit("/n", 1)[1])


def partition_rules(
    plan: ClusterLayout, session: str, groups: Sequence[Sequence[int]]
) -> list[Drop]:
    """Drops that split the cluster into ``groups`` (both directions, every port).

    Drivers outside the cluster (tests, ``ray job submit``) still reach every node.
    """
    addr = {n.index: n.address for n in plan.nodes}
    cut = grudge(sorted(addr), groups)
    return [
        Drop(node_cgroup(session, a), addr[b]) for a in sorted(cut) for b in sorted(cut[a])
    ]


def block_port_rules(
    plan: ClusterLayout,
    session: str,
    node: int,
    ports: tuple[int, int],
    sources: Iterable[int] | None = None,
    reject: bool = False,
) -> list[Drop]:
    """Drops of TCP connections to ``ports`` on ``node`` from the nodes ``sources``; with None,
    from every process but the node's own (other nodes, and drivers such as ``ray job submit``).

    Traffic a node sends to itself is never blocked: a firewall sits between hosts.
    """
    addr = {n.index: n.address for n in plan.nodes}
    if node not in addr:
        raise ValueError(f"block_port names node {node}; the cluster has nodes {sorted(addr)}")
    lo, hi = ports
    if not 0 < lo <= hi < 65536:
        raise ValueError(f"block_port ports {lo}..{hi} are not a valid TCP port range")
    if sources is None:
        return [Drop(node_cgroup(session, node), addr[node], ports, reject, exclude_src=True)]
    srcs = sorted(set(sources))
    for s in srcs:
        if s not in addr:
            raise ValueError(f"block_port names source node {s}; the cluster has {sorted(addr)}")
    return [Drop(node_cgroup(session, s), addr[node], ports, reject) for s in srcs if s != node]


class IptablesError(RuntimeError):
    pass


class Firewall:
    """The iptables chain of one cluster. Needs root and the ``iptables`` binary."""

    def __init__(self, slot: int, session: str) -> None:
        self.chain = chain_name(slot)
        self.guard = guard_chain(slot)
        self.comment = f"rlsim:{home_id()}:{session}"
        self.rules: list[Drop | Rule] = []

    @staticmethod
    def available() -> str | None:
        """None when rules can be applied here, else the reason (for a clear error or skip)."""
        import os

        from rlsim.host import cgroups

        if shutil.which("iptables") is None:
            return "iptables is not installed (Debian: apt-get install iptables)"
        if os.geteuid() != 0:
            return "network faults need root (iptables): run as root"
        reason = cgroups.available()
        return f"network faults need per-node cgroups: {reason}" if reason else None

    def _ipt(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise IptablesError(f"iptables {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def _ensure_chain(self, chain: str, hook: str) -> None:
        """Create ``chain`` and the jump to it from ``hook`` where they are missing."""
        if self._ipt("-n", "-L", chain, check=False).returncode != 0:
            self._ipt("-N", chain)
        jump = [hook, "-m", "comment", "--comment", self.comment, "-j", chain]
        if self._ipt("-C", *jump, check=False).returncode != 0:
            self._ipt("-I", *jump)

    def apply(self, drops: Iterable[Drop | Rule]) -> list[Drop | Rule]:
        """Append ``drops`` to the chain; returns what was applied (recorded for heal and logs)."""
        reason = self.available()
        if reason:
            raise IptablesError(reason)
        self._ensure_chain(self.chain, "OUTPUT")
        applied = []
        for d in drops:
            self._ipt("-A", self.chain, *d.args(self.comment))
            applied.append(d)
        self.rules += applied
        return applied

    def remove(self, drops: Iterable[Drop | Rule]) -> None:
        """Delete these rules only (one fault healed while others stay); absent rules are fine."""
        for d in drops:
            self._ipt("-D", self.chain, *d.args(self.comment), check=False)
            if d in self.rules:
                self.rules.remove(d)

    def guard_loopback(self, ports: tuple[int, int]) -> None:
        """Keep the cluster's port block ``ports`` reachable over loopback only: a chain of its
        own, jumped to from INPUT (fault rules stay on the OUTPUT side, where their cgroup match
        names the sender), removed with the cluster, not by :meth:`heal`."""
        reason = self.available()
        if reason:
            raise IptablesError(reason)
        heal_chain(self.guard)
        self._ensure_chain(self.guard, "INPUT")
        self._ipt("-A", self.guard, *loopback_only(ports), "-m", "comment",
                  "--comment", self.comment)

    def leftover_rules(self) -> list[str]:
        """The fault rules in this cluster's chain now (``iptables -S`` lines); none once healed."""
        if self.available():
            return []
        listing = self._ipt("-S", self.chain, check=False).stdout
        return [line for line in listing.splitlines() if line.startswith("-A ")]

    def heal(self) -> None:
        """Remove every rule of this chain and the chain itself. Safe twice, safe if never used."""
        self.rules = []
        if self.available():
            return
        heal_chain(self.chain)


def heal_chain(chain: str) -> None:
    """Delete every OUTPUT and INPUT jump to ``chain``, then flush and delete it (no error if
    absent)."""
    for hook in ("OUTPUT", "INPUT"):
        listing = subprocess.run(
            ["iptables", "-w", "5", "-S", hook], capture_output=True, text=True
        )
        for line in listing.stdout.splitlines():
            if line.startswith(f"-A {hook}") and line.endswith(f"-j {chain}"):
                spec = line.split()[2:]
                subprocess.run(["iptables", "-w", "5", "-D", hook, *_unquote(spec)], check=False)
    subprocess.run(["iptables", "-w", "5", "-F", chain], capture_output=True, check=False)
    subprocess.run(["iptables", "-w", "5", "-X", chain], capture_output=True, check=False)


def heal_slot(slot: int) -> None:
    """Remove both chains of ``slot`` in this home: its faults and its loopback guard."""
    heal_chain(chain_name(slot))
    heal_chain(guard_chain(slot))


def guard_chain(slot: int, home: str | None = None) -> str:
    """The chain that keeps ``slot``'s port block reachable over loopback only (INPUT side)."""
    return f"{chain_name(slot, home)}-lo"


def loopback_only(ports: tuple[int, int]) -> list[str]:
    """The rule (pure data) that refuses TCP to ``ports`` arriving on any interface but ``lo``.

    Ray binds its GCS, raylets and agents to every interface and has no setting to narrow that,
    so without this rule anything that can reach the host reaches a simulated cluster (and its
    unauthenticated metrics). A reset, not a silent drop: a client elsewhere learns at once."""
    lo, hi = ports
    return ["!", "-i", "lo", "-p", "tcp", "--dport", f"{lo}:{hi}",
            "-j", "REJECT", "--reject-with", "tcp-reset"]


def chain_name(slot: int, home: str | None = None) -> str:
    """The chain of ``slot`` in this rlsim home (``home``: a home id, default this one).

    The home id is in the name so that two homes on one machine (other users, other CI jobs)
    never share or remove each other's chains; at most 6 + 8 + 1 + 5 characters, well under
    iptables' 28-character limit."""
    return f"RLSIM-{home or home_id()}-{slot}"


def own_chains(listing: str, home: str | None = None) -> list[str]:
    """The chains of this home (``home``: a home id, default this one) in ``iptables -S`` output."""
    prefix = f"-N RLSIM-{home or home_id()}-"
    return [ln.split()[1] for ln in listing.splitlines() if ln.startswith(prefix)]


def rlsim_chains() -> list[str]:
    """Every chain of this rlsim home on this machine (for the reaper and ``down --all``)."""
    if shutil.which("iptables") is None:
        return []
    listing = subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True, text=True)
    return own_chains(listing.stdout)


def _unquote(tokens: list[str]) -> list[str]:
    return [t.strip('"') for t in tokens]
