"""Faults by hand on a running cluster (``rlsim fault NAME ACTION``), as Pumba or Toxiproxy users
cut a container from the shell: the same backend verbs the scenarios' faults use, applied now,
each recorded in the cluster's fault ledger until it is undone.

The ledger is ``faults.json`` in the cluster's run directory (removed with the cluster), one
entry per fault in force: what was done, to which nodes, the iptables rules it added, and when
it heals itself (``--for S``). A fault with ``--for`` is healed by a helper process started
detached and labelled with the cluster's session, so ``rlsim down`` (which ends every process of
the session, and the chains, cgroups and run directory with them) also ends its wait.
``heal`` undoes every entry, then whatever network rules and frozen nodes are left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import asdict

from rlsim.backends import attach
from rlsim.host import procs, state
from rlsim.host.home import locked, write_private
from rlsim.host.iptables import Drop
from rlsim.host.state import ClusterState

ACTIONS = ("kill-node", "restart-node", "pause-node", "resume-node", "partition", "block-port",
           "heal")
TIMED = ("pause-node", "partition", "block-port")  # the ones --for heals on its own
UNDO = {"kill-node": "restart-node", "pause-node": "resume-node"}  # what brings a node back


class FaultError(ValueError):
    """The action cannot be done as asked; the message names the argument and the fix."""


MAX_FOR_S = 86400.0  # --for: a day at most, as a scenario's fault


def ledger(st: ClusterState) -> list[dict]:
    """The faults in force; FaultError naming the file and the way out when it does not parse
    (``heal`` still works then: it undoes every rule and frozen node and starts it anew)."""
    path = st.root / "faults.json"
    if not path.exists():
        return []
    try:
        entries = json.loads(path.read_text())
        if not isinstance(entries, list) or not all(_entry_ok(e) for e in entries):
            raise ValueError("not a list of faults as rlsim fault writes them")
    except (ValueError, UnicodeDecodeError) as e:
        raise FaultError(f"{path}: the fault ledger does not parse ({e}); fix: `rlsim fault "
                         f"{st.spec.name} heal` undoes every rule and frozen node and starts "
                         "it anew") from None
    return entries


def _entry_ok(e) -> bool:
    """Whether ``e`` is a ledger entry as :func:`apply` writes it."""
    return (isinstance(e, dict) and isinstance(e.get("id"), str) and e.get("action") in ACTIONS
            and isinstance(e.get("nodes"), list) and len(e["nodes"]) > 0
            and all(type(n) is int for n in e["nodes"])
            and (e.get("until") is None or type(e["until"]) in (int, float))
            and isinstance(e.get("rules", []), list))


def _save(st: ClusterState, entries: list[dict]) -> None:
    st.root.mkdir(parents=True, exist_ok=True)
    write_private(st.root / "faults.json", json.dumps(entries, indent=1))


def _nodes(text: str, st: ClusterState, what: str) -> list[int]:
    try:
        nodes = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise FaultError(f"{what} {text!r}: give node indices, e.g. 2 or 1,2") from None
    bad = [i for i in nodes if not 0 <= i < st.spec.nodes]
    if bad:
        raise FaultError(f"{what} {text}: node {bad[0]} does not exist; the cluster has nodes "
                         f"0..{st.spec.nodes - 1}")
    return nodes


def apply(name: str, action: str, args: list[str], sources: str | None = None,
          for_s: float | None = None) -> tuple[str, str]:
    """Do ``action`` on cluster ``name`` now; (what was done, how to undo it)."""
    st = state.load(name)
    if st is None:
        raise FaultError(f"no rlsim cluster named {name!r}; fix: name one from `rlsim status`")
    if action not in ACTIONS:
        raise FaultError(f"{action!r}: the actions are {', '.join(ACTIONS)}")
    if for_s is not None and action not in TIMED:
        raise FaultError(f"--for heals {', '.join(TIMED)} on its own, not {action}; fix: drop "
                         "--for")
    if for_s is not None and not 0 < for_s <= MAX_FOR_S:  # inf, nan: never healed on its own
        raise FaultError(f"--for {for_s}: give seconds between 0.1 and {MAX_FOR_S:g} (a day)")
    if sources is not None and action != "block-port":
        raise FaultError(f"--from names the sources of block-port, not {action}; fix: drop "
                         "--from")
    need = {"heal": 0, "block-port": 2}.get(action, 1)
    if len(args) != need:
        usage = {"heal": "heal", "block-port": "block-port NODE PORT|gcs|dashboard"}.get(
            action, f"{action} NODE" + ("[,NODE...]" if action == "partition" else ""))
        raise FaultError(f"{action} takes {need} argument(s): rlsim fault {name} {usage}")
    c = attach(st)
    try:
        in_force = ledger(st)
    except FaultError:
        if action != "heal":
            raise
        in_force = []  # a ledger that does not parse is no reason not to heal
    try:
        done, undo, entry, gone = _do(c, st, action, args, sources, in_force)
    except (NotImplementedError, IndexError) as e:
        raise FaultError(str(e)) from None
    with locked():  # the ledger only: the action itself ran unlocked (restarts take s)
        entries = [] if action == "heal" else [e for e in ledger(st) if not gone(e)]
        if entry is not None:  # ids never repeat: a pending self-heal undoes its own fault only
            entry.update(id=uuid.uuid4().hex[:8], since=time.time(),
                         until=time.time() + for_s if for_s else None)
            entries.append(entry)
        _save(st, entries)
    if entry is not None and for_s:
        _heal_later(st, entry["id"], for_s)
        undo = f"heals itself in {for_s:g} s (or now: {undo})"
    return done, undo


def _keep(_e: dict) -> bool:
    return False


def _do(c, st: ClusterState, action: str, args: list[str], sources: str | None,
        entries: list[dict]):
    """Do it; (what was done, how to undo it, the new ledger entry or None, which entries it
    ended)."""
    name = st.spec.name
    if action == "heal":
        healed = heal(c, st, entries)
        ids = {e["id"] for e in entries}
        # a killed node is brought back by its entry; one whose entry is lost (a ledger that
        # did not parse) is named, with the command that brings it back
        down = [n.index for n in c.nodes() if n.index and not n.pids]
        still = "".join(f"; node {i} is down: rlsim fault {name} restart-node {i}" for i in down)
        return (f"healed {healed} fault(s) and every rule and frozen node left{still}", "-",
                None, lambda e: e["id"] in ids)
    nodes = _nodes(args[0], st, "NODE")
    if action != "partition" and len(nodes) > 1:
        raise FaultError(f"{action} {args[0]}: one node at a time; fix: run it once per node")
    down = {e["nodes"][0]: e["action"] for e in entries if e["action"] in UNDO}
    if action in UNDO and nodes[0] in down:
        raise FaultError(f"{action} {nodes[0]}: node {nodes[0]} is already down "
                         f"({down[nodes[0]]}); fix: `rlsim fault {name} {UNDO[down[nodes[0]]]} "
                         f"{nodes[0]}` first")
    if action in ("kill-node", "restart-node") and nodes[0] == 0:
        raise FaultError(f"{action} 0: node 0 is the head; an rlsim cluster cannot restart it "
                         f"(its GCS has no external store): `rlsim down {name}` and start anew")
    if action in UNDO:  # the node stays down until its undo
        verb, did = {"kill-node": (c.kill_node, "killed"),
                     "pause-node": (c.pause_node, "froze")}[action]
        undo = UNDO[action]
        pids = verb(nodes[0])
        return (f"{did} node {nodes[0]} ({len(pids)} processes)",
                f"rlsim fault {name} {undo} {nodes[0]}", {"action": action, "nodes": nodes},
                _keep)
    if action == "restart-node":
        info = c.restart_node(nodes[0])
        return (f"node {nodes[0]} is back at {info.address}", "-", None,
                lambda e: e["action"] in ("kill-node", "pause-node") and e["nodes"] == nodes)
    if action == "resume-node":
        c.resume_node(nodes[0])
        return (f"thawed node {nodes[0]}", "-", None,
                lambda e: e["action"] == "pause-node" and e["nodes"] == nodes)
    if action == "partition":
        rest = [i for i in range(st.spec.nodes) if i not in nodes]
        if not rest:
            raise FaultError(f"partition {args[0]}: that is every node; cut off some of them")
        rules = c.partition([nodes, rest])
        return (f"cut node(s) {nodes} off from {rest} ({len(rules)} iptables rules)",
                f"rlsim fault {name} heal", {"action": action, "nodes": nodes,
                                              "rules": [asdict(r) for r in rules]}, _keep)
    if args[1].isascii() and args[1].isdigit():
        if not 1 <= int(args[1]) <= 65535:
            raise FaultError(f"PORT {args[1]}: a TCP port is 1-65535, or name one (gcs, "
                             "dashboard)")
        ports = (int(args[1]), int(args[1]))
    else:
        try:
            ports = c.port(args[1])
        except KeyError as e:
            raise FaultError(f"PORT {args[1]!r}: {e.args[0]}") from None
    src = _nodes(sources, st, "--from") if sources else None
    rules = c.block_port(nodes[0], ports, src)
    who = f"from node(s) {src}" if src else "from every other node"
    return (f"blocked node {nodes[0]}'s port(s) {ports[0]}-{ports[1]} ({args[1]}) {who}",
            f"rlsim fault {name} heal", {"action": action, "nodes": nodes, "port": args[1],
                                          "from": src, "rules": [asdict(r) for r in rules]},
            _keep)


def heal(c, st: ClusterState, entries: list[dict]) -> int:
    """Undo ``entries`` (newest first), then every rule and frozen node left; how many. One undo
    that fails (a node that does not come back in time) does not stop the others; it is raised
    once all the rest is healed."""
    failed: list[str] = []
    for e in reversed(entries):
        try:
            _undo(c, e)
        except Exception as err:  # noqa: BLE001 - heal the rest first, then say what failed
            failed.append(f"{e['action']} {e['nodes']}: {err}")
    c.heal_network()
    for i in range(st.spec.nodes):  # a node frozen some other way is thawed too
        c.resume_node(i)
    if failed:
        raise RuntimeError("healed everything else, but not: " + "; ".join(failed))
    return len(entries)


def _undo(c, e: dict) -> None:
    if e["action"] == "pause-node":
        c.resume_node(e["nodes"][0])
    elif e["action"] == "kill-node":
        c.restart_node(e["nodes"][0])
    elif e.get("rules"):
        c.remove_rules([Drop(**{**r, "ports": tuple(r["ports"]) if r["ports"] else None})
                        for r in e["rules"]])


def heal_one(name: str, fault_id: str) -> bool:
    """Undo ledger entry ``fault_id`` of cluster ``name`` if it is still in force."""
    st = state.load(name)
    if st is None:
        return False
    mine = [e for e in ledger(st) if e["id"] == fault_id]
    if not mine:
        return False  # healed by hand meanwhile
    _undo(attach(st), mine[0])
    with locked():
        _save(st, [e for e in ledger(st) if e["id"] != fault_id])
    return True


def _heal_later(st: ClusterState, fault_id: str, after_s: float) -> None:
    """A detached helper that heals ``fault_id`` after ``after_s``: labelled with the cluster's
    session, so stopping the cluster ends it too."""
    subprocess.Popen(
        [sys.executable, "-m", "rlsim.faults.by_hand", st.spec.name, str(fault_id), str(after_s)],
        env={**os.environ, procs.SESSION_VAR: st.session}, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    name, fault_id, after_s = argv[0], argv[1], float(argv[2])
    time.sleep(after_s)
    heal_one(name, fault_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
