"""Role groups on Ray: placement groups per node, workers on their bundles, bounded calls.

:class:`Roles` is what an algorithm's ``step`` talks to: ``generate``, ``reward``, ``logprobs``,
``values``, ``train``, ``sync_weights``. It splits a batch over a role's ranks and gathers the
answers, failing fast: the first dead worker raises :class:`WorkerLost` at once, a call that runs
past ``fault_tolerance.step_timeout_s`` raises :class:`StepTimeout`. Nothing here waits unbounded.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError
from ray.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlsim.contract import MEMORY_LABEL
from rlsim.ray_internals.nodes import HEAD_RESOURCE
from trainer.checkpoint import storage_refused
from trainer.config import TrainerConfig
from trainer.errors import (
    ActorsNeverStarted,
    CheckpointWriteFailed,
    CollectiveError,
    ResourceTimeout,
    StepTimeout,
    TrainerError,
    WeightSyncTimeout,
    WorkerLost,
    first_line,
)
from trainer.memory import gpu_capacity
from trainer.placement import TRAINING_ROLES, Plan, check_cluster, worker_bundles
from trainer.worker import Worker

WATCH_S = 1.0  # how often idle workers are asked whether they live, while others are waited on
HUNG_S = 1.0  # past a deadline, how long a busy worker has to answer alive before it counts as hung
# the share of a node's own resource (node:<address>, 1.0 per node) each bundle takes: enough
# to pin it there, small enough for any number of bundles
NODE_SHARE = 0.001


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
        self.events = None  # the driver's event log: events(type, **fields)

    # -- bring-up ------------------------------------------------------------------------------
    def start(self) -> Roles:
        t0 = time.monotonic()
        self.nodes = wait_for_nodes(self.plan, self.ft.resources_timeout_s)
        deadline = time.monotonic() + self.ft.init_timeout_s
        self.timings = {"nodes_s": time.monotonic() - t0}
        for k, node in enumerate(self.nodes):
            # pinned to its node by the node's own resource, node:<address>, which every Ray
            # release sets (a label selector on ray.io/node-id is ignored by Ray 2.48, whose
            # raylets set no such label: there the groups landed on any node with room)
            pin = {f"node:{node['NodeManagerAddress']}": NODE_SHARE}
            bundles = [{**b, **pin} for b in worker_bundles(self.plan, k)]
            self.pgs.append(placement_group(bundles, strategy="STRICT_PACK",
                                            name=f"trainer-n{k}"))
        ready = [pg.ready() for pg in self.pgs]
        try:
            self._get(ready, deadline, "placement groups", ResourceTimeout)
        except ResourceTimeout:
            self._placed_but_not_ready(ready)
            raise
        self.timings["placement_groups_s"] = time.monotonic() - t0
        cfg = self.cfg.model_dump()
        for slot in self.plan.workers:
            capacity = gpu_capacity(self.cfg, label_memory_gb(self.nodes[slot.node]))
            bundle = self.plan.on_node(slot.node).index(slot)
            actor = ray.remote(concurrency_groups={"watch": 1})(Worker).options(
                num_cpus=0, num_gpus=len(slot.gpus), max_restarts=0, max_concurrency=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pgs[slot.node], placement_group_bundle_index=bundle),
            ).remote(cfg, self.plan, slot, self.micro, capacity)
            self.workers.append(actor)
        self._setup(deadline)
        self.timings["workers_ready_s"] = time.monotonic() - t0
        self.timings = {k: round(v, 3) for k, v in self.timings.items()}
        return self

    def _placed_but_not_ready(self, ready: list) -> None:
        """After the wait for the placement groups ran out: when every group not ready was
        placed all the same (the GCS says CREATED), what did not come is the readiness check
        Ray runs as a task in a worker of the group's node (Ray 2.48 does): a worker there did
        not start, raised as :class:`ActorsNeverStarted` naming the node and its ranks. A group
        that was not placed is the caller's ResourceTimeout."""
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=0)
        late = [k for k, ref in enumerate(ready) if ref not in done]
        if not late or any(placement_group_table(self.pgs[k]).get("state") != "CREATED"
                           for k in late):
            return
        stuck = [self.describe(slot.index) for k in late for slot in self.plan.workers
                 if slot.node == k]
        where = ", ".join(self.nodes[k]["NodeManagerAddress"] for k in late)
        error = ActorsNeverStarted(
            f"placement groups: placed, but the readiness check Ray runs in a worker of each "
            f"did not return on {where}, so its workers cannot start: {'; '.join(stuck)} "
            "(fault_tolerance.init_timeout_s)")
        error.call, error.stuck = "placement groups", stuck
        error.none_answered = len(late) == len(ready)
        raise error

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
                              "rendezvous store", ActorsNeverStarted,
                              owners=[slots[0].index], setting="fault_tolerance.init_timeout_s")[0]
            for rank, slot in enumerate(slots):
                join[slot.index] = (store, rank, len(slots))
        refs = [self.workers[s.index].setup.remote(*join.get(s.index, (None, 0, 1)))
                for s in self.plan.workers]
        self.where = self._get(refs, deadline, "worker set-up", ActorsNeverStarted,
                               owners=[s.index for s in self.plan.workers],
                               setting="fault_tolerance.init_timeout_s")

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
    def describe(self, index: int) -> str:
        """``rollout rank 0 (worker 2 on 127.77.0.3)``: a worker as an error names it."""
        slot = self.plan.workers[index]
        ip = next((w["ip"] for w in self.where if w.get("index") == index), None)
        if ip is None and slot.node < len(self.nodes):  # not set up yet: where it was placed
            ip = self.nodes[slot.node]["NodeManagerAddress"]
        roles = ", ".join(f"{r} rank {k}" for r, k in slot.ranks.items())
        return f"{roles} (worker {index} on " + (ip or f"logical node {slot.node}") + ")"

    def _get(self, refs: list, deadline: float, what: str, on_timeout=StepTimeout,
             owners: list[int] | None = None,
             setting: str = "fault_tolerance.step_timeout_s / init_timeout_s") -> list:
        """The results of ``refs`` (the calls of ``what``, made on workers ``owners``), failing
        fast: a worker that dies, the one called or an idle one, raises WorkerLost at once; past
        ``deadline``, ``on_timeout`` names the calls still running. Idle workers are asked
        whether they live every WATCH_S while the others are waited on."""
        index = {ref: i for i, ref in enumerate(refs)}
        results: list = [None] * len(refs)
        pending = list(refs)
        busy = set(owners or [])
        idle = [i for i in range(len(self.workers)) if i not in busy] if owners else []
        pings: dict = {}
        next_ping = time.monotonic()
        while pending:
            now = time.monotonic()
            if idle and now >= next_ping:
                asked = set(pings.values())
                pings.update({self.workers[i].alive.remote(): i for i in idle if i not in asked})
                next_ping = now + WATCH_S
            left = deadline - now
            wait = min(left, next_ping - now) if idle else left
            done, _ = ray.wait(pending + list(pings), num_returns=1, timeout=max(wait, 0))
            if not done:
                if time.monotonic() < deadline:
                    continue
                stuck = [owners[index[r]] for r in pending] if owners else []
                hung = self._not_answering(stuck)
                error = on_timeout(
                    f"{what}: {len(pending)} of {len(refs)} calls still running after the deadline"
                    + (f": {'; '.join(map(self.describe, stuck))}" if stuck else "")
                    + (f"; not answering at all: {'; '.join(map(self.describe, hung))}"
                       if hung else "") + f" ({setting})")
                error.call, error.stuck = what, [self.describe(i) for i in hung or stuck]
                error.none_answered = not owners or len(stuck) == len(owners)
                raise error
            ref = done[0]
            if ref in pings:
                i = pings.pop(ref)
                try:
                    ray.get(ref, timeout=0)
                except RayActorError as e:
                    raise WorkerLost(f"{self.describe(i)} died while idle, during {what} on "
                                     f"other workers ({first_line(e)})") from None
                continue
            pending.remove(ref)
            results[index[ref]] = self._result(ref, what, owners[index[ref]] if owners else None)
        return results

    def _not_answering(self, indices: list[int]) -> list[int]:
        """Of workers whose calls ran past a deadline, the ones that do not even answer
        ``alive`` within HUNG_S: hung themselves, not waiting on another in a collective."""
        asked = {self.workers[i].alive.remote(): i for i in indices}
        done, _ = ray.wait(list(asked), num_returns=len(asked), timeout=HUNG_S)
        return sorted(i for ref, i in asked.items() if ref not in done)

    def _result(self, ref, what: str, owner: int | None = None):
        try:
            return ray.get(ref, timeout=0)
        except RayActorError as e:
            said = f"{self.describe(owner)} died during {what}" if owner is not None \
                else f"{what}: a worker died"
            raise WorkerLost(f"{said} ({first_line(e)})") from None
        except ObjectLostError as e:  # the reply was made, then lost with the node holding it
            said = f"the reply of {self.describe(owner)} to {what} was lost with its node" \
                if owner is not None else f"{what}: a reply was lost with its node"
            raise WorkerLost(f"{said} ({first_line(e)})") from None
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
        return self._get(refs, deadline, what or f"{role}.{method}",
                         owners=[s.index for s in slots])

    # -- what algorithms call ------------------------------------------------------------------
    def _event(self, type: str, **fields) -> None:
        if self.events is not None:
            self.events(type, **fields)

    def generate(self, prompts: np.ndarray, seeds: list[int]) -> np.ndarray:
        n = self.plan.dp["rollout"]
        ps = _chunk(prompts, n)
        ss = [seeds[i * len(seeds) // n : (i + 1) * len(seeds) // n] for i in range(n)]
        self._event("generation_started", engines=n, prompts=len(prompts))
        out = np.concatenate(self.call("rollout", "generate", list(zip(ps, ss, strict=True))))
        self._event("generation_done", engines=n, rows=len(out))
        return out

    def reward(self, prompts: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        role = "reward" if "reward" in self.plan.dp else "rollout"
        n = self.plan.dp[role]
        return np.concatenate(self.call(role, "reward", list(zip(
            _chunk(prompts, n), _chunk(seqs, n), strict=True))))

    def _split_call(self, role: str, method: str, seqs: np.ndarray, *lead) -> np.ndarray:
        n = self.plan.dp[role]
        return np.concatenate(self.call(role, method, [(*lead, c) for c in _chunk(seqs, n)]))

    def logprobs(self, role: str, seqs: np.ndarray) -> np.ndarray:
        return self._split_call(role, "logprobs", seqs, role)

    def values(self, seqs: np.ndarray) -> np.ndarray:
        return self._split_call("critic", "values", seqs)

    def compute(self, fn, *args):
        """``fn(*args)`` on actor rank 0's worker: an algorithm's tensor math (``grpo.targets``),
        in torch, where torch is; arrays in, arrays out (see :meth:`trainer.host.Host.compute`)."""
        slot = self.plan.of("actor")[0]
        ref = self.workers[slot.index].compute.remote(fn, *args)
        return self._get([ref], time.monotonic() + self.ft.step_timeout_s,
                         f"actor.compute ({fn.__name__})", owners=[slot.index])[0]

    def train(self, role: str, batch: dict[str, np.ndarray]) -> dict[str, float]:
        n = self.plan.dp[role]
        shards = [(role, {k: _chunk(v, n)[i] for k, v in batch.items()}) for i in range(n)]
        stats = self.call(role, "train", shards)
        return {k: sum(s[k] for s in stats) / n for k in stats[0]}

    def sync_weights(self) -> None:
        """Actor -> every rollout engine, through the object store (no copy via the driver); the
        engines' loading bounded by ``rollout.sync_timeout_s``."""
        actors, engines = self.plan.of("actor"), self.plan.of("rollout")
        states = [self.workers[s.index].export_weights.remote() for s in actors]
        self._get(states, time.monotonic() + self.ft.step_timeout_s, "actor.export_weights",
                  owners=[s.index for s in actors])
        refs = [self.workers[s.index].load_weights.remote(states[0]) for s in engines]
        limit = self.cfg.rollout.sync_timeout_s
        self._get(refs, time.monotonic() + limit, "the weight push (loading the actor's new "
                  "weights into the rollout engines)", WeightSyncTimeout,
                  owners=[s.index for s in engines], setting=f"rollout.sync_timeout_s={limit:g}")

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
        return self._get(refs, time.monotonic() + self.ft.step_timeout_s, f"workers.{method}",
                         owners=list(range(len(self.workers))))


def _chunk(rows: np.ndarray, n: int) -> list[np.ndarray]:
    """``rows`` split as ``torch.chunk`` splits it (what the workers' shards always were): pieces
    of ``ceil(len / n)`` rows, the last one shorter."""
    size = -(-len(rows) // n)
    return [rows[i : i + size] for i in range(0, len(rows), size)]
