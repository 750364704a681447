"""A fault is judged by what it is for. A restart of a node that is down is a remedy, judged by
whether the node came back, never by what of the trainer it hit; a restart of a live node is a
reboot, judged by its reach. A disruptive fault's reach counts everything of the trainer's jobs on
the node: actors, plain tasks leased or running, placement-group bundles, drivers. Every verdict
reads as a sentence in its odd cases (nothing of the trainer alive, nothing placed yet, reach
unknown).

The nemesis runs here for real against a cluster and a GCS reader that hold plain data (no Ray
cluster in unit tests): the kills, restarts and the GCS's tables change as the faults fire, and
the histories it records are judged through :mod:`rlsim.checks`."""

from __future__ import annotations

import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsim.checks import CHECKS, FaultsLanded, detected_within_s, faults_landed
from rlsim.faults import FAULTS, footprint
from rlsim.faults.base import FaultContext, cut_apart, where_trainer_is
from rlsim.history import Outcome, Recorder
from rlsim.host.spec import ClusterSpec
from rlsim.scenario import nemesis as nem
from rlsim.scenario.schema import FaultEntry

ADDRESSES = ["127.77.0.10", "127.77.0.11", "127.77.0.12", "127.77.0.13"]
TRAINER_JOB, DASHBOARD_JOB, RLSIM_JOB = "01000000", "02000000", "03000000"


class FakeGcs:
    """The tables a GcsReader returns, kept as data: what is on a node goes when it is killed."""

    def __init__(self) -> None:
        self.alive = {a: True for a in ADDRESSES}
        self.actors: list[dict] = []
        self.tasks: list[dict] | None = []
        self.bundles: list[dict] = []
        self.jobs = [{"job": TRAINER_JOB, "pid": 4000, "ip": ADDRESSES[0], "namespace": "",
                      "entrypoint": "python chaos.py"},
                     {"job": DASHBOARD_JOB, "pid": 4001, "ip": ADDRESSES[0],
                      "namespace": "_ray_internal_dashboard", "entrypoint": ""}]

    def live_actors(self):
        return list(self.actors)

    def node_table(self):
        return [{"NodeID": f"{i:02x}" * 4, "NodeManagerAddress": a, "Alive": self.alive[a]}
                for i, a in enumerate(ADDRESSES)]

    def placed_bundles(self):
        return list(self.bundles)

    def live_jobs(self):
        return list(self.jobs)

    def held_tasks(self):
        return None if self.tasks is None else list(self.tasks)

    def lose(self, node: int) -> None:
        ip = ADDRESSES[node]
        self.alive[ip] = False
        self.actors = [a for a in self.actors if a["ip"] != ip]
        self.tasks = [t for t in self.tasks or [] if t["node_id"] != node_id(node)]
        self.bundles = [b for b in self.bundles if b["node_id"] != node_id(node)]


def node_id(node: int) -> str:
    return f"{node:02x}" * 4


def gcs_actor(node: int, cls: str = "Worker", pid: int | None = None, job: str = TRAINER_JOB,
              module: str = "train", state: str = "ALIVE") -> dict:
    return {"class": cls, "name": "", "pid": pid or 100 + node, "ip": ADDRESSES[node],
            "job": job, "module": module, "state": state}


def gcs_task(node: int, name: str = "chaos_task", pid: int = 500, job: str = TRAINER_JOB):
    return {"name": name, "job": job, "node_id": node_id(node), "pid": pid,
            "state": "RUNNING", "attempt": 0}


