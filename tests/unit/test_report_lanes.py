"""The report's lanes as data: what a timeline says happened to each node and each fault."""

from __future__ import annotations

import json

import pytest

from rlsim.faults import FAULTS
from rlsim.report import render
from rlsim.report.lanes import node_lane, story
from rlsim.result import ResultInputError

NODES = ["127.77.0.10", "127.77.0.11", "127.77.0.12"]


def timeline(*events: dict) -> list[dict]:
    """A scenario's timeline: cluster ready at 90, the trainer started at 100, then ``events``
    (``ts`` in seconds after the trainer started), the scenario ending at 140."""
    base = [{"ts": 80.0, "source": "rlsim", "type": "scenario_start"},
            {"ts": 90.0, "source": "rlsim", "type": "cluster_ready", "nodes": NODES},
            {"ts": 100.0, "source": "rlsim", "type": "trainer_started", "attempt": 0}]
    return base + [{**e, "ts": 100.0 + e["ts"]} for e in events] + [
        {"ts": 140.0, "source": "rlsim", "type": "scenario_end"}]


def injected(t: float, i: int, fault: str, **did) -> dict:
    """A fault's event as the nemesis writes it: what it did, and what that means (the fault's
    own words, :meth:`Fault.meaning`)."""
    meaning = FAULTS[fault](None, None).meaning(did)
    return {"ts": t, "source": "rlsim", "type": "fault_injected", **did, **meaning,
            "fault": fault, "index": i}


def healed(t: float, i: int | None, fault: str) -> dict:
    e = {"ts": t, "source": "rlsim", "type": "fault_healed", "fault": fault}
    return e if i is None else {**e, "index": i}


def lane(st, index: int) -> list[tuple[str, float, float]]:
    name = node_lane(index, NODES[index])
    return [(s.state, round(s.start, 2), round(s.end, 2)) for s in st.spans if s.lane == name]


def test_a_killed_node_is_dead_until_restarted_and_the_clock_starts_with_the_trainer():
    st = story(timeline(injected(5.0, 0, "kill_node", node=1, took_s=0.04),
                        injected(20.0, 1, "restart_node", node=1, took_s=3.0)))
    assert st.end == 40.0 and st.setup == {"cluster start": 10.0}
    assert lane(st, 0) == [("alive", 0.0, 40.0)]
    assert lane(st, 1) == [("alive", 0.0, 5.0), ("dead", 5.0, 20.0), ("restarting", 20.0, 23.0),
                           ("alive", 23.0, 40.0)]
    faults = [(s.lane, s.start, s.end) for s in st.spans if s.state == "fault"]
    assert faults == [("fault 0: kill_node", 5.0, 5.04), ("fault 1: restart_node", 20.0, 23.0)]


def test_a_partition_cuts_off_every_node_of_its_groups_until_healed():
    st = story(timeline(injected(6.0, 0, "partition", groups=[[1], [2]]),
                        healed(14.0, 0, "partition")))
    assert lane(st, 0) == [("alive", 0.0, 40.0)]
    for n in (1, 2):
        assert lane(st, n) == [("alive", 0.0, 40.0), ("cut off", 6.0, 14.0)]


def test_a_fault_never_healed_is_in_force_to_the_end_and_heals_pair_by_index():
    st = story(timeline(injected(3.0, 0, "pause_node", node=2),
                        injected(4.0, 1, "pause_node", node=1),
                        healed(9.0, 1, "pause_node"),
                        injected(10.0, 2, "block_port", node=0, ports=[6379, 6379])))
    assert lane(st, 1)[1:] == [("paused", 4.0, 9.0)]
    assert lane(st, 2)[1:] == [("paused", 3.0, 40.0)]   # index 1's heal is not index 0's
    assert lane(st, 0)[1:] == [("port blocked", 10.0, 40.0)]


