"""``--backend real``: scenarios against a running Ray cluster that rlsim did not start.

This is the acceptance path: the same scenario files, run on the GPU cluster a team trains on.
rlsim never starts or stops that cluster. It connects as a Ray driver (``--ray-address``, with the
cluster's own auth settings in the environment) and places one :class:`NodeAgent` actor on every
node (``num_cpus=0``, hard node affinity). Faults act through the agent of their node, on that host:

- ``kill_node``: SIGKILL the node's raylet and every process it started (``kill_head``: the GCS
  too). The machine stays without Ray until its supervisor (KubeRay, systemd) restarts it.
- ``kill_role``: SIGKILL one pid on the host that runs it.

A host may run more than this cluster (a second Ray cluster, a CI job, the user's shell), so the
agent signals nothing on a name or a parent pid alone: the raylet is the agent's ancestor whose
``--node_id`` is the agent's node, the GCS is the ``gcs_server`` serving this cluster's GCS port,
and a role's pid must be a Ray worker below that raylet. Which pids qualify is decided by pure
functions over a snapshot of the host's processes (:class:`Proc`), apart from the signalling;
how Ray's processes read there (names, titles, flags) is Ray's annex's (rlsim.ray_internals.nodes).
- ``gpu_oom``: a real CUDA allocation of ``gb`` on each GPU of the node, held until heal.
- ``corrupt_checkpoint``: as on every backend, in the run directory, which must be storage the
  runner sees (the trainer needs it shared across nodes anyway).

Faults that need control of the host's network, cgroups or process tree (``partition``,
``block_port``, ``pause_node``, ``restart_node``, ``host_oom``) are not offered: a scenario that
uses one is skipped, saying which fault and which backends run it.

Node indices: 0 is the head (the node holding ``node:__internal_head__``), then the other alive
nodes ordered by address. The trainer runs as a driver subprocess of the runner, which should run
on a node of the cluster (the head) so that the trainer's event log is local to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlsim.backends.base import (
    PROBE_MODULE,
    ClusterStartError,
    NodeInfo,
    Unsupported,
    needs_containers,
    standin_refusal,
)
from rlsim.contract import distinct_devices
from rlsim.host.spec import ClusterShape, ClusterSpec
from rlsim.ray_internals import nodes
from rlsim.ray_internals.nodes import HEAD_RESOURCE
from rlsim.ray_internals.settings import NOSET_CUDA_VAR


class NodeAgent:
    """The hands of faults on one host (a Ray actor there; see the module text)."""

    def __init__(self, preload_torch: bool) -> None:
        self._held: list = []
        self._grower: threading.Thread | None = None
        self._stop = threading.Event()
        # it sees every GPU of its node, which may stand on one device repeated (cuda_devices)
        if os.environ.get("CUDA_VISIBLE_DEVICES"):
            os.environ["CUDA_VISIBLE_DEVICES"] = distinct_devices(
                os.environ["CUDA_VISIBLE_DEVICES"])
        if preload_torch:  # importing torch takes seconds: not at the moment a fault fires
            import torch  # noqa: F401

    def where(self) -> dict:
        import ray

        return {"ip": ray.util.get_node_ip_address(), "pid": os.getpid(),
                "parent": os.getppid()}

    def kill(self, pid: int) -> int:
        """SIGKILL ``pid`` if it is a Ray worker of this node's raylet; NotThisCluster otherwise."""
        return self.signal(pid, signal.SIGKILL)

    def signal(self, pid: int, signum: int) -> int:
        """Signal ``pid`` if it is a Ray worker of this node's raylet; NotThisCluster otherwise."""
        import ray

        procs = snapshot()
        raylet = find_raylet(procs, os.getpid(), ray.get_runtime_context().get_node_id())
        check_worker(procs, pid, raylet.pid)
        os.kill(pid, signum)
        return pid

    def kill_node(self, with_gcs: bool) -> list[int]:
        """SIGKILL this node's raylet and everything below it (the GCS too, on the head); this
        agent answers first and then exits, as its raylet is gone. Nothing is signalled unless
        the raylet (and the GCS) of this cluster were found."""
        import ray

        ctx = ray.get_runtime_context()
        gcs = None
        if with_gcs:  # the GCS's command line names the head's address, which the agent shares
            host, _, port = ctx.gcs_address.rpartition(":")
            gcs = (int(port), frozenset({host, ray.util.get_node_ip_address()}))
        pids = node_kill_plan(snapshot(), os.getpid(), ctx.get_node_id(), gcs)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        threading.Timer(0.5, os._exit, (1,)).start()
        return pids

    def probe(self, phase: str, args: dict) -> dict:
        """A phase of ``rlsim doctor``'s probe, on this host. The probe is a program the nodes
        run, named as the local and docker nodes run it (``python -m``), never imported by a
        backend: the doctor stands on the backends, not the other way round."""
        import importlib

        return importlib.import_module(PROBE_MODULE).run(phase, args)

    def hold_gpu(self, gb: float) -> list[dict]:
        """Take ``gb`` GiB (or all that can be had, if less) on every GPU of this host and keep
        it, as a co-tenant that grows into whatever memory is freed: what the trainer gives back
        to CUDA between phases (as hybrid engines do) is taken too, until release. In pieces,
        halved down to 2 MiB when one does not fit: what ``mem_get_info`` calls free is more than
        one allocation gets (an H100 said 77.86 GiB free and refused a 77.86 GiB allocation)."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"gpu_oom: no CUDA device is visible on {self.where()['ip']}")
        devices = range(torch.cuda.device_count())
        free = [torch.cuda.mem_get_info(d)[0] for d in devices]
        want = {d: int(gb * 2**30) for d in devices}
        self._stop_growing()  # a second hold replaces the first's grower, keeping what it took
        got = {d: self._grab(d, want[d]) for d in devices}
        self._stop = threading.Event()
        self._grower = threading.Thread(target=self._grow, args=(want, got, self._stop),
                                        daemon=True, name="rlsim-gpu-hold")
        self._grower.start()
        return [{"gpu": d, "gb": round(got[d] / 2**30, 2), "free_gb": round(free[d] / 2**30, 2)}
                for d in devices]

    def _grab(self, device: int, left: int, piece: int = 1 << 30) -> int:
        """Allocate up to ``left`` bytes on ``device`` in pieces; the bytes taken."""
        import torch

        got = 0
        while left - got >= 2 << 20 and piece >= 2 << 20:
            size = min(piece, left - got)
            try:
                self._held.append(torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}"))
            except torch.OutOfMemoryError:
                piece //= 2
                continue
            got += size
        return got

    def _grow(self, want: dict[int, int], got: dict[int, int], stop: threading.Event) -> None:
        """Take what is freed, checking every 20 ms (an allocation is tried only where CUDA says
        at least a piece is free: a refused one costs an exception and a driver call)."""
        import torch

        while not stop.wait(0.02):
            for d in want:
                if want[d] - got[d] >= 2 << 20 and torch.cuda.mem_get_info(d)[0] >= 4 << 20:
                    got[d] += self._grab(d, want[d] - got[d], piece=256 << 20)

    def _stop_growing(self) -> None:
        if self._grower is not None:
            self._stop.set()
            self._grower.join()
            self._grower = None

    def release_gpu(self) -> int:
        import torch

        self._stop_growing()
        n = len(self._held)
        self._held.clear()
        if n:
            torch.cuda.empty_cache()
        return n


# ---- which processes a fault may signal (pure, over a snapshot of the host) ------------------


class NotThisCluster(ProcessLookupError):
    """The process a fault would signal is not the one it must be; nothing was signalled."""


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it: ``name`` is its comm, ``cmdline`` its argv (after any
    retitling: a Ray worker's argv[0] reads ``ray::<Actor>.<method>``)."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...] = ()

    def describe(self) -> str:
        cmd = " ".join(a for a in self.cmdline if a)[:120]
        return f"pid {self.pid} ({self.name}: {cmd or 'no command line'})"


def ancestors(procs: Mapping[int, Proc], pid: int) -> list[Proc]:
    """The parents of ``pid``, nearest first (stops at a pid missing from the snapshot)."""
    chain, seen = [], {pid}
    proc = procs.get(pid)
    while proc is not None and proc.ppid not in seen:
        seen.add(proc.ppid)
        proc = procs.get(proc.ppid)
        if proc is not None:
            chain.append(proc)
    return chain


def descendants(procs: Mapping[int, Proc], root: int) -> list[int]:
    """``root`` and every process below it, sorted."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return sorted(found)


