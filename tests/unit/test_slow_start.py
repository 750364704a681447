"""slow_start holds a node's Ray workers and nothing else of it: its verbs
(:func:`rlsim.host.nodeops.stop_workers`, :func:`~rlsim.host.nodeops.continue_workers`) on real
processes of this machine, labelled as a node's are, and the fault's parameters as data."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from pydantic import ValidationError

from rlsim.faults.slow_start import SlowStart
from rlsim.host import nodeops, procs


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Start processes as node 0 of session ``s-hold`` would have them: ``title`` their argv[0]
    (Ray titles its workers ``ray::...``)."""
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    started: list[subprocess.Popen] = []

    def start(title: str) -> int:
        env = {**os.environ, **procs.labels("s-hold"), procs.NODE_VAR: "0"}
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


def test_only_the_nodes_ray_workers_are_held_and_each_goes_on_once(node):
    idle, busy, raylet = node("ray::IDLE"), node("ray::Worker.setup"), node("raylet")
    assert procs.ray_worker(idle) and not procs.ray_worker(raylet)
    assert nodeops.stop_workers("s-hold", 0, False, spare=[busy]) == [idle]
    assert state(idle, "T") == "T" and state(busy, "S") == "S" and state(raylet, "S") == "S"
    assert nodeops.stop_workers("s-hold", 0, False, spare=[idle, busy]) == []
    assert nodeops.stop_workers("s-hold", 1, False, spare=[]) == []  # another node's: none
    assert nodeops.continue_workers("s-hold", 0, False, [idle, 999_999_999]) == [idle]
    assert state(idle, "S") == "S"


def test_a_pid_no_longer_the_nodes_is_not_signalled(node):
    stranger = subprocess.Popen(["ray::IDLE", "60"], executable="/bin/sleep")  # no labels
    try:
        assert nodeops.continue_workers("s-hold", 0, False, [stranger.pid]) == []
        assert nodeops.stop_workers("s-hold", 0, False, spare=[]) == []
        assert state(stranger.pid, "S") == "S"
    finally:
        stranger.kill()
        stranger.wait()


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
