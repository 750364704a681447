"""The machine-wide registry of rlsim clusters: one JSON state file per cluster, guarded by a lock.

Slot allocation happens under an exclusive ``flock`` so that pytest-xdist workers starting clusters
at the same moment get different slots. A cluster whose owner is gone (and that was not detached,
or whose processes are all gone) is abandoned: its slot is reclaimed and its leftovers reaped.

The home is trusted only when it is this user's own: rlsim often runs as root, and whoever could
plant a symlink or a state file in it could make rlsim overwrite or delete anything. Every entry is
checked before use (owner, no symlink, not writable by group or others), new files are created
exclusively beside their final name and renamed into place, and only paths inside the home are
ever deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from rlsim import procs
from rlsim.net.alloc import pick_slot
from rlsim.spec import (
    SESSION_RE,
    ClusterSpec,
    ClusterState,
    HomeError,
    name_problem,
    rlsim_home,
)

_FIX = "remove it (or set RLSIM_HOME to a directory of your own)"


def _check(path: Path, st: os.stat_result, want_dir: bool) -> None:
    """Raise HomeError unless ``st`` (an lstat of ``path``) is this user's own, private entry."""
    kind = "directory" if want_dir else "regular file"
    if stat.S_ISLNK(st.st_mode):
        raise HomeError(f"{path} is a symlink; rlsim uses only its own entries there: {_FIX}")
    if (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)) is False:
        raise HomeError(f"{path} is not a {kind}: {_FIX}")
    if st.st_uid != os.geteuid():
        raise HomeError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                        f"{_FIX}")
    if st.st_mode & 0o022:
        raise HomeError(f"{path} is writable by group or others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}): `chmod go-w {path}` or {_FIX}")


def _private_dir(path: Path) -> Path:
    """``path`` as a checked directory of this user's, created mode 0700 if missing."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    _check(path, os.lstat(path), want_dir=True)
    return path


def _check_ancestors(path: Path) -> None:
    """Raise HomeError when someone else could swap the home for another directory: an ancestor
    that another user (not root) owns, or that others may write without the sticky bit."""
    for parent in Path(os.path.realpath(path.parent)).parents[::-1] + (
            Path(os.path.realpath(path.parent)),):
        st = os.stat(parent)
        if st.st_uid not in (0, os.geteuid()):
            raise HomeError(f"{parent}, above the rlsim home {path}, belongs to uid {st.st_uid}: "
                            "set RLSIM_HOME to a directory whose parents are yours or root's")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise HomeError(f"{parent}, above the rlsim home {path}, is writable by others "
                            "without the sticky bit: set RLSIM_HOME elsewhere")


def home() -> Path:
    """The rlsim home, created (mode 0700) and checked: raises HomeError naming the path and the
    fix when it, or a directory above it, is another user's, or it is a symlink or writable by
    group or others."""
    path = rlsim_home()
    if not path.is_absolute():
        raise HomeError(f"RLSIM_HOME={path} is not an absolute path: give a full path")
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_ancestors(path)
    return _private_dir(path)


def clusters_dir() -> Path:
    return _private_dir(home() / "clusters")


def run_dir() -> Path:
    """Where node temp dirs live: one directory per session (see ``ClusterState.root``)."""
    return _private_dir(home() / "run")


def state_path(name: str) -> Path:
    """The state file of cluster ``name``; raises ValueError for a name that is not a cluster
    name (before any path is built from it)."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return clusters_dir() / f"{name}.json"


