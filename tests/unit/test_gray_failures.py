"""Gray failures' pure parts: the CPU quota a slow node gets (cgroup v1 and v2 files, as the
kernel reads them) and the progress_within_s check on recorded timelines."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.checks import CHECKS
from rlsim.history import Outcome
from rlsim.host.cgroups import CpuGroup, cpu_quota


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


def test_steady_steps_pass_with_the_longest_gap_as_the_figure():
    verdict = judge(outcome([50.0, 51.0, 53.0, 54.0], 54.5), 30)  # bring-up before step 1: free
    assert verdict.ok and verdict.value == 2.0


def test_a_stall_fails_naming_the_last_event_seen_in_it():
    fault = {"ts": 12.0, "source": "rlsim", "type": "fault_injected", "fault": "hang_role"}
    verdict = judge(outcome([10.0, 11.0, 50.0], 51.0, [fault]), 30)
    assert not verdict.ok and verdict.value == 39.0
    assert "from +11.0 s; the last event in it: fault_injected" in verdict.message


def test_a_run_that_stops_stepping_until_it_is_killed_fails_on_the_tail():
    verdict = judge(outcome([10.0, 11.0], 300.0), 30)
    assert not verdict.ok and verdict.value == 289.0


def test_no_step_at_all_fails():
    verdict = judge(outcome([], 5.0), 30)
    assert not verdict.ok and verdict.message == "no step at all"
