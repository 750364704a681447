"""A scenario's cluster behaves like a real one for the Ray libraries its trainer uses: Ray's own
Ray Train example, run on the cluster a Ray Train scenario gets, leaves no library thread dead
for want of a daemon or of its own cluster's address. Ray Train's PlacementGroupCleaner (Ray's
safety net for a dead job's placement groups) polls Ray's state API, which reads the dashboard's
address from the GCS of the cluster it resolves; it lost its monitor thread here with two
clusters on the machine, and a lean cluster (no dashboard) kills it after 40 s of retries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.scenario.loader import load
from rlsim.scenario.runner import make_cluster

pytestmark = pytest.mark.integration

SCENARIO = """name: {name}
cluster: {{nodes: 2, gpus_per_node: 1}}
trainer:
  {trainer}
expect: [completes: true]
"""
LINEAR = ('{adapter: ray_train, command: ["{python}", "-m", '
          '"ray.train.examples.pytorch.torch_linear_example", "--address", "{ray_address}", '
          '"--epochs", "4"], total_steps: 4}')
# what a Ray library's thread or actor says when a daemon it reads is missing
DIED = ("Exception in thread", "Could not read 'dashboard' from GCS")


def scenario(tmp_path: Path, name: str, trainer: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, trainer=trainer))
    return load(path)


def test_a_trainer_of_ray_libraries_gets_the_dashboard_and_the_reference_trainer_not(tmp_path):
    assert make_cluster(scenario(tmp_path, "train", LINEAR)).spec.dashboard
    lean = make_cluster(scenario(tmp_path, "ref", "{config: grpo_tiny}"))
    assert not lean.spec.dashboard


def test_ray_trains_own_example_keeps_every_library_thread_alive(tmp_path):
    """With another cluster on the machine, as two CI jobs have: Ray's libraries find their own
    cluster (RAY_ADDRESS on every node: without it the cleaner saw both clusters' GCS processes,
    raised "Found multiple active Ray instances" and lost its monitor thread), and the state API
    they poll answers (the dashboard: without it each poll retries 20 times, 40 s, then the
    thread dies of "Could not read 'dashboard' from GCS")."""
    from urllib.request import Request, urlopen

    from rlsim.backends.local import LocalCluster
    from rlsim.host.home import auth_token_path
    from rlsim.host.spec import ClusterSpec

    sc = scenario(tmp_path, "linear", LINEAR)
    beside = ClusterSpec(name=f"pt-beside-{os.getpid()}", nodes=1, gpus_per_node=1,
                         dashboard=False)
    with LocalCluster(beside), make_cluster(sc, out_dir=tmp_path / "out") as cluster:
        token = auth_token_path().read_text().strip()
        ask = Request(f"{cluster.dashboard_url}/api/version",
                      headers={"Authorization": f"Bearer {token}"})
        with urlopen(ask, timeout=10) as answer:
            assert answer.status == 200  # what Ray's state API (and Jobs) reach
        run = subprocess.run(
            [sys.executable, "-m", "ray.train.examples.pytorch.torch_linear_example",
             "--address", cluster.address, "--epochs", "4"],
            env={**os.environ, **cluster.driver_env()}, cwd=tmp_path, capture_output=True,
            text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        found = [f"{path}: {line.strip()[:200]}" for path in cluster.state.root.rglob("*")
                 if path.is_file() and path.suffix in (".err", ".out", ".log")
                 for line in path.read_text(errors="replace").splitlines()
                 if any(d in line for d in DIED)]
    assert found == [], "\n".join(found)
