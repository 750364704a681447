"""slow_start holds a node's Ray workers as they take work, and nothing else of the node: the
titles it reads (:func:`rlsim.ray_internals.nodes.work_of`, on the titles Ray gives), its verbs
(:func:`rlsim.host.nodeops.cmdlines`, :func:`~rlsim.host.nodeops.signal_some`) on real
processes of this machine labelled as a node's are, and the fault's parameters as data."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from pydantic import ValidationError

from rlsim.backends import zygote
from rlsim.faults.slow_start import SlowStart
from rlsim.host import nodeops, procs
from rlsim.ray_internals import nodes


@pytest.mark.parametrize(("title", "work"), [
    ("ray::IDLE", ""),
    ("ray::Worker.setup", "ray::Worker.setup"),
    ("ray::Worker", "ray::Worker"),
    ("ray::DashboardAgent", None),
    ("ray::RuntimeEnvAgent", None),
    ("ray::IDLE_SpillWorker", None),
    ("ray::SPILL_SpillWorker", None),
    ("ray::RESTORE_RestoreWorker", None),
    ("/usr/bin/raylet", None),
    ("python", None),  # a worker not yet retitled: nothing to say of its work
    ("", None),  # a process exiting (its cmdline empties before it is gone)
    (" ", None),
])
def test_what_a_workers_title_says_it_does(title, work):
    assert nodes.work_of([title]) == work


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Start processes as node 0 of session ``s-hold`` would have them: ``title`` their argv[0]
    (Ray titles its workers ``ray::...``)."""
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    started: list[subprocess.Popen] = []

    def start(title: str, labelled: bool = True) -> int:
        env = {**os.environ, **procs.labels("s-hold"), procs.NODE_VAR: "0"} if labelled \
            else dict(os.environ)
        p = subprocess.Popen([title, "60"], executable="/bin/sleep", env=env)
        started.append(p)
        return p.pid
    yield start
    for p in started:
        p.kill()
        p.wait()


def state(pid: int, want: str) -> str:
    """The process's state letter once it is ``want`` (a signal lands in microseconds)."""
    deadline = time.monotonic() + 5
    while (now := procs._state(pid)) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


def test_the_nodes_workers_are_seen_with_their_work_and_signalled_alone(node):
    idle, busy = node("ray::IDLE"), node("ray::Worker.setup")
    node("raylet")
    node("ray::DashboardAgent")
    stranger = node("ray::Worker.setup", labelled=False)  # no process of this node
    seen = nodeops.cmdlines("s-hold", 0, False)
    assert stranger not in seen and nodeops.cmdlines("s-hold", 1, False) == {}
    assert seen[busy] == ["ray::Worker.setup", "60"]
    assert {pid: work for pid, argv in seen.items()
            if (work := nodes.work_of(argv)) is not None} == {idle: "",
                                                              busy: "ray::Worker.setup"}
    sent = nodeops.signal_some("s-hold", 0, False, [busy, stranger], signal.SIGSTOP)
    assert sent == [busy]
    assert state(busy, "T") == "T" and state(stranger, "S") == "S" and state(idle, "S") == "S"
    assert nodeops.signal_some("s-hold", 0, False, [busy, 999_999_999],
                               signal.SIGCONT) == [busy]
    assert state(busy, "S") == "S"


@pytest.mark.parametrize(("params", "error"), [
    ({"node": 1}, "seconds"),
    ({"node": 1, "seconds": 0}, "greater than 0"),
    ({"seconds": 5}, "name the node"),
    ({"node": 1, "role": "rollout", "seconds": 5}, "one of them"),
])
def test_its_parameters_are_refused_naming_the_field(params, error):
    with pytest.raises(ValidationError, match=error):
        SlowStart.Params.model_validate(params)


def test_aimed_by_a_roles_rank_it_takes_the_rank_and_the_time():
    p = SlowStart.Params.model_validate({"role": "rollout", "rank": 1, "seconds": 2.5})
    assert (p.role, p.rank, p.seconds, p.node) == ("rollout", 1, 2.5, None)


@pytest.mark.parametrize(("argv", "forked"), [
    (["/venv/bin/python", "-m", "rlsim.backends.zygote", "/run/z.sock", "torch"], True),
    (["/venv/bin/python", "-m", "rlsim.backends.zygote", "/run/a.sock", "ray", "--agents"],
     False),  # an agents' zygote forks agents, no workers
    (["/venv/bin/python", "/x/rlsim/ray_internals/worker_setup.py", "default_worker.py"],
     False),  # the raylet's worker command, waiting on the zygote for its worker
    (["python"], False),
])
def test_a_worker_a_zygote_forked_is_known_by_the_zygotes_command_line(argv, forked):
    assert zygote.forked_worker(argv) is forked
