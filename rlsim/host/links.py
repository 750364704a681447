"""Degraded links between nodes (the ``degrade_link`` fault): each packet that crosses the link
is delayed by ``delay_ms`` (± ``jitter_ms``) and lost with probability ``loss_pct`` percent.

Which packets cross: the link between the groups of a partition (Jepsen's grudge, see
:func:`rlsim.host.iptables.grudge`), here as (sender, receiver) pairs; ``nodes: [1]`` is the link
between node 1 and all the others. Both directions are hit, as on a real cable.

How, on loopback nodes (the local backend): every connection leaves from 127.0.0.1 whatever node
opened it, so a packet's sender is told by its socket's cgroup and its receiver by the address it
is sent to. The first packet a pair exchanges marks its connection (conntrack's ``CONNMARK``);
every packet of a marked connection, the replies included (which go back to 127.0.0.1, not to a
node's address), then meets the link's loss (an iptables ``statistic`` rule: the kernel drops it)
and its delay (``NFQUEUE`` to the delayer, :mod:`rlsim.host.delayer`). In a container (docker
backend) each node has its own network namespace: the rules go into the sender's namespace,
matched by the receiver's address, with a delayer in that namespace.

The mark is drawn per fault, so a connection marked by a link healed since is not caught by a
later one. Rules and marks are plain data here; applying them is the backend's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlsim.host.iptables import Rule, grudge, node_cgroup

QUEUES = (20000, 60000)  # the netfilter queue numbers a delayer is given, one per fault


@dataclass(frozen=True)
class LinkShape:
    """What the link does to each packet."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    def targets(self, queue: int | None) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """(extra match, target) per action on a crossing packet: loss first (a lost packet is
        not delayed), then the queue to the delayer."""
        out = []
        if self.loss_pct:
            out.append((("-m", "statistic", "--mode", "random", "--probability",
                         f"{self.loss_pct / 100:.6f}"), ("-j", "DROP")))
        if self.delay_ms:
            if queue is None:
                raise ValueError("a delayed link needs a netfilter queue for its delayer")
            out.append(((), ("-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass")))
        return out


def crossing(nodes: Sequence[int], groups: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """The (sender, receiver) pairs whose packets cross the link between ``groups`` (nodes
    named in no group form one more group), both directions."""
    cut = grudge(nodes, groups)
    return [(a, b) for a in sorted(cut) for b in sorted(cut[a])]


def loopback_rules(addr: Sequence[str], session: str, pairs: Sequence[tuple[int, int]],
                   shape: LinkShape, mark: int, queue: int | None) -> list[Rule]:
    """The rules of one degraded link on nodes told apart by cgroup (see the module's
    docstring), ``addr`` each node's address: loopback nodes, or a substrate machine's senders
    (:mod:`rlsim.backends.substrate`, each machine's rules for the pairs it sends from)."""
    tag = ("-m", "connmark", "--mark", f"{mark:#x}")
    rules = [Rule(("-m", "cgroup", "--path", node_cgroup(session, a), "-d", addr[b]),
                  ("-j", "CONNMARK", "--set-mark", f"{mark:#x}")) for a, b in pairs]
    return rules + [Rule((*tag, *match), target) for match, target in shape.targets(queue)]


def namespace_rules(addresses: Sequence[str], pairs: Sequence[tuple[int, int]],
                    shape: LinkShape, queue: int | None) -> dict[int, list[list[str]]]:
    """The rules of one degraded link on nodes with network namespaces of their own: per sender
    node, its OUTPUT rule words (match and target), one per receiver and action."""
    out: dict[int, list[list[str]]] = {}
    for a, b in pairs:
        for match, target in shape.targets(queue):
            out.setdefault(a, []).append(["-d", addresses[b], *match, *target])
    return out


def new_mark(rng: random.Random | None = None) -> int:
    """A connection mark for one link: 0x52 ('R') in the top byte, the rest drawn."""
    return 0x52000000 | (rng or random.SystemRandom()).randrange(1, 1 << 24)


def bound_queues(listing: str | None = None) -> set[int]:
    """The netfilter queues some process listens on (``/proc/net/netfilter/nfnetlink_queue``,
    first column), in this network namespace."""
    if listing is None:
        try:
            listing = Path("/proc/net/netfilter/nfnetlink_queue").read_text()
        except OSError:
            listing = ""
    return {int(line.split()[0]) for line in listing.splitlines() if line.split()}


def free_queue(rng: random.Random | None = None, taken: set[int] | None = None) -> int:
    """A queue number no delayer listens on now."""
    taken = bound_queues() if taken is None else taken
    rng = rng or random.SystemRandom()
    while (q := rng.randrange(*QUEUES)) in taken:
        pass
    return q
