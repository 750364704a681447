"""Placement math, pure: which worker hosts which roles on which GPUs, checked before any start.

Global GPU ``g`` of a run lives on logical node ``g // gpus_per_node``. A *worker* is one Ray actor
(one process) holding one or more GPUs; in ``colocated`` mode one worker per GPU hosts every role
(a hybrid engine); in ``disaggregated`` mode each role range gets its own workers, and roles whose
ranges overlap share the workers of the GPUs they share (verl colocates actor and ref this way;
ROLL and RLinf layouts put a reward or rollout on part of the actor's GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config import RANGE_RE, TrainerConfig
from trainer.errors import PlacementError

TRAINING_ROLES = ("actor", "critic")
KNOWN_ROLES = ("actor", "rollout", "ref", "critic", "reward")


@dataclass(frozen=True)
class WorkerSlot:
    """One worker process: its logical node, its global GPU ids, and its rank in each role."""

    index: int
    node: int
    gpus: tuple[int, ...]
    ranks: dict[str, int]

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.ranks)


@dataclass(frozen=True)
class Plan:
    nnodes: int
    gpus_per_node: int
    mode: str
    workers: tuple[WorkerSlot, ...]
    dp: dict[str, int]
    warnings: tuple[str, ...] = field(default=())

    def of(self, role: str) -> list[WorkerSlot]:
        """Workers hosting ``role``, in rank order."""
        return sorted((w for w in self.workers if role in w.ranks), key=lambda w: w.ranks[role])

    def on_node(self, node: int) -> list[WorkerSlot]:
        return [w for w in self.workers if w.node == node]

    def gpu_roles(self, gpu: int) -> list[str]:
        """Roles resident on one global GPU."""
        return [r for w in self.workers if gpu in w.gpus for r in w.ranks]


def parse_range(text: str, where: str) -> tuple[int, ...]:
    """``"0-19"`` -> GPUs 0..19; ``"7"`` -> (7,); ``"0-3,8-11"`` -> both runs. Inclusive, as
    RLinf writes them; a GPU named twice is refused."""
    gpus: list[int] = []
    for part in str(text).split(","):
        m = RANGE_RE.match(part)
        if not m:
            raise PlacementError(f"{where}={text!r}: write inclusive GPU ranges 'a-b', "
                                 "comma-joined for more than one")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise PlacementError(f"{where}={text!r}: the range {part.strip()} runs backwards; "
                                 f"write '{hi}-{lo}'")
        gpus += range(lo, hi + 1)
    if len(set(gpus)) != len(gpus):
        raise PlacementError(f"{where}={text!r}: a GPU is named twice")
    return tuple(sorted(gpus))


def _runs(gpus: tuple[int, ...]) -> list[tuple[int, int]]:
    """Consecutive runs of GPU ids: (first, last) each."""
    runs: list[tuple[int, int]] = []
    for g in gpus:
        if runs and g == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], g)
        else:
            runs.append((g, g))
    return runs


def plan_placement(cfg: TrainerConfig) -> Plan:
    """Plan the workers of a run; raise :class:`PlacementError` naming the field if it can't fit."""
    pc = cfg.placement
    total = pc.nnodes * pc.gpus_per_node
    tp = cfg.rollout.tensor_parallel_size
    if pc.gpus_per_node % tp:
        raise PlacementError(
            f"rollout.tensor_parallel_size={tp} does not divide placement.gpus_per_node="
            f"{pc.gpus_per_node}: a tensor-parallel group must sit inside one node"
        )
    if pc.mode == "colocated":
        if pc.roles:
            raise PlacementError(
                "placement.roles is set but placement.mode=colocated: colocated roles share every"
                " GPU; drop placement.roles or set placement.mode=disaggregated"
            )
        ranges = {role: tuple(range(total)) for role in cfg.roles()}
    else:
        ranges = _role_ranges(cfg, total)
    plan = _build(cfg, ranges)
    check_batches(cfg, plan)
    return plan


def _role_ranges(cfg: TrainerConfig, total: int) -> dict[str, tuple[int, ...]]:
    pc = cfg.placement
    missing = [r for r in cfg.roles() if r not in pc.roles]
    unknown = [r for r in pc.roles if r not in KNOWN_ROLES]
    if unknown:
        raise PlacementError(f"placement.roles: unknown role(s) {unknown}; known: {KNOWN_ROLES}")
    if missing:
        raise PlacementError(
            f"placement.roles lacks {missing}: disaggregated mode needs a GPU range for each of "
            f"{cfg.roles()} (e.g. rollout: 0-3)"
        )
    ranges = {r: parse_range(t, f"placement.roles.{r}") for r, t in pc.roles.items()}
    asked = len({g for gpus in ranges.values() for g in gpus})
    for role, gpus in ranges.items():
        if gpus[-1] >= total:
            raise PlacementError(
                f"placement.roles.{role}={pc.roles[role]} lies outside the run's {total} GPUs "
                f"(GPU ids 0-{total - 1} = placement.nnodes={pc.nnodes} x "
                f"placement.gpus_per_node={pc.gpus_per_node}); the roles ask for {asked} GPUs "
                "in all"
            )
    tp = cfg.rollout.tensor_parallel_size
    for lo, hi in _runs(ranges["rollout"]):
        if lo % tp or (hi - lo + 1) % tp:
            raise PlacementError(
                f"placement.roles.rollout={pc.roles['rollout']}: with rollout.tensor_parallel_size"
                f"={tp} each range must start on and span a multiple of it"
            )
    return ranges


