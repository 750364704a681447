"""The run's event log, ``<run_dir>/events.jsonl``: what the scenario engine judges a run by.

One JSON object per line, appended and flushed as it happens (a resumed run appends to the same
file): ``{"ts": <unix seconds>, "type": <name>, "attempt": <n>, ...fields}``. Types and fields:

==================  =============================================================================
run_start           algorithm, total_steps, plan (workers: index, node, gpus, roles), pid,
                    warnings (the placement plan's)
placement           workers (index, roles, ip, pid, setup_s: where set-up went) once the workers
                    stand; seconds (nodes, placement groups, workers ready: since bring-up began)
generation_started  step, engines, prompts: the driver hands a batch to the rollout engines
generation_done     step, engines, rows: every engine answered
step_end            step, metrics (``rollout/*``, ``train/*``, ``perf/*``)
checkpoint_saved    step, path, seconds
checkpoint_loaded   step, path
checkpoint_invalid  path/reason of a checkpoint skipped on resume (a warning)
checkpoint_not_sh.  (``checkpoint_not_shared``) step, nodes, files, example, message: workers
                    wrote files the driver cannot see (node-local checkpoint_dir; at each save)
checkpoint_write_f. (``checkpoint_write_failed``) step, dir, free_mb, last_complete, message: the
                    storage refused a save (disk full, quota); training goes on (a warning)
resume              from_step
worker_died         cause (the error's kind; worker_crashed: a worker's fault handler recorded
                    a fatal signal), message
stalled             cause, call, stuck (workers that did not answer in time), message
node_lost           ip, node_id
preemption_notice   ip, node_id, deadline_in_s: Ray drains a node of this run for preemption
driver_reconnected  reason (head_restarted, job_lost), old_head, new_head, seconds: the driver
                    reconnected to a head restarted from its GCS store (before the restart event)
restart             restart (count), cause, message, from_step (the checkpoint it will resume
                    from), heads (the alive head node ids the driver saw, first 12 characters)
oom                 message, action (what auto_micro_batch changed, or "fatal")
error               kind (a :mod:`trainer.errors` kind, ``head_lost``, ``internal``), message
run_end             status (completed | failed), step, restarts, seconds
==================  =============================================================================

``metrics.jsonl`` holds ``{"step": n, "attempt": a, ...metrics}`` per step (steps redone after a
restart appear again, with the new attempt); TensorBoard scalars optionally.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from rlsim.events import EVENT_TYPES, Holds

# rlsim's documented vocabulary (what any trainer may write, and the checks read), and what the
# reference trainer writes besides
RUN_EVENT_TYPES = EVENT_TYPES | frozenset({
    "run_start", "placement", "checkpoint_loaded", "checkpoint_invalid", "checkpoint_not_shared",
    "checkpoint_write_failed", "driver_reconnected", "oom", "generation_started",
    "generation_done",
})


def _append_to(path: Path, drop_torn: bool = False):
    """``path`` opened to append lines, where the last attempt, killed mid-line, may have left
    one unfinished: ``drop_torn`` cuts it off (a metrics row never finished was never a row:
    the judge reads every line of metrics.jsonl as one), else a newline ends it (the events'
    readers skip a line that is no event), so that this attempt's first line is whole."""
    with open(path, "ab+") as f:
        size = f.seek(0, os.SEEK_END)
        tail = b""
        while size and b"\n" not in tail:  # the text after the last newline
            start = max(0, size - len(tail) - 4096)
            f.seek(start)
            tail = f.read(size - start)
            if start == 0:
                break
        torn = len(tail) - (tail.rfind(b"\n") + 1) if size else 0
        if torn and drop_torn:
            f.truncate(size - torn)
        elif torn:
            f.write(b"\n")
    return path.open("a", buffering=1)


class RunLog:
    """The run's two logs, ``events.jsonl`` and ``metrics.jsonl`` (and TensorBoard scalars)."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = False) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events = _append_to(self.dir / "events.jsonl")
        self._metrics = _append_to(self.dir / "metrics.jsonl", drop_torn=True)
        self.attempt = 0
        self._lock = threading.Lock()
        self._tb = _tensorboard(self.dir) if tensorboard else None
        self._holds = Holds(self.dir)  # a fault due at a step: wait there until it fired

    def emit(self, type: str, **fields) -> dict:
        """Append one event; unknown types are a programming error, refused at once."""
        if type not in RUN_EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}; known: {sorted(RUN_EVENT_TYPES)}")
        event = {"ts": round(time.time(), 4), "type": type, "attempt": self.attempt, **fields}
        with self._lock:  # the head watchdog writes from its own thread
            self._events.write(json.dumps(event, default=str) + "\n")
            os.fsync(self._events.fileno())
        self._holds.after(event)
        return event

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._metrics.write(json.dumps({"step": step, "attempt": self.attempt, **metrics}) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        self._events.close()
        self._metrics.close()
        if self._tb is not None:
            self._tb.close()


def _tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: the jsonl files still hold every metric
        return None
    return SummaryWriter(str(run_dir / "tb"))
