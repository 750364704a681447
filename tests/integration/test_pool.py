"""Clusters kept between scenarios (rlsim.scenario.pool) on a real local cluster: handed on only
when as clean as a fresh one, restarted where a fault took a node down, stopped when dirty."""

import os
import subprocess
import sys

import pytest

from rlsim.backends.local import LocalCluster
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.pool import Pool

pytestmark = pytest.mark.integration

DETACHED_ACTOR = """
import ray
ray.init(address="auto", logging_level="ERROR")
@ray.remote(num_cpus=0)
class Left:
    def ping(self):
        return 1
a = Left.options(name="left_behind", lifetime="detached").remote()
ray.get(a.ping.remote())
"""


def _fresh(name: str) -> LocalCluster:
    return LocalCluster(ClusterSpec(name=name, nodes=2, gpus_per_node=1, dashboard=False))


def test_a_clean_cluster_is_handed_on_a_dirty_one_is_stopped_and_named():
    pool = Pool()
    first, reused = pool.take(_fresh(f"pool-a-{os.getpid()}"), "local")
    assert not reused
    first.start()
    try:
        assert pool.give_back(first, "local")[0] == []  # fresh and untouched: kept

        again, reused = pool.take(_fresh(f"pool-b-{os.getpid()}"), "local")
        assert reused and again is first

        again, _ = pool.take(_fresh(f"pool-c-{os.getpid()}"), "local")
        subprocess.run([sys.executable, "-c", DETACHED_ACTOR], check=True, timeout=60,
                       env={**os.environ, **first.driver_env()})
        left, waited = pool.give_back(first, "local")
        assert any("left_behind" in x.what and x.owner == "trainer" for x in left), left
        assert waited is not None and waited > 0  # Ray was given time to clean up
        assert first.state is None and not pool.idle  # stopped, not handed on
    finally:
        first.stop()
        pool.close()
    assert first.leaks() == []