def is_raylet(proc: Proc, node_id: str) -> bool:
    """``proc`` is the raylet of node ``node_id`` (its id is on the raylet's command line)."""
    return nodes.is_raylet(proc.name, proc.cmdline, node_id)


def find_raylet(procs: Mapping[int, Proc], agent_pid: int, node_id: str) -> Proc:
    """The raylet of ``node_id`` among the agent's ancestors (a worker started through a wrapper,
    e.g. a profiler or an environment manager, has the wrapper as its parent)."""
    chain = ancestors(procs, agent_pid)
    for proc in chain:
        if is_raylet(proc, node_id):
            return proc
    seen = "; ".join(p.describe() for p in chain[:4]) or "no parent found"
    raise NotThisCluster(f"the node agent (pid {agent_pid}) has no raylet of node {node_id} "
                         f"above it ({seen}): refusing to signal anything on this host")


def gcs_servers(procs: Mapping[int, Proc], port: int, hosts: frozenset[str]) -> list[int]:
    """The ``gcs_server`` serving ``port`` (at one of ``hosts``, where its command line names an
    address): another cluster's GCS on the same host serves another port or address."""
    return sorted(p.pid for p in procs.values()
                  if nodes.is_gcs_server(p.name, p.cmdline, port, hosts))


def node_kill_plan(procs: Mapping[int, Proc], agent_pid: int, node_id: str,
                   gcs: tuple[int, frozenset[str]] | None) -> list[int]:
    """What ``kill_node`` signals: the node's raylet and its descendants, plus, on the head, the
    GCS at ``gcs`` (port, the addresses it may name); never the agent itself."""
    raylet = find_raylet(procs, agent_pid, node_id)
    pids = set(descendants(procs, raylet.pid))
    if gcs is not None:
        found = gcs_servers(procs, *gcs)
        if not found:
            raise NotThisCluster(f"kill_head: no gcs_server on port {gcs[0]} of "
                                 f"{'/'.join(sorted(gcs[1]))} on this host "
                                 f"(the head's agent runs under raylet pid {raylet.pid}); "
                                 "nothing was signalled")
        pids.update(found)
    return sorted(pids - {agent_pid})


