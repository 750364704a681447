"""The fake-GPU memory ledger, pure: what each rank would hold on a real GPU, and the OOM it hits.

Per role on a GPU (bytes; ``P`` params, ``b`` bytes per weight, ZeRO stage ``z``, dp size ``d``):
- training roles (actor, critic): weights ``b*P`` (/d at z>=3), grads ``b*P`` (/d at z>=2, only
  while training), Adam fp32 master+m+v ``12*P`` (/d at z>=1), activations per micro-batch
  ``34*s*h*L`` (Korthikanti et al.) plus fp32 logits and their gradient ``8*s*V``;
- ref: weights, plus a no-grad forward (logits);
- rollout: weights / tp, plus the KV cache ``2*L*h*b*rows*len`` / tp (torch sampler); a vLLM
  engine takes ``gpu_memory_utilization`` of the GPU's capacity in all, as vLLM reserves it at
  start-up (its weights, then the KV cache in the rest of that share).
A GPU's peak is the largest of its phases: *generate* (all weights, optimizer states, KV cache),
*score* (the ref forward) and *train* (grads and activations); the KV cache stays resident after
generation only when ``rollout.free_cache_after_generate`` is off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlsim.contract import RESERVE_FILE
from trainer.config import TrainerConfig
from trainer.placement import Plan

if TYPE_CHECKING:
    from trainer.oom import SimulatedCudaOOM

GIB = 1024**3


@dataclass(frozen=True)
class Item:
    role: str
    what: str
    nbytes: float
    knob: str


def param_count(cfg: TrainerConfig) -> float:
    """Parameters of the GPT-2-shaped model (or ``memory.model_params_b`` when set)."""
    if cfg.memory.model_params_b is not None:
        return cfg.memory.model_params_b * 1e9
    m = cfg.model
    h = m.n_embd
    return m.vocab_size * h + m.n_positions * h + m.n_layer * (12 * h * h + 13 * h) + 2 * h


def _shape(cfg: TrainerConfig) -> tuple[float, float, float, float]:
    """(layers, hidden, vocab, sequence length), scaled to ``model_params_b`` when it is set."""
    m = cfg.model
    seq = 8 + cfg.rollout.response_length
    if cfg.memory.model_params_b is None:
        return m.n_layer, m.n_embd, m.vocab_size, seq
    # a model of P params with 12*L*h^2 ~= P at L = h / 128 (GPT-3 family proportions)
    h = (param_count(cfg) * 128 / 12) ** (1 / 3)
    return h / 128, h, 32000, seq


def role_items(cfg: TrainerConfig, plan: Plan, role: str, micro: dict[str, int],
               capacity: float) -> list[Item]:
    """What one rank of ``role`` holds on each of its GPUs (of ``capacity`` bytes), item by
    item."""
    P, b = param_count(cfg), cfg.memory.dtype_bytes
    L, h, V, s = _shape(cfg)
    if role in ("actor", "critic"):
        oc, d = getattr(cfg, role), plan.dp[role]
        z = oc.zero_stage if oc.engine == "deepspeed" else 0
        mb = micro[role]
        return [
            Item(role, "weights", b * P / (d if z >= 3 else 1), f"{role}.zero_stage"),
            Item(role, "optimizer", 12 * P / (d if z >= 1 else 1), f"{role}.zero_stage"),
            Item(role, "grads", b * P / (d if z >= 2 else 1), f"{role}.zero_stage"),
            Item(role, "activations", mb * s * (34 * h * L + 8 * V), f"{role}.micro_batch_size"),
        ]
    if role == "ref":
        mb = micro["actor"]
        return [
            Item(role, "weights", b * P, "placement.mode"),
            Item(role, "activations", mb * s * (4 * V + 2 * b * h), "actor.micro_batch_size"),
        ]
    if role == "rollout":
        rc, tp = cfg.rollout, cfg.rollout.tensor_parallel_size
        rows = cfg.data.prompts_per_step // plan.dp["rollout"] * rc.n_samples
        kv = 2 * L * h * b * rows * s / tp
        knob = "data.prompts_per_step"
        if rc.engine == "vllm":
            kv = max(0.0, rc.gpu_memory_utilization * capacity - b * P / tp)
            knob = "rollout.gpu_memory_utilization"
        return [Item(role, "weights", b * P / tp, "rollout.tensor_parallel_size"),
                Item(role, "kv_cache", kv, knob)]
    return []


def external_reserve_gb(run_dir: str, node_ip: str) -> float:
    """GiB that something outside the run holds on every GPU of ``node_ip``, read each time from
    ``<run_dir>/faults/gpu_reserve.json`` (``{"<ip>" or "*": GiB}``), where a harness that
    injects GPU memory pressure on fake GPUs writes it. 0 when the file is absent."""
    import json
    from pathlib import Path

    try:
        table = json.loads((Path(run_dir) / RESERVE_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return 0.0
    return float(table.get(node_ip, table.get("*", 0.0)))


def gpu_capacity(cfg: TrainerConfig, label_gb: float | None = None) -> float:
    gb = cfg.memory.gpu_memory_gb or label_gb or 80.0
    return gb * GIB


def phases(cfg: TrainerConfig, plan: Plan, gpu: int, micro: dict[str, int],
           capacity: float) -> dict[str, list[Item]]:
    """The allocations on one global GPU (of ``capacity`` bytes) in each phase, in the order
    they are made."""
    items = [i for role in plan.gpu_roles(gpu)
             for i in role_items(cfg, plan, role, micro, capacity)]
    resident = [i for i in items if i.what in ("weights", "optimizer")]
    kv = [i for i in items if i.what == "kv_cache"]
    gen = resident + kv
    kept = [] if cfg.rollout.free_cache_after_generate else kv
    score = resident + kept + [i for i in items if i.role == "ref" and i.what == "activations"]
    train = resident + kept
    trainers = {i.role for i in items if i.what == "grads"}
    # actor and critic train one after the other: the larger one sets the peak
    peak_role = max(trainers, key=lambda r: sum(i.nbytes for i in items if i.role == r
                                                and i.what in ("grads", "activations")),
                    default=None)
    train += [i for i in items if i.role == peak_role and i.what in ("grads", "activations")]
    return {"generate": gen, "score": score, "train": train}


def overflow(cfg: TrainerConfig, plan: Plan, gpu: int, micro: dict[str, int],
             capacity: float, reserve: float = 0.0) -> tuple[str, str] | None:
    """The first allocation on global GPU ``gpu`` that does not fit ``capacity`` in one of its
    phases, as (CUDA's wording of the OOM, the knob that would fix it); None when all fit."""
    for phase, items in phases(cfg, plan, gpu, micro, capacity).items():
        used = reserve
        for n, item in enumerate(items):
            if used + item.nbytes > capacity:
                return _message(cfg, plan, gpu, phase, items[:n], item, used, capacity, reserve,
                                micro), item.knob
            used += item.nbytes
    return None


def check_gpu(cfg: TrainerConfig, plan: Plan, gpu: int, micro: dict[str, int],
              capacity: float, reserve: float = 0.0) -> None:
    """Raise :class:`trainer.oom.SimulatedCudaOOM` if one of the GPU's phases does not fit
    ``capacity``."""
    if found := overflow(cfg, plan, gpu, micro, capacity, reserve):
        raise _oom(*found)


def _oom(message: str, knob: str) -> SimulatedCudaOOM:
    from trainer.oom import SimulatedCudaOOM  # torch: only once there is an OOM to raise

    oom = SimulatedCudaOOM(message)
    oom.knob = knob
    return oom


def _message(cfg, plan, gpu, phase, held, item, used, capacity, reserve, micro) -> str:
    node, local = divmod(gpu, plan.gpus_per_node)
    parts = ", ".join(f"{i.role} {i.what} {i.nbytes / GIB:.2f} GiB" for i in held) or "nothing"
    knob = item.knob
    if knob.endswith("micro_batch_size"):
        role = knob.split(".")[0]
        fix = f"reduce {knob} (now {micro[role]}) or set {role}.auto_micro_batch=true"
    elif knob.endswith("zero_stage") and getattr(cfg, item.role).engine == "ddp":
        fix = (f"DDP keeps a full copy on every GPU: set {item.role}.engine=deepspeed with "
               f"{item.role}.zero_stage>=1, or add GPUs to the role")
    elif knob.endswith("zero_stage"):
        fix = f"raise {knob} (now {getattr(cfg, item.role).zero_stage}) or add GPUs to the role"
    else:
        fix = f"lower {knob}"
    if len({i.role for i in held} | {item.role}) > 1 and plan.mode == "colocated":
        fix += ", or set placement.mode=disaggregated (roles share this GPU)"
    return (
        f"CUDA out of memory. Tried to allocate {item.nbytes / GIB:.2f} GiB. GPU {local} has a "
        f"total capacity of {capacity / GIB:.2f} GiB of which {(capacity - used) / GIB:.2f} GiB "
        f"is free. Of the allocated memory {(used - reserve) / GIB:.2f} GiB is held by this run "
        f"({parts}) and {reserve / GIB:.2f} GiB by others. "
        f"[rlsim memory ledger: role={item.role} node={node} gpu={local} (global {gpu}) "
        f"phase={phase} allocating {item.what}] Fix: {fix}."
    )


def fit(cfg: TrainerConfig, plan: Plan, capacity: float) -> tuple[dict[str, int], list[str]]:
    """Check every GPU of the plan; with ``auto_micro_batch``, halve micro-batches until they fit.

    Returns the micro-batch sizes to use and what was changed; raises the OOM otherwise.
    """
    micro, changes, found = _fit(cfg, plan, capacity)
    if found:
        raise _oom(*found)
    return micro, changes


def fits(cfg: TrainerConfig, plan: Plan, capacity: float) -> bool:
    """Whether :func:`fit` would find room (it raises, and imports torch to, when not)."""
    return _fit(cfg, plan, capacity)[2] is None


def _fit(cfg: TrainerConfig, plan: Plan, capacity: float):
    """The micro-batch sizes, the changes made, and the overflow that stopped it (or None)."""
    rows = cfg.data.prompts_per_step * cfg.rollout.n_samples
    micro = {r: min(getattr(cfg, r).micro_batch_size,
                    max(1, rows // (plan.dp.get(r, 1) * cfg.algo.mini_batches)))
             for r in ("actor", "critic")}
    reserve = cfg.memory.reserve_gb * GIB
    changes: list[str] = []
    gpus = sorted({g for w in plan.workers for g in w.gpus})
    while True:
        found = next(filter(None, (overflow(cfg, plan, g, micro, capacity, reserve)
                                   for g in gpus)), None)
        if found is None:
            return micro, changes, None
        role, _, knob = found[1].partition(".")
        if knob != "micro_batch_size" or not getattr(cfg, role).auto_micro_batch \
                or micro[role] == 1:
            return micro, changes, found
        changes.append(f"{role}.micro_batch_size {micro[role]} -> {micro[role] // 2}")
        micro[role] //= 2
