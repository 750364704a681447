"""The contract every rlsim backend (local processes, Docker containers, a real cluster, a
substrate's machines) meets: :class:`Backend`, the part every one of them offers, the
capabilities a fault may need (:class:`KillsNodes`, :class:`CutsNetwork`, ...), each offered by
the backends that can, and what the harness may use beyond :class:`Backend` (:class:`WarmsWorkers`,
:class:`ShowsFaultResidue`, ...).

A fault names the capabilities it needs (``Fault.needs``); a scenario whose fault needs one its
backend lacks is skipped (:class:`Unsupported`) with the reason, before anything starts. A
capability is asked for with ``isinstance`` against its Protocol, never by looking for a
method by name.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from rlsim.contract import MEMORY_LABEL as GPU_MEMORY_LABEL
from rlsim.host.iptables import Drop
from rlsim.host.shape import describe
from rlsim.host.spec import ClusterShape, ClusterSpec
from rlsim.host.state import ClusterState

# The doctor's probe: a program each node runs (``python -m``), never imported by a backend
PROBE_MODULE = "rlsim.doctor.probe"


@dataclass
class NodeInfo:
    """One node as the backend sees it. ``alive`` is Ray's verdict (the GCS node table)."""

    index: int
    address: str
    gpus: int
    alive: bool
    pids: list[int] = field(default_factory=list)
    node_id: str | None = None
    resources: dict[str, float] = field(default_factory=dict)  # as Ray reports them (alive)
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def seen(cls, index: int, address: str, entry: dict | None, gpus: int,
             pids: list[int]) -> NodeInfo:
        """Node ``index`` from its alive registration in Ray's node table (``entry``; None: not
        alive, and ``gpus`` is what its shape gives it)."""
        if entry is None:
            return cls(index, address, gpus, False, pids)
        resources = dict(entry.get("Resources") or {})
        return cls(index, address, int(resources.get("GPU", 0)), True, pids, entry["NodeID"],
                   resources, dict(entry.get("Labels") or {}))

    @property
    def role(self) -> str:
        return "head" if self.index == 0 else "worker"

    def shape(self) -> str:
        """What Ray reports the node offers, in one line (e.g. ``8x H100 80G, 192 CPU,
        1862 GiB``); ``-`` for a node that is not alive."""
        if not self.alive:
            return "-"
        r = self.resources
        accelerator = next((k.split(":", 1)[1] for k in r if k.startswith("accelerator_type:")),
                           None)
        return describe(self.gpus, accelerator, self.labels.get(GPU_MEMORY_LABEL),
                        r.get("CPU", 0), r.get("memory", 0) / 2**30)


class ClusterStartError(RuntimeError):
    """Bring-up failed; the message names the node, what was seen and the setting to change."""


class Unsupported(Exception):
    """The scenario asks for something this backend cannot do (a skip, not a failure).
    ``missing_part``: the backend itself is missing here (no engine), which strict CI fails on."""

    def __init__(self, message: str, missing_part: bool = False) -> None:
        super().__init__(message)
        self.missing_part = missing_part


def needs_containers(shape: ClusterShape, node_local: bool,
                     fix: str = "run it with --backend docker") -> Unsupported | None:
    """What of a cluster section only container nodes can give (another Ray or Python on a node,
    a disk per node), as the refusal of a backend without them, ending with ``fix``."""
    for key, what in (("ray_version", "a node with another Ray"),
                      ("python", "a node with another Python")):
        if getattr(shape, key):
            return Unsupported(f"cluster.{key} ({what}) needs container nodes: {fix}")
    if node_local:
        return Unsupported(f"cluster.checkpoint_storage (a disk per node) needs container "
                           f"nodes: {fix}")
    return None


def standin_refusal(shape: ClusterShape, local: bool) -> Unsupported | None:
    """Why the device stand-in (``cuda_standin``) cannot run here: only the local backend's
    nodes start with it, and never where a real GPU is visible."""
    if not getattr(shape, "cuda_standin", False):
        return None
    if not local:
        return Unsupported("cluster.cuda_standin (torch sees the fake GPUs as CUDA devices) runs "
                           "on --backend local: only its nodes start with the stand-in")
    from rlsim.standin import real_gpu_problem

    problem = real_gpu_problem()
    return Unsupported(f"cluster.cuda_standin: {problem}") if problem else None