def is_ray_worker(proc: Proc) -> bool:
    """A Ray worker process (:func:`rlsim.ray_internals.nodes.is_worker`)."""
    return nodes.is_worker(proc.name, proc.cmdline)


def check_worker(procs: Mapping[int, Proc], pid: int, raylet_pid: int) -> None:
    """Raise NotThisCluster unless ``pid`` is a Ray worker below the raylet ``raylet_pid``."""
    proc = procs.get(pid)
    if proc is None:
        raise NotThisCluster(f"pid {pid} is not running on this host: nothing was signalled")
    if raylet_pid not in {p.pid for p in ancestors(procs, pid)}:
        raise NotThisCluster(f"{proc.describe()} is not a process of this node's raylet "
                             f"(pid {raylet_pid}): refusing to signal it")
    if not is_ray_worker(proc):
        raise NotThisCluster(f"{proc.describe()} runs under this node's raylet but is not a "
                             "Ray worker: refusing to signal it")


def snapshot(proc_root: Path = Path("/proc")) -> dict[int, Proc]:
    """Every process of this host (those that vanish while being read are left out)."""
    procs = {}
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            # the name may contain spaces and parentheses: the fields after the last ")" are safe
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cmdline = tuple(a.decode(errors="replace") for a in argv)
            while cmdline and not cmdline[-1]:  # a retitled process pads argv with empty strings
                cmdline = cmdline[:-1]
            procs[int(entry.name)] = Proc(int(entry.name), ppid, name, cmdline)
    return procs


def address_problem(address: str) -> str | None:
    """Why no Ray cluster can be joined at ``address`` (not HOST:PORT, no GCS answers there
    within seconds, or it refuses this process's token), or None. Ray's own connect retries a
    silent address for minutes and a refused token for about 20 s."""
    from rlsim.ray_internals.gcs import no_answer as gcs_no_answer
    from rlsim.ray_internals.gcs import refusal as gcs_refusal
    from rlsim.reach import parse_address

    try:
        host, port = parse_address(address)
    except ValueError as e:
        return str(e)
    # a greeting heard and a request answered: a GCS that greets and answers nothing held Ray's
    # own connect for minutes
    if silence := gcs_no_answer(host, port):
        return (f"--backend real: no Ray cluster answers at {address} ({silence}); fix: give "
                "the head's GCS address (HOST:PORT) with --ray-address")
    if refusal := gcs_refusal(host, port):
        return f"--backend real: {refusal_line(address, refusal)}"
    return None


