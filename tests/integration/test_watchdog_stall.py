"""A program that hangs after a fault fails within its watchdog's bound, naming what it waits on.

The program (a plain Ray script, adapter plain) runs one task that only node 2 can run (it alone
has the resource ``only_2``) and waits for it without a timeout. Node 2 is killed: Ray retries the
task, no node can place it, and the driver waits forever, printing nothing: the hang of a trainer
waiting on a server that died with its node. With ``progress_watchdog_s: 5`` the run is ended
five seconds into the silence; the verdict names the kill and the task Ray cannot place.
"""

from __future__ import annotations

import pytest

from rlsim.scenario.loader import load
from rlsim.scenario.runner import play

pytestmark = [pytest.mark.integration]

PROGRAM = """\
import time

import ray
from ray.util.state import list_tasks

ray.init()


@ray.remote(resources={"only_2": 1}, max_retries=-1)
def on_node_2():
    time.sleep(3600)


ref = on_node_2.remote()
while not list_tasks(filters=[("state", "=", "RUNNING")]):
    time.sleep(0.2)
print("stall: task running", flush=True)
ray.get(ref)  # no timeout: the task's node is killed, and no other node can run it
"""

SCENARIO = """\
name: stalls_after_a_kill
cluster:
  nodes: 3
  gpus_per_node: 0
  cpus_per_node: 1
  node: {2: {resources: {only_2: 1}}}
trainer:
  adapter: plain
  command: ["{python}", "program.py"]
  marks: {task_running: "^stall: task running"}
  progress_watchdog_s: 5
  timeout_s: 600
faults:
  - at: {event: task_running}
    kill_node: {node: 2}
expect:
  - completes: true
"""


def test_a_program_that_hangs_after_a_fault_fails_within_the_watchdogs_bound(tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    result = play(load(tmp_path / "s.yaml"), tmp_path / "out")
    [stalled] = result.outcome.rlsim("trainer_stalled")
    assert stalled["bound_s"] == 5 and 5 <= stalled["seconds"] < 60, stalled
    verdicts = {v.check: v for v in result.checks}
    said = verdicts["completes"].message
    assert not verdicts["completes"].ok
    assert said.startswith("the trainer stalled after kill_node (faults[0]): no progress "), said
    assert "waiting for a place: not placed yet, or on no node of the cluster (task on_node_2)" \
        in said, said  # the task Ray retried and cannot place
    assert verdicts["faults_landed"].ok, verdicts["faults_landed"].message
