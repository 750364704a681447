"""``--backend real`` against a cluster rlsim did not start for the scenario: the runner only gets
its address, places node agents and injects through them (here the cluster happens to be an rlsim
local one, started by the fixture; nothing of it is handed to the runner but the address)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.backends.real import Unsupported
from rlsim.checks import judge
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

KILL_NODE = """
name: real_kill_node
cluster: {nodes: 3, gpus_per_node: 1}
trainer:
  config: fixtures/trainer/grpo_tiny.yaml
  overrides: {save_freq: 5, total_steps: 10}
faults:
  - at: {step: 6}
    kill_node: {node: 1}
  - at: {step: 2}
    gpu_oom: {node: 2, gb: 10}
expect:
  - completes: {}
  - restarts: {min: 1}
  - resumed_from_step: {step: 5}
  - detected_within_s: {seconds: 10}
  - no_leaks: {}
"""


@pytest.mark.integration
@pytest.mark.rlsim_cluster(nodes=3, gpus_per_node=1)
def test_kill_node_through_the_node_agent(rlsim_cluster, tmp_path: Path):
    path = tmp_path / "real_kill_node.yaml"
    path.write_text(KILL_NODE)
    outcome = run_scenario(load(path), tmp_path / "out", backend="real",
                           ray_address=rlsim_cluster.address)
    verdicts = judge(outcome)
    assert all(v.ok for v in verdicts), [v.message for v in verdicts if not v.ok]
    fired = {e["fault"]: e for e in outcome.timeline if e["type"].startswith("fault_")}
    # node 1 is the second node by address (127.x.y.11); the agent killed its raylet and workers
    assert fired["kill_node"]["type"] == "fault_injected"
    assert len(fired["kill_node"]["pids"]) >= 2
    assert rlsim_cluster.nodes()[1].alive is False
    # fake GPUs: the real allocation is refused in words, and the run goes on
    assert fired["gpu_oom"]["type"] == "fault_error"
    assert "no CUDA device is visible on" in fired["gpu_oom"]["message"]


def test_faults_that_need_the_host_are_refused_before_anything_starts(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text(KILL_NODE.replace("kill_node: {node: 1}", "partition: {groups: [[1]]}"))
    with pytest.raises(Unsupported, match="fault 'partition' needs control of the host"):
        run_scenario(load(path), tmp_path / "out", backend="real", ray_address="127.0.0.2:1")
    assert not (tmp_path / "out").exists()
