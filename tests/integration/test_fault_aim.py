"""A fault aimed by index that misses the trainer fails the scenario, naming where the trainer
was; the same fault aimed by role hits the node that hosts the rank, wherever Ray placed it.

The job is a user's own Ray Train job without FailureConfig, whose two workers Ray packs onto the
one node with GPUs (STRICT_PACK; the head and node 1 have none): ``kill_node: {node: 1}`` hits
no worker, and rlsim says so instead of passing ``completes``; ``kill_node: {role: worker, rank:
1}`` kills node 2, where both workers are, and the job dies as a job without FailureConfig does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.scenario.loader import load
from rlsim.scenario.runner import play

pytestmark = pytest.mark.integration

TRAIN = '''
"""Two workers packed on one node, no FailureConfig: a lost worker ends the job."""
import sys, time
import ray.train, ray.train.torch, torch, torch.nn as nn
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def loop(config):
    model = ray.train.torch.prepare_model(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)
    for step in range(1, config["steps"] + 1):
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.3)
        ray.train.report({"step": step, "loss": loss.item()})


TorchTrainer(loop, train_loop_config={"steps": 8},
             scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                          resources_per_worker={"MOCK_GPU": 1},
                                          placement_strategy="STRICT_PACK"),
             run_config=RunConfig(name="packed", storage_path=sys.argv[1])).fit()
'''

SCENARIO = """name: {name}
cluster: {{nodes: 3, gpus_per_node: 2, node: {{0: {{gpus: 0}}, 1: {{gpus: 0}}}}}}
trainer:
  adapter: ray_train
  command: ["{{python}}", "train.py", "{{run_dir}}/results"]
  env: {{RAY_TRAIN_HEALTH_CHECK_INTERVAL_S: "0.5"}}
  total_steps: 8
faults:
  - at: {{step: 3}}
    kill_node: {aim}
expect:
  - completes: true
  - no_leaks: true
"""


def _play(tmp_path: Path, name: str, aim: str):
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, aim=aim))
    result = play(load(path), tmp_path / "out" / name)
    verdicts = {v.check: v for v in result.checks}
    timeline = [json.loads(x) for x in
                (tmp_path / "out" / name / "timeline.jsonl").read_text().splitlines()]
    return result, verdicts, next(e for e in timeline if e["type"] == "fault_injected")


def test_an_index_aimed_kill_that_misses_fails_naming_where_the_workers_were(tmp_path):
    result, verdicts, fired = _play(tmp_path, "by_index", "{node: 1}")
    assert fired["touched_count"] == 0 and fired["nodes"] == [1]
    assert "node 2 (RayTrainWorker x2" in fired["trainer_at"], fired["trainer_at"]
    missed = verdicts["faults_landed"]
    assert not missed.ok and not result.ok
    assert missed.message.startswith("kill_node (faults[0]) hit node 1 and reached nothing of "
                                     "the trainer there"), missed.message
    assert verdicts["completes"].ok  # the job went on: what the miss would have hidden


def test_the_same_kill_aimed_by_role_hits_the_workers_node(tmp_path):
    result, verdicts, fired = _play(tmp_path, "by_role", "{role: worker, rank: 1}")
    assert fired["aimed"]["node"] == 2 and fired["nodes"] == [2], fired
    actors = [a for a in fired["touched"] if a.get("kind", "actor") == "actor"]
    assert {a["class"] for a in actors} == {"RayTrainWorker"} and len(actors) == 2, fired
    # the trainer's placement group reserved node 2 too: its bundle is part of the reach
    assert {a.get("kind") for a in fired["touched"]} == {"actor", "bundle"}, fired
    assert verdicts["faults_landed"].ok, verdicts["faults_landed"].message
    assert not verdicts["completes"].ok  # no FailureConfig: a lost worker ends the job
