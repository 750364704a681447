"""Who may ask a zygote (:mod:`rlsim.backends.zygote`) for a worker, and what a request may be.

A zygote forks a worker that runs whatever script its request names, as the zygote's user: often
root. So only that user may ask, whatever the umask and whatever the folders above allow:

- Its socket is reached at the path its clients are given (``NAME.sock``), a link to the socket
  itself in a folder beside it (``NAME.d/s``) that only its owner can enter: made mode 0700
  whatever the umask, and refused (naming its owner, its mode and the fix) when it exists as
  anything else: another user's, a link, open to others. The socket is mode 0600.
- Each connection's peer is asked who it is (``SO_PEERCRED``): a process of another uid is
  refused, closed and named in the zygote's log, even where the folder was opened up.
- A request is read beside the others, never blocking the zygote's one loop: at most
  :data:`MAX_REQUEST` bytes, whole within one deadline (not one per receive: a client sending a
  byte at a time is cut at it), parsed without letting the parser's recursion out (a request
  nested 100,000 deep is refused, not a RecursionError that ends the zygote and every worker it
  forked), and of the one shape the worker set-up sends. A refused request is answered with
  ``{"error": WHY}`` and closed; the client then starts its worker itself.
- Its lock and log files are opened never through a link, nor as a FIFO (:func:`locked`,
  :func:`fresh_log`); its lock is made mode 0600 and waited on with a bound, then refused
  naming its holder; its pid and ready files are written by :func:`rlsim.files.write_file`.

The standard library, :mod:`rlsim.files` and :mod:`rlsim.host.locks` only: imported by the
zygote before its fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct

from rlsim.files import new_file, shown
from rlsim.host.locks import Held, hold_exclusive
from rlsim.ray_internals.worker_setup import MAX_REQUEST

FOLDER_MODE = 0o700  # the socket's folder: its owner alone may enter
SOCKET_MODE = 0o600
SOCKET_NAME = "s"  # in its folder: NAME.d/s is shorter than NAME.sock (a socket path has 107 bytes)
MAX_FDS = 3  # a request hands over stdin, stdout and stderr
CHUNK = 1 << 16  # read at most this much of a request at once
FIX = "remove it (the zygote makes it again, mode 700)"


class ZygoteRefused(RuntimeError):
    """The zygote cannot listen safely at a path, or its lock cannot be had; the message names
    the path, what is wrong and the fix."""


class Refused(ValueError):
    """A request the zygote does not serve; ``str()`` says why, in a line (answered to its
    client and written in the zygote's log)."""


def socket_folder(path: str) -> str:
    """The folder, only its owner's to enter, that holds the socket reached at ``path``."""
    return os.path.splitext(path)[0] + ".d"


def listen_private(path: str, backlog: int = 64) -> socket.socket:
    """A listening socket reached at ``path``: the socket (mode 0600) in :func:`socket_folder`
    (mode 0700, this user's, made here if missing), ``path`` a link to it put in place once it
    listens (a client that finds the link finds a listener). ZygoteRefused when the folder
    exists as anything but that, or ``path`` cannot be replaced (a folder there)."""
    folder = socket_folder(path)
    fd = _private_folder(folder)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME, dir_fd=fd)  # a dead zygote's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # bound by name: the folder was checked through fd, and only its owner, who also owns
        # the folder above (the rlsim home's run directory), can put anything there
        old = os.umask(0o777 & ~SOCKET_MODE)  # never a moment open to others
        try:
            listener.bind(os.path.join(folder, SOCKET_NAME))
        finally:
            os.umask(old)
        os.chmod(SOCKET_NAME, SOCKET_MODE, dir_fd=fd)
    finally:
        os.close(fd)
    listener.listen(backlog)
    try:
        link(path, os.path.join(os.path.basename(folder), SOCKET_NAME))
    except BaseException:
        listener.close()
        raise
    return listener


def _private_folder(folder: str) -> int:
    """An fd of ``folder``: this user's folder, mode exactly 0700, not a link; made so if
    missing (its mode set after ``mkdir``, which the umask may have cut). ZygoteRefused naming
    the owner or mode and the fix for an existing one that is anything else."""
    made = False
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, FOLDER_MODE)
        made = True
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:  # ELOOP: a link; ENOTDIR: a file
        raise ZygoteRefused(f"{shown(folder)}, where the zygote puts its socket, is not a folder "
                            f"of its own ({e.strerror}): {FIX}") from None
    st = os.fstat(fd)
    if made and st.st_uid == os.geteuid():
        os.fchmod(fd, FOLDER_MODE)
        st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    problem = (f"belongs to uid {st.st_uid}, not to the zygote's user (uid {os.geteuid()})"
               if st.st_uid != os.geteuid() else
               f"has mode {mode:o}, not {FOLDER_MODE:o}" if mode != FOLDER_MODE else None)
    if problem:
        os.close(fd)
        raise ZygoteRefused(f"{shown(folder)}, where the zygote puts its socket, {problem}: "
                            f"only its owner may reach the zygote; {FIX}")
    return fd


def link(path: str, target: str) -> None:
    """``path`` made a link to ``target`` at once (a new link renamed over it)."""
    new = f"{path}.{os.getpid()}.new"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(new)
    os.symlink(target, new)
    try:
        os.replace(new, path)
    except OSError as e:  # a folder at path
        os.unlink(new)
        raise ZygoteRefused(f"{shown(path)} cannot be replaced by the zygote's socket "
                            f"({e.strerror}): remove it") from None


