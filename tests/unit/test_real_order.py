"""Pure parts of ``--backend real``: node indices on a cluster rlsim did not start, and which
faults it refuses."""

import pytest

from rlsim.backends.real import (
    HEAD_RESOURCE,
    SUPPORTED_FAULTS,
    Unsupported,
    _ordered,
    check_supported,
)
from rlsim.faults import FAULTS


def node(ip, head=False, alive=True, nid=None):
    res = {"GPU": 8.0, **({HEAD_RESOURCE: 1.0} if head else {})}
    return {"NodeManagerAddress": ip, "Alive": alive, "Resources": res, "NodeID": nid or ip}


def test_head_first_then_by_address_numerically_dead_nodes_left_out():
    nodes = [node("10.0.0.10"), node("10.0.0.9"), node("10.0.0.2", head=True),
             node("10.0.0.3", alive=False)]
    assert [n["NodeManagerAddress"] for n in _ordered(nodes)] == \
        ["10.0.0.2", "10.0.0.9", "10.0.0.10"]


def test_host_level_faults_are_refused_by_name_with_where_they_run():
    check_supported(["kill_node", "kill_role", "gpu_oom", "corrupt_checkpoint", "kill_head"])
    with pytest.raises(Unsupported, match=r"fault 'pause_node' .* runs on --backend local"):
        check_supported(["kill_node", "pause_node"])
    assert set(FAULTS) > SUPPORTED_FAULTS
