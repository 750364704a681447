"""A process that imports a worker's heavy modules once and forks Ray's workers from there:
``python -m rlsim.backends.zygote SOCKET MODULE[,MODULE...]``. The workers' zygote is shared by
the local clusters of one home that preload the same modules (:func:`start_shared`); the agents'
(``--agents``) is each cluster's own.

Why: every Python worker a raylet starts imports torch, TorchDynamo and DeepSpeed before
the trainer's actor can use it, 5.6 s of CPU per worker on this machine. On two cores a
scenario's first step waits for that CPU, once per worker: a 2-node scenario's two workers
import 11 s of CPU between them. Forked from a process that imported them, a worker has them at
once (PyTorch's own DataLoader forks its workers from a process with torch imported, the same
way).

How a worker gets here: a raylet runs :mod:`rlsim.ray_internals.worker_setup` to start
a worker; for a plain one (no runtime environment to apply) it connects to this server's socket,
hands over its standard streams, its arguments, environment and working directory, and waits. The
server forks; the child moves into the node's cgroups (the client's: a node kill, pause or
network rule covers it as it covers a worker the raylet forked), takes over the streams, the
environment, the working directory and ``sys.argv``, and runs ``default_worker.py`` as Python
would run the script. The client is told the worker's pid, stays until the worker exits, and
exits with its status: the process the raylet started lives as long as its worker. A worker
registers with its own pid, which the raylet then signals (``ray.kill``) as any other.

What the fork changes, and why it does not matter here:
- ``/proc/PID/environ`` of a forked worker is this server's (fixed at exec): a shared zygote's
  holds no cluster's labels, only ``RLSIM_ZYGOTE_HOME``; an agent zygote's, its cluster's labels
  without ``RLSIM_NODE``. The server runs only where node cgroups exist, and there a node's
  processes are found by their cgroup (:class:`rlsim.host.cgroups.NodeGroup`), which also names
  a shared zygote's worker's session (:mod:`rlsim.host.procs`).
- Modules imported here read their environment here: the launcher's, which is a worker's less
  what Ray sets per worker (its job id, its ports), read later, and less rlsim's per-cluster
  settings for a shared zygote (none of which torch or DeepSpeed reads). Nothing node-specific
  is imported here; the trainer's own modules are imported by the worker itself.
- If the client dies (the raylet gave up on a worker that did not register, a node kill), the
  server kills the worker it forked for it.

The same server forks the nodes' agents (``--agents``: Ray's dashboard and runtime env agents,
which the raylet starts through worker_setup's ``--rlsim-agent``): each agent imported Ray and
its own modules for 0.5 s of CPU, two a node, before its raylet could register. An agent takes
its node and ports from its arguments, so Ray may be loaded here before the fork.

Only its own user may ask (:mod:`rlsim.backends.zygote_guard`): its socket sits in a folder only
that user can enter, a peer of another uid is refused, and a request is read beside the others,
bounded in size, depth and time, so that no client can stop it or hold its one loop. Its pid,
ready, lock and log files are written through :mod:`rlsim.files`, never through a link.

Serves until killed: an agent zygote with its cluster's other processes, by its session labels;
a shared one when the home's last cluster ends (:func:`end_shared`). Imports of rlsim: the
guard, the safe files and the bounded lock (the standard library only) before the fork, the
cgroup move after.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from rlsim.backends import zygote_guard as guard
from rlsim.files import FileRefused, read_text, write_file, write_problem

# Never imported here: Ray's core library reads its configuration from the environment once,
# when it loads (RAY_JOB_ID and the rest that the raylet sets per worker); loaded in this
# process, every forked worker would start with this process's (no job: "GetProcessJobID" fails
# its check). Each worker imports Ray itself, 0.5 s of CPU.
NEVER_HERE = ("ray",)
MODULE = "rlsim.backends.zygote"  # how a zygote is started: python -m MODULE ...


def socket_path(root, name: str = "zygote") -> str:
    """Where the zygote ``name`` (``zygote`` for workers, ``agents``) of the cluster whose run
    directory is ``root`` listens."""
    return os.path.join(str(root), f"{name}.sock")


def ready_path(path: str) -> str:
    """The file the zygote listening at ``path`` writes once its imports are done: from then
    on a worker that asks is forked at once."""
    return os.path.splitext(path)[0] + ".ready"


def answers(path: str) -> bool:
    """Whether a zygote listens at ``path`` (a connection that sends nothing asks for no
    worker)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


