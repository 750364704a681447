"""The callback the ``ray_train`` adapter puts into an unmodified Ray Train (V2) job.

Ray Train builds the callbacks named in ``RAY_TRAIN_CALLBACKS`` in the driver, inside
``DataParallelTrainer.fit``, and hands them to its controller actor, where the hooks below run
(their classes and arguments differ by Ray release: :mod:`rlsim.ray_internals.train`).
The callback is built where ``RLSIM_RUN_DIR`` is set (the driver) and carries the event log's
path with it; the controller's node sees the run directory too (the same filesystem on local
nodes, a mount on docker nodes).

What each hook writes to ``<run_dir>/events.jsonl`` (:mod:`rlsim.events`):

- every report (all workers reported): ``step_end`` with rank 0's numeric metrics, and
  ``checkpoint_saved`` when it carried a checkpoint. The step is the first of
  :data:`STEP_KEYS` in rank 0's metrics, else the number of reports so far;
- a failure Ray Train retries (the controller goes to restarting or rescheduling):
  ``worker_died`` with Ray's error;
- each worker group started: ``placement`` with its workers by world rank (the role
  ``worker``: its ranks, pids and node addresses, what a fault aimed at a worker's rank hits);
  after a failure this is a whole restart: ``restart`` with the count, and ``resume`` with the
  step of the newest checkpoint reported, the one Ray Train hands the new workers
  (``ray.train.get_checkpoint()``);
- a replica group replaced in place (Ray 2.57+, TorchftConfig: only the lost group's workers
  are new, the others keep their state): ``worker_replaced`` with the new workers and the ones
  they replace, and the worker table again; no restart;
- the end: ``run_end`` (completed, or failed after an ``error`` with the error's class).

Importing this module imports Ray Train; only Ray Train jobs import it.
"""

from __future__ import annotations

import logging
import numbers

from rlsim.events import EventLog
from rlsim.ray_internals import train

# metric names read as the step, in this order (what Ray Train examples report)
STEP_KEYS = ("step", "global_step", "training_iteration", "iteration", "epoch")

log = logging.getLogger(__name__)


class RlsimCallback(*train.callback_bases()):
    """Ray Train's controller, reported as rlsim events. Never fails the job: a write that
    fails is logged as a warning and the training goes on."""

    def __init__(self) -> None:
        self.log = EventLog()
        self.reports = 0
        self.step = 0
        self.checkpoint_step: int | None = None
        self.restarts = 0
        self.groups = 0
        self.workers: list[dict] = []  # the worker table: rank order
        self.failure: str | None = None  # the cause of the failure Ray Train is recovering from

    def _emit(self, type: str, **fields) -> None:
        try:
            self.log.emit(type, **fields)
        except (OSError, ValueError) as e:
            log.warning("rlsim: could not write the %s event to %s: %s", type, self.log.path, e)

    def after_report(self, *args, **kwargs) -> None:
        metrics, checkpoint = train.report(args, kwargs)
        self.reports += 1
        rank0 = metrics[0] if metrics else {}
        self.step = next((int(rank0[k]) for k in STEP_KEYS if isinstance(
            rank0.get(k), numbers.Real) and not isinstance(rank0[k], bool)), self.reports)
        numeric = {k: v for k, v in rank0.items()
                   if isinstance(v, numbers.Real) and not isinstance(v, bool)}
        self._emit("step_end", step=self.step, metrics=numeric)
        if checkpoint is not None:
            self.checkpoint_step = self.step
            self._emit("checkpoint_saved", step=self.step, path=checkpoint.path)

    def after_worker_group_start(self, worker_group) -> None:
        """A worker group started: the first, or a whole restart after a failure (every worker
        new, from the newest checkpoint)."""
        self.groups += 1
        self._placed(lambda: train.worker_ranks(worker_group))
        if self.groups > 1:
            self.restarts += 1
            self._emit("restart", restart=self.restarts, cause=self.failure or "unknown")
            if self.checkpoint_step is not None:
                self._emit("resume", from_step=self.checkpoint_step)
        self.failure = None

    def after_replica_group_start(self, replica_group) -> None:
        """Ray 2.57+: one replica group was replaced in place (TorchftConfig): its workers are
        new, the others kept their state and go on: a replacement, not a restart."""
        try:
            new = train.group_workers(replica_group)
        except Exception as e:  # noqa: BLE001 - never fail the job over what rlsim observes
            log.warning("rlsim: could not read Ray Train's replaced workers: %s", e)
            return
        ranks = {w["rank"] for w in new}
        replaced = [w for w in self.workers if w["rank"] in ranks]
        self._emit("worker_replaced", workers=new, replaced=replaced,
                   cause=self.failure or "unknown")
        self._placed(lambda: sorted([w for w in self.workers if w["rank"] not in ranks] + new,
                                    key=lambda w: w["rank"]))
        self.failure = None

    def _placed(self, read) -> None:
        """The worker table (where each rank runs) as a placement event: what a fault aimed at a
        worker's rank resolves against."""
        try:
            workers = read()
        except Exception as e:  # noqa: BLE001 - never fail the job over what rlsim observes
            log.warning("rlsim: could not read Ray Train's workers: %s", e)
            return
        self.workers = [{**w, "index": i} for i, w in enumerate(workers)]
        self._emit("placement", workers=self.workers)

    def after_controller_state_update(self, previous_state, current_state) -> None:
        seen = train.state(current_state)
        if seen is None:
            return
        kind, err = seen
        cause = type(err).__name__ if err is not None else "unknown"
        if kind == "restarting":  # a restart or a replacement follows; which, it says then
            self.failure = cause
            self._emit("worker_died", cause=cause, message=str(err or "")[:2000])
        elif kind == "errored":
            self._emit("error", kind=cause, message=str(err or "")[:2000])
            self._emit("run_end", status="failed", step=self.step)
        else:
            self._emit("run_end", status="completed", step=self.step)
