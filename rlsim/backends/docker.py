"""Docker-container nodes: ``--backend docker``.

Each node is a container (testcontainers' ``DockerContainer``) of the locally built node image
(:mod:`rlsim.backends.docker_image`) on a bridge network of the cluster's own, with a fixed address
``10.177.<slot>.(10+i)``: a real network namespace per node, a real memory cgroup, a filesystem
of its own. PID 1 of a node is rlsim's launcher (the same Ray parameters as a local node: ports
of the cluster's block, fake GPUs, labels, health checks); it keeps the container alive and reaps
orphans as an init would. The
dashboard listens on the head container's loopback. Every container and the network carry the
labels ``rlsim.session`` and ``rlsim.home``, so ``rlsim down --all`` and the reaper find them
whatever happened, and touch only what this home made.

What a container shares with the host, all at the same path: the host's software read-only (see the
image module), of rlsim's home only the token and the cluster's state read-only and the node's own
temp dir read-write (Ray logs stay readable on the host; see :func:`home_view`), and the
directories in ``spec.mounts`` read-write (a scenario's run directory: events and checkpoints).
A directory in ``spec.node_local`` is instead a named volume per node (labelled like the rest): a
node-local disk, which that node alone sees and which survives its restart.

The driver (the trainer) runs inside the head container through ``docker exec``, where a Ray
driver of a real cluster runs too; the host has no raylet on the cluster's network.

Faults: ``docker kill`` / ``start`` (kill, restart), ``docker pause`` (cgroup freezer), iptables
inside the node's network namespace (partition, block_port: chains ``RLSIM-IN``/``RLSIM-OUT``
there, gone with the container; :mod:`rlsim.backends.docker_firewall`), the container's memory
cgroup (host_oom).

Ryuk (testcontainers' reaper) cannot be pulled here: set ``TESTCONTAINERS_RYUK_DISABLED=true``;
rlsim removes what it made itself, by label, and works the same where Ryuk runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

from rlsim import ray_internals
from rlsim.backends.base import ClusterStartError, NodeInfo, Unsupported, standin_refusal
from rlsim.backends.docker_engine import (
    LABEL,
    docker_client,
    engine_problem,
    is_orphan,
    labels,
    network_name,
)
from rlsim.backends.docker_firewall import ContainerFirewall
from rlsim.backends.docker_image import code_roots, host_mounts
from rlsim.backends.node_start import ADDRESSES_VAR, cluster_env
from rlsim.backends.ray_state import alive_nodes
from rlsim.backends.reaper import reap_docker, reap_docker_orphans
from rlsim.backends.started import StartedCluster
from rlsim.files import write_file
from rlsim.host import cgroups, disk, links, mountns, procs, squeeze, state
from rlsim.host.home import auth_token_path, home_id, rlsim_home
from rlsim.host.spec import ClusterShape, ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.ray_internals import session as ray_session
from rlsim.ray_internals.launch import version_stamp

# Ryuk cannot be pulled on machines without a registry; where it can, set this to false.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

SUBNET_PREFIX = "10.177"


def interpreter_problem(path: str) -> str | None:
    """None when ``path`` can run a node of this environment as another Python release (same
    minor version, so it imports the same packages; another patch, which Ray refuses), else why
    not."""
    try:
        out = subprocess.run([path, "-c", "import sys; print(*sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return (f"cluster.python: {path} does not run here ({e}); install it (Debian: "
                "apt-get install python3-minimal) or name another interpreter")
    theirs, ours = tuple(int(x) for x in out.split()), tuple(sys.version_info[:3])
    if theirs[:2] != ours[:2]:
        return (f"cluster.python: {path} is Python {'.'.join(map(str, theirs))}; a node must "
                f"import this environment's packages, built for {ours[0]}.{ours[1]}: name an "
                f"interpreter of {ours[0]}.{ours[1]}")
    if theirs == ours:
        return (f"cluster.python: {path} is the same Python as this environment "
                f"({'.'.join(map(str, ours))}), so the node would not differ: name another release")
    return None


def addresses(slot: int, nodes: int) -> list[str]:
    return [f"{SUBNET_PREFIX}.{slot}.{10 + i}" for i in range(nodes)]


def node_pythonpath(other_python: bool = False) -> str | None:
    """A node container's PYTHONPATH: the folders this process imported rlsim and the trainer
    from, where the venv alone would not find them (a checkout of another revision on
    PYTHONPATH beside an editable install runs its own code on every node, as local nodes do by
    inheriting the variable); with ``other_python`` (another interpreter over this
    environment) this environment's site-packages after them."""
    sites = site.getsitepackages()
    roots = [str(r) for r in code_roots() if str(r) not in sites]
    roots += sites if other_python else []
    return os.pathsep.join(roots) or None