class FakeCluster:
    """Kills and restarts nodes in the fake GCS, as a backend does in Ray's."""

    address = "127.77.0.10:20000"

    def __init__(self, gcs: FakeGcs, comes_back: bool = True) -> None:
        self.spec = ClusterSpec(nodes=4, gpus_per_node=1)
        self.gcs, self.comes_back = gcs, comes_back

    def nodes(self):
        return [SimpleNamespace(index=i, address=a, alive=self.gcs.alive[a], node_id=node_id(i))
                for i, a in enumerate(ADDRESSES)]

    def kill_node(self, index: int) -> list[int]:
        self.gcs.lose(index)
        return [1, 2]

    def restart_node(self, index: int, timeout=None):
        self.gcs.lose(index)
        self.gcs.alive[ADDRESSES[index]] = self.comes_back
        return SimpleNamespace(address=ADDRESSES[index], alive=self.comes_back)

    def pause_node(self, index: int) -> list[int]:
        return [1]

    def resume_node(self, index: int) -> list[int]:
        return [1]


def context(gcs: FakeGcs, **cluster) -> FaultContext:
    c = FaultContext(FakeCluster(gcs, **cluster), Path("."), random.Random(0))
    c._reader = gcs  # the reader the nemesis opens before the trainer starts
    return c


def play(entries: list[dict], gcs: FakeGcs, ticks: list[list[dict]], **cluster):
    """Fire ``entries`` through the nemesis, one tick per list of trainer events; the recorded
    history, and the scenario to judge it with."""
    entries = [FaultEntry.model_validate(e) for e in entries]
    recorded = Outcome(scenario=None, run_dir=Path("."))
    n = nem.Nemesis(entries, context(gcs, **cluster), Recorder(recorded))
    for k, events in enumerate(ticks):
        n.tick([{"ts": time.time(), **e} for e in events], float(k))
    n.heal_all()
    sc = SimpleNamespace(name="s", faults=entries, checks=lambda: [])
    return Outcome(sc, Path("."), recorded.timeline), recorded.timeline


def injected(timeline: list[dict], index: int) -> dict:
    return next(e for e in timeline if e["type"] == "fault_injected" and e["index"] == index)


KILL_1 = {"at": {"step": 3}, "kill_node": {"node": 1}}
RESTART_1_ON_LOSS = {"at": {"event": "node_lost"}, "restart_node": {"node": 1}}


def trainer_on_1_and_2() -> FakeGcs:
    gcs = FakeGcs()
    gcs.actors = [gcs_actor(1, "RayTrainWorker"), gcs_actor(2, "RayTrainWorker")]
    return gcs


# ---- a remedy is judged by what it restored ------------------------------------------------------


def test_kill_then_reboot_when_the_run_notices_passes_and_the_reboot_is_a_remedy():
    """The story of the issue: kill node 1 at a step, restart it at the trainer's node_lost.
    The restart hit none of the trainer (its actor there died with the kill): today it failed
    as a miss, 'they were on the trainer had no Ray actor alive'."""
    o, timeline = play([KILL_1, RESTART_1_ON_LOSS], trainer_on_1_and_2(),
                       [[{"type": "step_end", "step": 3}], [{"type": "node_lost"}]])
    kill, restart = injected(timeline, 0), injected(timeline, 1)
    assert kill["disruptive"] and kill["touched_count"] == 1
    assert restart["remedy"] is True and restart["disruptive"] is False
    assert restart["was_down"] == [{"node": 1, "by": "kill_node (faults[0])"}]
    assert "touched" not in restart and "trainer_at" not in restart
    v = faults_landed(o, FaultsLanded())
    assert v.ok, v.message
    assert v.evidence[1] == ("restart_node (faults[1]) brought node 1 back (node 1 was down "
                             "from kill_node (faults[0])): alive in Ray's node table again")


def test_a_remedy_is_not_the_fault_detection_is_timed_from():
    """A node found dead in Ray's node table (no fault of the run killed it) is brought back
    first; the freeze after it is the disruptive fault the trainer must notice."""
    gcs = trainer_on_1_and_2()
    gcs.alive[ADDRESSES[3]] = False
    o, timeline = play([{"at": {"step": 1}, "restart_node": {"node": 3}},
                        {"at": {"step": 2}, "pause_node": {"node": 2}, "for_s": 60}], gcs,
                       [[{"type": "step_end", "step": 1}], [{"type": "step_end", "step": 2}]])
    restart, pause = injected(timeline, 0), injected(timeline, 1)
    assert restart["remedy"] and restart["was_down"] == [
        {"node": 3, "by": "not alive in Ray's node table"}]
    o.timeline.append({"ts": pause["ts"] + 1.5, "source": "trainer", "type": "node_lost"})
    v = detected_within_s(o, CHECKS["detected_within_s"].params(5))
    assert v.ok and v.message == "node_lost 1.50 s after pause_node (limit 5.0 s)", v.message


