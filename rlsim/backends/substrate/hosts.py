"""A substrate: a plain Ray cluster of CPU machines (``ray start``, Slurm or KubeRay) that hosts
the processes of simulated clusters spread over several machines.

One host actor per machine, placed there by Ray's node affinity, says what the machine is (its
address, cores, memory, whether rlsim may change its firewall and cgroups) and starts, watches
and ends processes on it. The substrate's own GCS carries every call: nothing else travels
between machines. Host actors are detached (a cluster outlives the command that started it, as
``rlsim cluster --detach`` does on one machine) and named after their machine in the namespace
:data:`NAMESPACE`; :func:`release` ends what they started, then the actors.

A process a host starts dies with the host (``PR_SET_PDEATHSIG``; Ray 2.60 also ends a dead
worker's children itself): a host actor that crashes, or is killed, leaves nothing running
behind it.

A host also does to its machine's simulated node what the local backend does to a node on one
machine (:mod:`rlsim.host.nodeops`: freeze, CPU quota, a connection from inside the node), and
holds the doctor's probe conversations there (:class:`rlsim.host.talk.Talk`).

Ray is imported inside the functions: the driver connects to the substrate only when asked.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rlsim.host import programs

NAMESPACE = "rlsim-substrate"
HOST_PREFIX = "rlsim-host-"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Machine:
    """One machine of the substrate, as its host actor sees it."""

    node_id: str
    address: str
    cpus: int
    memory_bytes: int
    root: bool            # rlsim may add firewall rules and cgroups there
    iptables: bool
    cgroups: bool         # rlsim's node cgroups can be made there
    interface: str        # the network interface that carries ``address`` ("" if unknown)
    mounts: str = ""      # which mount table it sees (rlsim.host.disk.mount_table)


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: a forked child only calls it


def _die_with_parent() -> None:
    """In a child, before exec: SIGKILL when the thread that started it (the host actor's task
    thread, which lives as long as the actor) ends."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Host:
    """The host actor of one machine (see the module text). Its methods run on that machine."""

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen] = {}
        self._talks: dict = {}
        os.environ["PATH"] = programs.search_path()  # a worker's PATH is whatever ran `ray start`

    def machine(self) -> dict:
        import ray

        from rlsim.host import cgroups, disk
        from rlsim.host.listeners import interface

        with open("/proc/meminfo") as f:
            total_kb = int(next(ln for ln in f if ln.startswith("MemTotal:")).split()[1])
        return {"node_id": ray.get_runtime_context().get_node_id(),
                "address": ray.util.get_node_ip_address(), "cpus": os.cpu_count() or 1,
                "memory_bytes": total_kb * 1024, "root": os.geteuid() == 0,
                "iptables": shutil.which("iptables") is not None,
                "cgroups": cgroups.available() is None,
                "interface": interface(ray.util.get_node_ip_address()) or "",
                "mounts": disk.mount_table()}

    def firewall(self, home: str, slot: int, session: str, verb: str,
                 drops: list[dict]) -> list[str] | None:
        """``verb`` (apply, remove, heal, or left: the rules still there) ``drops`` in this
        machine's chain of the cluster
        (:class:`rlsim.host.iptables.Firewall`, as on one machine), in the rlsim home
        ``home`` (its id names the chain)."""
        os.environ["RLSIM_HOME"] = home
        from rlsim.host.iptables import Drop, Firewall, Rule

        fw = Firewall(slot, session)
        if verb == "heal":
            fw.heal()
        elif verb == "left":
            return fw.leftover_rules()
        else:  # a drop, or a degraded link's rule (its match and target words)
            getattr(fw, verb)([Rule(tuple(d["match"]), tuple(d["target"])) if "match" in d else
                               Drop(**{**d, "ports": tuple(d["ports"]) if d["ports"] else None})
                               for d in drops])

    def node(self, home: str, session: str, index: int, verb: str, *args):
        """:mod:`rlsim.host.nodeops`'s ``verb`` (reaches, set_paused, throttle_cpu, residue,
        kill, squeeze_memory, lift_memory, cmdlines, signal_some) on node ``index`` of
        ``session`` here, in the rlsim home ``home`` (its id names the node's cgroup)."""
        os.environ["RLSIM_HOME"] = home
        from rlsim.host import nodeops

        if verb not in ("reaches", "set_paused", "throttle_cpu", "residue", "kill",
                        "squeeze_memory", "lift_memory", "cmdlines", "signal_some"):
            raise ValueError(f"{verb!r} is no node verb")
        return getattr(nodeops, verb)(session, index, *args)

    def overlay(self, verb: str, slot: int, *args):
        """:mod:`rlsim.host.overlay`'s ``join`` (this machine's nodes' own addresses and the
        routes to the others') or ``leave`` (what is left of them after) for ``slot``."""
        from rlsim.host import overlay

        if verb == "join":
            own, routes = args
            return overlay.join(slot, {int(i): a for i, a in own.items()}, routes)
        if verb == "leave":
            return overlay.leave(slot)
        raise ValueError(f"{verb!r} is no overlay verb")

    def signal(self, session: str, pid: int, signum: int, refusal: str) -> int:
        """:func:`rlsim.host.nodeops.send_signal` here."""
        from rlsim.host import nodeops

        return nodeops.send_signal(session, pid, signum, refusal)

    def throttle_writes(self, home: str, session: str, indexes: list[int], in_cgroup: bool,
                        device: str, bps: int | None) -> list[str]:
        """:func:`rlsim.host.nodeops.throttle_writes` for this machine's nodes ``indexes``."""
        os.environ["RLSIM_HOME"] = home
        from rlsim.host import nodeops

        return nodeops.throttle_writes(session, indexes, in_cgroup, device, bps)

    def end_session(self, home: str, session: str) -> None:
        """The session's nodes on this machine: what is left of them killed, their cgroups
        removed (:func:`rlsim.host.nodeops.end_session`)."""
        os.environ["RLSIM_HOME"] = home
        from rlsim.host import nodeops

        nodeops.end_session(session)

    def talk(self, key: str, argv: list[str], env: dict[str, str], phase: str, args: dict,
             timeout_s: float) -> dict:
        """The answer of the conversation ``key`` (``argv`` here, started at its first
        question) to ``phase``; RuntimeError saying why none came."""
        from rlsim.host.talk import Talk

        if key not in self._talks:
            self._talks[key] = Talk(argv, timeout_s, {**os.environ, **env})
        return self._talks[key].ask(phase, args)

    def end_talks(self, key: str) -> None:
        """End the conversation ``key``; nothing if there is none."""
        if (talk := self._talks.pop(key, None)) is not None:
            talk.close()

    def start(self, key: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        """Start ``argv`` on this machine under ``key`` (its own process group, ended with this
        host); its pid. A key already running is refused."""
        if key in self._procs and self._procs[key].poll() is None:
            raise ValueError(f"{key!r} is already running here (pid {self._procs[key].pid})")
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)
        self._procs[key] = proc
        return proc.pid

    def start_delayer(self, key: str, argv: list[str], env: dict[str, str],
                      queue: int) -> int:
        """Start a link's delayer (:mod:`rlsim.host.delayer`) under ``key`` and wait until it
        listens on netfilter ``queue`` here; its pid. RuntimeError if it exits first."""
        from rlsim.host import links

        pid = self.start(key, argv, env)
        deadline = time.monotonic() + 30
        while queue not in links.bound_queues():
            if self._procs[key].poll() is not None or time.monotonic() > deadline:
                self.stop([key], 0.0)
                raise RuntimeError(f"the link's delayer (netfilter queue {queue}) did not start "
                                   f"on this machine")
            time.sleep(0.05)
        return pid

    def put(self, files: dict[str, tuple[str, int]]) -> None:
        """Write ``files`` (path -> (text, mode)) on this machine, the folders made (a cluster's
        state and token, where the machines share no file system)."""
        from rlsim.files import write_file

        for path, (text, mode) in files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_file(path, text, mode)

    def running(self) -> dict[str, int]:
        """What this host started and still runs: key -> pid."""
        return {k: p.pid for k, p in self._procs.items() if p.poll() is None}

    def stop(self, keys: list[str] | None = None, grace_s: float = 5.0) -> dict[str, int]:
        """End ``keys`` (all: None) with their whole process groups, SIGTERM then SIGKILL after
        ``grace_s``; key -> exit status."""
        chosen = {k: p for k, p in self._procs.items() if keys is None or k in keys}
        for p in chosen.values():
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in chosen.values():
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()
            _signal_group(p.pid, signal.SIGKILL)  # what the leader left in its group
        for k in chosen:
            del self._procs[k]
        return {k: p.returncode for k, p in chosen.items()}


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def connect(address: str, own_address: bool = False) -> None:
    """This process as a driver of the substrate at ``address`` (``host:port`` of its GCS);
    ``own_address``: from the address that routes there, not the hostname's, where Ray takes it
    (:func:`rlsim.ray_internals.tuning.init_from`, capability driver_address)."""
    import ray

    from rlsim.ray_internals.tuning import init_from

    if not ray.is_initialized():
        mine = init_from(route_to(address)) if own_address else {}
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                 logging_level="ERROR", **mine)


