"""verl's PPO/GRPO launch (``python3 -m verl.trainer.main_ppo key=value ...``) as it places
itself. Rules from verl 0.8.0.dev (commit b178a3cd, the same since the resource-pool design of
2025):

- verl/trainer/main_ppo.py ``init_resource_pool_mgr``: one pool ``global_pool = [n_gpus_per_node]
  * nnodes`` for actor, rollout, ref, critic and (unless it has its own) the reward model, all in
  one process per GPU; ``reward_pool`` only with ``reward_model.enable_resource_pool``.
- verl/single_controller/ray/base.py ``RayResourcePool.get_placement_groups``: one placement group
  per pool entry, ``n_gpus_per_node`` bundles of ``{"CPU": 3, "GPU": 1}``, strategy STRICT_PACK
  (every bundle on one node); ``_check_resource_available`` checks only the cluster's total GPUs.
- verl/utils/config.py ``validate_config`` and verl/workers/config/actor.py, critic.py: the batch
  size asserts; verl/workers/fsdp_workers.py: the rollout's tensor x data x pipeline parallel
  world must divide the GPUs; verl/workers/rollout/replica.py: a replica larger than a node
  must fill whole nodes.

The defaults are verl's own flattened configs (verl/trainer/config/_generated_ppo_trainer.yaml
and _generated_ppo_megatron_trainer.yaml), shipped in rlsim/plan/data; overrides are applied to
them as Hydra does (an unknown key needs ``+``).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import yaml

from rlsim.plan.model import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Concern,
    Group,
    Layout,
    PlanInputError,
    launch_argv,
    whole,
)

DATA = Path(__file__).parent / "data"
ENTRY = ("verl.trainer.main_ppo", "verl/trainer/main_ppo.py")
CONFIGS = ("ppo_trainer", "ppo_megatron_trainer")
BUNDLE_CPUS = 3  # RayResourcePool(max_colocate_count=3): {"CPU": 3, "GPU": 1} per GPU


def config(argv: list[str], release: str | None = None):
    """verl's config for the command, as Hydra composes it: the named config's defaults with
    the overrides applied (PlanInputError naming an unknown key or a bad value), the keys read
    as other releases read them, and (with ``release``) the keys that release lacks, which its
    Hydra refuses."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    args = launch_argv(argv, ENTRY, "python3 -m verl.trainer.main_ppo trainer.nnodes=2 ...")
    name = "ppo_trainer"
    overrides, older, refused = [], [], []
    i = 0
    while i < len(args):
        token = args[i]
        if token in ("--config-name", "-cn", "--config-path", "-cp"):
            name = args[i + 1] if token in ("--config-name", "-cn") else name
            i += 2
            continue
        if token.startswith(("--config-name=", "--config-path=")):
            name = token.split("=", 1)[1] if token.startswith("--config-name=") else name
        elif token.startswith("-"):
            raise PlanInputError(f"{token}: verl's main_ppo takes Hydra overrides (key=value); "
                                 "fix: drop it or write it as key=value")
        else:
            overrides.append(token)
        i += 1
    name = name.removesuffix(".yaml")
    if name not in CONFIGS:
        raise PlanInputError(f"--config-name {name}: rlsim reads verl's own {' and '.join(CONFIGS)}"
                             "; fix: give your overrides against one of them")
    cfg = OmegaConf.create(yaml.safe_load((DATA / f"verl-{name}.yaml").read_text()))
    OmegaConf.set_struct(cfg, True)
    for override in overrides:
        key, eq, value = override.partition("=")
        if key.startswith("~"):
            with open_dict(cfg):
                _drop(cfg, key[1:])
            continue
        if not eq or not key.lstrip("+"):
            raise PlanInputError(f"{override!r}: a Hydra override is key=value; fix: e.g. "
                                 "trainer.nnodes=2")
        try:
            parsed = yaml.safe_load(value) if value else None
        except yaml.YAMLError:
            parsed = value
        try:
            if key.startswith("+"):
                with open_dict(cfg):
                    OmegaConf.update(cfg, key.lstrip("+"), parsed, force_add=True)
            elif _has(cfg, key):
                OmegaConf.update(cfg, key, parsed, merge=True)
                if release and name == "ppo_trainer" and not _in_release(key, release):
                    refused.append(key)
            elif had := releases_with(key):  # a key of other releases: read as they would
                with open_dict(cfg):
                    OmegaConf.update(cfg, key, parsed, force_add=True)
                older.append(f"{key} (verl {had})")
                if release and not _in_release(key, release):
                    refused.append(key)
            else:
                raise PlanInputError(f"Could not override '{key}': no such key in verl's "
                                     f"{name} in any release from {_keys()['releases'][0]} to "
                                     f"{_keys()['releases'][-1]}; fix: check the spelling, or "
                                     f"append it with +{key}={value}")
        except OmegaConfBaseException as e:
            raise PlanInputError(f"{override}: {str(e).splitlines()[0]}") from None
    return name, cfg, older, refused


