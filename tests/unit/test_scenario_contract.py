"""A scenario is checked against its own cluster and trainer when it is read: one test per class
of what can never run as written (each seen passing `rlsim validate` before), exit 2 naming the
file's line, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.scenario.loader import ScenarioError, load
from trainer.config import PRESETS

ROOT = Path(__file__).parents[2]
GRPO = PRESETS / "grpo_tiny.yaml"  # actor, rollout and ref; 2 ranks each


def write(tmp_path, body: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {{nodes: 3, gpus_per_node: 2}}\n"
                    f"trainer: {{config: {GRPO}, overrides: {{total_steps: 20}}}}\n{body}")
    return path


CASES = [
    # references resolved against the cluster
    ("a node the cluster lacks (check)", "expect: [{placed_on: {nodes: [3, 4]}}]",
     ":4: expect[0].placed_on.nodes: node 3 is outside the cluster (nodes 0-2)"),
    ("a node the cluster lacks (fault)", "faults: [{at: {step: 2}, pause_node: {node: 5}}]\n"
     "expect: [{completes: {}}]", "faults[0].pause_node.node: node 5 is outside the cluster"),
    # references resolved against the trainer's facts
    ("a step never reached (check)", "expect: [{final_step: 200}]",
     "expect[0].final_step.step: step 200 is never reached: the trainer stops at "
     "total_steps=20"),
    ("a role the run lacks", "faults: [{at: {step: 2}, kill_role: {role: critic}}]\n"
     "expect: [{completes: {}}]", "faults[0].kill_role.role: role 'critic' is not in this run"),
    ("a rank the role lacks", "faults: [{at: {step: 2}, kill_role: {role: actor, rank: 2}}]\n"
     "expect: [{completes: {}}]", "faults[0].kill_role.rank: rank 2 of role 'actor' does not "
     "exist: the run has 2"),
    # contradictions
    ("min above max", "expect: [{restarts: {min: 3, max: 1}}]",
     "expect[0].restarts: min 3 is above max 1"),
    ("completes and fails", "expect: [{completes: {}}, {fails: {pattern: x}}]",
     "expect[0].completes: cannot hold in the same run as expect[1].fails"),
    ("one node down twice at once", "faults:\n  - {at: {step: 2}, kill_node: {node: 1}}\n"
     "  - {at: {step: 2}, pause_node: {node: 1}}\nexpect: [{completes: {}}]",
     "faults[1].pause_node.node: node 1 is already out of service at that moment (faults[0])"),
    # faults that cannot act as written
    ("a partition of every node", "faults: [{at: {step: 2}, partition: {groups: [[0, 1, 2]]}}]\n"
     "expect: [{completes: {}}]", "faults[0].partition.groups: that is every node"),
    ("a port blocked from its own node",
     "faults: [{at: {step: 2}, block_port: {node: 1, port: gcs, sources: [1]}}]\n"
     "expect: [{completes: {}}]", "faults[0].block_port.sources: node 1 is the node whose port"),
    ("a disk cap on the run directory itself",
     "faults: [{at: {step: 2}, disk_full: {path: .}}]\nexpect: [{completes: {}}]",
     "disk_full.path: '.': name a directory inside the run directory"),
    # values of the wrong kind
    ("yes for seconds", "faults: [{at: {step: 2}, pause_node: {node: 1}, for_s: yes}]\n"
     "expect: [{completes: {}}]", "faults[0].for_s: Input should be a valid number"),
    ("a number past a day", "faults: [{at: {step: 2}, pause_node: {node: 1}, for_s: 1.0e+30}]\n"
     "expect: [{completes: {}}]", "faults[0].for_s: 1.0e+30 is too large"),
    ("seconds past a day", "faults: [{at: {step: 2}, pause_node: {node: 1}, for_s: 90000}]\n"
     "expect: [{completes: {}}]", "faults[0].for_s: Input should be less than or equal to "
     "86400"),
    ("a NUL byte", "expect: [{fails: {pattern: \"a\\0b\"}}]", "a NUL byte in a value"),
]


@pytest.mark.parametrize("body,said", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_scenario_that_can_never_run_as_written_is_refused(tmp_path, body, said):
    path = write(tmp_path, body)
    with pytest.raises(ScenarioError) as e:
        load(path)
    assert said in str(e.value) and str(e.value).startswith(f"{path}:"), str(e.value)


OTHER_TRAINER = """name: s
cluster: {{nodes: 2}}
trainer: {{adapter: events, command: {command}, env: {env}}}
expect: [{{completes: {{}}}}]
"""


@pytest.mark.parametrize("command,env,said", [
    ('["{python}"]', "{}", "starts an interpreter that waits on its input"),
    ('["{python}", "-c", "pass"]', "{RAY_ADDRESS: 10.0.0.1:6379}",
     "env.RAY_ADDRESS: rlsim sets RAY_ADDRESS for every launch"),
    ('["{python}", "-c", "pass"]', '{"A B": x}', "is not an environment variable name"),
])
def test_a_command_that_would_hang_or_lose_its_cluster_is_refused(tmp_path, command, env, said):
    path = tmp_path / "s.yaml"
    path.write_text(OTHER_TRAINER.format(command=command, env=env))
    with pytest.raises(ScenarioError, match=said):
        load(path)


def test_the_catalogue_still_reads(tmp_path):
    from rlsim.scenario.loader import discover

    assert all(load(p).name for p in discover(ROOT / "scenarios"))
