"""OpenRLHF's Ray PPO/GRPO launch (``python -m openrlhf.cli.train_ppo_ray ...``) as it places
itself. Rules from OpenRLHF's own code, the same in v0.8.11 through v0.11.0 (only the flag names
changed, flat ``--actor_num_nodes`` up to v0.10.1, dotted ``--actor.num_nodes`` from v0.10.2):

- openrlhf/cli/train_ppo_ray.py ``train()``: the placement groups in creation order: actor+ref
  (``--colocate_actor_ref`` / ``--colocate_all_models``), the vLLM engines (``--vllm_num_engines``
  x ``--vllm_tensor_parallel_size``; in the actor's group when all models are colocated and
  training is not async, asserting the sizes are equal), actor, ref (when the KL coefficient is
  above 0), critic+reward (``--colocate_critic_reward``), critic (GAE only), reward (unless a
  remote reward URL or agent function replaces it); its asserts on shapes and sample batches.
- openrlhf/trainer/ray/launcher.py ``RayActorGroup``: a role's own group is N x G bundles of
  ``{"GPU": 1, "CPU": 1}``, strategy PACK (no group at all with 1 GPU per node); colocated roles
  take 0.2 of each bundle, rank r on bundle r.
- openrlhf/trainer/ray/vllm_engine.py ``create_vllm_engines`` and utils ``get_bundle_indices``:
  engine i holds the node-sorted bundles [i*tp, (i+1)*tp).
- openrlhf/utils/deepspeed/deepspeed.py: every role's DeepSpeed config, whose batch assertion
  needs train_batch_size = micro_train_batch_size x accumulation x data-parallel ranks.

The flags of every release from v0.5.0 to the newest (each flag of train_ppo_ray.py with its kind
and default, release by release) are read from OpenRLHF's source by ci/extract_openrlhf_flags.py
into rlsim/plan/data/openrlhf-flags.json. A launch is read with the flags of the releases that
accept all of its flags and judged by the newest of them; a flag that only some releases know
selects those, and one no release knows is said (with its nearest match) and left out, never a
refusal: guides copy flags that have nothing to do with placement (``--flash_attn``, gone since
v0.9.0). ``release`` judges by one release strictly, as its argparse would.

A role exists by its own switch, never by its size; what differs by release: v0.5.x always make
the reference model and v0.5.0 always a critic; the group-baseline estimators assert two samples
a prompt from v0.5.3; async training keeps vLLM out of the colocated group from v0.8.
"""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path

from rlsim.plan.model import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Concern,
    Group,
    Layout,
    PlanInputError,
    bounded,
    launch_argv,
)

DATA = Path(__file__).parent / "data"
ENTRY = ("openrlhf.cli.train_ppo_ray", "train_ppo_ray.py")
SIZES = ((".num_nodes", MAX_NODES), (".num_gpus_per_node", MAX_GPUS_PER_NODE),
         (".num_engines", MAX_GPUS), (".tensor_parallel_size", MAX_GPUS))
# dotted name (v0.10.2+) -> flat name (up to v0.10.1), for the flags placement reads
FLAT = {
    "actor.num_nodes": "actor_num_nodes", "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "ref.num_nodes": "ref_num_nodes", "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "critic.num_nodes": "critic_num_nodes", "critic.num_gpus_per_node": "critic_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes", "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward",
    "train.colocate_all": "colocate_all_models", "train.async_enable": "async_train",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "algo.kl.init_coef": "init_kl_coef", "algo.advantage.estimator": "advantage_estimator",
    "reward.remote_url": "remote_rm_url", "train.agent_func_path": "agent_func_path",
    "reward.model_name_or_path": "reward_pretrain", "ds.ring_attn_size": "ring_attn_size",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size", "train.batch_size": "train_batch_size",
    "train.micro_batch_size": "micro_train_batch_size", "rollout.batch_size": "rollout_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "train.dynamic_batch_enable": "use_dynamic_batch",
}


