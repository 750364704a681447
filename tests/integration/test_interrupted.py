"""SIGTERM (a scheduler's cancel, `timeout`) in the middle of `rlsim run`: the run unwinds as from
Ctrl-C, so the fault in force is healed, the cluster is stopped and the timeline is written; the
command exits 143. Without this, Python dies at once and leaves the rules and the raylets to the
next command's reaping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from waits import wait_until

from rlsim.host import iptables, procs, state
from rlsim.plugin.session import require

pytestmark = pytest.mark.integration

SCENARIO = """\
name: cut_off_when_cancelled
description: node 1 is cut off from the start; the run is cancelled while the cut is in force
cluster: {nodes: 2, gpus_per_node: 1}
trainer:
  config: grpo_tiny
faults:
  - at: {seconds: 0}
    partition: {groups: [[1]]}
expect:
  - completes: {}
"""


def _as_from_a_terminal() -> None:
    """The signals of the run as a terminal's Ctrl-C finds them, however pytest was started: a
    non-interactive shell starts a background job (`pytest ... &`) with SIGINT ignored, which
    its children inherit (the gray-failure case then failed in every gate started so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _rules(cluster_name: str) -> list[str]:
    out = subprocess.run(["iptables", "-S"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if f":{cluster_name}-" in line]


@pytest.mark.root
def test_sigterm_during_a_fault_heals_it_and_stops_the_cluster(tmp_path: Path):
    require(iptables.Firewall.available())
    path = tmp_path / "cancelled.yaml"
    path.write_text(SCENARIO)
    rlsim = str(Path(sys.executable).parent / "rlsim")
    run = subprocess.Popen([rlsim, "run", str(path), "--report", str(tmp_path / "out")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    name = f"sc{run.pid}-0"  # the runner names a scenario's cluster sc<pid>-<n>
    try:
        wait_until(lambda: run.poll() is not None or any(" -j DROP" in r for r in _rules(name)),
                   90, "the partition's rules in force")
        assert run.poll() is None, run.communicate()[0]
        session = state.load(name).session
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143, out
    assert "stopped by SIGTERM" in out
    assert _rules(name) == [] and procs.find(session) == [] and state.load(name) is None
    timeline = [json.loads(line) for line in
                (tmp_path / "out" / "cut_off_when_cancelled" / "timeline.jsonl").open()]
    assert [e["type"] for e in timeline if e["type"].startswith("fault_")] == \
        ["fault_injected", "fault_healed"]


GRAY = """\
name: {name}
description: a gray failure in force from the start; the run is interrupted meanwhile
cluster: {{nodes: 2, gpus_per_node: 1}}
trainer:
  config: grpo_tiny
  overrides: {{total_steps: 400, save_freq: 2}}
faults:
  - at: {{step: 3}}
    {fault}
expect:
  - completes: {{}}
"""


def _throttled_storage(session: str) -> bool:
    from rlsim.host import cgroups, disk

    points = disk.mounted(session)
    return bool(points) and cgroups.write_limit(disk.device_of(points[0]),
                                                cgroups.io_groups_of([])[0]) is not None


def _slowed_node(session: str) -> bool:
    from rlsim.host import cgroups

    try:
        return cgroups.NodeGroup(session, 1).cpu().limit() is not None
    except RuntimeError:  # the node's group is not made yet
        return False


def _delaying(session: str) -> bool:
    from rlsim.host import delayer

    return any(delayer.is_delayer(pid) for pid in procs.find(session))


def _cut(session: str) -> bool:
    out = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    return any(session in line and "-j DROP" in line for line in out.splitlines())


@pytest.mark.root
@pytest.mark.parametrize("fault,in_force,signum,code", [
    ("slow_storage: {write_mbps: 0.2}", _throttled_storage, signal.SIGINT, 130),
    pytest.param("slow_node: {node: 1, cpu: 0.2}", _slowed_node, signal.SIGTERM, 143,
                 marks=pytest.mark.slow),
    pytest.param("degrade_link: {nodes: [1], delay_ms: 30, loss_pct: 1}", _delaying,
                 signal.SIGTERM, 143, marks=pytest.mark.slow),
    pytest.param("flap_link: {groups: [[1]], period_s: 1.5, down_s: 0.5}", _cut, signal.SIGINT,
                 130, marks=pytest.mark.slow),
], ids=["slow_storage-SIGINT", "slow_node-SIGTERM", "degrade_link-SIGTERM", "flap_link-SIGINT"])
def test_a_gray_failure_in_force_is_healed_when_the_run_is_stopped(
        tmp_path: Path, fault, in_force, signum, code):
    """Ctrl-C or a scheduler's cancel while a gray failure holds: the device is unmounted (its
    loop device freed, the files kept), the CPU quota lifted, the link's rules removed and its
    delayers ended, the flapping stopped, the cluster stopped."""
    from rlsim.host import disk

    name = fault.split(":")[0]
    path = tmp_path / f"{name}.yaml"
    path.write_text(GRAY.format(name=name, fault=fault))
    rlsim = str(Path(sys.executable).parent / "rlsim")
    run = subprocess.Popen([rlsim, "run", str(path), "--report", str(tmp_path / "out")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"},  # kept if killed
                           preexec_fn=_as_from_a_terminal)
    cluster = f"sc{run.pid}-0"
    try:
        wait_until(lambda: run.poll() is not None or (
            (st := state.load(cluster)) is not None and in_force(st.session)), 120,
            f"the {name} in force")
        assert run.poll() is None, run.communicate()[0]
        session = state.load(cluster).session
        run.send_signal(signum)
        try:
            out, _ = run.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGUSR1)  # where it is: every thread's stack, on its stderr
            time.sleep(2)
            run.kill()
            raise AssertionError(f"still running 90 s after the signal; it printed:\n"
                                 f"{run.communicate()[0][-12000:]}") from None
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == code, out
    assert procs.find(session) == [] and state.load(cluster) is None  # delayers too
    assert disk.mounted(session) == [] and _rules(cluster) == []
    timeline = [json.loads(line) for line in
                (tmp_path / "out" / name / "timeline.jsonl").open()]
    kinds = [e["type"] for e in timeline if e["type"].startswith("fault_")]
    assert kinds[:2] == ["fault_injected", "fault_healed"], kinds
    if name == "slow_storage":  # what the trainer saved is kept where it wrote it
        assert kinds[2:] == ["fault_torn_down"], kinds
        assert any((tmp_path / "out" / name / "run" / "checkpoints").glob("global_step_*"))


def _block_stop_signals() -> None:
    _as_from_a_terminal()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_reaches_rlsim_whose_parent_blocked_it(signum):
    """A blocked signal stays blocked through exec, and Ray blocks SIGINT in every process it
    starts: an rlsim started from one would hold a Ctrl-C pending for good, healing nothing.
    rlsim unblocks the stop signals as it starts; here a cluster started so stops at the
    signal."""
    name = f"blocked-{os.getpid()}-{int(signum)}"
    rlsim = str(Path(sys.executable).parent / "rlsim")
    run = subprocess.Popen([rlsim, "cluster", "--nodes", "1", "--fake-gpus", "1", "--name", name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"},
                           preexec_fn=_block_stop_signals)
    watchdog = threading.Timer(240, run.kill)  # a run that never gets there: the test fails
    watchdog.start()
    try:
        seen = []
        for line in run.stdout:  # up to the line it prints as it starts waiting for the signal
            seen.append(line)
            if "tears the cluster down" in line:
                break
        assert run.poll() is None, "".join(seen)
        run.send_signal(signum)
        out = "".join(seen) + run.communicate(timeout=60)[0]
    finally:
        watchdog.cancel()
        if run.poll() is None:
            run.kill()
            subprocess.run([rlsim, "down", name], capture_output=True, timeout=120)
    assert run.returncode == 0 and f"cluster {name!r} stopped" in out, out
    assert state.load(name) is None
