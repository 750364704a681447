"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

Whether every fault of the scenario fired and did what it is for, read from its own records
(``fault_injected``, ``fault_reached``, ``fault_healed``): what of the trainer a disruptive fault
reached, whether a remedy's node came back, whether a fault on files met the trainer's writes,
whether a gray fault changed anything.
"""

from __future__ import annotations

import json

from rlsim.checks.base import _true, check
from rlsim.fields import Strict
from rlsim.history import Outcome
from rlsim.result import Verdict


class FaultsLanded(Strict):
    pass


@check(FaultsLanded, _true)
def faults_landed(o: Outcome, p) -> Verdict:
    """Every fault of the scenario fired and did what it is for: reached the trainer, or (a
    remedy) brought back what it names. Every scenario with faults is
    judged by it (it need not be written): a fault whose injection failed fails it (unless an
    ``event`` check counts ``fault_error``: the refusal is the story), as does one that never
    fired although the run went on to its end; a disruptive one that reached nothing of the
    trainer's jobs (actors, tasks leased or running, placement-group bundles, drivers) nor cut
    any of it off (its ``fault_injected`` event: ``touched``, or where the trainer was,
    ``trainer_at``; a fault held until healed also by what the trainer started under it, its
    ``fault_reached`` event) unless its entry says ``may_miss: true``; a remedy (a restart of a
    node that was down: ``remedy``) whose node did not come back (``alive``); a
    storage fault while the trainer wrote nothing under its path (its heal: ``touched``); a gray
    fault whose measured effect was none (its heal: ``effect``)."""
    sc = o.scenario
    by = {kind: {e["index"]: e for e in o.rlsim(kind)} for kind in (
        "fault_injected", "fault_reached", "fault_error", "fault_healed", "fault_torn_down")}
    refusal_expected = any(name == "event" and params.type == "fault_error"
                           for name, params in sc.checks())
    story_ends = any(name in ("fails", "refused") for name, _ in sc.checks())
    bad, said = [], []
    for i, entry in enumerate(sc.faults):
        what = f"{entry.kind} (faults[{i}])"
        if i in by["fault_error"]:
            line = f"{what} could not be injected: {by['fault_error'][i]['message'][:300]}"
            (said if refusal_expected else bad).append(line)
        elif i not in by["fault_injected"]:
            line = f"{what} never fired: the run ended before it was due"
            (said if story_ends or o.refusal is not None else bad).append(line)
        else:
            ok, line = _landed(what, {**by["fault_injected"][i], **by["fault_reached"].get(i, {})},
                               by["fault_healed"].get(i) or by["fault_torn_down"].get(i))
            missed_on_purpose = not ok and entry.may_miss
            (said if ok or entry.may_miss else bad).append(
                line + ("; the scenario means it to miss (may_miss)" if missed_on_purpose
                        else ""))
    return Verdict("faults_landed", not bad, "; ".join(bad or said) or "no fault to judge",
                   len(bad), evidence=bad + said)


def _landed(what: str, e: dict, healed: dict | None) -> tuple[bool, str]:
    """Whether one injected fault did what it is for, and what that was, in words: a remedy
    (``remedy``: a restart of a node that was down) brought back what it names; a disruptive
    fault reached something of the trainer; a fault on files met its writes; a gray fault
    changed something."""
    effect = (healed or {}).get("effect")
    if effect is not None and not effect.get("changed"):
        return False, (f"{what} was in force but changed nothing of the trainer: "
                       f"{json.dumps({k: v for k, v in effect.items() if k != 'changed'})}")
    if e.get("remedy"):
        return _restored(what, e)
    if e.get("reach_unknown"):
        return True, f"{what} fired; what it reached could not be read ({e['reach_unknown']})"
    if e.get("disruptive", True):
        return _reached(what, e)
    touched = (healed or {}).get("touched")
    if touched is None:  # a file fault with nothing to measure: what it did is its record
        path = e.get("path") or "the trainer's files"
        return True, f"{what} changed {path}"
    if not touched.get("files") and not touched.get("dirs"):
        return False, (f"{what} was in force while the trainer wrote nothing under "
                       f"{touched.get('path')}: it met nothing of the trainer")
    return True, (f"{what} met the trainer's writes: {touched.get('files', 0)} file(s), "
                  f"{touched.get('bytes', 0)} bytes under {touched.get('path')}")


def _restored(what: str, e: dict) -> tuple[bool, str]:
    """A remedy judged by what it restored (its record's ``alive``: Ray's node table after it),
    never by what of the trainer it hit."""
    nodes = _nodes_said(e.get("nodes"))
    was = "; ".join(f"node {d.get('node')} was down from {d.get('by')}"
                    for d in e.get("was_down") or [] if isinstance(d, dict))
    was = f" ({was})" if was else ""
    if e.get("alive") is False:
        return False, (f"{what} was to bring back {nodes}{was}, but it is not alive in Ray's "
                       "node table after the restart")
    if e.get("alive") is None:
        return True, f"{what} fired at {nodes}{was}; it records nothing of whether it is back"
    return True, f"{what} brought {nodes} back{was}: alive in Ray's node table again"


# what a disruptive fault can reach of the trainer, as said (a record made before kinds were
# recorded lists actors only)
REACH_NOUNS = {"actor": "actors", "task": "tasks", "bundle": "placement-group bundles",
               "driver": "drivers"}
NO_TRAINER_ACTOR = "the trainer had no Ray actor alive"  # trainer_at in records before kinds


def _reached(what: str, e: dict) -> tuple[bool, str]:
    """A disruptive fault judged by what of the trainer's jobs it reached (``touched``)."""
    partial = f"; {e['reach_partial']}" if e.get("reach_partial") else ""
    if not e.get("touched_count"):
        hit = _nodes_said(e.get("nodes"))
        return False, (f"{what} hit {hit} and reached nothing of the trainer there (no actor, "
                       "task, placement-group bundle or driver of its jobs, or none it cut "
                       f"off); {_trainer_was(e)}{partial}")
    touched = [a for a in e.get("touched") or [] if isinstance(a, dict)]
    kinds = e.get("touched_kinds") or {}
    if not isinstance(kinds, dict) or not kinds:
        kinds = {}
        for a in touched:
            kinds[a.get("kind") or "actor"] = kinds.get(a.get("kind") or "actor", 0) + 1
    if not kinds:  # a count with nothing listed: a record made before kinds, of actors
        kinds = {"actor": e["touched_count"]}
    nodes = sorted({a.get("node") for a in touched} - {None}, key=str)
    where = f" on node(s) {nodes}" if nodes else ""
    named = {k: ", ".join(sorted({str(a.get("class")) for a in touched
                                  if (a.get("kind") or "actor") == k})) for k in kinds}
    if len(kinds) == 1:
        kind = next(iter(kinds))
        names = f" ({named[kind]})" if named[kind] and kind != "driver" else ""
        return True, (f"{what} reached {e['touched_count']} of the trainer's "
                      f"{REACH_NOUNS.get(kind, kind + 's')}{names}{where}{partial}")
    parts = ", ".join(f"{n} {REACH_NOUNS.get(k, k + 's') if n > 1 else k}"
                      + (f" ({named[k]})" if named[k] and k != "driver" else "")
                      for k, n in kinds.items())
    return True, f"{what} reached the trainer's jobs{where}: {parts}{partial}"


def _nodes_said(nodes) -> str:
    """``node 1``, ``nodes [1, 2]``, or ``its target`` where the record names none."""
    if not isinstance(nodes, list) or not nodes:
        return "its target"
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {nodes}"


def _trainer_was(e: dict) -> str:
    """Where the trainer was when a fault reached none of it, as the end of a sentence."""
    if "trainer_at" not in e:
        return "where the trainer was is not recorded"
    at = e["trainer_at"]
    if at == NO_TRAINER_ACTOR:
        return "the trainer had no Ray actor alive then"
    if not at:
        return ("nothing of the trainer was alive in Ray then (no actor, task, bundle or driver "
                "of its jobs: it had not started yet, or had ended)")
    return f"the trainer was {'' if str(at).startswith('not placed') else 'on '}{at}"
