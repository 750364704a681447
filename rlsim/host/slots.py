"""Slots claimed machine-wide, across users and rlsim homes.

A cluster's slot (:mod:`rlsim.host.layout`) gives it addresses and ports of its own. The home's
registry (:mod:`rlsim.host.state`) knows only the home's own clusters: two homes (two users, two CI
jobs with their own ``RLSIM_HOME``) both picked slot 0, and the second head's raylet joined the
first cluster's GCS. A slot is therefore free only when

- no live *claim* names it: a file ``<slot>.<uid>.<session>`` in :data:`CLAIMS`, a sticky directory
  every user may write (as ``/tmp`` itself), written while :func:`lock` is held, so that two starts
  at once, of any users, never pick the same slot; a claim lives while the process that made it
  does (the same pid and start time, a process of the claim's owner), or while anything listens in
  its slot;
- and nothing listens on the slot's addresses or in its port block (:mod:`rlsim.host.listeners`):
  whatever made no claim (an older rlsim, another program) still keeps its ports.

The folder must be shared: a per-user one would not see the claim another user's start makes
before its cluster listens. Other users may write into it, so nothing in it is trusted:

- the folder itself only when root or the caller owns it (its owner may delete or swap anything
  in it: made by one user, it serves that user alone, and root makes it for all, :func:`fix`),
  is a directory (never a link) and has mode 1777 (it is made so before it has its name,
  :func:`_make`); it is opened once, and every read, write and removal is made relative to that
  descriptor, so a swap of the path changes nothing;
- the lock is a ``flock`` on that directory (no file another user could make a FIFO or hold),
  polled up to :data:`LOCK_WAIT_S`, then refused naming the holder (``/proc/locks``);
- a claim counts only when it is a regular file owned by the uid its name gives, under
  :data:`MAX_CLAIM_BYTES`, whose JSON names a process of that uid; any other entry is ignored
  (or, when it is this user's own, removed as stale), never a traceback;
- another user's claims are read at most :data:`FOREIGN_READS` a slot (their own start removes
  their stale ones), so thousands of leftovers cost a listing, not a read each.

A claim is removed with its cluster's state file (:func:`release`); one left by a crash is stale
once its process is gone and nothing listens in its slot: its owner removes it at its next start,
another user's is passed over (the sticky bit keeps it theirs).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rlsim.host import listeners
from rlsim.host.layout import ADDRESS_PREFIX, MAX_SLOTS, SLOT_PORTS, slot_base
from rlsim.host.locks import Held, hold_exclusive, process_uid, user_name
from rlsim.host.spec import SESSION_RE

CLAIMS = Path("/tmp/rlsim-slots")
LOCK_WAIT_S = 30.0  # a start holds the lock well under a second while it picks a slot
MAX_CLAIM_BYTES = 4096  # a claim is ~80 bytes; more is not rlsim's
FOREIGN_READS = 8  # another user's claims read per slot; theirs beyond are their own leftovers
PID_MAX = 1 << 22  # the kernel's largest pid_max
NAME = re.compile(r"([0-9]{1,3})\.([0-9]{1,10})\.(.+)", re.ASCII)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def fix() -> str:
    """Remade by root, the folder serves every user (made by a user, it serves that user only)."""
    return (f"as root, once no rlsim cluster runs on this machine, run "
            f"`rm -r {CLAIMS} && install -d -m 1777 {CLAIMS}`")


class SlotError(RuntimeError):
    """The machine-wide claims directory cannot be trusted or used; the message names the fix."""


class Holder(NamedTuple):
    """Who holds a slot (a user, "this home", "something listening") and what of theirs."""
    who: str
    what: str

    def __str__(self) -> str:
        return f"{self.who}: {self.what}"


def _refuse(problem: str) -> SlotError:
    return SlotError(f"{CLAIMS} (every user's rlsim slot claims) {problem}. Fix: {fix()}")


def _verify(fd: int) -> None:
    """Refuse the opened folder unless root or the caller owns it and its mode is 1777."""
    st = os.fstat(fd)
    if st.st_uid not in (0, os.geteuid()):
        raise _refuse(f"is owned by {user_name(st.st_uid)} (uid {st.st_uid}), who could delete or "
                      f"swap other users' claims: rlsim trusts it only when root or you "
                      f"({user_name(os.geteuid())}) own it")
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o1777:
        raise _refuse(f"has mode {mode:o}, not 1777: every user's rlsim must write its claims "
                      "there and none remove another's")


def open_dir() -> int:
    """A descriptor of :data:`CLAIMS` (made mode 1777 if missing, :func:`_make`), verified by
    the rules in the module's docstring. The caller closes it; never reopen the path within one
    operation. Never touches the process's umask."""
    try:
        fd = _open()
    except FileNotFoundError:
        _make()
        try:
            fd = _open()
        except FileNotFoundError as e:  # removed as soon as it was made
            raise _refuse(f"cannot be opened ({e.strerror})") from e
    try:
        _verify(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open() -> int:
    """:data:`CLAIMS` opened as a folder, never through a link; FileNotFoundError when missing,
    else :class:`SlotError` when it cannot be."""
    try:
        return os.open(CLAIMS, DIR_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse("is not a directory (a link or a file)") from e
        raise _refuse(f"cannot be opened ({e.strerror})") from e


def _make() -> None:
    """Put a folder of mode 1777 at :data:`CLAIMS`, unless another start puts one there first.

    Why not ``mkdir`` in place: the umask cuts its mode (1755), and another start that opens it
    before the chmod refuses it (seen about once in ten runs of six starts at once); and the
    umask is the whole process's, so setting it to 0 around the ``mkdir`` would make any file
    another thread creates meanwhile writable by all. So the folder is made under a fresh name
    beside it, given its mode, then renamed into place with ``RENAME_NOREPLACE``: it appears
    whole or not at all, and never replaces the one another start just put there (a plain
    rename replaces an empty folder: the two starts would lock two different folders). Where
    the kernel, its file system or libc lack that rename, it is made in place after all."""
    try:
        made = tempfile.mkdtemp(prefix=f"{CLAIMS.name}.tmp-{os.getpid()}-", dir=CLAIMS.parent)
    except OSError as e:
        raise _refuse(f"cannot be made ({e.strerror})") from e
    moved = None
    try:
        fd = os.open(made, DIR_FLAGS)
        try:
            os.fchmod(fd, 0o1777)
        finally:
            os.close(fd)
        moved = _rename_noreplace(made, str(CLAIMS))  # False: another start's is there
    except OSError as e:
        raise _refuse(f"cannot be made ({e.strerror})") from e
    finally:
        if not moved:
            with contextlib.suppress(OSError):
                os.rmdir(made)
    if moved is None:
        _make_in_place()


def _make_in_place() -> None:
    """``mkdir`` at :data:`CLAIMS`, then its mode set to 1777 (a start that opens it in between
    may refuse it): where :func:`_rename_noreplace` is not to be had."""
    try:
        os.mkdir(CLAIMS, 0o1777)
    except FileExistsError:
        return
    except OSError as e:
        raise _refuse(f"cannot be made ({e.strerror})") from e
    with contextlib.suppress(OSError):
        fd = os.open(CLAIMS, DIR_FLAGS)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, 0o1777)
        finally:
            os.close(fd)


RENAME_NOREPLACE = 1  # linux/fs.h
AT_FDCWD = -100


def _rename_noreplace(src: str, dst: str) -> bool | None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (``renameat2``, atomic): True when
    renamed, False when ``dst`` exists, None where the kernel, the file system or libc offer no
    such rename. OSError for anything else."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28 and later
    except (OSError, AttributeError):
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in (errno.ENOSYS, errno.EINVAL):  # no such call; a file system without the flag
        return None
    raise OSError(err, os.strerror(err), dst)


@contextlib.contextmanager
def _dir() -> Iterator[int]:
    fd = open_dir()
    try:
        yield fd
    finally:
        os.close(fd)


def claims_dir() -> Path:
    """:data:`CLAIMS`, created if missing, once it is verified (else :class:`SlotError`)."""
    os.close(open_dir())
    return CLAIMS


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """Hold the machine-wide claims lock: an exclusive ``flock`` on the claims directory, polled
    for :data:`LOCK_WAIT_S` seconds (:func:`rlsim.host.locks.hold_exclusive`); past that,
    :class:`SlotError` names who holds it."""
    with _dir() as fd:
        try:
            hold_exclusive(fd, LOCK_WAIT_S)
        except Held as e:
            raise SlotError(f"{CLAIMS} has been locked for over {LOCK_WAIT_S:g} s by {e.holder}; "
                            "rlsim holds it for under a second while it picks a slot. Fix: end "
                            "that process, or wait for it and retry") from None
        yield


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None when there is no such process: with
    the pid it names one process, never a later one that reuses the number."""
    try:
        stat_line = (listeners.PROC / str(pid) / "stat").read_text()
        return int(stat_line.rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Claim:
    slot: int
    uid: int
    session: str
    name: str  # in the claims directory
    pid: int | None  # None: its body is not a claim rlsim wrote (stale)
    started: int | None

    def owner_alive(self) -> bool:
        """The process it names runs (the same start time) and is the claim owner's."""
        return (self.pid is not None and start_time(self.pid) == self.started
                and process_uid(self.pid) == self.uid)

    @property
    def holder(self) -> Holder:
        return Holder(user_name(self.uid), f"session {self.session}")


def parse_name(name: str) -> tuple[int, int, str] | None:
    """``(slot, uid, session)`` of a claim's file name, None when it is no claim's name."""
    match = NAME.fullmatch(name)
    if match is None or not SESSION_RE.match(match.group(3)):
        return None
    slot, uid = int(match.group(1)), int(match.group(2))
    return (slot, uid, match.group(3)) if slot < MAX_SLOTS else None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a claim holds")


def parse_body(body: bytes) -> tuple[int, int] | None:
    """``(pid, started)`` of a claim's content, None for anything rlsim did not write."""
    try:
        data = json.loads(body.decode(), parse_constant=_no_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return None
    if not isinstance(data, dict):
        return None
    pid, started = data.get("pid"), data.get("started")
    if type(pid) is not int or type(started) is not int:  # bools and floats are not pids
        return None
    return (pid, started) if 0 < pid <= PID_MAX and 0 <= started < 1 << 63 else None


def _owned_file(dfd: int, name: str, uid: int) -> bool:
    """Is ``name`` a regular file (not a link) owned by ``uid``? A stat: cheaper than a read."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid


def read_claim(dfd: int, name: str) -> Claim | None:
    """The claim in ``name``, None when it is not a regular file owned by the uid its name
    gives; one whose content is not a claim comes back with ``pid`` None (stale)."""
    parsed = parse_name(name)
    if parsed is None:
        return None
    slot, uid, session = parsed
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)  # NONBLOCK: a FIFO never hangs the open
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        body = os.read(fd, MAX_CLAIM_BYTES + 1) if st.st_size <= MAX_CLAIM_BYTES else b""
    except OSError:
        body = b""
    finally:
        os.close(fd)
    pid, started = parse_body(body) or (None, None)
    return Claim(slot, uid, session, name, pid, started)


def listeners_in(slot: int, socks: list[listeners.Listener] | None = None
                 ) -> list[listeners.Listener]:
    """What listens on slot ``slot``'s addresses or in its port block."""
    base = slot_base(slot)
    return listeners.in_block(listeners.listening() if socks is None else socks,
                              f"{ADDRESS_PREFIX}.{slot}.", (base, base + SLOT_PORTS - 1))


def _names(dfd: int) -> list[tuple[str, int, int, str]]:
    """``(name, slot, uid, session)`` of every entry named as a claim."""
    return [(name, *parsed) for name in os.listdir(dfd) if (parsed := parse_name(name))]


def busy(exclude: frozenset[str] = frozenset()) -> dict[int, Holder]:
    """The slots held on this machine, each with who holds it: a live claim (of a session not in
    ``exclude``: the caller's home judges its own), or a listener. Removes this user's stale
    claims. Call under :func:`lock`."""
    socks = listeners.listening()
    held: dict[int, Holder] = {}
    for slot in range(MAX_SLOTS):
        if found := listeners_in(slot, socks):
            held[slot] = Holder("something listening", f"{found[0]}")
    listened = set(held)
    me = os.geteuid()
    with _dir() as dfd:
        names = [n for n in _names(dfd) if n[3] not in exclude]
        for name, slot, _, _ in (n for n in names if n[2] == me):
            if not _owned_file(dfd, name, me):
                continue  # another user's file under this user's name, a folder, a FIFO
            claim = read_claim(dfd, name)
            if claim is None:
                continue  # swapped since the stat
            if claim.owner_alive():
                held.setdefault(slot, claim.holder)
            elif slot not in listened:  # a detached cluster's claim lives while it listens
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
        _foreign(dfd, [n for n in names if n[2] != me], held)
    return held


def _foreign(dfd: int, names: list[tuple[str, int, int, str]], held: dict[int, Holder]) -> None:
    """Add the slots other users' live claims hold, reading at most :data:`FOREIGN_READS` files
    a slot and user (a stat, not a read, passes over a file whose owner its name misstates)."""
    reads: dict[tuple[int, int], int] = {}
    for name, slot, uid, _ in names:
        if slot in held or reads.get((slot, uid), 0) >= FOREIGN_READS:
            continue
        if not _owned_file(dfd, name, uid):
            continue
        reads[(slot, uid)] = reads.get((slot, uid), 0) + 1
        claim = read_claim(dfd, name)
        if claim is not None and claim.owner_alive():
            held[slot] = claim.holder


def claim(slot: int, session: str, pid: int) -> Path:
    """Claim ``slot`` for ``session``, made by process ``pid``. Call under :func:`lock`."""
    name = f"{slot}.{os.geteuid()}.{session}"
    if parse_name(name) is None:
        raise ValueError(f"slot {slot} / session {session!r} make no claim name")
    body = json.dumps({"pid": pid, "started": start_time(pid), "session": session}).encode()
    with _dir() as dfd:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644, dir_fd=dfd)
        except FileExistsError:
            raise _refuse(f"already holds {name}, this session's claim, which rlsim did not "
                          "write") from None
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
    return CLAIMS / name


def release(session: str) -> None:
    """Drop this user's claims for ``session`` (its cluster is gone)."""
    try:
        dfd = open_dir()
    except (OSError, SlotError):
        return
    try:
        mine = os.geteuid()
        for name, _, uid, sess in _names(dfd):
            if uid == mine and sess == session and _owned_file(dfd, name, mine):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)


def held_line(taken: dict[int, Holder]) -> str:
    """The holders of ``taken`` in one short line, grouped by who holds them, e.g.
    ``this home holds slots 0-7 (cluster 'c0', cluster 'c1' and 6 more); alice holds slot 8
    (session c-0123abcd)``."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for slot in sorted(taken):
        groups.setdefault(taken[slot].who, []).append((slot, taken[slot].what))
    parts = []
    for who, held in groups.items():
        whats = [what for _, what in held]
        shown = ", ".join(whats[:2]) + (f" and {len(whats) - 2} more" if len(whats) > 2 else "")
        label = "slot" if len(held) == 1 else "slots"
        parts.append(f"{who} holds {label} {_ranges([s for s, _ in held])} ({shown})")
    return "; ".join(parts)


def _ranges(numbers: list[int]) -> str:
    """``0-3, 5`` for [0, 1, 2, 3, 5] (sorted)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
