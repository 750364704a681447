"""What a worker process hosts: one or more roles on one placement-group bundle, in torch.

In colocated mode one worker per GPU hosts actor, rollout and ref (and critic under PPO), like a
hybrid engine; in disaggregated mode a worker hosts the roles whose ranges cover its GPUs. The
training roles a process hosts share its one process group, whose ranks may sit on different nodes:
gloo is bound to this node's address so cross-node traffic really goes to that address (and network
faults on it bite).

:class:`Host` is made by the Ray actor :class:`trainer.worker.Worker` in the worker's process, and
its methods are called by the driver through :mod:`trainer.groups`; none of them waits unboundedly:
the process group carries ``fault_tolerance.collective_timeout_s``. What crosses to the driver is
numpy arrays (the driver imports no torch): tensors are made of them here, and answers are arrays.

On a node whose GPUs are real (``cluster.cuda_devices``), Ray gives each worker its own
``CUDA_VISIBLE_DEVICES`` and the worker's models, batches and sampling live on that device
(``cuda:0``); answers still leave as arrays. Fake GPUs are the CPU.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from rlsim.contract import FAKE_GPUS_VAR, GPU_LOST_FILE, STANDIN_VAR, distinct_devices
from rlsim.standin.gloo import bound_to as _gloo_bound_to
from trainer import memory
from trainer.checkpoint import listing as ckpt_listing
from trainer.config import TrainerConfig
from trainer.data import reward
from trainer.errors import CollectiveError, CollectiveTimeout, TrainerError, first_line
from trainer.losses import clipped_policy_loss, clipped_value_loss, kl_k3
from trainer.model import build_critic, build_policy, response_logprobs, response_values
from trainer.placement import Plan, WorkerSlot
from trainer.worker import crash_log

PROMPT_LEN = 7


FAKE_IDS_VAR = "RLSIM_FAKE_GPU_IDS"  # a fake-GPU worker's GPU ids as Ray handed them out


def _hide_real_gpus() -> None:
    """On a node whose GPUs are fake (FAKE_GPUS_VAR) of a host whose torch has CUDA, keep this
    worker off the host's real GPUs: Ray's CUDA_VISIBLE_DEVICES names the fake GPU by its
    ordinal, which a real device of the host may have, and DeepSpeed (or anything asking CUDA)
    would take it. Called before CUDA is first asked; the ids stay in FAKE_IDS_VAR for what
    reads them (the lost-GPU watch, the placement event)."""
    if os.environ.get(FAKE_GPUS_VAR) != "1" or not torch.backends.cuda.is_built() \
            or FAKE_IDS_VAR in os.environ:
        return
    os.environ[FAKE_IDS_VAR] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _gpu_ids() -> str:
    """This worker's GPU ids as Ray handed them out (its CUDA_VISIBLE_DEVICES)."""
    return os.environ.get(FAKE_IDS_VAR) or os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _device() -> torch.device:
    """This worker's device: its GPU where Ray gave it a real one (always local index 0, as Ray
    sets the worker's own CUDA_VISIBLE_DEVICES), else the CPU standing for a fake GPU (also on
    a host with real GPUs, where the node says its GPUs are fake: FAKE_GPUS_VAR). Where the
    node has rlsim's device stand-in (STANDIN_VAR), the fake GPU is a CUDA device whose memory
    is the host's: the same numbers as the CPU, reached through torch's CUDA paths."""
    standin = os.environ.get(STANDIN_VAR) == "1"
    real = torch.cuda.is_available() and (os.environ.get(FAKE_GPUS_VAR) != "1" or standin)
    return torch.device("cuda", 0) if real else torch.device("cpu")


def _device_id(device: torch.device) -> str:
    """What tells two ranks' devices apart: a GPU's UUID, or ``cpu``."""
    if device.type != "cuda":
        return "cpu"
    props = torch.cuda.get_device_properties(device)
    return str(getattr(props, "uuid", "") or f"{props.name}/{props.pci_bus_id}")


