"""``python -m rlsim.backends.substrate ADDRESS``: the machines of the substrate whose GCS is at
``ADDRESS``, one JSON line each, as a cluster's owner would find them; exit 1 in words where
nothing answers there."""

from __future__ import annotations

import json
import os
import sys

from rlsim.backends.base import ClusterStartError
from rlsim.backends.substrate import hosts
from rlsim.backends.substrate.cluster import SubstrateCluster


def machines(address: str) -> list[hosts.Machine]:
    """The machines of the substrate at ``address``, joined as a cluster's owner joins it, as
    hosts of this call's own see them; the hosts end before it returns (a detached host left
    behind would give its worker port to the next driver on its machine on Ray below 2.54, see
    :func:`rlsim.ray_internals.detached_actors_problem`). ClusterStartError where nothing
    answers there."""
    SubstrateCluster(on=address)._check_can_start()
    tag = f"list{os.getpid()}"
    try:
        return [m for m, _ in hosts.hosts(address, tag=tag)]
    finally:
        hosts.release(address, tag=tag)


if __name__ == "__main__":
    try:
        for machine in machines(sys.argv[1]):
            print(json.dumps(machine.__dict__))
    except ClusterStartError as e:
        sys.exit(f"rlsim.backends.substrate: {e}")
