"""An RLinf config (YAML) as RLinf places it. Rules from RLinf/RLinf (main at a3816b59, and the
history of rlinf/utils/placement.py back to the first multi-node guide):

- rlinf/scheduler/cluster/config.py: ``cluster.num_nodes`` (a positive integer; the driver waits
  until that many Ray nodes are alive), ``cluster.component_placement``; GPUs per node are
  detected, not configured (``num_gpus_per_node`` was removed in 2025 and is ignored).
- rlinf/scheduler/placement/placement.py ``ComponentPlacement``: keys are comma-joined component
  names sharing one placement; values are ``all`` or comma-joined inclusive ranks ``a-b``, each
  optionally ``:process ranks``; GPU index i is GPU i % G of node i // G; a process never spans
  nodes (rlinf/scheduler/placement/packed.py).
- rlinf/utils/placement.py ``ModelParallelComponentPlacement`` (reasoning, math, coding):
  actor and rollout are required and contiguous; reward is required from 7fe00ed56
  (2025-10-14, the reward worker: placing it dereferences its GPUs, a TypeError) and asserted
  from v0.1-rc1 on ("Reward GPUs must be specified"); before that, the era of the multi-node
  guide's ``actor,rollout: all`` (2025-08 to 2025-10), there is no reward placement;
  collocated when actor and rollout GPUs are identical, disaggregated when actor, rollout,
  inference and critic are pairwise disjoint (reward may overlap), an error otherwise; a
  rollout engine holds tensor x pipeline parallel GPUs.
  ``HybridComponentPlacement`` (embodied: configs with an ``env`` component) allows any overlap.

RLinf pins each worker to its node (no placement groups); rlsim rehearses each node's GPUs as one
placement group pinned there.
"""

from __future__ import annotations

from rlsim.plan.model import (
    MAX_GPUS,
    MAX_NODES,
    Concern,
    Group,
    Layout,
    NodeCapacity,
    PlanInputError,
)
from rlsim.plan.roll import load

REASONING = ("actor", "rollout")
# the runner task types whose entry script builds ModelParallelComponentPlacement ("math" is
# the task type of RLinf before examples/reasoning, 2025-08 to 2025-10)
MODEL_PARALLEL = ("reasoning", "math", "coding_online_rl")
# RLinf's releases, oldest first: 78ddc653 is the last commit before the reward worker
# (2025-10-13, the multi-node guide's era: no reward placement); 7fe00ed56 added the reward worker
# (placing it dereferences its GPUs) and v0.1-rc1 on assert them
RELEASES = ("78ddc653", "v0.1-rc1", "v0.1", "v0.2", "v0.3", "main")
DISJOINT = (("actor", "rollout"), ("actor", "inference"), ("rollout", "inference"),
            ("critic", "actor"), ("critic", "rollout"))
NO_REWARD = ("78ddc653",)