def test_a_remedy_whose_node_did_not_come_back_fails_saying_so():
    o, _ = play([KILL_1, RESTART_1_ON_LOSS], trainer_on_1_and_2(),
                [[{"type": "step_end", "step": 3}], [{"type": "node_lost"}]], comes_back=False)
    v = faults_landed(o, FaultsLanded())
    assert not v.ok and v.message == (
        "restart_node (faults[1]) was to bring back node 1 (node 1 was down from kill_node "
        "(faults[0])), but it is not alive in Ray's node table after the restart")


def test_a_restart_of_a_live_node_is_a_reboot_judged_by_its_reach():
    gcs = trainer_on_1_and_2()
    o, timeline = play([{"at": {"step": 3}, "restart_node": {"node": 2}},
                        {"at": {"step": 4}, "restart_node": {"node": 3}}], gcs,
                       [[{"type": "step_end", "step": 4}]])
    hit, missed = injected(timeline, 0), injected(timeline, 1)
    assert hit["disruptive"] and not hit.get("remedy") and hit["touched_count"] == 1
    assert missed["disruptive"] and missed["touched_count"] == 0
    v = faults_landed(o, FaultsLanded())
    assert not v.ok and v.message.startswith(
        "restart_node (faults[1]) hit node 3 and reached nothing of the trainer there")


def test_a_node_thawed_before_its_restart_is_live_again_so_the_restart_is_a_reboot():
    o, timeline = play([{"at": {"step": 1}, "pause_node": {"node": 2},
                         "heal_at": {"event": "resume"}},
                        {"at": {"step": 3}, "restart_node": {"node": 2}}], trainer_on_1_and_2(),
                       [[{"type": "step_end", "step": 1}], [{"type": "resume"}],
                        [{"type": "step_end", "step": 3}]])
    assert [e["type"] for e in timeline[:3]] == ["fault_injected", "fault_healed",
                                                 "fault_injected"]
    assert not injected(timeline, 1).get("remedy")


def test_a_restart_of_a_frozen_node_is_a_remedy():
    _, timeline = play([{"at": {"step": 1}, "pause_node": {"node": 2}},
                        {"at": {"step": 3}, "restart_node": {"node": 2}}], trainer_on_1_and_2(),
                       [[{"type": "step_end", "step": 3}]])
    assert injected(timeline, 1)["was_down"] == [{"node": 2, "by": "pause_node (faults[0])"}]


def test_a_kill_is_never_a_remedy_even_of_a_node_already_down():
    f = FAULTS["kill_node"]
    kill = f(f.Params.model_validate({"node": 1}), None)
    assert not kill.remedies({"node": 1}, {1: "kill_node (faults[0])"})
    r = FAULTS["restart_node"]
    restart = r(r.Params.model_validate({"node": 1}), None)
    assert restart.remedies({"node": 1}, {1: "x"}) and not restart.remedies({"node": 1}, {})


# ---- a disruptive fault reaches everything of the trainer's jobs ---------------------------------


def chaos_gcs() -> FakeGcs:
    """Ray's chaos test as the trainer: plain tasks with retries, no actor at all."""
    gcs = FakeGcs()
    gcs.tasks = [gcs_task(2, pid=501), gcs_task(2, pid=502), gcs_task(3, pid=503),
                 gcs_task(2, "dashboard_poll", pid=504, job=DASHBOARD_JOB)]
    return gcs


