"""An exclusive ``flock`` waited on with a bound, and who holds it when the bound passes.

A lock any other process could open may be held by it for ever (a shared ``flock`` taken by
another user on a file that was once readable to all): a blocking ``flock`` would hang whoever
waits. :func:`hold_exclusive` polls instead, and past its bound raises :class:`Held` naming the
holder as ``/proc/locks`` shows it, so the caller's refusal can say whom to stop. Used by the
machine-wide slot claims (:mod:`rlsim.host.slots`) and the home's shared zygote
(:mod:`rlsim.backends.zygote_guard`): the standard library only, since the zygote imports this
before it forks its workers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import time
from pathlib import Path

PROC = Path("/proc")
FIRST_PAUSE_S = 0.005  # a lock is usually free again within milliseconds
LONGEST_PAUSE_S = 0.1  # so a lock freed late is taken within a tenth of a second


class Held(TimeoutError):
    """The lock stayed held past the wait; ``holder`` names who holds it, ``waited_s`` how long
    was waited. The caller says what the lock is and the fix."""

    def __init__(self, holder: str, waited_s: float) -> None:
        super().__init__(f"held for over {waited_s:g} s by {holder}")
        self.holder = holder
        self.waited_s = waited_s


def hold_exclusive(fd: int, wait_s: float) -> None:
    """Take an exclusive ``flock`` on ``fd``, polling (never a blocking wait) for ``wait_s``
    seconds; :class:`Held` naming the holder past that. Returns holding it; the lock goes with
    the descriptor's last close."""
    deadline = time.monotonic() + wait_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Held(holder(os.fstat(fd)), wait_s) from None
            time.sleep(pause)  # a poll: a lock held for ever must not hang us
            pause = min(pause * 2, LONGEST_PAUSE_S)


def holder(st: os.stat_result) -> str:
    """Who holds a lock on the file ``st`` describes, as ``/proc/locks`` tells it:
    ``pid N (user: command)``."""
    dev = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open(PROC / "locks", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # "->": a waiter, not a holder
            continue
        with contextlib.suppress(ValueError):
            maj, mnr, ino = parts[5].split(":")
            if (int(maj, 16), int(mnr, 16), int(ino)) == dev:
                return process(int(parts[4]))
    return "a process /proc/locks does not show (another PID namespace?)"


def process(pid: int) -> str:
    """``pid N (user: command)``, as far as /proc shows it (``pid N`` when it shows nothing)."""
    uid = process_uid(pid)
    try:
        with open(PROC / str(pid) / "cmdline", "rb") as f:
            cmd = f.read(120).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    if uid is None:
        return f"pid {pid}"
    cmd = "".join(c if c.isprintable() else "?" for c in cmd)
    return f"pid {pid} ({user_name(uid)}: {cmd or '?'})"


def process_uid(pid: int) -> int | None:
    """The effective uid of ``pid`` (from its status: /proc/PID itself is root's once a process
    changed its uid), None when /proc does not show it."""
    try:
        with open(PROC / str(pid) / "status", "rb") as f:
            status = f.read(1 << 16)
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"Uid:") and len(fields := line.split()) > 2:
            return int(fields[2])
    return None


def user_name(uid: int) -> str:
    """The login name of ``uid``, or ``uid N`` when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"
