"""An unmodified Ray Train job on container nodes: scenarios/ray_train_node_lost.yaml, with the
driver in the head container, Ray Train's controller and workers in theirs, and the adapter's
callback writing to the run directory through the nodes' shared mount. In the slow tier
(--rlsim-slow): 85 s alone, 91-111 s of a worker's time in the gate, which had no room for it
beside the same job on local nodes (the scenario itself, in the gate)."""

import pytest
from on_docker import run_on_docker

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]


def test_ray_train_job_loses_a_node_on_container_nodes(tmp_path):
    pytest.importorskip("ray.train.v2", reason="needs Ray Train: pip install ray[train]")
    run_on_docker("ray_train_node_lost", tmp_path)


def test_ray_train_replaces_a_replica_group_in_place_on_container_nodes(tmp_path):
    """scenarios/ray_train_replica_replaced.yaml on container nodes: torchft's replica group
    replaced in place, judged restarts 0 and replacements 1, as on local nodes."""
    pytest.importorskip("torchft", reason="needs torchft: pip install torchft==0.2.0")
    run_on_docker("ray_train_replica_replaced", tmp_path)