def test_a_restart_of_a_node_running_the_trainers_tasks_reaches_them():
    """Today: 'held none of the trainer's actors', the trainer's tasks did not count."""
    o, timeline = play([{"at": {"seconds": 0}, "restart_node": {"node": 2}}], chaos_gcs(), [[]])
    fired = injected(timeline, 0)
    assert fired["touched_count"] == 2 and fired["touched_kinds"] == {"task": 2}
    assert {(a["kind"], a["class"], a["pid"], a["node"]) for a in fired["touched"]} == {
        ("task", "chaos_task", 501, 2), ("task", "chaos_task", 502, 2)}
    v = faults_landed(o, FaultsLanded())
    assert v.ok and v.message == ("restart_node (faults[0]) reached 2 of the trainer's tasks "
                                  "(chaos_task) on node(s) [2]")


def test_the_footprint_counts_tasks_bundles_and_drivers_of_the_trainers_jobs_only():
    gcs = chaos_gcs()
    gcs.actors = [gcs_actor(0, "JobSupervisor", job=DASHBOARD_JOB),
                  gcs_actor(3, "HostAgent", job=RLSIM_JOB, module="rlsim.backends.substrate.hosts")]
    gcs.bundles = [{"group": "aa", "name": "", "bundle": 0, "node_id": node_id(1),
                    "job": TRAINER_JOB, "state": "CREATED"},
                   {"group": "bb", "name": "agents", "bundle": 0, "node_id": node_id(3),
                    "job": RLSIM_JOB, "state": "CREATED"}]
    gcs.jobs.append({"job": RLSIM_JOB, "pid": 4002, "ip": ADDRESSES[0], "namespace": "rlsim",
                     "entrypoint": ""})
    c = context(gcs)
    seen = c.look()
    # the Ray Jobs supervisor is an actor not rlsim's: counted, as it was; its job is Ray's own
    assert sorted((a["kind"], a["class"], a["node"]) for a in seen.footprint) == [
        ("actor", "JobSupervisor", 0), ("bundle", "placement group aa", 1), ("driver", "driver", 0),
        ("task", "chaos_task", 2), ("task", "chaos_task", 2), ("task", "chaos_task", 3)]
    assert seen.down == {} and seen.unread is None
    assert where_trainer_is(seen.footprint) == (
        "node 0 (JobSupervisor, driver); node 1 (bundle of placement group aa); "
        "node 2 (task chaos_task x2); node 3 (task chaos_task)")


def test_with_a_worker_table_only_the_ranked_actors_jobs_count():
    gcs = chaos_gcs()
    gcs.actors = [gcs_actor(1, "RayTrainWorker", pid=7, job="0a000000"),
                  gcs_actor(2, "Helper", pid=8)]
    gcs.jobs.append({"job": "0a000000", "pid": 4100, "ip": ADDRESSES[0], "namespace": "",
                     "entrypoint": ""})
    c = context(gcs)
    c.workers = [{"index": 0, "roles": ["actor"], "ip": ADDRESSES[1], "pid": 7}]
    assert sorted((a["kind"], a["class"], a.get("ranks")) for a in c.footprint()) == [
        ("actor", "RayTrainWorker", {"actor": 0}), ("driver", "driver", None)]


def test_a_node_holding_only_a_bundle_of_the_trainer_is_reached_by_a_kill_not_by_a_cut():
    bundle = {"kind": "bundle", "class": "train", "pid": None, "ip": ADDRESSES[1], "node": 1,
              "bundle": 0}
    kill = FAULTS["kill_node"](FAULTS["kill_node"].Params.model_validate({"node": 1}), None)
    assert kill.touched({"node": 1}, [bundle]) == [bundle]
    worker = {"kind": "actor", "class": "W", "pid": 3, "ip": ADDRESSES[2], "node": 2}
    assert cut_apart([[1]], [bundle, worker]) == []  # a reservation talks to nobody
    assert cut_apart([[2]], [bundle, worker]) == [worker]


