"""What a scenario's timeline says happened to each node and each fault, as spans of time: pure
functions of the recorded events (``timeline.jsonl``), drawn by :mod:`rlsim.report.figure`.

Times are seconds since the trainer's first launch (or, where it never started, since the cluster
was ready): the cluster's start-up and the fault-free baseline run come before it and are
reported as figures, not drawn as an empty band.

A node's lane is ``alive`` until a fault whose event says ``node_state: dead`` (a kill) hits it;
``node_state: restarting`` is drawn for as long as the restart took, then ``alive`` (or ``dead``
when the node did not come back). A fault whose event says ``impairs`` draws that state over the
lanes of the nodes it hit (``nodes``) until it is healed: what each fault means is written into
its event by the fault itself (:meth:`rlsim.faults.base.Fault.meaning`), never read from its name.
Each fault also has its own lane, from injection to heal; a fault with nothing to undo (a kill) is
as long as it took to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rlsim.history import is_number


@dataclass(frozen=True)
class Span:
    """``lane`` was ``state`` from ``start`` to ``end`` (seconds on the report's clock)."""

    lane: str
    state: str
    start: float
    end: float
    detail: str = ""


@dataclass(frozen=True)
class Mark:
    """One event at ``t`` in ``lane``: ``label`` is its type, ``detail`` its other fields."""

    lane: str
    label: str
    t: float
    detail: str
    kind: str = "event"  # "fault": a fault's mark on the node it hit


@dataclass
class Story:
    """A scenario's timeline as lanes: node states, fault spans, event marks, steps."""

    t0: float
    end: float
    nodes: list[str]                # lane names, node 0 first
    spans: list[Span]               # base node states, then impairments, then faults
    marks: list[Mark]               # events by source lane, and Ray's and the trainer's node events
    steps: list[dict]               # the trainer's step_end events, ts made relative
    setup: dict[str, float]         # seconds before t0: cluster start, doctor, baseline
    reused: bool = False            # the cluster was kept clean from an earlier scenario
    refusal: str | None = None      # the cluster refused to start: the message
    teardown: float | None = None   # seconds from the last step to the trainer's exit


def node_lane(index: int, address: str, machine: str | None = None) -> str:
    """A node's lane; ``machine``: the substrate machine it ran on, where not its address."""
    on = f" on {machine}" if machine and machine != address else ""
    return f"node {index}{' (head)' if index == 0 else ''} {address}{on}"


def fault_lane(index: int, fault: str) -> str:
    return f"fault {index}: {fault}"


def story(events: list[dict]) -> Story:
    """The lanes of one scenario's timeline (its events in time order)."""
    events = sorted(events, key=lambda e: e["ts"])
    first = {e["type"]: e for e in reversed(events)}
    t0 = (first.get("trainer_started") or first.get("cluster_ready")
          or first.get("scenario_start") or {"ts": events[0]["ts"] if events else 0.0})["ts"]
    end = max([e["ts"] for e in events] + [t0]) - t0
    ready = first.get("cluster_ready")
    addresses = [str(a) for a in ready.get("nodes") or []] if ready else []
    machines = [str(m) for m in ready.get("machines") or []] if ready else []
    nodes = [node_lane(i, a, machines[i] if i < len(machines) else None)
             for i, a in enumerate(addresses)]
    rel = [{**e, "ts": e["ts"] - t0} for e in events]
    faults = _faults(rel, end)
    spans = _node_states(nodes, faults, max(0.0, (ready["ts"] - t0) if ready else 0.0), end)
    spans += _impairments(nodes, addresses, faults)
    spans += [Span(fault_lane(i, f["fault"]), "fault", f["ts"], f["until"], _detail(f))
              for i, f in faults.items()]
    refused = first.get("cluster_refused")
    reused = bool(ready and ready.get("reused"))
    return Story(t0=t0, end=end, nodes=nodes, spans=spans, marks=_marks(rel, addresses, nodes),
                 steps=[e for e in rel if e["type"] == "step_end" and is_number(e.get("step"))],
                 setup=_setup(events, t0, reused), reused=reused,
                 refusal=refused and refused.get("message"), teardown=teardown_s(events))


def _faults(rel: list[dict], end: float) -> dict[int, dict]:
    """Each injected fault by its index, with ``until``: when it was healed; for a fault with
    nothing to undo, when it was done (``took_s`` after it fired)."""
    faults: dict[int, dict] = {}
    for e in rel:
        if e["type"] == "fault_injected":
            i = e.get("index", len(faults))
            took = e.get("took_s") if is_number(e.get("took_s")) else 0.0
            faults[i] = {**e, "fault": str(e.get("fault", "fault")), "until": e["ts"] + took,
                         "healed": None}
        elif e["type"] == "fault_reached" and e.get("index") in faults:
            faults[e["index"]]["touched_count"] = e.get("touched_count")
        elif e["type"] in ("fault_healed", "fault_heal_error"):
            i = e.get("index")
            if i is None:  # a timeline written before heals carried the index: pair by name
                i = next((k for k, f in faults.items()
                          if f["fault"] == e.get("fault") and f["healed"] is None), None)
            if i not in faults or faults[i]["healed"] is not None:
                continue
            if e["type"] == "fault_healed":
                faults[i].update(until=e["ts"], healed=True)
            else:  # an undo that failed is not tried again: the fault stays in force
                faults[i].update(healed=False, heal_error=e.get("message", ""))
    for f in faults.values():  # in force until the end when its heal was never logged
        if f.get("impairs") and not f["healed"]:
            f["until"] = end
        if f.get("disruptive") and f.get("touched_count") == 0:  # faults_landed's miss
            f["fault"] += " (meant to miss)" if f.get("may_miss") else \
                " (reached nothing of the trainer)"
        if f.get("remedy") is True:  # a restart of a node that was down: an end, not an attack
            f["fault"] += " (remedy)" if f.get("alive") is not False else \
                " (remedy: the node did not come back)"
    return faults


def _node_states(nodes: list[str], faults: dict[int, dict], start: float,
                 end: float) -> list[Span]:
    """Each node's base lane: alive, dead from a kill, restarting while a restart takes."""
    changes: dict[int, list[tuple[float, str, str]]] = {i: [] for i in range(len(nodes))}
    for i, f in sorted(faults.items(), key=lambda kv: kv[1]["ts"]):
        for node in _hit(f, len(nodes)):
            if f.get("node_state") == "dead":
                changes[node].append((f["ts"], "dead", fault_lane(i, f["fault"])))
            elif f.get("node_state") == "restarting":
                changes[node].append((f["ts"], "restarting", fault_lane(i, f["fault"])))
                back = "alive" if f.get("alive", True) else "dead"  # it did not come up
                changes[node].append((f["until"], back,
                                      f"restarted ({fault_lane(i, f['fault'])})"))
    spans = []
    for i, lane in enumerate(nodes):
        state, since, why = "alive", start, "up since the cluster was ready"
        for t, new, because in changes[i]:
            if t > since:
                spans.append(Span(lane, state, since, t, why))
            state, since, why = new, max(t, since), because
        spans.append(Span(lane, state, since, max(end, since), why))
    return spans


def _impairments(nodes: list[str], addresses: list[str], faults: dict[int, dict]) -> list[Span]:
    spans = []
    for i, f in faults.items():
        if not isinstance(state := f.get("impairs"), str):
            continue
        for n in _hit(f, len(nodes)):
            spans.append(Span(nodes[n], state, f["ts"], f["until"],
                              f"{fault_lane(i, f['fault'])}: {_detail(f)}"))
    return spans


def _hit(fault: dict, count: int) -> list[int]:
    """The node indices a fault's event says it hit, those of the cluster drawn."""
    nodes = fault.get("nodes")
    return [n for n in nodes if type(n) is int and 0 <= n < count] \
        if isinstance(nodes, list) else []


# events drawn in a node's lane: which field names the node (an index or an address)
ON_NODE = {"node_lost": "ip", "ray_node_dead": "node", "ray_actor_died": "node"}
NOT_MARKED = frozenset({"step_end", "fault_injected", "fault_healed"})  # drawn as lines and spans


def _marks(rel: list[dict], addresses: list[str], lanes: list[str]) -> list[Mark]:
    """The events drawn as marks; ``lanes``: each node's lane (as ``addresses``)."""
    marks = []
    for e in (e for e in rel if e["ts"] >= 0):  # the set-up before is a line of figures
        if e["type"] == "fault_injected" and e.get("ip") in addresses:  # kill_role: its node
            j = addresses.index(e["ip"])
            marks.append(Mark(lanes[j], e["fault"], e["ts"], _detail(e), "fault"))
        if e["type"] in NOT_MARKED:
            continue
        source = e.get("source", "trainer")
        lane = "Ray (watched)" if e["type"].startswith("ray_") else source
        marks.append(Mark(lane, e["type"], e["ts"], _detail(e)))
        where = e.get(ON_NODE.get(e["type"], ""))
        index = addresses.index(where) if where in addresses else where
        if isinstance(index, int) and 0 <= index < len(addresses):
            marks.append(Mark(lanes[index], e["type"], e["ts"], _detail(e)))
    return marks


def teardown_s(events: list[dict]) -> float | None:
    """The trainer's teardown: from its last step to its last exit, where the run completed
    (what ``progress_within_s`` leaves out); None otherwise."""
    steps = [e["ts"] for e in events if e["type"] == "step_end" and e.get("source") != "rlsim"]
    exits = [e["ts"] for e in events if e["type"] == "trainer_exited"]
    done = any(e["type"] == "run_end" and e.get("status") == "completed" for e in events)
    if not (steps and exits and done) or exits[-1] < steps[-1]:
        return None
    return round(exits[-1] - steps[-1], 2)


def _setup(events: list[dict], t0: float, reused: bool) -> dict[str, float]:
    """Seconds spent before the report's clock starts: cluster start (none when reused),
    doctor, baseline."""
    at = {e["type"]: e["ts"] for e in reversed(events)}
    out = {}
    if "scenario_start" in at and "cluster_ready" in at and not reused:
        out["cluster start"] = at["cluster_ready"] - at["scenario_start"]
    if "doctor" in at:
        out["doctor"] = next(e.get("seconds", 0.0) for e in events if e["type"] == "doctor")
    if "baseline_done" in at and "cluster_ready" in at and at["baseline_done"] <= t0:
        out["baseline run"] = at["baseline_done"] - at.get("doctor", at["cluster_ready"])
    return {k: round(v, 2) for k, v in out.items()}


SKIP = frozenset({"ts", "type", "source", "until", "healed"})


def _detail(e: dict, width: int = 160) -> str:
    """An event's other fields, one per line, each cut to ``width`` characters."""
    lines = []
    for k, v in e.items():
        if k in SKIP:
            continue
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        lines.append(f"{k}: {text if len(text) <= width else text[:width] + '...'}")
    return "\n".join(lines)