# how a release without one of the flags placement reads behaves
ABSENT = {"ds.ring_attn_size": 1, "ds.tensor_parallel_size": 1, "vllm.tensor_parallel_size": 1,
          "train.colocate_all": False, "train.async_enable": False,
          "train.colocate_actor_ref": False, "train.colocate_critic_reward": False,
          "train.dynamic_batch_enable": False, "rollout.micro_batch_size": 1}


@functools.cache
def _releases() -> dict:
    return json.loads((DATA / "openrlhf-flags.json").read_text())


def releases() -> list[str]:
    """OpenRLHF's releases whose flags rlsim knows, oldest first."""
    return _releases()["releases"]


def flags_of(release: str) -> dict[str, tuple[str, object]]:
    """Every flag of ``release``: name -> (kind, default)."""
    i = releases().index(release)
    return {name: (kind, default) for name, runs in _releases()["flags"].items()
            for first, last, kind, default in runs if first <= i <= last}


def span(tags: list[str]) -> str:
    """``v0.8.10-v0.9.10`` for consecutive releases, with gaps as separate spans."""
    order, out, run = releases(), [], []
    for tag in sorted(tags, key=order.index):
        if run and order.index(tag) != order.index(run[-1]) + 1:
            out.append(run)
            run = []
        run.append(tag)
    out += [run] if run else []
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def command_args(argv: list[str]) -> list[str]:
    """The flags of the launch (see :func:`rlsim.plan.model.launch_argv`)."""
    return launch_argv(argv, ENTRY, "python3 -m openrlhf.cli.train_ppo_ray "
                                    "--actor.num_gpus_per_node 8 ...")


def parse(args: list[str], release: str | None = None) -> tuple[str, dict, list[Concern], str]:
    """The release a launch is judged by, every flag's value (that release's defaults included)
    as its argparse would give them, and what is said of its flags: the releases it matches,
    flags no release knows (with the nearest match) and flags the chosen release lacks.

    Without ``release``, the newest release that knows most of the flags judges, and a flag it
    lacks is a warning (the launch selects releases, it is not refused for a flag). With it,
    that release judges as its argparse would: a flag it lacks is an error."""
    if release is not None and release not in releases():
        raise PlanInputError(f"--release {release}: rlsim knows OpenRLHF's flags of "
                             f"{releases()[0]} to {releases()[-1]}; fix: one of those (e.g. "
                             f"{releases()[-1]})")
    kinds: dict[str, str] = {}
    for name, runs in _releases()["flags"].items():
        kinds[name] = runs[-1][2]
    given: dict[str, object] = {}
    unknown: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, value = token.partition("=")
        if not name.startswith("--"):
            raise PlanInputError(f"{token!r}: not a flag (OpenRLHF takes --name value pairs); "
                                 "fix: quote the value that belongs to the flag before it")
        kind = kinds.get(name)
        if kind is None:  # no release knows it: a value follows unless the next is a flag
            unknown.append(name)
            i += 1 if eq or i + 1 >= len(args) or args[i + 1].startswith("--") else 2
            continue
        if kind == "switch":
            given[name], i = True, i + 1
        elif eq:
            given[name], i = value, i + 1
        elif kind.startswith("n") and kind[1:].isdigit():
            n = int(kind[1:])
            given[name], i = args[i + 1:i + 1 + n], i + 1 + n
        elif kind == "many":
            j = i + 1
            while j < len(args) and not args[j].startswith("--"):
                j += 1
            given[name], i = args[i + 1:j], j
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            given[name], i = args[i + 1], i + 2
        else:
            raise PlanInputError(f"{name} needs a value; fix: give it one, e.g. {name} 8")
    said = []
    for name in unknown:
        close = difflib.get_close_matches(name, kinds, n=1)
        said.append(Concern("warning", f"{name}: no OpenRLHF release from {releases()[0]} to "
                            f"{releases()[-1]} has this flag; left out"
                            + (f" (did you mean {close[0]}?)" if close else ""), name))
    # the releases that know most of the given flags; the newest of them judges the launch
    known = {tag: set(given) & set(flags_of(tag)) for tag in releases()}
    best = max(len(k) for k in known.values()) if known else 0
    matching = [tag for tag, k in known.items() if len(k) == best]
    chosen = release or matching[-1]
    flags = flags_of(chosen)
    values = {name: default for name, (_, default) in flags.items()}
    values.update({k: v for k, v in given.items() if k in flags})
    for name in sorted(set(given) - set(flags)):
        had = [tag for tag in releases() if name in flags_of(tag)]
        if release is not None:
            said.append(Concern("error", f"{name} is a flag of OpenRLHF {span(had)}, not of "
                                f"{release}: its argparse exits \"unrecognized arguments: "
                                f"{name}\" before placing anything.", "write every flag in the "
                                f"names of {release}"))
        else:
            said.append(Concern("warning", f"{name} is a flag of OpenRLHF {span(had)}, not of "
                                f"{chosen}, which the launch's other flags select: left out",
                                "write every flag in the names of one release"))
    if release is not None:
        for c in said:
            if "no OpenRLHF release" in c.message:  # argparse refuses these too
                said[said.index(c)] = Concern("error", c.message.replace(
                    "; left out", f"; {release}'s argparse exits \"unrecognized arguments\""),
                    c.fix)
    note = (f"judged by OpenRLHF {release} (--release)" if release else
            f"flags of OpenRLHF {span(matching)}; judged by {chosen}")
    return chosen, values, said, note