def test_tasks_that_cannot_be_read_leave_the_rest_counted_and_say_so(monkeypatch):
    gcs = trainer_on_1_and_2()

    def refused():
        raise TimeoutError("Deadline Exceeded")

    gcs.held_tasks = refused
    seen = footprint.survey(gcs)
    assert seen.tasks is None and seen.unread == (
        "the trainer's tasks could not be read (TimeoutError: Deadline Exceeded)")
    assert len(footprint.trainer(seen, context(gcs).index_of)) == 3  # 2 actors and a driver
    gcs.held_tasks = lambda: None  # a Ray whose task events rlsim cannot read
    assert footprint.survey(gcs).unread.startswith(
        "tasks, bundles and drivers not counted: a fault's reach counts the trainer's actors "
        "only")


def test_an_actor_not_placed_yet_is_on_no_node():
    gcs = FakeGcs()
    gcs.actors = [gcs_actor(1, "Worker", state="PENDING_CREATION"),
                  gcs_actor(2, "Worker", state="RESTARTING")]
    gcs.jobs = []
    prints = context(gcs).footprint()
    assert [a["node"] for a in prints] == [None, None]
    assert where_trainer_is(prints) == "not placed yet, or on no node of the cluster (Worker x2)"
    kill = FAULTS["kill_node"](FAULTS["kill_node"].Params.model_validate({"node": 1}), None)
    assert kill.touched({"node": 1}, prints) == []


def test_the_gcs_reader_reads_held_tasks_from_the_gcss_task_events():
    """The GCS's reply, as Ray's protobufs: a running task and a leased one count, a task
    waiting for a node is listed on none; a finished one and an actor's method are not. The
    request asks the GCS for the tasks neither finished nor failed."""
    pytest.importorskip("ray")
    from ray.core.generated import common_pb2, gcs_pb2
    from ray.core.generated import gcs_service_pb2 as rpc

    from rlsim.ray_internals import gcs as gcs_module

    def task(name, kind, states, node=b"\x02" * 28, pid=9):
        return gcs_pb2.TaskEvents(
            task_id=name.encode(), job_id=b"\x01\x00\x00\x00", attempt_number=1,
            task_info=common_pb2.TaskInfoEntry(type=common_pb2.TaskType.Value(kind), name=name),
            state_updates=gcs_pb2.TaskStateUpdate(
                node_id=node, worker_pid=pid,
                state_ts_ns={common_pb2.TaskStatus.Value(s): t for t, s in enumerate(states, 1)}))

    reply = rpc.GetTaskEventsReply(events_by_task=[
        task("running", "NORMAL_TASK", ["PENDING_NODE_ASSIGNMENT", "RUNNING"]),
        task("leased", "NORMAL_TASK", ["PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER"]),
        task("done", "NORMAL_TASK", ["RUNNING", "FINISHED"]),
        task("method", "ACTOR_TASK", ["RUNNING"]),
        task("waiting", "NORMAL_TASK", ["PENDING_NODE_ASSIGNMENT"], node=b"")])
    asked = []
    reader = gcs_module.GcsReader(None)
    reader._call = lambda method, request, reply_type, timeout: asked.append(
        (method, request)) or reply
    got = reader.held_tasks()
    assert [(t["name"], t["state"], t["pid"], t["job"], t["node_id"]) for t in got] == [
        ("running", "RUNNING", 9, "01000000", "02" * 28),
        ("leased", "SUBMITTED_TO_WORKER", 9, "01000000", "02" * 28),
        ("waiting", "PENDING_NODE_ASSIGNMENT", 9, "01000000", "")]  # on no node: unplaced
    method, request = asked[0]
    assert method == gcs_module.TASK_EVENTS_METHOD and request.filters.exclude_driver
    assert sorted((f.state, f.predicate) for f in request.filters.state_filters) == [
        ("FAILED", rpc.FilterPredicate.Value("NOT_EQUAL")),
        ("FINISHED", rpc.FilterPredicate.Value("NOT_EQUAL"))]
    reply.status.code, reply.status.message = 5, "bad filter"  # refused: never read as none
    with pytest.raises(RuntimeError, match="the GCS refused GetTaskEvents: bad filter"):
        reader.held_tasks()