def leave_other(address: str) -> None:
    """End this process's connection to a Ray cluster other than ``address``: a command that
    visits several substrates in turn (`rlsim status`, `rlsim down --all`) would otherwise look
    for the next one's host actors on the first."""
    import ray

    if ray.is_initialized() and getattr(ray.get_runtime_context(), "gcs_address",
                                        None) != address:
        ray.shutdown()


def route_to(address: str) -> str:
    """This machine's address on the way to ``address`` (a UDP socket's choice: nothing sent).
    Ray 2.48 took the hostname's instead, loopback on namespace machines, and the host actors
    this driver owned died at once (their workers could not reach their owner)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address.rsplit(":", 1)[0], 1))
        return s.getsockname()[0]


def hosts(address: str, tag: str = "", detached: bool = False) -> list[tuple[Machine, object]]:
    """One host actor on every alive machine of the substrate at ``address``, in the order of
    the machines' addresses, with what each says of its machine. With a ``tag`` (a cluster's
    session) the hosts are that cluster's: owned by this process, they end with it, and what
    they started with them (a cluster whose owner died leaves nothing on any machine), unless
    ``detached`` (``rlsim cluster --detach``: they live on until ``rlsim down`` ends them).
    Without a tag, they are the substrate's, detached, found by name where they run already."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    connect(address)
    actor = ray.remote(num_cpus=0, max_restarts=0)(Host)
    handles = []
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        on = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        name = f"{HOST_PREFIX}{tag + '-' if tag else ''}{node['NodeID']}"
        handles.append(actor.options(name=name, scheduling_strategy=on, get_if_exists=True,
                                     **({"lifetime": "detached"} if detached or not tag else {})
                                     ).remote())
    return _described(handles)


