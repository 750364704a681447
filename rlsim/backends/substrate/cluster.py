"""A simulated cluster spread over the machines of a substrate (a plain Ray cluster of CPU
machines, each with a host actor of :mod:`rlsim.backends.substrate.hosts`): node ``i`` runs on
machine ``i % machines``, the first node on each machine at the machine's address and the others
at addresses of their own there (:mod:`rlsim.host.overlay`), started by the cluster's own host
actor as a docker node is started in its container (``python -m rlsim.backends.node_start NAME
I`` with every node's address); the head on the first machine. The cluster's state and token are
written to each machine first, so the machines need no shared file system; the node's ports are
the cluster's slot's, as on one machine.

The hosts belong to the process that started the cluster: when it ends, they end, and the nodes
with them, on every machine (``--detach``: they are detached, found by name by ``rlsim status``
and ended by ``rlsim down``). A teardown also removes the nodes' cgroups, addresses and routes.

Each node lives in a cgroup of its own on its machine (where the machine has cgroups): a network
fault's rules match a node's traffic by it on the node's machine
(:class:`rlsim.backends.substrate.remote.MachineFirewall`).

What is built: bring-up, the nodes as Ray sees them, a node killed and restarted (the head with
``gcs_ft: redis``: the cluster's Redis on the head's machine), partitions, blocked ports and
degraded links across machines, a node frozen, CPU-capped or squeezed out of memory on its
machine, a GPU lost (the node restarted there with one fewer), GPU memory held (the run's
ledger), a rank's process signalled there, the doctor's probes, teardown (the rules healed on
every machine). Disk faults only where the machines share this kernel's mounts
(:meth:`SubstrateCluster._check_mounts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
from pathlib import Path

from rlsim import ray_internals
from rlsim.backends import redis_store
from rlsim.backends.base import (
    PROBE_MODULE,
    ClusterStartError,
    NodeInfo,
    Unsupported,
    needs_containers,
    standin_refusal,
)
from rlsim.backends.disks_here import DisksHere
from rlsim.backends.node_start import ADDRESSES_VAR
from rlsim.backends.node_verbs import NodeVerbs
from rlsim.backends.ray_state import alive_nodes
from rlsim.backends.reaper import reap_local
from rlsim.backends.started import StartedCluster
from rlsim.backends.substrate import hosts
from rlsim.backends.substrate.remote import HostTalk, MachineFirewall, answer
from rlsim.host import cgroups, disk, nodeops, overlay, procs, state
from rlsim.host.home import auth_token_path, rlsim_home
from rlsim.host.spec import ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.ray_internals import gcs


class SubstrateCluster(NodeVerbs, DisksHere, StartedCluster):
    """Node ``i`` of ``spec`` on machine ``i % machines`` of the substrate whose GCS is at
    ``on``."""

    name = "substrate"
    pid_label = "launcher pid"

    def __init__(self, spec: ClusterSpec | None = None, *, on: str, detached: bool = False) -> None:
        self.spec = spec or ClusterSpec()
        self.on = on
        self.detached = detached
        self.state: ClusterState | None = None
        self._stopped: ClusterState | None = None
        self.timings: dict[str, float] = {}
        self._hosts: list = []      # one per machine the cluster uses
        self._machines: list = []
        self._at: list[int] = []    # node -> its machine
        self._addresses: list[str] = []
        self._overlay_left: list[str] = []
        self.firewall = MachineFirewall(self)

    @classmethod
    def make(cls, spec: ClusterSpec, ray_address: str | None = None, gpu_faults: bool = False,
             *, on: str | None = None, detached: bool = False) -> SubstrateCluster:
        """The cluster of ``spec`` on the substrate at ``on``, the address that chose this
        backend (:func:`rlsim.backends.chosen`)."""
        if not on:
            raise ValueError("a cluster on a substrate needs the substrate's GCS address "
                             "(cluster.on, rlsim cluster --on)")
        return cls(spec, on=on, detached=detached)

    @staticmethod
    def reap_orphans(known_sessions: set[str]) -> list[str]:
        """Nothing: a cluster on a substrate is found by its state file, and its nodes end with
        its owner's host actors (a detached cluster's, with `rlsim down`)."""
        return []

    @classmethod
    def refusal(cls, shape, node_local: bool) -> Unsupported | None:
        if refused := standin_refusal(shape, False):
            return refused
        return needs_containers(shape, node_local, "a substrate's nodes are processes on its "
                                "machines; fix: drop cluster.on")

    def _check_can_start(self) -> None:
        """ClusterStartError in one line naming :attr:`on` where no Ray GCS answers there within
        seconds (:func:`gcs.no_answer`), before Ray's own connect, which retries for minutes:
        on a closed port, and on a GCS that takes connections but answers nothing (`rlsim
        status` of a detached cluster there waited past 60 s)."""
        from rlsim.reach import parse_address

        try:
            host, port = parse_address(self.on, "--on")
        except ValueError as e:
            raise ClusterStartError(str(e)) from None
        if silence := gcs.no_answer(host, port):
            raise ClusterStartError(f"--on {self.on}: nothing answers there as a Ray GCS "
                                    f"({silence}); fix: give the substrate's GCS address "
                                    f"(HOST:PORT, as `ray start --address` takes it)")
        gcs.join_open_cluster(self.on)
        try:
            hosts.connect(self.on, own_address=True)
        except Exception as e:  # noqa: BLE001 - said in words, with the address
            raise ClusterStartError(f"--on {self.on}: cannot reach the substrate's GCS "
                                    f"({type(e).__name__}: {e})") from None

    @classmethod
    def attach(cls, st: ClusterState) -> SubstrateCluster:
        """A handle on a cluster started on a substrate with ``--detach`` by another process: its
        host actors found by name there, each node on the machine it was started on.
        LookupError (in words) for a cluster its owner holds (not detached: its hosts are the
        owner's), where the substrate does not answer or where a machine's host is gone."""
        if not (st.on and st.detached):
            raise LookupError(f"cluster {st.spec.name!r} runs on a substrate ({st.backend}), "
                              f"held by its owner, process {st.owner_pid}: stop it there")
        cluster = cls._visit(st)
        try:
            cluster._check_can_start()
        except ClusterStartError as e:
            raise LookupError(f"cluster {st.spec.name!r}: {e}") from None
        found = {m.address: (m, h) for m, h in hosts.cluster_hosts(st.on, st.session)}
        missing = [a for a in st.machines if a not in found]
        if missing or not found:
            raise LookupError(f"cluster {st.spec.name!r}: the host actor of machine(s) "
                              f"{', '.join(missing) or 'all'} is gone from the substrate at "
                              f"{st.on}; fix: `rlsim down {st.spec.name}` ends what is left")
        cluster.state = st
        cluster._home = rlsim_home()  # where its state was found
        cluster._place([found[a] for a in st.machines], st.slot)
        return cluster

    @classmethod
    def reap_state(cls, st: ClusterState) -> None:
        """``rlsim down`` of a detached cluster: every trace on every machine whose host is
        still there (:meth:`_reap`), then what is on this machine. RuntimeError, the state kept,
        where the substrate does not answer: its nodes may run on. A cluster that was not
        detached ended on its machines with its owner's host actors: what is left is here, as
        a local cluster's (:func:`reap_local`)."""
        if not (st.on and st.detached):
            reap_local(st)
            return
        cluster = cls._visit(st)
        try:
            cluster._check_can_start()
        except ClusterStartError as e:
            raise RuntimeError(f"cluster {st.spec.name!r}: {e}; its state is kept: run `rlsim "
                               f"down {st.spec.name}` again once the substrate answers, or "
                               f"delete {state.state_path(st.spec.name)} if its machines are "
                               f"gone for good") from None
        found = hosts.cluster_hosts(st.on, st.session)
        cluster.state = st
        cluster._machines, cluster._hosts = [m for m, _ in found], [h for _, h in found]
        cluster._reap(st)
        reap_local(st)  # this machine's share, and the run directory here

    @classmethod
    def _visit(cls, st: ClusterState) -> SubstrateCluster:
        """A handle on ``st`` from another process than its owner's, connected to no other
        substrate."""
        hosts.leave_other(st.on)
        return cls(st.spec, on=st.on, detached=st.detached)

    def _prepare(self, st: ClusterState) -> None:
        import ray

        if self.detached and (why := ray_internals.detached_actors_problem()):
            raise ClusterStartError(f"--detach on a substrate: {why}; fix: run without --detach "
                                    f"(the cluster then ends with the command), or use Ray "
                                    f"{ray_internals.DETACHED_PORTS_SINCE} or later")
        st.on = self.on
        state.save(st)  # before a detached host exists: `rlsim down` finds them through it
        found = hosts.hosts(self.on, tag=st.session, detached=self.detached)
        used = min(len(found), self.spec.nodes)
        for _, spare in found[used:]:  # a machine beyond the cluster's nodes: nothing to host
            ray.kill(spare)
        self._place(found[:used], st.slot)
        st.machines = [m.address for m in self._machines]
        if not all(m.root for m in self._machines):
            raise ClusterStartError(f"--on {self.on}: rlsim's nodes run as root on the "
                                    f"substrate's machines (firewall rules, cgroups)")
        if used < self.spec.nodes:
            mine = hosts.route_to(self.on)
            if mine not in {m.address for m in self._machines}:
                raise ClusterStartError(
                    f"--on {self.on}: {self.spec.nodes} nodes on {used} machines put several "
                    f"nodes on a machine, at addresses only the substrate's machines route to; "
                    f"this process runs at {mine}, not on one of them: run rlsim on a machine "
                    f"of the substrate, or give at most {used} nodes")
        # each node in a cgroup of its own on its machine: what a network fault's rules match
        # its traffic by, on its machine, whatever address the kernel sends it from
        st.cgroups = all(m.cgroups for m in self._machines)
        state.save(st)

    def _place(self, found: list, slot: int) -> None:
        """Node i on machine i % machines of ``found`` (machines and their hosts, in the order
        of their addresses): the first on each at the machine's address, the others at addresses
        of their own there (rlsim.host.overlay), which only the substrate's machines route to
        (the driver must run on one of them)."""
        used = len(found)
        self._machines = [m for m, _ in found]
        self._hosts = [h for _, h in found]
        self._at = [i % used for i in range(self.spec.nodes)]
        self._addresses = [self._machines[i].address if i < used else
                           overlay.address(slot, i) for i in range(self.spec.nodes)]

    @property
    def addresses(self) -> list[str]:
        return self._addresses

    def spread(self) -> dict:
        """Where the cluster runs, for its timeline: the substrate and each node's machine."""
        return {"on": self.on, "machines": [self._machines[k].address for k in self._at]}

    def _host(self, index: int):
        """The host actor of node ``index``'s machine."""
        return self._hosts[self._at[index]]

    def _own(self, index: int) -> bool:
        """Whether node ``index`` has an address of its own (it shares its machine)."""
        return index >= len(self._machines)

    def _launch_nodes(self) -> None:
        import ray

        st = self._st
        token = auth_token_path()
        if self.spec.gcs_ft == "redis":
            self._start_gcs_store()
        files = {str(token): (token.read_text(), 0o600), **self._state_file()}
        ray.get([h.put.remote(files) for h in self._hosts])
        if own := [i for i in range(self.spec.nodes) if self._own(i)]:
            ray.get([h.overlay.remote("join", st.slot,
                                      {i: self.addresses[i] for i in own if self._at[i] == k},
                                      {self.addresses[i]: self._machines[self._at[i]].address
                                       for i in own if self._at[i] != k})
                     for k, h in enumerate(self._hosts)])
        for index in range(self.spec.nodes):
            self._start(index)

    def _state_file(self) -> dict[str, tuple[str, int]]:
        """The cluster's state as it is now, as a host puts it on its machine."""
        st = self._st
        return {str(state.state_path(st.spec.name)): (st.model_dump_json(), 0o600)}

    def _start_gcs_store(self) -> None:
        """The cluster's Redis (:mod:`rlsim.backends.redis_store`) on the head's machine, at its
        address, started by its host and waited for from here; its password's file put there
        first (its folder is the store's, and the head's launcher reads it)."""
        import ray

        st = self._st
        argv, env = redis_store.prepare(st, f"{self.addresses[0]}:{st.layout.gcs_store_port}")
        secret = str(redis_store.password_path(st))
        ray.get(self._hosts[0].put.remote({secret: (redis_store.password(st), 0o600)}))
        host, key = self._hosts[0], f"{st.session}-gcs-store"
        try:
            answer(host.start.remote(key, argv, env))
        except OSError as e:  # redis-server missing there, most likely
            raise ClusterStartError(f"cluster.gcs_ft: the GCS store could not start on "
                                    f"{self.addresses[0]} ({e}); "
                                    f"{redis_store.problem() or 'see its log there'}") from None
        redis_store.wait(st, lambda: None if key in ray.get(host.running.remote()) else "?")
        state.save(st)

    def _start(self, index: int) -> int:
        import ray

        st = self._st
        env = {ADDRESSES_VAR: json.dumps(self.addresses), "RLSIM_HOME": str(rlsim_home())}
        iface = overlay.iface(st.slot, index) if self._own(index) else \
            self._machines[self._at[index]].interface
        if iface:
            # a process group's gloo devices on the node's own address: torch's default is the
            # hostname's, which on a machine whose hostname names loopback (namespace machines
            # share this host's) is one no other machine reaches (connectFullMesh refused)
            env["GLOO_SOCKET_IFNAME"] = iface
        argv = [self.spec.python.get(index, sys.executable), "-m", "rlsim.backends.node_start",
                st.spec.name, str(index)]
        return ray.get(self._host(index).start.remote(self._key(index), argv, env))

    def _key(self, index: int) -> str:
        return f"{self._st.session}-n{index}"

    def _reap(self, st: ClusterState) -> None:
        import ray

        with contextlib.suppress(Exception):  # a machine gone took its rules with it
            self.firewall.heal()
        with contextlib.suppress(Exception):  # what left the nodes' process groups, and the
            # nodes' cgroups: the hosts' processes end below, but a cgroup outlives them all
            ray.get([h.stop.remote() for h in self._hosts])
            ray.get([h.end_session.remote(str(rlsim_home()), st.session) for h in self._hosts])
        with contextlib.suppress(OSError):  # a disk fault's filesystem, where a run was cut short
            disk.unmount_all(st.session)
        with contextlib.suppress(Exception):  # the nodes' own addresses and the routes to them
            self._overlay_left = [f"{x} on {m.address}" for m, left in zip(
                self._machines, ray.get([h.overlay.remote("leave", st.slot) for h in self._hosts]),
                strict=True) for x in left]
        with contextlib.suppress(Exception):  # a substrate gone: its machines took the nodes
            hosts.release(self.on, tag=st.session)
        self._hosts = []
        state.forget(st)

    # ---- observation -------------------------------------------------------------------------

    @property
    def dashboard_url(self) -> str:
        return (f"http://{self.addresses[0]}:{self._st.layout.dashboard_port}"
                if self.spec.dashboard else "off (spec.dashboard)")

    def nodes(self, exclude_ids: frozenset[str] = frozenset()) -> list[NodeInfo]:
        import ray

        running = ray.get([h.running.remote() for h in self._hosts])
        running = [running[self._at[i]] for i in range(self.spec.nodes)]
        alive: dict[str, dict] = {}
        with contextlib.suppress(Exception):  # a GCS that just went away: nobody is alive
            alive = alive_nodes(self.address, str(auth_token_path()), exclude_ids)
        shapes = self._st.spec.node_shapes()
        return [NodeInfo.seen(i, addr, alive.get(addr), shapes[i].gpus,
                              [p] if (p := running[i].get(self._key(i))) else [])
                for i, addr in enumerate(self.addresses)]

    def _check_starting(self, infos: list[NodeInfo], missing: set[int]) -> None:
        for n in infos:
            if n.index in missing and not n.pids:
                raise ClusterStartError(
                    f"cluster {self.spec.name!r} (substrate {self.on}): node {n.index} "
                    f"({n.address}) exited during start-up; its logs are on that machine under "
                    f"{self._st.node_dir(n.index)}")

    def logs(self, index: int, lines: int = 40) -> str:
        return f"(node {index}'s logs are on {self.addresses[index]}, under " \
               f"{self._st.node_dir(index)})"

    def driver_command(self, cmd: list[str], env: dict[str, str] | None = None,
                       cwd=None) -> list[str]:
        """``cmd`` as a driver of this cluster: here, where rlsim runs (it reaches the nodes)."""
        return cmd

    def fault_residue(self) -> list[str]:
        """Fault rules still in the cluster's chain on any machine, and frozen, memory- or
        CPU-capped nodes."""
        import ray

        found = [f"iptables rule left on {self._machines[i].address}: {rule}"
                 for i, rules in enumerate(self.firewall.left()) for rule in rules]
        if self._st.cgroups:
            found += [r for rs in ray.get([self._node(i, "residue", remote=True)
                                           for i in range(self.spec.nodes)]) for r in rs]
        return found

    def probe(self, src: int, dst: int, port: int) -> bool:
        """Can a process of node ``src``, on its machine, connect to node ``dst``:``port``?"""
        self._check_index(src)
        return self._node(src, "reaches", self.addresses[dst], port, bool(self._st.cgroups))

    def _probe_talk(self, index: int) -> HostTalk:
        """Node ``index``'s probe, run as a process of that node on its machine and asked
        through the machine's host (the same JSON lines as on one machine)."""
        st = self._st
        return HostTalk(self._host(index), f"{st.session}-probe-{index}",
                        nodeops.in_node(st.session, index, [sys.executable, "-m", PROBE_MODULE]),
                        {"RLSIM_HOME": str(rlsim_home())})

    def _leaks(self) -> list[str]:
        """What the stopped cluster left: processes and cgroups of its session, as this machine
        sees them (every machine's, where the machines are network namespaces of this one;
        elsewhere the hosts removed them at teardown, and a process ended with its host)."""
        st = self._stopped or self.state
        if st is None:
            return []
        found = [f"process {pid}" for pid in procs.find(st.session)]
        if st.session in cgroups.sessions():
            found.append(f"cgroup rlsim/{st.session}")
        found += [f"mount {point}" for point in disk.mounted(st.session)]
        if st.root.exists():  # the machines' homes, where they are this one's
            found.append(f"run directory {st.root}")
        return found + self._overlay_left

    # ---- storage: mounted here (DisksHere), where every machine sees this kernel's mounts -----

    def _check_mounts(self, path: Path) -> None:
        """A filesystem mounted over the run's directory must be the one every node writes to:
        only where the machines share this process's mount table (network namespaces of its
        machine). Separate machines each have their own: a mount here would cap or slow this
        machine's view only, while their nodes wrote past it to the shared storage."""
        here = disk.mount_table()
        apart = [m.address for m in self._machines if m.mounts != here]
        if apart:
            raise RuntimeError(
                f"{path}: a filesystem mounted over the run's directory on a substrate must be "
                f"seen by every node, and machine(s) {', '.join(apart)} do not see this "
                f"machine's mounts (they are other machines, with storage shared between them); "
                f"disk faults across separate machines are not built: run this scenario without "
                f"cluster.on, or on a substrate of network namespaces of one machine")

    def throttle_disk(self, path: Path, write_mbps: float | None) -> list[str]:
        """The device's write cap in the I/O cgroups of each machine's nodes, set there by its
        host actor (:func:`rlsim.host.nodeops.throttle_writes`)."""
        import ray

        device, bps = disk.device_of(path), cgroups.bytes_per_s(write_mbps)
        home, st = str(rlsim_home()), self._st
        done = ray.get([h.throttle_writes.remote(
            home, st.session, [i for i in range(self.spec.nodes) if self._at[i] == k],
            bool(st.cgroups), device, bps) for k, h in enumerate(self._hosts)])
        return [f"{self._machines[k].address}:{g}" for k, groups in enumerate(done) for g in groups]

    # ---- node control ------------------------------------------------------------------------

    def kill_node(self, index: int) -> list[int]:
        import ray

        self._check_index(index)
        pid = ray.get(self._host(index).running.remote()).get(self._key(index))
        ray.get(self._host(index).stop.remote([self._key(index)], 0.0))
        if self._st.cgroups:  # and what left its process group, waited for
            return sorted({pid, *self._node(index, "kill", True)} - {None})
        return [pid] if pid else []

    def _degrade(self, pairs, shape, queue, seed, held) -> None:
        """Each sender machine: its senders' pairs marked by their cgroups and the receivers'
        addresses, the loss and the queue on marked connections, in the cluster's chain there
        (as on one machine, :func:`rlsim.host.links.loopback_rules`); a delayer there. Every
        packet a sender node sends across the link meets it on its own machine, the replies too
        (they are the receiver's packets, on the receiver's machine)."""
        import ray

        from rlsim.host import delayer, links

        st, mark = self._st, links.new_mark()
        for k in sorted({self._at[a] for a, _ in pairs}):
            mine = [(a, b) for a, b in pairs if self._at[a] == k]
            if queue is not None:
                key = f"{st.session}-delayer-{queue}"
                ray.get(self._hosts[k].start_delayer.remote(
                    key, delayer.command(queue, shape.delay_ms, shape.jitter_ms, seed),
                    procs.labels(st.session), queue))
                held["delayers"].append([k, key])
            rules = [dataclasses.asdict(r) for r in links.loopback_rules(
                self.addresses, st.session, mine, shape, mark, queue)]
            held["rules"].append([k, rules])
            self.firewall._send("apply", {k: rules})

    def restore_links(self, held: dict) -> None:
        """Undo one ``degrade_links``: its rules on each machine, then its delayers (safe
        twice)."""
        import ray

        for k, rules in held["rules"]:
            self.firewall._send("remove", {k: rules})
        for k, key in held["delayers"]:
            ray.get(self._hosts[k].stop.remote([key]))

    def kill_process(self, ip: str, pid: int) -> int:
        """SIGKILL one process of the cluster, on the machine of the node at ``ip``."""
        return self.signal_process(ip, pid, signal.SIGKILL)

    def signal_process(self, ip: str, pid: int, signum: int) -> int:
        """Signal one process of the cluster, by the pid the machine of the node at ``ip``
        sees, never another cluster's or the machine's (its host checks the session label)."""
        if ip not in self.addresses:
            raise ProcessLookupError(f"{ip} is no node of cluster {self._st.spec.name!r}")
        index = self.addresses.index(ip)
        refusal = f"pid {pid} ({ip}) is not a process of cluster {self._st.spec.name!r}"
        return answer(self._host(index).signal.remote(self._st.session, pid, int(signum),
                                                       refusal))

    def _node(self, index: int, verb: str, *args, remote: bool = False):
        """:mod:`rlsim.host.nodeops`'s ``verb`` on node ``index``, on its machine (``remote``:
        the call's ref, to gather several); what it raised there, raised here."""
        ref = self._host(index).node.remote(str(rlsim_home()), self._st.session, index, verb,
                                             *args)
        return ref if remote else answer(ref)

    def _no_cgroups(self) -> str:
        bare = [m.address for m in self._machines if not m.cgroups]
        return f"machine(s) {', '.join(bare)} of the substrate do not give"

    def _relaunch(self, index: int) -> None:
        """Node ``index`` started again on its machine, from the cluster's state as it is now
        (a lost GPU stays lost: ``lose_gpu`` writes it there first)."""
        import ray

        ray.get(self._host(index).put.remote(self._state_file()))
        self._start(index)
