"""The placed_on check judged on recorded timelines: worker addresses map to node indices through
the cluster_ready event."""

from __future__ import annotations

from pathlib import Path

from rlsim.checks import CHECKS
from rlsim.history import Outcome

NODES = ["127.77.0.10", "127.77.0.11", "127.77.0.12"]


def outcome(*placements: list[tuple[int, list[str]]]) -> Outcome:
    timeline = [{"ts": 0.0, "source": "rlsim", "type": "cluster_ready", "nodes": NODES}]
    timeline += [{"ts": 1.0 + i, "source": "trainer", "type": "placement",
                  "workers": [{"ip": NODES[n], "roles": roles} for n, roles in workers]}
                 for i, workers in enumerate(placements)]
    return Outcome(scenario=None, run_dir=Path("."), timeline=timeline)


def judge(o: Outcome, **params):
    check = CHECKS["placed_on"]
    return check.judge(o, check.params(params))


def test_workers_only_on_the_named_nodes_pass_and_one_elsewhere_fails_naming_it():
    first = [(0, ["actor", "ref"]), (1, ["rollout"])]
    assert judge(outcome(first), nodes=[0, 1]).ok
    assert judge(outcome(first), nodes=[1], role="rollout").ok
    moved = outcome(first, [(0, ["actor", "ref"]), (2, ["rollout"])])  # rebuilt on node 2
    verdict = judge(moved, nodes=[0, 1])
    assert not verdict.ok and "node(s) [0, 1, 2] in 2 placement(s)" in verdict.message
    assert not judge(moved, nodes=[1], role="rollout").ok


def test_no_placement_fails():
    verdict = judge(outcome(), nodes=[0])
    assert not verdict.ok and "no placement" in verdict.message