def cluster_hosts(address: str, tag: str) -> list[tuple[Machine, object]]:
    """The host actors of the cluster ``tag`` (its session) already on the substrate at
    ``address`` (a detached cluster's, for another process), as :func:`hosts` gives them."""
    connect(address)
    return _described(_named(tag))


def _named(tag: str) -> list:
    """The host actors named for ``tag`` (a cluster's session; "" for the substrate's own), those
    that died since the listing left out."""
    import ray

    prefix = f"{HOST_PREFIX}{tag + '-' if tag else ''}"
    found = []
    for name in ray.util.list_named_actors():
        rest = name.removeprefix(prefix)
        if rest == name or (not tag and "-" in rest):  # not ours; a cluster's, not the substrate's
            continue
        with contextlib.suppress(ValueError):  # it died since the listing: and what it ran
            found.append(ray.get_actor(name))
    return found


def _described(handles: list) -> list[tuple[Machine, object]]:
    """Each host with what it says of its machine, in the order of the machines' addresses."""
    import ray

    infos = ray.get([h.machine.remote() for h in handles])
    found = [(Machine(**info), h) for info, h in zip(infos, handles, strict=True)]
    return sorted(found, key=lambda mh: tuple(int(p) for p in mh[0].address.split(".")))


def release(address: str, tag: str = "") -> dict[str, dict[str, int]]:
    """End everything the hosts (of ``tag``, or the substrate's own) started, then the hosts;
    machine address -> what ended there (key -> exit status)."""
    import ray

    connect(address)
    ended = {}
    for handle in _named(tag):
        try:
            where = ray.get(handle.machine.remote())["address"]
            ended[where] = ray.get(handle.stop.remote())
        except ray.exceptions.RayActorError:  # it, or its machine, is gone: and what it ran
            pass
        ray.kill(handle)
    return ended
