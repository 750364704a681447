"""What is done to one node of a cluster on the machine it runs on: the same for the local
backend (every node on this machine) and a substrate's host actors (each machine's node,
:mod:`rlsim.backends.substrate.hosts`). A node is its session's cgroup ``n<index>`` where the
machine has rlsim's cgroups (:mod:`rlsim.host.cgroups`), else its labelled processes
(:mod:`rlsim.host.procs`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from rlsim.host import cgroups, procs, squeeze


def reaches(session: str, index: int, address: str, port: int, in_cgroup: bool) -> bool:
    """Can a process of node ``index`` open a TCP connection to ``address``:``port``? (From
    inside the node's cgroup where it has one, so the node's firewall rules apply to it.)"""
    enter = ""
    if in_cgroup:
        procs_file = str(cgroups.NodeGroup(session, index).path / "cgroup.procs")
        enter = f"open({procs_file!r}, 'w').write(str(__import__('os').getpid()));"
    code = (enter + "import socket,sys;s=socket.socket();s.settimeout(1.5);"
            f"sys.exit(s.connect_ex(({address!r}, {port})))")
    return subprocess.run([sys.executable, "-c", code], timeout=10).returncode == 0


def in_node(session: str, index: int, cmd: list[str]) -> list[str]:
    """``cmd`` as a process of node ``index`` here (in its cgroups, with its labels)."""
    return [sys.executable, "-m", "rlsim.backends.in_node", session, str(index), *cmd]


def pids(session: str, index: int, in_cgroup: bool) -> list[int]:
    """Node ``index``'s processes: its cgroup's, or its labelled ones without cgroups."""
    if in_cgroup:
        return cgroups.NodeGroup(session, index).pids()
    return procs.find(session, index)


def throttle_writes(session: str, indexes, in_cgroup: bool, device: str,
                    bps: int | None) -> list[str]:
    """Cap writes to ``device`` at ``bps`` (None lifts it) in the I/O cgroups the processes of
    nodes ``indexes`` write from: the nodes' only, never the cgroup of a process of the session
    that belongs to no node (a zygote, a link's delayer: they live in the harness's group, whose
    writes would be capped too); the groups written."""
    found = [pid for index in indexes for pid in pids(session, index, in_cgroup)]
    return cgroups.throttle_writes(device, bps, cgroups.io_groups_of(found))


def cmdlines(session: str, index: int, in_cgroup: bool) -> dict[int, list[str]]:
    """The command line (argv, as the process may have rewritten it: its title) of each process
    of node ``index``."""
    found = {}
    for pid in pids(session, index, in_cgroup):
        with contextlib.suppress(OSError):  # it ended meanwhile
            raw = (procs.PROC / str(pid) / "cmdline").read_bytes()
            found[pid] = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return found


def signal_some(session: str, index: int, in_cgroup: bool, chosen: list[int],
                signum: int) -> list[int]:
    """Send ``signum`` to those of ``chosen`` that are still processes of node ``index``;
    the pids signalled (one gone meanwhile is skipped, never the others)."""
    alive = set(pids(session, index, in_cgroup))
    return procs.signal_all([pid for pid in chosen if pid in alive], signum)


def kill(session: str, index: int, in_cgroup: bool) -> list[int]:
    """SIGKILL every process of node ``index`` and wait until they are gone: its cgroup (what
    left the node's process group too: a forked agent, a resource tracker), or its labelled
    processes, thawed first, without cgroups; the pids."""
    if in_cgroup:
        return cgroups.NodeGroup(session, index).kill()
    procs.signal_all(procs.find(session, index), signal.SIGCONT)
    return procs.kill_and_wait(session, index)


def send_signal(session: str, pid: int, signum: int, refusal: str) -> int:
    """Send ``signum`` to ``pid`` if it is a process of ``session`` (its label), never another
    home's or the machine's; else ProcessLookupError with ``refusal`` (the caller's words)."""
    if pid not in procs.find(session):
        raise ProcessLookupError(refusal)
    os.kill(pid, signum)
    return pid


def end_session(session: str) -> None:
    """What is left of the session's nodes on this machine killed, their cgroups removed, the
    session's other processes here (a substrate machine's zygotes) killed, and its run directory
    (the nodes' Ray temp dirs, the zygotes' sockets and logs) removed from this machine's home."""
    from rlsim.host import state

    cgroups.remove_session(session)
    procs.kill_and_wait(session)
    state.remove_run_dir(session)


def set_paused(session: str, index: int, paused: bool, in_cgroup: bool) -> list[int]:
    """Freeze (or thaw) node ``index``: its cgroup (atomic, covers processes forked meanwhile),
    or SIGSTOP (SIGCONT) to each labelled process without cgroups; the pids."""
    if in_cgroup:
        return cgroups.NodeGroup(session, index).set_frozen(paused)
    return procs.signal_all(procs.find(session, index), signal.SIGSTOP if paused
                            else signal.SIGCONT)


def throttle_cpu(session: str, index: int, cores: float | None) -> dict[str, float] | None:
    """Cap node ``index``'s cgroup at ``cores`` (None lifts it); its throttling counters."""
    group = cgroups.NodeGroup(session, index).cpu()
    group.set_limit(cores)
    return group.throttled()


def residue(session: str, index: int) -> list[str]:
    """What faults left on node ``index``'s cgroup: frozen, a memory cap, a CPU quota."""
    group = cgroups.NodeGroup(session, index)
    found = []
    if group.frozen():
        found.append(f"node {index} is frozen")
    if group.memory().limited():
        found.append(f"node {index} has a memory cap")
    with contextlib.suppress(RuntimeError):  # a host without a CPU controller
        if group.cpu().limit() is not None:
            found.append(f"node {index} has a CPU quota")
    return found


def squeeze_memory(session: str, index: int, mb: int) -> dict:
    """Node ``index``'s memory cgroup squeezed until the kernel's OOM killer takes a victim
    (:func:`rlsim.host.squeeze.squeeze`), the hog run inside the node; what happened."""
    argv = in_node(session, index, squeeze.hog(mb))
    refusal = f"the hog of node {index} is gone"
    return squeeze.squeeze(cgroups.NodeGroup(session, index).memory(), argv, mb,
                             lambda pid: send_signal(session, pid, signal.SIGKILL, refusal))


def lift_memory(session: str, index: int) -> None:
    """End node ``index``'s memory cap; nothing where its cgroup is gone (safe twice)."""
    with contextlib.suppress(OSError, RuntimeError):
        squeeze.lift(cgroups.NodeGroup(session, index).memory())
