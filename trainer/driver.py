"""The driver: plan, start role groups, train, checkpoint; rebuild and resume after a loss.

Fault tolerance: when a worker or its node dies, a collective fails or times out, a call hangs
past ``fault_tolerance.step_timeout_s``, or the workers do not start within
``fault_tolerance.init_timeout_s``, the driver records the cause (``worker_died``, ``node_lost``,
``stalled``), tears every worker group down, waits (bounded) for the GPUs it needs, rebuilds and
resumes from the latest valid checkpoint, up to ``fault_tolerance.max_restarts`` times. Anything
else, or one failure too many, ends the run with an ``error`` event and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import ray

from rlsim.ray_internals.gcs import draining_nodes
from rlsim.ray_internals.gcs import refusal as gcs_refusal
from rlsim.ray_internals.nodes import HEAD_RESOURCE
from rlsim.reach import gcs_silence, parse_address
from trainer import checkpoint as ckpt
from trainer import grpo, ppo
from trainer.config import TrainerConfig, preflight
from trainer.data import PromptLoader, fingerprint, load_prompts
from trainer.errors import (
    ActorsNeverStarted,
    CheckpointError,
    CheckpointNotShared,
    CheckpointWriteFailed,
    ClusterUnreachable,
    DataChanged,
    JobLost,
    StepTimeout,
    TrainerError,
    first_line,
)
from trainer.events import RunLog
from trainer.groups import Roles, alive_gpu_nodes, label_memory_gb
from trainer.memory import fit, gpu_capacity
from trainer.placement import Plan, largest_fit, plan_placement
from trainer.worker import crash_log

ALGORITHMS = {"grpo": grpo.step, "ppo": ppo.step}


class Run:
    """One training run across restarts: the state a checkpoint must carry, and the loop."""

    def __init__(self, cfg: TrainerConfig, plan: Plan, log: RunLog,
                 lease: ckpt.Lease) -> None:
        self.cfg, self.plan, self.log, self.lease = cfg, plan, log, lease
        self.prompts = load_prompts(cfg.data.path)
        self.loader = PromptLoader(len(self.prompts), cfg.data.prompts_per_step, cfg.seed)
        self.data = fingerprint(cfg.data.path, self.prompts)
        self.step = 0
        self.restarts = 0
        self.nodes: list[dict] = []  # the nodes of the current attempt
        self.where: list[dict] = []  # its workers (index, roles, ip, pid)
        self.noticed: set[str] = set()  # nodes whose preemption notice was said
        self.saved_step: int | None = None  # the step of this attempt's last checkpoint
        self.micro, changes = fit(cfg, plan, gpu_capacity(cfg, _label_memory()))
        for change in changes:
            log.emit("oom", message="planned micro-batch does not fit the GPU", action=change)

    # -- checkpoints -----------------------------------------------------------------------------
    def resume_point(self) -> str | None:
        mode = self.cfg.resume
        if mode == "disable":
            return None
        if mode != "auto":
            reason = ckpt.validate(ckpt.Path(mode))
            if reason:
                raise CheckpointError(f"resume={mode!r}: {reason}. Fix: point resume at a "
                                      "global_step_N dir, or use resume=auto / resume=disable")
            return mode
        try:
            path, rejected = ckpt.latest_valid(self.cfg.ckpt_dir)
        except ckpt.NotShared as e:
            raise CheckpointNotShared(
                f"cannot resume: {e}. Fix: put checkpoint_dir on storage every node mounts at "
                "the same path (NFS, a shared volume); `rlsim doctor --checkpoint-dir DIR` "
                "checks it before a run") from None
        for reason in rejected:
            self.log.emit("checkpoint_invalid", reason=reason)
        return str(path) if path else None

    def load(self, roles: Roles, path: str) -> None:
        state = ckpt.read_state(ckpt.Path(path))
        made = state.get("data")  # absent in checkpoints written before it was recorded
        if isinstance(made, dict) and {k: made.get(k) for k in ("prompts", "sha256")} != \
                {k: self.data[k] for k in ("prompts", "sha256")}:
            raise DataChanged(
                f"cannot resume from {path}: it was trained on {made.get('prompts')} prompts "
                f"of {made.get('path')} (digest {made.get('sha256')}), and this run is given "
                f"{self.data['prompts']} prompts of {self.data['path']} (digest "
                f"{self.data['sha256']}); the data position it restores would skip or repeat "
                "samples. Fix: resume with the data it was trained on, or start over with "
                "resume=disable (or another checkpoint_dir)")
        roles.load(path)
        self.step = state["step"]
        self.loader.load_state(state["loader"])
        roles.sync_weights()
        self.log.emit("checkpoint_loaded", step=self.step, path=path)
        self.log.emit("resume", from_step=self.step, dp=dict(self.plan.dp),
                      consumed_samples=self.loader.epoch * self.loader.size + self.loader.cursor)

    def save(self, roles: Roles) -> None:
        t0 = time.monotonic()
        tmp = None
        try:
            tmp = ckpt.begin(self.cfg.ckpt_dir, self.step)
            roles.save(str(tmp))
            not_here = ckpt.unseen(tmp, roles.listings(str(tmp)))
            if not_here:
                self._warn_not_shared(not_here)
            state = {"step": self.step, "loader": self.loader.state(), "data": self.data,
                     "seed": self.cfg.seed,
                     "algorithm": self.cfg.algorithm, "restarts": self.restarts}
            final = ckpt.commit(self.lease, self.step, tmp, state, self.cfg.keep_last, not_here)
        except Exception as e:
            if isinstance(e, TrainerError) and not isinstance(e, CheckpointWriteFailed):
                raise  # a worker lost mid-save is a restart, not a storage problem
            why = e if isinstance(e, CheckpointWriteFailed) or ckpt.storage_refused(e) \
                else ckpt.storage_refusal(self.cfg.ckpt_dir)
            if why is None:
                raise
            self._save_failed(tmp, why)
            return
        self.saved_step = self.step
        self.log.emit("checkpoint_saved", step=self.step, path=str(final),
                      seconds=round(time.monotonic() - t0, 3))

    def _save_failed(self, tmp: Path | None, e: BaseException) -> None:
        """The storage refused this save (disk full, quota, read-only). Its partial files are
        removed; the last complete checkpoint is untouched and stays the resume point. Mid-run
        training goes on (the next save may find space again); a failed final save fails the
        run, since the work since the last checkpoint would be lost unsaid."""
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        root = Path(self.cfg.ckpt_dir)
        free_mb = round(shutil.disk_usage(root).free / 2**20, 1) if root.exists() else None
        last = _resumable_step(self.cfg)
        message = (f"checkpoint at step {self.step} not written to {root} ({first_line(e)}; "
                   f"{free_mb} MiB free); the last complete checkpoint is step {last}")
        self.log.emit("checkpoint_write_failed", step=self.step, dir=str(root), free_mb=free_mb,
                      last_complete=last, message=message)
        if self.step == self.cfg.total_steps:
            raise CheckpointWriteFailed(f"{message}. Fix: free space in {root} (or point "
                                        "checkpoint_dir elsewhere) and resume") from None
        print(f"trainer: WARNING: {message}; training goes on", flush=True)

    def _warn_not_shared(self, not_here: dict[str, list[str]]) -> None:
        """Workers wrote files this driver cannot see: the run goes on (it may never need to
        resume), but no resume from this checkpoint can work; say so at every save."""
        nodes = sorted({n for where in not_here.values() for n in where})
        message = (f"checkpoint at step {self.step}: {len(not_here)} files that workers on "
                   f"{', '.join(nodes)} wrote are not visible to the driver on "
                   f"{ray.util.get_node_ip_address()}: checkpoint_dir {self.cfg.ckpt_dir} is "
                   "node-local, so a resume will fail. Fix: put it on storage every node shares")
        self.log.emit("checkpoint_not_shared", step=self.step, nodes=nodes,
                      files=len(not_here), example=sorted(not_here)[:3], message=message)
        print(f"trainer: WARNING: {message}", flush=True)

    # -- one attempt -----------------------------------------------------------------------------
    def attempt(self) -> None:
        """Start workers, resume if asked, train to ``total_steps``. Workers die on the way out."""
        cfg = self.cfg
        ckpt.clean_temp(cfg.ckpt_dir)
        self.step, self.loader.epoch, self.loader.cursor = 0, 0, 0
        self.saved_step = None
        with Roles(cfg, self.plan, self.micro) as roles:
            roles.events = lambda type, **fields: self.log.emit(type, step=self.step + 1,
                                                                 **fields)
            self.nodes, self.where = [], []  # a start that fails reports its own, not the last
            try:
                roles.start()
            finally:
                self.nodes, self.where = roles.nodes, roles.where
            self.log.emit("placement", workers=roles.where, seconds=roles.timings)
            path = self.resume_point()
            if path:
                self.load(roles, path)
            step_fn = ALGORITHMS[cfg.algorithm]
            while self.step < cfg.total_steps:
                t0 = time.monotonic()
                idx = self.loader.next_indices()
                seeds = [_mix(cfg.seed, self.step, i) for i in idx]
                metrics = step_fn(roles, self.prompts[idx], seeds, cfg)
                time.sleep(cfg.step_delay_s)  # a slower machine's step (0 by default)
                self.step += 1
                dt = time.monotonic() - t0
                rows = len(idx) * cfg.rollout.n_samples
                metrics |= {"perf/step_s": dt, "perf/tokens_per_s": rows * (
                    self.prompts.shape[1] + cfg.rollout.response_length) / dt}
                self.log.metrics(self.step, metrics)
                self.log.emit("step_end", step=self.step, metrics=metrics)
                if (cfg.save_freq and self.step % cfg.save_freq == 0) or \
                        self.step == cfg.total_steps:
                    self.save(roles)
                self.heed_preemption(roles)

    def heed_preemption(self, roles: Roles) -> None:
        """Ray's preemption notices for the nodes this run uses (a drain with the preemption
        reason and a deadline: a spot reclaim, a scale-down), asked of the GCS once a step and
        said once each. With ``checkpoint_on_preemption`` the run saves at once, so the rebuild
        after the node is gone resumes from this step rather than from the last periodic save.
        A GCS that does not answer is asked again next step."""
        try:
            draining = draining_nodes()
        except Exception:  # noqa: BLE001 - a notice is advice: never fail a step over it
            return
        mine = {n["NodeID"]: n for n in self.nodes}
        new = [(mine[i], ms) for i, ms in draining.items() if i in mine and i not in self.noticed]
        for node, ms in new:
            self.noticed.add(node["NodeID"])
            self.log.emit("preemption_notice", ip=node["NodeManagerAddress"],
                          node_id=node["NodeID"],
                          deadline_in_s=round(ms / 1000 - time.time(), 2) if ms else None)
        if new and self.cfg.fault_tolerance.checkpoint_on_preemption and \
                self.saved_step != self.step:
            self.save(roles)

    def refit(self, asked: TrainerConfig) -> None:
        """``fault_tolerance.elastic``: before a rebuild, wait (``elastic_wait_s``) for the
        placement the config asks for; else take the largest that the alive GPU nodes hold now
        (:func:`trainer.placement.largest_fit`). The global batch is unchanged, so the restored
        data loader's position is the right sample whatever the data-parallel size."""
        ft = asked.fault_tolerance
        want = asked.placement
        deadline = time.monotonic() + ft.elastic_wait_s
        while True:
            gpus = [n["Resources"].get("GPU", 0) for n in alive_gpu_nodes()]
            full = sum(1 for g in gpus if g >= want.gpus_per_node) >= want.nnodes
            if full or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        chosen = asked if full else largest_fit(asked, gpus, ft.min_gpus)
        if chosen is None or chosen.placement == self.cfg.placement:
            return  # nothing smaller fits: the attempt waits for resources and says why
        self.cfg = self.cfg.model_copy(update={"placement": chosen.placement})
        self.plan = plan_placement(self.cfg)
        self.micro, changes = fit(self.cfg, self.plan, gpu_capacity(self.cfg, _label_memory()))
        for change in changes:
            self.log.emit("oom", message="planned micro-batch does not fit the GPU",
                          action=change)
        print(f"trainer: elastic: rebuilding on {self.plan.nnodes} node(s) x "
              f"{self.plan.gpus_per_node} GPU(s) (asked {want.nnodes} x {want.gpus_per_node}; "
              f"GPUs alive per node: {gpus})", flush=True)

    def crashed(self) -> list[tuple[dict, str]]:
        """Workers of this attempt whose fault handler recorded a fatal signal (``Fatal Python
        error: Segmentation fault``), with that line: Ray says the same of a crash and of a
        kill ("died unexpectedly"); the crash log tells them apart (where the run directory is
        shared with the worker's node)."""
        found = []
        for worker in self.where:
            with contextlib.suppress(OSError):
                text = crash_log(self.cfg.run_dir, worker["pid"]).read_text(errors="replace")
                fatal = next((line for line in text.splitlines()
                              if line.startswith(("Fatal Python error", "Fatal GPU error"))),
                             None)
                if fatal:
                    found.append((worker, fatal.removeprefix("Fatal Python error: ")))
        return found

    def lost_nodes(self, grace_s: float = 3.0) -> list[dict]:
        """Nodes this attempt used that Ray now declares dead. A node death can reach the driver
        as a dead actor a moment before the GCS marks the node, hence a short bounded grace. It
        is skipped when every node's raylet still accepts connections, twice half a second apart:
        a worker died, not its node (a killed node's raylet dies with it)."""
        if _raylets_answer(self.nodes):
            time.sleep(0.5)
            if _raylets_answer(self.nodes):
                return []
        deadline = time.monotonic() + grace_s
        while True:
            alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            lost = [n for n in self.nodes if n["NodeID"] not in alive]
            if lost or time.monotonic() > deadline:
                return lost
            time.sleep(0.2)


