"""Backends by name: the one place that maps ``--backend local|docker|real`` to a cluster class.

``local`` and ``docker`` start clusters (:data:`STARTED`); ``real`` attaches to a cluster rlsim did
not start (:mod:`rlsim.backends.real`). What a backend cannot run of a scenario's cluster section
it says itself (``refusal``), so nothing outside this package branches on a backend's name.
"""

from __future__ import annotations

import importlib

STARTED = {"local": "rlsim.backends.local:LocalCluster",
           "docker": "rlsim.backends.docker:DockerCluster"}
BACKENDS = {**STARTED, "real": "rlsim.backends.real:RealCluster"}


def cluster_class(backend: str) -> type:
    """The class of backend ``backend`` (imported on demand: docker needs the docker SDK)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: {', '.join(BACKENDS)}")
    module, name = BACKENDS[backend].split(":")
    return getattr(importlib.import_module(module), name)


def every_class() -> dict[str, type]:
    """Every backend's class by name (for messages saying which backends can do something)."""
    return {name: cluster_class(name) for name in BACKENDS}


def attach(st):
    """A handle on the running cluster ``st`` (a ``ClusterState``) with its backend's class."""
    return cluster_class(st.backend).attach(st)