class Read:
    """Typed access to the parsed flags under their dotted names, whatever the version."""

    def __init__(self, version: str, values: dict) -> None:
        self.version, self.values = version, values
        self.dotted = any("." in k for k in values)

    def flag(self, name: str) -> str:
        return f"--{name}" if self.dotted else f"--{FLAT.get(name, name)}"

    def raw(self, name: str):
        """The flag's value; a flag this release does not have reads as the release behaves
        without it (no ring attention, no DeepSpeed tensor parallel, no remote reward...)."""
        flag = self.flag(name)
        return self.values[flag] if flag in self.values else ABSENT.get(name)

    def int(self, name: str) -> int:
        value = self._number(name, int, "a whole number")
        # sizes the readers build lists of: bounded before any is built
        most = next((m for end, m in SIZES if name.endswith(end)), None)
        return value if most is None else bounded(value, self.flag(name), 0, most)

    def float(self, name: str) -> float:
        return self._number(name, float, "a number")

    def _number(self, name: str, kind: type, what: str):
        value = self.raw(name)
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise PlanInputError(f"{self.flag(name)} {value}: not {what}") from None

    def on(self, name: str) -> bool:
        return bool(self.raw(name))


def layout(argv: list[str], release: str | None = None) -> Layout:
    version, values, said, note = parse(command_args(argv), release)
    f = Read(version, values)
    roles, empty = _roles(f)
    findings = said + empty + _asserts(f, roles)
    roles = {r: n for r, n in roles.items() if n}  # a role of 0 GPUs has failed above
    groups = _groups(f, roles, findings)
    findings += _batches(f, roles)
    return Layout("OpenRLHF", f"flags of {version}" + (" (dotted)" if f.dotted else " (flat)"),
                  [f"openrlhf/cli/train_ppo_ray.py @ {version}",
                   "openrlhf/trainer/ray/launcher.py", "openrlhf/trainer/ray/vllm_engine.py",
                   "openrlhf/utils/deepspeed/deepspeed.py"],
                  groups, findings, [note, *_notes(roles)])


