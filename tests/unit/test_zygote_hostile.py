"""The workers' zygote (rlsim.backends.zygote, rlsim.backends.zygote_guard) against other local
users and hostile requests: only its own user reaches it (its socket's folder, the peer's uid),
a request is bounded in size, depth and time and never ends it, its files are never written or
read through a link; and a fuzzer over request bytes: the zygote answers an error or closes,
never dies.

A second user is ``rlsimtest`` (made with ``useradd -M`` where this runs as root; skipped
with the reason elsewhere), become by a forked child."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import queue
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.backends import zygote, zygote_guard
from rlsim.ray_internals.worker_setup import MAX_REQUEST

CLIENT = """
import os, sys
from rlsim.ray_internals.worker_setup import run_forked
status = run_forked(sys.argv[1], sys.argv[2:], dict(os.environ))
sys.exit(200 if status is None else status)
"""
WORKER = "import os, sys\nprint(os.getpid(), flush=True)\nsys.exit(int(sys.argv[1]))\n"


class Live:
    """A zygote serving at ``folder/z.sock`` (started under ``umask``), its log read line by
    line as it comes: a test waits on a line, never on the clock."""

    def __init__(self, folder: Path, request_s: float | None = None, umask: int = 0o022):
        self.path = str(folder / "z.sock")
        args = [sys.executable, "-m", "rlsim.backends.zygote", self.path, "colorsys"]
        if request_s is not None:
            args.append(f"--request-s={request_s}")
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, umask=umask)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_line("imported")  # it listens, and forks at once from now on

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_line(self, text: str, timeout: float = 60) -> str:
        """The zygote's next log line holding ``text``; fails when it ends or says none."""
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"the zygote did not say {text!r}; it said {seen}")
            if line is None:
                pytest.fail(f"the zygote ended ({self.proc.wait()}) without saying {text!r}: "
                            f"{seen}")
            seen.append(line)
            if text in line:
                return line

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def shared_tmp():
    """A folder others may enter (0755): a home the user opened, as in the issue."""
    folder = Path(tempfile.mkdtemp(prefix="rlsim-zh-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def legit_worker(path: str, folder: Path, code: int = 3) -> subprocess.CompletedProcess:
    """A worker asked for as the raylet's worker set-up asks (``run_forked``)."""
    script = folder / "worker.py"
    script.write_text(WORKER)
    return subprocess.run([sys.executable, "-c", CLIENT, path, str(script), str(code)],
                          cwd=folder, capture_output=True, text=True, timeout=60)


def assert_forks(path: str, folder: Path) -> None:
    done = legit_worker(path, folder)
    assert done.returncode == 3, (done.returncode, done.stderr)  # 200: no zygote answered
    assert int(done.stdout.split()[0]) != os.getpid()


def ask(path: str, data: bytes, fds: int = 3, timeout: float = 30, hang_up: bool = True) -> str:
    """Send ``data`` (with ``fds`` streams, /dev/null), stop writing (``hang_up``: the zygote
    then knows no more is coming; a client that did would get no worker), and read the
    zygote's answer to its end; '' when it closed without one (or reset)."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if fds and data:
                    socket.send_fds(sock, [data], [null] * fds)
                else:
                    sock.sendall(data)
                if hang_up:
                    sock.shutdown(socket.SHUT_WR)
            answer = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(4096):
                    answer += chunk
            return answer.decode()
    finally:
        os.close(null)


def framed(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


# ---- the socket: only its owner reaches it ---------------------------------------------------

def test_the_socket_is_0600_in_a_0700_folder_of_its_own_under_umask_000(shared_tmp):
    live = Live(shared_tmp, umask=0)
    try:
        folder = Path(zygote_guard.socket_folder(live.path))
        st_dir, st_sock = os.lstat(folder), os.lstat(folder / zygote_guard.SOCKET_NAME)
        assert stat.S_ISDIR(st_dir.st_mode) and st_dir.st_uid == os.geteuid()
        assert stat.S_IMODE(st_dir.st_mode) == 0o700
        assert stat.S_ISSOCK(st_sock.st_mode) and stat.S_IMODE(st_sock.st_mode) == 0o600
        assert os.path.islink(live.path)  # the name clients are given leads there
        assert_forks(live.path, shared_tmp)
    finally:
        live.close()


def _plant(folder: Path, what: str, elsewhere: Path) -> str:
    """``folder`` planted as ``what``; the words the refusal must hold."""
    if what == "open to others":
        folder.mkdir(mode=0o700)
        folder.chmod(0o755)
        return "has mode 755, not 700"
    if what == "another user's":
        if os.geteuid() != 0:
            pytest.skip("not root: cannot give a folder to another user")
        folder.mkdir(mode=0o700)
        os.chown(folder, 65534, 65534)
        return "belongs to uid 65534"
    if what == "a link to a folder":
        elsewhere.mkdir(mode=0o700)
        folder.symlink_to(elsewhere)
        return "is not a folder of its own"
    folder.write_text("x")
    return "is not a folder of its own"


@pytest.mark.parametrize("what", ["open to others", "another user's", "a link to a folder",
                                  "a file"])
def test_a_socket_folder_that_is_not_the_owners_alone_is_refused(tmp_path, what):
    """The zygote does not start (its workers start as Ray starts them) and says which
    folder, what is wrong with it and the fix."""
    path = tmp_path / "z.sock"
    words = _plant(tmp_path / "z.d", what, tmp_path / "elsewhere")
    proc = subprocess.run([sys.executable, "-m", "rlsim.backends.zygote", str(path), ""],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(tmp_path / "z.d") in proc.stderr and words in proc.stderr, proc.stderr
    assert "remove it" in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.lexists(path) and not list(tmp_path.glob("elsewhere/*"))


def second_user() -> tuple[int, int]:
    """The uid and gid of ``rlsimtest``, made if missing; skips where none can be."""
    if os.geteuid() != 0:
        pytest.skip("not root: no second user can be made or become here")
    try:
        return pwd.getpwnam("rlsimtest").pw_uid, pwd.getpwnam("rlsimtest").pw_gid
    except KeyError:
        pass
    try:
        made = subprocess.run(["useradd", "-M", "rlsimtest"], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        pytest.skip("no useradd here: no second user can be made")
    try:  # another test may have made it meanwhile
        return pwd.getpwnam("rlsimtest").pw_uid, pwd.getpwnam("rlsimtest").pw_gid
    except KeyError:
        pytest.skip(f"no second user: useradd said {made.stderr.strip() or made.returncode}")


def as_user(uid: int, gid: int, path: str, argv: list[str]) -> dict:
    """Ask the zygote at ``path`` for a worker running ``argv`` from a forked child that
    became ``uid``: what happened (``connect`` failed with an errno, or the ``answer``)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            request = framed(json.dumps({"argv": argv, "env": {}, "cwd": "/"}).encode())
            try:
                seen = {"answer": ask(path, request, hang_up=False)}
            except OSError as e:
                seen = {"connect": errno.errorcode.get(e.errno, str(e))}
        except BaseException as e:  # noqa: BLE001 - said to the parent
            seen = {"failed": repr(e)}
        os.write(write_end, json.dumps(seen).encode())
        os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 90)
        assert ready, "the second user's child said nothing"
        out = b""
        while chunk := os.read(read_end, 65536):
            out += chunk
    finally:
        os.close(read_end)
        os.waitpid(child, 0)
    seen = json.loads(out)
    if "failed" in seen:
        pytest.skip(f"cannot become the second user here: {seen['failed']}")
    return seen


def _marker_script(folder: Path) -> tuple[list[str], Path]:
    marker = folder / "ran-as-zygote-user"
    script = folder / "evil.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('owned')\n")
    script.chmod(0o644)
    return [str(script)], marker


