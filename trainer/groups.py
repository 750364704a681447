"""Role groups on Ray: placement groups per node, workers on their bundles, bounded calls.

:class:`Roles` is what an algorithm's ``step`` talks to: ``generate``, ``reward``, ``logprobs``,
``values``, ``train``, ``sync_weights``. It splits a batch over a role's ranks and gathers the
answers, failing fast: the first dead worker raises :class:`WorkerLost` at once, a call that runs
past ``fault_tolerance.step_timeout_s`` raises :class:`StepTimeout`. Nothing here waits unbounded.
"""

from __future__ import annotations

import contextlib
import time

import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlsim.contract import HEAD_RESOURCE, MEMORY_LABEL
from trainer.checkpoint import storage_refused
from trainer.config import TrainerConfig
from trainer.errors import (
    ActorsNeverStarted,
    CheckpointWriteFailed,
    CollectiveError,
    ResourceTimeout,
    StepTimeout,
    TrainerError,
    WorkerLost,
    first_line,
)
from trainer.memory import gpu_capacity
from trainer.placement import TRAINING_ROLES, Plan, check_cluster, worker_bundles
from trainer.worker import Worker


def label_memory_gb(node: dict) -> float | None:
    """GiB per GPU that a node's ``rlsim-gpu-memory-gb`` label declares (None: no label)."""
    label = node.get("Labels", {}).get(MEMORY_LABEL)
    return float(label) if label else None


def alive_gpu_nodes() -> list[dict]:
    """Alive nodes with GPUs, head first, then by address (a stable logical order)."""
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0]
    head = [n for n in nodes if n["Resources"].get(HEAD_RESOURCE)]
    rest = sorted((n for n in nodes if n not in head), key=lambda n: n["NodeManagerAddress"])
    return head + rest


