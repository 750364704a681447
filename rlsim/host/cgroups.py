"""One cgroup (v2) per simulated node: the node's identity for kill, freeze and network rules.

Why cgroups and not pids or environment labels: every process a node forks (raylet, its agents,
the Ray workers) stays in the node's cgroup whatever it does to its title or environment;
``cgroup.kill`` and ``cgroup.freeze`` act on all of them atomically; and iptables' ``cgroup`` match
picks a node's outgoing packets, which on loopback all leave from 127.0.0.1, not from the node's
address. Needs root and a writable cgroup2 hierarchy (pure v2 or the hybrid ``unified`` mount);
:func:`available` says why not otherwise, and callers fall back to environment labels.

Layout: ``<cgroup2 mount>/rlsim/<home id>.<session>/n<index>``; iptables paths are relative to the
mount.

Memory: a node's memory is accounted (and can be capped, see ``host_oom``) in the node's own group
from its first process on. On cgroup2 hosts with the memory controller that is the same group; on
hybrid hosts (v1 memory, cgroup2 without controllers, as on the development machine) a twin group
``<v1 memory>/<our memory cgroup>/rlsim/<home id>.<session>/n<index>`` is entered too. It nests
under the caller's memory cgroup so a sandbox's limit still holds. v1 cannot move charges of running
processes, which is why nodes are born in it rather than moved there later.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import lru_cache
from pathlib import Path

from rlsim.host.home import home_id

TOP = "rlsim"


def _mount_point(fstype: str, option: str | None = None) -> Path | None:
    """Where the first filesystem of ``fstype`` (with mount ``option``) is mounted, or None."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for parts in map(str.split, lines):
        if len(parts) > 3 and parts[2] == fstype and (
                option is None or option in parts[3].split(",")):
            return Path(parts[1])
    return None


@lru_cache(maxsize=1)
def mount() -> Path | None:
    """The cgroup2 mount point, or None."""
    return _mount_point("cgroup2")


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


def memory_v1_base_mount() -> Path | None:
    """Where the v1 memory hierarchy is mounted, or None."""
    return _mount_point("cgroup", "memory")


def memory_v1_base() -> Path | None:
    """The v1 memory directory that rlsim's node groups nest under (hybrid hosts), or None."""
    return v1_base("memory")


