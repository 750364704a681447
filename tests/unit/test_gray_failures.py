"""Gray failures' pure parts: the CPU quota a slow node gets and the write cap of slow storage
(cgroup v1 and v2 files, as the kernel reads them), and the progress_within_s and
throughput_within checks on recorded timelines."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.checks import CHECKS, step_seconds, window_ratios
from rlsim.history import Outcome
from rlsim.host.cgroups import (
    CpuGroup,
    bytes_per_s,
    cpu_quota,
    throttle_writes,
    write_limit,
    write_throttle_rule,
)


@pytest.mark.parametrize("cores,quota", [
    (None, None), (0.2, 20_000), (1, 100_000), (2.5, 250_000), (0.001, 1000), (0.0049, 1000)])
def test_cores_become_microseconds_a_period_never_under_the_kernels_least(cores, quota):
    assert cpu_quota(cores) == quota


def test_a_v2_group_is_capped_in_cpu_max_and_lifted_to_max(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    group = CpuGroup(tmp_path)
    assert group.limit() is None
    group.set_limit(0.2)
    assert (tmp_path / "cpu.max").read_text() == "20000 100000" and group.limit() == 0.2
    group.set_limit(None)
    assert (tmp_path / "cpu.max").read_text() == "max 100000" and group.limit() is None


def test_a_v1_group_is_capped_in_cfs_quota_and_lifted_to_minus_one(tmp_path):
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    group = CpuGroup(tmp_path)
    group.set_limit(1.5)
    assert (tmp_path / "cpu.cfs_quota_us").read_text() == "150000" and group.limit() == 1.5
    group.set_limit(None)
    assert (tmp_path / "cpu.cfs_quota_us").read_text() == "-1" and group.limit() is None


def outcome(steps: list[float], exited: float | None, extra: list[dict] = ()) -> Outcome:
    timeline = [{"ts": t, "source": "trainer", "type": "step_end", "step": i + 1}
                for i, t in enumerate(steps)]
    if exited is not None:
        timeline.append({"ts": exited, "source": "rlsim", "type": "trainer_exited",
                         "returncode": 0})
    timeline = sorted([*timeline, *extra], key=lambda e: e["ts"])
    return Outcome(scenario=None, run_dir=Path("."), timeline=timeline, started=0.0)


def judge(o: Outcome, seconds: float):
    check = CHECKS["progress_within_s"]
    return check.judge(o, check.params(seconds))


STARTED = {"ts": 40.0, "source": "rlsim", "type": "trainer_started", "attempt": 0}
COMPLETED = {"ts": 54.2, "source": "trainer", "type": "run_end", "status": "completed"}


def test_steady_steps_pass_with_the_longest_gap_as_the_figure():
    verdict = judge(outcome([50.0, 51.0, 53.0, 54.0], 54.5), 30)
    assert verdict.ok and verdict.value == 2.0


def test_the_window_starts_with_the_trainer_so_a_start_up_stall_counts():
    """A start that takes 95 s to its first step is a stall like any other (torchft's replica
    groups replaced twice before the first step were invisible when the window began there)."""
    verdict = judge(outcome([135.0, 136.0], 137.0, [STARTED]), 30)
    assert not verdict.ok and verdict.value == 95.0
    assert "from +40.0 s; the last event in it: trainer_started" in verdict.message
    assert judge(outcome([50.0, 51.0], 52.0, [STARTED]), 30).value == 10.0


def test_the_teardown_after_the_last_step_of_a_completed_run_is_not_a_stall():
    done = judge(outcome([50.0, 51.0, 53.0, 54.0], 90.0, [STARTED, COMPLETED]), 30)
    assert done.ok and done.value == 10.0  # start to step 1; the 36 s of teardown left out
    from rlsim.report.lanes import teardown_s

    events = outcome([50.0, 54.0], 90.0, [STARTED, COMPLETED]).timeline
    assert teardown_s(events) == 36.0


def test_a_stall_fails_naming_the_last_event_seen_in_it():
    fault = {"ts": 12.0, "source": "rlsim", "type": "fault_injected", "fault": "hang_role"}
    verdict = judge(outcome([10.0, 11.0, 50.0], 51.0, [fault]), 30)
    assert not verdict.ok and verdict.value == 39.0
    assert "from +11.0 s; the last event in it: fault_injected" in verdict.message


def test_a_run_that_stops_stepping_until_it_is_killed_fails_on_the_tail():
    verdict = judge(outcome([10.0, 11.0], 300.0), 30)
    assert not verdict.ok and verdict.value == 289.0


def test_no_step_at_all_fails_naming_the_last_event():
    verdict = judge(outcome([], 45.0, [STARTED]), 30)
    assert not verdict.ok and verdict.message == (
        "no step in the 5.0 s after the trainer started (limit 30.0 s); the last event: "
        "trainer_exited")


@pytest.mark.parametrize("bps,v2,line", [
    (200_000, False, "7:3 200000"), (None, False, "7:3 0"),
    (200_000, True, "7:3 wbps=200000"), (None, True, "7:3 wbps=max")])
def test_a_devices_write_cap_is_written_as_each_cgroup_version_reads_it(bps, v2, line):
    assert write_throttle_rule("7:3", bps, v2) == line


@pytest.mark.parametrize("mbps,bps", [(None, None), (0.2, 200_000), (1e-9, 1), (50, 50_000_000)])
def test_megabytes_a_second_are_decimal_as_disks_are_rated(mbps, bps):
    assert bytes_per_s(mbps) == bps


def test_write_caps_lift_from_the_groups_that_hold_them_and_read_back(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir(), v2.mkdir()
    (v1 / "blkio.throttle.write_bps_device").write_text("")
    (v2 / "io.max").write_text("")
    assert throttle_writes("7:0", 1000, [v1, v2]) == [str(v1), str(v2)]
    assert write_limit("7:0", v1) == 1000 == write_limit("7:0", v2)
    assert write_limit("7:1", v1) is None
    throttle_writes("7:0", None, [v1, v2])
    assert (v2 / "io.max").read_text() == "7:0 wbps=max"
    assert write_limit("7:0", v2) is None and write_limit("7:0", v1) is None


def test_a_group_gone_meanwhile_is_skipped_when_lifting_but_refused_when_capping(tmp_path):
    assert throttle_writes("7:0", None, [tmp_path / "gone"]) == []
    with pytest.raises(RuntimeError, match="io controller"):
        throttle_writes("7:0", 1000, [tmp_path])


def steps(ends: list[float]) -> list[dict]:
    return [{"type": "step_end", "step": i, "ts": t} for i, t in enumerate(ends)]


def test_steps_are_timed_from_the_step_before_and_a_redone_step_counts_as_last_done():
    spans = step_seconds([*steps([0, 1, 2]), {"type": "step_end", "step": 2, "ts": 5.0}])
    assert spans == {1: (0, 1), 2: (2, 5.0)}


def test_window_ratios_split_at_the_fault_and_its_heal():
    twin = step_seconds(steps([0, 1, 2, 3, 4, 5, 6]))  # a step a second
    run = step_seconds(steps([0, 1, 2, 6, 10, 11, 12]))  # steps 3 and 4 take 4 s each
    got = window_ratios(run, twin, start=2.5, heal=8.0)
    assert got == {"during": (0.25, 2), "after": (1.0, 2)}
    assert window_ratios(run, twin, start=2.5, heal=None)["after"] is None


def throughput(run: list[float], twin_dir: Path, ratio: dict, healed: float | None = 8.0):
    import json

    (twin_dir / "events.jsonl").write_text("".join(
        json.dumps(e) + "\n" for e in steps(list(range(max(7, len(run)))))))
    timeline = [{**e, "source": "trainer"} for e in steps(run)] + [
        {"ts": 2.5, "source": "rlsim", "type": "fault_injected", "fault": "slow_node",
         "index": 0}]
    if healed is not None:
        timeline.append({"ts": healed, "source": "rlsim", "type": "fault_healed", "index": 0})
    o = Outcome(scenario=None, run_dir=Path("."), started=0.0, baseline_dir=twin_dir,
                timeline=sorted(timeline, key=lambda e: e["ts"]))
    check = CHECKS["throughput_within"]
    return check.judge(o, check.params(ratio))


def test_throughput_within_judges_each_window_against_its_own_limit(tmp_path):
    slow_then_back = [0, 1, 2, 6, 10, 11, 12]
    assert not throughput(slow_then_back, tmp_path, 0.8).ok  # 0.25 in the fault's window
    verdict = throughput(slow_then_back, tmp_path, {"ratio": 0.2, "after": 0.9})
    assert verdict.ok and verdict.value == 0.25 and "after: 1.00" in verdict.message
    slow_for_good = [0, 1, 2, 6, 10, 14, 18]
    assert not throughput(slow_for_good, tmp_path, {"ratio": 0.2, "after": 0.9}).ok


def test_below_is_met_against_the_twin_or_the_runs_own_pace_after_the_heal(tmp_path):
    # The twin's steps take 1 s. This run's steps 4 and 5 (the fault's window, 2.5 to 4.0) take
    # 1 s as well, step 6 after the heal 0.5 s (a quieter machine by then): against the twin
    # nothing happened, against its own pace the fault halved it.
    quiet = [0, 0.5, 1.0, 2.0, 3.0, 4.0, 4.5]
    verdict = throughput(quiet, tmp_path, {"ratio": 0.2, "below": 0.8}, healed=4.0)
    assert verdict.ok, verdict.message
    assert "during: 1.00" in verdict.message and "its own after the heal: 0.50" in verdict.message
    steady = [0, 1, 2, 2.6, 3.2, 3.9, 4.5]  # the fault cost nothing: 0.95 of its own pace
    verdict = throughput(steady, tmp_path, {"ratio": 0.2, "below": 0.8}, healed=3.9)
    assert not verdict.ok and "its own after the heal: 0.95" in verdict.message
    slow_then_back = [0, 1, 2, 6, 10, 11, 12]  # the twin's pace, a quarter of it in the window
    assert throughput(slow_then_back, tmp_path, {"ratio": 0.2, "below": 0.8}).ok


def test_after_the_heal_a_run_slower_than_its_twin_but_faster_than_it_was_has_recovered(
        tmp_path):
    # The twin's steps take 1 s. This run's steps took 4 s in the fault's window and 2 s after
    # the heal (a busier machine than the twin's): half the twin's pace after, but twice its own
    # pace under the fault. The same run staying at 4 s a step after the heal has not recovered.
    busier = [0, 1, 2, 6, 10, 12, 14]
    limits = {"ratio": 0.2, "below": 0.8, "after": 0.6}
    verdict = throughput(busier, tmp_path, limits)
    assert verdict.ok, verdict.message
    assert "after: 0.50" in verdict.message and "its own after the heal: 0.50" in verdict.message
    stuck = [0, 1, 2, 6, 10, 14, 18]
    verdict = throughput(stuck, tmp_path, limits)
    assert not verdict.ok and "its own after the heal: 1.00" in verdict.message
    # without `below` the twin is the only reference
    assert not throughput(busier, tmp_path, {"ratio": 0.2, "after": 0.6}).ok


def test_the_runs_own_pace_is_read_from_its_first_steps_after_the_heal(tmp_path):
    # The twin's steps take 1 s. Steps 3 and 4 stall under the fault (2.5 to 4.2): 1.1 s each,
    # 0.91 of the twin's pace (this run is faster than its twin on its own). The first five
    # steps after the heal take 0.2 s; then the machine gets busy (another job) and the rest
    # take 2 s. Against its first steps after, the fault cost speed (0.18); against all 11
    # after, it would seem to have cost none (1.07).
    run = [0, 1, 2, 3.1, 4.2, 4.4, 4.6, 4.8, 5.0, 5.2, *[5.2 + 2 * k for k in range(1, 7)]]
    verdict = throughput(run, tmp_path, {"ratio": 0.02, "below": 0.8}, healed=4.2)
    assert verdict.ok, verdict.message
    assert "during: 0.91" in verdict.message
    assert "its own after the heal: 0.18 (its first 5 steps after)" in verdict.message


def test_throughput_within_without_a_twin_fails_saying_so(tmp_path):
    o = Outcome(scenario=None, run_dir=Path("."), started=0.0, timeline=[
        {"ts": 1.0, "source": "rlsim", "type": "fault_injected", "fault": "x", "index": 0}])
    check = CHECKS["throughput_within"]
    verdict = check.judge(o, check.params(0.8))
    assert not verdict.ok and "twin did not run" in verdict.message


def test_preempting_the_head_is_refused_in_the_scenarios_words():
    from rlsim.faults import FAULTS

    fault = FAULTS["preempt_node"]
    shape = type("Shape", (), {"nodes": 3})()
    field, said = fault.cluster_problem(fault.Params(node=0), shape)
    assert field == "node" and "kill_head" in said
    assert fault.cluster_problem(fault.Params(node=2, notice_s=5), shape) is None
    assert fault.cluster_problem(fault.Params(node=3), shape)[0] == "node"  # no such node
    with pytest.raises(ValueError, match="greater than 0"):
        fault.Params(node=1, notice_s=0)


class _Cluster:
    """Just what preempt_node touches of a backend: a drain, the node table, a kill."""

    def __init__(self) -> None:
        from rlsim.backends.base import NodeInfo

        self.info = NodeInfo(index=1, address="127.77.0.11", gpus=1, alive=True, node_id="n1")
        self.drained: list[tuple] = []
        self.killed: list[int] = []

    def drain_node(self, index, deadline_s, message):
        self.drained.append((index, deadline_s))
        return self.info.node_id

    def nodes(self):
        return [None, self.info]

    def kill_node(self, index):
        self.killed.append(index)
        return [4242]


def _preempt(cluster, notice_s: float):
    import random

    from rlsim.faults import FAULTS, FaultContext

    fault = FAULTS["preempt_node"]
    return fault(fault.Params(node=1, notice_s=notice_s),
                 FaultContext(cluster, Path("."), random.Random(0)))


def test_preempt_node_drains_then_kills_the_drained_node_at_its_deadline():
    cluster = _Cluster()
    fault = _preempt(cluster, 0.2)
    did = fault.inject()
    assert cluster.drained == [(1, 0.2)] and cluster.killed == [] and did["node_id"] == "n1"
    fault._kill.join(5)
    assert cluster.killed == [1]


def test_a_run_that_ends_before_the_deadline_calls_the_kill_off():
    cluster = _Cluster()
    fault = _preempt(cluster, 30)
    fault.inject()
    assert fault.teardown() == {"kill_called_off": True}
    fault._kill.join(5)
    assert not fault._kill.is_alive() and cluster.killed == []


def test_the_deadline_spares_a_node_restarted_meanwhile():
    cluster = _Cluster()
    fault = _preempt(cluster, 0.2)
    fault.inject()
    cluster.info = type(cluster.info)(index=1, address="127.77.0.11", gpus=1, alive=True,
                                        node_id="new")
    fault._kill.join(5)
    assert cluster.killed == []
