"""One run of scenarios, as ``rlsim run`` and the pytest plugin both drive it.

Whatever decides how a scenario runs is decided here once, whichever front end asked: the backend
(the front end's option, else the scenario's ``cluster.backend``), the slow tier, the refusals
(disruptive faults on a cluster rlsim did not start, a root cluster nobody could protect, a
foreign backend without its address), the clusters kept between scenarios (:class:`Pool`) and the
fault-free twins (:class:`~rlsim.scenario.twins.Twins`). The front ends only present: the CLI
prints and exits, the plugin skips, fails or raises pytest's usage error, each in its own words
for its own options.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from rlsim import ray_internals
from rlsim.backends import BACKENDS, cluster_class
from rlsim.result import ScenarioResult
from rlsim.scenario.pool import Pool, hand_on_order
from rlsim.scenario.schema import Scenario
from rlsim.scenario.twins import Twins


class Session:
    """What the scenarios of one run share, and the decisions made for each of them.

    ``backend``: the front end's choice for every scenario (None: each its own
    ``cluster.backend``); ``slow``: run the slow tier too; ``allow_disruptive``: harm a cluster
    rlsim did not start; ``reuse``: hand a clean cluster on to the next scenario of its shape;
    ``fresh_twin``: train every twin again."""

    def __init__(self, *, backend: str | None = None, ray_address: str | None = None,
                 slow: bool = False, allow_disruptive: bool = False, reuse: bool = True,
                 fresh_twin: bool = False) -> None:
        self.backend, self.ray_address = backend, ray_address
        self.slow, self.allow_disruptive = slow, allow_disruptive
        self.pool = Pool(reuse=reuse)
        self.twins = Twins(fresh=fresh_twin)
        self._auth: list[str | None] = []  # asked once: the answer cannot change in a run

    def backend_of(self, sc: Scenario) -> str:
        """The backend ``sc`` runs on: the front end's choice, else its own."""
        return self.backend or sc.cluster.backend

    def skips_slow(self, sc: Scenario, named: bool = False) -> bool:
        """Whether ``sc`` is left out as slow: tagged so, the slow tier not asked for, and not
        named on its own (a file named alone always runs, on the CLI)."""
        return sc.slow and not self.slow and not named

    def order(self, items: list, scenario_of: Callable = lambda x: x) -> list:
        """``items`` in the order that hands each clean cluster on (:func:`hand_on_order`)."""
        return hand_on_order(items, scenario_of)

    def disruptive(self, scenarios: Iterable[Scenario]) -> dict[str, list[str]]:
        """The scenarios refused for harming a cluster rlsim did not start, by name, with the
        faults that would harm it; empty with ``allow_disruptive``."""
        from rlsim.scenario.runnable import harmful_on

        if self.allow_disruptive:
            return {}
        return {sc.name: h for sc in scenarios if not BACKENDS[self.backend_of(sc)].starts
                and (h := harmful_on(sc, self.backend_of(sc)))}

    def disruptive_refusal(self, scenarios: Iterable[Scenario], fix: str) -> str | None:
        """The refusal of :meth:`disruptive` in words, ending in the front end's ``fix`` for the
        others; None when nothing is refused."""
        harmful = self.disruptive(scenarios)
        if not harmful:
            return None
        names = "; ".join(f"{n} ({', '.join(h)})" for n, h in harmful.items())
        return ("refused: on a real cluster these scenarios kill nodes or processes, take GPU "
                f"memory or damage checkpoints: {names}. Fix: pass --allow-disruptive on a "
                f"cluster nobody else uses, or {fix}")

    def auth_refusal(self, scenarios: Iterable[Scenario]) -> str | None:
        """Why no cluster may start here (root on a Ray without token auth, see
        :func:`rlsim.ray_internals.auth_refusal`) when one of ``scenarios`` starts one."""
        if not any(BACKENDS[self.backend_of(sc)].starts for sc in scenarios):
            return None
        if not self._auth:
            self._auth.append(ray_internals.auth_refusal())
        return self._auth[0]

    def address_problem(self, scenarios: Iterable[Scenario]) -> str | None:
        """What is wrong with the address of the cluster a backend that starts none would use
        (none given, or nothing answering there), checked once per such backend before anything
        connects; None when all is well."""
        for name in sorted({self.backend_of(sc) for sc in scenarios
                            if not BACKENDS[self.backend_of(sc)].starts}):
            address = self.ray_address or os.environ.get("RAY_ADDRESS")
            if not address:
                return f"--backend {name} needs the cluster's address: --ray-address HOST:PORT " \
                       "(or RAY_ADDRESS)"
            if problem := cluster_class(name).address_problem(address):
                return problem
        return None

    def play(self, sc: Scenario, out_dir: Path, seed: int | None = None,
             on_progress=None) -> ScenarioResult:
        """Run and judge ``sc`` on its backend with this session's kept clusters and twins
        (:func:`rlsim.scenario.runner.play`); ``Unsupported`` when it cannot run there."""
        from rlsim.scenario.runner import play

        return play(sc, out_dir, backend=self.backend_of(sc), ray_address=self.ray_address,
                    pool=self.pool, twins=self.twins, seed=seed, on_progress=on_progress)

    def close(self) -> list[str]:
        """Stop the clusters kept between scenarios; what their teardown leaked."""
        return self.pool.close()