# ---- a zygote shared by a home's clusters ------------------------------------------------------
# The workers' zygote imports torch, TorchDynamo and DeepSpeed: 6.2 s of CPU here. One per
# cluster paid that for every cluster, and a cluster whose scenario ended before its trainer
# started (a refusal, a failed check) paid it for nothing. Clusters of one home whose workers
# preload the same modules, under the same interpreter and environment (less what rlsim sets per
# cluster, which the preloaded modules do not read), share one: it starts with the first of them
# and ends with the home's last cluster (rlsim.backends.reaper). Its environment holds no
# cluster's labels, only rlsim.host.procs.ZYGOTE_HOME_VAR: a worker it forks is found by its
# node's cgroup (rlsim.host.procs).


def shared_path(run_dir, key: str) -> str:
    """Where the shared zygote ``key`` of the home whose run directory is ``run_dir``
    listens."""
    return os.path.join(str(run_dir), f"z-{key}.sock")


# How long a new shared zygote may take to listen. It binds before its imports (torch's come
# after), once Python and the guard are loaded: 0.06-0.18 s measured on two cores under a load
# of 9.5. Past this it is stuck (stopped, say), holding the lock every other start waits on.
BIND_S = 30.0
# How long a start, or the home's end, waits for that lock: past the longest a start holds it,
# and under the launcher's own bound (a node's ready_timeout_s, 60 s unless set), so that a
# lock held for ever leaves the workers to start without the zygote, not the launcher killed
LOCK_WAIT_S = BIND_S + 10.0