@runtime_checkable
class Backend(Protocol):
    """A running cluster: what the runner, the doctor and every fault may use on any backend.

    Implementations must not assert: they raise typed errors whose message names the fix.
    Every fault they apply must be undone by the matching heal verb or by ``stop``.
    """

    name: str
    spec: ClusterSpec  # the scenario's shape: how many nodes it uses, their GPUs
    # a clean cluster of this backend may be handed to the next scenario of its shape
    # (rlsim.scenario.pool); a class attribute, asked of the class before any cluster exists
    reusable: bool

    @property
    def address(self) -> str:
        """The GCS address a Ray driver connects to (``RAY_ADDRESS``)."""

    @classmethod
    def refusal(cls, shape: ClusterShape, node_local: bool) -> Unsupported | None:
        """Why this backend cannot run a scenario's cluster section (None: it can)."""

    @classmethod
    def make(cls, spec: ClusterSpec, ray_address: str | None = None, gpu_faults: bool = False,
             *, on: str | None = None, detached: bool = False) -> Backend:
        """The cluster of ``spec``, not started yet (``ray_address``: a running one's; ``on``:
        the substrate's address, given to the backend it chose, :func:`rlsim.backends.chosen`;
        ``detached``: a cluster rlsim starts that outlives the command, ``rlsim cluster
        --detach``)."""

    def start(self) -> Backend:
        """Bring the cluster up (or connect to it) and wait until every node is there."""

    def driver_env(self) -> dict[str, str]:
        """Environment a driver process needs to connect (address and auth token)."""

    def driver_command(self, cmd: list[str], env: dict[str, str] | None = None,
                       cwd: Path | None = None) -> list[str]:
        """``cmd`` as a Ray driver of this cluster (run with ``driver_env()`` and ``env``, which
        the command carries where the driver runs elsewhere, in the folder ``cwd``): on the host
        for local nodes, inside the head container for docker, as is on a real cluster's
        head."""

    def nodes(self) -> list[NodeInfo]:
        """Every node of the spec, with Ray's liveness verdict."""

    def endpoints(self) -> list[dict]:
        """Each node's ``index``, ``address`` and the ``ports`` (name -> port) other nodes must
        reach: what ``rlsim doctor`` probes."""

    def probes(self) -> AbstractContextManager[Callable[[int, str, dict], dict]]:
        """While inside, ``ask(index, phase, args)``: a phase of :mod:`rlsim.doctor.probe` run on
        node ``index``, its JSON answer."""

    def stop(self) -> None:
        """Tear down everything this cluster created and nothing else. Safe twice."""

    def leaks(self) -> list[str]:
        """After ``stop``: what of this cluster is still there (processes, rules, cgroups,
        containers, networks). Empty when teardown was complete."""


@runtime_checkable
class KeepsLogs(Protocol):
    """Nodes whose Ray logs rlsim can read (a real cluster's are its owner's): kept beside the
    timeline when the scenario ends."""

    def logs(self, index: int, lines: int = 40) -> str:
        """The tail of node ``index``'s Ray logs."""


@runtime_checkable
class StartsClusters(Backend, KeepsLogs, Protocol):
    """A cluster rlsim started itself and owns: its dashboard, its logs, waiting for its nodes."""

    @property
    def dashboard_url(self) -> str:
        """The head's dashboard and Jobs API (``ray job submit --address``)."""

    def wait_for_nodes(self, timeout: float | None = None) -> list[NodeInfo]:
        """Block until every node is alive with the expected GPUs, or raise TimeoutError."""

    def probe(self, src: int, dst: int, port: int) -> bool:
        """Can a process on node ``src`` open a TCP connection to node ``dst``:``port``?"""


# -- capabilities a fault may need -----------------------------------------------------------------
@runtime_checkable
class KillsNodes(Protocol):
    """SIGKILL a whole node, as when a machine dies."""

    def kill_node(self, index: int) -> list[int]:
        """SIGKILL every process of node ``index``; returns the pids killed."""


@runtime_checkable
class RestartsNodes(Protocol):
    """Start a killed node again at its address, as a reboot does."""

    def restart_node(self, index: int, timeout: float | None = None) -> NodeInfo:
        """Start node ``index`` again at its address (killing what is left of it first)."""