@lru_cache(maxsize=4)
def v1_base(controller: str) -> Path | None:
    """The v1 directory of ``controller`` (memory, cpu) that rlsim's node groups nest under on
    hybrid hosts, whose cgroup2 lacks that controller, or None."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mnt = _mount_point("cgroup", controller)
    rel = next((line.split(":", 2)[2] for line in own
                if controller in line.split(":", 2)[1].split(",")), None)
    if mnt is None or rel is None or not os.access(mnt, os.W_OK):
        return None
    # A process already inside a node group (the launcher, the hog) nests from the same base.
    rel = rel.split(f"/{TOP}/", 1)[0].strip("/")
    return mnt / rel if rel else mnt


class NodeGroup:
    """The cgroup of node ``index`` of cluster session ``session``."""

    def __init__(self, session: str, index: int) -> None:
        self.session = session
        self.index = index

    @property
    def rel(self) -> str:
        """Path relative to the cgroup2 root, as iptables ``-m cgroup --path`` wants it."""
        return f"{TOP}/{session_dir(self.session)}/n{self.index}"

    @property
    def path(self) -> Path:
        m = mount()
        if m is None:
            raise RuntimeError("no cgroup2 hierarchy is mounted")
        return m / self.rel

    def _v1(self, controller: str) -> Path | None:
        """The node's twin v1 group of ``controller``, on hosts whose cgroup2 lacks it."""
        base = v1_base(controller)
        if base is None or controller in _controllers():
            return None
        return base / self.rel

    @property
    def memory_v1(self) -> Path | None:
        return self._v1("memory")

    @property
    def cpu_v1(self) -> Path | None:
        return self._v1("cpu")

    def enter(self, create: bool = True) -> None:
        """Move the calling process into this cgroup (its later children are born there).
        ``create=False``: only into groups that exist (FileNotFoundError where the node's
        groups are gone: its cluster ended)."""
        for d in filter(None, [self.path, self.memory_v1, self.cpu_v1]):
            if create:
                d.mkdir(parents=True, exist_ok=True)
            (d / "cgroup.procs").write_text(str(os.getpid()))

    # ---- memory --------------------------------------------------------------------------------

    def memory(self) -> MemoryGroup:
        """The node's memory accounting: this group on cgroup2 with the memory controller, else
        its v1 twin. Raises naming the fix when there is neither."""
        if (self.path / "memory.max").exists():
            return MemoryGroup(self.path)
        v1 = self.memory_v1
        if v1 is not None and (v1 / "memory.limit_in_bytes").exists():
            return MemoryGroup(v1)
        raise RuntimeError(
            f"node group {self.rel} has no memory accounting: enable the memory controller "
            "in cgroup.subtree_control on the cgroup2 mount, or mount the v1 memory hierarchy"
        )

    def cpu(self) -> CpuGroup:
        """The node's CPU quota: this group on cgroup2 with the cpu controller, else its v1 twin.
        Raises naming the fix when there is neither."""
        if (self.path / "cpu.max").exists():
            return CpuGroup(self.path)
        v1 = self.cpu_v1
        if v1 is not None and (v1 / "cpu.cfs_quota_us").exists():
            return CpuGroup(v1)
        raise RuntimeError(
            f"node group {self.rel} has no CPU quota: enable the cpu controller in "
            "cgroup.subtree_control on the cgroup2 mount, or mount the v1 cpu hierarchy"
        )

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

    def frozen(self) -> bool:
        knob = self.path / "cgroup.freeze"
        return knob.exists() and knob.read_text().strip() == "1"

    def set_frozen(self, frozen: bool) -> list[int]:
        """Freeze (pause) or thaw the node; returns its pids. Thawing a thawed node is a no-op."""
        if self.path.exists():
            (self.path / "cgroup.freeze").write_text("1" if frozen else "0")
        return self.pids()


class MemoryGroup:
    """A memory cgroup, v1 or v2 (a node group here, a container's group in the docker backend)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.v2 = (path / "memory.max").exists()

    def usage(self) -> int:
        """Bytes its processes use now (anonymous memory and page cache)."""
        return int((self.path / ("memory.current" if self.v2 else "memory.usage_in_bytes"))
                   .read_text())

    def set_limit(self, limit: int | None) -> None:
        """Cap it at ``limit`` bytes, or lift the cap (None)."""
        knob = "memory.max" if self.v2 else "memory.limit_in_bytes"
        (self.path / knob).write_text(("max" if self.v2 else "-1") if limit is None
                                      else str(limit))

    def limited(self) -> bool:
        """Whether a cap is set (a v1 group without one reads as a huge number)."""
        knob = "memory.max" if self.v2 else "memory.limit_in_bytes"
        value = (self.path / knob).read_text().strip()
        return value != "max" and (self.v2 or int(value) < 1 << 60)

    def pids(self) -> list[int]:
        try:
            return sorted(int(p) for p in (self.path / "cgroup.procs").read_text().split())
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in it."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0


PERIOD_US = 100_000  # the CFS period of a quota: the kernel's default, 100 ms


def cpu_quota(cores: float | None) -> int | None:
    """Microseconds of CPU per period for ``cores`` cores (None: no quota); the kernel's least
    quota is 1 ms."""
    return None if cores is None else max(1000, round(cores * PERIOD_US))


class CpuGroup:
    """A cgroup's CPU quota (CFS bandwidth), v1 or v2: at most ``cores`` cores' worth of time for
    every process of the group together."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.v2 = (path / "cpu.max").exists()

    def set_limit(self, cores: float | None) -> None:
        """Cap it at ``cores`` CPU cores (0.2: a fifth of one), or lift the cap (None)."""
        quota = cpu_quota(cores)
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota or 'max'} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(-1 if quota is None else quota))

    def throttled(self) -> dict[str, float] | None:
        """How often its quota held it back so far: ``{"periods", "seconds"}`` (the kernel's
        ``nr_throttled`` and throttled time, cumulative), or None where unreadable."""
        return throttle_counts(self.path)

    def limit(self) -> float | None:
        """The cores it is capped at, or None."""
        if self.v2:
            quota, period = (self.path / "cpu.max").read_text().split()
        else:
            quota = (self.path / "cpu.cfs_quota_us").read_text().strip()
            period = (self.path / "cpu.cfs_period_us").read_text().strip()
        return None if quota in ("max", "-1") else int(quota) / int(period)