# what a refused driver must export, as the cluster's owner set it up
TOKEN_FIX = ("a cluster with token auth needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH (its "
             "token file) exported first")


def refusal_line(address: str, refusal: str) -> str:
    """One line for a cluster that refuses this process's token (:func:`gcs_refusal`), with the
    fix for how this process is set up."""
    fix = "check that RAY_AUTH_TOKEN_PATH names the cluster's own token file" \
        if os.environ.get("RAY_AUTH_MODE") == "token" else TOKEN_FIX
    return f"the Ray cluster at {address} refuses this process ({refusal}); fix: {fix}"


class RealCluster:
    """A handle on a running Ray cluster, with one agent per node while it is entered."""

    name = "real"
    reusable = False
    # what answers "does a cluster answer at this address, and take our token", before a run
    address_problem = staticmethod(address_problem)

    def __init__(self, address: str, spec: ClusterSpec | None = None,
                 gpu_faults: bool = False) -> None:
        """``spec``: how many nodes the scenario uses (None: every alive node)."""
        self._address = address
        self.spec = spec
        self._gpu_faults = gpu_faults
        self.agents: dict[int, object] = {}
        self.ips: dict[int, str] = {}
        self._node_ids: dict[int, str] = {}
        self._holding: set[int] = set()
        self.problems: list[str] = []

    # ---- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def refusal(cls, shape: ClusterShape, node_local: bool) -> Unsupported | None:
        if refused := standin_refusal(shape, False):
            return refused
        if refused := needs_containers(shape, node_local):
            return refused
        if shape.gcs_ft != "none":
            return Unsupported("cluster.gcs_ft: rlsim does not run a real cluster's Redis; GCS "
                               "fault tolerance is the cluster owner's setting (KubeRay: "
                               "gcsFaultToleranceOptions)")
        return None

    @classmethod
    def make(cls, spec: ClusterSpec, ray_address: str | None = None, gpu_faults: bool = False,
             *, on: str | None = None, detached: bool = False) -> RealCluster:
        """A handle on the cluster at ``ray_address`` (or ``RAY_ADDRESS``); ``on`` and
        ``detached`` are for clusters rlsim starts, never given here."""
        address = ray_address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise Unsupported("--backend real needs the cluster's address: --ray-address "
                              "HOST:PORT (or RAY_ADDRESS)")
        return cls(address, spec, gpu_faults=gpu_faults)

    def __enter__(self) -> RealCluster:
        return self if self.agents else self.start()

    def start(self) -> RealCluster:
        """Connect and place one agent per node (the cluster itself is already running)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if ray.is_initialized():
            raise ClusterStartError("--backend real: this process is already a Ray driver")
        if problem := address_problem(self._address):
            raise ClusterStartError(problem)
        try:
            ray.init(address=self._address, namespace="rlsim", log_to_driver=False,
                     configure_logging=False)
        except Exception as e:  # noqa: BLE001 - Ray's ways of refusing a driver: one line
            auth = "" if os.environ.get("RAY_AUTH_MODE") == "token" else f"; {TOKEN_FIX}"
            raise ClusterStartError(f"--backend real: cannot join the Ray cluster at "
                                    f"{self._address}: {str(e).strip().splitlines()[0]}{auth}"
                                    ) from None
        try:
            nodes = _ordered(ray.nodes())
            self.spec = self.spec or ClusterSpec(nodes=len(nodes))
            if len(nodes) < self.spec.nodes:
                raise Unsupported(
                    f"the scenario needs {self.spec.nodes} nodes; the cluster at {self._address} "
                    f"has {len(nodes)} alive ({', '.join(n['NodeManagerAddress'] for n in nodes)})")
            agent_cls = ray.remote(num_cpus=0, max_restarts=0)(NodeAgent)
            # An agent sees every GPU of its host (Ray would hide them from a 0-GPU actor).
            env = {"env_vars": {NOSET_CUDA_VAR: "1"}}
            for i, node in enumerate(nodes[: self.spec.nodes]):
                self._node_ids[i] = node["NodeID"]
                self.ips[i] = node["NodeManagerAddress"]
                self.agents[i] = agent_cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                    runtime_env=env,
                ).remote(self._gpu_faults)
            ray.get([a.where.remote() for a in self.agents.values()], timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Release what the agents hold and remove them; the cluster itself keeps running."""
        import ray

        if not ray.is_initialized():
            return
        for i in sorted(self._holding & set(self.agents)):
            try:
                self.release_gpu(i)
            except Exception as e:  # noqa: BLE001 - reported as a leak, the others still run
                self.problems.append(f"node {i}: GPU memory still held ({e})")
        for agent in self.agents.values():
            with contextlib.suppress(Exception):  # an agent on a killed node is gone already
                ray.kill(agent)
        self.agents.clear()
        ray.shutdown()

    # ---- what the runner and faults use ------------------------------------------------------

    @property
    def address(self) -> str:
        return self._address

    def driver_env(self) -> dict[str, str]:
        return {"RAY_ADDRESS": self._address}

    def driver_command(self, cmd: list[str], env: dict[str, str] | None = None,
                       cwd: Path | None = None) -> list[str]:
        return cmd

    def nodes(self) -> list[NodeInfo]:
        import ray

        alive = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        return [NodeInfo.seen(i, self.ips[i], alive.get(nid), 0, [])
                for i, nid in self._node_ids.items()]

    def index_of(self, ip: str) -> int:
        for i, addr in self.ips.items():
            if addr == ip:
                return i
        raise LookupError(f"no node of this scenario has address {ip}")

    def _call(self, index: int, method: str, *args):
        import ray

        if index not in self.agents:
            raise IndexError(f"node {index} does not exist: the scenario uses nodes "
                             f"0..{self.spec.nodes - 1}")
        try:
            return ray.get(getattr(self.agents[index], method).remote(*args), timeout=60)
        except ray.exceptions.RayTaskError as e:  # the agent's own error, without Ray's frame
            raise e.cause from None

    def endpoints(self) -> list[dict]:
        """Each node's address and the ports the other nodes must reach (the head: GCS too)."""
        import ray

        by_id = {n["NodeID"]: n for n in ray.nodes()}
        gcs_port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
        out = []
        for i, nid in self._node_ids.items():
            n = by_id.get(nid, {})
            ports = {"node_manager": n.get("NodeManagerPort"),
                     "object_manager": n.get("ObjectManagerPort")}
            if i == 0:
                ports = {"gcs": gcs_port, **ports}
            out.append({"index": i, "address": self.ips[i], "ports": ports})
        return out

    @contextlib.contextmanager
    def probes(self) -> Iterator[Callable[[int, str, dict], dict]]:
        """Each phase asked of the node's agent actor, which runs it in its own process."""
        yield lambda index, phase, args: self._call(index, "probe", phase, args)

    def kill_node(self, index: int) -> list[int]:
        pids = self._call(index, "kill_node", index == 0)
        self.agents.pop(index)
        return pids

    def kill_process(self, ip: str, pid: int) -> int:
        return self._call(self.index_of(ip), "kill", pid)

    def signal_process(self, ip: str, pid: int, signum: int) -> int:
        return self._call(self.index_of(ip), "signal", pid, int(signum))

    def hold_gpu(self, index: int, gb: float, run_dir: Path | None = None) -> list[dict]:
        """A real CUDA allocation of ``gb`` GiB on every GPU of node ``index``, by its agent."""
        self._holding.add(index)
        return self._call(index, "hold_gpu", gb)

    def release_gpu(self, index: int, run_dir: Path | None = None) -> int:
        released = self._call(index, "release_gpu")
        self._holding.discard(index)
        return released

    def leaks(self) -> list[str]:
        return list(self.problems)


def _ordered(nodes: list[dict]) -> list[dict]:
    """Alive nodes, the head first, then by address (the scenario's node indices)."""
    alive = [n for n in nodes if n["Alive"]]
    return sorted(alive, key=lambda n: (HEAD_RESOURCE not in n["Resources"],
                                        tuple(int(x) if x.isdigit() else 0
                                              for x in n["NodeManagerAddress"].split(".")),
                                        n["NodeID"]))
