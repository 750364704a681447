"""Address and port plans for simulated clusters: pure data, no I/O.

Every cluster on a machine holds one *slot*. A slot gives the cluster its own loopback block
(``127.77.<slot>.0/24``) and its own port block, so clusters started by parallel pytest-xdist
workers never collide even if Ray binds some daemons to 0.0.0.0. Node ``i`` of slot ``s`` lives at
``127.77.s.(10 + i)``; 127.0.0.1 is never used because Ray rewrites it to the host's IP.

Port block of slot ``s`` (``base = PORT_LO + s * SLOT_PORTS``)::

    base + 0           GCS (the "6379" of this cluster)
    base + 1           dashboard and Jobs API (head only)
    base + 2           Ray client server (reserved)
    base + 3, + 4      the head's metrics servers: autoscaler monitor, dashboard (Ray's defaults,
                       44217 and 44227 on every interface, would collide between clusters and
                       lie outside the block the loopback guard covers)
    base + 5           the GCS's external store (Redis, with ``gcs_ft: redis``), at the slot's
                       ``.9`` address: a host of its own, as an HA Redis is, outlives the head
    base + 10 + i*stride + k   per-node daemons, k in NODE_DAEMONS order
    ... + WORKER_OFFSET .. + stride-1   that node's worker port range

The stride is ``NODE_STRIDE`` (60 ports a node: 50 worker ports) up to 16 nodes; larger clusters
share the block evenly (32 nodes: 30 ports a node, 20 of them for workers). Every Ray worker
process of a node (an actor, a task worker, the driver on the head) holds one port of its node's
range while it lives, so a node needs at least as many as it runs workers at once.

A cluster of more than 32 nodes *spans* consecutive slots (:func:`span`): its port block is
theirs together (64 nodes: two slots, 2000 ports, 31 a node) and its addresses those of its first
slot (``127.77.s.10`` to ``.73``); the other slots are claimed with it and hold nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

ADDRESS_PREFIX = "127.77"
FIRST_HOST = 10
PORT_LO = 20000
SLOT_PORTS = 1000
MAX_SLOTS = 12  # 20000..31999: below Linux's ephemeral range (32768+) and Ray's defaults
NODE_STRIDE = 60
MIN_STRIDE = 30  # 20 worker ports a node, the fewest any cluster gets (32 nodes in one slot)
WORKER_OFFSET = 10
# Measured on a 2-core, 24 GB machine (bench/cluster.py --scale): 64 nodes x 8 fake GPUs come up
# and detect a killed node (two slots' ports)
MAX_NODES = 64
# CPU-only Ray workers (task workers, a framework's controller and reward actors) a node must have
# worker ports for beside one per GPU: the advertised CPUs count up to this many. A node type's
# 192 CPUs are there for placement; this host could not run 192 task workers of one node at once
CPU_WORKER_ROOM = 8
NODE_DAEMONS = (
    "node_manager",
    "object_manager",
    "metrics_agent",
    "dashboard_agent_listen",
    "runtime_env_agent",
    "metrics_export",
)


@dataclass(frozen=True)
class NodePorts:
    """The fixed ports of one simulated node and its worker port range (inclusive)."""

    node_manager: int
    object_manager: int
    metrics_agent: int
    dashboard_agent_listen: int
    runtime_env_agent: int
    metrics_export: int
    min_worker: int
    max_worker: int


@dataclass(frozen=True)
class NodeLayout:
    index: int
    address: str
    ports: NodePorts


@dataclass(frozen=True)
class ClusterLayout:
    """Where every node of one cluster lives. Derived from (slot, nodes) alone."""

    slot: int
    span: int  # slots taken, from ``slot`` on (:func:`span`)
    gcs_port: int
    dashboard_port: int
    client_port: int
    autoscaler_metrics_port: int
    dashboard_metrics_port: int
    gcs_store_port: int
    nodes: tuple[NodeLayout, ...]

    @property
    def head(self) -> NodeLayout:
        return self.nodes[0]

    @property
    def slots(self) -> range:
        return range(self.slot, self.slot + self.span)

    @property
    def port_block(self) -> tuple[int, int]:
        """The slots' whole port block (inclusive): every port any of its daemons listens on."""
        return self.gcs_port, self.gcs_port + self.span * SLOT_PORTS - 1

    @property
    def gcs_address(self) -> str:
        return f"{self.head.address}:{self.gcs_port}"

    @property
    def gcs_store_address(self) -> str:
        """Where the GCS's external store (Redis) listens, when the cluster has one."""
        return f"{ADDRESS_PREFIX}.{self.slot}.{FIRST_HOST - 1}:{self.gcs_store_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.head.address}:{self.dashboard_port}"

    @property
    def port_range(self) -> tuple[int, int]:
        return self.port_block


