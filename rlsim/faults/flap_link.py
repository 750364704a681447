"""flap_link: a link that goes down and comes back on a period (a flapping port, a transceiver
failing intermittently): the nodes of ``groups`` are cut off from the rest and each other (the
``partition`` fault's rules) for ``down_s`` seconds of every ``period_s``, starting cut, until
healed (``for_s``, ``heal_at``).

A cut shorter than Ray's health-check budget (period x failures, a few seconds) leaves every node
alive: TCP resends what was dropped, and the run only stalls during each cut. A longer one gets
the node declared dead, as a partition would.

The flapping runs on a thread of the process that injected it (the scenario runner), so it is
not offered by hand: ``rlsim fault NAME partition`` with ``--for`` cuts a link once.
"""

from __future__ import annotations

import threading

from pydantic import Field, model_validator

from rlsim.faults.partition import Partition
from rlsim.fields import DAY, NodeGroups, Strict


class FlapLink(Partition):
    """A partition (its rules, its checks of ``groups``) that comes and goes."""

    name = "flap_link"
    impairs = "flapping link"
    by_hand = False
    harms_real_cluster = True

    class Params(Strict):
        groups: NodeGroups = Field(description="node groups cut off from the rest and each "
                                   "other while the link is down")
        # each cut and each mend rewrites the cluster's firewall rules (tens of ms here), and
        # Ray's heartbeats need a down time they can miss: faster flapping is no flapping
        period_s: float = Field(ge=1.0, le=DAY, description="one down and up cycle (1 s at "
                                "least)")
        down_s: float = Field(ge=0.5, le=DAY, description="how long the link is down in each "
                              "cycle (the first starts at once; 0.5 s at least)")

        @model_validator(mode="after")
        def _up_some_of_the_time(self):
            if self.down_s >= self.period_s:
                raise ValueError(f"down_s {self.down_s:g} is not less than period_s "
                                 f"{self.period_s:g}: that is a partition, not a flap "
                                 "(use partition)")
            return self

    def inject(self):
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rules: list = []
        self.cuts = 0
        self.groups, self.aimed = self.ctx.groups(self.params.groups)
        self._cut()
        self.held = {"rules": []}  # what is in force, kept current by the flapping thread
        self._thread = threading.Thread(target=self._flap, name="rlsim-flap-link", daemon=True)
        self._thread.start()
        return {"groups": self.groups, "period_s": self.params.period_s,
                "down_s": self.params.down_s}

    def said(self, did):
        return (f"flapping the link of node(s) {' and '.join(map(str, did['groups']))}: down "
                f"{did['down_s']:g} s of every {did['period_s']:g} s")

    def _cut(self) -> None:
        with self._lock:
            if not self._stop.is_set() and not self._rules:
                self._rules = self.ctx.cluster.partition(self.groups)
                self.cuts += 1

    def _mend(self) -> None:
        with self._lock:
            if self._rules:
                self.ctx.cluster.remove_rules(self._rules)
                self._rules = []

    def _flap(self) -> None:
        p = self.params
        while not self._stop.wait(p.down_s):
            self._mend()
            if self._stop.wait(p.period_s - p.down_s):
                return
            self._cut()

    def undo(self):
        self._stop.set()
        self._thread.join(timeout=30)
        self._mend()
        return {"cuts": self.cuts}