def run(cfg: TrainerConfig) -> int:
    """Train; return the process exit code (0 completed, 2 failed with a typed error)."""
    cfg = _absolute_paths(cfg)  # workers run in other directories
    try:  # a config that cannot start is refused before the run directory is written
        preflight(cfg)
        plan = plan_placement(cfg)
        lease = ckpt.Lease.acquire(cfg.ckpt_dir)  # one writer per checkpoint_dir, restarts included
    except (TrainerError, ckpt.LeaseHeld) as e:
        print(f"trainer: {e}", file=sys.stderr, flush=True)
        return 2
    log = RunLog(cfg.run_dir, cfg.logging.tensorboard)
    t0 = time.monotonic()
    step = 0
    try:
        log.emit("run_start", algorithm=cfg.algorithm, total_steps=cfg.total_steps, pid=os.getpid(),
                 plan=[{"index": w.index, "node": w.node, "gpus": w.gpus, "roles": w.ranks}
                       for w in plan.workers], warnings=list(plan.warnings))
        _connect(Path(cfg.run_dir))
        _watch_head(log, cfg.fault_tolerance.gcs_reconnect_timeout_s, t0)
        r = Run(cfg, plan, log, lease)
        asked = cfg  # the placement an elastic rebuild returns to when the cluster holds it
        head = _head_id()
        stale_seen = False
        while True:
            try:
                try:
                    r.attempt()
                except PLACEMENT_GROUP_REMOVED as e:
                    raise JobLost(first_line(e)) from e
                break
            except TrainerError as e:
                step = r.step
                # a restarted attempt none of whose actors started: once, as a job Ray lost
                # (a lost job starts no actor anywhere; one slow start among others is no sign)
                stale = isinstance(e, ActorsNeverStarted) and r.restarts > 0 and \
                    getattr(e, "none_answered", True) and not stale_seen
                stale_seen = stale_seen or stale
                if not (e.recoverable or stale):
                    raise
                lost = _record_loss(log, r, e)
                if r.restarts >= cfg.fault_tolerance.max_restarts:
                    raise
                head, heads = _reconnect_if_head_restarted(
                    log, head, cfg.fault_tolerance, job_lost=isinstance(e, JobLost) or stale)
                r.restarts += 1
                log.attempt = r.restarts
                log.emit("restart", restart=r.restarts, cause="node_lost" if lost else e.kind,
                         message=str(e)[:500], from_step=_resumable_step(cfg),
                         heads=[h[:12] for h in heads])
                if cfg.resume != "auto":  # a rebuild resumes from this run's own checkpoints
                    cfg = cfg.model_copy(update={"resume": "auto"})
                    r.cfg = cfg
                if cfg.fault_tolerance.elastic:
                    r.refit(asked)
                    cfg = r.cfg
        step = r.step
        log.emit("run_end", status="completed", step=step, restarts=r.restarts,
                 seconds=round(time.monotonic() - t0, 3))
        return 0
    except (TrainerError, FileNotFoundError) as e:
        kind = getattr(e, "kind", "error")
        if kind == "oom":  # the memory ledger's (trainer.oom), raised here or by a worker
            log.emit("oom", message=str(e), action="fatal")
        log.emit("error", kind=kind, message=str(e))
        log.emit("run_end", status="failed", step=step, seconds=round(time.monotonic() - t0, 3))
        print(f"trainer: {type(e).__name__}: {e}", flush=True)
        return 2
    except Exception as e:  # a bug, or an error nobody typed yet: still end the log properly
        log.emit("error", kind="internal", message=f"{type(e).__name__}: {str(e)[:2000]}")
        log.emit("run_end", status="failed", step=step, seconds=round(time.monotonic() - t0, 3))
        raise
    finally:
        log.close()
        lease.release()