@runtime_checkable
class PausesNodes(Protocol):
    """Freeze and thaw every process of a node (cgroup freezer)."""

    def pause_node(self, index: int) -> list[int]:
        """Freeze node ``index``; returns the pids frozen."""

    def resume_node(self, index: int) -> list[int]:
        """Undo ``pause_node``; safe when the node is not paused."""


@runtime_checkable
class HoldsWorkers(Protocol):
    """See a node's Ray workers (those that run tasks and actors) and what each is doing, and
    signal them (SIGSTOP holds one, SIGCONT lets it go on), its raylet and agents untouched."""

    def workers(self, index: int) -> dict[int, str]:
        """Node ``index``'s Ray workers: pid -> what it runs (``""`` idle, else its title)."""

    def signal_workers(self, index: int, chosen: list[int], signum: int) -> list[int]:
        """``signum`` to those of ``chosen`` still on node ``index``; the pids signalled."""


@runtime_checkable
class LabelsProcesses(Protocol):
    """Label a process started beside the cluster on this machine as the cluster's own, so its
    teardown and the reaper end it; and say which processes here are the cluster's."""

    def process_labels(self) -> dict[str, str]:
        """The environment variables that make a process this cluster's."""

    def processes_here(self) -> dict[int, int | None]:
        """This cluster's processes on this machine: pid -> its node's index (None: no node's)."""


@runtime_checkable
class CutsNetwork(Protocol):
    """Drop traffic between nodes or to a node's ports (iptables rules this cluster owns)."""

    def partition(self, groups: list[list[int]]) -> list[Drop]:
        """Cut traffic between the groups of nodes; returns the rules applied."""

    def block_port(
        self, node: int, ports: tuple[int, int], sources: list[int] | None = None
    ) -> list[Drop]:
        """Drop TCP connections to ``ports`` of ``node`` from ``sources`` (all others if None)."""

    def remove_rules(self, rules: list[Drop]) -> None:
        """Remove exactly these rules (what one fault applied). Safe twice."""

    def heal_network(self) -> None:
        """Remove every network fault of this cluster. Safe twice."""


@runtime_checkable
class LosesGpus(Protocol):
    """Bring a node back advertising one GPU fewer (a device drained after an Xid)."""

    def lose_gpu(self, index: int, timeout: float | None = None) -> NodeInfo:
        """Restart node ``index`` with one GPU fewer than it has; returns the node as it is back."""


@runtime_checkable
class DrainsNodes(Protocol):
    """Announce a node's end through Ray's own drain (preemption reason, deadline)."""

    def drain_node(self, index: int, deadline_s: float, message: str) -> str:
        """Drain node ``index``, to be gone ``deadline_s`` from now; returns its node id."""


@runtime_checkable
class ShapesLinks(Protocol):
    """Delay and lose the packets between groups of nodes (a degraded link; see
    :mod:`rlsim.host.links`)."""

    def degrade_links(self, groups: list[list[int]], shape, seed: int) -> dict:
        """Degrade the link between ``groups`` as ``shape`` (a ``LinkShape``) says; returns what
        ``restore_links`` undoes (plain data, kept in the fault ledger by hand)."""

    def restore_links(self, held: dict) -> None:
        """Undo one ``degrade_links``. Safe twice."""


@runtime_checkable
class KillsProcesses(Protocol):
    """SIGKILL one process on the node that runs it."""

    def kill_process(self, ip: str, pid: int) -> int:
        """SIGKILL one process, by the pid its node sees, on the node with address ``ip``."""


@runtime_checkable
class SignalsProcesses(Protocol):
    """Send a signal to one process of the cluster on the node that runs it (SIGSTOP freezes
    one rank, SIGCONT thaws it)."""

    def signal_process(self, ip: str, pid: int, signum: int) -> int:
        """Signal one process, by the pid its node sees, on the node with address ``ip``;
        ProcessLookupError when it is not (or no longer) a process of this cluster."""


