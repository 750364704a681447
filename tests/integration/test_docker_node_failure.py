"""The main story on container nodes: scenarios/node_failure_mid_run.yaml (4 nodes x 8 fake GPUs,
the reference trainer with DeepSpeed over gloo between containers, node 1 killed at step 7). In the
slow tier: 62 s of the test command's time (2 cores, -n 2) for a story the catalogue already runs on
container nodes (checkpoint_shared_volume and checkpoint_node_local each lose a container node
mid-run, detect it and resume on the spare)."""

import pytest
from on_docker import run_on_docker

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]


def test_node_failure_mid_run_on_container_nodes(tmp_path):
    run_on_docker("node_failure_mid_run", tmp_path)
