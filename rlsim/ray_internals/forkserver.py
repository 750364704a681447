"""The forkserver of a process forked warm: started by a fork of the process as it starts, before
its script runs, instead of Python's exec of a fresh interpreter (capability
``dashboard_forkserver``).

Why: Ray's dashboard (2.59 on) starts each of its modules (nine here) as a process of a
``multiprocessing`` forkserver, never a plain fork: Ray's C bindings keep state a child forked
from the running dashboard would inherit. Python starts that server by exec'ing a new interpreter,
which imports Ray and the modules again before the first module can start: 1.1 s of CPU here, on
the head's bring-up path. Where the dashboard is forked from the agent zygote
(``forked_dashboard``), its process already holds those imports and nothing of Ray has run in it
yet: a server forked from it at that moment is what Python's server is once its imports are done,
without paying for them again. Python then finds a server running and uses it as its own.

This uses the private state of Python's ``multiprocessing.forkserver`` (its server's address,
alive pipe and pid, and the server's ``main``), read and checked here only: where a Python release
lays it out otherwise, :func:`python_problem` says so and the dashboard starts Python's own server.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import sys

# multiprocessing.forkserver.main's parameters and its ForkServer's state, as Python 3.10 to 3.13
# have them (3.14 adds an authentication key: there the dashboard starts Python's own server)
MAIN_PARAMS = ("listener_fd", "alive_r", "preload", "main_path", "sys_path")
SERVER_STATE = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_lock")


def python_problem() -> str | None:
    """Why this Python's forkserver cannot be started by a fork (None: it can)."""
    import multiprocessing.forkserver as fs

    try:
        params = tuple(inspect.signature(fs.main).parameters)
    except (AttributeError, TypeError, ValueError):
        return "Python's multiprocessing.forkserver has no main"
    if params != MAIN_PARAMS:
        return (f"Python {sys.version.split()[0]}'s multiprocessing.forkserver.main takes "
                f"({', '.join(params)}), not ({', '.join(MAIN_PARAMS)})")
    server = getattr(fs, "_forkserver", None)
    missing = [a for a in SERVER_STATE if not hasattr(server, a)]
    if missing:
        return (f"Python {sys.version.split()[0]}'s forkserver keeps no "
                f"{', '.join(missing)}")
    return None


def start_here() -> int | None:
    """Fork this process's forkserver now, as Python's ``ForkServer.ensure_running`` would
    exec it: a listening socket and an alive pipe handed to ``forkserver.main``, the server's
    state set as Python sets it. The server's pid, or None where this Python's forkserver is laid
    out otherwise or one already runs. Call only while this process runs one thread. Raises
    OSError (nothing left open) where the socket, the pipe or the fork fails."""
    if python_problem():
        return None
    import multiprocessing.forkserver as fs
    from multiprocessing import connection

    server = fs._forkserver
    with server._lock:
        if server._forkserver_pid is not None:
            return None
        listener = socket.socket(socket.AF_UNIX)
        alive: tuple[int, ...] = ()
        try:  # an OSError leaves nothing open: the caller's Python starts its own server
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            alive = alive_r, alive_w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except OSError:
            listener.close()
            for fd in alive:
                os.close(fd)
            raise
        if pid == 0:
            code = 1
            try:
                # the server ends when every holder of the write end (its clients) has gone
                os.close(alive_w)
                fs.main(listener.fileno(), alive_r, [])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0
            except BaseException:  # noqa: BLE001 - said on the dashboard's stderr, then gone
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(alive_r)
        listener.close()
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
        return pid


def stop_here() -> None:
    """End the forkserver :func:`start_here` started (a test's clean-up): its alive pipe
    closed, the server exits and is reaped."""
    import multiprocessing.forkserver as fs

    server = fs._forkserver
    with server._lock:
        pid, fd = server._forkserver_pid, server._forkserver_alive_fd
        server._forkserver_address = server._forkserver_alive_fd = None
        server._forkserver_pid = None
    if fd is not None:
        os.close(fd)
    if pid is not None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
