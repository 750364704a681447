"""A node frozen, CPU-capped or squeezed out of memory through its cgroup on its machine
(:mod:`rlsim.host.nodeops`): the local backend's nodes on this host, a substrate's on the machine
each runs on (its host actor runs the verb there). The backend says where a verb runs
(``_node``); what each fault does to the node is written once, here.
"""

from __future__ import annotations

from typing import Protocol

from rlsim.backends import zygote
from rlsim.host.state import ClusterState
from rlsim.ray_internals import nodes


class NodeVerbsNeed(Protocol):
    """What a cluster that takes :class:`NodeVerbs` must give it: :class:`StartedCluster` gives
    the state and the checks, the backend itself ``_node``. Each verb below is typed against
    this, so what the mixin leans on is written down (``tests/unit/test_backend_protocol.py``
    checks every backend that takes it)."""

    @property
    def _st(self) -> ClusterState:
        """The running cluster's state; RuntimeError when it is not running."""

    def _check_index(self, index: int) -> None:
        """IndexError, naming the nodes there are, for a node that does not exist."""

    def _check_cgroup(self, index: int, what: str) -> None:
        """The node exists and has a cgroup of its own, which ``what`` needs; else raise."""

    def _node(self, index: int, verb: str, *args):
        """:mod:`rlsim.host.nodeops`'s ``verb`` on node ``index`` (its session and index first,
        then ``args``), run where the node is; its answer, or what it raised."""


class NodeVerbs:
    """``pause_node``/``resume_node``, ``workers``/``signal_workers``, ``throttle_cpu``,
    ``squeeze_memory``/``lift_memory`` as :mod:`rlsim.host.nodeops` verbs on the node's machine,
    for a cluster that gives what :class:`NodeVerbsNeed` says."""

    def pause_node(self: NodeVerbsNeed, index: int) -> list[int]:
        """Freeze node ``index``: cgroup freeze (atomic, covers processes forked meanwhile), or
        SIGSTOP to each labelled process without cgroups."""
        self._check_index(index)
        return self._node(index, "set_paused", True, bool(self._st.cgroups))

    def resume_node(self: NodeVerbsNeed, index: int) -> list[int]:
        self._check_index(index)
        return self._node(index, "set_paused", False, bool(self._st.cgroups))

    def workers(self: NodeVerbsNeed, index: int) -> dict[int, str]:
        """Node ``index``'s Ray workers that run tasks and actors, each with what it is doing
        (:func:`rlsim.ray_internals.nodes.work_of` of its title: ``""`` idle, as is a worker
        that has not retitled itself yet: Ray's ``default_worker.py``, or one a workers' zygote
        forked, :func:`rlsim.backends.zygote.forked_worker`). Needs the node's
        cgroup: Ray's retitling of a worker overwrites the labels in its environment, by which
        a node without one finds its processes."""
        self._check_cgroup(index, "finding a node's Ray workers")
        found = {}
        for pid, argv in self._node(index, "cmdlines", True).items():
            work = nodes.work_of(argv)
            if work is None and (nodes.is_worker("", argv) or zygote.forked_worker(argv)):
                work = ""  # not retitled yet (Ray 2.48 retitles an idle worker only later)
            if work is not None:
                found[pid] = work
        return found

    def signal_workers(self: NodeVerbsNeed, index: int, chosen: list[int],
                       signum: int) -> list[int]:
        """``signum`` to those of ``chosen`` still on node ``index``; the pids signalled."""
        self._check_cgroup(index, "finding a node's Ray workers")
        return self._node(index, "signal_some", True, list(chosen), int(signum))

    def throttle_cpu(self: NodeVerbsNeed, index: int,
                     cores: float | None) -> dict[str, float] | None:
        """The CPU quota of node ``index``'s cgroup (see :mod:`rlsim.host.cgroups`); its
        throttling counters so far."""
        self._check_cgroup(index, "a node's CPU quota")
        return self._node(index, "throttle_cpu", cores)

    def squeeze_memory(self: NodeVerbsNeed, index: int, mb: int) -> dict:
        """Node ``index``'s memory cgroup squeezed, the hog run inside the node
        (:func:`rlsim.host.nodeops.squeeze_memory`)."""
        self._check_cgroup(index, "node memory")
        return self._node(index, "squeeze_memory", mb)

    def lift_memory(self: NodeVerbsNeed, index: int) -> None:
        self._check_index(index)
        if self._st.cgroups:  # else no cap was ever set
            self._node(index, "lift_memory")
