"""Faults by hand on a running cluster (``rlsim fault NAME ACTION``), as Pumba or Toxiproxy users
cut a container from the shell: the same :class:`~rlsim.faults.base.Fault` classes the scenarios'
nemesis fires (any fault marked ``by_hand``, its name with hyphens as the action), injected now
and kept in the cluster's fault ledger until healed.

The ledger is ``faults.json`` in the cluster's run directory (removed with the cluster), one entry
per fault in force: the fault and its validated parameters, the nodes it hit, what its undo needs
(``held``) and when it heals itself (``--for S``). Healing an entry rebuilds the fault from it and
calls its ``heal``; a fault with nothing to undo whose effect another ends (a kill) is healed by
injecting that one (``restored_by``: a restart). A fault with ``--for`` is healed by a helper
process started detached and labelled with the cluster's session, so ``rlsim down`` (which ends
every process of the session, and the chains, cgroups and run directory with them) also ends its
wait. ``heal`` undoes every entry, then whatever network rules and frozen nodes are left.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import typing
import uuid

from pydantic import ValidationError

from rlsim.backends import attach
from rlsim.faults import FAULTS
from rlsim.faults.base import Fault, FaultContext
from rlsim.fields import DAY, first_error
from rlsim.files import read_file
from rlsim.host import procs, state
from rlsim.host.home import locked, write_private
from rlsim.host.state import ClusterState

BY_HAND = {f.action(): f for f in FAULTS.values() if f.by_hand}
UNDO_VERBS = {f.undo_verb: f for f in BY_HAND.values() if f.undo_verb}
MAX_FOR_S = DAY  # --for: a day at most, as a scenario's fault


class FaultError(ValueError):
    """The action cannot be done as asked; the message names the argument and the fix."""


def actions() -> list[str]:
    """What ``rlsim fault`` takes: each fault offered by hand, the undo verbs, ``heal``."""
    return [*BY_HAND, *UNDO_VERBS, "heal"]


def ledger(st: ClusterState) -> list[dict]:
    """The faults in force; FaultError naming the file and the way out when it does not parse
    (``heal`` still works then: it undoes every rule and frozen node and starts it anew)."""
    path = st.root / "faults.json"
    if not path.exists():
        return []
    try:
        entries = json.loads(read_file(path))
        if not isinstance(entries, list) or not all(_entry_ok(e) for e in entries):
            raise ValueError("not a list of faults as rlsim fault writes them")
    except (ValueError, UnicodeDecodeError) as e:
        raise FaultError(f"{path}: the fault ledger does not parse ({e}); fix: `rlsim fault "
                         f"{st.spec.name} heal` undoes every rule and frozen node and starts "
                         "it anew") from None
    return entries


def _entry_ok(e) -> bool:
    """Whether ``e`` is a ledger entry as :func:`apply` writes it."""
    return (isinstance(e, dict) and isinstance(e.get("id"), str)
            and e.get("fault") in FAULTS and isinstance(e.get("params"), dict)
            and isinstance(e.get("nodes"), list) and all(type(n) is int for n in e["nodes"])
            and (e.get("held") is None or isinstance(e["held"], dict))
            and (e.get("until") is None or type(e["until"]) in (int, float)))


def _save(st: ClusterState, entries: list[dict]) -> None:
    st.root.mkdir(parents=True, exist_ok=True)
    write_private(st.root / "faults.json", json.dumps(entries, indent=1))


def apply(name: str, action: str, args: list[str], options: dict[str, str] | None = None,
          for_s: float | None = None) -> tuple[str, str]:
    """Do ``action`` on cluster ``name`` now, with its positional ``args`` and ``options`` (a
    parameter of the fault by name, hyphens or underscores); (what was done, how to undo it)."""
    st = state.load(name)
    if st is None:
        raise FaultError(f"no rlsim cluster named {name!r}; fix: name one from `rlsim status`")
    if action not in actions():
        raise FaultError(f"{action!r}: the actions are {', '.join(actions())}")
    fault_cls = BY_HAND.get(action)
    timed = [a for a, f in BY_HAND.items() if f.held_until_healed()]
    if for_s is not None and action not in timed:
        raise FaultError(f"--for heals {', '.join(timed)} on its own, not {action}; fix: drop "
                         "--for")
    if for_s is not None and not 0 < for_s <= MAX_FOR_S:  # inf, nan: never healed on its own
        raise FaultError(f"--for {for_s}: give seconds between 0.1 and {MAX_FOR_S:g} (a day)")
    if action != "heal" and state.is_abandoned(st, procs.sessions()):
        raise FaultError(f"cluster {name!r} is abandoned (its owner, pid {st.owner_pid}, is "
                         f"gone, so nobody will tear it down); fix: `rlsim down {name}` and "
                         "start anew")
    c = attach(st)
    try:
        in_force = ledger(st)
    except FaultError:
        if action != "heal":
            raise
        in_force = []  # a ledger that does not parse is no reason not to heal
    if action == "heal":
        if args or options:
            raise FaultError(f"heal takes no arguments: rlsim fault {name} heal")
        return _heal_everything(c, st, in_force), "-"
    if fault_cls is None:  # an undo verb: NODE
        return _undo_verb(c, st, action, args, options, in_force), "-"
    fault = fault_cls(_params(fault_cls, action, args, options, st), _context(c, st))
    _refuse_conflicts(fault, st, in_force)
    try:
        did = fault.inject()
    except (NotImplementedError, IndexError) as e:
        raise FaultError(str(e)) from None
    nodes = fault.nodes_hit(did)
    with locked():  # the ledger only: the fault itself was injected unlocked (restarts take s)
        entries = [e for e in ledger(st) if not (e["fault"] in fault.ends and e["nodes"] == nodes)]
        entry = None
        if fault.held is not None or fault.restored_by:  # in force until healed
            entry = {"id": uuid.uuid4().hex[:8], "action": action, "fault": fault.name,
                     "params": fault.params.model_dump(mode="json"), "nodes": nodes,
                     "held": fault.held, "since": time.time(),
                     "until": time.time() + for_s if for_s else None}
            entries.append(entry)
        _save(st, entries)
    undo = _undo_hint(st, fault, nodes) if entry else "-"
    if entry is not None and for_s:
        _heal_later(st, entry["id"], for_s)
        undo = f"heals itself in {for_s:g} s (or now: {undo})"
    return fault.said(did), undo


def _params(fault_cls: type[Fault], action: str, args: list[str], options: dict[str, str] | None,
            st: ClusterState):
    """The fault's validated parameters from the command line, checked against the cluster."""
    names = fault_cls.cli_args
    usage = f"rlsim fault {st.spec.name} {action} " + " ".join(n.upper() for n in names)
    if len(args) != len(names):
        raise FaultError(f"{action} takes {len(names)} argument(s): {usage}")
    fields = fault_cls.Params.model_fields
    raw: dict[str, typing.Any] = {}
    for key, text in [*zip(names, args, strict=True), *(options or {}).items()]:
        if key == "from" and "sources" not in fields:
            raise FaultError(f"--from names the sources of block-port, not {action}; fix: drop "
                             "--from")
        key = {"from": "sources"}.get(key, key.lstrip("-").replace("-", "_"))
        if key not in fields:
            known = ", ".join("--" + f.replace("_", "-") for f in fields if f not in names)
            raise FaultError(f"{action} has no option --{key.replace('_', '-')}; its options: "
                             f"{known or 'none'}")
        try:
            raw[key] = fault_cls.from_text(key, text)
        except ValueError as e:
            raise FaultError(f"{action} {key.upper()} {e}") from None
    try:
        params = fault_cls.Params.model_validate(raw)
    except ValidationError as e:
        raise FaultError(f"{action}: {first_error(e)}; {usage}") from None
    if problem := fault_cls.cluster_problem(params, st.spec):
        raise FaultError(f"{action} {' '.join(args)}: {problem[1]}")
    return params