def throttle_counts(group: Path) -> dict[str, float] | None:
    """A CPU cgroup's throttling so far (``cpu.stat``: v2's ``nr_throttled``/``throttled_usec``,
    v1's ``nr_throttled``/``throttled_time`` in ns), or None where unreadable."""
    try:
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    except (OSError, ValueError):
        return None
    seconds = int(stat["throttled_usec"]) / 1e6 if "throttled_usec" in stat else \
        int(stat.get("throttled_time", 0)) / 1e9
    return {"periods": int(stat.get("nr_throttled", 0)), "seconds": round(seconds, 3)}


def cpu_group_of(pid: int) -> Path | None:
    """The CPU cgroup folder of a process (a container's main process: its container's): v2's
    unified group, or v1's cpu controller's; None where it has none."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for base in (Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/cpu")):
                if (base / rel.lstrip("/") / "cpu.stat").exists():
                    return base / rel.lstrip("/")
    m = mount()
    rel = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if m is None or rel is None or not (m / rel.lstrip("/") / "cpu.stat").exists():
        return None
    return m / rel.lstrip("/")


def memory_group_of(pid: int) -> MemoryGroup:
    """The memory cgroup a process is in (v2 if it has the controller, else v1)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = memory_v1_base_mount()
            if base is not None:
                return MemoryGroup(base / rel.lstrip("/"))
    m = mount()
    rel = next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
    if m is None or not (m / rel.lstrip("/") / "memory.max").exists():
        raise RuntimeError(f"process {pid} has no memory cgroup this host can cap")
    return MemoryGroup(m / rel.lstrip("/"))


def _controllers() -> set[str]:
    m = mount()
    try:
        return set((m / TOP / "cgroup.subtree_control").read_text().split()) if m else set()
    except OSError:
        return set()


def _node_dirs(top: Path) -> list[Path]:
    """The ``n<index>`` group directories of a session (v1 groups also hold files there)."""
    if not top.is_dir():
        return []
    return sorted(d for d in top.iterdir() if d.name[1:].isdigit() and d.is_dir())


def remove_session(session: str) -> None:
    """Kill what is left in the session's cgroups and remove them. Safe when absent."""
    m = mount()
    if m is None:
        return
    top = m / TOP / session_dir(session)
    v1_tops = [base / TOP / session_dir(session)
               for base in (v1_base("memory"), v1_base("cpu")) if base is not None]
    if not top.exists() and not any(t.exists() for t in v1_tops):
        return
    for child in _node_dirs(top):
        group = NodeGroup(session, int(child.name[1:]))
        with contextlib.suppress(OSError):
            group.set_frozen(False)
            group.kill()
    # Exited processes keep a cgroup busy (EBUSY) until they are reaped: retry briefly.
    deadline = time.monotonic() + 5.0
    dirs = [*_node_dirs(top), top]
    for v1_top in v1_tops:
        dirs += [*_node_dirs(v1_top), v1_top]
    for d in dirs:
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


