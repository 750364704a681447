"""The backend registry, the one place a backend is named: ``--backend local|docker|real`` of
``rlsim run``, ``rlsim cluster`` and pytest, the scenario file's ``cluster.backend`` and
``skip_on`` keys, reaping a cluster from its state file and which clusters may be kept for the next
scenario all read it here or ask the backend's class.

``local`` and ``docker`` start clusters rlsim owns (:attr:`BackendEntry.starts`); ``real`` attaches
to a cluster someone else owns (:mod:`rlsim.backends.real`): it needs its address, and faults that
harm a cluster are refused there unless asked for. What a backend cannot run of a scenario's
cluster section it says itself (``refusal``), so nothing outside this package branches on a
backend's name.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class BackendEntry:
    """One backend: its class (``module:Class``, imported on first use: docker needs the docker
    SDK), whether rlsim starts and owns its clusters, and what it is, in a few words."""

    name: str
    target: str
    starts: bool
    what: str


BACKENDS: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry("local", "rlsim.backends.local:LocalCluster", True,
                 "processes on their own 127.x addresses"),
    BackendEntry("docker", "rlsim.backends.docker:DockerCluster", True,
                 "one container per node"),
    BackendEntry("real", "rlsim.backends.real:RealCluster", False,
                 "a running cluster rlsim did not start, at --ray-address"),
)}
DEFAULT = "local"
BackendName = Literal[tuple(BACKENDS)]  # the scenario schema's type of a backend's name


def names(starts: bool | None = None) -> list[str]:
    """The backends' names; ``starts``: only those that start clusters (True) or not (False)."""
    return [n for n, e in BACKENDS.items() if starts is None or e.starts == starts]


def described(starts: bool | None = None) -> str:
    """``local (processes ...), docker (...)``: the help of a ``--backend`` option."""
    return ", ".join(f"{n} ({BACKENDS[n].what})" for n in names(starts))


def unknown(name: str, starts: bool | None = None) -> str | None:
    """Why ``name`` is not a backend (of the kind asked), or None."""
    if name in names(starts):
        return None
    return f"--backend {name}: unknown; fix: give one of {described(starts)}"


@functools.cache
def cluster_class(backend: str) -> type:
    """The class of backend ``backend`` (imported on demand)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: {', '.join(BACKENDS)}")
    module, name = BACKENDS[backend].target.split(":")
    return getattr(importlib.import_module(module), name)


def every_class() -> dict[str, type]:
    """Every backend's class by name (for messages saying which backends can do something)."""
    return {name: cluster_class(name) for name in BACKENDS}


def attach(st):
    """A handle on the running cluster ``st`` (a ``ClusterState``) with its backend's class.
    Raises LookupError for a cluster on a substrate that its owner holds (not detached)."""
    if st.backend in BACKENDS:
        return cluster_class(st.backend).attach(st)
    if not (st.on and st.detached):
        raise LookupError(f"cluster {st.spec.name!r} runs on a substrate ({st.backend}), "
                          f"held by its owner, process {st.owner_pid}: stop it there")
    return spread_class().attach(st)


# A cluster spread over a substrate (``cluster.on``, ``rlsim cluster --on``): not a backend one
# names, but a class ``attach`` and the reaper find by its name, as they find a backend's.
SPREAD = "rlsim.backends.substrate.cluster:SubstrateCluster"


def spread_class() -> type:
    """The class of a cluster spread over a substrate (imported on demand)."""
    module, name = SPREAD.split(":")
    return getattr(importlib.import_module(module), name)
