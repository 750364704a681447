"""Backends by name: the one place that maps ``--backend local|docker`` to a cluster class.

``real`` is not here: it attaches to a cluster rlsim did not start (:mod:`rlsim.backends.real`).
"""

from __future__ import annotations

import importlib

STARTED = {"local": "rlsim.backends.local:LocalCluster",
           "docker": "rlsim.backends.docker:DockerCluster"}


def cluster_class(backend: str) -> type:
    """The class of backend ``backend`` (imported on demand: docker needs the docker SDK)."""
    if backend not in STARTED:
        raise ValueError(f"unknown backend {backend!r}: rlsim starts clusters on "
                         f"{', '.join(STARTED)}")
    module, name = STARTED[backend].split(":")
    return getattr(importlib.import_module(module), name)


def attach(st):
    """A handle on the running cluster ``st`` (a ``ClusterState``) with its backend's class."""
    return cluster_class(st.backend).attach(st)
