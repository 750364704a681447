"""The rlsim home: where state, tokens and node directories live (``RLSIM_HOME``, else
``/tmp/rlsim-<uid>``), and the rules that make it safe to trust.

The home is trusted only when it is this user's own: rlsim often runs as root, and whoever could
plant a symlink or a state file in it could make rlsim overwrite or delete anything. Every entry is
checked before use (owner, no symlink, not writable by group or others), new files are created
exclusively beside their final name and renamed into place, and only paths inside the home are
ever deleted.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from rlsim.files import write_file


def rlsim_home() -> Path:
    """Where rlsim keeps state, tokens and node temp dirs: ``RLSIM_HOME``, else
    ``/tmp/rlsim-<uid>``. Per user, because whoever owns the home decides what rlsim (often root)
    reads, writes and deletes: :func:`home` creates it mode 0700 and refuses one that is not
    this user's own. Not ``$XDG_RUNTIME_DIR``: that is a small tmpfs (Ray writes its logs
    and spills objects under the node dirs) and ``/run/user/<uid>/rlsim`` leaves too little of
    the socket path budget.

    Kept short on purpose: Ray puts unix sockets under it and socket paths are limited to 107 bytes
    (see :func:`rlsim.ray_internals.session.socket_path_problem`).
    """
    if (held := _pinned.get()) is not None:
        return held
    if os.environ.get("RLSIM_HOME"):
        return Path(os.environ["RLSIM_HOME"])
    return Path(f"/tmp/rlsim-{os.geteuid()}")


_pinned: contextvars.ContextVar[Path | None] = contextvars.ContextVar("rlsim_home", default=None)


@contextlib.contextmanager
def pinned(path: Path | None) -> Iterator[None]:
    """Within the block (this thread, this context), :func:`rlsim_home` is ``path`` whatever
    ``RLSIM_HOME`` says now (None: no change). A cluster is torn down in the home it was started
    in: a pytest worker stops the clusters its scenarios kept after its last test, while that
    test's ``monkeypatch.setenv("RLSIM_HOME", ...)`` is still in force; reaped in that home, the
    cluster's state file, run directory and cgroups were left in its own."""
    if path is None:
        yield
        return
    token = _pinned.set(path)
    try:
        yield
    finally:
        _pinned.reset(token)


class HomeError(RuntimeError):
    """The rlsim home, or an entry in it, is not safe to use (another user's, a symlink, writable
    by others). The message names the path and the fix."""


def home_id() -> str:
    """Eight hex digits naming this home on the machine: what rlsim creates outside the home
    (iptables chains, container labels, docker networks) carries it, so that a reaper or
    ``down --all`` touches only what this home made, never another user's or CI job's."""
    return hashlib.sha256(str(rlsim_home().resolve()).encode()).hexdigest()[:8]


HOME_FIX = "remove it (or set RLSIM_HOME to a directory of your own)"


def check_private(path: Path, st: os.stat_result, want_dir: bool) -> None:
    """Raise HomeError unless ``st`` (an lstat of ``path``) is this user's own, private entry."""
    kind = "directory" if want_dir else "regular file"
    if stat.S_ISLNK(st.st_mode):
        raise HomeError(f"{path} is a symlink; rlsim uses only its own entries there: {HOME_FIX}")
    if (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)) is False:
        raise HomeError(f"{path} is not a {kind}: {HOME_FIX}")
    if st.st_uid != os.geteuid():
        raise HomeError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                        f"{HOME_FIX}")
    if st.st_mode & 0o022:
        raise HomeError(f"{path} is writable by group or others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}): `chmod go-w {path}` or {HOME_FIX}")


def private_dir(path: Path) -> Path:
    """``path`` as a checked directory of this user's, created mode 0700 if missing."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private(path, os.lstat(path), want_dir=True)
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


# The system's own trees: a home there would put rlsim's state, tokens and node directories into
# the system (and rlsim deletes inside its home); a shared volume mounted there by a launcher
# would hide the image's own files
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib",
                "/lib64", "/lib32", "/libx32")
# directories that hold other people's things: a home may be below them, never one of them
SHARED_DIRS = ("/", "/var", "/tmp", "/home", "/root", "/run", "/opt", "/srv", "/mnt", "/media",
               "/var/tmp", "/var/lib", "/var/log", "/run/user")


def home_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an rlsim home, or None: it must be absolute, a directory rlsim can
    own privately, not a system directory or one of the directories everybody shares, and not
    below a file. Checked before anything is created."""
    fix = f"set RLSIM_HOME to a directory of your own (the default is /tmp/rlsim-{os.geteuid()})"
    if not path.is_absolute():
        return f"RLSIM_HOME={path} is not an absolute path: give a full path"
    if "\0" in str(path) or "\n" in str(path):
        return f"RLSIM_HOME={str(path)!r} holds a NUL byte or a newline: {fix}"
    real = Path(os.path.realpath(path))
    for p in {path, real}:
        if str(p) in SHARED_DIRS or any(p == Path(t) or Path(t) in p.parents
                                        for t in SYSTEM_TREES):
            return f"RLSIM_HOME={path} is a system directory or inside one: {fix}"
    for parent in [real, *real.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is a file" if parent == real else f"is below {parent}, which is a file"
            return f"RLSIM_HOME={path} {what}: {fix}"
    return None


def home() -> Path:
    """The rlsim home, created (mode 0700) and checked: raises HomeError naming the path and the
    fix when it, or a directory above it, is another user's, or it is a symlink or writable by
    group or others."""
    path = rlsim_home()
    if problem := home_problem(path):
        raise HomeError(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_ancestors(path)
    return private_dir(path)


def run_dir() -> Path:
    """Where node temp dirs live: one directory per session (see ``ClusterState.root``)."""
    return private_dir(home() / "run")


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
            check_private(path, os.lstat(path), want_dir=False)
            raise HomeError(f"{path} cannot be opened ({e.strerror}): {HOME_FIX}") from e
        try:
            check_private(path, os.fstat(fd), want_dir=False)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _depth = 1
            try:
                yield
            finally:
                _depth = 0
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole, readable by this user alone (:func:`rlsim.files.write_file`)."""
    write_file(path, text, mode)


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
                write_private(path, secrets.token_hex(32))
    st = os.lstat(path)
    check_private(path, st, want_dir=False)
    if stat.S_IMODE(st.st_mode) != 0o600:
        raise HomeError(f"{path} has mode {stat.S_IMODE(st.st_mode):o}, not 600: others could "
                        "read the cluster's token; remove it (rlsim makes a new one)")
    return path