def test_another_user_cannot_reach_the_zygote_in_a_home_open_to_others(shared_tmp):
    """The issue's case: a home made 0755, umask 000. Another user's connect is refused by
    the socket's folder; nothing runs as the zygote's user."""
    uid, gid = second_user()
    argv, marker = _marker_script(shared_tmp)
    live = Live(shared_tmp, umask=0)
    try:
        seen = as_user(uid, gid, live.path, argv)
        assert seen == {"connect": "EACCES"}, seen
        assert not marker.exists()
        assert_forks(live.path, shared_tmp)
    finally:
        live.close()


def test_a_peer_of_another_uid_is_refused_and_named_even_where_the_socket_was_opened(
        shared_tmp):
    """Should the folder and socket be opened up, the peer's uid (SO_PEERCRED) still decides:
    refused, closed, named in the zygote's log; the zygote serves its own user on."""
    uid, gid = second_user()
    argv, marker = _marker_script(shared_tmp)
    live = Live(shared_tmp)
    try:
        folder = os.path.splitext(live.path)[0] + ".d"
        if os.path.isdir(folder):
            os.chmod(folder, 0o711)
        os.chmod(live.path, 0o666)  # the socket itself (through the link)
        seen = as_user(uid, gid, live.path, argv)
        assert seen == {"answer": ""}, seen  # connected, then closed: nothing forked
        assert not marker.exists()
        line = live.wait_line("refused a connection")
        assert f"uid {uid}" in line and f"uid {os.geteuid()} alone" in line, line
        assert_forks(live.path, shared_tmp)
    finally:
        live.close()