@runtime_checkable
class SqueezesMemory(Protocol):
    """Squeeze a node out of host memory until the kernel's OOM killer takes a victim there
    (:mod:`rlsim.host.squeeze`, on the node's machine)."""

    def squeeze_memory(self, index: int, mb: int) -> dict:
        """Cap node ``index``'s memory at its usage, take ``mb`` MiB more inside it, wait for
        the kernel's kill; what happened (plain data). The cap stays until ``lift_memory``."""

    def lift_memory(self, index: int) -> None:
        """End node ``index``'s memory cap; safe twice, and when the node is gone."""


@runtime_checkable
class ThrottlesCpu(Protocol):
    """Cap the CPU time a whole node gets (its cgroup's CPU quota), a fail-slow machine."""

    def throttle_cpu(self, index: int, cores: float | None) -> dict[str, float] | None:
        """Cap node ``index`` at ``cores`` CPU cores, or lift the cap (None); return how often
        the node was throttled so far (``{"periods", "seconds"}``, None where not known)."""


@runtime_checkable
class HoldsGpuMemory(Protocol):
    """Take GPU memory on a node away from the trainer, and give it back."""

    def hold_gpu(self, index: int, gb: float, run_dir: Path) -> list[dict]:
        """Take ``gb`` GiB on every GPU of node ``index`` (the trainer's run is ``run_dir``)."""

    def release_gpu(self, index: int, run_dir: Path) -> int:
        """Give back what ``hold_gpu`` took on node ``index``; safe twice."""


@runtime_checkable
class SlowsDisk(Protocol):
    """Put a directory every node writes to on a block device of its own, whose writes can be
    throttled (a slow disk or network file system under the checkpoints)."""

    def mount_disk(self, path: Path, mb: int) -> str:
        """Mount a device file system of ``mb`` MiB at ``path`` (empty), seen by every node;
        returns the device (``major:minor``)."""

    def throttle_disk(self, path: Path, write_mbps: float | None) -> list[str]:
        """Cap writes to the device at ``path`` at ``write_mbps`` MB/s for every node (None lifts
        it); returns the cgroups that hold the cap."""

    def unmount_disk(self, path: Path) -> None:
        """Unmount it everywhere, leaving what was written there in a plain directory."""


@runtime_checkable
class CapsDisk(Protocol):
    """Put a directory every node writes to on a small filesystem of its own, then fill it."""

    def cap_disk(self, path: Path, mb: int) -> None:
        """Mount a filesystem of ``mb`` MiB at ``path`` (empty, before anything writes there)."""

    def uncap_disk(self, path: Path) -> None:
        """Unmount it, leaving what was written there in a plain directory at ``path``."""


# -- what the harness may use of a cluster beyond Backend ------------------------------------------
# Asked with isinstance, never by looking for a method: each says what it is for and who offers it.
@runtime_checkable
class WarmsWorkers(Protocol):
    """Start idle Ray workers ahead of a trainer's actors (:func:`rlsim.scenario.runner.warm_up`):
    the clusters rlsim starts."""

    def prestart_workers(self, per_gpu_node: list[int], keep_alive_s: int = 60) -> list[int]:
        """``per_gpu_node[k]`` idle workers on the k-th alive node with GPUs; how many each node
        index got (none where the cluster cannot take them yet)."""


@runtime_checkable
class SpreadsOverMachines(Protocol):
    """Nodes that run on several machines (a cluster on a substrate): where each runs, for the
    timeline's ``cluster_ready``."""

    def spread(self) -> dict:
        """``{"on": the substrate's address, "machines": each node's machine}``."""


@runtime_checkable
class ShowsFaultResidue(Protocol):
    """A cluster rlsim can vouch for between scenarios: while it runs (``state`` set) it says
    what faults left on it, which the pool reads before handing it to the next scenario
    (:mod:`rlsim.scenario.leftovers`)."""

    state: ClusterState | None  # None: not running (never started, or stopped)

    def fault_residue(self) -> list[str]:
        """Fault rules still in force, frozen, memory- or CPU-capped nodes, in words (Ray's own
        leftovers are read from its GCS, not here)."""


@runtime_checkable
class ReportsRay(Protocol):
    """Say what of Ray's internals the cluster runs with (the timeline's ``ray`` event); one
    that does not is reported from the installed Ray alone."""

    def ray_report(self) -> dict:
        """The installed Ray, each acceleration in force or not and why, and the GCS's auth."""