def session_dir(session: str) -> str:
    """The cgroup directory of a session under ``rlsim/``: named by the home's id and the
    session, so that a reaper of another home never touches it."""
    return f"{home_id()}.{session}"


def sessions() -> list[str]:
    """This home's sessions that still have a cgroup directory, v2 or v1 memory (the reaper)."""
    tops = [base / TOP for base in (mount(), v1_base("memory"), v1_base("cpu"))
            if base is not None]
    mine = f"{home_id()}."
    return sorted({p.name.removeprefix(mine) for top in tops if top.exists()
                   for p in top.iterdir() if p.is_dir() and p.name.startswith(mine)})


# ---- block I/O: a device's writes throttled (the slow_storage fault) ---------------------------
# v1 blkio throttling is not hierarchical: a rule binds the writes of the group it is written in
# only. So the rule goes into every group that writes to the device: each cluster process's own,
# and the top (the kernel's flusher threads write back dirty pages from there). On cgroup2 the
# kernel charges write-back to the group that dirtied the pages, and io.max on the node's group
# binds it.


def bytes_per_s(mbps: float | None) -> int | None:
    """MB/s (10^6 bytes, as disks are rated) as bytes a second; None stays None."""
    return None if mbps is None else max(1, round(mbps * 1e6))


def write_throttle_rule(device: str, bps: int | None, v2: bool) -> str:
    """The line that caps (``bps`` bytes a second) or frees (None) writes to ``device``
    (``major:minor``): v1 ``blkio.throttle.write_bps_device`` or cgroup2 ``io.max``."""
    if v2:
        return f"{device} wbps={bps if bps else 'max'}"
    return f"{device} {bps or 0}"


def io_groups_of(pids: list[int]) -> list[Path]:
    """The I/O cgroups (v1 blkio where mounted, else cgroup2) that ``pids`` write from, and the
    hierarchy's top; each once."""
    blkio = _mount_point("cgroup", "blkio")
    top = blkio or mount()
    if top is None:
        raise RuntimeError("throttling a device's writes needs the blkio (v1) or io (cgroup2) "
                           "controller, and neither hierarchy is mounted here")
    found = [top] if blkio else []
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue  # gone meanwhile
        for line in lines:
            _, controllers, rel = line.split(":", 2)
            if (blkio and "blkio" in controllers.split(",")) or (not blkio and controllers == ""):
                group = top / rel.lstrip("/")
                if group not in found:
                    found.append(group)
    return found


def throttle_writes(device: str, bps: int | None, groups: list[Path]) -> list[str]:
    """Cap writes to ``device`` at ``bps`` in each of ``groups`` (None lifts the cap); returns
    the groups written, to lift it from the same ones."""
    done = []
    for group in groups:
        v2 = not (group / "blkio.throttle.write_bps_device").exists()
        knob = group / ("io.max" if v2 else "blkio.throttle.write_bps_device")
        if not knob.exists():
            if bps is None:
                continue  # gone meanwhile (a container stopped): nothing to lift
            raise RuntimeError(f"{group} has no {knob.name}: enable the io controller for it "
                               "(cgroup2: +io in its parent's cgroup.subtree_control)")
        try:
            knob.write_text(write_throttle_rule(device, bps, v2))
        except FileNotFoundError:
            continue
        done.append(str(group))
    return done


def write_limit(device: str, group: Path) -> int | None:
    """The write cap on ``device`` in ``group`` (bytes a second), or None."""
    for name, v2 in (("blkio.throttle.write_bps_device", False), ("io.max", True)):
        with contextlib.suppress(OSError):
            for line in (group / name).read_text().splitlines():
                dev, *rest = line.split()
                if dev != device:
                    continue
                if v2:
                    vals = dict(kv.split("=") for kv in rest)
                    return None if vals.get("wbps", "max") == "max" else int(vals["wbps"])
                return int(rest[0]) or None
    return None