def ranks(value, total: int, where: str) -> list[list[int]]:
    """A placement value's processes, each the GPU indices it holds (one GPU a process unless
    ``:processes`` says otherwise)."""
    text = str(value).strip()
    if text == "all":
        return [[g] for g in range(total)]
    procs: list[list[int]] = []
    for segment in text.split(","):
        gpus_text, _, procs_text = segment.partition(":")
        gpus = _span(gpus_text, where)
        count = len(_span(procs_text, where)) if procs_text else len(gpus)
        if count < len(gpus):
            if len(gpus) % count:
                raise PlanInputError(f"{where}: {len(gpus)} GPUs over {count} processes is not "
                                     "a whole number each")
            k = len(gpus) // count
            procs += [gpus[i * k:(i + 1) * k] for i in range(count)]
        else:
            procs += [[g] for g in gpus for _ in range(count // len(gpus))]
    return procs


def _span(text: str, where: str) -> list[int]:
    a, dash, b = text.strip().partition("-")
    try:
        lo, hi = int(a), int(b) if dash else int(a)
    except ValueError:
        raise PlanInputError(f"{where}: {text!r} is not a rank or an inclusive range a-b; fix: "
                             "e.g. 0-7 or all") from None
    if hi < lo or lo < 0:
        raise PlanInputError(f"{where}: {text!r}: a range goes from low to high, from 0")
    if hi >= MAX_GPUS:
        raise PlanInputError(f"{where}: {text!r}: rlsim plans at most {MAX_GPUS} GPUs")
    return list(range(lo, hi + 1))


def layout(path: str, nodes: list[NodeCapacity], release: str | None = None) -> Layout:
    if release is not None and release not in RELEASES:
        raise PlanInputError(f"--release {release}: rlsim knows RLinf's placement rules of "
                             f"{', '.join(RELEASES)} (78ddc653: the last commit before the "
                             "reward worker, 2025-10-13); fix: one of those")
    judged = release or RELEASES[-1]
    data = load(path)
    cluster = data.get("cluster") or {}
    num = cluster.get("num_nodes")
    if type(num) is not int or num <= 0:
        raise PlanInputError(f"{path}: cluster.num_nodes: 'num_nodes' must be a positive "
                             f"integer. But got {num!r}")
    if num > MAX_NODES:
        raise PlanInputError(f"{path}: cluster.num_nodes={num}: rlsim plans at most "
                             f"{MAX_NODES} nodes")
    placement = cluster.get("component_placement")
    if not isinstance(placement, dict) or not placement:
        raise PlanInputError(f"{path}: cluster.component_placement is missing; fix: e.g. "
                             "actor,rollout,reward: all")
    per_node = nodes[0].gpus if nodes else 0
    total = num * per_node
    findings: list[Concern] = []
    procs: dict[str, list[list[int]]] = {}
    for key, value in placement.items():
        names = [n.strip() for n in str(key).split(",")]
        if isinstance(value, dict):
            group = str(value.get("node_group", "cluster"))
            if group != "cluster":
                findings.append(Concern("warning", f"{key}: node group {group!r} is not judged "
                                        "(rlsim reads the default group of all GPUs).", ""))
                continue
            value = value.get("placement")
        where = f"{path}: cluster.component_placement.{key}"
        got = ranks(value, total, where)
        past = max((g for p in got for g in p), default=-1)
        if past >= total:
            findings.append(Concern(
                "error", f"{key}: rank {past} is past the {total} accelerators of "
                f"cluster.num_nodes={num} x {per_node}: RLinf refuses it (\"End rank {past} ... "
                "must be within the available ranks\").",
                "lower the ranks, or raise cluster.num_nodes"))
        for name in names:
            if name in procs:
                raise PlanInputError(f"{where}: Component {name} has multiple placements "
                                     "defined.")
            procs[name] = got
    gpus = {n: sorted({g for p in ps for g in p}) for n, ps in procs.items()}
    # the runner's task type picks the placement class, as RLinf's entry scripts do
    task = str((data.get("runner") or {}).get("task_type", ""))
    reasoning = task in MODEL_PARALLEL or (not task and "env" not in gpus)
    if reasoning:
        findings += _reasoning(data, gpus, per_node, num * per_node, judged, path)
        if not gpus.get("reward") and judged not in NO_REWARD:
            findings.append(Concern(
                "error", f"RLinf {judged} asserts \"Reward GPUs must be specified in the "
                "component_placement config.\" (ModelParallelComponentPlacement places a reward "
                "worker even when the reward is a rule). RLinf before 7fe00ed56 (2025-10-14), "
                "whose multi-node guide wrote actor,rollout: all, had no reward placement: "
                "--release 78ddc653 judges by it.", "place reward with the rollout, as RLinf's "
                "own configs do: actor,rollout,reward: all (shared) or reward: <the rollout's "
                "ranks>"))
    for name, ps in procs.items():
        for p in ps:
            if len({g // per_node for g in p}) > 1:
                findings.append(Concern("error", f"{name}: a process holds GPUs {p} on two "
                                        "nodes; RLinf places a process on one node.", name))
    if num > len(nodes):
        findings.append(Concern("error", f"cluster.num_nodes is {num} but the cluster has "
                                f"{len(nodes)} nodes: RLinf's driver waits until {num} Ray nodes "
                                "are alive, forever.", "cluster.num_nodes"))
    # RLinf reserves nothing through Ray: it pins each worker to its node and GPU, so a node's
    # group is the ranks its placement names there (unnamed GPUs stay free)
    used = sorted({g for gs in gpus.values() for g in gs})
    groups = []
    for n in range(max(num, used[-1] // per_node + 1 if used else 0)):
        here = [g - n * per_node for g in used if g // per_node == n]
        if here:
            groups.append(Group(f"node {n}", "NODE",
                                [[c for c, gs in gpus.items() if n * per_node + g in gs]
                                 for g in here], "cluster.component_placement", node=n,
                                cpus=0, gpu_ids=here))
    mode = ("ModelParallelComponentPlacement" if reasoning else "HybridComponentPlacement") + \
        f" (runner.task_type: {task or 'unset'})"
    notes = [f"placement rules: {mode}",
             f"rules of RLinf {judged}" + (" (--release)" if release else " (the newest)")]
    notes += [f"{c}: {len(procs[c])} processes on GPUs {g[0]}-{g[-1]}"
              for c, g in gpus.items() if g]
    return Layout("RLinf", f"RLinf {judged} rules", [
        "rlinf/scheduler/cluster/config.py", "rlinf/scheduler/placement/placement.py",
        "rlinf/scheduler/placement/packed.py", "rlinf/utils/placement.py"],
        groups, findings, notes)


def _size(rollout: dict, key: str, path) -> int:
    """``rollout.<key>``, a parallel size: a positive whole number (1 where unset)."""
    value = rollout.get(key, 1)
    if type(value) is not int or value <= 0:
        raise PlanInputError(f"{path}: rollout.{key}: a parallel size is a positive whole "
                             f"number, not {value!r}; fix: e.g. rollout.{key}: 1")
    return value


def _reasoning(data: dict, gpus: dict[str, list[int]], per_node: int, total: int,
               judged: str, path) -> list:
    out = []
    for name in REASONING:
        if name not in gpus:
            out.append(Concern("error", f"{name.capitalize()} GPUs must be specified in the "
                               "component_placement config.", f"component_placement.{name}"))
    for name in ("actor", "rollout", "inference", "critic"):
        g = gpus.get(name)
        if g and g != list(range(g[0], g[-1] + 1)):
            out.append(Concern("error", f"{name.capitalize()} GPUs {g} must be continuous.",
                               f"component_placement.{name}"))
    if out:
        return out
    rollout = data.get("rollout") or {}
    tp = _size(rollout, "tensor_parallel_size", path) * _size(rollout, "pipeline_parallel_size",
                                                              path)
    if gpus["actor"] == gpus["rollout"]:
        mode = "collocated"
        for name in ("inference", "critic_inference"):
            if gpus.get(name):
                out.append(Concern("error", f"{name.replace('_', ' ').capitalize()} GPUs must "
                                   "not be specified in collocated mode.",
                                   f"component_placement.{name}"))
    elif all(not set(gpus.get(a, [])) & set(gpus.get(b, [])) for a, b in DISJOINT):
        mode = "disaggregated"
        auto = (data.get("cluster") or {}).get("auto_scheduler") and "critic" not in gpus
        if auto and judged not in NO_REWARD:
            out += _auto_order(gpus, total)
    else:
        return [Concern("error", "The specified placement does not match either the collocated "
                        "mode (all the components use the same GPUs) or the disaggregated mode "
                        f"(all the components use completely different GPUs), but got "
                        f"{ {k: f'{v[0]}-{v[-1]}' for k, v in gpus.items() if v} }.",
                        "give actor and rollout the same GPUs, or disjoint ones")]
    n = len(gpus["rollout"])
    if n % tp:
        out.append(Concern("error", f"{n} rollout GPUs do not divide into engines of tensor x "
                           f"pipeline parallel {tp} ({mode}).",
                           "rollout.tensor_parallel_size"))
    elif tp > per_node:
        out.append(Concern("error", f"a rollout engine of {tp} GPUs cannot sit on one node of "
                           f"{per_node}; RLinf places a process on one node.",
                           "rollout.tensor_parallel_size"))
    elif (gpus["rollout"][0] % per_node) % tp or per_node % tp:
        out.append(Concern("error", f"rollout GPUs {gpus['rollout'][0]}-{gpus['rollout'][-1]} in "
                           f"engines of {tp} put some engine across two nodes of {per_node}.",
                           "component_placement.rollout aligned to the engines"))
    return out


def _auto_order(gpus: dict[str, list[int]], total: int) -> list[Concern]:
    """cluster.auto_scheduler (from v0.1-rc1): actor from GPU 0, then rollout, then inference,
    back to back, the last ending on the cluster's last GPU."""
    chain = [gpus["actor"], gpus["rollout"]] + ([gpus["inference"]] if "inference" in gpus
                                                else [])
    ok = chain[0][0] == 0 and chain[-1][-1] == total - 1 and all(
        a[-1] + 1 == b[0] for a, b in zip(chain, chain[1:], strict=False))
    if ok:
        return []
    ends = " -> ".join(f"{g[0]}-{g[-1]}" for g in chain)
    return [Concern("error", "AUTO mode requires components to be placed in the order of actor "
                    f"-> rollout -> inference (RLinf asserts it): here {ends}, on a cluster of "
                    f"GPUs 0-{total - 1}; the last must end on GPU {total - 1}.",
                    "cluster.auto_scheduler: false, or ranges that run back to back to the "
                    "cluster's last GPU")]