def wait_for_nodes(plan: Plan, timeout: float) -> list[dict]:
    """Wait (bounded) until ``plan.nnodes`` alive nodes each have ``plan.gpus_per_node`` GPUs."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = [n for n in alive_gpu_nodes() if n["Resources"]["GPU"] >= plan.gpus_per_node]
        if len(nodes) >= plan.nnodes:
            return nodes[: plan.nnodes]
        if time.monotonic() > deadline:
            try:
                check_cluster(plan, [n["Resources"].get("GPU", 0) for n in alive_gpu_nodes()])
            except TrainerError as e:
                raise ResourceTimeout(f"after {timeout:g} s (fault_tolerance.resources_timeout_s):"
                                      f" {e}") from None
            raise ResourceTimeout(f"nodes did not become available within {timeout:g} s")
        time.sleep(0.2)  # polling ray.nodes(): Ray has no push notification for node joins


class Roles:
    """The workers of one attempt. Use as a context manager: exit kills workers and PGs."""

    def __init__(self, cfg: TrainerConfig, plan: Plan, micro: dict[str, int]) -> None:
        self.cfg, self.plan, self.micro = cfg, plan, micro
        self.ft = cfg.fault_tolerance
        self.pgs: list = []
        self.workers: list = []
        self.where: list[dict] = []
        self.nodes: list[dict] = []
        self.timings: dict[str, float] = {}  # bring-up, seconds since start() began

    # -- bring-up ------------------------------------------------------------------------------
    def start(self) -> Roles:
        t0 = time.monotonic()
        self.nodes = wait_for_nodes(self.plan, self.ft.resources_timeout_s)
        deadline = time.monotonic() + self.ft.init_timeout_s
        self.timings = {"nodes_s": time.monotonic() - t0}
        for k, node in enumerate(self.nodes):
            bundles = worker_bundles(self.plan, k)
            selector = [{"ray.io/node-id": node["NodeID"]}] * len(bundles)
            self.pgs.append(placement_group(bundles, strategy="STRICT_PACK",
                                            bundle_label_selector=selector, name=f"trainer-n{k}"))
        self._get([pg.ready() for pg in self.pgs], deadline, "placement groups", ResourceTimeout)
        self.timings["placement_groups_s"] = time.monotonic() - t0
        cfg = self.cfg.model_dump()
        for slot in self.plan.workers:
            capacity = gpu_capacity(self.cfg, label_memory_gb(self.nodes[slot.node]))
            bundle = self.plan.on_node(slot.node).index(slot)
            actor = ray.remote(Worker).options(
                num_cpus=0, num_gpus=len(slot.gpus), max_restarts=0, max_concurrency=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pgs[slot.node], placement_group_bundle_index=bundle),
            ).remote(cfg, self.plan, slot, self.micro, capacity)
            self.workers.append(actor)
        self._setup(deadline)
        self.timings["workers_ready_s"] = time.monotonic() - t0
        self.timings = {k: round(v, 3) for k, v in self.timings.items()}
        return self

    def _setup(self, deadline: float) -> None:
        """Each set of workers training the same roles forms one process group (a "world"):
        all workers when colocated; actor and critic apart when disaggregated on other GPUs."""
        worlds: dict[tuple[str, ...], list] = {}
        for slot in self.plan.workers:
            trains = tuple(r for r in TRAINING_ROLES if r in slot.ranks)
            if trains:
                worlds.setdefault(trains, []).append(slot)
        join: dict[int, tuple] = {}
        for trains, slots in worlds.items():
            slots.sort(key=lambda s: s.ranks[trains[0]])
            store = self._get([self.workers[slots[0].index].open_store.remote()], deadline,
                              "rendezvous store", ActorsNeverStarted)[0]
            for rank, slot in enumerate(slots):
                join[slot.index] = (store, rank, len(slots))
        refs = [self.workers[s.index].setup.remote(*join.get(s.index, (None, 0, 1)))
                for s in self.plan.workers]
        self.where = self._get(refs, deadline, "worker set-up", ActorsNeverStarted)

    def __enter__(self) -> Roles:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every worker and remove every placement group; safe to call twice."""
        for w in self.workers:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(w, no_restart=True)
        for pg in self.pgs:
            with contextlib.suppress(Exception):  # its node is gone
                remove_placement_group(pg)
        self.workers, self.pgs = [], []

    # -- bounded, fail-fast calls ----------------------------------------------------------------
    def _get(self, refs: list, deadline: float, what: str, on_timeout=StepTimeout) -> list:
        index = {ref: i for i, ref in enumerate(refs)}
        results: list = [None] * len(refs)
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            done, pending = ray.wait(pending, num_returns=1, timeout=max(left, 0))
            if not done:
                raise on_timeout(f"{what}: {len(pending)} of {len(refs)} calls still running after"
                                 f" the deadline (fault_tolerance.step_timeout_s / init_timeout_s)")
            ref = done[0]
            results[index[ref]] = self._result(ref, what)
        return results

    def _result(self, ref, what: str):
        try:
            return ray.get(ref, timeout=0)
        except RayActorError as e:
            raise WorkerLost(f"{what}: a worker died ({first_line(e)})") from None
        except RayTaskError as e:
            cause = e.cause if isinstance(e.cause, BaseException) else None
            if isinstance(cause, TrainerError):
                raise cause from None
            if isinstance(cause, RuntimeError) and "gloo" in str(cause).lower():
                raise CollectiveError(f"{what}: {first_line(cause)}") from None
            if storage_refused(cause):
                raise CheckpointWriteFailed(f"{what}: {first_line(cause)}") from None
            raise
        except GetTimeoutError:  # not expected after ray.wait said done
            raise StepTimeout(f"{what}: result not ready") from None

    def call(self, role: str, method: str, shards: list[tuple] | None = None,
             what: str | None = None) -> list:
        """Call ``method`` on every worker of ``role`` (rank order), rank i with ``shards[i]``."""
        slots = self.plan.of(role)
        args = shards or [()] * len(slots)
        refs = [getattr(self.workers[s.index], method).remote(*a) for s, a in
                zip(slots, args, strict=True)]
        deadline = time.monotonic() + self.ft.step_timeout_s
        return self._get(refs, deadline, what or f"{role}.{method}")

    # -- what algorithms call ------------------------------------------------------------------
    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        n = self.plan.dp["rollout"]
        ps = prompts.chunk(n)
        ss = [seeds[i * len(seeds) // n : (i + 1) * len(seeds) // n] for i in range(n)]
        return torch.cat(self.call("rollout", "generate", list(zip(ps, ss, strict=True))))

    def reward(self, prompts: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
        role = "reward" if "reward" in self.plan.dp else "rollout"
        n = self.plan.dp[role]
        return torch.cat(self.call(role, "reward", list(zip(prompts.chunk(n), seqs.chunk(n),
                                                             strict=True))))

    def _split_call(self, role: str, method: str, seqs: torch.Tensor, *lead) -> torch.Tensor:
        n = self.plan.dp[role]
        return torch.cat(self.call(role, method, [(*lead, c) for c in seqs.chunk(n)]))

    def logprobs(self, role: str, seqs: torch.Tensor) -> torch.Tensor:
        return self._split_call(role, "logprobs", seqs, role)

    def values(self, seqs: torch.Tensor) -> torch.Tensor:
        return self._split_call("critic", "values", seqs)

    def train(self, role: str, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        n = self.plan.dp[role]
        shards = [(role, {k: v.chunk(n)[i] for k, v in batch.items()}) for i in range(n)]
        stats = self.call(role, "train", shards)
        return {k: sum(s[k] for s in stats) / n for k in stats[0]}

    def sync_weights(self) -> None:
        """Actor -> every rollout engine, through the object store (no copy via the driver)."""
        states = [self.workers[s.index].export_weights.remote() for s in self.plan.of("actor")]
        deadline = time.monotonic() + self.ft.step_timeout_s
        self._get(states, deadline, "actor.export_weights")
        refs = [self.workers[s.index].load_weights.remote(states[0])
                for s in self.plan.of("rollout")]
        self._get(refs, deadline, "rollout.load_weights")

    def save(self, path: str) -> None:
        self.call_all("save", path)

    def load(self, path: str) -> None:
        self.call_all("load", path)

    def listings(self, path: str) -> dict[str, list[str]]:
        """Node address -> the files its workers see under ``path`` (after a save)."""
        seen: dict[str, set[str]] = {}
        for ip, files in self.call_all("listing", path):
            seen.setdefault(ip, set()).update(files)
        return {ip: sorted(files) for ip, files in seen.items()}

    def call_all(self, method: str, *args) -> list:
        refs = [getattr(w, method).remote(*args) for w in self.workers]
        return self._get(refs, time.monotonic() + self.ft.step_timeout_s, f"workers.{method}")