# ---- requests: bounded in size, depth and time ----------------------------------------------

@pytest.mark.parametrize("data, says", [
    (framed(b"[" * 100_000), "nested deeper"),
    (b"[" * 100_000, f"over the {MAX_REQUEST}"),
    (framed(b"\xff" * 10), "not JSON"),
    (framed(json.dumps({"argv": ["w.py"], "env": {}, "cwd": "/", "x": 1}).encode()),
     "unknown field 'x'"),
])
def test_a_hostile_request_is_answered_with_an_error_and_the_zygote_serves_on(
        shared_tmp, data, says):
    live = Live(shared_tmp)
    try:
        answer = ask(live.path, data)
        assert says in json.loads(answer)["error"], answer
        assert live.proc.poll() is None
        assert says in live.wait_line("refused the request")
        assert_forks(live.path, shared_tmp)
    finally:
        live.close()


def _trickle(path: str, stop: threading.Event, cut: threading.Event) -> None:
    """A client that says its request is the largest allowed, then sends a byte at a time
    until the zygote cuts it off."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(MAX_REQUEST.to_bytes(4, "big"))
        while not stop.is_set():
            try:
                sock.send(b" ")
            except OSError:
                break
            stop.wait(0.05)
    cut.set()


def test_a_trickling_client_holds_no_one_up_and_is_cut_at_its_deadline(shared_tmp):
    """One deadline for the whole request (here 1 s), not one per receive: the trickler is
    cut although a byte comes every 50 ms, and meanwhile others are served."""
    live = Live(shared_tmp, request_s=1)
    stop, cut = threading.Event(), threading.Event()
    tricklers = [threading.Thread(target=_trickle, args=(live.path, stop, cut), daemon=True)
                 for _ in range(3)]
    try:
        for t in tricklers:
            t.start()
        assert_forks(live.path, shared_tmp)
        assert cut.wait(60), "a client sending a byte at a time was never cut off"
        assert "not whole within 1 s" in live.wait_line("refused the request")
        assert live.proc.poll() is None
    finally:
        stop.set()
        live.close()


def test_a_client_told_no_starts_its_worker_itself(tmp_path):
    """The worker set-up, answered ``{"error": ...}``, says so and returns None (the raylet's
    worker then starts as Ray starts it), rather than a KeyError."""
    path = str(tmp_path / "no.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def refuse():
        conn, _ = listener.accept()
        for fd in socket.recv_fds(conn, 1 << 16, 3)[1]:  # its streams: kept, it never ends
            os.close(fd)
        conn.sendall(b'{"error": "nested deeper than a request ever is"}\n')
        conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    done = legit_worker(path, tmp_path)
    listener.close()
    assert done.returncode == 200, done.stderr
    assert "refused: nested deeper" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("body, says", [
    (b"[]", "a JSON list, not an object"),
    (b'{"argv": "w.py", "env": {}, "cwd": "/"}', "argv is a JSON str, not a list"),
    (b'{"argv": [1], "env": {}, "cwd": "/"}', "argv holds something other than strings"),
    (b'{"argv": ["w.py"], "env": {"A": 1}, "cwd": "/"}', "env maps something other"),
    (b'{"argv": ["w.py"], "env": {}}', "no cwd"),
    (b'{"argv": ["w.py"], "env": {}, "cwd": "/", "forkserver": 1}', "forkserver is a JSON int"),
    (b'{"a": ' * 5000, "nested deeper"),
    (b'{"\\u001b[2J": 1}', "unknown field '\\x1b[2J'"),
])
def test_parse_request_refuses_what_the_worker_set_up_never_sends(body, says):
    with pytest.raises(zygote_guard.Refused, match=None) as refused:
        zygote_guard.parse_request(body)
    assert says in str(refused.value) and "\x1b" not in str(refused.value)


def test_parse_request_takes_what_the_worker_set_up_sends():
    request = {"argv": ["-u", "w.py"], "env": {"A": "b"}, "cwd": "/", "forkserver": True}
    assert zygote_guard.parse_request(json.dumps(request).encode()) == request


# ---- its files: never through a link ----------------------------------------------------------

@pytest.mark.parametrize("end", [".pid", ".ready"])
def test_a_link_at_its_pid_or_ready_file_is_refused_never_written_through(tmp_path, end):
    """Written by the one safe writer (rlsim.files): a link there is refused, named, before
    the zygote listens; its target is never written."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / f"z{end}").symlink_to(victim)
    proc = subprocess.run([sys.executable, "-m", "rlsim.backends.zygote",
                           str(tmp_path / "z.sock"), ""], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and f"z{end} is a symlink" in proc.stderr, proc.stderr
    assert victim.read_text() == "keep" and not os.path.lexists(tmp_path / "z.sock")


def test_its_pid_and_ready_files_are_private_regular_files(tmp_path):
    live = Live(tmp_path, umask=0)
    try:
        assert_forks(live.path, tmp_path)  # by now its ready file is written
        for end in (".pid", ".ready"):
            st_ = os.lstat(tmp_path / f"z{end}")
            assert stat.S_ISREG(st_.st_mode) and stat.S_IMODE(st_.st_mode) == 0o600
        assert (tmp_path / "z.pid").read_text() == str(live.proc.pid)
    finally:
        live.close()


def test_a_shared_zygotes_lock_and_log_are_never_opened_through_a_link(tmp_path):
    """A link at the lock is refused (naming it); one at the log is moved aside to ``.log.1``,
    never written through; the zygote starts and ends with its files, its folder included."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    stem = Path(os.path.splitext(zygote.shared_path(tmp_path, "k"))[0])
    Path(f"{stem}.lock").symlink_to(victim)
    with pytest.raises(zygote_guard.ZygoteRefused, match="zygote's lock"):
        zygote.start_shared(tmp_path, "k", [], dict(os.environ))
    Path(f"{stem}.lock").unlink()
    Path(f"{stem}.log").symlink_to(victim)
    try:
        path = zygote.start_shared(tmp_path, "k", [], dict(os.environ))
        assert zygote.answers(path)
        assert Path(f"{stem}.log.1").is_symlink() and not Path(f"{stem}.log").is_symlink()
    finally:
        killed = zygote.end_shared(tmp_path)
    assert len(killed) == 1 and victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]


@pytest.mark.parametrize("plant", ["link", "fifo"])
def test_ending_shared_zygotes_never_reads_a_pid_through_a_link_or_a_fifo(tmp_path, plant):
    """A pid file that is a link (to a file naming a live process whose command line holds
    the socket's name) kills nothing; one that is a FIFO does not hang the reaper."""
    stem = os.path.splitext(zygote.shared_path(tmp_path, "k"))[0]
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                  f"{stem}.sock"])
    pidfile = Path(f"{stem}.pid")
    if plant == "link":
        (tmp_path / "elsewhere").write_text(str(bystander.pid))
        pidfile.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(pidfile)
    ended: list = []
    reaper = threading.Thread(target=lambda: ended.append(zygote.end_shared(tmp_path)),
                              daemon=True)
    try:
        reaper.start()
        reaper.join(60)
        assert not reaper.is_alive(), "ending the shared zygotes hung on the pid file"
        assert ended == [[]] and bystander.poll() is None
    finally:
        if reaper.is_alive():  # free it: a writer opens the FIFO
            with contextlib.suppress(OSError):
                os.close(os.open(pidfile, os.O_WRONLY | os.O_NONBLOCK))
        bystander.kill()
        bystander.wait()


