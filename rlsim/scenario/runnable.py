"""Whether a scenario can run on a backend, decided before anything starts: its ``skip_on``, the
trainer's ``requires`` (found without importing anything), the backend's refusal of the cluster
section, each fault's needs; and which of its faults would harm a cluster rlsim did not start
(refused there without ``--allow-disruptive``). ``rlsim run --dry-run``, the session's refusals
and the runner all ask here."""

from __future__ import annotations

import sys

from rlsim.backends import chosen, cluster_class, every_class
from rlsim.backends.base import Unsupported
from rlsim.faults import FAULTS
from rlsim.scenario.schema import Scenario


def check_runnable(sc: Scenario, backend: str) -> type:
    """The backend's class if it can run ``sc``; else ``Unsupported`` (a skip, not a failure): the
    scenario's own ``skip_on``, the backend's refusal of the cluster section, or a fault it cannot
    inject. Touches no cluster (``rlsim run --dry-run`` lists these). Decided once per backend."""
    if backend not in sc._runnable:
        try:
            sc._runnable[backend] = _runnable(sc, backend)
        except Unsupported as e:
            sc._runnable[backend] = e
    if isinstance(found := sc._runnable[backend], Unsupported):
        raise Unsupported(str(found), found.missing_part)
    return found


def installed(module: str) -> bool:
    """Whether ``module`` (a dotted name) could be imported here, decided without importing
    anything: ``importlib.util.find_spec("a.b")`` imports ``a`` to find ``b``, and reading a
    scenario (``rlsim validate``, ``run --dry-run``, pytest's collection) must never run code a
    scenario names. The top package is found as ``import`` would find it; each submodule in its
    parent's folders."""
    import importlib.machinery
    import importlib.util

    if module in sys.modules:  # already imported here (os.path, rlsim's own)
        return True
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return False
    name = top
    for part in rest:
        if spec is None or not spec.submodule_search_locations:
            return False
        name = f"{name}.{part}"
        spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
    return spec is not None


def _runnable(sc: Scenario, backend: str) -> type:
    if backend in sc.cluster.skip_on:
        raise Unsupported(sc.cluster.skip_on[backend])
    for module, how in sc.trainer.requires.items():
        if not installed(module):
            raise Unsupported(f"trainer.requires: {module} is not installed in {sys.prefix} "
                              f"({how})")
    try:  # cluster.on: its nodes, and its faults, are a substrate's
        name = chosen(backend, sc.cluster.on)
        cls = cluster_class(name)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    if name != backend:  # how the faults' refusals name it
        backend = f"{backend} with cluster.on (a {name})"
    node_local = sc.cluster.checkpoint_storage == "node_local"
    if refused := cls.refusal(sc.cluster, node_local):
        raise refused
    check_faults(sc, cls, backend)
    return cls


def harmful_faults(sc: Scenario) -> list[str]:
    """The faults of ``sc`` that destroy work or capacity on a real cluster (refused there
    without --allow-disruptive)."""
    return sorted({f.kind for f in sc.faults if FAULTS[f.kind].harms_real_cluster})


def harmful_on(sc: Scenario, backend: str) -> list[str]:
    """:func:`harmful_faults` of a scenario ``backend`` would run (one it skips anyway is no
    reason to refuse the others)."""
    try:
        check_runnable(sc, backend)
    except Unsupported:
        return []
    return harmful_faults(sc)


def check_faults(sc: Scenario, cls: type, backend: str) -> None:
    """Raise Unsupported naming the first fault of ``sc`` the backend cannot inject."""
    others = every_class()
    for entry in sc.faults:
        FAULTS[entry.kind].check_backend(cls, backend, others)
