"""The backend registry, the one place a backend is named and chosen: ``--backend
local|docker|real`` of ``rlsim run``, ``rlsim cluster`` and pytest, the scenario file's
``cluster.backend`` and ``skip_on`` keys, a substrate's address (``cluster.on``, ``rlsim cluster
--on``), reaping a cluster from its state file and which clusters may be kept for the next
scenario all read it here or ask the backend's class.

``local`` and ``docker`` start clusters rlsim owns (:attr:`BackendEntry.starts`); ``real`` attaches
to a cluster someone else owns (:mod:`rlsim.backends.real`): it needs its address, and faults that
harm a cluster are refused there unless asked for. ``substrate`` starts a cluster spread over the
machines of a plain Ray cluster (:mod:`rlsim.backends.substrate`); no one gives its name: the
substrate's address chooses it (:attr:`BackendEntry.on`, :func:`chosen`). What a backend cannot
run of a scenario's cluster section it says itself (``refusal``), so nothing outside this package
branches on a backend's name.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class BackendEntry:
    """One backend: its class (``module:Class``, imported on first use: docker needs the docker
    SDK), whether rlsim starts and owns its clusters, what it is, in a few words, and ``on``:
    whether a substrate's address chooses it, instead of its name (which then is no ``--backend``
    and no key of a scenario file; its clusters' state files carry it all the same)."""

    name: str
    target: str
    starts: bool
    what: str
    on: bool = False


BACKENDS: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry("local", "rlsim.backends.local:LocalCluster", True,
                 "processes on their own 127.x addresses"),
    BackendEntry("docker", "rlsim.backends.docker:DockerCluster", True,
                 "one container per node"),
    BackendEntry("real", "rlsim.backends.real:RealCluster", False,
                 "a running cluster rlsim did not start, at --ray-address"),
    BackendEntry("substrate", "rlsim.backends.substrate.cluster:SubstrateCluster", True,
                 "processes spread over the machines of a plain Ray cluster, at --on", on=True),
)}
DEFAULT = "local"


def names(starts: bool | None = None) -> list[str]:
    """The names one gives (``--backend``, ``cluster.backend``, ``skip_on``); ``starts``: only
    those that start clusters (True) or not (False)."""
    return [n for n, e in BACKENDS.items()
            if not e.on and (starts is None or e.starts == starts)]


BackendName = Literal[tuple(names())]  # the scenario schema's type of a backend's name


def described(starts: bool | None = None) -> str:
    """``local (processes ...), docker (...)``: the help of a ``--backend`` option."""
    return ", ".join(f"{n} ({BACKENDS[n].what})" for n in names(starts))


def unknown(name: str, starts: bool | None = None) -> str | None:
    """Why ``name`` is not a backend (of the kind asked), or None."""
    if name in names(starts):
        return None
    return f"--backend {name}: unknown; fix: give one of {described(starts)}"


def chosen(backend: str = DEFAULT, on: str | None = None) -> str:
    """The backend that runs a cluster asked for as ``backend`` with ``on``, a substrate's GCS
    address (``cluster.on``, ``rlsim cluster --on``) or None: with an address, the backend that
    takes one, whatever was named (the scenario file and ``rlsim cluster`` refuse another name
    than the default beside it); without, ``backend``. ValueError for a name no one gives."""
    if backend not in names():
        raise ValueError(f"unknown backend {backend!r}: {', '.join(names())}")
    if not on:
        return backend
    return next(n for n, e in BACKENDS.items() if e.on)


@functools.cache
def cluster_class(backend: str) -> type:
    """The class of backend ``backend`` (imported on demand)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: {', '.join(BACKENDS)}")
    module, name = BACKENDS[backend].target.split(":")
    return getattr(importlib.import_module(module), name)


def every_class() -> dict[str, type]:
    """The class of every backend one names, by name (for messages saying which ``--backend``
    can do something)."""
    return {name: cluster_class(name) for name in names()}


def attach(st):
    """A handle on the running cluster ``st`` (a ``ClusterState``) with the class of the backend
    that started it. LookupError in words where there is none: a cluster on a substrate that
    its owner holds (not detached), or a backend this rlsim does not know."""
    if st.backend not in BACKENDS:
        raise LookupError(f"cluster {st.spec.name!r} was started by a backend this rlsim does "
                          f"not know ({st.backend}), process {st.owner_pid}: stop it there")
    return cluster_class(st.backend).attach(st)
