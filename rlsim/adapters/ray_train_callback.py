"""The callback the ``ray_train`` adapter puts into an unmodified Ray Train (V2) job.

Ray Train builds the callbacks named in ``RAY_TRAIN_CALLBACKS`` in the driver, inside
``DataParallelTrainer.fit``, and hands them to its controller actor, where the hooks below run
(their classes and arguments differ by Ray release: :mod:`rlsim.backends.ray_internals.train`).
The callback is built where ``RLSIM_RUN_DIR`` is set (the driver) and carries the event log's
path with it; the controller's node sees the run directory too (the same filesystem on local
nodes, a mount on docker nodes).

What each hook writes to ``<run_dir>/events.jsonl`` (:mod:`rlsim.events`):

- every report (all workers reported): ``step_end`` with rank 0's numeric metrics, and
  ``checkpoint_saved`` when it carried a checkpoint. The step is the first of
  :data:`STEP_KEYS` in rank 0's metrics, else the number of reports so far;
- a failure Ray Train retries (the controller goes to restarting or rescheduling):
  ``worker_died`` with Ray's error, then ``restart`` with the count;
- each worker group started: ``placement`` with its workers by world rank (the role
  ``worker``: its ranks, pids and node addresses, what a fault aimed at a worker's rank hits);
  after a failure also ``resume`` with the step of the newest checkpoint reported, the one Ray
  Train hands the new workers (``ray.train.get_checkpoint()``);
- the end: ``run_end`` (completed, or failed after an ``error`` with the error's class).

Importing this module imports Ray Train; only Ray Train jobs import it.
"""

from __future__ import annotations

import logging
import numbers

from rlsim.backends.ray_internals import train
from rlsim.events import EventLog

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

    def _emit(self, type: str, **fields) -> None:
        try:
            self.log.emit(type, **fields)
        except OSError as e:
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
        self.groups += 1
        try:  # where each rank runs: what a fault aimed at a worker's rank resolves against
            workers = train.worker_ranks(worker_group)
        except Exception as e:  # noqa: BLE001 - never fail the job over what rlsim observes
            log.warning("rlsim: could not read Ray Train's workers: %s", e)
        else:
            self._emit("placement", workers=workers)
        if self.groups > 1 and self.checkpoint_step is not None:
            self._emit("resume", from_step=self.checkpoint_step)

    def after_controller_state_update(self, previous_state, current_state) -> None:
        seen = train.state(current_state)
        if seen is None:
            return
        kind, err = seen
        cause = type(err).__name__ if err is not None else "unknown"
        if kind == "restarting":
            self.restarts += 1
            self._emit("worker_died", cause=cause, message=str(err or "")[:2000])
            self._emit("restart", restart=self.restarts, cause=cause)
        elif kind == "errored":
            self._emit("error", kind=cause, message=str(err or "")[:2000])
            self._emit("run_end", status="failed", step=self.step)
        else:
            self._emit("run_end", status="completed", step=self.step)