def test_heals_without_an_index_pair_with_the_first_open_fault_of_their_name():
    st = story(timeline(injected(3.0, 0, "pause_node", node=1),
                        injected(4.0, 1, "pause_node", node=2),
                        healed(6.0, None, "pause_node"), healed(8.0, None, "pause_node")))
    assert lane(st, 1)[1:] == [("paused", 3.0, 6.0)]
    assert lane(st, 2)[1:] == [("paused", 4.0, 8.0)]


def test_node_events_are_marked_on_their_node_and_the_set_up_is_not_drawn():
    st = story(timeline(
        {"ts": 5.5, "source": "trainer", "type": "node_lost", "ip": NODES[2]},
        {"ts": 5.6, "source": "rlsim", "type": "ray_node_dead", "node": 1, "address": NODES[1]},
        injected(7.0, 0, "kill_role", role="rollout", rank=0, ip=NODES[1])))
    on = {(m.lane, m.label) for m in st.marks}
    assert (node_lane(2, NODES[2]), "node_lost") in on
    assert (node_lane(1, NODES[1]), "ray_node_dead") in on
    assert (node_lane(1, NODES[1]), "kill_role") in on
    assert ("Ray (watched)", "ray_node_dead") in on and ("trainer", "node_lost") in on
    assert not {m.label for m in st.marks} & {"scenario_start", "cluster_ready"}


def test_a_refused_cluster_has_no_lanes_and_says_why():
    st = story([{"ts": 1.0, "source": "rlsim", "type": "scenario_start"},
                {"ts": 3.0, "source": "rlsim", "type": "cluster_refused",
                 "message": "node 1 exited during start-up"}])
    assert st.nodes == [] and st.refusal == "node 1 exited during start-up"
    assert [m.label for m in st.marks] == ["scenario_start", "cluster_refused"]


def test_the_page_holds_every_scenario_its_plot_checks_and_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "timeline.jsonl").write_text("".join(
        json.dumps(e) + "\n" for e in timeline(injected(5.0, 0, "kill_node", node=1))))
    (tmp_path / "a" / "trainer-0.log").write_text("hi\n")
    (tmp_path / "a" / "nodes").mkdir()
    (tmp_path / "a" / "nodes" / "node-1.log").write_text("raylet\n")
    (tmp_path / "summary.json").write_text(json.dumps([
        {"scenario": "a", "ok": True, "seconds": 40.0, "checks": [
            {"check": "detected_within_s", "ok": True, "message": "0.7 s", "value": 0.7}]},
        {"scenario": "b <x>", "ok": False, "seconds": 2.0, "checks": [
            {"check": "completes", "ok": False, "message": "it did <not>", "value": None}]}]))
    page = render(tmp_path).read_text()
    assert "<title>rlsim report: 1/2 passed</title>" in page
    assert "id='plot-sc-a'" in page.replace('"', "'") and "(no timeline recorded)" in page
    assert "href='a/trainer-0.log'" in page and "href='a/nodes/node-1.log'" in page
    assert "<td>0.7</td>" in page and "it did &lt;not&gt;" in page and "b &lt;x&gt;" in page


def test_a_heal_that_failed_leaves_the_fault_in_force_and_says_why():
    st = story(timeline(injected(5.0, 0, "pause_node", node=1),
                        {"ts": 7.0, "source": "rlsim", "type": "fault_heal_error",
                         "fault": "pause_node", "index": 0, "message": "cgroup gone"}))
    assert lane(st, 1)[1:] == [("paused", 5.0, 40.0)]
    fault = next(s for s in st.spans if s.state == "fault")
    assert (fault.end, "heal_error: cgroup gone" in fault.detail) == (40.0, True)