# ---- the fuzzer: random request bytes -------------------------------------------------------

FUZZ = settings(deadline=timedelta(seconds=20), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["argv", "env", "cwd", "forkserver", "x", ""]), inner, max_size=4)),
    max_leaves=10)
REQUESTS = st.one_of(
    st.tuples(st.binary(max_size=512), st.integers(0, 4)),  # anything, with streams or none
    st.tuples(st.binary(max_size=512).map(framed), st.integers(0, 4)),  # a true length
    st.tuples(st.builds(lambda n, b: n.to_bytes(4, "big") + b, st.integers(0, 2**32 - 1),
                        st.binary(max_size=64)), st.just(3)),  # a length that lies
    st.tuples(JSON.map(lambda v: framed(json.dumps(v).encode())), st.just(0)),  # odd shapes
    st.tuples(st.sampled_from([b"[" * 100_000, b'{"a":' * 30_000, b'"\\u' * 1000,
                               b"1" * 200_000]).map(framed), st.integers(0, 3)),
)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zfuzz")
    live = Live(folder, request_s=2)
    yield live, folder
    live.close()


@FUZZ
@given(REQUESTS)
def test_fuzz_requests_are_answered_an_error_or_closed_and_never_end_the_zygote(fuzzed,
                                                                                request):
    """No request made here can be served (none hands over three streams with a request of
    the right shape): each gets ``{"error": ...}`` or a close, and the zygote lives on."""
    live, _ = fuzzed
    data, fds = request
    answer = ask(live.path, data, fds)
    assert answer == "" or set(json.loads(answer)) == {"error"}, answer
    assert live.proc.poll() is None, "the zygote died"


