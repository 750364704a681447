"""``rlsim plan --emit-scenario FILE``: a scenario whose reference trainer places its roles the way
the planned framework would (the same GPUs per role, colocated where the framework colocates),
on fake GPUs, with a node lost mid-run, so the fault catalogue can be rehearsed on that topology.

The reference trainer's roles stand in for the framework's: actor, ref, critic as they are,
vLLM engines and verl's rollout as ``rollout``; a reward model rides with the rollout (the
reference trainer's reward is rule-based). A spare node of the same shape is added so the run
can rebuild after the node loss.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from rlsim.files import write_file
from rlsim.plan.model import Placement, PlanInputError

# the framework's role names -> the reference trainer's
STAND_INS = {"actor": "actor", "ref": "ref", "critic": "critic", "vllm": "rollout",
             "rollout": "rollout", "actor_train": "actor", "actor_infer": "rollout",
             "reference": "ref"}


def role_gpus(p: Placement) -> dict[str, list[int]]:
    """Reference-trainer role -> the global GPU ids (node x GPUs per node + GPU) the framework's
    stand-in role holds. A worker's label is its role(s), ``+``-joined, then its rank."""
    per_node = p.nodes[0].gpus
    out: dict[str, set[int]] = {}
    for node, gpus in p.gpu_map().items():
        for gpu, workers in gpus.items():
            for worker in workers:
                for part in worker.split()[0].split("+"):
                    role = STAND_INS.get(re.match(r"[a-z_]*", part).group())
                    if role:
                        out.setdefault(role, set()).add(node * per_node + gpu)
    return {r: sorted(g) for r, g in out.items()}


def ranges(gpus: list[int]) -> str:
    """``0-3,8-11``: GPU ids as the reference trainer's placement.roles takes them."""
    runs: list[list[int]] = []
    for g in gpus:
        if runs and g == runs[-1][1] + 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return ",".join(f"{a}-{b}" if a != b else f"{a}-{a}" for a, b in runs)


def scenario(p: Placement, name: str) -> dict:
    if not p.fits:
        raise PlanInputError("the launch does not fit this cluster: fix the findings first; a "
                             "scenario is written for a layout that fits")
    if len({n.gpus for n in p.nodes}) > 1:
        raise PlanInputError("--emit-scenario needs nodes of one size (the reference trainer "
                             "indexes GPUs as node x GPUs per node)")
    gpus = role_gpus(p)
    if "actor" not in gpus or "rollout" not in gpus:
        raise PlanInputError("the layout has no actor or rollout GPUs to mirror")
    per_node = p.nodes[0].gpus
    used = max(max(g) for g in gpus.values()) + 1
    nnodes = -(-used // per_node)
    algorithm = "ppo" if "critic" in gpus else "grpo"
    gpus.setdefault("ref", gpus["actor"])
    same = all(g == gpus["actor"] for g in gpus.values())
    placement = {"nnodes": nnodes, "gpus_per_node": per_node,
                 "mode": "colocated" if same else "disaggregated"}
    on_each = {n: [g % per_node for g in gpus["actor"] if g // per_node == n]
               for n in range(nnodes)}
    if same and all(v == list(range(len(on_each[0]))) for v in on_each.values()):
        placement["gpus_per_node"] = len(on_each[0])  # the same first GPUs of every node
    if not same:
        placement["roles"] = {r: ranges(g) for r, g in gpus.items()}
    lost = gpus["actor"][-1] // per_node + 1  # node 0 is a GPU-less head, as on many clusters
    overrides = {"save_freq": 4, "total_steps": 12, "placement": placement}
    # the reference trainer splits a step's prompts over the rollout's ranks and their 8
    # samples each over every other role's ranks: the fewest prompts that split so
    step, others = len(gpus["rollout"]), [len(g) for g in gpus.values()]
    prompts = next(p for p in [16, *range(step, step * math.lcm(*others) + 1, step)]
                   if p % step == 0 and all(p * 8 % n == 0 for n in others))
    if prompts != 16:  # the fixtures' own 16 prompts split: keep them
        overrides["data"] = {"prompts_per_step": prompts}
    layout = ", ".join(f"{r} GPUs {ranges(g)}" for r, g in gpus.items())
    return {
        "name": name,
        "tags": ["plan", p.layout.framework.lower(), "node_failure"],
        "description": (
            f"{p.layout.framework}'s layout ({p.layout.version}) mirrored by the reference "
            f"trainer on fake GPUs: {layout}"
            f" of {nnodes} node(s) x {per_node}, beside a head without GPUs and one spare "
            f"node. Node {lost} (the last actor rank's) is lost at step 6: the run rebuilds "
            "from its step-4 checkpoint."),
        "cluster": {"nodes": nnodes + 2, "gpus_per_node": per_node, "node": {0: {"gpus": 0}}},
        "trainer": {"config": f"{algorithm}_tiny",
                    "overrides": overrides},
        "faults": [{"at": {"step": 6}, "kill_node": {"node": lost}}],
        "expect": [{"completes": {}}, {"restarts": {"min": 1}},
                   {"resumed_from_step": {"step": 4}}, {"no_leaks": {}}],
    }


def mirrorable(sc: dict) -> None:
    """Raise PlanInputError with the reference trainer's own words unless it can run the
    scenario's placement (e.g. two roles on ranges that overlap without being equal): the
    scenario is read as ``rlsim validate`` reads it, and its trainer asked through its adapter."""
    from rlsim.adapters import ADAPTERS
    from rlsim.adapters.base import TrainerProblem
    from rlsim.scenario.schema import Scenario

    try:
        trainer = Scenario.model_validate(sc).trainer
        ADAPTERS[trainer.adapter].facts(trainer, [])
    except (TrainerProblem, ValueError) as e:
        said = str(e).removeprefix("the trainer refuses its config: ")
        raise PlanInputError(f"the reference trainer cannot mirror this layout: {said}") from None


def scenario_name(path: Path) -> str:
    """A scenario name (``[a-z0-9][a-z0-9_]*``, 63 at most) from the file it is written to:
    ``openrlhf-v0.5.8.yaml`` gives ``openrlhf_v0_5_8``."""
    name = re.sub(r"[^a-z0-9]+", "_", path.stem.lower()).strip("_")[:63]
    return name if name[:1].isalnum() else f"plan_{name}"[:63]


def write_scenario(p: Placement, path: Path) -> None:
    sc = scenario(p, scenario_name(path))
    mirrorable(sc)
    text = yaml.safe_dump(sc, sort_keys=False, width=100)
    write_file(path, f"# written by rlsim plan --emit-scenario\n{text}")
