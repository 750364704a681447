"""Slots claimed machine-wide, across users and rlsim homes.

A cluster's slot (:mod:`rlsim.host.layout`) gives it addresses and ports of its own. The home's
registry (:mod:`rlsim.host.state`) knows only the home's own clusters: two homes (two users, two CI
jobs with their own ``RLSIM_HOME``) both picked slot 0, and the second head's raylet joined the
first cluster's GCS. A slot is therefore free only when

- no live *claim* names it: a file ``<slot>.<uid>.<session>`` in :data:`CLAIMS`, a sticky directory
  every user may write (as ``/tmp`` itself), written while :func:`lock` is held, so that two starts
  at once, of any users, never pick the same slot; a claim lives while the process that made it
  does (the same pid and start time), or while anything listens in its slot;
- and nothing listens on the slot's addresses or in its port block (:mod:`rlsim.host.listeners`):
  whatever made no claim (an older rlsim, another program) still keeps its ports.

A claim is removed with its cluster's state file (:func:`release`); one left by a crash is stale
once its process is gone and nothing listens in its slot: its owner removes it at its next start,
another user's is passed over (the sticky bit keeps it theirs).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlsim.host import listeners
from rlsim.host.layout import ADDRESS_PREFIX, MAX_SLOTS, SLOT_PORTS, slot_base

CLAIMS = Path("/tmp/rlsim-slots")
FIX = (f"remove {CLAIMS} as root (rlsim makes it again, mode 1777) once no rlsim cluster runs "
       "on this machine")


class SlotError(RuntimeError):
    """The machine-wide claims directory cannot be trusted or used; the message names the fix."""


def claims_dir() -> Path:
    """:data:`CLAIMS`, created mode 1777 if missing; refused when it is a link, not a directory,
    or others may write it without the sticky bit (then anyone could remove a claim)."""
    try:
        os.mkdir(CLAIMS, 0o700)
        os.chmod(CLAIMS, 0o1777)
    except FileExistsError:
        pass
    st = os.lstat(CLAIMS)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise SlotError(f"{CLAIMS} is not a directory (rlsim keeps its machine-wide slot claims "
                        f"there): {FIX}")
    if mode & 0o1777 != 0o1777:
        raise SlotError(f"{CLAIMS} has mode {mode:o}, not 1777: every user's rlsim must write its "
                        f"claims there and none remove another's: {FIX}")
    return CLAIMS


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """Hold the machine-wide claims lock (a blocking ``flock`` on ``CLAIMS/lock``). A read-only
    descriptor suffices to lock, so a lock file another user created serves every user."""
    path = claims_dir() / "lock"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        try:
            fd = os.open(path, flags)
            break
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as e:
            raise SlotError(f"{path} cannot be opened ({e.strerror}): {FIX}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SlotError(f"{path} is not a regular file: {FIX}")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None when there is no such process: with
    the pid it names one process, never a later one that reuses the number."""
    try:
        stat_line = (listeners.PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat_line.rsplit(")", 1)[-1].split()[19])


@dataclass(frozen=True)
class Claim:
    slot: int
    uid: int
    session: str
    path: Path
    pid: int | None
    started: int | None

    def owner_alive(self) -> bool:
        return self.pid is not None and start_time(self.pid) == self.started


def _claims() -> list[Claim]:
    found = []
    for entry in os.scandir(claims_dir()):
        parts = entry.name.split(".", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        pid = started = None
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd) as f:
                body = json.loads(f.read(4096))
            pid, started = int(body["pid"]), int(body["started"])
        found.append(Claim(int(parts[0]), int(parts[1]), parts[2], Path(entry.path), pid, started))
    return found


def listeners_in(slot: int, socks: list[listeners.Listener] | None = None
                 ) -> list[listeners.Listener]:
    """What listens on slot ``slot``'s addresses or in its port block."""
    base = slot_base(slot)
    return listeners.in_block(listeners.listening() if socks is None else socks,
                              f"{ADDRESS_PREFIX}.{slot}.", (base, base + SLOT_PORTS - 1))


def busy(exclude: frozenset[str] = frozenset()) -> dict[int, str]:
    """The slots held on this machine, each with what holds it: a live claim (of a session not in
    ``exclude``: the caller's home judges its own), or a listener. Removes this user's stale
    claims. Call under :func:`lock`."""
    socks = listeners.listening()
    held: dict[int, str] = {}
    for slot in range(MAX_SLOTS):
        if found := listeners_in(slot, socks):
            held[slot] = f"something listens on {found[0]}"
    for claim in _claims():
        if claim.session in exclude or not 0 <= claim.slot < MAX_SLOTS:
            continue
        if claim.owner_alive() or claim.slot in held:
            held.setdefault(claim.slot, f"claimed by session {claim.session} (uid {claim.uid})")
        elif claim.uid == os.geteuid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(claim.path)
    return held


def claim(slot: int, session: str, pid: int) -> Path:
    """Claim ``slot`` for ``session``, made by process ``pid``. Call under :func:`lock`."""
    path = claims_dir() / f"{slot}.{os.geteuid()}.{session}"
    body = json.dumps({"pid": pid, "started": start_time(pid), "session": session})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    return path


def release(session: str) -> None:
    """Drop this user's claims for ``session`` (its cluster is gone)."""
    try:
        entries = list(os.scandir(claims_dir()))
    except (OSError, SlotError):
        return
    mine = f".{os.geteuid()}.{session}"
    for entry in entries:
        if entry.name.endswith(mine):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