def test_after_the_fuzzing_the_zygote_still_forks(fuzzed):
    live, folder = fuzzed
    assert_forks(live.path, folder)
    assert live.proc.poll() is None


# ---- the shared zygote's start: every wait bounded, every failure the plain path ------------

def _in_thread(call) -> tuple[bool, object]:
    """``call()`` run in a thread given 60 s: (whether it ended, what it returned or raised)."""
    out: list = []

    def run():
        try:
            out.append(call())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    return not thread.is_alive(), out[0] if out else None


def test_a_shared_lock_on_an_old_lock_file_is_waited_on_with_a_bound_naming_its_holder(
        tmp_path, monkeypatch):
    """Older rlsims made the lock 0644: anyone could open it and hold a shared lock, and the
    start (and the home's end, under the home's lock) waited for ever. Now it is made 0600,
    the wait has a bound, and the refusal names the holder."""
    stem = os.path.splitext(zygote.shared_path(tmp_path, "k"))[0]
    lock = f"{stem}.lock"
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644))
    os.chmod(lock, 0o644)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                               f"fd = os.open({lock!r}, os.O_RDONLY)\n"
                               "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('held', flush=True)\n"
                               "sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    monkeypatch.setattr(zygote, "LOCK_WAIT_S", 0.3, raising=False)
    try:
        assert holder.stdout.readline() == "held\n"
        ended, said = _in_thread(lambda: zygote.start_shared(tmp_path, "k", [], dict(os.environ)))
        assert ended, "start_shared hung on a lock another process holds"
        assert isinstance(said, zygote_guard.ZygoteRefused), said
        assert f"by pid {holder.pid} (" in str(said) and "Fix: end that process" in str(said)
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
        Path(f"{stem}.pid").write_text("1")  # as the home's end finds it
        ended, killed = _in_thread(lambda: zygote.end_shared(tmp_path))
        assert ended and killed == [], killed
    finally:
        holder.kill()
        holder.wait()
        _kill_started_with(str(tmp_path))  # a zygote a start that waited on had started


