"""The local backend: every simulated node is a set of real Ray processes on its own 127.x address.

``LocalCluster`` is a context manager: ``__enter__`` brings the cluster up (and tears down whatever
it started if bring-up fails), ``__exit__`` tears it down. Teardown kills exactly the processes
labelled with this cluster's session, never anything else: a user's own Ray on the same machine is
left alone (no ``ray stop``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from rlsim.backends import redis_store
from rlsim.backends.base import (
    ClusterStartError,
    NodeInfo,
    Unsupported,
    needs_containers,
    standin_refusal,
)
from rlsim.backends.disks_here import DisksHere
from rlsim.backends.node_verbs import NodeVerbs
from rlsim.backends.ray_state import alive_nodes, by_address
from rlsim.backends.reaper import reap, reap_local
from rlsim.backends.started import StartedCluster
from rlsim.host import cgroups, disk, iptables, links, nodeops, procs, state
from rlsim.host.home import auth_token_path, rlsim_home
from rlsim.host.iptables import Firewall, Rule
from rlsim.host.spec import ClusterShape, ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.ray_internals import session as ray_session


class LocalCluster(NodeVerbs, DisksHere, StartedCluster):
    """A Ray cluster of ``spec.nodes`` nodes on loopback addresses, each with fake GPUs."""

    name = "local"
    reusable = True  # a clean cluster may be handed to the next scenario (rlsim.scenario.pool)
    reap_state = staticmethod(reap_local)

    @staticmethod
    def reap_orphans(known_sessions: set[str]) -> list[str]:
        """Nothing: a local cluster's processes, rules and cgroups carry its session, and an
        abandoned cluster is reaped from its state file (:func:`reap_abandoned`)."""
        return []

    def __init__(self, spec: ClusterSpec | None = None, *, detached: bool = False) -> None:
        self.spec = spec or ClusterSpec()
        self.detached = detached
        self.state: ClusterState | None = None
        self._stopped: ClusterState | None = None
        self._firewall: Firewall | None = None
        self.timings: dict[str, float] = {}
        # raylet commands this handle's launchers saw, and agent commands they rewrote, by kind
        # (rlsim.ray_internals.launch.REWRITES); None: started elsewhere, not counted
        self.rewrites: dict[str, int] | None = {}
        # the node table as the last launcher saw it once its nodes registered: the next look
        # at the nodes (:meth:`nodes`) reads it instead of asking the GCS again
        self._launch_view: list[dict] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def attach(cls, st: ClusterState) -> LocalCluster:
        """A handle on a running cluster started elsewhere (``rlsim cluster --detach``)."""
        cluster = cls(st.spec, detached=st.detached)
        cluster.state = st
        cluster._home = rlsim_home()  # where its state was found
        cluster._firewall = Firewall(st.slot, st.session)
        cluster.rewrites = None
        return cluster

    def _prepare(self, st: ClusterState) -> None:
        problem = ray_session.socket_path_problem(st.node_dir(st.spec.nodes - 1))
        if problem:
            raise ClusterStartError(f"cluster {st.spec.name!r}: {problem}")
        st.cgroups = cgroups.available() is None
        state.save(st)
        self._firewall = Firewall(st.slot, st.session)
        self._firewall.heal()  # a chain left by a crashed owner of this slot
        if Firewall.available() is None:  # without root the daemons stay open on every interface
            self._firewall.guard_loopback(st.layout.port_block)

    @classmethod
    def refusal(cls, shape: ClusterShape, node_local: bool) -> Unsupported | None:
        if refused := standin_refusal(shape, True):
            return refused
        if refused := needs_containers(shape, node_local):
            return refused
        if shape.gcs_ft == "redis" and (problem := redis_store.problem()):
            return Unsupported(f"cluster.gcs_ft: {problem}", missing_part=True)
        return None

    def _launch_nodes(self) -> None:
        if self.spec.gcs_ft == "redis":
            redis_store.start(self._st)
            state.save(self._st)  # where the store is, for the head's launcher
        self._launch(list(range(self.spec.nodes)))

    def _reap(self, st: ClusterState) -> None:
        """Heal faults, SIGCONT and SIGKILL every labelled process, drop the state."""
        reap(st)

    def _leaks(self) -> list[str]:
        """What the stopped cluster left behind: processes of its session, its iptables chain,
        its cgroups (v2 and v1 memory)."""
        st = self._stopped or self.state
        if st is None:
            return []
        found = [f"process {pid}" for pid in procs.find(st.session)]
        if shutil.which("iptables") and os.geteuid() == 0:
            chains = set(iptables.rlsim_chains())
            found += [f"iptables chain {c}" for c in (iptables.chain_name(st.slot),
                                                      iptables.guard_chain(st.slot)) if c in chains]
        if st.session in cgroups.sessions():
            found.append(f"cgroup rlsim/{st.session}")
        found += [f"mount {point}" for point in disk.mounted(st.session)]
        if st.root.exists():
            found.append(f"run directory {st.root}")
        return found

    def fault_residue(self) -> list[str]:
        """What faults left on this running cluster that the next run would inherit: rules still
        in its chain, frozen, memory- or CPU-capped nodes (Ray's own leftovers are read from its
        GCS, :mod:`rlsim.scenario.leftovers`)."""
        st = self._st
        found = [f"iptables rule left: {rule}" for rule in self.firewall.leftover_rules()]
        if st.cgroups:
            for node in st.layout.nodes:
                found += nodeops.residue(st.session, node.index)
        return found

    # ---- addresses -------------------------------------------------------------------------

    @property
    def dashboard_url(self) -> str:
        return self._st.layout.dashboard_url if self.spec.dashboard else "off (spec.dashboard)"

    def driver_command(self, cmd: list[str], env: dict[str, str] | None = None,
                       cwd: Path | None = None) -> list[str]:
        """``cmd`` as a driver of this cluster (run it with :meth:`driver_env` and ``env``): on
        the host."""
        return cmd

    def probe(self, src: int, dst: int, port: int) -> bool:
        """Can a process on node ``src`` open a TCP connection to node ``dst``:``port``? (From
        inside the node's cgroup, so the node's firewall rules apply to it.)"""
        st = self._st
        return nodeops.reaches(st.session, src, st.layout.nodes[dst].address, port,
                               bool(st.cgroups))

    # ---- observation -----------------------------------------------------------------------

    def nodes(self, exclude_ids: frozenset[str] = frozenset()) -> list[NodeInfo]:
        st = self._st
        pids = {node.index: self._pids(node.index) for node in st.layout.nodes}
        view, self._launch_view = self._launch_view, None
        # With the head gone or paused there is no GCS to ask (Ray's client would retry for ~15 s
        # and raise): nobody is seen alive, as on docker
        if not pids[0] or self._paused(0, pids[0]):
            alive = {}
        elif view is not None:  # the launcher's, taken a moment ago
            alive = by_address(view, exclude_ids)
        else:
            alive = alive_nodes(self.address, str(auth_token_path()), exclude_ids)
        shapes = st.spec.node_shapes()
        return [NodeInfo.seen(node.index, node.address, alive.get(node.address),
                              shapes[node.index].gpus, pids[node.index])
                for node in st.layout.nodes]

    def logs(self, index: int, lines: int = 40) -> str:
        logs = ray_session.daemon_logs(self._st.node_dir(index), gcs=index == 0)
        chunks = []
        for path in logs:
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                if tail:
                    chunks.append(f"--- {path}\n" + "\n".join(tail))
        launch_log = self._st.root / "launch.log"
        if launch_log.exists() and launch_log.stat().st_size:
            tail = launch_log.read_text(errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {launch_log}\n" + "\n".join(tail))
        return "\n".join(chunks) or f"(no logs under {logs[0].parent})"

    # ---- node control ----------------------------------------------------------------------

    def _launch(self, indices: list[int]) -> None:
        st = self._st
        log = st.root / "launch.log"
        cmd = [sys.executable, "-m", "rlsim.backends.node_start", st.spec.name, *map(str, indices)]
        with open(log, "a") as err:
            try:
                proc = subprocess.run(
                    cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                    timeout=st.spec.ready_timeout_s * len(indices),
                )
            except subprocess.TimeoutExpired as e:
                raise ClusterStartError(
                    f"cluster {st.spec.name!r}: starting node(s) {indices} took over "
                    f"{st.spec.ready_timeout_s * len(indices):.0f} s (ready_timeout_s per node). "
                    "Log tail:\n"
                    + self.logs(indices[0])
                ) from e
        counted: dict[str, int] = {}
        for line in proc.stdout.splitlines():
            started = json.loads(line)
            if "alive" in started:  # its last line, once every node it started registered
                self._launch_view = started["alive"]
                continue
            st.pids[started["index"]] = started["raylet_pid"]
            counted = started.get("rewrites", {})  # the launcher's counts so far
        for kind, n in counted.items() if self.rewrites is not None else ():
            self.rewrites[kind] = self.rewrites.get(kind, 0) + n
        state.save(st)
        if proc.returncode != 0:
            failed = next((i for i in indices if i not in st.pids), indices[-1])
            raise ClusterStartError(
                f"cluster {st.spec.name!r}: node {failed} "
                f"({st.layout.nodes[failed].address}) failed to start (exit {proc.returncode}). "
                f"Log tail:\n" + self.logs(failed)
            )

    def _paused(self, index: int, pids: list[int]) -> bool:
        """Whether node ``index`` is paused (:meth:`pause_node`): its cgroup frozen, or without
        cgroups its processes stopped."""
        if self._st.cgroups:
            return cgroups.NodeGroup(self._st.session, index).frozen()
        return any(procs.stopped(pid) for pid in pids)

    def _pids(self, index: int) -> list[int]:
        return nodeops.pids(self._st.session, index, bool(self._st.cgroups))

    def kill_node(self, index: int) -> list[int]:
        self._check_index(index)
        return nodeops.kill(self._st.session, index, bool(self._st.cgroups))

    def node_command(self, index: int, cmd: list[str]) -> list[str]:
        """``cmd`` as a process of node ``index`` (in its cgroups, with its labels)."""
        self._check_index(index)
        return nodeops.in_node(self._st.session, index, cmd)

    def _node(self, index: int, verb: str, *args):
        """:mod:`rlsim.host.nodeops`'s ``verb`` on node ``index``, here."""
        return getattr(nodeops, verb)(self._st.session, index, *args)

    def kill_process(self, ip: str, pid: int) -> int:
        """SIGKILL one process of the cluster (every node shares this host's pid space)."""
        return self.signal_process(ip, pid, signal.SIGKILL)

    def signal_process(self, ip: str, pid: int, signum: int) -> int:
        """Signal one process of the cluster, never another home's or the host's."""
        return nodeops.send_signal(self._st.session, pid, signum, f"pid {pid} ({ip}) is not a "
                              f"process of cluster {self._st.spec.name!r}")

    def _relaunch(self, index: int) -> None:
        self._launch([index])

    # ---- storage ---------------------------------------------------------------------------

    def throttle_disk(self, path: Path, write_mbps: float | None) -> list[str]:
        """The device's write cap in the I/O cgroups the nodes' processes write from
        (:func:`rlsim.host.nodeops.throttle_writes`)."""
        return nodeops.throttle_writes(self._st.session, range(self.spec.nodes),
                                       bool(self._st.cgroups), disk.device_of(path),
                                       cgroups.bytes_per_s(write_mbps))

    # ---- network ---------------------------------------------------------------------------

    def _degrade(self, pairs, shape, queue, seed, held) -> None:
        """Loopback nodes: marks by sender cgroup, loss and the delayer's queue on marked
        connections, in the cluster's chain; one delayer on the host."""
        st = self._st
        rules = links.loopback_rules([n.address for n in st.layout.nodes], st.session, pairs,
                                     shape, links.new_mark(), queue)
        if queue is not None:
            held["delayers"].append(self._spawn_delayer(queue, shape, seed))
        for rule in rules:
            self.firewall.apply([rule])
            held["rules"].append(asdict(rule))

    def _restore_rules(self, rules: list) -> None:
        self.firewall.remove([Rule(tuple(r["match"]), tuple(r["target"])) for r in rules])

    @property
    def firewall(self) -> Firewall:
        if self._firewall is None:
            raise RuntimeError("the cluster is not running")
        return self._firewall
