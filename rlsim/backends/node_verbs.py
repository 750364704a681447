"""A node frozen, CPU-capped or squeezed out of memory through its cgroup on its machine
(:mod:`rlsim.host.nodeops`): the local backend's nodes on this host, a substrate's on the machine
each runs on (its host actor runs the verb there). The backend says where a verb runs
(``_node``); what each fault does to the node is written once, here.
"""

from __future__ import annotations


class NodeVerbs:
    """``pause_node``/``resume_node``, ``throttle_cpu``, ``squeeze_memory``/``lift_memory`` as
    :mod:`rlsim.host.nodeops` verbs on the node's machine."""

    def _node(self, index: int, verb: str, *args):
        """:mod:`rlsim.host.nodeops`'s ``verb`` on node ``index`` (its session and index first,
        then ``args``), run where the node is; its answer, or what it raised."""
        raise NotImplementedError

    def pause_node(self, index: int) -> list[int]:
        """Freeze node ``index``: cgroup freeze (atomic, covers processes forked meanwhile), or
        SIGSTOP to each labelled process without cgroups."""
        self._check_index(index)
        return self._node(index, "set_paused", True, bool(self._st.cgroups))

    def resume_node(self, index: int) -> list[int]:
        self._check_index(index)
        return self._node(index, "set_paused", False, bool(self._st.cgroups))

    def throttle_cpu(self, index: int, cores: float | None) -> dict[str, float] | None:
        """The CPU quota of node ``index``'s cgroup (see :mod:`rlsim.host.cgroups`); its
        throttling counters so far."""
        self._check_cgroup(index, "a node's CPU quota")
        return self._node(index, "throttle_cpu", cores)

    def squeeze_memory(self, index: int, mb: int) -> dict:
        """Node ``index``'s memory cgroup squeezed, the hog run inside the node
        (:func:`rlsim.host.nodeops.squeeze_memory`)."""
        self._check_cgroup(index, "node memory")
        return self._node(index, "squeeze_memory", mb)

    def lift_memory(self, index: int) -> None:
        self._check_index(index)
        if self._st.cgroups:  # else no cap was ever set
            self._node(index, "lift_memory")
