"""rlsim: rehearse multi-node RL training failures on one machine, then check a real cluster.

The public names load on first use (PEP 562), so that ``python -m rlsim.<module>`` run inside a
node (the doctor's probe, the in-node launcher) starts without pydantic, Ray or the docker SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Backend": "rlsim.backends.base",
    "ClusterStartError": "rlsim.backends.base",
    "NodeInfo": "rlsim.backends.base",
    "DockerCluster": "rlsim.backends.docker",
    "LocalCluster": "rlsim.backends.local",
    "ClusterSpec": "rlsim.host.spec",
    "HealthChecks": "rlsim.host.spec",
}
__all__ = ["Backend", "ClusterSpec", "ClusterStartError", "DockerCluster", "HealthChecks",
           "LocalCluster", "NodeInfo"]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from rlsim.backends.base import Backend, ClusterStartError, NodeInfo
    from rlsim.backends.docker import DockerCluster
    from rlsim.backends.local import LocalCluster
    from rlsim.host.spec import ClusterSpec, HealthChecks


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlsim' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