def test_lines_a_report_cannot_place_are_skipped_not_fatal(tmp_path):
    path = tmp_path / "timeline.jsonl"
    good = timeline(injected(5.0, 0, "kill_node", node=1, took_s="soon"),
                    {"ts": 6.0, "type": "step_end", "step": 1, "metrics": ["not", "a", "dict"]},
                    {"ts": 7.0, "type": "step_end", "step": "two"})
    path.write_text("".join(json.dumps(e) + "\n" for e in good) + "\n".join([
        '{"ts": null, "type": "x"}', '{"ts": "1", "type": "x"}', '{"ts": 1, "type": ["x"]}',
        '{"ts": true, "type": "x"}', '[1, 2]', '{"ts": 150.0, "type": "cut sh']) + "\n")
    from rlsim.history import read_events
    from rlsim.report.figure import figure

    events = read_events(path)
    assert len(events) == len(good)
    st = story(events)
    assert [e["step"] for e in st.steps] == [1]
    assert lane(st, 1) == [("alive", 0.0, 5.0), ("dead", 5.0, 40.0)]
    figure(st)  # draws


def test_names_and_messages_reach_the_page_escaped_and_numbers_must_be_numbers(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps([
        {"scenario": "<img src=x onerror=alert(1)>", "ok": True, "seconds": 1.5, "checks": [
            {"check": "restarts", "ok": False, "message": "<b>1</b>", "value": 1}]}]))
    page = render(tmp_path).read_text()
    assert "<img src=x" not in page and "<b>1</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;1&lt;/b&gt;" in page
    (tmp_path / "summary.json").write_text(json.dumps([
        {"scenario": "a", "ok": True, "seconds": "<img src=x onerror=alert(1)>", "checks": []}]))
    with pytest.raises(ResultInputError, match=r"summary.json: 0.seconds: Input should be a "
                                               "valid number"):
        render(tmp_path)


def test_a_fault_that_reached_nothing_of_the_trainer_is_marked_in_its_lane():
    st = story(timeline(injected(5.0, 0, "kill_node", node=1, touched_count=0),
                        injected(9.0, 1, "pause_node", node=2, touched_count=0, may_miss=True),
                        injected(20.0, 2, "kill_node", node=2, touched_count=3)))
    lanes = sorted({s.lane for s in st.spans if s.state == "fault"})
    assert lanes == ["fault 0: kill_node (reached nothing of the trainer)",
                     "fault 1: pause_node (meant to miss)", "fault 2: kill_node"]


def test_a_remedy_is_marked_in_its_lane_and_brings_its_node_back():
    """A restart of a node a kill took down is a remedy: its lane says so, never 'reached
    nothing of the trainer' (it is not disruptive), and the node's lane is alive again."""
    st = story(timeline(injected(5.0, 0, "kill_node", node=1, touched_count=2),
                        {**injected(9.0, 1, "restart_node", node=1, alive=True, took_s=2.0),
                         "disruptive": False, "remedy": True},
                        {**injected(20.0, 2, "restart_node", node=2, alive=False, took_s=2.0),
                         "disruptive": False, "remedy": True}))
    lanes = sorted({s.lane for s in st.spans if s.state == "fault"})
    assert lanes == ["fault 0: kill_node", "fault 1: restart_node (remedy)",
                     "fault 2: restart_node (remedy: the node did not come back)"]
    assert lane(st, 1)[-1][0] == "alive"


def test_a_cluster_spread_over_machines_names_each_nodes_machine_in_its_lane():
    spread = ["10.0.0.1", "10.0.1.1", "198.18.0.12"]
    events = timeline(injected(5.0, 0, "kill_node", node=2, took_s=0.04),
                      {"ts": 6.0, "source": "rlsim", "type": "ray_node_dead", "node": 2})
    for e in events:
        if e["type"] == "cluster_ready":
            e.update(nodes=spread, on="10.0.0.1:6390",
                     machines=["10.0.0.1", "10.0.1.1", "10.0.0.1"])
    st = story(events)
    assert st.nodes == ["node 0 (head) 10.0.0.1", "node 1 10.0.1.1",
                        "node 2 198.18.0.12 on 10.0.0.1"]
    assert ("node 2 198.18.0.12 on 10.0.0.1", "ray_node_dead") in {(m.lane, m.label)
                                                                   for m in st.marks}
    assert ("dead", 5.0) in {(s.state, round(s.start, 2)) for s in st.spans
                             if s.lane == st.nodes[2]}