def _roles(f: Read) -> tuple[dict[str, int], list[Concern]]:
    """The roles this launch creates and each one's GPUs (num_nodes x num_gpus_per_node), and
    what becomes of a created role given no GPUs.

    A role is created by its own switch, never by its size: the reference model when
    init_kl_coef is above 0 (always up to v0.5.x), the critic for GAE (always in v0.5.0), the
    reward model unless a remote reward or an agent scores. The sizes of a role that is not
    created are never read (scripts write 0 for them)."""
    size = {r: f.int(f"{r}.num_nodes") * f.int(f"{r}.num_gpus_per_node")
            for r in ("actor", "ref", "critic", "reward")}
    if size["actor"] == 0:
        raise PlanInputError(f"the actor has {f.flag('actor.num_nodes')} x "
                             f"{f.flag('actor.num_gpus_per_node')} = 0 GPUs; every OpenRLHF run "
                             "trains an actor: give it GPUs")
    old = f.version.startswith("v0.5.")
    remote = f.raw("reward.remote_url") or f.raw("train.agent_func_path")
    roles = {"actor": size["actor"]}
    if old or f.float("algo.kl.init_coef") > 0:
        roles["ref"] = size["ref"]
    if f.raw("algo.advantage.estimator") == "gae" or f.version == "v0.5.0":
        roles["critic"] = size["critic"]
    if not remote:
        roles["reward"] = size["reward"]
    empty = []
    # a colocated pair of different sizes is refused by an assert first (see _asserts)
    pairs = {"ref": ("actor", f.on("train.colocate_actor_ref") or f.on("train.colocate_all")),
             "critic": ("reward", f.on("train.colocate_critic_reward")),
             "reward": ("critic", f.on("train.colocate_critic_reward"))}
    for role in [r for r in roles if roles[r] == 0]:
        other, together = pairs.get(role, ("", False))
        if together and roles.get(other, 0) > 0:
            continue
        switch = {"ref": f"{f.flag('algo.kl.init_coef')} 0" + (
                      " (v0.6.0 and later; v0.5 always makes one)" if old else ""),
                  "critic": f"{f.flag('algo.advantage.estimator')} other than gae",
                  "reward": f"{f.flag('reward.remote_url')} or {f.flag('train.agent_func_path')}"}
        empty.append(Concern(
            "error", f"{role} is created ({switch[role].split(' ')[0]} asks for it) with "
            f"{f.flag(role + '.num_nodes')} x {f.flag(role + '.num_gpus_per_node')} = 0 GPUs: "
            f"OpenRLHF still starts its rank 0, with world size 0, and it dies in "
            "torch.distributed (\"TCPStore world size cannot be 0\").",
            f"give {role} GPUs, or do without it: {switch[role]}"))
    engines = f.int("vllm.num_engines") if f.raw("vllm.num_engines") is not None else 0
    if engines > 0:
        roles["vllm"] = bounded(engines * f.int("vllm.tensor_parallel_size"),
                                f"{f.flag('vllm.num_engines')} x "
                                f"{f.flag('vllm.tensor_parallel_size')}", 0, MAX_GPUS)
    return roles, empty


# estimators whose baseline is the prompt's group of samples: train_ppo_ray.py asserts more
# than one sample a prompt for them (from v0.5.3; RLOO alone before)
GROUP_BASELINE = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