def start_shared(run_dir, key: str, modules: list[str], env: dict[str, str]) -> str:
    """The shared zygote ``key``'s socket, its server started with ``env`` unless one answers
    there already. Under a lock of its own, held until the new server listens: two clusters
    starting at once start one. ZygoteRefused when its lock is not a file of this user's or
    stays held past :data:`LOCK_WAIT_S`; TimeoutError, naming its log, when the new server
    neither listens nor exits within :data:`BIND_S` (it is killed); OSError when its log
    cannot be made."""
    import subprocess

    path = shared_path(run_dir, key)
    stem = os.path.splitext(path)[0]
    with guard.locked(f"{stem}.lock", LOCK_WAIT_S):
        if answers(path):
            return path
        with contextlib.suppress(FileNotFoundError):  # a dead one's: not ready
            os.unlink(ready_path(path))
        # started in the run directory: under -m its working directory is sys.path[0], and a
        # cluster's own folder there would be every later cluster's
        with guard.fresh_log(f"{stem}.log") as log:
            proc = subprocess.Popen([sys.executable, "-m", MODULE, path,
                                     ",".join(modules)], env=env, cwd=str(run_dir),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
        _wait_bound(proc, path, f"{stem}.log")
    return path


def _wait_bound(proc, path: str, log: str) -> None:
    """Wait until the zygote ``proc`` listens at ``path`` or exits (its workers then start as
    Ray starts them: none answers); past :data:`BIND_S`, kill it and raise TimeoutError naming
    its ``log``."""
    deadline = time.monotonic() + BIND_S
    while proc.poll() is None and not answers(path):
        if time.monotonic() >= deadline:
            proc.kill()
            proc.wait()
            raise TimeoutError(f"the shared zygote (pid {proc.pid}) did not listen at "
                               f"{guard.brief(path, 200)} within {BIND_S:g} s and was killed; "
                               f"its log: {guard.brief(log, 200)}")
        time.sleep(0.01)  # a poll: it says nothing when it binds


def end_shared(run_dir) -> list[int]:
    """End the shared zygotes of the home whose run directory is ``run_dir`` and remove their
    files; the pids killed. Called when no cluster of the home is left (under the home's
    lock): a zygote ended under a live cluster would cut its forked workers from their
    clients. A pid file is read only as this user's regular file (never through a link)."""
    from rlsim.host import procs

    killed = []
    for pidfile in sorted(Path(run_dir).glob("z-*.pid")):
        stem = str(pidfile)[:-len(".pid")]
        try:
            with guard.locked(f"{stem}.lock", LOCK_WAIT_S):  # not while a launcher starts it
                killed += _end_one(stem)
        except guard.ZygoteRefused:  # a lock no launcher of ours could take or held past any
            killed += _end_one(stem)  # start's bound: nobody of ours starts it
    procs.wait_gone(killed)  # a zombie counts as gone: its parent (a launcher) is gone too
    return killed


def _end_one(stem: str) -> list[int]:
    """Kill the shared zygote whose files are ``stem.*`` if its pid file names it, and remove
    its files; the pid killed, if any."""
    killed = []
    with contextlib.suppress(ValueError, OSError):  # FileRefused: a link, a FIFO, a folder
        pid = int(read_text(f"{stem}.pid", limit=32))
        # the pid is still this zygote's (a pid is reused after a process ends)
        if f"{stem}.sock".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    folder, name = os.path.split(stem)
    # the temp files of a pid or ready file it was writing when killed (rlsim.files.write_file)
    leftovers = [os.path.join(folder, p.name) for p in Path(folder).glob(f".{name}.*.tmp")]
    for end in (".sock", ".ready", ".log", ".log.1", ".pid", ".lock", f".d/{guard.SOCKET_NAME}"):
        leftovers.append(stem + end)
    for leftover in leftovers:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(leftover)
    with contextlib.suppress(OSError):  # anything else in it is not the zygote's
        os.rmdir(guard.socket_folder(f"{stem}.sock"))
    return killed


# ---- the server side ----------------------------------------------------------------------
# How long a client that connected may take to send its whole request (``--request-s``): a client
# paused between its connect and its request (a frozen node) gets no worker, and starts its own
# once it runs again; meanwhile the zygote serves the others
REQUEST_S = 10.0


def _hung_up(conn: socket.socket) -> bool:
    """Whether the client closed its end (its request waited while it went away)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _become_worker(request: dict, fds: list[int]) -> None:
    """In the forked child: take the client's place and run the script as ``python SCRIPT``
    would. Never returns: the script's end (or its SystemExit, or an uncaught error) unwinds
    out of the server's loop and the interpreter exits as the worker's would, atexit handlers
    and all."""
    try:
        # A group of its own, as the raylet gives each worker it starts: the raylet ends a
        # worker by signalling its process group, which would otherwise be this server's, and
        # with it every worker forked here
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        env = request["env"]
        _enter_node_groups(env)
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        if env.get("RLSIM_CUDA_STANDIN") == "1":  # a stand-in node's worker (rlsim.standin)
            from rlsim.standin import activate
            activate(env)
        os.chdir(request["cwd"])
        unbuffered, module, args = _python_options(request["argv"])
        if unbuffered:
            _unbuffer()
        if module is None:
            sys.argv = args
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        else:
            sys.argv = [module, *args]
            sys.path[0] = os.getcwd()
        if request.get("forkserver"):
            # the dashboard's forkserver, forked while this child holds the imports and runs
            # one thread (dashboard_forkserver); failing that, Python starts its own later
            from rlsim.ray_internals.forkserver import start_here
            try:
                start_here()
            except OSError as e:
                print(f"rlsim zygote: no forkserver forked ({e}); Python starts its own",
                      file=sys.stderr)
    except BaseException:  # noqa: BLE001 - never back into the server's loop
        import traceback
        traceback.print_exc()
        os._exit(1)
    import runpy
    if module is None:
        runpy.run_path(args[0], run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _python_options(argv: list[str]) -> tuple[bool, str | None, list[str]]:
    """What of Python's own command line a request may carry, as ``python [-u] SCRIPT ARGS`` or
    ``python [-u] -m MODULE ARGS``: whether ``-u`` was given, the module (None for a script)
    and the rest (the script and its arguments, or the module's arguments)."""
    unbuffered = False
    while argv[:1] == ["-u"]:
        unbuffered, argv = True, argv[1:]
    if argv[:1] == ["-m"] and len(argv) > 1:
        return unbuffered, argv[1], argv[2:]
    if not argv or argv[0].startswith("-"):
        raise ValueError(f"rlsim zygote: cannot run {argv!r} (python [-u] SCRIPT or -m MODULE)")
    return unbuffered, None, argv


def _unbuffer() -> None:
    """``python -u``: stdout and stderr written through to their fds at once."""
    import io
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                            encoding=old.encoding, errors=old.errors,
                                            write_through=True))


def _enter_node_groups(env: dict[str, str]) -> None:
    """Move this process into the cgroups of the node the client belongs to; never creates
    them: a request served after its cluster was reaped (it waited in the socket's backlog
    while a shared zygote imported) would make groups again that nothing removes."""
    from rlsim.host import cgroups, procs
    session, node = env.get(procs.SESSION_VAR), env.get(procs.NODE_VAR)
    if session and node is not None:
        cgroups.NodeGroup(session, int(node)).enter(create=False)