def _build(cfg: TrainerConfig, ranges: dict[str, tuple[int, ...]]) -> Plan:
    pc = cfg.placement
    tp = cfg.rollout.tensor_parallel_size
    per_gpu: dict[int, dict[str, int]] = {}
    dp: dict[str, int] = {}
    for role, gpus in ranges.items():
        step = tp if role == "rollout" else 1
        dp[role] = len(gpus) // step
        for rank, g in enumerate(gpus[::step]):
            per_gpu.setdefault(g, {})[role] = rank
    # a rollout engine with tp > 1 on GPUs of its own holds all tp of them in one worker; where
    # other roles sit on those GPUs (ranges that overlap), each GPU keeps its worker, and the
    # engine rides on the first, as in colocated mode
    workers: list[WorkerSlot] = []
    owned: set[int] = set()
    for g in sorted(per_gpu):
        if g in owned:
            continue
        ranks = per_gpu[g]
        alone = set(ranks) == {"rollout"} and not any(x in per_gpu for x in range(g + 1, g + tp))
        width = tp if pc.mode == "disaggregated" and alone else 1
        gpus = tuple(range(g, g + width))
        owned.update(gpus)
        workers.append(WorkerSlot(len(workers), g // pc.gpus_per_node, gpus, dict(ranks)))
    used = len(owned)
    total = pc.nnodes * pc.gpus_per_node
    warnings = ()
    if used < total:
        warnings = (f"the roles use {used} of the run's {total} GPUs; the rest stay idle",)
    return Plan(pc.nnodes, pc.gpus_per_node, pc.mode, tuple(workers), dp, warnings)


def check_batches(cfg: TrainerConfig, plan: Plan) -> None:
    """Data-parallel sizes must divide the batches, and micro-batches the per-rank batch."""
    prompts = cfg.data.prompts_per_step
    if prompts % plan.dp["rollout"]:
        raise PlacementError(
            f"data.prompts_per_step={prompts} does not split over {plan.dp['rollout']} rollout "
            f"engines: make it a multiple of {plan.dp['rollout']}"
        )
    rows = prompts * cfg.rollout.n_samples
    for role in TRAINING_ROLES:
        if role not in plan.dp:
            continue
        dp, mini = plan.dp[role], cfg.algo.mini_batches
        if rows % (dp * mini):
            raise PlacementError(
                f"{rows} sequences per step (data.prompts_per_step={prompts} x rollout.n_samples="
                f"{cfg.rollout.n_samples}) do not split over {role} dp={dp} x algo.mini_batches="
                f"{mini}"
            )
        per_rank = rows // (dp * mini)
        micro = getattr(cfg, role).micro_batch_size
        if per_rank % micro and micro < per_rank:
            raise PlacementError(
                f"{role}.micro_batch_size={micro} does not divide the {per_rank} sequences each "
                f"{role} rank gets per mini-batch: use a divisor of {per_rank}"
            )


def check_cluster(plan: Plan, node_gpus: list[float]) -> None:
    """Fail unless ``plan.nnodes`` alive nodes each have ``plan.gpus_per_node`` GPUs."""
    fit = [g for g in node_gpus if g >= plan.gpus_per_node]
    if len(fit) < plan.nnodes:
        raise PlacementError(
            f"placement asks for {plan.nnodes} nodes x {plan.gpus_per_node} GPUs = "
            f"{plan.nnodes * plan.gpus_per_node} GPUs; the cluster has {len(fit)} alive node(s) "
            f"with at least {plan.gpus_per_node} GPUs ({sum(node_gpus):g} GPUs on "
            f"{len(node_gpus)} nodes in all). Fix: lower placement.nnodes or "
            "placement.gpus_per_node, or add nodes"
        )


def largest_fit(cfg: TrainerConfig, node_gpus: list[float], min_gpus: int) -> TrainerConfig | None:
    """The config whose colocated placement is the largest (nodes x GPUs per node, no more than
    asked) that nodes with ``node_gpus`` hold and the batches split over, at least ``min_gpus``
    GPUs; more GPUs per node wins a tie (fewer nodes to talk across). None when nothing fits.
    The batches are the config's: the global batch, hence the samples consumed per step, stay."""
    pc = cfg.placement
    if pc.mode != "colocated":
        return None
    best, best_key = None, (0, 0)  # (GPUs, GPUs per node) of the best so far
    for n in range(pc.nnodes, 0, -1):
        for g in range(pc.gpus_per_node, 0, -1):
            if n * g < min_gpus or sum(1 for x in node_gpus if x >= g) < n:
                continue
            if (n * g, g) <= best_key:
                continue
            trial = cfg.model_copy(update={"placement": pc.model_copy(
                update={"nnodes": n, "gpus_per_node": g})})
            try:
                plan_placement(trial)
            except PlacementError:
                continue
            best, best_key = trial, (n * g, g)
    return best


def worker_bundles(plan: Plan, node: int) -> list[dict[str, float]]:
    """The placement-group bundles of one logical node: one bundle per worker on it."""
    return [{"GPU": float(len(w.gpus))} for w in plan.on_node(node)]
