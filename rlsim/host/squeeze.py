"""A node squeezed out of memory until the kernel's OOM killer takes a victim there (the
mechanics of the ``host_oom`` fault, whose text says why each step is so), run on the machine
the node is on: by the local and docker backends for their nodes, by a substrate's host actor
for the nodes of its machine.

The node's memory cgroup is capped at what it uses plus ``START_HEADROOM``; a hog started inside
the node (``python -m rlsim.faults._hog MB``) then takes ``mb`` MiB more; once the kernel has
killed (or ``KILL_WAIT_S`` passed) the hog is killed too. The cap stays: ``lift`` ends it.
"""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HOG_START_S = 30.0
KILL_WAIT_S = 5.0
# Room for the hog's own start (python, ~15 MiB) above what the node uses: capped at usage exactly,
# merely starting it made the kernel kill before the hog had marked itself (see
# rlsim.faults._hog), and the second victim then was the dashboard agent (dmesg).
START_HEADROOM = 32 * 2**20


def hog(mb: int) -> list[str]:
    """The hog's command line (run it as a process of the node)."""
    return [sys.executable, "-m", "rlsim.faults._hog", str(mb)]


def squeeze(memory, argv: list[str], mb: int, kill: Callable[[int], object]) -> dict:
    """Cap ``memory`` (a :class:`rlsim.host.cgroups.MemoryGroup`) at its usage plus the start
    room, run ``argv`` (the hog of ``mb`` MiB as a process of the node), wait for the kernel's
    kill, stop the hog (``kill``: its pid as the node sees it); what happened, as data."""
    before = {pid: _cmdline(pid) for pid in memory.pids()}
    kills = memory.oom_kills()
    limit = memory.usage() + START_HEADROOM
    memory.set_limit(limit)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    pid = None
    try:  # the hog never outlives this call, whatever ends it (a Ctrl-C in the wait too)
        pid = _wait_held(proc)
        deadline = time.monotonic() + KILL_WAIT_S
        while memory.oom_kills() == kills and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the victim may take a moment to be reaped after the kernel's SIGKILL
        gone = sorted(set(before) - set(memory.pids()))
        said = "held, then let go" if pid else f"exited {proc.returncode}"
    finally:
        if pid is not None:
            with contextlib.suppress(Exception):  # the node (and the hog) may be gone
                kill(pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return {"limit_mb": round(limit / 2**20), "hog_mb": mb, "hog": said,
            "oom_kills": memory.oom_kills() - kills,
            "killed": [f"{p} {before[p]}" for p in gone]}


def lift(memory) -> None:
    """End the cap; nothing if the node's cgroup is gone (safe twice)."""
    with contextlib.suppress(OSError, RuntimeError):
        memory.set_limit(None)


def _wait_held(proc: subprocess.Popen) -> int | None:
    """The hog's pid (as its node sees it) once it holds its memory; None if it died."""
    ready, _, _ = select.select([proc.stdout], [], [], HOG_START_S)
    words = (proc.stdout.readline() if ready else "").split()
    if words[:1] == ["held"] and len(words) == 4 and words[3].isdigit():
        return int(words[3])
    if proc.poll() is None:  # neither holding nor dead: do not leave it half-way
        proc.kill()
    proc.wait()
    return None


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120].strip()
    return "?"