class DockerCluster(StartedCluster):
    """A Ray cluster whose nodes are Docker containers on the cluster's own network."""

    name = "docker"
    pid_label = "container pid"
    reap_state = staticmethod(reap_docker)
    reap_orphans = staticmethod(reap_docker_orphans)

    def __init__(self, spec: ClusterSpec | None = None, *, detached: bool = False) -> None:
        self.spec = spec or ClusterSpec()
        self.detached = detached
        self.state: ClusterState | None = None
        self._stopped: ClusterState | None = None
        self.containers: dict[int, object] = {}
        self.timings: dict[str, float] = {}
        self.firewall = ContainerFirewall(self)

    # ---- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def attach(cls, st: ClusterState) -> DockerCluster:
        """A handle on a running docker cluster started elsewhere (``rlsim cluster --detach``)."""
        cluster = cls(st.spec, detached=st.detached)
        cluster.state = st
        cluster._home = rlsim_home()  # where its state was found
        mine = {"label": f"{LABEL}={st.session}"}
        for c in docker_client().containers.list(all=True, filters=mine):
            cluster.containers[int(c.labels["rlsim.node"])] = c
        return cluster

    @classmethod
    def refusal(cls, shape: ClusterShape, node_local: bool) -> Unsupported | None:
        if refused := standin_refusal(shape, False):
            return refused
        if shape.gcs_ft != "none":
            return Unsupported("cluster.gcs_ft (a Redis-backed GCS the head restarts from) runs "
                               "on --backend local")
        if any(n.cuda_devices for n in shape.node_shapes()):
            return Unsupported("cluster.cuda_devices (real GPUs behind the nodes' GPUs) runs on "
                               "--backend local: rlsim's containers are given no GPU devices")
        problem = engine_problem() or next(
            (p for path in shape.python.values() if (p := interpreter_problem(path))), None)
        if problem:
            return Unsupported(f"--backend docker: {problem}", missing_part=True)
        if shape.ray_version and not (stamp := ray_internals.status("version_stamp")).available:
            return Unsupported(f"cluster.ray_version: {stamp.why}; this Ray's nodes cannot "
                               "claim another version")
        return None

    def _check_can_start(self) -> None:
        problem = engine_problem()
        if problem:
            raise ClusterStartError(f"--backend docker: {problem}")

    def _prepare(self, st: ClusterState) -> None:
        from rlsim.backends.docker_image import build

        if st.slot > 255:
            raise ClusterStartError("docker backend: slot above 255 has no subnet")
        t0 = time.monotonic()
        self.image = build(docker_client())
        self.timings["image_s"] = time.monotonic() - t0

    def _launch_nodes(self) -> None:
        """The head's container first, the others once its node is alive, as ``ray start
        --head`` comes before the workers' ``ray start``: a worker node that starts first asks
        the GCS for the head node's record a limited number of times (20 tries 2 s apart in
        Ray 2.60) and exits when it is not there, which happened here to containers started
        beside the head on a loaded machine."""
        self.network = _create_network(docker_client(), self._st)
        self._run_node(0)
        if self.spec.nodes > 1:
            self.wait_for_nodes(indices=[0])
        for index in range(1, self.spec.nodes):
            self._run_node(index)

    def _reap(self, st: ClusterState) -> None:
        """Remove the containers, network and volumes (by label), the state and node dirs."""
        reap_docker(st)
        self.containers.clear()

    def _leaks(self) -> list[str]:
        st = self._stopped or self.state
        if st is None:
            return []
        client = docker_client()
        found = [f"container {c.name}" for c in
                 client.containers.list(all=True, filters={"label": f"{LABEL}={st.session}"})]
        found += [f"network {n.name}" for n in
                  client.networks.list(filters={"label": f"{LABEL}={st.session}"})]
        found += [f"volume {v.name}" for v in
                  client.volumes.list(filters={"label": f"{LABEL}={st.session}"})]
        found += [f"mount {point}" for point in disk.mounted(st.session)]
        if st.root.exists():
            found.append(f"run directory {st.root}")
        return found + [f"process {pid}" for pid in procs.find(st.session)]

    def _run_node(self, index: int):
        from testcontainers.core.container import DockerContainer

        st = self._st
        addrs = addresses(st.slot, self.spec.nodes)
        env = {**cluster_env(st), ADDRESSES_VAR: json.dumps(addrs), "RLSIM_HOME": str(
            rlsim_home()), procs.NODE_VAR: str(index), "HOME": "/root",
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"}
        container = DockerContainer(self.image)
        for path in host_mounts():
            container.with_volume_mapping(path, path, "ro")
        for source, target, mode in home_view(st, index, self.spec.mounts):
            container.with_volume_mapping(source, target, mode)
        for path in self.spec.mounts:
            Path(path).mkdir(parents=True, exist_ok=True)
            container.with_volume_mapping(path, path, "rw")
        for k, path in enumerate(self.spec.node_local):  # this node's own disk at that path
            container.with_volume_mapping(_node_volume(st, index, k), path, "rw")
        if index in self.spec.ray_version:  # this node's Ray package says another version
            real, text = version_stamp(self.spec.ray_version[index])
            fake = st.root / f"n{index}-ray-version.py"
            write_file(fake, text)
            container.with_volume_mapping(str(fake), str(real), "ro")
        python = self.spec.python.get(index, sys.executable)
        if path := node_pythonpath(other_python=index in self.spec.python):
            env["PYTHONPATH"] = path
        for k, v in env.items():
            container.with_env(k, v)
        container.with_name(f"rlsim-{st.session}-n{index}")
        container.with_command([python, "-m", "rlsim.backends.node_start", st.spec.name,
                                str(index)])
        container.with_kwargs(
            labels=labels(st.session, **{"rlsim.cluster": st.spec.name, "rlsim.node": str(index)}),
            network=self.network.name, working_dir="/tmp",
            shm_size=f"{self.spec.object_store_mb + 64}m",
            networking_config={self.network.name: _endpoint(addrs[index])},
            cap_add=["NET_ADMIN"],
        )
        container.start()
        self.containers[index] = container.get_wrapped_container()
        return self.containers[index]

    # ---- addresses, observation --------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        return addresses(self._st.slot, self.spec.nodes)

    @property
    def dashboard_url(self) -> str:
        """The dashboard listens on the head container's loopback only."""
        if not self.spec.dashboard:
            return "off (spec.dashboard)"
        return (f"http://127.0.0.1:{self._st.layout.dashboard_port} inside "
                f"{self._container(0).name} (docker exec)")

    def connect_hints(self) -> list[str]:
        return [f"drivers run on the head node: docker exec -it {self._container(0).name} "
                "python ..."]

    def driver_command(self, cmd: list[str], env: dict[str, str] | None = None,
                       cwd: Path | None = None) -> list[str]:
        """``cmd`` as a driver inside the head container, in ``cwd`` (mounted there at the same
        path: the scenario's folder), with the connection's variables and ``env``."""
        env = {**self.driver_env(), **(env or {})}
        return ["docker", "exec", "-i", "-w", str(cwd or "/"),
                *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
                self._container(0).name, *cmd]

    def probe(self, src: int, dst: int, port: int) -> bool:
        """Can a process on node ``src`` open a TCP connection to node ``dst``:``port``?"""
        code = ("import socket,sys;s=socket.socket();s.settimeout(1.5);"
                f"sys.exit(s.connect_ex(({self.addresses[dst]!r}, {port})))")
        return self._container(src).exec_run([sys.executable, "-c", code]).exit_code == 0

    def _container(self, index: int):
        self._check_index(index)
        return self.containers[index]

    def _state(self, index: int) -> dict:
        c = self._container(index)
        c.reload()
        return c.attrs["State"]

    def nodes(self, exclude_ids: frozenset[str] = frozenset()) -> list[NodeInfo]:
        st = self._st
        # a node whose container is not made yet (the head starts first) is not running
        states = {i: self._state(i) if i in self.containers else {"Running": False, "Pid": 0}
                  for i in range(self.spec.nodes)}
        alive: dict[str, dict] = {}
        if states[0]["Running"] and not states[0].get("Paused"):
            with contextlib.suppress(Exception):  # a GCS that just went away: nobody is alive
                alive = alive_nodes(self.address, str(auth_token_path()), exclude_ids)
        shapes = st.spec.node_shapes()
        return [NodeInfo.seen(i, addr, alive.get(addr), shapes[i].gpus,
                              [states[i]["Pid"]] if states[i]["Pid"] else [])
                for i, addr in enumerate(self.addresses)]

    def _check_starting(self, infos: list[NodeInfo], missing: set[int]) -> None:
        """A missing node whose container has exited (its node refused to start) will not come
        up: raise ClusterStartError with Ray's reason at once."""
        for n in infos:
            if n.index in missing and not n.pids:
                exit_code = self._state(n.index)["ExitCode"]
                raise ClusterStartError(
                    f"cluster {self.spec.name!r} (docker): node {n.index} ({n.address}) exited "
                    f"during start-up (exit {exit_code}): {_reason(self.logs(n.index, 60))}\n"
                    + self.logs(n.index, 20))

    def logs(self, index: int, lines: int = 40) -> str:
        chunks = []
        with contextlib.suppress(Exception):
            out = self._container(index).logs(tail=lines).decode(errors="replace").strip()
            if out:
                chunks.append(f"--- container rlsim-{self._st.session}-n{index}\n{out}")
        for path in ray_session.daemon_logs(self._st.node_dir(index), gcs=False):
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                if tail:
                    chunks.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(chunks) or f"(no logs for node {index})"

    # ---- node control --------------------------------------------------------------------------

    def kill_node(self, index: int) -> list[int]:
        state_ = self._state(index)
        if state_["Paused"]:
            self._container(index).unpause()
        if state_["Running"]:
            self._container(index).kill()
        return [state_["Pid"]] if state_["Pid"] else []

    def _relaunch(self, index: int) -> None:
        self._container(index).start()  # same address, same command: the node joins again

    def fault_residue(self) -> list[str]:
        """What faults left that the next run would inherit: paused node containers (rules live
        in the nodes' own namespaces and go with them)."""
        found = []
        for i in sorted(self.containers):
            state = self._state(i)
            if state.get("Paused"):
                found.append(f"node {i} is paused")
            if (self._container(i).attrs["HostConfig"].get("CpuQuota") or 0) > 0:
                found.append(f"node {i} has a CPU quota")
        return found

    def throttle_cpu(self, index: int, cores: float | None) -> dict[str, float] | None:
        """The container's own CPU quota (``docker update --cpu-period --cpu-quota``; -1 lifts
        it); its cgroup's throttling counters so far."""
        quota = cgroups.cpu_quota(cores)
        self._container(index).update(cpu_period=cgroups.PERIOD_US,
                                      cpu_quota=-1 if quota is None else quota)
        group = cgroups.cpu_group_of(self._state(index).get("Pid") or 0)
        return cgroups.throttle_counts(group) if group is not None else None

    # ---- storage ---------------------------------------------------------------------------

    def _pids(self) -> dict[int, int]:
        """Each running node container's main process, as the host sees it."""
        return {i: pid for i in sorted(self.containers) if (pid := self._state(i).get("Pid"))}

    def mount_disk(self, path: Path, mb: int) -> str:
        """ext4 on a loop device at ``path`` on the host, grafted into every node container's
        mount namespace at the same path (see :mod:`rlsim.host.mountns`). A node container
        started later (a restarted node) does not see it."""
        dev = disk.mount_device(path, mb, self._st.session, self._st.root)
        try:
            for pid in self._pids().values():
                _run(mountns.command("graft", path, pid, path))
        except BaseException:
            self.unmount_disk(path)
            raise
        return dev

    def throttle_disk(self, path: Path, write_mbps: float | None) -> list[str]:
        """The device's write cap in every node container's I/O cgroup (and the host's top)."""
        groups = cgroups.io_groups_of(list(self._pids().values()))
        return cgroups.throttle_writes(disk.device_of(path), cgroups.bytes_per_s(write_mbps),
                                       groups)

    def unmount_disk(self, path: Path) -> None:
        for pid in self._pids().values():
            subprocess.run(mountns.command("drop", pid, path), capture_output=True)
        disk.unmount_device_keeping(path)

    # ---- network -------------------------------------------------------------------------------

    def _degrade(self, pairs, shape, queue, seed, held) -> None:
        """Node namespaces: each sender's OUTPUT rules by receiver address (loss, then the
        queue), and a delayer in each sender's namespace."""
        for index, rules in links.namespace_rules(self.addresses, pairs, shape, queue).items():
            pid = self._state(index).get("Pid")
            if not pid:
                continue  # a stopped node has no namespace
            self.firewall._ensure_chains(index)
            if queue is not None:
                held["delayers"].append(self._spawn_delayer(queue, shape, seed, pid))
            for words in rules:
                self.firewall._ipt(index, ["-A", "RLSIM-OUT", *words])
                held["rules"].append([index, words])

    def _restore_rules(self, rules: list) -> None:
        for index, words in rules:  # a node restarted since took its rules with its namespace
            self.firewall._ipt(index, ["-D", "RLSIM-OUT", *words], check=False)

    def pause_node(self, index: int) -> list[int]:
        if not self._state(index)["Paused"]:
            self._container(index).pause()
        return self.nodes()[index].pids

    def resume_node(self, index: int) -> list[int]:
        if self._state(index)["Paused"]:
            self._container(index).unpause()
        return self.nodes()[index].pids

    def node_command(self, index: int, cmd: list[str]) -> list[str]:
        """``cmd`` as a process of node ``index``: ``docker exec`` in its container."""
        return ["docker", "exec", "-i", self._container(index).name, *cmd]

    def _memory(self, index: int) -> cgroups.MemoryGroup:
        """The container's memory cgroup (found through its main process)."""
        pid = self._state(index)["Pid"]
        if not pid:
            raise RuntimeError(f"node {index} is not running")
        return cgroups.memory_group_of(pid)

    def squeeze_memory(self, index: int, mb: int) -> dict:
        """The container's memory cgroup squeezed, the hog run by ``docker exec``
        (:mod:`rlsim.host.squeeze`)."""
        ip = self.addresses[index]
        return squeeze.squeeze(self._memory(index), self.node_command(index, squeeze.hog(mb)),
                               mb, lambda pid: self.kill_process(ip, pid))

    def lift_memory(self, index: int) -> None:
        try:
            memory = self._memory(index)
        except Exception:  # noqa: BLE001 - a container gone (or stopped) has no cap to lift
            return
        squeeze.lift(memory)

    def kill_process(self, ip: str, pid: int) -> int:
        """SIGKILL a process by its pid inside the container that has address ``ip``."""
        return self.signal_process(ip, pid, 9)

    def signal_process(self, ip: str, pid: int, signum: int) -> int:
        """Signal a process by its pid inside the container that has address ``ip``."""
        index = self.addresses.index(ip)
        out = self._container(index).exec_run(["kill", f"-{int(signum)}", str(pid)])
        if out.exit_code:
            raise ProcessLookupError(f"pid {pid} on {ip}: {out.output.decode().strip()}")
        return pid


def _reason(log: str) -> str:
    """The line of a node's log that says why it stopped (Ray's errors end in one)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "Version mismatch" in line:  # Ray's message spans the lines after it
            return (" ".join(lines[i:i + 7]) + " Fix: build every node from one image: Ray "
                    "needs the same Ray release and the same Python patch release on every node")
    errors = [line for line in lines if "Error" in line]
    return errors[-1] if errors else (lines[-1] if lines else "(no log)")


def _endpoint(address: str) -> object:
    import docker
    from docker.types import EndpointConfig

    return EndpointConfig(docker.constants.DEFAULT_DOCKER_API_VERSION, ipv4_address=address)


def _create_network(client, st: ClusterState):
    from docker.types import IPAMConfig, IPAMPool

    subnet = f"{SUBNET_PREFIX}.{st.slot}.0/24"
    with contextlib.suppress(Exception):  # a leftover of a crashed owner of this slot
        for old in client.networks.list(names=[network_name(st.slot)]):
            if is_orphan(old.attrs.get("Labels"), set(), home_id()):
                old.remove()
    return client.networks.create(
        network_name(st.slot), driver="bridge",
        ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=subnet, gateway=f"{SUBNET_PREFIX}."
                                                                      f"{st.slot}.1")]),
        labels=labels(st.session, **{"rlsim.cluster": st.spec.name}))


def home_view(st: ClusterState, index: int, mounts: list[str]) -> list[tuple[str, str, str]]:
    """What node ``index`` sees of rlsim's home, as (host path, container path, mode) mounts.

    The home holds the machine's token, every cluster's state and every cluster's node dirs, so a
    node gets a read-only stand-in for it: a directory of empty mount points (made under this
    start's run dir, gone with it) with, over them, the token and this cluster's state file
    read-only (what the launcher reads) and this node's own dir read-write (Ray's temp dir:
    sockets, logs). Other clusters, other nodes' dirs and the rest of the home are absent, and
    nothing under the home but the node's dir can be written. A directory of ``mounts`` inside
    the home gets a mount point too, so it is mounted as asked."""
    home = rlsim_home()
    files = [auth_token_path(), state.state_path(st.spec.name)]
    dirs = [st.node_dir(index)]
    dirs += [Path(m) for m in mounts if Path(m).is_relative_to(home) and Path(m) != home]
    stand_in = st.root / f"n{index}.home"
    _private_dirs(stand_in, [d.relative_to(home) for d in dirs + [f.parent for f in files]])
    for f in files:
        (stand_in / f.relative_to(home)).touch(0o600)
    dirs[0].mkdir(parents=True, exist_ok=True)
    return ([(str(stand_in), str(home), "ro")] + [(str(f), str(f), "ro") for f in files]
            + [(str(dirs[0]), str(dirs[0]), "rw")])


def _private_dirs(top: Path, relative: list[Path]) -> None:
    """Make each ``top / rel`` and the directories between, mode 0700 (the launcher checks the
    home and its clusters dir as rlsim's own, private directories)."""
    for rel in relative:
        path = top
        for part in ("", *rel.parts):
            path = path / part
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)


def _node_volume(st: ClusterState, index: int, k: int) -> str:
    """The named volume that is node ``index``'s disk number ``k`` (made once; it outlives a
    restart of the node, as a disk outlives a reboot)."""
    name = f"rlsim-{st.session}-n{index}-disk{k}"
    client = docker_client()
    if not client.volumes.list(filters={"name": name}):
        client.volumes.create(name, labels=labels(st.session, **{"rlsim.node": str(index)}))
    return name


def _run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise OSError(out.stderr.strip() or f"{cmd[:4]} exited {out.returncode}")