# what Ray raises when a job's placement group is gone: for a task, and for an actor
PLACEMENT_GROUP_REMOVED = (ray.exceptions.TaskPlacementGroupRemoved,
                           ray.exceptions.ActorPlacementGroupRemoved)


def _resumable_step(cfg: TrainerConfig) -> int | None:
    """The step a rebuild will resume from (None: no checkpoint can be resumed, see the next
    attempt's error)."""
    try:
        latest, _ = ckpt.latest_valid(cfg.ckpt_dir)
    except ckpt.NotShared:
        return None
    return ckpt.read_state(latest)["step"] if latest else 0


def _accepts(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _raylets_answer(nodes: list[dict]) -> bool:
    return all(_accepts(n["NodeManagerAddress"], n["NodeManagerPort"], 0.5) for n in nodes)


def _record_loss(log: RunLog, r: Run, e: TrainerError) -> list[dict]:
    """Log what was lost: the failing call (a call that hung: ``stalled``, naming who did not
    answer), then any node Ray declares dead. Returns the nodes."""
    if isinstance(e, (StepTimeout, ActorsNeverStarted)):  # a call that hung, a start too
        log.emit("stalled", cause=e.kind, call=getattr(e, "call", None),
                 stuck=getattr(e, "stuck", []), message=str(e)[:500])
    else:
        log.emit("worker_died", cause=e.kind, message=str(e)[:500])
    for worker, fatal in r.crashed():  # behind the error: a worker that crashed, not was killed
        log.emit("worker_died", cause="gpu_lost" if fatal.startswith("Fatal GPU error") else
                 "worker_crashed",
                 message=f"worker {worker['index']} ({', '.join(worker['roles'])}) on "
                         f"{worker['ip']} crashed: {fatal}")
    lost = r.lost_nodes()
    for node in lost:
        log.emit("node_lost", ip=node["NodeManagerAddress"], node_id=node["NodeID"])
    return lost


def _absolute_paths(cfg: TrainerConfig) -> TrainerConfig:
    from pathlib import Path

    model = cfg.model
    if model.path:
        model = model.model_copy(update={"path": str(Path(model.path).resolve())})
    data = cfg.data.model_copy(update={"path": str(Path(cfg.data.path).resolve())})
    ckpt_dir = str(Path(cfg.checkpoint_dir).resolve()) if cfg.checkpoint_dir else ""
    return cfg.model_copy(update={"run_dir": str(Path(cfg.run_dir).resolve()), "model": model,
                                  "data": data, "checkpoint_dir": ckpt_dir})


def _watch_head(log: RunLog, timeout_s: float, t0: float) -> None:
    """A daemon thread that ends the run with an ``error`` event (kind ``head_lost``) and exit 2
    once the head's GCS port refuses connections for ``timeout_s``. Without it, Ray ends a driver
    whose GCS is gone with a bare exit 1 and no word in the event log."""
    import threading

    host, port = ray.get_runtime_context().gcs_address.rsplit(":", 1)

    def watch() -> None:
        down_since = None
        while True:
            if _accepts(host, int(port), 1):
                down_since = None
            else:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since >= timeout_s * 0.6:
                    msg = (f"the head's GCS at {host}:{port} has refused connections for "
                           f"{time.monotonic() - down_since:.1f} s: the cluster is gone "
                           "(fault_tolerance.gcs_reconnect_timeout_s)")
                    log.emit("error", kind="head_lost", message=msg)
                    log.emit("run_end", status="failed", step=None,
                             seconds=round(time.monotonic() - t0, 3))
                    print(f"trainer: {msg}", flush=True)
                    os._exit(2)
            time.sleep(0.5)

    threading.Thread(target=watch, name="head-watchdog", daemon=True).start()


def _head_id() -> str | None:
    """The alive head node's id (None while there is none; the newest registration when a
    restarted GCS still lists the old head as alive beside the new one)."""
    return (_head_ids() or [None])[-1]


def _head_ids(nodes: list[dict] | None = None) -> list[str]:
    """Every head node the GCS lists as alive (in ``nodes``, a ``ray.nodes()`` already read), in
    its order of registration."""
    return [n["NodeID"] for n in (ray.nodes() if nodes is None else nodes)
            if n["Alive"] and n["Resources"].get(HEAD_RESOURCE)]


def _reconnect_if_head_restarted(log: RunLog, head: str | None, ft,
                                 job_lost: bool = False) -> tuple[str | None, list[str]]:
    """Before a restart: when a head node other than the one at the start is alive (a GCS with
    fault tolerance was restarted from its store), reconnect this driver. Returns the head's id
    now and the alive head ids it saw.

    The driver's connection survives such a restart, but its job can no longer start actors
    (measured on Ray 2.60: every actor creation after it waited forever, on every node, while a
    new driver's took 0.6 s), so it reconnects as a new driver. Any alive head other than the
    one at the start counts: comparing only the first alive head listed, one run in five here
    missed the restart and failed (most likely the reloaded table still listed the old head as
    alive, until its health check said otherwise).

    The loss is often noticed while the head is still coming back: a worker on the head dies
    with it, seconds before the new head registers, and the GCS, reloaded from its store, still
    lists the old head as alive. So when the old head's raylet refuses connections (it is gone)
    or the GCS lists no head, this waits up to ``gcs_reconnect_timeout_s`` for another head (the
    head watchdog ends the run if none comes); a head whose raylet answers at once was not
    restarted.

    Both signs can miss: the new head's raylet answers on the old one's address while the GCS
    still lists the old head alone. The next attempt then finds its placement groups removed
    (``job_lost``, seen once in a loaded test run), or its placement groups placed but its actors
    never started (:class:`ActorsNeverStarted` after ``init_timeout_s``, seen once in a loaded
    test run: "rendezvous store: 1 of 1 calls still running"), and this reconnects whatever the
    node table says."""
    deadline = time.monotonic() + ft.gcs_reconnect_timeout_s
    nodes = ray.nodes()
    old = next((n for n in nodes if n["NodeID"] == head and n["Alive"]), None)
    restarting = old is None or not _accepts(old["NodeManagerAddress"],
                                             old["NodeManagerPort"], 0.5)
    alive = _head_ids(nodes)
    while restarting and set(alive) <= {head} and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = _head_ids()
    new = [h for h in alive if h != head]
    if not new and not job_lost:
        return (head if alive else None), alive
    t0 = time.monotonic()
    ray.shutdown()
    _connect()
    now = (new or alive or [head])[-1]
    log.emit("driver_reconnected", reason="job_lost" if job_lost else "head_restarted",
             old_head=head, new_head=now, seconds=round(time.monotonic() - t0, 3))
    return now, alive


AUTH_HINT = ("a cluster with token auth (rlsim's clusters have it) refuses a driver without "
             "its token: export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=<its token file> "
             "before starting (`rlsim status` prints both)")
TOKEN_HINT = "check RAY_AUTH_TOKEN_PATH names the cluster's token (`rlsim status` prints it)"


def _connect(run_dir: Path | None = None) -> None:
    """Join the cluster named by RAY_ADDRESS, or raise ClusterUnreachable saying in one line
    what is wrong and what to export. The address is asked first (3 s at most): Ray's own
    connect to an address nobody serves retries for minutes, and to a cluster that refuses this
    process's token for about 20 s. With ``run_dir``, Ray's own messages while joining go to
    ``run_dir/ray_connect.log``."""
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS", "auto")
    hint = AUTH_HINT if os.environ.get("RAY_AUTH_MODE") != "token" else TOKEN_HINT
    if ":" in address and "://" not in address:
        try:
            host, port = parse_address(address)
        except ValueError:
            raise ClusterUnreachable(f"RAY_ADDRESS={address!r} is not HOST:PORT; export the "
                                     "cluster's GCS address (`rlsim status` prints it)") from None
        if silence := gcs_silence(host, port):
            raise ClusterUnreachable(f"no Ray cluster answers at RAY_ADDRESS={address} "
                                     f"({silence}); start it, or export the address `rlsim "
                                     "status` prints")
        if refusal := gcs_refusal(host, port):
            raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: {refusal}; "
                                     f"{hint}")
    try:
        # Ray's C++ client prints a warning a second while a GCS refuses it: kept in the run
        # directory instead, and the refusal said in one line
        quiet = _stderr_to(run_dir / "ray_connect.log") if run_dir else contextlib.nullcontext()
        with quiet:
            ray.init(address=address, logging_level="ERROR",
                     log_to_driver=os.environ.get("TRAINER_WORKER_LOGS") == "1")
    except Exception as e:  # noqa: BLE001 - Ray's many ways of refusing a driver: one line each
        raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: "
                                 f"{first_line(e)}; {hint}") from None


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send this process's file descriptor 2 (C++ libraries' warnings too) to ``path``."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:  # nowhere to keep them: leave stderr as it is
        os.close(saved)
        yield
        return
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _label_memory() -> float | None:
    return next((gb for node in alive_gpu_nodes() if (gb := label_memory_gb(node))), None)


def _mix(seed: int, step: int, prompt: int) -> int:
    """The sampling seed of one prompt at one step: independent of how prompts are split."""
    return ((seed * 1_000_003 + step) * 1_000_003 + prompt) % (2**62)