@functools.cache
def _keys() -> dict:
    return json.loads((DATA / "verl-keys.json").read_text())


def _in_release(key: str, release: str) -> bool:
    i = _keys()["releases"].index(release)
    return any(a <= i <= b for a, b in _keys()["keys"].get(key, []))


def releases_with(key: str) -> str:
    """The verl releases whose ppo_trainer has ``key`` (``v0.4.0-v0.4.1``), or ""."""
    tags = _keys()["releases"]
    return ", ".join(tags[a] if a == b else f"{tags[a]}-{tags[b]}"
                     for a, b in _keys()["keys"].get(key, []))


def _has(cfg, key: str) -> bool:
    """Whether ``key`` is in the config (a value still ``???`` counts: Hydra overrides it)."""
    from omegaconf import DictConfig, OmegaConf

    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node.keys()  # noqa: SIM118 (`in` skips ???)


def _drop(cfg, key: str) -> None:
    parent, _, leaf = key.rpartition(".")
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, parent) if parent else cfg
    if node is None or leaf not in node:
        raise PlanInputError(f"~{key}: no such key to delete in verl's config")
    del node[leaf]


# the releases whose RayResourcePoolManager also checked each pool node by node before placing
# (verl/trainer/ppo/ray_trainer.py _check_resource_available, to v0.5.0): one node serves at most
# one entry of a pool, so two 8-GPU entries are refused on one 16-GPU node Ray could pack
PER_NODE_CHECK = ("v0.2.0.post2", "v0.3.0.post1", "v0.4.0", "v0.4.1", "v0.5.0")


def layout(argv: list[str], release: str | None = None) -> Layout:
    if release is not None and release not in _keys()["releases"]:
        tags = _keys()["releases"]
        raise PlanInputError(f"--release {release}: rlsim knows verl's config keys of "
                             f"{', '.join(tags)}; fix: one of those")
    name, cfg, older, refused = config(argv, release)
    try:
        found = _layout(name, cfg)
    except (TypeError, ValueError) as e:
        if isinstance(e, PlanInputError):
            raise
        raise PlanInputError(f"a placement value is not a number: {e}") from None
    if older:
        found.notes.insert(0, "keys of other verl releases, read as they read them: "
                           + ", ".join(older))
    if release is not None:
        found.version = f"verl {release} (--release; defaults of main)"
        found.findings = [Concern(
            "error", f"{key}: not a key of verl {release}'s {name} (it is in "
            f"{releases_with(key) or 'no release'}): Hydra refuses the override (\"Could not "
            f"override '{key}'\") before anything starts.", f"+{key}=... adds it, or use the "
            f"key's {release} name") for key in refused] + found.findings
        if release in PER_NODE_CHECK:
            found.prechecks.append(functools.partial(_per_node_check, found.groups, release))
    return found