def test_the_gcs_reader_reads_placed_bundles_and_live_drivers():
    pytest.importorskip("ray")
    from ray.core.generated import common_pb2, gcs_pb2

    from rlsim.ray_internals import gcs as gcs_module

    state = gcs_pb2.PlacementGroupTableData.PlacementGroupState
    groups = [gcs_pb2.PlacementGroupTableData(
        placement_group_id=b"\xaa" * 18, name="train", creator_job_id=b"\x01\x00\x00\x00",
        state=state.Value("CREATED"),
        bundles=[common_pb2.Bundle(bundle_id=common_pb2.Bundle.BundleIdentifier(
            bundle_index=i), node_id=node) for i, node in enumerate([b"\x02" * 28, b""])]),
        gcs_pb2.PlacementGroupTableData(placement_group_id=b"\xbb" * 18,
                                        state=state.Value("REMOVED"))]
    jobs = [gcs_pb2.JobTableData(job_id=b"\x01\x00\x00\x00", driver_pid=42,
                                 driver_address=common_pb2.Address(ip_address="127.77.0.10"),
                                 config=common_pb2.JobConfig(ray_namespace="ns")),
            gcs_pb2.JobTableData(job_id=b"\x02\x00\x00\x00", is_dead=True)]
    accessor = SimpleNamespace(
        get_placement_group_table=lambda: [g.SerializeToString() for g in groups],
        get_job_table=lambda **_: [j.SerializeToString() for j in jobs])
    reader = gcs_module.GcsReader(SimpleNamespace(_connect_and_get_accessor=lambda: accessor))
    assert reader.placed_bundles() == [{"group": "aa" * 18, "name": "train", "bundle": 0,
                                        "node_id": "02" * 28, "job": "01000000",
                                        "state": "CREATED"}]
    assert reader.live_jobs() == [{"job": "01000000", "pid": 42, "ip": "127.77.0.10",
                                   "namespace": "ns", "entrypoint": ""}]


# ---- every verdict reads as a sentence in its odd cases ------------------------------------------


def judged(event: dict, entry: dict | None = None):
    entry = entry or {"at": {"step": 3}, "kill_node": {"node": 1}}
    sc = SimpleNamespace(name="s", faults=[FaultEntry.model_validate(entry)], checks=lambda: [])
    e = {"ts": 1.0, "source": "rlsim", "type": "fault_injected", "fault": "kill_node",
         "index": 0, "disruptive": True, "nodes": [1], **event}
    return faults_landed(Outcome(sc, Path("."), [e]), FaultsLanded())


@pytest.mark.parametrize(("event", "said"), [
    # nothing of the trainer alive (recorded today: trainer_at null)
    ({"touched_count": 0, "trainer_at": None},
     "kill_node (faults[0]) hit node 1 and reached nothing of the trainer there (no actor, task, "
     "placement-group bundle or driver of its jobs, or none it cut off); nothing of the trainer "
     "was alive in Ray then (no actor, task, bundle or driver of its jobs: it had not started "
     "yet, or had ended)"),
    # a record written before kinds were: the words it holds read as a sentence too
    ({"touched_count": 0, "trainer_at": "the trainer had no Ray actor alive"},
     "kill_node (faults[0]) hit node 1 and reached nothing of the trainer there (no actor, task, "
     "placement-group bundle or driver of its jobs, or none it cut off); the trainer had no Ray "
     "actor alive then"),
    # nothing placed yet
    ({"touched_count": 0, "trainer_at": "not placed yet, or on no node of the cluster (W x2)"},
     "kill_node (faults[0]) hit node 1 and reached nothing of the trainer there (no actor, task, "
     "placement-group bundle or driver of its jobs, or none it cut off); the trainer was not "
     "placed yet, or on no node of the cluster (W x2)"),
    # no node recorded, no place recorded
    ({"touched_count": 0, "nodes": []},
     "kill_node (faults[0]) hit its target and reached nothing of the trainer there (no actor, "
     "task, placement-group bundle or driver of its jobs, or none it cut off); where the trainer "
     "was is not recorded"),
    # tasks unread on this Ray: said beside the miss
    ({"touched_count": 0, "trainer_at": "node 0 (W)", "reach_partial": "tasks ... not counted"},
     "kill_node (faults[0]) hit node 1 and reached nothing of the trainer there (no actor, task, "
     "placement-group bundle or driver of its jobs, or none it cut off); the trainer was on node "
     "0 (W); tasks ... not counted"),
    ({"reach_unknown": "the GCS did not answer within 3 s"},
     "kill_node (faults[0]) fired; what it reached could not be read (the GCS did not answer "
     "within 3 s)"),
])
def test_a_miss_reads_as_a_sentence_in_each_odd_case(event, said):
    assert judged(event).message == said


