"""What a cluster on a substrate does on its machines through their host actors
(:mod:`rlsim.backends.substrate.hosts`), on the driver's side: a host's answer raised in the
host's own words, the doctor's probe held by a host, and a fault's firewall rules placed on the
machine where each one must match.

Kept apart from :mod:`rlsim.backends.substrate.hosts`, which each machine's worker imports for
its host actor: these need the backends' own modules, which a machine has no use for.
"""

from __future__ import annotations

import contextlib
import dataclasses

from rlsim.backends.started import PROBE_TIMEOUT_S
from rlsim.host import iptables
from rlsim.host.home import rlsim_home
from rlsim.host.iptables import Drop


def answer(ref):
    """A host's answer to a call; what it raised, raised as it was (its words, not Ray's
    wrapping with the remote traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        raise e.cause from None


class HostTalk:
    """A :class:`rlsim.host.talk.Talk` held by a machine's host actor: the same ``ask`` and
    ``close``, each a call to the host."""

    def __init__(self, host, key: str, argv: list[str], env: dict[str, str]) -> None:
        self.host, self.key, self.argv, self.env = host, key, argv, env

    def ask(self, phase: str, args: dict) -> dict:
        import ray

        try:
            return ray.get(self.host.talk.remote(self.key, self.argv, self.env, phase, args,
                                                 PROBE_TIMEOUT_S))
        except ray.exceptions.RayTaskError as e:  # the host's words, not Ray's wrapping
            raise RuntimeError(str(e.cause)) from None

    def close(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # a host gone took the probe with it
            ray.get(self.host.end_talks.remote(self.key))


class MachineFirewall:
    """A fault's drops, planned as on one machine (a sender node's cgroup -> a receiver node's
    address in the plan), applied on the substrate's machines: a drop goes to its sender's
    machine, where the sender's cgroup lives, aimed at the receiver node's address there. The
    substrate's own Ray traffic between the same machines is in no node's cgroup and passes. A
    drop from anyone but a node goes to every machine: the node's own keeps its exclusion, the
    others drop every sender to those ports."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster  # the SubstrateCluster whose machines these are

    def available(self) -> str | None:
        """None when every machine of the cluster can take rules, else the reason."""
        lacking = [m.address for m in self.cluster._machines if not (m.iptables and m.cgroups)]
        return (f"network faults need iptables and rlsim's node cgroups on every machine; "
                f"{', '.join(lacking)} lack(s) them (a container machine: privileged)"
                if lacking else None)

    def _placed(self, drop: Drop) -> list[tuple[int, Drop]]:
        c = self.cluster
        by_plan = {n.address: n.index for n in c._st.layout.nodes}
        target = by_plan[drop.dst]
        aimed = dataclasses.replace(drop, dst=c.addresses[target])
        if drop.exclude_src:
            return [(c._at[target], aimed)] + [
                (k, dataclasses.replace(aimed, src=None, exclude_src=False))
                for k in range(len(c._machines)) if k != c._at[target]]
        return [(c._at[iptables.node_of(drop.src)], aimed)]

    def _per_machine(self, drops: list[Drop]) -> dict[int, list[dict]]:
        """Machine index -> its drops."""
        per: dict[int, list[dict]] = {}
        for drop in drops:
            for index, placed in self._placed(drop):
                per.setdefault(index, []).append(dataclasses.asdict(placed))
        return per

    def _send(self, verb: str, per: dict[int, list[dict]]) -> list:
        """``verb`` on each machine of ``per`` with its drops; each machine's answer."""
        import ray

        c = self.cluster
        st = c._st
        return ray.get([c._hosts[i].firewall.remote(str(rlsim_home()), st.slot, st.session,
                                                     verb, ds) for i, ds in per.items()])

    def apply(self, drops: list[Drop]) -> list[Drop]:
        self._send("apply", self._per_machine(drops))
        return drops

    def remove(self, drops: list[Drop]) -> None:
        self._send("remove", self._per_machine(drops))

    def heal(self) -> None:
        self._send("heal", dict.fromkeys(range(len(self.cluster._hosts)), []))

    def left(self) -> list[list[str]]:
        """The rules still in the cluster's chain, machine by machine."""
        return self._send("left", dict.fromkeys(range(len(self.cluster._hosts)), []))


