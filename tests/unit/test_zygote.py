"""rlsim.backends.zygote with the worker set-up's client
(rlsim.ray_internals.worker_setup): a worker forked as Python would run it, its exit
status, signals passed on, a client's death ending its worker."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsim.backends import zygote
from rlsim.ray_internals import worker_setup as ws

CLIENT = """
import os, sys
from rlsim.ray_internals.worker_setup import run_forked
status = run_forked(sys.argv[1], sys.argv[2:], dict(os.environ))
sys.exit(200 if status is None else status)
"""
WORKER = """
import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "argv": sys.argv, "cwd": os.getcwd(),
                  "tag": os.environ.get("TAG"), "path0": sys.path[0],
                  "preloaded": "colorsys" in sys.modules}), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def server(tmp_path):
    path = str(tmp_path / "z.sock")
    proc = subprocess.Popen([sys.executable, "-m", "rlsim.backends.zygote", path, "colorsys"])
    deadline = time.monotonic() + 30
    while not zygote.answers(path):
        assert time.monotonic() < deadline and proc.poll() is None, "no zygote"
        time.sleep(0.02)
    yield path
    proc.kill()
    proc.wait()


def client(path, tmp_path, *args, **popen):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return subprocess.Popen([sys.executable, "-c", CLIENT, path, str(script), *args],
                            cwd=tmp_path, env={**os.environ, "TAG": "mine"},
                            stdout=subprocess.PIPE, text=True, **popen)


def test_the_zygote_says_when_its_imports_are_done(server):
    """Until then a worker that asks waits: the cluster starts no worker ahead of a trainer
    (StartedCluster.prestart_workers) before this file exists."""
    deadline = time.monotonic() + 30
    while not os.path.exists(zygote.ready_path(server)):
        assert time.monotonic() < deadline, "no ready file"
        time.sleep(0.02)
    assert zygote.ready_path(server).endswith("z.ready")


def test_the_worker_runs_as_python_would_run_it_with_the_clients_streams_and_env(server,
                                                                                 tmp_path):
    proc = client(server, tmp_path, "3")
    out, _ = proc.communicate(timeout=60)
    seen = json.loads(out)
    assert proc.returncode == 3
    assert seen["argv"] == [str(tmp_path / "worker.py"), "3"]
    assert (seen["cwd"], seen["tag"], seen["path0"]) == (str(tmp_path), "mine", str(tmp_path))
    assert seen["preloaded"] and seen["pid"] != proc.pid