def _kill_started_with(text: str) -> None:
    """Kill the processes whose command line holds ``text`` (a test's own, by pid)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if text.encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), 9)


def test_a_zygote_stuck_before_it_listens_is_killed_and_its_log_named(tmp_path, monkeypatch):
    """A zygote stopped before it binds held the lock for ever, and every start of the home
    waited on it: now it is killed past its bound, the lock freed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os, signal\n"
                                           "os.kill(os.getpid(), signal.SIGSTOP)\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    monkeypatch.setattr(zygote, "BIND_S", 0.5, raising=False)
    try:
        ended, said = _in_thread(lambda: zygote.start_shared(tmp_path, "k", [], env))
        assert ended, "start_shared waited for ever on a zygote that never listens"
        assert isinstance(said, TimeoutError), said
        assert str(tmp_path / "z-k.log") in str(said) and "killed" in str(said), said
        pid = int(str(said).split("(pid ")[1].split(")")[0])
        assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
        with zygote_guard.locked(str(tmp_path / "z-k.lock"), 0):
            pass  # free at once
    finally:
        _kill_started_with(str(tmp_path))


def test_a_zygote_that_cannot_start_leaves_the_workers_to_start_without_it(tmp_path,
                                                                           monkeypatch, capsys):
    """A log it cannot move aside (a folder at .log.1): the launcher says so in a line and goes
    on (the workers start as Ray starts them); it died with a traceback."""
    from types import SimpleNamespace

    from rlsim.backends import node_start
    from rlsim.ray_internals.worker_setup import ZYGOTE_VAR

    monkeypatch.delenv(ZYGOTE_VAR, raising=False)
    (tmp_path / "zygote.log").write_text("the last zygote's")
    (tmp_path / "zygote.log.1").mkdir()
    st = SimpleNamespace(root=tmp_path, spec=SimpleNamespace(name="c"))
    node_start._start_zygote(st, "zygote", ZYGOTE_VAR, ["colorsys"])
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith("rlsim: no zygote for cluster 'c'"), said
    assert "zygote.log" in said[0]
    assert not zygote.answers(os.environ[ZYGOTE_VAR])  # the plain path: none answers


def test_a_shared_zygote_refused_leaves_the_workers_to_start_without_it(tmp_path, monkeypatch,
                                                                        capsys):
    """The home's zygote refused (a link at its lock): one line, and the launcher goes on."""
    from rlsim.backends import node_start
    from rlsim.host import state
    from rlsim.host.spec import ClusterSpec
    from rlsim.ray_internals.worker_setup import ZYGOTE_VAR

    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(ZYGOTE_VAR, "")  # restored after: the launcher sets it
    st = state.reserve(ClusterSpec(name="c"), "local", detached=False)
    st.root.mkdir(parents=True, exist_ok=True)
    key = node_start.shared_zygote_key(node_start._shared_zygote_env(st), ["colorsys"])
    stem = os.path.splitext(zygote.shared_path(st.root.parent, key))[0]
    Path(f"{stem}.lock").symlink_to(tmp_path / "elsewhere")
    node_start._start_zygote(st, "zygote", ZYGOTE_VAR, ["colorsys"], shared=True)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "no zygote for cluster 'c'" in said[0], said
    assert "zygote's lock" in said[0] and "remove it" in said[0], said
    assert not zygote.answers(os.environ[ZYGOTE_VAR])
    assert not (tmp_path / "elsewhere").exists()