def _per_node_check(groups: list[Group], release: str, nodes) -> list[Concern]:
    """verl's check before placing, as releases up to v0.5.0 made it: each pool's entries
    served node by node, one entry a node (ray_trainer.py ``_check_resource_available``)."""
    free = [n.gpus for n in nodes]
    pools: dict[str, list[int]] = {}
    for g in groups:
        pools.setdefault(g.name.split(":")[0], []).append(g.gpus)
    out = []
    for pool, sizes in pools.items():
        need, left = sizes[0], len(sizes)
        for i, gpus in enumerate(free):
            if left and gpus >= need:
                free[i], left = gpus - need, left - 1
        if left:
            out.append(Concern("error", f"verl {release} checks each pool before placing, one "
                               f"entry a node: \"Resource pool {pool}: {need}*{left} cannot be "
                               "satisfied in this ray cluster\" (ValueError), though Ray could "
                               "pack some entries onto one node.",
                               "nodes of trainer.n_gpus_per_node GPUs, one per trainer.nnodes"))
    return out


def _layout(name: str, cfg) -> Layout:
    t, arr = cfg.trainer, cfg.actor_rollout_ref
    nnodes = whole(t.nnodes, "trainer.nnodes", 1, MAX_NODES)
    per_node = whole(t.n_gpus_per_node, "trainer.n_gpus_per_node", 1, MAX_GPUS_PER_NODE)
    kl = bool(cfg.algorithm.use_kl_in_reward or arr.actor.use_kl_loss)
    critic = bool(cfg.critic.enable) if cfg.critic.enable is not None else \
        cfg.algorithm.adv_estimator == "gae"
    rm = cfg.reward_model
    own_rm_pool = bool(rm.get("enable_resource_pool", False))
    roles = ["actor", "rollout"] + ["ref"] * kl + ["critic"] * critic + \
        ["reward"] * (bool(rm.enable) and not own_rm_pool)
    findings: list[Concern] = []
    groups = [Group(f"global_pool:{k}", "STRICT_PACK",
                    [[f"{'+'.join(roles)} {k * per_node + b}"] for b in range(per_node)],
                    "trainer.nnodes x trainer.n_gpus_per_node", cpus=BUNDLE_CPUS)
              for k in range(nnodes)]
    if own_rm_pool:
        rm_nodes = whole(rm.get("nnodes", 0), "reward_model.nnodes", 0, MAX_NODES)
        rm_gpus = whole(rm.get("n_gpus_per_node", 0), "reward_model.n_gpus_per_node", 0,
                        MAX_GPUS_PER_NODE)
        for key, v in (("n_gpus_per_node", rm_gpus), ("nnodes", rm_nodes)):
            if v <= 0:
                findings.append(Concern("error", f"reward_model.enable_resource_pool needs its "
                                        f"own pool: verl raises \"config.reward_model.{key} must "
                                        "be greater than 0\".", f"reward_model.{key}=1 or more"))
        groups += [Group(f"reward_pool:{k}", "STRICT_PACK",
                         [[f"reward {k * rm_gpus + b}"] for b in range(rm_gpus)],
                         "reward_model.nnodes x reward_model.n_gpus_per_node", cpus=BUNDLE_CPUS)
                   for k in range(max(0, rm_nodes))]
    findings += _rollout(cfg, nnodes, per_node) + _batches(name, cfg, nnodes * per_node, critic)
    notes = [f"roles on every GPU of global_pool (one process per GPU): {', '.join(roles)}",
             f"each placement group asks for {per_node} GPUs and {BUNDLE_CPUS * per_node} CPUs "
             "on one node (STRICT_PACK)"]
    return Layout("verl", f"verl 0.8.0.dev defaults ({name})",
                  ["verl/trainer/main_ppo.py", "verl/single_controller/ray/base.py",
                   "verl/utils/config.py", "verl/workers/fsdp_workers.py",
                   "verl/workers/rollout/replica.py"], groups, findings, notes)