def test_signals_reach_the_worker_and_its_death_by_signal_is_reported(server, tmp_path):
    proc = client(server, tmp_path, "sleep")
    json.loads(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM


def test_a_signal_sent_before_the_zygote_names_its_worker_reaches_the_worker(tmp_path):
    """The raylet may end a worker it has just started: its SIGTERM, caught while the client
    still waits for the zygote's answer, is passed on once the worker's pid is known (the
    client does not die in the worker's place). A zygote played by the test, which answers
    only after the client has the signal."""
    import socket

    path = str(tmp_path / "slow.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    worker = subprocess.Popen(["sleep", "600"])
    proc = client(path, tmp_path, "sleep")
    try:
        conn, _ = listener.accept()  # the client connects only once its handlers are in
        socket.recv_fds(conn, 4, 3)
        proc.send_signal(signal.SIGTERM)  # held: no pid to pass it on to yet
        conn.sendall(json.dumps({"pid": worker.pid}).encode() + b"\n")
        assert worker.wait(timeout=30) == -signal.SIGTERM
        conn.sendall(json.dumps({"status": -signal.SIGTERM}).encode() + b"\n")
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        worker.kill()
        proc.kill()
        listener.close()


def test_a_dead_client_takes_its_worker_with_it(server, tmp_path):
    proc = client(server, tmp_path, "sleep")
    pid = json.loads(proc.stdout.readline())["pid"]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists():  # reaped by the zygote once dead
        assert time.monotonic() < deadline, "the worker outlived its client"
        time.sleep(0.02)


def test_without_a_zygote_the_client_says_so(tmp_path):
    proc = client(str(tmp_path / "none.sock"), tmp_path, "0")
    proc.communicate(timeout=60)
    assert proc.returncode == 200


def test_a_zygote_that_forks_nothing_leaves_the_start_to_the_client(tmp_path):
    import socket
    import threading
    path = str(tmp_path / "closing.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def close_at_once():
        conn, _ = listener.accept()
        conn.close()

    threading.Thread(target=close_at_once, daemon=True).start()
    proc = client(path, tmp_path, "0")
    proc.communicate(timeout=60)
    listener.close()
    assert proc.returncode == 200


AGENT = """
import json, os, sys
print(json.dumps({"pid": os.getpid(), "parent": os.getppid(), "argv": sys.argv,
                  "path0": sys.path[0], "unbuffered": sys.stdout.write_through,
                  "name": __name__}))
sys.exit(int(sys.argv[1]))
"""
SETUP = ws.__file__


def agent(tmp_path, env):
    """A node's agent as the rewritten raylet command starts it: ``python worker_setup.py
    --rlsim-agent -u -m MODULE ARGS``; what it printed and the client."""
    (tmp_path / "agentmod.py").write_text(AGENT)
    proc = subprocess.Popen([sys.executable, SETUP, "--rlsim-agent", "-u", "-m", "agentmod", "4"],
                            cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            text=True)
    out, _ = proc.communicate(timeout=60)
    return json.loads(out), proc


def test_an_agent_is_forked_and_runs_its_module_as_python_u_m_would(server, tmp_path):
    seen, proc = agent(tmp_path, {"RLSIM_AGENT_ZYGOTE": server})
    assert proc.returncode == 4
    assert seen["parent"] != proc.pid and seen["pid"] != proc.pid  # the zygote's child
    assert seen["argv"] == [str(tmp_path / "agentmod.py"), "4"] and seen["name"] == "__main__"
    assert seen["path0"] == str(tmp_path) and seen["unbuffered"]


def test_without_an_agent_zygote_the_agent_is_execd(tmp_path):
    seen, proc = agent(tmp_path, {"RLSIM_AGENT_ZYGOTE": str(tmp_path / "none.sock")})
    assert proc.returncode == 4 and seen["pid"] == proc.pid
    assert seen["argv"] == [str(tmp_path / "agentmod.py"), "4"] and seen["unbuffered"]


@pytest.mark.parametrize("argv, parsed", [
    (["s.py", "a"], (False, None, ["s.py", "a"])),
    (["-u", "s.py"], (True, None, ["s.py"])),
    (["-u", "-m", "pkg.mod", "--x=1"], (True, "pkg.mod", ["--x=1"])),
])
def test_python_options_a_request_may_carry(argv, parsed):
    assert zygote._python_options(argv) == parsed


@pytest.mark.parametrize("argv", [["-c", "print(1)"], ["-u"], [], ["-m"]])
def test_other_python_command_lines_are_refused(argv):
    with pytest.raises(ValueError, match="cannot run"):
        zygote._python_options(argv)


def test_a_package_star_imports_the_package_and_every_module_under_it(tmp_path, monkeypatch):
    """``PKG.*`` in a preload list: what Ray's dashboard imports by walking its modules
    package, imported once here; a module that fails is named, the others stay imported."""
    pkg = tmp_path / "walked"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "two.py").write_text("Y = 2\n")
    (pkg / "broken.py").write_text("raise RuntimeError('not here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    z = zygote.Zygote(str(tmp_path / "p.sock"))
    try:
        failed = z.preload(["walked.*"])
    finally:
        z.listener.close()
    assert failed == ["walked.broken"]
    assert {"walked.one", "walked.sub", "walked.sub.two"} <= set(sys.modules)
    for name in ("walked", "walked.one", "walked.sub", "walked.sub.two"):
        sys.modules.pop(name, None)


FS_JOB = """
import os, sys
def report(q):
    server = os.getppid()
    with open(f"/proc/{server}/stat") as f:
        server_parent = int(f.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{server}/cmdline", "rb") as f:
        command = f.read().decode().replace("\\0", " ")
    q.put({"server": server, "server_parent": server_parent, "command": command,
           "preloaded": "colorsys" in sys.modules})
"""
FS_AGENT = """
import json, multiprocessing as mp, os
import fsjob
if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=fsjob.report, args=(q,))
    p.start()
    seen = q.get()
    p.join()
    print(json.dumps({**seen, "agent": os.getpid(), "code": p.exitcode}), flush=True)
"""


@pytest.mark.parametrize("forkserver", [True, False])
def test_an_agent_gets_its_forkserver_forked_where_asked(server, tmp_path, forkserver):
    """``--rlsim-forkserver`` (the dashboard, dashboard_forkserver): the agent's multiprocessing
    forkserver is a fork of the agent made before its script ran, holding the zygote's imports
    (colorsys here), and Python uses it as its own; without it, Python execs a fresh server."""
    (tmp_path / "fsjob.py").write_text(FS_JOB)
    (tmp_path / "fsagent.py").write_text(FS_AGENT)
    flags = ["--rlsim-forkserver"] if forkserver else []
    proc = subprocess.run([sys.executable, SETUP, "--rlsim-agent", *flags, "-u",
                           str(tmp_path / "fsagent.py")], cwd=tmp_path,
                          env={**os.environ, "RLSIM_AGENT_ZYGOTE": server},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["code"] == 0 and seen["server_parent"] == seen["agent"]
    assert seen["preloaded"] is forkserver
    assert ("multiprocessing.forkserver" in seen["command"]) is not forkserver, seen


def test_a_forked_forkserver_ends_with_its_last_client(tmp_path):
    code = ("import os, sys\n"
            "from rlsim.ray_internals import forkserver\n"
            "pid = forkserver.start_here()\n"
            "assert pid and forkserver.start_here() is None  # one server a process\n"
            "forkserver.stop_here()\n"
            "os.kill(pid, 0)\n")  # reaped: gone
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "ProcessLookupError" in proc.stderr, proc.stderr


def test_a_forkserver_that_cannot_be_forked_leaves_nothing_open():
    """The fork refused (no memory, a process limit): start_here raises and leaves no socket or
    pipe behind, and Python's own server can still start later."""
    code = ("import os\n"
            "from rlsim.ray_internals import forkserver\n"
            "import multiprocessing.forkserver as fs\n"
            "before = sorted(os.listdir('/proc/self/fd'))\n"
            "def refuse():\n"
            "    raise BlockingIOError(11, 'Resource temporarily unavailable')\n"
            "os.fork = refuse\n"
            "try:\n"
            "    forkserver.start_here()\n"
            "except OSError as e:\n"
            "    print('raised', e.errno)\n"
            "after = sorted(os.listdir('/proc/self/fd'))\n"
            "print(after == before, fs._forkserver._forkserver_pid)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["raised", "11", "True", "None"], proc.stdout + proc.stderr


def test_a_request_whose_client_went_away_meanwhile_forks_nothing(tmp_path):
    """A shared zygote busy importing leaves requests in its socket's backlog; one whose
    client (its raylet, its node) is gone by the time it is read starts no worker."""
    import socket

    path = str(tmp_path / "q.sock")
    z = zygote.Zygote(path)
    try:
        client_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client_sock.connect(path)
        # a worker of a node whose groups are gone: forked, it would exit at once
        request = json.dumps({"argv": ["w.py"], "cwd": str(tmp_path),
                              "env": {"RLSIM_SESSION": "gone", "RLSIM_NODE": "0"}}).encode()
        socket.send_fds(client_sock, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
        client_sock.close()
        z.step(timeout=30)  # the connection
        for _ in range(100):  # its request, read as it arrives (one read here, or a few)
            if not z.reading:
                break
            z.step(timeout=30)
        assert z.reading == {} and z.children == {}
    finally:
        z.listener.close()
        for pid in list(z.children):
            os.waitpid(pid, 0)


def test_a_worker_never_makes_its_nodes_groups_again(tmp_path):
    """Forked after its cluster was reaped, a worker finds its node's groups gone and fails,
    instead of leaving groups that nothing removes."""
    from rlsim.host import cgroups

    if cgroups.available() is not None:
        pytest.skip(f"no node cgroups here: {cgroups.available()}")
    group = cgroups.NodeGroup(f"gone-{os.getpid()}", 0)
    with pytest.raises(FileNotFoundError):
        group.enter(create=False)
    assert not group.path.exists()
