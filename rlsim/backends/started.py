"""What the local, docker and substrate backends share: one Ray cluster of ``spec.nodes`` nodes
that rlsim started and tears down. Start-up and teardown, context management, the bounded wait for
nodes, named ports and the network verbs live here once; a backend supplies ``_prepare``,
``_launch_nodes``, ``_relaunch`` and ``_reap`` (what start, restart and stop do differently),
``nodes``, ``logs`` and a ``firewall`` with ``apply``/``heal``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rlsim import ray_internals, standin
from rlsim.backends import ray_state
from rlsim.backends.base import PROBE_MODULE, ClusterStartError, NodeInfo
from rlsim.backends.reaper import reap_abandoned
from rlsim.contract import RESERVE_FILE
from rlsim.files import read_file, write_file
from rlsim.host import delayer, iptables, links, procs, state
from rlsim.host.health import DEAD_WITHIN_MAX_S, dead_wait_s
from rlsim.host.home import auth_token_path, pinned, rlsim_home
from rlsim.host.iptables import Drop
from rlsim.host.layout import named_ports
from rlsim.host.links import LinkShape
from rlsim.host.spec import ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.host.talk import Talk
from rlsim.standin.ledger import RESERVE_NAME

PROBE_TIMEOUT_S = 60  # one doctor phase on one node: its answer, or the node is a finding


class StartedCluster:
    """Base of :class:`LocalCluster`, :class:`DockerCluster` and :class:`SubstrateCluster` (not a
    backend by itself)."""

    name = "cluster"
    pid_label = "raylet pid"  # what ``state.pids`` holds per node (``rlsim status``'s column)
    reusable = False  # kept for the next scenario of its shape when clean (rlsim.scenario.pool)
    spec: ClusterSpec
    state: ClusterState | None
    detached: bool
    timings: dict[str, float]
    ready_nodes: list[NodeInfo]  # the nodes as start() saw them ready
    # raylet commands this handle's launchers saw and agent commands they rewrote, by kind
    # (rlsim.ray_internals.launch.REWRITES): only the local backend's launchers report them to
    # the handle that started them; None: not counted
    rewrites: dict[str, int] | None = None
    _stopped: ClusterState | None
    _home: Path | None = None  # the rlsim home it was started in (or attached from)

    # ---- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def make(cls, spec: ClusterSpec, ray_address: str | None = None, gpu_faults: bool = False,
             *, on: str | None = None, detached: bool = False):
        return cls(spec, detached=detached)

    def start(self):
        """Bring the cluster up and wait until every node is alive with its GPUs.

        Raises ClusterStartError or TimeoutError, after tearing down what was started, naming the
        node that did not come up and its log tail.
        """
        self._check_can_start()
        if refused := ray_internals.auth_refusal():
            raise ClusterStartError(refused)
        t0 = time.monotonic()
        reap_abandoned()
        self._home = rlsim_home()
        self.state = state.reserve(self.spec, backend=self.name, detached=self.detached)
        try:
            self._prepare(self.state)
            shutil.rmtree(self.state.root, ignore_errors=True)
            self.state.root.mkdir(parents=True)
            self._launch_nodes()
            self.timings["launched_s"] = time.monotonic() - t0
            self.ready_nodes = self.wait_for_nodes()
            self.state.accelerations = ray_internals.cluster_report(
                self.rewrites, lean=not self.spec.dashboard,
                forked=bool(self.state.cgroups))
            state.save(self.state)
        except BaseException:
            self.stop()
            raise
        self.timings["ready_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Tear down everything the cluster made (see :meth:`_reap`). Safe twice."""
        st = self.state
        if st is None:
            return
        with pinned(self._home):  # its own home, whatever RLSIM_HOME says by now
            self._reap(st)
        self._stopped, self.state = st, None

    def leaks(self) -> list[str]:
        """After :meth:`stop`: what of the cluster is still there (see :meth:`_leaks`), looked
        for in the home it was started in."""
        with pinned(self._home):
            return self._leaks()

    def _leaks(self) -> list[str]:
        raise NotImplementedError

    def _check_can_start(self) -> None:
        """Raise ClusterStartError when this machine cannot run the backend at all."""

    def _prepare(self, st: ClusterState) -> None:
        """What the backend readies once the slot is reserved (torn down by stop on failure)."""

    def _launch_nodes(self) -> None:
        raise NotImplementedError

    def _reap(self, st: ClusterState) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self.start() if self.state is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def _st(self) -> ClusterState:
        if self.state is None:
            raise RuntimeError("the cluster is not running: call start() or use it as a context")
        return self.state

    @property
    def addresses(self) -> list[str]:
        """Each node's address: the plan's (a backend whose nodes live elsewhere says where)."""
        return [n.address for n in self._st.layout.nodes]

    @property
    def address(self) -> str:
        """The cluster's GCS: the head's address, at the slot's GCS port."""
        return f"{self.addresses[0]}:{self._st.layout.gcs_port}"

    def driver_env(self) -> dict[str, str]:
        """What a driver needs in its environment to join this cluster (and, where the cluster
        has the device stand-in, to see the head's fake GPUs as CUDA devices, as a driver on a
        real head node sees its GPUs)."""
        env = {**self._st.spec.env, "RAY_ADDRESS": self.address,
               **ray_internals.connect_env(str(auth_token_path()))}
        head = self._st.spec.node_shapes()[0]
        gpus = self._st.gpus_left.get(0, head.gpus)
        if self._st.spec.cuda_standin and not head.cuda_devices:
            env.update(standin.deepspeed_env({**os.environ, **self._st.spec.env}))
            env.update(standin.node_env(gpus, head.gpu_memory_gb, head.accelerator,
                                        self._st.layout.nodes[0].address,
                                        self._st.root / standin.LEDGER_DIR,
                                        standin.without(dict(os.environ)).get("PYTHONPATH")))
        return env

    def process_labels(self) -> dict[str, str]:
        """The labels (:func:`rlsim.host.procs.labels`) of a process started beside this
        cluster on this machine: the cluster's teardown and the reaper end it with the nodes."""
        return procs.labels(self._st.session)

    def processes_here(self) -> dict[int, int | None]:
        """This cluster's processes on this machine, each with its node's index (None: of no
        node, a driver): its nodes' by their cgroups where they have them (Ray's retitled
        workers and agents keep no labels), and its labelled others."""
        from rlsim.host import nodeops

        found: dict[int, int | None] = dict.fromkeys(procs.find(self._st.session))
        for index in range(self.spec.nodes):
            for pid in nodeops.pids(self._st.session, index, bool(self._st.cgroups)):
                found[pid] = index
        return found

    def connect_hints(self) -> list[str]:
        """Lines ``rlsim cluster`` prints beside the connection settings: an unauthenticated
        cluster says so (this Ray has no token auth)."""
        return [] if ray_internals.token_auth() else [ray_internals.open_cluster_line()]

    def ray_report(self) -> dict:
        """What of Ray's internals this cluster runs with (the timeline's ``ray`` event, ``rlsim
        doctor``): the installed Ray, each acceleration in force or not and why, as it started
        (kept in its state: another process may ask), and the auth mode the GCS itself
        enforces, asked now."""
        from rlsim.ray_internals.gcs import auth_in_force

        st = self._st
        started = st.accelerations or ray_internals.cluster_report(
            None, lean=not st.spec.dashboard, forked=bool(st.cgroups))
        return {**started, "auth": auth_in_force(self.address)}

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self._st.spec.nodes:
            last = self._st.spec.nodes - 1
            raise IndexError(f"node {index} does not exist: the cluster has nodes 0..{last}")

    def restart_node(self, index: int, timeout: float | None = None) -> NodeInfo:
        """Kill node ``index`` and start it again at its address. The head only with
        ``gcs_ft: redis``: its new GCS reloads the cluster's tables from the store, and the
        other nodes' raylets reconnect to it (they wait ``gcs_rpc_server_reconnect_timeout_s``)."""
        self._check_head_restart(index)
        old = self.nodes()[index].node_id
        self.kill_node(index)
        if index != 0:  # the head's GCS is the one that would declare it: it restarts whole
            self.wait_for_dead(index, old)
        self._relaunch(index)
        return self.wait_for_nodes(timeout, None if index == 0 else [index],
                                   frozenset({old}) - {None})[index]

    def _relaunch(self, index: int) -> None:
        """Start node ``index`` again at its address, after :meth:`restart_node` killed it."""
        raise NotImplementedError

    def _check_head_restart(self, index: int) -> None:
        """Node ``index`` exists, and is not the head of a cluster whose tables die with it."""
        self._check_index(index)
        if index == 0 and self.spec.gcs_ft != "redis":
            raise NotImplementedError(
                "restarting the head needs GCS fault tolerance: start the cluster with "
                "gcs_ft: redis (scenario cluster section) so its tables outlive the head; "
                "without, kill_head ends the cluster"
            )

    def _check_cgroup(self, index: int, what: str) -> None:
        """Node ``index`` exists and has a cgroup of its own, which ``what`` needs."""
        self._check_index(index)
        if not self._st.cgroups:
            raise RuntimeError(f"{what} needs rlsim's node cgroups, which {self._no_cgroups()}")

    def _no_cgroups(self) -> str:
        """Where rlsim's node cgroups are missing, and why (the end of a sentence)."""
        from rlsim.host import cgroups

        return f"this machine does not give: {cgroups.available()}"

    def port(self, name: str) -> tuple[int, int]:
        """A named port range of this cluster (``gcs``, ``dashboard``, ``workers:1``, ...)."""
        ports = named_ports(self._st.layout)
        if name not in ports:
            raise KeyError(f"unknown port name {name!r}; known: {', '.join(sorted(ports))}")
        return ports[name]

    # ---- the doctor's view ---------------------------------------------------------------------

    def endpoints(self) -> list[dict]:
        """Each node's address and the ports the other nodes must reach (the head: GCS too)."""
        plan = self._st.layout
        out = []
        for info, node in zip(self.nodes(), plan.nodes, strict=True):
            ports = {"node_manager": node.ports.node_manager,
                     "object_manager": node.ports.object_manager}
            if node.index == 0:
                ports = {"gcs": plan.gcs_port, **ports}
            out.append({"index": node.index, "address": info.address, "ports": ports})
        return out

    @contextlib.contextmanager
    def probes(self) -> Iterator[Callable[[int, str, dict], dict]]:
        """While inside: ``ask(index, phase, args)`` runs a :mod:`rlsim.doctor.probe` phase on
        node ``index`` and returns its answer, every phase of a node in one probe process (a
        process of that node), started at its first question and ended on leaving."""
        talks: dict[int, Talk] = {}

        def ask(index: int, phase: str, args: dict) -> dict:
            if index not in talks:
                talks[index] = self._probe_talk(index)
            return talks[index].ask(phase, args)

        try:
            yield ask
        finally:
            for talk in talks.values():
                talk.close()

    def _probe_talk(self, index: int) -> Talk:
        """The conversation with node ``index``'s probe, a process of that node."""
        python = self._st.spec.python.get(index, sys.executable)
        return Talk(self.node_command(index, [python, "-m", PROBE_MODULE]), PROBE_TIMEOUT_S)

    # ---- waiting ---------------------------------------------------------------------------------

    def wait_for_nodes(
        self, timeout: float | None = None, indices: list[int] | None = None,
        exclude_ids: frozenset[str] = frozenset(),
    ) -> list[NodeInfo]:
        """Wait until the nodes (all, or ``indices``) are alive with the GPUs of their shape, as
        registrations other than ``exclude_ids`` (a killed node's old one, until Ray notices).

        Raises TimeoutError with the last state seen, the setting to tune and the log tail of the
        first missing node (and whatever :meth:`_check_starting` raises earlier).
        """
        st = self._st
        want = set(range(st.spec.nodes) if indices is None else indices)
        # ready_timeout_s bounds one node's (re)start: a whole cluster gets it once per node
        timeout = st.spec.ready_timeout_s * len(want) if timeout is None else timeout
        deadline = time.monotonic() + timeout
        shapes = st.spec.node_shapes()
        gpus_of = [st.gpus_left.get(i, shape.gpus) for i, shape in enumerate(shapes)]
        while True:
            infos = self.nodes(exclude_ids)
            ready = {n.index for n in infos if n.alive and n.gpus == gpus_of[n.index]}
            if want <= ready:
                return infos
            self._check_starting(infos, want - ready)
            if time.monotonic() > deadline:
                missing = sorted(want - ready)
                first = missing[0]
                gpus = sum(n.gpus for n in infos if n.alive)
                raise TimeoutError(
                    f"cluster {st.spec.name!r} ({self.name}): node(s) {missing} not alive after "
                    f"{timeout:.0f} s (alive: {sorted(n.index for n in infos if n.alive)}, GPUs "
                    f"seen {gpus} of {sum(gpus_of)}). Raise "
                    f"ready_timeout_s (--ready-timeout, per node) if the machine is just slow. "
                    f"Node {first} log tail:\n" + self.logs(first)
                )
            time.sleep(0.1)

    def wait_for_dead(self, index: int, node_id: str | None, timeout: float | None = None) -> None:
        """Wait until Ray's GCS has declared the registration ``node_id`` of node ``index`` dead
        (its health checks failed): a node restarted at the same address and ports before that
        registered beside its old self, which Ray then declared dead under the node's address,
        and the new registration was never given work (two relaunches waited 120 s for their
        placement group). Raises TimeoutError naming the node when Ray keeps it alive."""
        if node_id is None:
            return
        st = self._st
        # Ray declares a node dead after its health checks fail failure_threshold times in a
        # row (each within period + timeout): at most DEAD_WITHIN_MAX_S
        timeout = timeout if timeout is not None else \
            dead_wait_s(st.spec.health, st.spec.ready_timeout_s)
        deadline = time.monotonic() + timeout
        token = str(auth_token_path())
        while True:
            try:
                table = ray_state.node_table(self.address, token)
            except Exception:  # noqa: BLE001 - a GCS that does not answer has no say yet
                table = None
            if table is not None and not any(e["NodeID"] == node_id and e["Alive"]
                                             for e in table):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"cluster {st.spec.name!r}: Ray still counts node {index}'s old registration "
                    f"({node_id[:12]}) alive {timeout:.0f} s after the node was killed (the "
                    f"wait its health checks ask, at most {DEAD_WITHIN_MAX_S:.0f} s, or "
                    "ready_timeout_s where longer); cluster.health decides when Ray gives up "
                    "on a node")
            time.sleep(0.1)

    def _check_starting(self, infos: list[NodeInfo], missing: set[int]) -> None:
        """Raise at once when a missing node can no longer come up. Default: keep waiting."""

    # ---- network ---------------------------------------------------------------------------------

    def partition(self, groups: list[list[int]]) -> list[Drop]:
        st = self._st
        return self.firewall.apply(iptables.partition_rules(st.layout, st.session, groups))

    def block_port(
        self, node: int, ports: tuple[int, int] | str, sources: list[int] | None = None
    ) -> list[Drop]:
        if isinstance(ports, str):
            ports = self.port(ports)
        st = self._st
        return self.firewall.apply(
            iptables.block_port_rules(st.layout, st.session, node, ports, sources))

    def remove_rules(self, rules: list[Drop]) -> None:
        self.firewall.remove(rules)

    def heal_network(self) -> None:
        self.firewall.heal()
        for pid in procs.find(self._st.session):
            if delayer.is_delayer(pid):
                self._stop_delayer(pid)

    # ---- warm workers ------------------------------------------------------------------------

    def prestart_workers(self, per_gpu_node: list[int], keep_alive_s: int = 60) -> list[int]:
        """Start idle workers ahead of a trainer's actors: ``per_gpu_node[k]`` on the k-th alive
        node with GPUs, head first then by address (the order trainers place in, as the
        reference trainer does). With ``preload_modules`` they import those first, so an actor
        that takes one starts warm. Returns how many each node index got.

        Starts none while the cluster's zygote is still importing (a fresh cluster: 3.7 s of torch,
        TorchDynamo and DeepSpeed here). Workers asked for then are forked only once it is done,
        and until then they have not registered with their raylet: a trainer that asks for its
        actors meanwhile gets new workers started beside them, as Ray does not hand out
        workers still starting, and each imports the trainer's modules. With vLLM rollouts that
        was 12 s of CPU a worker, and a 2-node scenario's first step took 21.5 s instead of
        9-12 s. The trainer's own requests start one worker per actor, forked when the zygote is
        done, as early as these would have been."""
        from rlsim.ray_internals.gcs import prestart

        if self._zygote_busy():
            return [0] * self.spec.nodes
        nodes = [n for n in self.nodes() if n.alive and n.gpus > 0]
        order = [n for n in nodes if n.index == 0] + sorted(
            (n for n in nodes if n.index != 0), key=lambda n: n.address)
        got = [0] * self.spec.nodes
        for node, count in zip(order, per_gpu_node, strict=False):
            if count > 0:
                port = self._st.layout.nodes[node.index].ports.node_manager
                if not prestart(f"{node.address}:{port}", str(auth_token_path()), count,
                                keep_alive_s):
                    break  # this Ray cannot be asked (warm_workers): none anywhere
                got[node.index] = count
        return got

    def _zygote_busy(self) -> bool:
        """Whether the cluster's zygote (:mod:`rlsim.backends.zygote`) is still importing what
        its workers preload: a worker asking for a fork waits until it is done."""
        from rlsim.backends import zygote

        st = self._st
        path = zygote.socket_path(st.root)
        return bool(st.cgroups and st.spec.preload_modules
                    and not os.path.exists(zygote.ready_path(path)) and zygote.answers(path))

    # ---- lost GPUs ---------------------------------------------------------------------------

    def lose_gpu(self, index: int, timeout: float | None = None) -> NodeInfo:
        """Node ``index`` comes back advertising one GPU fewer, for the rest of the cluster's
        life (a device drained after an Xid: the node's restart, as after a reboot, loses
        everything that ran there). Recorded in the cluster's state, so later restarts keep
        it."""
        self._check_index(index)
        st = self._st
        had = st.gpus_left.get(index, self.spec.node_shapes()[index].gpus)
        if had < 1:
            raise RuntimeError(f"node {index} has no GPU left to lose")
        st.gpus_left[index] = had - 1
        state.save(st)
        return self.restart_node(index, timeout)

    # ---- preemption --------------------------------------------------------------------------

    def drain_node(self, index: int, deadline_s: float, message: str) -> str:
        """Ray's own drain of node ``index`` with the preemption reason and a deadline
        ``deadline_s`` from now (see :func:`rlsim.ray_internals.gcs.drain`); returns the
        node's id. Raises when Ray refuses it."""
        from rlsim.ray_internals.gcs import drain

        self._check_index(index)
        node_id = self.nodes()[index].node_id
        if not node_id:
            raise RuntimeError(f"node {index} is not alive: there is nothing to preempt")
        refused = drain(self.address, str(auth_token_path()), node_id,
                        int((time.time() + deadline_s) * 1000), message)
        if refused:
            raise RuntimeError(f"Ray refused to drain node {index}: {refused}")
        return node_id

    # ---- degraded links ----------------------------------------------------------------------

    def degrade_links(self, groups: list[list[int]], shape: LinkShape, seed: int) -> dict:
        """Delay and lose the packets crossing the link between ``groups`` (see
        :mod:`rlsim.host.links`); returns what ``restore_links`` undoes (plain data)."""
        pairs = links.crossing(range(self.spec.nodes), groups)
        queue = links.free_queue() if shape.delay_ms else None
        held: dict = {"rules": [], "delayers": []}
        try:
            self._degrade(pairs, shape, queue, seed, held)
        except BaseException:
            self.restore_links(held)
            raise
        return held

    def restore_links(self, held: dict) -> None:
        """Undo ``degrade_links``: its rules, then its delayers (safe twice)."""
        self._restore_rules(held["rules"])
        for pid in held["delayers"]:
            self._stop_delayer(pid)

    def _degrade(self, pairs, shape: LinkShape, queue: int | None, seed: int,
                 held: dict) -> None:
        raise NotImplementedError

    def _restore_rules(self, rules: list) -> None:
        raise NotImplementedError

    def _spawn_delayer(self, queue: int, shape: LinkShape, seed: int,
                       netns_pid: int | None = None) -> int:
        """Start a delayer for ``queue`` (in the network namespace of ``netns_pid``), labelled
        as this session's so the reaper ends it; returns its pid once it listens."""
        cmd = delayer.command(queue, shape.delay_ms, shape.jitter_ms, seed)
        if netns_pid:
            cmd = ["nsenter", "-t", str(netns_pid), "-n", *cmd]
        proc = subprocess.Popen(cmd, env={**os.environ, **procs.labels(self._st.session)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        first = proc.stdout.readline()  # "bound", or its error as it exits
        if "bound" not in first:
            proc.kill()
            said = (first + proc.stdout.read()).strip()
            proc.wait()
            raise RuntimeError(f"the link's delayer (netfilter queue {queue}) did not start: "
                               f"{said or 'no output'}")
        proc.stdout.close()
        self._delayers[proc.pid] = proc
        return proc.pid

    def _stop_delayer(self, pid: int) -> None:
        """End one delayer of this session (it lets what it holds go); nothing if it is gone or
        is not this session's."""
        proc = self._delayers.pop(pid, None)
        if pid not in procs.find(self._st.session) or not delayer.is_delayer(pid):
            return
        os.kill(pid, signal.SIGTERM)
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        else:  # another process's child (healed by hand): wait for it to go
            procs.wait_gone([pid])

    @property
    def _delayers(self) -> dict[int, subprocess.Popen]:
        """The delayers this object started, by pid (to reap them when they end)."""
        return self.__dict__.setdefault("_delayer_procs", {})

    # ---- fake GPUs' memory -------------------------------------------------------------------

    def hold_gpu(self, index: int, gb: float, run_dir: Path) -> list[dict]:
        """Take ``gb`` GiB on every fake GPU of node ``index``: an entry in the trainer's memory
        ledger for its address (the trainer's workers read it before each phase)."""
        address = self.nodes()[index].address
        path = run_dir / RESERVE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        table = json.loads(read_file(path)) if path.exists() else {}
        table[address] = table.get(address, 0.0) + gb
        write_file(path, json.dumps(table))
        self._standin_reserve(address, table[address])
        return [{"gpu": g, "gb": gb} for g in range(self._st.spec.node_shapes()[index].gpus)]

    def _standin_reserve(self, address: str, gb: float | None) -> None:
        """What a fault holds on the node at ``address`` (None: nothing), where the device
        stand-in's processes read it (:mod:`rlsim.standin.ledger`)."""
        if not self._st.spec.cuda_standin:
            return
        path = self._st.root / standin.LEDGER_DIR / RESERVE_NAME
        table = json.loads(read_file(path)) if path.exists() else {}
        if gb is None:
            table.pop(address, None)
        else:
            table[address] = gb
        path.parent.mkdir(exist_ok=True)
        write_file(path, json.dumps(table))

    def release_gpu(self, index: int, run_dir: Path) -> int:
        """Give back every GiB held on node ``index``; how many GPUs had some. Safe twice."""
        path = run_dir / RESERVE_FILE
        table = json.loads(read_file(path)) if path.exists() else {}
        self._standin_reserve(self.nodes()[index].address, None)
        if table.pop(self.nodes()[index].address, None) is None:
            return 0
        if table:
            write_file(path, json.dumps(table))
        else:
            path.unlink()
        return self._st.spec.node_shapes()[index].gpus
