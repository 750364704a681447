"""rlsim: rehearse multi-node RL training failures on one machine, then check a real cluster."""

from rlsim.backends.base import Backend, ClusterStartError, NodeInfo
from rlsim.backends.docker import DockerCluster
from rlsim.backends.local import LocalCluster
from rlsim.spec import ClusterSpec, HealthChecks

__all__ = [
    "Backend",
    "ClusterSpec",
    "ClusterStartError",
    "DockerCluster",
    "HealthChecks",
    "LocalCluster",
    "NodeInfo",
]
__version__ = "0.1.0"