@contextlib.contextmanager
def locked(path: str, wait_s: float):
    """Hold an exclusive ``flock`` on the lock file ``path``: created mode 0600 if missing,
    never opened through a link nor as a FIFO (which would block the opener), and used only
    when it is a regular file of this user's (then made mode 0600: older rlsims made it 0644,
    and anyone who can open it can hold a shared lock on it); ZygoteRefused naming it and the
    fix otherwise. Waits ``wait_s`` seconds at most for the lock, never blocking
    (:func:`rlsim.host.locks.hold_exclusive`), then ZygoteRefused naming its holder."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:  # ELOOP: a link; EISDIR: a folder
        raise ZygoteRefused(f"{shown(path)} cannot be the zygote's lock ({e.strerror}): remove "
                            "it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ZygoteRefused(f"{shown(path)}, where the zygote locks, is not a file of uid "
                                f"{os.geteuid()}'s (uid {st.st_uid}, mode "
                                f"{stat.S_IMODE(st.st_mode):o}): remove it")
        os.fchmod(fd, 0o600)  # nobody else opens it from now on
        try:
            hold_exclusive(fd, wait_s)
        except Held as e:
            raise ZygoteRefused(
                f"{shown(path)}, the shared zygote's lock, has been held for over {wait_s:g} s "
                f"by {e.holder}; rlsim holds it only while it starts the zygote. Fix: end that "
                "process, then retry") from None
        yield
    finally:
        os.close(fd)


def fresh_log(path: str):
    """A new log file at ``path`` (:func:`rlsim.files.new_file`, mode 0600): the last
    zygote's, whatever it is, moved to ``PATH.1`` first (a link is moved, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, f"{path}.1")
    return new_file(path, 0o600)


def peer(conn: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of ``conn``, as they were when it
    connected (``SO_PEERCRED``: the kernel's word, not the client's)."""
    size = struct.calcsize("3i")
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          size))
    return pid, uid


def check_peer(conn: socket.socket) -> int:
    """The pid of the process at the other end of ``conn``, which is this user's; Refused
    naming its pid and uid when it is another user's (or cannot be asked)."""
    try:
        pid, uid = peer(conn)
    except OSError as e:
        raise Refused(f"refused a connection whose peer is unknown ({e.strerror})") from None
    if uid != os.geteuid():
        raise Refused(f"refused a connection from pid {pid} of uid {uid}: this zygote forks "
                      f"for uid {os.geteuid()} alone")
    return pid


class Reader:
    """One request being read while the zygote serves others: a 4-byte length, then that many
    bytes of JSON, with the client's three stream fds; due whole by ``deadline``
    (``time.monotonic()``)."""

    def __init__(self, pid: int, deadline: float) -> None:
        self.pid = pid  # the client's, for the log
        self.deadline = deadline
        self.data = bytearray()
        self.fds: list[int] = []

    def size(self) -> int | None:
        """The request's length from its head, None until the head is in."""
        return int.from_bytes(self.data[:4], "big") if len(self.data) >= 4 else None

    def feed(self, conn: socket.socket) -> bool:
        """Read what has arrived on ``conn`` (non-blocking); whether the request is whole.
        Refused when it cannot become one (over :data:`MAX_REQUEST`, more than three fds, cut
        short); EOFError when the client closed before sending anything (``answers`` asks no
        worker); BlockingIOError when nothing was there after all."""
        size = self.size()
        want = 4 - len(self.data) if size is None else 4 + size - len(self.data)
        data, fds, _, _ = socket.recv_fds(conn, min(want, CHUNK), MAX_FDS)
        self.fds += fds
        if len(self.fds) > MAX_FDS:
            raise Refused(f"{len(self.fds)} file descriptors sent, more than the {MAX_FDS} "
                          "streams a worker takes")
        if not data:
            if not self.data and not self.fds:
                raise EOFError
            raise Refused(f"cut short after {len(self.data)} bytes")
        self.data += data
        size = self.size()
        if size is not None and size > MAX_REQUEST:
            raise Refused(f"a request of {size} bytes, over the {MAX_REQUEST} a request may have")
        return size is not None and len(self.data) == 4 + size

    def close_fds(self) -> None:
        """Close the fds received: the request is refused, or they were handed on."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


REQUIRED = {"argv": list, "env": dict, "cwd": str}
OPTIONAL = {"forkserver": bool}


def parse_request(data: bytes) -> dict:
    """The request in ``data``: a JSON object with ``argv`` (strings), ``env`` (strings to
    strings), ``cwd`` (a string) and, optionally, ``forkserver`` (a boolean). Refused saying
    what is wrong otherwise; never anything else (JSON nested deeper than Python's parser goes
    is refused, not a RecursionError out of the zygote's loop)."""
    try:
        request = json.loads(data)
    except RecursionError:
        raise Refused("nested deeper than a request ever is") from None
    except ValueError as e:  # not UTF-8 included
        raise Refused(f"not JSON ({brief(str(e))})") from None
    if not isinstance(request, dict):
        raise Refused(f"a JSON {type(request).__name__}, not an object")
    if unknown := set(request) - set(REQUIRED) - set(OPTIONAL):
        raise Refused(f"unknown field {brief(ascii(sorted(unknown)[0]))}")
    for name, kind in (*REQUIRED.items(), *OPTIONAL.items()):
        if name in request and not isinstance(request[name], kind):
            raise Refused(f"{name} is a JSON {type(request[name]).__name__}, not a {kind.__name__}")
        if name in REQUIRED and name not in request:
            raise Refused(f"no {name}")
    if not all(isinstance(a, str) for a in request["argv"]):
        raise Refused("argv holds something other than strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items()):
        raise Refused("env maps something other than strings to strings")
    return request


def brief(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped: a client's words in
    the zygote's log never forge a line."""
    text = shown(text)
    return text if len(text) <= limit else text[:limit] + "..."