def _import_package(package: str) -> list[str]:
    """``PACKAGE.*`` of a preload list: the package and every module under it, imported as Ray's
    dashboard and agents load their modules (``pkgutil.walk_packages``); those that failed."""
    import pkgutil

    root = importlib.import_module(package)
    failed = []
    for _, name, _ in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - imported again (and failing) where it is used
            failed.append(name)
    return failed


class Zygote:
    """The server: accepts worker requests on ``path`` from its own user only, reads each
    beside the others (whole within ``request_s``), forks, reports each child's pid and exit
    status to its client. ZygoteRefused when ``path``'s folder is not safe to listen in."""

    def __init__(self, path: str, request_s: float = REQUEST_S) -> None:
        self.listener = guard.listen_private(path)
        self.request_s = request_s
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.reading: dict[socket.socket, guard.Reader] = {}  # requests not whole yet
        self.children: dict[int, socket.socket] = {}  # pid -> its client's connection
        self.clients: dict[socket.socket, int] = {}
        self.wake: tuple[int, int] = (-1, -1)

    def preload(self, modules: list[str], never: tuple[str, ...] = NEVER_HERE) -> list[str]:
        """Import ``modules``; the ones that failed (or are never imported here), left to the
        workers to import (and fail at) themselves."""
        failed = []
        for name in modules:
            if name.split(".")[0] in never:
                failed.append(name)
                continue
            try:
                if name.endswith(".*"):
                    failed += _import_package(name[:-2])
                else:
                    importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the worker meets the same error in its own words
                failed.append(name)
        return failed

    def serve(self) -> None:
        """Serve until killed (in the main thread: a child's end wakes the loop by a signal)."""
        wake_r, wake_w = self.wake = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(wake_r, selectors.EVENT_READ, "child")
        while True:
            self.step()

    def step(self, timeout: float | None = None) -> None:
        """One turn of the loop: what is ready is handled, then requests past their deadline
        are refused. Waits ``timeout`` at most, and never past the nearest deadline."""
        if self.reading:
            left = max(0.0, min(r.deadline for r in self.reading.values()) - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        for key, _ in self.selector.select(timeout):
            if key.data == "accept":
                self._accept()
            elif key.data == "child":
                with contextlib.suppress(BlockingIOError):
                    os.read(key.fd, 512)
                self._reap()
            elif key.data == "request":
                self._read(key.fileobj)
            else:
                self._client_event(key.fileobj)
        now = time.monotonic()
        for conn, reader in list(self.reading.items()):
            if reader.deadline <= now:
                self._refuse(conn, f"not whole within {self.request_s:g} s")

    def _accept(self) -> None:
        """A connection: its peer's uid checked (another's is refused and logged), then its
        request read as it comes (:meth:`_read`), never blocking the loop."""
        try:
            conn, _ = self.listener.accept()
        except OSError as e:  # out of fds: the client is refused by the kernel, retries itself
            _log(f"accept failed: {e}")
            return
        try:
            pid = guard.check_peer(conn)
        except guard.Refused as e:
            _log(str(e))
            conn.close()
            return
        conn.setblocking(False)
        self.reading[conn] = guard.Reader(pid, time.monotonic() + self.request_s)
        self.selector.register(conn, selectors.EVENT_READ, "request")

    def _read(self, conn: socket.socket) -> None:
        """A connection whose request is being read became readable: read on, and fork once the
        request is whole; a request that cannot be served is refused."""
        reader = self.reading[conn]
        try:
            whole = reader.feed(conn)
        except BlockingIOError:
            return
        except EOFError:  # asked nothing (answers): nothing to say
            self._drop(conn)
            return
        except (guard.Refused, OSError) as e:
            self._refuse(conn, str(e))
            return
        if not whole:
            return
        try:
            request = guard.parse_request(bytes(reader.data[4:]))
            _python_options(request["argv"])
            if len(reader.fds) != 3:
                raise guard.Refused(f"{len(reader.fds)} file descriptors sent, not the 3 "
                                    "streams a worker takes")
        except (guard.Refused, ValueError) as e:  # ValueError: argv Python would not run
            self._refuse(conn, guard.brief(str(e), 200))
            return
        fds = reader.fds
        reader.fds = []  # handed on: closed by the fork's parent and child
        self._drop(conn, close=False)
        conn.setblocking(True)  # for the answers below: two short lines
        if _hung_up(conn):  # its raylet or node went meanwhile
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        self._fork(conn, request, fds)

    def _refuse(self, conn: socket.socket, why: str) -> None:
        """Answer ``conn``'s client ``{"error": why}`` (never waiting on it), log it, close."""
        _log(f"refused the request of pid {self.reading[conn].pid}: {why}")
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"error": why}).encode() + b"\n", socket.MSG_DONTWAIT)
        self._drop(conn)

    def _drop(self, conn: socket.socket, close: bool = True) -> None:
        """Forget the request being read on ``conn``: its fds closed, and ``conn`` unless
        ``close`` is False (it is handed on)."""
        self.reading.pop(conn).close_fds()
        self.selector.unregister(conn)
        if close:
            conn.close()

    def _fork(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        """Fork the worker ``request`` asks for, with the client's streams ``fds``; tell the
        client its pid."""
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:  # no worker started: the client execs one itself
            _log(f"fork failed: {e}")
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        if pid == 0:
            self.selector.close()
            self.listener.close()
            conn.close()
            for other in [*self.clients, *self.reading]:
                other.close()
            for reader in self.reading.values():
                reader.close_fds()
            for fd in self.wake:
                if fd >= 0:
                    os.close(fd)
            _become_worker(request, fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.clients[conn] = pid
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        self.selector.register(conn, selectors.EVENT_READ, "client")

    def _client_event(self, conn: socket.socket) -> None:
        """A client's connection became readable: it sends nothing more, so it went away (the
        raylet or a node kill ended it): its worker goes too."""
        with contextlib.suppress(OSError):
            if conn.recv(4096, socket.MSG_DONTWAIT):
                return
        pid = self.clients.pop(conn, None)
        self.selector.unregister(conn)
        conn.close()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None or self.clients.pop(conn, None) is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"status": code}).encode() + b"\n")
            self.selector.unregister(conn)
            conn.close()