def choose_backend(devices: list[str]) -> tuple[str, str]:
    """The process group's backend for ranks on ``devices`` (:func:`_device_id` of each rank, in
    rank order), and why. NCCL needs every rank on a GPU of its own: it refuses two ranks on one
    device ("Duplicate GPU detected"), which simulated nodes sharing a host's GPU are; those, and
    CPU ranks, use gloo."""
    if all(d == "cpu" for d in devices):
        return "gloo", "no rank has a GPU (fake GPUs: the CPU)"
    if "cpu" in devices:
        return "gloo", (f"ranks {[r for r, d in enumerate(devices) if d == 'cpu']} have no GPU: "
                        "NCCL needs every rank on one")
    seen: dict[str, int] = {}
    for rank, d in enumerate(devices):
        if d in seen:
            return "gloo", (f"ranks {seen[d]} and {rank} share GPU {d}: NCCL refuses two ranks "
                            "on one device")
        seen[d] = rank
    return "nccl", "every rank on a GPU of its own"


def _record_crashes(run_dir: str):
    """Point the fault handler at this worker's crash log (None where the run directory cannot be
    written from this node: the crash is then told as any death)."""
    try:
        path = crash_log(run_dir, os.getpid())
        path.parent.mkdir(parents=True, exist_ok=True)
        log = path.open("w")
    except OSError:
        return None
    faulthandler.enable(file=log)
    return log


def lost_gpus(run_dir: str, ip: str) -> set[str]:
    """The GPUs of node ``ip`` a harness has failed (:data:`rlsim.contract.GPU_LOST_FILE`)."""
    try:
        lost = json.loads((Path(run_dir) / GPU_LOST_FILE).read_text())
    except (OSError, ValueError):
        return set()
    return {str(g) for g in lost.get(ip, [])} if isinstance(lost, dict) else set()


