"""A ROLL pipeline config (YAML) as ROLL places it. Rules from alibaba/ROLL (commit 8eb27cc2, and
its releases v0.1.0 to v0.3.0 where they differ):

- roll/configs/worker_config.py ``WorkerConfig.__post_init__``: a role's ``device_mapping`` is a
  string ROLL passes to Python's ``eval`` (``list(range(0,8))``): global GPU indices; its GPUs per
  worker are 1 for megatron and fsdp2 strategies, tensor x pipeline parallel for vllm, the YAML
  ``num_gpus_per_worker`` for sglang and hf_infer; the mapping's length must divide by it.
- roll/configs/base_config.py: ``num_gpus_per_node`` is replaced by the GPUs the driver sees
  (from v0.1.3; v0.1.0 and v0.1.1 take the YAML's, default 8, and use only nodes with at least
  that many) and ``num_nodes`` by ceil((largest index + 1) / GPUs per node).
- roll/distributed/scheduler/resource_manager.py: one placement group per node, one bundle of
  the whole node's GPUs; index i is GPU i % G of node i // G; its asserts on node and GPU counts.
- roll/distributed/executor/model_update_group.py (from v0.2.0): the training and inference
  mappings must each be contiguous; roll/utils/config_utils.py: megatron's model-parallel and
  batch divisibility.

rlsim evaluates ``device_mapping`` itself, never with ``eval``: list literals, ``list(...)``,
``range(...)`` with whole numbers and ``+`` between lists.
"""

from __future__ import annotations

import ast
import math

import yaml

from rlsim.files import FileRefused, read_file
from rlsim.plan.model import (
    MAX_GPUS,
    Concern,
    Group,
    Layout,
    NodeCapacity,
    PlanInputError,
    whole,
)

RELEASES = ("v0.1.0", "v0.1.1", "v0.1.3", "v0.2.0", "v0.2.1", "v0.3.0")
YAML_GPUS = ("v0.1.0", "v0.1.1")  # num_gpus_per_node from the YAML, not the driver's node
CONTIGUOUS = ("v0.2.0", "v0.2.1", "v0.3.0")  # ModelUpdateGroup asserts contiguous mappings
ROLES = ("actor_train", "actor_infer", "reference", "critic", "reward", "reward_model",
         "validation", "teacher", "student_train", "student_infer")
ONE_GPU = ("megatron_train", "megatron_infer", "fsdp2_train", "fsdp2_infer")


def device_indices(text, where: str) -> list[int]:
    """A ``device_mapping`` string's GPU indices, evaluated safely (PlanInputError otherwise)."""
    if not isinstance(text, str):
        raise PlanInputError(f"{where}: {text!r} is not a string; ROLL evaluates device_mapping "
                             "as Python and fails on a YAML list; fix: quote it, e.g. "
                             "device_mapping: \"[0, 1]\" or list(range(0,8))")
    try:
        value = _eval(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError) as e:
        raise PlanInputError(f"{where}: {text!r} is not a list of GPU indices ({e}); fix: write "
                             "e.g. list(range(0,8)) or \"[0, 1, 2, 3]\"") from None
    if not all(isinstance(i, int) and i >= 0 for i in value):
        raise PlanInputError(f"{where}: {text!r} must give whole GPU indices >= 0")
    return value


