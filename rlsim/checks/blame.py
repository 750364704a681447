"""Checks: judge a finished scenario from its history alone (Jepsen's checker), never during it.

Blame: whether the trainer's own words, once a fault hit it, named what the fault hit (its
node's address, its process, the role's rank), as nvidia-resiliency-ext's fault-injection loop
scores whether the right rank was blamed. A run that recovers while saying "a worker died" sends
its operator through every node's logs; one that names 127.77.0.11 or "rollout rank 0" does not.
"""

from __future__ import annotations

import ipaddress
import json
import re

from pydantic import Field

from rlsim.checks.base import _count, _interesting, check
from rlsim.fields import Strict, World
from rlsim.history import Outcome
from rlsim.result import Verdict

# the trainer's events that say what went wrong, and where
SAYING = ("worker_died", "node_lost", "stalled", "error", "restart", "preemption_notice")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")


class Blamed(Strict):
    fault: int = Field(0, ge=0, le=999, description="the index of the fault in the scenario's "
                       "faults list whose target the trainer must name")


def _cannot(params, scenario, world: World) -> tuple[str, str] | None:
    n = len(scenario.faults)
    if params.fault >= n:
        fix = f"name one of 0..{n - 1}" if n else "add a fault, or drop the check"
        return "fault", f"the scenario has {n} fault(s), so no faults[{params.fault}] to " \
                        f"blame; {fix}"
    return None


def _ips(text: str) -> set[str]:
    found = set()
    for ip in _IPV4.findall(text):
        try:
            found.add(str(ipaddress.ip_address(ip)))
        except ValueError:
            continue
    return found


def hit(fault: dict) -> dict:
    """What a ``fault_injected`` event says the fault hit: ``ips`` (its node's address, the
    processes' hosts), ``pids``, ``ranks`` ((role, rank) pairs)."""
    ips = {fault.get(k) for k in ("address", "ip") if isinstance(fault.get(k), str)}
    pids = {fault.get("pid")} if isinstance(fault.get("pid"), int) else set()
    ranks = set()
    if isinstance(fault.get("role"), str) and isinstance(fault.get("rank"), int):
        ranks.add((fault["role"], fault["rank"]))
    aimed = fault.get("aimed") if isinstance(fault.get("aimed"), dict) else {}
    if isinstance(aimed.get("role"), str) and isinstance(aimed.get("rank"), int):
        ranks.add((aimed["role"], aimed["rank"]))
    if isinstance(aimed.get("pid"), int):
        pids.add(aimed["pid"])
    for t in fault.get("touched") or []:
        if not isinstance(t, dict):
            continue
        if isinstance(t.get("ip"), str):
            ips.add(t["ip"])
        if isinstance(t.get("pid"), int):
            pids.add(t["pid"])
        for role, rank in (t.get("ranks") or {}).items() if isinstance(t.get("ranks"), dict) \
                else ():
            if isinstance(rank, int):
                ranks.add((role, rank))
    return {"ips": ips, "pids": pids, "ranks": ranks}


def named(e: dict, target: dict) -> list[str]:
    """What of ``target`` (:func:`hit`) the event ``e`` names, in words."""
    text = json.dumps({k: v for k, v in e.items() if k not in ("ts", "source")}, default=str)
    found = [ip for ip in sorted(target["ips"]) if ip in _ips(text)]
    found += [f"pid {pid}" for pid in sorted(target["pids"])
              if re.search(rf"\bpid[\s:=\"]+{pid}\b", text)]
    found += [f"{role} rank {rank}" for role, rank in sorted(target["ranks"])
              if re.search(rf"\b{re.escape(role)} rank {rank}\b", text)
              or (e.get("role") == role and e.get("rank") == rank)]
    return found


@check(Blamed, _count("fault"), cannot=_cannot)
def blamed(o: Outcome, p) -> Verdict:
    """After ``faults[fault]`` fired, the trainer's own events saying what went wrong (a worker
    died, a node was lost, a step stalled, an error, a restart) named what it hit: its node's
    address, its process or the role's rank. Naming only other nodes is blaming the wrong one."""
    fired = [e for e in o.rlsim("fault_injected") if e.get("index") == p.fault]
    if not fired:
        return Verdict("blamed", False, f"faults[{p.fault}] never fired: nothing to blame",
                       evidence=_interesting(o))
    fault = fired[0]
    target = hit(fault)
    what = f"{fault.get('fault', '?')} (faults[{p.fault}])"
    if not any(target.values()):
        return Verdict("blamed", False, f"{what} said nothing of what it hit (no address, "
                       "process or rank): it cannot be judged", evidence=_interesting(o))
    said = [e for e in o.trainer() if e.get("type") in SAYING and e["ts"] >= fault["ts"]]
    for e in said:
        if names := named(e, target):
            return Verdict("blamed", True, f"the trainer's {e['type']} "
                           f"{e['ts'] - fault['ts']:.2f} s after {what} named {', '.join(names)}",
                           round(e["ts"] - fault["ts"], 3), _interesting(o))
    hit_words = ", ".join(sorted(target["ips"]) + [f"pid {x}" for x in sorted(target["pids"])]
                          + [f"{r} rank {k}" for r, k in sorted(target["ranks"])])
    others = sorted({ip for e in said for ip in _ips(json.dumps(e, default=str))}
                    - target["ips"])
    if others:
        return Verdict("blamed", False, f"after {what} the trainer named {', '.join(others)}, "
                       f"not what the fault hit ({hit_words})", evidence=_interesting(o))
    return Verdict("blamed", False, f"after {what} the trainer's {len(said)} event(s) saying "
                   f"what went wrong named none of what it hit ({hit_words})",
                   evidence=_interesting(o))
