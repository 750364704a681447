"""The contract every rlsim backend (local processes, Docker containers, a real cluster) meets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rlsim.net.iptables import Drop


@dataclass
class NodeInfo:
    """One node as the backend sees it. ``alive`` is Ray's verdict (the GCS node table)."""

    index: int
    address: str
    gpus: int
    alive: bool
    pids: list[int] = field(default_factory=list)
    node_id: str | None = None

    @property
    def role(self) -> str:
        return "head" if self.index == 0 else "worker"


class ClusterStartError(RuntimeError):
    """Bring-up failed; the message names the node, what was seen and the setting to change."""


@runtime_checkable
class Backend(Protocol):
    """A running simulated cluster. Faults see only this; they never see the trainer.

    Implementations must not assert: they raise typed errors whose message names the fix.
    Every fault they apply must be undone by ``heal_network``/``resume_node``/``stop``.
    """

    name: str

    @property
    def address(self) -> str:
        """The GCS address a Ray driver connects to (``RAY_ADDRESS``)."""

    @property
    def dashboard_url(self) -> str:
        """The head's dashboard and Jobs API (``ray job submit --address``)."""

    def driver_env(self) -> dict[str, str]:
        """Environment a driver process needs to connect (address and auth token)."""

    def nodes(self) -> list[NodeInfo]:
        """Every node of the spec, with Ray's liveness verdict."""

    def wait_for_nodes(self, timeout: float | None = None) -> list[NodeInfo]:
        """Block until every node is alive with the expected GPUs, or raise TimeoutError."""

    def kill_node(self, index: int) -> list[int]:
        """SIGKILL every process of node ``index``; returns the pids killed."""

    def restart_node(self, index: int, timeout: float | None = None) -> NodeInfo:
        """Start node ``index`` again at its address (killing what is left of it first)."""

    def pause_node(self, index: int) -> list[int]:
        """Freeze node ``index`` (SIGSTOP or its equivalent)."""

    def resume_node(self, index: int) -> list[int]:
        """Undo ``pause_node``; safe when the node is not paused."""

    def partition(self, groups: list[list[int]]) -> list[Drop]:
        """Cut traffic between the groups of nodes; returns the rules applied."""

    def block_port(
        self, node: int, ports: tuple[int, int], sources: list[int] | None = None
    ) -> list[Drop]:
        """Drop TCP connections to ``ports`` of ``node`` from ``sources`` (all others if None)."""

    def heal_network(self) -> None:
        """Remove every network fault of this cluster. Safe twice."""

    def logs(self, index: int, lines: int = 40) -> str:
        """The tail of node ``index``'s Ray logs."""

    def stop(self) -> None:
        """Tear down everything this cluster created and nothing else. Safe twice."""

    def leaks(self) -> list[str]:
        """After ``stop``: what of this cluster is still there (processes, rules, cgroups,
        containers, networks). Empty when teardown was complete."""

    def driver_command(self, cmd: list[str]) -> list[str]:
        """``cmd`` as a Ray driver of this cluster (run with ``driver_env()``): on the host for
        local nodes, inside the head container for docker."""

    def node_command(self, index: int, cmd: list[str]) -> list[str]:
        """``cmd`` as a process of node ``index`` (its cgroups, its container)."""

    def kill_process(self, ip: str, pid: int) -> int:
        """SIGKILL one process, by the pid its node sees, on the node with address ``ip``."""

    def memory(self, index: int):
        """Node ``index``'s memory cgroup (:class:`rlsim.cgroups.MemoryGroup`)."""

    def probe(self, src: int, dst: int, port: int) -> bool:
        """Can a process on node ``src`` open a TCP connection to node ``dst``:``port``?"""

    def endpoints(self) -> list[dict]:
        """Each node's ``index``, ``address`` and the ``ports`` (name -> port) other nodes must
        reach: what ``rlsim doctor`` probes."""

    def run_probe(self, index: int, phase: str, args: dict) -> dict:
        """Run a phase of :mod:`rlsim.doctor.probe` on node ``index``; its JSON answer."""