def _context(c, st: ClusterState) -> FaultContext:
    return FaultContext(c, st.root, random.Random())


def _refuse_conflicts(fault: Fault, st: ClusterState, in_force: list[dict]) -> None:
    """A node already out of service is not taken down again; a fault that nothing could undo
    by hand (a kill of the head, which no restart brings back) is refused before it is done."""
    node = getattr(fault.params, "node", None)
    if fault.holds_node:
        holder = next((e for e in in_force if FAULTS[e["fault"]].holds_node
                       and e["nodes"] == [node]), None)
        if holder is not None:
            undo = _undo_hint(st, FAULTS[holder["fault"]], [node])
            raise FaultError(f"{fault.action()} {node}: node {node} is already down "
                             f"({holder['action']}); fix: `{undo}` first")
    if fault.restored_by:
        restorer = FAULTS[fault.restored_by]
        params = restorer.Params.model_validate({"node": node})
        if problem := restorer.cluster_problem(params, st.spec):
            raise FaultError(f"{fault.action()} {node}: {problem[1]}; an rlsim cluster started "
                             f"without it cannot bring its head back: `rlsim down "
                             f"{st.spec.name}` and start anew")


def _undo_hint(st: ClusterState, fault: type[Fault] | Fault, nodes: list[int]) -> str:
    """The command that undoes ``fault`` on ``nodes`` by hand."""
    verb = FAULTS[fault.restored_by].action() if fault.restored_by else fault.undo_verb
    if verb and len(nodes) == 1:
        return f"rlsim fault {st.spec.name} {verb} {nodes[0]}"
    return f"rlsim fault {st.spec.name} heal"