def _asserts(f: Read, roles: dict[str, int]) -> list[Concern]:
    """What train_ppo_ray.py asserts about shapes before it creates anything."""
    out = []
    estimator = f.raw("algo.advantage.estimator")
    if estimator in GROUP_BASELINE and f.int("rollout.n_samples_per_prompt") <= 1:
        out.append(Concern("error", f"{f.flag('algo.advantage.estimator')} {estimator} with "
                           f"{f.flag('rollout.n_samples_per_prompt')} "
                           f"{f.int('rollout.n_samples_per_prompt')}: OpenRLHF asserts "
                           f"\"{estimator} requires n_samples_per_prompt > 1\" (its baseline is "
                           "the prompt's other samples) before placing anything.",
                           f"{f.flag('rollout.n_samples_per_prompt')} 2 or more"))
    colocate_all, sync = f.on("train.colocate_all"), not f.on("train.async_enable")
    if (f.on("train.colocate_actor_ref") or colocate_all) and "ref" in roles:
        a = (f.int("actor.num_nodes"), f.int("actor.num_gpus_per_node"))
        r = (f.int("ref.num_nodes"), f.int("ref.num_gpus_per_node"))
        if a != r:
            out.append(Concern("error", f"actor {a[0]}x{a[1]} and ref {r[0]}x{r[1]} are colocated "
                               "but differ: OpenRLHF asserts \"num_nodes and num_gpus_per_node "
                               "must be the same when colocate actor and ref model\".",
                               f"{f.flag('ref.num_nodes')} {a[0]} "
                               f"{f.flag('ref.num_gpus_per_node')} {a[1]}"))
    if "vllm" in roles and colocate_all and sync and roles["vllm"] != roles["actor"]:
        engines = roles["actor"] // max(1, f.int("vllm.tensor_parallel_size"))
        out.append(Concern("error", f"with {f.flag('train.colocate_all')} the vLLM engines share "
                           f"the actor's GPUs: OpenRLHF asserts actor GPUs ({roles['actor']}) == "
                           f"vllm_num_engines x vllm_tensor_parallel_size ({roles['vllm']}).",
                           f"{f.flag('vllm.num_engines')} {engines}"))
    if "critic" in roles and "reward" in roles and f.on("train.colocate_critic_reward"):
        c = (f.int("critic.num_nodes"), f.int("critic.num_gpus_per_node"))
        w = (f.int("reward.num_nodes"), f.int("reward.num_gpus_per_node"))
        if c != w:
            out.append(Concern("error", f"critic {c[0]}x{c[1]} and reward {w[0]}x{w[1]} are "
                               "colocated but differ: OpenRLHF asserts \"num_nodes and "
                               "num_gpus_per_node must be the same when colocate critic and "
                               "reward model\".", f"{f.flag('reward.num_gpus_per_node')} {c[1]}"))
    return out