def _eval(node: ast.AST) -> list[int]:
    if isinstance(node, ast.List | ast.Tuple):
        return [_int(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _at_most(_eval(node.left) + _eval(node.right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "list" and len(node.args) == 1:
            return _eval(node.args[0])
        if node.func.id == "range" and 1 <= len(node.args) <= 3:
            return list(_at_most(range(*(_int(a) for a in node.args))))
    raise ValueError("only list literals, list(...), range(...) and + are read")


def _at_most(indices):
    if len(indices) > MAX_GPUS:
        raise ValueError(f"{len(indices)} GPUs, more than the {MAX_GPUS} rlsim plans")
    return indices


def _int(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        if abs(node.value) > MAX_GPUS:  # a GPU index (or range bound) past any cluster
            raise ValueError(f"{node.value} is past the {MAX_GPUS} GPUs rlsim plans")
        return node.value
    raise ValueError("only whole numbers are read")


def load(path: str) -> dict:
    try:
        data = yaml.safe_load(read_file(path, 1 << 20, follow=True).decode())
    except FileRefused as e:
        raise PlanInputError(f"{e}; give the YAML config") from None
    except OSError as e:
        raise PlanInputError(f"{path}: cannot read it ({e.strerror})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise PlanInputError(f"{path}: not YAML{where} ({str(e).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise PlanInputError(f"{path}: not text (a binary file?); give the YAML config") from None
    if not isinstance(data, dict):
        raise PlanInputError(f"{path}: a ROLL or RLinf config is a YAML mapping")
    return data


def _workers(data: dict) -> dict[str, dict]:
    """Every role config with a device mapping, ``rewards.<name>`` included."""
    found = {r: data[r] for r in ROLES if isinstance(data.get(r), dict)}
    for name, reward in (data.get("rewards") or {}).items():
        if isinstance(reward, dict):
            found[f"rewards.{name}"] = reward
    return {r: c for r, c in found.items() if c.get("device_mapping") not in (None, "", "[]")}


def _nonempty(mapped: dict[str, list[int]]) -> dict[str, list[int]]:
    """Roles whose mapping names GPUs (``list(range(0,0))`` is a CPU-only role, as ROLL takes
    an empty mapping)."""
    return {r: m for r, m in mapped.items() if m}


def _per_worker(role: str, cfg: dict) -> int:
    args = cfg.get("strategy_args") or {}
    strategy, conf = args.get("strategy_name"), args.get("strategy_config") or {}
    if strategy in ONE_GPU:
        return 1
    if strategy == "vllm":
        return (whole(conf.get("tensor_parallel_size", 1), f"{role}.tensor_parallel_size")
                * whole(conf.get("pipeline_parallel_size", 1), f"{role}.pipeline_parallel_size"))
    return whole(cfg.get("num_gpus_per_worker", 1), f"{role}.num_gpus_per_worker")


def layout(path: str, nodes: list[NodeCapacity], release: str | None = None) -> Layout:
    if release is not None and release not in RELEASES:
        raise PlanInputError(f"--release {release}: rlsim knows ROLL's rules of "
                             f"{', '.join(RELEASES)}; fix: one of those")
    judged = release or RELEASES[-1]
    data = load(path)
    declared = data.get("num_gpus_per_node")
    if judged in YAML_GPUS:
        per_node = whole(declared if declared is not None else 8, "num_gpus_per_node", 1)
    else:
        per_node = nodes[0].gpus if nodes else 0
    if per_node <= 0:
        raise PlanInputError("ROLL indexes GPUs node by node: the cluster's nodes need GPUs")
    findings: list[Concern] = []
    mapped: dict[str, list[int]] = {}
    workers = _workers(data)
    if data.get("adv_estimator", "gae") != "gae":
        workers.pop("critic", None)  # the pipeline makes a critic for GAE only
    for role, cfg in workers.items():
        mapped[role] = device_indices(cfg["device_mapping"], f"{path}: {role}.device_mapping")
        k = _per_worker(role, cfg)
        if k and len(mapped[role]) % k:
            findings.append(Concern("error", f"{role}: len(device_mapping)={len(mapped[role])} "
                                    f"must be divisible by num_gpus_per_worker={k} (ROLL asserts "
                                    "it).", f"{role}.device_mapping"))
        elif k > 1:
            findings += _spans(role, mapped[role], k, per_node)
    mapped = _nonempty(mapped)
    if not mapped:
        raise PlanInputError(f"{path}: no role has a device_mapping (actor_train, actor_infer, "
                             "reference, ...); is this a ROLL pipeline config?")
    for role in ("actor_train", "actor_infer"):
        m = mapped.get(role)
        if m and m != list(range(min(m), max(m) + 1)) and judged in CONTIGUOUS:
            findings.append(Concern("error", f"{role}: train_devices/infer_devices {m} must be "
                                    "continuous (ROLL's model update between them asserts it).",
                                    f"{role}.device_mapping"))
    findings += _megatron(data, mapped.get("actor_train"))
    need = max(1, math.ceil((max(max(m) for m in mapped.values()) + 1) / per_node))
    notes = [f"rules of ROLL {judged}" + (" (--release)" if release else " (the newest)"),
             *(f"{r}: GPUs {_ranges(m)}" for r, m in mapped.items())]
    if judged in YAML_GPUS:
        notes.append(f"num_gpus_per_node: {per_node} from the YAML (ROLL {judged}; from v0.1.3 "
                     "the driver's node's GPUs replace it)")
    elif declared not in (None, per_node):
        notes.append(f"num_gpus_per_node: {declared} in the YAML is replaced by the GPUs the "
                     f"driver's node has ({per_node} here), as ROLL does from v0.1.3")
    groups = [Group(f"node {n}", "NODE",
                    [[r for r, m in mapped.items() if n * per_node + g in m]
                     for g in range(per_node)],
                    "the largest device_mapping index", node=n,
                    ray_bundles=[{"GPU": float(per_node)}])
              for n in range(need)]
    eligible = [i for i, n in enumerate(nodes) if n.gpus >= per_node]
    if need > len(eligible):
        findings.append(Concern("error", f"the mappings reach GPU {need * per_node - 1}: ROLL "
                                f"needs {need} nodes of {per_node} GPUs; \"The Ray clusters"
                                f"(ray_num_nodes: {len(eligible)}) cannot meet the required "
                                f"number of nodes (`num_nodes`{need}).\"",
                                "lower the device_mapping indices, or add nodes"
                                + (" (or num_gpus_per_node)" if judged in YAML_GPUS else "")))
    else:  # ROLL takes the eligible nodes in order, one node-sized bundle each
        for group, node in zip(groups, eligible, strict=False):
            group.node = node
    return Layout("ROLL", f"ROLL {judged} rules", [
        "roll/configs/worker_config.py", "roll/configs/base_config.py",
        "roll/distributed/scheduler/resource_manager.py", "roll/utils/config_utils.py"],
        groups, findings, notes)


def _spans(role: str, m: list[int], k: int, per_node: int) -> list[Concern]:
    out = []
    for w in range(len(m) // k):
        gpus = m[w * k:(w + 1) * k]
        nodes = sorted({g // per_node for g in gpus})
        if len(nodes) > 1 and k <= per_node:
            out.append(Concern("warning", f"{role} worker {w} (GPUs {gpus}) spans nodes "
                               f"{nodes}: its tensor-parallel traffic crosses the network.",
                               f"{role}.device_mapping aligned to nodes of {per_node}"))
    return out


def _megatron(data: dict, m: list[int] | None) -> list[Concern]:
    cfg = data.get("actor_train") or {}
    args = cfg.get("strategy_args") or {}
    if not m or args.get("strategy_name") != "megatron_train":
        return []
    conf = args.get("strategy_config") or {}
    tp, pp, cp = (whole(conf.get(k, 1), f"actor_train.{k}")
                  for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                            "context_parallel_size"))
    if len(m) % (tp * pp * cp):
        return [Concern("error", f"Total GPUs ({len(m)}) must be divisible by model parallel size "
                        f"({tp * pp * cp} = TP:{tp} x PP:{pp} x CP:{cp}) (ROLL's megatron "
                        "check).", "actor_train.device_mapping or its strategy_config")]
    dp, batch = len(m) // (tp * pp * cp), data.get("rollout_batch_size")
    if isinstance(batch, int) and batch % dp:
        return [Concern("error", f"Rollout Batch Size ({batch}) must be divisible by data "
                        f"parallel size ({dp}) (ROLL's megatron check).", "rollout_batch_size")]
    return []


def _ranges(m: list[int]) -> str:
    runs, start = [], m[0]
    for a, b in zip(m, m[1:] + [None], strict=True):
        if b != a + 1:
            runs.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return ",".join(runs)
