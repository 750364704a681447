"""Faults aimed at what a story means (a role's rank, resolved when the fault fires) and judged by
what they reached of the trainer: the resolution and the reach of each fault family as data, and
``faults_landed``'s verdict on recorded histories (a miss, an intended miss, a refusal, a fault
that never fired, a storage fault the trainer never met, a gray fault that changed nothing)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from rlsim.checks import CHECKS, FaultsLanded, faults_landed
from rlsim.faults import FAULTS
from rlsim.faults.base import FaultContext, cut_apart, where_trainer_is
from rlsim.faults.footprint import Look
from rlsim.fields import World, named_roles, problem
from rlsim.history import Outcome
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.schema import FaultEntry

ADDRESSES = ["127.77.0.10", "127.77.0.11", "127.77.0.12", "127.77.0.13"]
# the reference trainer's worker table: worker i on node i, colocated roles
WORKERS = [{"index": i, "roles": ["actor", "rollout", "ref"], "ip": ADDRESSES[i], "pid": 100 + i}
           for i in (0, 2)]  # Ray placed rank 1 on node 2: index 1 holds none


class FakeCluster:
    address = "127.77.0.10:20000"

    def __init__(self, nodes: int = 4) -> None:
        self.spec = ClusterSpec(nodes=nodes, gpus_per_node=1)

    def nodes(self, exclude_ids=frozenset()):
        return [SimpleNamespace(index=i, address=a, alive=True)
                for i, a in enumerate(ADDRESSES[:self.spec.nodes])]


def ctx(workers=WORKERS) -> FaultContext:
    return FaultContext(FakeCluster(), Path("."), random.Random(0), workers=list(workers))


def actor(node: int, cls: str = "Worker", pid: int | None = None) -> dict:
    return {"class": cls, "pid": pid or 100 + node, "ip": ADDRESSES[node], "node": node}


def fault(kind: str, params: dict, c: FaultContext | None = None):
    return FAULTS[kind](FAULTS[kind].Params.model_validate(params), c or ctx())


# ---- aiming --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(k for k, f in FAULTS.items()
                                        if "role" in f.Params.model_fields
                                        and "node" in f.Params.model_fields))
def test_every_node_fault_takes_a_role_or_an_index_but_one(kind):
    extra = {"cpu": 0.5} if kind == "slow_node" else {"gb": 1.0} if kind == "gpu_oom" else \
        {"gpu": 0} if kind == "gpu_lost" else {"port": "gcs"} if kind == "block_port" else \
        {"seconds": 2.0} if kind == "slow_start" else {}
    assert FAULTS[kind].Params.model_validate({"role": "actor", "rank": 1, **extra}).node is None
    assert FAULTS[kind].Params.model_validate({"node": 1, **extra}).role is None
    for wrong in ({"node": 1, "role": "actor"}, {}, {"node": 1, "rank": 2}):
        with pytest.raises(ValidationError, match="role"):
            FAULTS[kind].Params.model_validate({**wrong, **extra})


def test_the_node_faults_that_name_a_node_all_take_a_role():
    """Every fault whose target is one node (its ``node`` field) can be aimed by role too."""
    by_index = {k for k, f in FAULTS.items() if "node" in f.Params.model_fields}
    assert by_index == {k for k, f in FAULTS.items() if "role" in f.Params.model_fields} - {
        "kill_role", "hang_role", "segfault_role"}
    assert {"kill_node", "restart_node", "pause_node", "slow_node", "slow_start", "preempt_node",
            "gpu_lost", "host_oom", "gpu_oom", "block_port"} <= by_index


def test_a_role_resolves_to_the_node_hosting_its_rank_when_the_fault_fires():
    c = ctx()
    node, aimed = c.target(FAULTS["kill_node"].Params.model_validate(
        {"role": "actor", "rank": 1}))
    assert node == 2 and aimed == {"role": "actor", "rank": 1, "node": 2, "pid": 102}
    assert c.target(FAULTS["kill_node"].Params.model_validate({"node": 1})) == (1, None)


def test_a_rank_no_node_hosts_names_the_ranks_that_exist():
    c = ctx()
    with pytest.raises(ValueError, match=r"role 'actor' has ranks 0-1 running now.*rank 5"):
        c.target(FAULTS["kill_node"].Params.model_validate({"role": "actor", "rank": 5}))
    with pytest.raises(ValueError, match="role 'critic' has no rank running now"):
        c.target(FAULTS["kill_node"].Params.model_validate({"role": "critic", "rank": 0}))


def test_a_fault_that_spares_the_head_refuses_a_rank_placed_there():
    for kind, extra in (("preempt_node", {"notice_s": 1}), ("kill_node", {})):
        f = fault(kind, {"role": "actor", "rank": 0, **extra})
        with pytest.raises(ValueError, match=f"actor rank 0 runs on the head \\(node 0\\) now: "
                                             f"{kind} there would take the head"):
            f.target()
    assert fault("slow_node", {"role": "actor", "rank": 0, "cpu": 0.5}).target() == 0


def test_groups_name_roles_and_ranks_and_refuse_to_share_a_node():
    c = ctx()
    assert c.groups([["actor:1"]]) == ([[2]], {"actor:1": [2]})
    assert c.groups([["actor"], [3]]) == ([[0, 2], [3]], {"actor": [0, 2]})
    with pytest.raises(ValueError, match=r"node\(s\) \[2\] fall in two groups"):
        c.groups([["actor:1"], [2]])


def test_role_names_are_checked_against_what_the_trainer_runs():
    params = FAULTS["partition"].Params.model_validate({"groups": [["rollout:3", 1]]})
    assert named_roles(params) == [("groups", "rollout")]
    assert problem(params, World(4, ranks={"rollout": 2}))[1].startswith(
        "rank 3 of role 'rollout' does not exist")
    assert "its roles are actor" in problem(params, World(4, ranks={"actor": 2}))[1]
    assert problem(params, World(4, ranks={"rollout": 4})) is None


def test_a_role_needs_a_worker_table_or_trainer_roles():
    params = FAULTS["kill_node"].Params.model_validate({"role": "worker", "rank": 1})
    seeing = SimpleNamespace(name="ray_train", worker_table=True)
    blind = SimpleNamespace(name="events", worker_table=False)
    assert FAULTS["kill_node"].trainer_problem(params, SimpleNamespace(roles={}), seeing) is None
    field, said = FAULTS["kill_node"].trainer_problem(params, SimpleNamespace(roles={}), blind)
    assert field == "role" and "trainer.roles: {worker:" in said
    assert FAULTS["kill_node"].trainer_problem(
        params, SimpleNamespace(roles={"worker": "RayTrainWorker"}), blind) is None


# ---- what a fault reached ------------------------------------------------------------------------


def test_a_node_fault_reaches_the_actors_on_its_node_only():
    prints = [actor(0), actor(2, pid=7)]
    assert fault("kill_node", {"node": 1}).touched({"node": 1}, prints) == []
    assert fault("kill_node", {"node": 2}).touched({"node": 2}, prints) == [prints[1]]
    assert fault("kill_head", {}).touched({"node": 0}, prints) == prints  # the GCS is gone


@pytest.mark.parametrize(("groups", "nodes", "cut"), [
    ([[1]], [0, 0], []),          # the cut node holds none, the actors stay with the head
    ([[1]], [0, 1], [0, 1]),      # actor on node 1 cut from the head and the other actor
    ([[0]], [0, 0], []),          # the head cut off, but with every actor beside it
    ([[2], [3]], [2, 3], [2, 3]),
    ([[1, 2]], [1, 2], [1, 2]),   # both actors cut off together: from the GCS on the head
])
def test_a_cut_reaches_the_actors_it_separates_from_another_end(groups, nodes, cut):
    prints = [actor(n, pid=10 + i) for i, n in enumerate(nodes)]
    assert [a["node"] for a in cut_apart(groups, prints)] == cut


def test_a_blocked_port_reaches_who_uses_it():
    f = fault("block_port", {"node": 1, "port": "workers:1"})
    on_1, on_0 = actor(1), actor(0)
    assert f.touched({"node": 1, "port": "workers:1", "sources": None}, [on_0, on_1]) == [on_1]
    assert f.touched({"node": 1, "port": "workers:1", "sources": None}, [on_0]) == []
    gcs = fault("block_port", {"node": 0, "port": "gcs", "sources": [2]})
    assert gcs.touched({"node": 0, "port": "gcs", "sources": [2]}, [on_0, actor(2)]) == [actor(2)]


def test_a_role_fault_reaches_the_process_it_signalled():
    f = fault("kill_role", {"role": "actor", "rank": 1})
    prints = [actor(0), actor(2)]
    assert f.touched({"ip": ADDRESSES[2], "pid": 102}, prints) == [prints[1]]
    assert f.touched({"ip": ADDRESSES[2], "pid": 999}, prints) == []


def test_where_the_trainer_was_is_said_by_node():
    assert where_trainer_is([actor(0, "RayTrainWorker", 1), actor(0, "RayTrainWorker", 2),
                             actor(0, "TrainController", 3)]) == \
        "node 0 (RayTrainWorker x2, TrainController)"
    assert where_trainer_is([]) is None  # said by the verdict, in a sentence of its own


def test_a_storage_fault_counts_the_trainers_writes_under_its_path(tmp_path):
    f = fault("disk_full", {"path": "checkpoints"}, FaultContext(FakeCluster(), tmp_path,
                                                                  random.Random(0)))
    f.dir = tmp_path / "checkpoints"
    f.dir.mkdir()
    (f.dir / "global_step_5").mkdir()
    own = f.dir / "filler"
    own.write_bytes(b"x" * 10)
    f.watch_writes(own=own)
    assert f.writes() == {"path": str(f.dir), "files": 0, "dirs": 0, "bytes": 0}
    own.write_bytes(b"x" * 1000)  # its own file grows: not the trainer's
    tmp = f.dir / ".tmp-global_step_10"
    tmp.mkdir()
    (tmp / "model.pt").write_bytes(b"y" * 300)
    seen = f.writes()
    assert seen["files"] == 1 and seen["bytes"] == 300 and seen["dirs"] >= 1


# ---- faults_landed, judged from the history ------------------------------------------------------


def outcome(entries: list[dict], events: list[dict], checks=(), refusal=None) -> Outcome:
    sc = SimpleNamespace(name="s", faults=[FaultEntry.model_validate(e) for e in entries],
                         checks=lambda: [(n, CHECKS[n].params(p)) for n, p in checks])
    return Outcome(sc, Path("."), [{"ts": 1.0 + i, "source": "rlsim", **e}
                                   for i, e in enumerate(events)], refusal=refusal)


KILL = {"at": {"step": 3}, "kill_node": {"node": 1}}


def injected(**fields) -> dict:
    return {"type": "fault_injected", "fault": "kill_node", "index": 0, "disruptive": True,
            "nodes": [1], **fields}


def test_a_kill_that_hit_none_of_the_trainer_fails_naming_where_it_was():
    o = outcome([KILL], [injected(touched=[], touched_count=0,
                                  trainer_at="node 0 (RayTrainWorker x2)")])
    v = faults_landed(o, FaultsLanded())
    assert not v.ok and v.message == (
        "kill_node (faults[0]) hit node 1 and reached nothing of the trainer there (no actor, "
        "task, placement-group bundle or driver of its jobs, or none it cut off); the trainer "
        "was on node 0 (RayTrainWorker x2)")


def test_a_miss_the_story_means_passes_and_says_so():
    o = outcome([{**KILL, "may_miss": True}], [injected(touched=[], touched_count=0,
                                                        trainer_at="node 0 (W)")])
    v = faults_landed(o, FaultsLanded())
    assert v.ok and "the scenario means it to miss (may_miss)" in v.message


def test_a_kill_that_reached_actors_passes_naming_them():
    o = outcome([KILL], [injected(touched=[actor(1, "RayTrainWorker")], touched_count=1)])
    v = faults_landed(o, FaultsLanded())
    assert v.ok and v.message == ("kill_node (faults[0]) reached 1 of the trainer's actors "
                                  "(RayTrainWorker) on node(s) [1]")


def test_a_fault_that_could_not_be_injected_fails_unless_the_story_counts_it():
    events = [{"type": "fault_error", "fault": "kill_node", "index": 0, "message": "boom"}]
    assert not faults_landed(outcome([KILL], events), FaultsLanded()).ok
    told = outcome([KILL], events, checks=[("event", {"type": "fault_error"})])
    assert faults_landed(told, FaultsLanded()).ok


def test_a_fault_that_never_fired_fails_unless_the_run_was_meant_to_end_first():
    assert "never fired" in faults_landed(outcome([KILL], []), FaultsLanded()).message
    assert not faults_landed(outcome([KILL], []), FaultsLanded()).ok
    assert faults_landed(outcome([KILL], [], checks=[("fails", {})]), FaultsLanded()).ok


def test_a_storage_fault_the_trainer_never_wrote_through_fails():
    entry = {"at": {"step": 3}, "slow_storage": {"write_mbps": 1}}
    inj = {"type": "fault_injected", "fault": "slow_storage", "index": 0, "disruptive": False}
    quiet = {"type": "fault_healed", "fault": "slow_storage", "index": 0,
             "touched": {"path": "/r/checkpoints", "files": 0, "dirs": 0, "bytes": 0}}
    v = faults_landed(outcome([entry], [inj, quiet]), FaultsLanded())
    assert not v.ok and "wrote nothing under /r/checkpoints" in v.message
    busy = {**quiet, "touched": {"path": "/r/checkpoints", "files": 3, "dirs": 1, "bytes": 9}}
    assert faults_landed(outcome([entry], [inj, busy]), FaultsLanded()).ok


def test_a_gray_fault_that_changed_nothing_fails():
    entry = {"at": {"step": 3}, "slow_node": {"node": 1, "cpu": 0.2}}
    inj = injected(fault="slow_node", touched=[actor(1)], touched_count=1)
    idle = {"type": "fault_healed", "fault": "slow_node", "index": 0,
            "effect": {"changed": False, "throttled": {"periods": 0, "seconds": 0.0}}}
    v = faults_landed(outcome([entry], [inj, idle]), FaultsLanded())
    assert not v.ok and "changed nothing of the trainer" in v.message
    bit = {**idle, "effect": {"changed": True, "throttled": {"periods": 9, "seconds": 0.7}}}
    assert faults_landed(outcome([entry], [inj, bit]), FaultsLanded()).ok


def test_every_scenario_with_faults_is_judged_by_it_unwritten():
    from rlsim.checks import judge

    o = outcome([KILL], [injected(touched=[], touched_count=0, trainer_at="node 0 (W)")],
                checks=[("no_leaks", True)])
    assert [v.check for v in judge(o)] == ["no_leaks", "faults_landed"]
    assert [v.check for v in judge(outcome([], []))] == []


def test_a_held_fault_reaches_the_actors_the_trainer_starts_under_it():
    """A block fired before the trainer's actors exist reaches them once they start: the
    nemesis looks again while it is in force, and says so once (``fault_reached``)."""
    from rlsim.history import Recorder
    from rlsim.scenario import nemesis as nem

    entry = FaultEntry.model_validate({"at": {"seconds": 0},
                                       "block_port": {"node": 0, "port": "gcs", "sources": [1]}})
    c = ctx()
    prints = [[], [], [actor(0), actor(1, "Worker", 7)]]
    c.look = lambda: Look(prints.pop(0) if len(prints) > 1 else prints[0])
    c.open_reader = lambda: None
    f = FAULTS["block_port"]

    class Blocked(f):
        def inject(self):
            self.held = {"rules": []}
            return {"node": 0, "port": "gcs", "ports": [], "sources": [1], "rules": 0}

    o = Outcome(scenario=None, run_dir=Path("."))
    n = nem.Nemesis([entry], c, Recorder(o))
    n.faults[0] = Blocked(entry.params, c)
    n.tick([], 0.0)  # fires: nothing of the trainer yet
    assert o.timeline[-1]["type"] == "fault_injected" and o.timeline[-1]["touched_count"] == 0
    n._next_look = 0.0
    n.tick([], 0.5)  # still nothing
    n._next_look = 0.0
    n.tick([], 1.0)  # the worker on node 1 started under the block
    reached = [e for e in o.timeline if e["type"] == "fault_reached"]
    assert [(e["index"], e["touched_count"]) for e in reached] == [(0, 1)]
    n._next_look = 0.0
    n.tick([], 1.5)
    assert len([e for e in o.timeline if e["type"] == "fault_reached"]) == 1  # said once
    landed = outcome([{"at": {"seconds": 0}, "block_port": {"node": 0, "port": "gcs"}}],
                     [injected(fault="block_port", nodes=[0], touched=[], touched_count=0,
                               trainer_at="x"),
                      {"type": "fault_reached", "index": 0, "touched": [actor(1)],
                       "touched_count": 1}])
    assert faults_landed(landed, FaultsLanded()).ok


def test_a_target_written_back_as_recorded_reads_again():
    """The fault ledger keeps a fault's parameters as dumped (role: null, rank: 0) and reads
    them back to heal it: that is an index target, not a rank without a role."""
    params = FAULTS["block_port"].Params.model_validate({"node": 0, "port": "gcs"})
    again = FAULTS["block_port"].Params.model_validate(params.model_dump())
    assert again.node == 0 and again.role is None
