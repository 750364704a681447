"""Pure parts of ``--backend real``: node indices on a cluster rlsim did not start, and which
faults it refuses."""

import pytest

from rlsim.backends import cluster_class
from rlsim.backends.base import Unsupported
from rlsim.backends.real import HEAD_RESOURCE, RealCluster, _ordered
from rlsim.faults import FAULTS


def node(ip, head=False, alive=True, nid=None):
    res = {"GPU": 8.0, **({HEAD_RESOURCE: 1.0} if head else {})}
    return {"NodeManagerAddress": ip, "Alive": alive, "Resources": res, "NodeID": nid or ip}


def test_head_first_then_by_address_numerically_dead_nodes_left_out():
    nodes = [node("10.0.0.10"), node("10.0.0.9"), node("10.0.0.2", head=True),
             node("10.0.0.3", alive=False)]
    assert [n["NodeManagerAddress"] for n in _ordered(nodes)] == \
        ["10.0.0.2", "10.0.0.9", "10.0.0.10"]


BACKENDS = {"local": cluster_class("local"), "docker": cluster_class("docker"),
            "real": RealCluster}


def test_what_the_real_backend_runs_follows_from_its_capabilities():
    runs = {name for name, f in FAULTS.items() if not f.missing(RealCluster)}
    assert runs == {"kill_node", "kill_role", "hang_role", "segfault_role", "gpu_oom",
                    "corrupt_checkpoint",
                    "kill_head"}
    assert all(not f.missing(BACKENDS["local"]) for f in FAULTS.values())


def test_host_level_faults_are_refused_by_name_with_where_they_run():
    FAULTS["kill_role"].check_backend(RealCluster, "real", BACKENDS)
    with pytest.raises(Unsupported, match=r"fault 'pause_node' needs to freeze and thaw every "
                       r"process of a node .* --backend real cannot do; it runs on --backend "
                       r"local, --backend docker"):
        FAULTS["pause_node"].check_backend(RealCluster, "real", BACKENDS)