def test_a_reach_of_several_kinds_is_said_by_kind():
    touched = [{"kind": "actor", "class": "W", "node": 2}, {"kind": "task", "class": "f",
                                                           "node": 2},
               {"kind": "driver", "class": "driver", "node": 2}]
    v = judged({"touched": touched, "touched_count": 14,
                "touched_kinds": {"actor": 1, "task": 12, "driver": 1}})
    assert v.ok and v.message == ("kill_node (faults[0]) reached the trainer's jobs on node(s) "
                                  "[2]: 1 actor (W), 12 tasks (f), 1 driver")
    v = judged({"touched": touched[2:], "touched_count": 1, "touched_kinds": {"driver": 1}})
    assert v.message == "kill_node (faults[0]) reached 1 of the trainer's drivers on node(s) [2]"


def test_a_count_with_nothing_listed_reads_as_actors_not_an_empty_list():
    v = judged({"touched": [], "touched_count": 2})  # a record made before kinds were
    assert v.ok and v.message == "kill_node (faults[0]) reached 2 of the trainer's actors", \
        v.message


def test_a_blocked_port_cuts_processes_not_reservations():
    bundle = {"kind": "bundle", "class": "train", "pid": None, "ip": ADDRESSES[1], "node": 1,
              "bundle": 0}
    worker = {"kind": "actor", "class": "W", "pid": 3, "ip": ADDRESSES[2], "node": 2}
    unplaced = {"kind": "actor", "class": "W", "pid": None, "ip": "", "node": None}
    Block = FAULTS["block_port"]
    block = Block(Block.Params.model_validate({"node": 0, "port": "gcs", "sources": [1]}),
                  SimpleNamespace(cluster=SimpleNamespace(spec=ClusterSpec(nodes=3))))
    gcs_cut = {"node": 0, "port": "gcs", "sources": [1]}
    assert block.touched(gcs_cut, [bundle, worker, unplaced]) == []  # node 1 holds a bundle only
    assert block.touched({**gcs_cut, "sources": [2]}, [bundle, worker]) == [worker]
    # another port: the blocked node's processes, when another of the trainer's ends is a source
    assert block.touched({"node": 1, "port": "object_manager", "sources": [2]},
                         [bundle, worker, unplaced]) == []


def test_the_reach_of_tasks_is_a_capability_probed_from_rays_files(tmp_path):
    """Where the installed Ray's protobufs lack what is read, the reach counts actors only, and
    the probe names the file and the message."""
    from rlsim import ray_internals as ri

    assert ri.probe("trainer_reach").available  # the installed Ray (2.48-2.60)
    st = ri.probe("trainer_reach", ri.RaySurface(tmp_path / "ray", "9.9.9"))
    assert not st.available and st.why == (
        "ray/core/generated/gcs_service_pb2.py has no message GetTaskEventsRequest")
    assert st.plain.startswith("a fault's reach counts the trainer's actors only")