def _undo_verb(c, st: ClusterState, action: str, args: list[str], options, in_force) -> str:
    """``resume-node NODE``: heal the faults of that kind on the node (those in the ledger, and
    whatever of it is left with no entry)."""
    fault_cls = UNDO_VERBS[action]
    if len(args) != 1 or options:
        raise FaultError(f"{action} takes 1 argument: rlsim fault {st.spec.name} {action} NODE")
    params = _params(fault_cls, action, args, None, st)
    node = params.node
    mine = [e for e in in_force if e["fault"] == fault_cls.name and e["nodes"] == [node]]
    fault = fault_cls(params, _context(c, st))
    fault.held = mine[0]["held"] if mine else {"node": node}
    fault.heal()
    with locked():
        _save(st, [e for e in ledger(st) if e["id"] not in {m["id"] for m in mine}])
    return f"{fault_cls.undo_verb.replace('-node', 'd')} node {node}"


def _heal_everything(c, st: ClusterState, entries: list[dict]) -> str:
    healed = heal(c, st, entries)
    # a killed node is brought back by its entry; one whose entry is lost (a ledger that did not
    # parse) is named, with the command that brings it back
    down = [n.index for n in c.nodes() if n.index and not n.pids]
    restart = next(f for f in FAULTS.values() if f.ends).action()
    still = "".join(f"; node {i} is down: rlsim fault {st.spec.name} {restart} {i}"
                    for i in down)
    with locked():
        ids = {e["id"] for e in entries}
        _save(st, [e for e in _readable(st) if e["id"] not in ids])
    return f"healed {healed} fault(s) and every rule and frozen node left{still}"


def _readable(st: ClusterState) -> list[dict]:
    try:
        return ledger(st)
    except FaultError:
        return []


def heal(c, st: ClusterState, entries: list[dict]) -> int:
    """Undo ``entries`` (newest first), then every rule and frozen node left; how many. One undo
    that fails (a node that does not come back in time) does not stop the others; it is raised
    once all the rest is healed."""
    failed: list[str] = []
    for e in reversed(entries):
        try:
            _heal_entry(c, st, e)
        except Exception as err:  # noqa: BLE001 - heal the rest first, then say what failed
            failed.append(f"{e['action']} {e['nodes']}: {err}")
    c.heal_network()
    for i in range(st.spec.nodes):  # a node frozen some other way is thawed too
        c.resume_node(i)
    if failed:
        raise RuntimeError("healed everything else, but not: " + "; ".join(failed))
    return len(entries)


def _heal_entry(c, st: ClusterState, e: dict) -> None:
    """Undo one ledger entry with its own fault class (or, for a kill, the one that ends it)."""
    cls = FAULTS[e["fault"]]
    ctx = _context(c, st)
    if cls.restored_by:
        restorer = FAULTS[cls.restored_by]
        restorer(restorer.Params.model_validate({"node": e["nodes"][0]}), ctx).inject()
        return
    fault = cls(cls.Params.model_validate(e["params"]), ctx)
    fault.held = e["held"]
    fault.heal()


def heal_one(name: str, fault_id: str) -> bool:
    """Undo ledger entry ``fault_id`` of cluster ``name`` if it is still in force."""
    st = state.load(name)
    if st is None:
        return False
    mine = [e for e in ledger(st) if e["id"] == fault_id]
    if not mine:
        return False  # healed by hand meanwhile
    _heal_entry(attach(st), st, mine[0])
    with locked():
        _save(st, [e for e in ledger(st) if e["id"] != fault_id])
    return True


def _heal_later(st: ClusterState, fault_id: str, after_s: float) -> None:
    """A detached helper that heals ``fault_id`` after ``after_s``: labelled with the cluster's
    session, so stopping the cluster ends it too."""
    subprocess.Popen(
        [sys.executable, "-m", "rlsim.faults.ledger", st.spec.name, str(fault_id), str(after_s)],
        env={**os.environ, **procs.labels(st.session)}, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    name, fault_id, after_s = argv[0], argv[1], float(argv[2])
    time.sleep(after_s)
    heal_one(name, fault_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