_thread_lock = threading.RLock()
_depth = 0


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold the machine-wide rlsim lock (a blocking ``flock``) for the duration of the block.

    Reentrant within a process (the reaper reaps under the lock what it found under the lock).
    """
    global _depth
    with _thread_lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        path = home() / "lock"
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:  # ELOOP: a symlink; anything else: not a file rlsim can lock
            _check(path, os.lstat(path), want_dir=False)
            raise HomeError(f"{path} cannot be opened ({e.strerror}): {_FIX}") from e
        try:
            _check(path, os.fstat(fd), want_dir=False)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _depth = 1
            try:
                yield
            finally:
                _depth = 0
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _write_new(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole: a fresh temp file beside it (exclusive, never through a symlink),
    flushed to disk, then renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def auth_token_path() -> Path:
    """The token every rlsim cluster on this machine requires (created once, mode 0600).

    One token per machine, not per cluster: Ray's C++ token loader caches the token per process,
    so a test process talking to two rlsim clusters must present the same one. An existing token
    is used only if it is this user's regular file, readable by no one else.
    """
    path = home() / "auth_token"
    if not os.path.lexists(path):
        with locked():
            if not os.path.lexists(path):
                _write_new(path, secrets.token_hex(32))
    st = os.lstat(path)
    _check(path, st, want_dir=False)
    if stat.S_IMODE(st.st_mode) != 0o600:
        raise HomeError(f"{path} has mode {stat.S_IMODE(st.st_mode):o}, not 600: others could "
                        "read the cluster's token; remove it (rlsim makes a new one)")
    return path


@dataclass(frozen=True)
class Corrupt:
    """A state file that does not parse as a cluster's state. It still holds its slot (when the
    file says which) and its name until `rlsim down NAME` removes it."""

    name: str
    path: Path
    reason: str
    slot: int | None
    session: str | None

    @property
    def fix(self) -> str:
        return (f"`rlsim down {self.name}` removes it (and stops what it still names), or fix "
                "the file by hand")


def _read(path: Path) -> ClusterState | Corrupt:
    """The state in ``path`` (a checked entry of the clusters dir)."""
    _check(path, os.lstat(path), want_dir=False)
    name = path.name.removesuffix(".json")
    raw = b""
    try:
        raw = path.read_bytes()
        st = ClusterState.model_validate_json(raw)
        if st.spec.name != name:
            raise ValueError(f"it names cluster {st.spec.name!r}, not {name!r}")
        return st
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        reason = f"{where + ': ' if where else ''}{first['msg']}"
    except (OSError, ValueError) as e:
        reason = str(e)
    return Corrupt(name, path, " ".join(reason.split())[:200], *_salvage(raw))


def _salvage(raw: bytes) -> tuple[int | None, str | None]:
    """The slot and session a state file that does not parse still names (a torn write keeps
    its first fields), so that its slot stays held and `rlsim down` can stop its processes."""
    text = raw.decode(errors="replace")
    slot = re.search(r'"slot"\s*:\s*(\d+)\s*[,}\n]', text)
    session = re.search(r'"session"\s*:\s*"([^"]*)"', text)
    return (int(slot.group(1)) if slot else None,
            session.group(1) if session and SESSION_RE.match(session.group(1)) else None)


def load_entry(name: str) -> ClusterState | Corrupt | None:
    """What the registry holds under ``name``: a state, a corrupt file, or nothing (always
    nothing for a string that is not a cluster name)."""
    if name_problem(name):
        return None
    path = state_path(name)
    if not os.path.lexists(path):
        return None
    return _read(path)


def load(name: str) -> ClusterState | None:
    """The state of cluster ``name``, or None when there is none or it is corrupt."""
    entry = load_entry(name)
    return entry if isinstance(entry, ClusterState) else None


def scan() -> list[ClusterState | Corrupt]:
    """Every entry of the registry, by name."""
    out = []
    for path in sorted(clusters_dir().iterdir()):
        if path.name.endswith(".json") and not name_problem(path.name.removesuffix(".json")):
            out.append(_read(path))
    return out


def load_all() -> list[ClusterState]:
    return [e for e in scan() if isinstance(e, ClusterState)]


def corrupt() -> list[Corrupt]:
    return [e for e in scan() if isinstance(e, Corrupt)]


def save(state: ClusterState) -> None:
    _write_new(state_path(state.spec.name), state.model_dump_json(indent=2))


def remove(name: str) -> None:
    state_path(name).unlink(missing_ok=True)


def forget(st: ClusterState | Corrupt) -> bool:
    """Remove the state file of ``st`` only if it is still this session's (or, for a corrupt
    file, still the same corrupt file): a cluster started since under the same name keeps its
    own. Call under :func:`locked`. Returns whether it removed the file."""
    name = st.spec.name if isinstance(st, ClusterState) else st.name
    current = load_entry(name)
    if isinstance(st, ClusterState):
        mine = isinstance(current, ClusterState) and current.session == st.session
    else:
        mine = isinstance(current, Corrupt) and current.reason == st.reason
    if mine:
        remove(name)
    return mine


def slot_held_by_other(st: ClusterState) -> bool:
    """Does another registered cluster (a corrupt file whose slot is unknown included) hold the
    slot of ``st``? Then its network rules are not ``st``'s to remove. Call under the lock."""
    for other in scan():
        if isinstance(other, ClusterState):
            if other.slot == st.slot and other.session != st.session:
                return True
        elif other.slot in (st.slot, None) and other.session != st.session:
            return True
    return False


def remove_run_dir(session: str) -> None:
    """Delete the run directory of ``session``, only ever inside the home's run/ directory."""
    match = SESSION_RE.match(session)
    if match is None:
        raise ValueError(f"session {session!r} is not <cluster name>-<8 hex digits>")
    top = run_dir()
    path = top / match.group(1)
    if os.path.islink(path) or path.resolve().parent != top.resolve():
        raise HomeError(f"{path} is not a directory inside {top}: {_FIX}")
    shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_abandoned(state: ClusterState, live_sessions: set[str]) -> bool:
    """True when no one will ever tear this cluster down: its owner process is gone and it was
    not detached (a crashed test or CLI: its processes, if any, are leaks), or it was detached and
    none of its processes runs any more."""
    if _pid_alive(state.owner_pid):
        return False
    return not state.detached or state.session not in live_sessions


def reserve(spec: ClusterSpec, backend: str, detached: bool) -> ClusterState:
    """Reserve a slot and write the state file for a new cluster named ``spec.name``.

    Raises RuntimeError naming the fix when a live cluster already has that name, a corrupt state
    file has it, or all slots are taken. A corrupt state file holds its slot; one whose slot is
    unknown holds them all until removed. Abandoned clusters give their slot back; the caller
    reaps their leftovers first through :func:`abandoned`.
    """
    with locked():
        live = procs.sessions()
        taken = set()
        for other in scan():
            if isinstance(other, Corrupt):
                if other.name == spec.name or other.slot is None:
                    raise RuntimeError(
                        f"the state file {other.path} does not parse ({other.reason}) and may "
                        f"belong to a running cluster: {other.fix}")
                taken.add(other.slot)
                continue
            if other.spec.name == spec.name and not is_abandoned(other, live):
                raise RuntimeError(
                    f"an rlsim cluster named {spec.name!r} is already running "
                    f"(slot {other.slot}): pick another --name or run `rlsim down {spec.name}`"
                )
            if not is_abandoned(other, live):
                taken.add(other.slot)
        state = ClusterState(
            spec=spec,
            slot=pick_slot(taken),
            session=f"{spec.name}-{secrets.token_hex(4)}",
            backend=backend,
            owner_pid=os.getpid(),
            detached=detached,
        )
        run_dir()
        save(state)
        return state


def abandoned() -> list[ClusterState]:
    """Clusters that no one will tear down (see :func:`is_abandoned`)."""
    live = procs.sessions()
    return [s for s in load_all() if is_abandoned(s, live)]