def _groups(f: Read, roles: dict[str, int], findings: list[Concern]) -> list[Group]:
    """The placement groups of ``train()``, in its order."""
    groups: list[Group] = []
    shared: Group | None = None
    colocate_all, sync = f.on("train.colocate_all"), not f.on("train.async_enable")
    if f.on("train.colocate_actor_ref") or colocate_all:
        shared = Group("actor+ref", "PACK", [[] for _ in range(roles["actor"])],
                       f"{f.flag('actor.num_nodes')} x {f.flag('actor.num_gpus_per_node')}")
        groups.append(shared)
    if "vllm" in roles:
        tp = f.int("vllm.tensor_parallel_size")
        holders = [[f"vllm{k // tp}" + (f".tp{k % tp}" if tp > 1 else "")]
                   for k in range(roles["vllm"])]
        engines = {f"vllm{e} (tp {tp})": list(range(e * tp, (e + 1) * tp))
                   for e in range(roles["vllm"] // tp)} if tp > 1 else {}
        if shared is not None and colocate_all and sync:
            _join(shared, holders, "vllm", findings, f.flag("vllm.num_engines"))
            shared.together.update(engines)
        else:
            groups.append(Group("vllm", "PACK", holders, f"{f.flag('vllm.num_engines')} x "
                                f"{f.flag('vllm.tensor_parallel_size')}", together=engines))
    for role in ("actor", "ref"):
        if role in roles:
            _role(f, role, roles[role], shared, groups, findings)
    if not colocate_all:
        shared = None
    if "critic" in roles and "reward" in roles and f.on("train.colocate_critic_reward"):
        shared = Group("critic+reward", "PACK", [[] for _ in range(roles["critic"])],
                       f"{f.flag('critic.num_nodes')} x {f.flag('critic.num_gpus_per_node')}")
        groups.append(shared)
    for role in ("critic", "reward"):
        if role in roles:
            _role(f, role, roles[role], shared, groups, findings)
    return groups


def _role(f: Read, role: str, gpus: int, shared: Group | None, groups: list[Group],
          findings: list[Concern]) -> None:
    holders = [[f"{role}{r}"] for r in range(gpus)]
    sized = f"{f.flag(role + '.num_nodes')} x {f.flag(role + '.num_gpus_per_node')}"
    if shared is not None:
        _join(shared, holders, role, findings, sized)
    elif f.int(f"{role}.num_gpus_per_node") > 1:
        groups.append(Group(role, "PACK", holders, sized))
    else:  # RayActorGroup makes no group for 1 GPU a node: each rank is a 1-GPU actor
        groups.append(Group(f"{role} (1-GPU actors, no group)", "SPREAD", holders, sized))


def _join(shared: Group, holders: list[list[str]], role: str, findings: list[Concern],
          sized: str) -> None:
    """Put a role's ranks on a shared group's bundles, rank r on bundle r."""
    for r, h in enumerate(holders[: shared.gpus]):
        shared.holders[r].extend(h)
    if len(holders) > shared.gpus:
        findings.append(Concern("error", f"{role} has {len(holders)} ranks but shares the "
                                f"{shared.gpus}-bundle group {shared.name}: rank {shared.gpus} "
                                "asks for a bundle index the group does not have (Ray raises "
                                "\"invalid placement group bundle index\").",
                                f"{sized} = {shared.gpus}"))


def _batches(f: Read, roles: dict[str, int]) -> list[Concern]:
    """The sample-batch assert of train_ppo_ray.py and each role's DeepSpeed batch equation."""
    out = []
    ring, tp = f.int("ds.ring_attn_size"), f.int("ds.tensor_parallel_size")
    train, micro = f.int("train.batch_size"), f.int("train.micro_batch_size")
    samples = (f.int("rollout.n_samples_per_prompt") * f.int("rollout.batch_size")
               // max(1, f.int("rollout.micro_batch_size")))
    if samples < roles["actor"] // ring // tp:
        out.append(Concern("error", f"{samples} sample batches for {roles['actor'] // ring // tp} "
                           "actor processes: OpenRLHF asserts \"The number of sample batches must "
                           "be greater than or equal to the effective number of actor "
                           "processes\".", f"raise {f.flag('rollout.batch_size')} or lower "
                                           f"{f.flag('rollout.micro_batch_size')}"))
    dynamic = f.on("train.dynamic_batch_enable")
    for role in ("actor", "ref", "critic", "reward"):
        if role not in roles or (dynamic and role in ("actor", "critic")):
            continue
        if roles[role] % (ring * tp):
            out.append(Concern("error", f"{role}: {roles[role]} GPUs do not divide by ring "
                               f"attention x tensor parallel = {ring * tp} (its device mesh).",
                               f"{f.flag(role + '.num_gpus_per_node')}"))
            continue
        dp = roles[role] // (ring * tp)
        if train % (micro * dp) or train < micro * dp:
            fix = (f"{f.flag('train.batch_size')} a multiple of {micro * dp}, or "
                   f"{f.flag('train.micro_batch_size')}")
            out.append(Concern("error", f"{role}: train batch {train} is not a multiple of micro "
                               f"batch {micro} x {dp} data-parallel ranks: DeepSpeed asserts "
                               "train_batch_size == micro_batch_per_gpu * gradient_acc_step * "
                               "world_size.", fix))
    return out


def _notes(roles: dict[str, int]) -> list[str]:
    made = ", ".join(f"{r} {n}" for r, n in roles.items())
    return [f"roles created (GPUs): {made}",
            "colocated roles take 0.2 of a GPU each; vLLM engine i holds bundles [i*tp, (i+1)*tp)"]