def _watch_device(run_dir: str, ip: str, every_s: float = 0.25) -> None:
    """A fake GPU's failure, as the process on it meets it: the driver reports an Xid and the
    device is gone, so this process dies (a real one aborts at its next CUDA call), leaving
    ``Fatal GPU error`` in its crash log for the driver to name the cause."""
    mine = {g for g in _gpu_ids().split(",") if g}
    while mine:
        gone = sorted(mine & lost_gpus(run_dir, ip))
        if gone:
            line = (f"Fatal GPU error: GPU {','.join(gone)} on {ip} lost (Xid 79: GPU has "
                    "fallen off the bus)")
            with contextlib.suppress(OSError), crash_log(run_dir, os.getpid()).open("a") as f:
                f.write(line + "\n")
            print(f"trainer worker: {line}", file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(every_s)


class Host:
    """Hosts the roles of one :class:`WorkerSlot`, in the process of the Ray actor
    :class:`trainer.worker.Worker` (or in the driver's own, ``trainer.inprocess``)."""

    def __init__(self, cfg: dict, plan: Plan, slot: WorkerSlot, micro: dict[str, int],
                 capacity: float) -> None:
        self._born = time.monotonic()
        torch.set_num_threads(1)
        _hide_real_gpus()
        if os.environ.get("CUDA_VISIBLE_DEVICES"):  # a worker of several GPUs on one device
            os.environ["CUDA_VISIBLE_DEVICES"] = distinct_devices(
                os.environ["CUDA_VISIBLE_DEVICES"])
        self.device = _device()
        if self.device.type == "cuda":
            # cuBLAS is deterministic only with a fixed workspace, set before its first call
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.cuda.set_device(self.device)
        torch.use_deterministic_algorithms(True)
        self.backend, self.backend_reason = "gloo", "not joined"
        self.cfg = TrainerConfig.model_validate(cfg)
        self.plan, self.slot, self.micro, self.capacity = plan, slot, micro, capacity
        self.ip = _node_ip()
        self.engines: dict = {}
        self.rollout = self.ref = None
        self.store = None
        self._crash_log = _record_crashes(self.cfg.run_dir)
        threading.Thread(target=_watch_device, args=(self.cfg.run_dir, self.ip),
                         name="rlsim-device-watch", daemon=True).start()
        seed = self.cfg.seed * 7919 + slot.index
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    # -- set-up -------------------------------------------------------------------------------
    def where(self) -> dict:
        return {"ip": self.ip, "pid": os.getpid(), "index": self.slot.index,
                "roles": list(self.slot.roles), "cuda": _gpu_ids() or None,
                "device": self._device_name()}

    def _device_name(self) -> str:
        if self.device.type != "cuda":
            return "cpu"
        return f"cuda:0 ({torch.cuda.get_device_name(self.device)})"

    def open_store(self) -> tuple[str, int]:
        """On the world's rank 0: host the rendezvous store on this node's address."""
        timeout = datetime.timedelta(seconds=self.cfg.fault_tolerance.collective_timeout_s)
        self.store = dist.TCPStore(self.ip, 0, is_master=True, timeout=timeout,
                                   wait_for_workers=False)
        return self.ip, self.store.port

    def setup(self, store_addr: tuple[str, int] | None, rank: int, world: int) -> dict:
        """Join the training process group (if this worker trains) and build every role."""
        cfg = self.cfg
        timeout = datetime.timedelta(seconds=cfg.fault_tolerance.collective_timeout_s)
        took = {"since_init_s": time.monotonic() - self._born}
        t0 = time.monotonic()
        if store_addr is not None:
            self._join(store_addr, rank, world, timeout)
        took["join_s"] = time.monotonic() - t0
        self.check_memory()
        roles = self.slot.roles
        for role in ("actor", "critic"):
            if role in roles:
                t0 = time.monotonic()
                self.engines[role] = self._engine(role)
                took[f"{role}_engine_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        with self._named_oom(roles[0], "set-up"):
            if "ref" in roles:
                self.ref = build_policy(cfg.model, cfg.seed).eval().to(self.device)
            if "rollout" in roles:
                from trainer.rollout import make_engine

                self.rollout = make_engine(cfg, Path(cfg.run_dir) / "rollout" /
                                           f"model-worker{self.slot.index}", self.device)
        took["ref_rollout_s"] = time.monotonic() - t0
        return {**self.where(), "setup_s": {k: round(v, 3) for k, v in took.items()},
                "backend": self.backend, "backend_reason": self.backend_reason}

    def _join(self, store_addr: tuple[str, int], rank: int, world: int,
              timeout: datetime.timedelta) -> None:
        """Rendezvous at rank 0's store and form the process group, or fail in words: a peer that
        cannot reach the store or the collective's own ports would otherwise surface as a bare
        store error (or, without a timeout, a hang)."""
        # what torchrun would export; DeepSpeed insists on LOCAL_RANK. Ray gives each worker
        # its own CUDA_VISIBLE_DEVICES, so its device is always local index 0.
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0",
                          LOCAL_WORLD_SIZE="1", MASTER_ADDR=store_addr[0],
                          MASTER_PORT=str(store_addr[1]))
        try:
            store = self.store or dist.TCPStore(store_addr[0], store_addr[1], is_master=False,
                                                timeout=timeout)
            # every rank tells the others its device, so all choose the same backend
            store.set(f"rlsim/device/{rank}", _device_id(self.device))
            keys = [f"rlsim/device/{r}" for r in range(world)]
            store.wait(keys)
            self.backend, self.backend_reason = choose_backend(
                [store.get(k).decode() for k in keys])
            if self.device.type == "cuda" and self.backend == "gloo":
                print(f"trainer worker: process group over gloo, not NCCL: "
                      f"{self.backend_reason}", file=sys.stderr, flush=True)
            with _gloo_bound_to(self.ip):
                dist.init_process_group(self.backend, store=store, rank=rank, world_size=world,
                                        timeout=timeout)
        except (dist.DistError, RuntimeError) as e:
            timed_out = "time" in str(e).lower()
            error = CollectiveTimeout if timed_out else CollectiveError
            raise error(
                f"process group set-up ({self.backend}): rank {rank} of {world} on {self.ip} "
                f"could not complete the rendezvous at {store_addr[0]}:{store_addr[1]}"
                + (f" within {timeout.total_seconds():g} s (fault_tolerance.collective_timeout_s)"
                   if timed_out else "")
                + f": {first_line(e, 160)}. Fix: let every node reach the others' ephemeral ports "
                "(the store and gloo/NCCL pick them: net.ipv4.ip_local_port_range), and make each "
                "node advertise an address its peers can reach (GLOO_SOCKET_IFNAME / "
                "NCCL_SOCKET_IFNAME)") from None

    def _engine(self, role: str):
        from trainer.engine import make_engine

        cfg, oc = self.cfg, getattr(self.cfg, role)
        module = build_policy(cfg.model, cfg.seed) if role == "actor" else build_critic(
            cfg.model, cfg.seed)
        module = module.to(self.device)
        rows = cfg.data.prompts_per_step * cfg.rollout.n_samples
        per_rank = rows // (self.plan.dp[role] * cfg.algo.mini_batches)
        micro = min(self.micro[role], per_rank)
        return make_engine(module, oc, micro, per_rank // micro)

    def check_memory(self) -> None:
        """The fake-GPU ledger for this worker's GPUs (real GPUs raise real CUDA OOMs)."""
        if os.environ.get(FAKE_GPUS_VAR) != "1":
            return
        reserve = (self.cfg.memory.reserve_gb + memory.external_reserve_gb(
            self.cfg.run_dir, self.ip)) * memory.GIB
        for gpu in self.slot.gpus:
            memory.check_gpu(self.cfg, self.plan, gpu, self.micro, self.capacity, reserve)

    @contextlib.contextmanager
    def _named_oom(self, role: str, what: str):
        """A real CUDA out-of-memory error in ``what``, raised as :class:`trainer.oom.CudaOOM`
        naming role, node, GPU and the fix, as the fake-GPU ledger names its own."""
        try:
            yield
        except torch.OutOfMemoryError as e:
            from trainer.oom import CudaOOM

            if isinstance(e, TrainerError):
                raise  # the ledger's own (trainer.oom.SimulatedCudaOOM), already named
            raise CudaOOM(self._oom_message(role, what, e)) from None

    def _oom_message(self, role: str, what: str, e: BaseException) -> str:
        gpu = self.slot.gpus[0] if self.slot.gpus else 0
        node, local = divmod(gpu, self.plan.gpus_per_node)
        others = ""
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            held = torch.cuda.memory_reserved(self.device)
            others = (f" Of its {total / memory.GIB:.2f} GiB, this process holds "
                      f"{held / memory.GIB:.2f} GiB and other processes "
                      f"{max(total - free - held, 0) / memory.GIB:.2f} GiB.")
        knob = (f"reduce {role}.micro_batch_size (now {self.micro[role]}) or set "
                f"{role}.auto_micro_batch=true" if role in self.micro else
                "lower data.prompts_per_step or rollout.n_samples (the rows generated at once)")
        return (f"{first_line(e, 400)}{others} [rlsim: role={role} node={node} gpu={local} "
                f"(global {gpu}) on {self.ip}, {what}] Fix: {knob}, or free the GPU of "
                "what else runs on it (nvidia-smi lists its processes).")

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, device=self.device)

    # -- rollout and scoring -------------------------------------------------------------------
    def generate(self, prompts: np.ndarray, seeds: list[int]) -> np.ndarray:
        with self._named_oom("rollout", "generation"):
            return self.rollout.generate(torch.tensor(prompts), seeds).cpu().numpy()

    def reward(self, prompts: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        n = seqs.shape[0] // prompts.shape[0]
        prompts, seqs = torch.tensor(prompts), torch.tensor(seqs)
        return reward(prompts.repeat_interleave(n, 0), seqs[:, PROMPT_LEN:]).numpy()

    @torch.no_grad()
    def logprobs(self, role: str, seqs: np.ndarray) -> np.ndarray:
        model = self.ref if role == "ref" else self.engines["actor"].module
        with self._named_oom(role, "log-probabilities"):
            return response_logprobs(model, self._tensor(seqs), PROMPT_LEN).cpu().numpy()

    @torch.no_grad()
    def values(self, seqs: np.ndarray) -> np.ndarray:
        with self._named_oom("critic", "values"):
            return response_values(self.engines["critic"].module, self._tensor(seqs),
                                   PROMPT_LEN).cpu().numpy()

    def compute(self, fn, *args):
        """``fn(*args)``, an algorithm's tensor math (``trainer.grpo.targets``), on tensors made
        of the array arguments; tensors in its answer (one, or a tuple) come back as arrays."""
        out = fn(*(torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args))
        if isinstance(out, tuple):
            return tuple(x.numpy() if isinstance(x, torch.Tensor) else x for x in out)
        return out.numpy() if isinstance(out, torch.Tensor) else out

    # -- training -----------------------------------------------------------------------------
    def train(self, role: str, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """Train ``role`` on this rank's shard; collective with the role's other ranks."""
        batch = {k: self._tensor(v) for k, v in batch.items()}
        cfg, engine = self.cfg, self.engines[role]
        rows = batch["seqs"].shape[0]
        mini = rows // cfg.algo.mini_batches
        micro = min(self.micro[role], mini)
        loss_fn = self._actor_loss if role == "actor" else self._critic_loss
        out: dict[str, float] = {}
        try:
            for _ in range(cfg.algo.ppo_epochs):
                for m0 in range(0, rows, mini):
                    mbs = [{k: v[i : i + micro] for k, v in batch.items()}
                           for i in range(m0, m0 + mini, micro)]
                    self.check_memory()
                    with self._named_oom(role, "training"):
                        out = engine.train(mbs, loss_fn)
        except RuntimeError as e:
            kind = None if isinstance(e, TrainerError) else _collective_failure(e)
            if kind is None:
                raise
            raise kind(f"{role} rank {self.slot.ranks[role]} on {self.ip}: {first_line(e)} "
                       f"(fault_tolerance.collective_timeout_s="
                       f"{cfg.fault_tolerance.collective_timeout_s:g})") from None
        if self.device.type == "cuda" and self.plan.mode == "colocated":
            # a hybrid engine hands the GPU's memory from training to generation between phases
            # (verl's offload, vLLM's sleep): what training cached is given back to CUDA
            torch.cuda.empty_cache()
        return {f"train/{role}_{k}": v for k, v in out.items()}

    def _actor_loss(self, model, mb):
        logp = response_logprobs(model, mb["seqs"], PROMPT_LEN)
        clip = self.cfg.algo.clip_ratio
        pg, clipfrac = clipped_policy_loss(logp, mb["old_logp"], mb["adv"], clip)
        loss, info = pg, {"pg_loss": pg.item(), "clipfrac": clipfrac.item()}
        if "ref_logp" in mb:
            kl = kl_k3(logp, mb["ref_logp"])
            loss = pg + self.cfg.algo.kl_coef * kl
            info["kl_loss"] = kl.item()
        return loss, info

    def _critic_loss(self, model, mb):
        v = response_values(model, mb["seqs"], PROMPT_LEN)
        loss = clipped_value_loss(v, mb["old_values"], mb["returns"], self.cfg.algo.value_clip)
        return loss, {"value_loss": loss.item()}

    # -- weights and checkpoints ---------------------------------------------------------------
    def export_weights(self) -> dict[str, np.ndarray] | None:
        """The actor's full weights (collective under ZeRO-3); returned by actor rank 0 only. As
        arrays: the driver receives them on their way to the engines, and makes no tensors."""
        state = self.engines["actor"].full_state()
        return {k: v.cpu().numpy() for k, v in state.items()} \
            if self.slot.ranks["actor"] == 0 else None

    def load_weights(self, state: dict[str, np.ndarray]) -> None:
        self.rollout.load_weights({k: torch.tensor(v) for k, v in state.items()})

    def save(self, path: str) -> None:
        """Write this worker's share of a checkpoint into ``path`` (collective per role)."""
        root = Path(path)
        for role, engine in self.engines.items():
            engine.save(root / role)
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
               "python": random.getstate()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        (root / "rng").mkdir(parents=True, exist_ok=True)
        torch.save(rng, root / "rng" / f"worker_{self.slot.index}.pt")
        if "actor" in self.engines:
            state = self.engines["actor"].full_state()  # every actor rank: collective at ZeRO-3
            if self.slot.ranks["actor"] == 0:
                model = build_policy(self.cfg.model, self.cfg.seed)
                model.load_state_dict(state)
                model.save_pretrained(root / "hf")  # the actor in Hugging Face format

    def listing(self, path: str) -> tuple[str, list[str]]:
        """This node's address and the checkpoint files it sees under ``path``."""
        return _node_ip(), ckpt_listing(path)

    def load(self, path: str) -> None:
        root = Path(path)
        for role, engine in self.engines.items():
            engine.load(root / role)
        rng = torch.load(root / "rng" / f"worker_{self.slot.index}.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.device)

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _node_ip() -> str:
    """This node's address inside a Ray worker; loopback outside Ray (``trainer.inprocess``).

    Outside Ray, ``ray.util.get_node_ip_address()`` would initialise Ray's C++ config, which then
    keeps the auth mode it saw: a later connection to a token-auth cluster in the same process
    (tests, benches) would be refused.
    """
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"


def _collective_failure(e: RuntimeError) -> type[CollectiveError] | None:
    """Which typed error a process-group failure is, or None if ``e`` is something else."""
    text = str(e).lower()
    if "timed out" in text or "timeout" in text:
        return CollectiveTimeout
    if any(s in text for s in ("gloo", "nccl", "connection reset", "connection closed")):
        return CollectiveError
    return None