def slot_base(slot: int) -> int:
    return PORT_LO + slot * SLOT_PORTS


def span(nodes: int) -> int:
    """Consecutive slots a cluster of ``nodes`` nodes takes: one up to 32 nodes, then as many as
    give every node :data:`MIN_STRIDE` ports."""
    return max(1, -(-(10 + nodes * MIN_STRIDE) // SLOT_PORTS))


def node_stride(nodes: int) -> int:
    """Ports each node of a ``nodes``-node cluster owns (its daemons, then its workers)."""
    return min(NODE_STRIDE, (span(nodes) * SLOT_PORTS - 10) // nodes)


def worker_ports(nodes: int) -> int:
    """How many Ray worker processes each node of a ``nodes``-node cluster can run at once."""
    return node_stride(nodes) - WORKER_OFFSET


def node_address(slot: int, index: int) -> str:
    return f"{ADDRESS_PREFIX}.{slot}.{FIRST_HOST + index}"


@functools.cache
def lay_out(slot: int, nodes: int) -> ClusterLayout:
    """The address and port plan of a cluster of ``nodes`` nodes in ``slot``.

    Raises ValueError naming the limit when the slot or node count is out of range.
    """
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(
            f"nodes={nodes}: a simulated cluster has 1..{MAX_NODES} nodes (the most measured "
            f"to fit one machine; up to 32 share one slot's {SLOT_PORTS}-port block, more span "
            "two)"
        )
    if not 0 <= slot <= MAX_SLOTS - span(nodes):
        raise ValueError(f"slot {slot} is outside 0..{MAX_SLOTS - span(nodes)} for a cluster of "
                         f"{nodes} nodes ({span(nodes)} slot(s) from it)")
    base = slot_base(slot)
    stride = node_stride(nodes)
    plans = []
    for i in range(nodes):
        first = base + 10 + i * stride
        daemons = {name: first + k for k, name in enumerate(NODE_DAEMONS)}
        ports = NodePorts(
            **daemons,
            min_worker=first + WORKER_OFFSET,
            max_worker=first + stride - 1,
        )
        plans.append(NodeLayout(index=i, address=node_address(slot, i), ports=ports))
    return ClusterLayout(
        slot=slot,
        span=span(nodes),
        gcs_port=base,
        dashboard_port=base + 1,
        client_port=base + 2,
        autoscaler_metrics_port=base + 3,
        dashboard_metrics_port=base + 4,
        gcs_store_port=base + 5,
        nodes=tuple(plans),
    )


def named_ports(plan: ClusterLayout) -> dict[str, tuple[int, int]]:
    """Symbolic port names a fault may block, as inclusive ranges.

    ``gcs``, ``dashboard`` and ``client`` are the head's; ``workers:<i>`` is node i's worker
    range and ``daemons:<i>`` its fixed daemon ports.
    """
    names = {
        "gcs": (plan.gcs_port, plan.gcs_port),
        "dashboard": (plan.dashboard_port, plan.dashboard_port),
        "client": (plan.client_port, plan.client_port),
    }
    for node in plan.nodes:
        p = node.ports
        names[f"workers:{node.index}"] = (p.min_worker, p.max_worker)
        names[f"daemons:{node.index}"] = (p.node_manager, p.metrics_export)
    return names
