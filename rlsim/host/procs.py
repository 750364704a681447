"""Find and signal the processes of a simulated node by the labels in their environment.

Every process rlsim starts (GCS, raylet, dashboard, agents, and the Ray workers the raylet forks)
inherits ``RLSIM_SESSION``, ``RLSIM_HOME_ID`` and ``RLSIM_NODE``. Matching on the environment
rather than on a pid tree matters: when a raylet dies its agents are re-parented and live on, and
a reaper run after a crash has no tree to walk. Nothing here matches a process that rlsim did not
label, or that another rlsim home labelled (another user's, another CI job's).

A worker forked by a zygote that a home's clusters share (:mod:`rlsim.backends.zygote`) carries
that zygote's environment, with no session in it, and :data:`ZYGOTE_HOME_VAR`: its session and node
are read from the node cgroup it moved into (``rlsim/<home id>.<session>/n<index>``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from rlsim.host.cgroups import TOP as CGROUP_TOP
from rlsim.host.home import home_id

SESSION_VAR = "RLSIM_SESSION"
HOME_VAR = "RLSIM_HOME_ID"  # the home that started it: a reaper acts on its own home's only
NODE_VAR = "RLSIM_NODE"
ZYGOTE_HOME_VAR = "RLSIM_ZYGOTE_HOME"  # a shared zygote's, and its forked workers': the home id
PROC = Path("/proc")


def labels(session: str) -> dict[str, str]:
    """The environment labels of every process a cluster session starts: its session and its
    home's id (:func:`rlsim.host.home.home_id`); found, and killed, only by both."""
    return {SESSION_VAR: session, HOME_VAR: home_id()}


def _labels(pid: int) -> dict[str, str] | None:
    """The rlsim labels of ``pid``, or None if it has none of this home, or is gone."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    if SESSION_VAR.encode() not in raw:
        if f"{ZYGOTE_HOME_VAR}={home_id()}\0".encode() in raw + b"\0":
            return _cgroup_labels(pid)
        return None
    found = {}
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in (SESSION_VAR.encode(), NODE_VAR.encode(), HOME_VAR.encode()):
            found[key.decode()] = value.decode(errors="replace")
    # another home's process (another user's, another CI job's) is never this home's
    return found if SESSION_VAR in found and found.get(HOME_VAR) == home_id() else None


def _cgroup_labels(pid: int) -> dict[str, str] | None:
    """The labels of a process in one of this home's node cgroups, read from the group's path;
    None for one outside them (a shared zygote itself, or a worker not yet moved)."""
    try:
        lines = (PROC / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    mine = f"/{CGROUP_TOP}/{home_id()}."
    for line in lines:
        path = line.split(":", 2)[-1]
        if mine in path:
            session, _, node = path.split(mine, 1)[1].partition("/")
            if node[:1] == "n" and node[1:].isdigit():
                return {SESSION_VAR: session, NODE_VAR: node[1:], HOME_VAR: home_id()}
    return None


def _state(pid: int) -> str | None:
    """The process's state letter in /proc (R, S, T, Z, ...), None if it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def _is_zombie(pid: int) -> bool:
    return _state(pid) in (None, "Z")


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP: a node paused without cgroups)."""
    return _state(pid) == "T"


def owners() -> dict[int, int]:
    """Every process on this machine, with the user id that owns it (its ``/proc`` entry's)."""
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = entry.stat().st_uid
            except OSError:  # it ended meanwhile
                continue
    return found


def find(session: str | None = None, node: int | None = None) -> list[int]:
    """Live (non-zombie) pids of this home labelled with ``session`` (any rlsim session if None)
    and ``node``."""
    me = os.getpid()
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        labels = _labels(int(entry.name))
        if labels is None:
            continue
        if session is not None and labels[SESSION_VAR] != session:
            continue
        if node is not None and labels.get(NODE_VAR) != str(node):
            continue
        if not _is_zombie(int(entry.name)):
            pids.append(int(entry.name))
    return sorted(pids)


def sessions() -> set[str]:
    """Every rlsim session of this home that still has a live process on this machine."""
    found = set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            labels = _labels(int(entry.name))
            if labels and not _is_zombie(int(entry.name)):
                found.add(labels[SESSION_VAR])
    return found


def signal_all(pids: Iterable[int], sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each pid; returns the pids it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached.append(pid)
        except ProcessLookupError:
            pass
    return reached


def kill_and_wait(session: str, node: int | None = None, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of ``session`` (one node, or all) until none is left.

    Repeats the scan because a dying raylet may fork a worker between scans. Raises TimeoutError
    listing the survivors after ``timeout`` seconds.
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        pids = find(session, node)
        if not pids:
            return killed
        killed += signal_all(pids, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"processes of rlsim session {session} (node {node}) survive SIGKILL: {pids}"
            )
        time.sleep(0.05)


def wait_gone(pids: Iterable[int], timeout: float = 10.0) -> list[int]:
    """Wait until each of ``pids`` has exited (or is a zombie); SIGKILL what is left at
    ``timeout``. Returns the pids that had to be killed."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if (PROC / str(p)).exists() and not _is_zombie(p)]
        if left:
            time.sleep(0.05)
    return signal_all(left, signal.SIGKILL)