def _rollout(cfg, nnodes: int, per_node: int) -> list[Concern]:
    """The rollout engines' world (tensor x data x pipeline parallel) against the GPUs."""
    r = cfg.actor_rollout_ref.rollout
    tp, dp, pp = int(r.tensor_model_parallel_size), int(r.data_parallel_size), \
        int(r.pipeline_model_parallel_size)
    world, total = tp * dp * pp, nnodes * per_node
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if total % world:
        return [Concern("error", f"rollout world_size {total} is not divisible by "
                        f"infer_world_size {world} (tp {tp} x dp {dp} x pp {pp}): verl's worker "
                        "asserts it.", f"{key} a divisor of {total}")]
    if world > per_node and world % per_node:
        return [Concern("error", f"a rollout replica of {world} GPUs is larger than a node of "
                        f"{per_node} but not whole nodes: verl asserts \"world_size {world} must "
                        f"be divisible by gpus_per_node {per_node}\".", key)]
    if world < per_node and per_node % world:
        return [Concern("warning", f"rollout replicas of {world} GPUs do not divide a node of "
                        f"{per_node}: some replica spans two nodes (its tensor-parallel traffic "
                        "crosses the network); verl does not check this.",
                        f"{key} a divisor of trainer.n_gpus_per_node")]
    return []


def _batches(name: str, cfg, n_gpus: int, critic: bool) -> list[Concern]:
    """validate_config's and the actor/critic configs' batch asserts (skipped with dynamic
    batch sizes, as verl skips them)."""
    a, out = cfg.actor_rollout_ref.actor, []
    if a.use_dynamic_bsz:
        return out
    n = int(cfg.actor_rollout_ref.rollout.n)
    real = int(cfg.data.train_batch_size) * n
    minimal, why = n_gpus, f"{n_gpus} GPUs"
    if a.strategy == "megatron":
        m = a.megatron
        mp = int(m.tensor_model_parallel_size) * int(m.pipeline_model_parallel_size)
        cp = int(m.context_parallel_size)
        if n_gpus % (mp * cp):
            out.append(Concern("error", f"n_gpus ({n_gpus}) must be divisible by "
                               f"model_parallel_size ({mp}) times context_parallel_size ({cp}) "
                               "(verl's validate_config).",
                               "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"))
            return out
        micro = int(a.ppo_micro_batch_size_per_gpu or 1)
        minimal, why = n_gpus // (mp * cp) * micro, "megatron data-parallel x micro batch"
    if real % minimal:
        step = minimal // math.gcd(minimal, n)  # train_batch_size x n must be a multiple
        out.append(Concern("error", f"real_train_batch_size ({real} = data.train_batch_size x "
                           f"rollout.n) must be divisible by minimal possible batch size "
                           f"({minimal}: {why}) (verl's validate_config).",
                           f"data.train_batch_size a multiple of {step}"))
    for role, cfg_part, on in (("actor", a, True), ("critic", cfg.critic, critic)):
        mini = cfg_part.get("ppo_mini_batch_size")
        if on and mini is not None and int(cfg.data.train_batch_size) < int(mini):
            out.append(Concern("error", f"train_batch_size ({cfg.data.train_batch_size}) must be "
                               f">= {role}.ppo_mini_batch_size ({mini}).",
                               f"{'actor_rollout_ref.' if role == 'actor' else ''}{role}."
                               "ppo_mini_batch_size"))
    per_gpu = a.ppo_micro_batch_size_per_gpu
    sp = int(a.get("ulysses_sequence_parallel_size", 1) or 1)
    if per_gpu and a.strategy != "megatron":
        normalized = int(a.ppo_mini_batch_size) * n // (n_gpus // sp)
        if normalized <= 0 or normalized % int(per_gpu):
            out.append(Concern("error", f"normalized ppo_mini_batch_size {normalized} (= "
                               f"{a.ppo_mini_batch_size} x n {n} / {n_gpus // sp} data-parallel "
                               f"ranks) should be divisible by ppo_micro_batch_size_per_gpu "
                               f"{per_gpu} and above 0 (verl's FSDP worker).",
                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"))
    workers = int(cfg.actor_rollout_ref.rollout.agent.num_workers)
    if real % workers:
        out.append(Concern("error", f"the first step splits {real} samples over {workers} agent "
                           "loop workers: verl asserts \"only support equal chunk\".",
                           "actor_rollout_ref.rollout.agent.num_workers a divisor of "
                           f"{real}"))
    return out
