"""One cgroup (v2) per simulated node: the node's identity for kill, freeze and network rules.

Why cgroups and not pids or environment labels: every process a node forks (raylet, its agents,
the Ray workers) stays in the node's cgroup whatever it does to its title or environment;
``cgroup.kill`` and ``cgroup.freeze`` act on all of them atomically; and iptables' ``cgroup`` match
picks a node's outgoing packets, which on loopback all leave from 127.0.0.1, not from the node's
address. Needs root and a writable cgroup2 hierarchy (pure v2 or the hybrid ``unified`` mount);
:func:`available` says why not otherwise, and callers fall back to environment labels.

Layout: ``<cgroup2 mount>/rlsim/<session>/n<index>``; iptables paths are relative to the mount.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import lru_cache
from pathlib import Path

TOP = "rlsim"


@lru_cache(maxsize=1)
def mount() -> Path | None:
    """The cgroup2 mount point, or None."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def available() -> str | None:
    """None when node cgroups can be made here, else the reason."""
    m = mount()
    if m is None:
        return "no cgroup2 hierarchy is mounted"
    if os.geteuid() != 0 or not os.access(m, os.W_OK):
        return f"cgroup2 at {m} is not writable (run as root)"
    if not (m / "cgroup.kill").exists() and not _probe_kill(m):
        return "this kernel has no cgroup.kill (needs Linux 5.14+)"
    return None


def _probe_kill(m: Path) -> bool:
    probe = m / TOP
    probe.mkdir(exist_ok=True)
    return (probe / "cgroup.kill").exists()


class NodeGroup:
    """The cgroup of node ``index`` of cluster session ``session``."""

    def __init__(self, session: str, index: int) -> None:
        self.session = session
        self.index = index

    @property
    def rel(self) -> str:
        """Path relative to the cgroup2 root, as iptables ``-m cgroup --path`` wants it."""
        return f"{TOP}/{self.session}/n{self.index}"

    @property
    def path(self) -> Path:
        m = mount()
        if m is None:
            raise RuntimeError("no cgroup2 hierarchy is mounted")
        return m / self.rel

    def enter(self) -> None:
        """Move the calling process into this cgroup (its later children are born there)."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return sorted(int(p) for p in text.split())

    def kill(self, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process of the node (frozen ones too) and wait until none is left."""
        pids = self.pids()
        if not self.path.exists():
            return []
        (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + timeout
        while self.pids():
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes of {self.rel} survive cgroup.kill: {self.pids()}")
            time.sleep(0.02)
        return pids

    def set_frozen(self, frozen: bool) -> list[int]:
        """Freeze (pause) or thaw the node; returns its pids. Thawing a thawed node is a no-op."""
        if self.path.exists():
            (self.path / "cgroup.freeze").write_text("1" if frozen else "0")
        return self.pids()


def remove_session(session: str) -> None:
    """Kill what is left in the session's cgroups and remove them. Safe when absent."""
    m = mount()
    if m is None:
        return
    top = m / TOP / session
    if not top.exists():
        return
    for child in sorted(top.glob("n*")):
        group = NodeGroup(session, int(child.name[1:]))
        with contextlib.suppress(OSError):
            group.set_frozen(False)
            group.kill()
    # Exited processes keep a cgroup busy (EBUSY) until they are reaped: retry briefly.
    deadline = time.monotonic() + 5.0
    for d in [*sorted(top.glob("n*")), top]:
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def sessions() -> list[str]:
    """Sessions that still have a cgroup directory (for the reaper)."""
    m = mount()
    if m is None or not (m / TOP).exists():
        return []
    return sorted(p.name for p in (m / TOP).iterdir() if p.is_dir())
