"""A scenario that can never pass is refused when read, naming the field and the fix: one class,
a case per rule (the fault's reach on this cluster, expectations that cannot hold, what the run
is given beside its faults)."""

from __future__ import annotations

import pytest

from rlsim.scenario.loader import ScenarioError, load

REF = "trainer: {config: grpo_tiny, overrides: {total_steps: 10, save_freq: 5}}\n"
TWO = "cluster: {nodes: 2, gpus_per_node: 1, cpus_per_node: 4}\n"
KILL = "  - {at: {step: 3}, kill_node: {node: 1}}\n"

CASES = {
    "slow_node above the node's cores": (
        TWO + REF + "faults: [{at: {step: 2}, slow_node: {node: 1, cpu: 8}}]\n"
        "expect: [{completes: true}]", "slow_node.cpu: 8 cores is not below the 4"),
    "flap_link of microseconds": (
        TWO + REF + "faults: [{at: {step: 2}, flap_link: {groups: [[1]], period_s: 0.000001, "
        "down_s: 0.0000005}}]\nexpect: [{completes: true}]", "period_s"),
    "gpu_lost on a GPU the node has not": (
        TWO + REF + "faults: [{at: {step: 2}, gpu_lost: {node: 1, gpu: 3}}]\n"
        "expect: [{completes: true}]", "node 1 has 1 GPU(s)"),
    "gpu_lost twice on one GPU": (
        "cluster: {nodes: 3, gpus_per_node: 2}\n" + REF +
        "faults:\n  - {at: {step: 2}, gpu_lost: {node: 1, gpu: 0}}\n"
        "  - {at: {step: 4}, gpu_lost: {node: 1, gpu: 0}}\nexpect: [{completes: true}]",
        "already lost"),
    "throughput_within above 1": (
        TWO + REF + "faults: [{at: {step: 2}, slow_node: {node: 1, cpu: 0.5}, for_s: 3}]\n"
        "expect: [{throughput_within: 1.5}]", "less than or equal to 1"),
    "throughput_within with no fault": (
        TWO + REF + "expect: [{throughput_within: 0.8}]", "has no fault"),
    "detected_within_s with no disruptive fault": (
        TWO + REF + "faults: [{at: {step: 2}, corrupt_checkpoint: {}}]\n"
        "expect: [{detected_within_s: 30}]", "no disruptive fault"),
    "reward_improves on a 5-step run": (
        TWO + "trainer: {config: grpo_tiny, overrides: {total_steps: 5}}\n"
        "expect: [{reward_improves: {}}]", "the run has 5 steps"),
    "completes with a final_step short of the run": (
        TWO + REF + "expect: [{completes: true}, {final_step: 8}]", "short of the run's 10"),
    "a heal before its injection": (
        TWO + REF + "faults: [{at: {step: 6}, kill_node: {node: 1}, heal_at: {step: 4}}]\n"
        "expect: [{completes: true}]", "heal_at.step: 4 is not after at.step 6"),
    "a preemption notice longer than the run": (
        "cluster: {nodes: 2, gpus_per_node: 1}\n"
        "trainer: {config: grpo_tiny, timeout_s: 60}\n"
        "faults: [{at: {step: 2}, preempt_node: {node: 1, notice_s: 120}}]\n"
        "expect: [{completes: true}]", "outlasts the whole run"),
    "a timeout no run can meet": (
        TWO + "trainer: {config: grpo_tiny, timeout_s: 0.001}\nexpect: [{completes: true}]",
        "timeout_s"),
    "a prepare program that does not exist": (
        TWO + 'trainer: {adapter: events, command: ["{python}", "-c", "pass"], '
        'prepare: ["no-such-program-x", "data"]}\nexpect: [{completes: true}]',
        "trainer.prepare: 'no-such-program-x' is not an executable"),
    "a placeholder with a format": (
        TWO + 'trainer: {adapter: events, command: ["{python}", "-c", "pass", '
        '"{run_dir:>999999999999}"]}\nexpect: [{completes: true}]', "with a format"),
    "overrides.run_dir": (
        TWO + "trainer: {config: grpo_tiny, overrides: {run_dir: /tmp/elsewhere}}\n"
        "expect: [{completes: true}]", "overrides.run_dir: rlsim gives each run its folder"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_scenario_that_can_never_pass_is_refused(tmp_path, case):
    body, said = CASES[case]
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\n{body}\n")
    with pytest.raises(ScenarioError) as refused:
        load(path)
    assert said in str(refused.value), str(refused.value)
    assert str(refused.value).startswith(f"{path}:")


def test_the_same_scenarios_written_to_pass_are_accepted(tmp_path):
    for body in (TWO + REF + "faults: [{at: {step: 2}, slow_node: {node: 1, cpu: 0.5}, "
                 "for_s: 3}]\nexpect: [{throughput_within: 0.5}]",
                 TWO + REF + "faults:\n" + KILL + "expect: [{detected_within_s: 30}, "
                 "{completes: true}, {final_step: 10}, {reward_improves: {by: 0}}]"):
        path = tmp_path / "s.yaml"
        path.write_text(f"name: s\n{body}\n")
        load(path)