def _log(line: str) -> None:
    """A line in the zygote's log (its stderr, which its starter points at ``NAME.log``)."""
    print(f"rlsim zygote: {line}", file=sys.stderr, flush=True)


def forked_worker(argv: list[str]) -> bool:
    """Whether a node's process whose command line is ``argv`` is a worker a workers' zygote
    forked that has not retitled itself yet: it still has the zygote's command line (an agents'
    zygote, ``--agents``, forks agents, no workers; the zygote itself is in no node's cgroup)."""
    return argv[1:3] == ["-m", MODULE] and "--agents" not in argv


def main(argv: list[str]) -> int:
    """``SOCKET MODULE[,MODULE...] [--agents] [--request-s=SECONDS]``: serve until killed; 2
    when the socket's folder is not safe to listen in (said in the log, with the fix)."""
    path, modules = argv[0], [m for m in (argv[1] if len(argv) > 1 else "").split(",") if m]
    options = argv[2:]
    request_s = next((float(o.split("=", 1)[1]) for o in options
                      if o.startswith("--request-s=")), REQUEST_S)
    pidfile, ready = os.path.splitext(path)[0] + ".pid", ready_path(path)
    try:
        for target in (pidfile, ready):  # a link or a folder there: refused before listening
            if problem := write_problem(target):
                raise FileRefused(errno.EEXIST, problem)
        # how its end finds it: written before it answers (a launcher that saw it answer
        # may end it at once), then bound before its imports (a worker that asks waits)
        write_file(pidfile, str(os.getpid()), 0o600)
        zygote = Zygote(path, request_s)
    except (guard.ZygoteRefused, FileRefused) as e:  # its workers start as Ray starts them
        _log(f"not started: {e}")
        return 2
    # --agents: this one forks the nodes' agents, which may have Ray loaded before the fork:
    # each takes its node and ports from its arguments, none from what Ray sets per worker
    started = time.monotonic()
    failed = zygote.preload(modules, never=() if "--agents" in options else NEVER_HERE)
    if failed:
        _log(f"left to the workers: {', '.join(failed)}")
    # when the first fork could happen: a worker asking earlier waited this long at most
    _log(f"imported {len(modules) - len(failed)} modules in {time.monotonic() - started:.2f} s")
    write_file(ready, "", 0o600)
    zygote.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
