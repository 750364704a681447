"""degrade_link: a lossy or slow link (a flaky cable or transceiver, a congested switch port):
every packet crossing it is delayed ``delay_ms`` (± ``jitter_ms``) and lost with probability
``loss_pct`` percent, both directions, for ``for_s`` or until healed. Nothing is cut: Ray's health
checks mostly pass, collectives and object transfers slow down, TCP retransmits what was lost.

The link: ``nodes: [1]`` is the one between node 1 and all the others; ``groups: [[1], [2, 3]]``
the one between those groups (nodes named in none form one more group). How the packets are
picked and held is in :mod:`rlsim.host.links` and :mod:`rlsim.host.delayer`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from rlsim.backends.base import ShapesLinks
from rlsim.faults.base import Fault, cut_apart
from rlsim.fields import NodeGroups, NodeOrRole, Strict
from rlsim.host.links import LinkShape


class DegradeLink(Fault):
    name = "degrade_link"
    impairs = "degraded link"
    needs = (ShapesLinks,)
    by_hand = True
    cli_args = ("nodes",)
    harms_real_cluster = True

    class Params(Strict):
        nodes: list[NodeOrRole] | None = Field(
            None, min_length=1, description="the link between these nodes (or roles' nodes: "
            "rollout, rollout:1) and all the others")
        groups: NodeGroups | None = Field(None, description="the link between these groups "
                                          "(instead of nodes)")
        delay_ms: float = Field(0.0, ge=0, le=60_000, description="added to each packet, "
                                "each direction")
        jitter_ms: float = Field(0.0, ge=0, le=60_000, description="each packet's delay varies "
                                 "this much either way (uniform)")
        loss_pct: float = Field(0.0, ge=0, le=100, description="percent of packets lost, each "
                                "direction")

        @model_validator(mode="after")
        def _one_link_and_some_harm(self):
            if (self.nodes is None) == (self.groups is None):
                raise ValueError("name the link once: nodes (its one end, the rest the other) "
                                 "or groups")
            if not (self.delay_ms or self.loss_pct):
                raise ValueError("give delay_ms or loss_pct (or both): a link with neither is "
                                 "healthy")
            if self.jitter_ms > self.delay_ms:
                raise ValueError(f"jitter_ms {self.jitter_ms:g} exceeds delay_ms "
                                 f"{self.delay_ms:g}: a packet cannot leave before it is sent")
            if self.nodes is not None and len(set(self.nodes)) < len(self.nodes):
                raise ValueError("nodes: a node is named twice")
            return self

        def link(self) -> list[list[int]]:
            return self.groups if self.groups is not None else [list(self.nodes)]

    @classmethod
    def cluster_problem(cls, params, shape):
        link = params.link()
        named = {n for group in link for n in group}
        if len(link) == 1 and named >= set(range(shape.nodes)):
            return ("groups" if params.groups else "nodes"), (
                "that is every node: nothing crosses the link; name one end of it")
        return super().cluster_problem(params, shape)

    def nodes_hit(self, did):
        return sorted({n for group in did["groups"] for n in group})

    def touched(self, did, footprint):
        return cut_apart(did["groups"], footprint)

    def inject(self):
        p = self.params
        shape = LinkShape(p.delay_ms, p.jitter_ms, p.loss_pct)
        link, self.aimed = self.ctx.groups(p.link())
        self.held = self.ctx.cluster.degrade_links(link, shape, self.ctx.rng.randrange(1 << 31))
        return {"groups": link, "delay_ms": p.delay_ms, "jitter_ms": p.jitter_ms,
                "loss_pct": p.loss_pct, "rules": len(self.held["rules"]),
                "delayers": len(self.held["delayers"])}

    def said(self, did):
        what = [f"{did['delay_ms']:g} ms" + (f" ± {did['jitter_ms']:g}" if did["jitter_ms"]
                                             else "")] if did["delay_ms"] else []
        what += [f"{did['loss_pct']:g}% loss"] if did["loss_pct"] else []
        ends = " and ".join(str(g) for g in did["groups"])
        return f"degraded the link of node(s) {ends}: {', '.join(what)}"

    def undo(self):
        self.ctx.cluster.restore_links(self.held)
        return {"rules_removed": len(self.held["rules"]),
                "delayers_stopped": len(self.held["delayers"])}
