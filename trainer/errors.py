"""Typed errors of the reference trainer. Each names what failed, where, and the setting to change.

The driver turns every one of them into an ``error`` event and a non-zero exit; the recoverable
ones (:class:`WorkerLost`, :class:`CollectiveError`, :class:`StepTimeout`,
:class:`ActorsNeverStarted`) first trigger a
restart from the latest valid checkpoint while ``fault_tolerance.max_restarts`` allows.
"""

from __future__ import annotations


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an error's message (Ray's remote errors carry whole tracebacks)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:limit]


class TrainerError(RuntimeError):
    """Base of every error the trainer raises on purpose. ``kind`` is the event-log name."""

    kind = "error"
    recoverable = False


class ConfigError(TrainerError, ValueError):
    """A config file or override is malformed: names the file, the field and the fix."""

    kind = "config_error"


class PlacementError(TrainerError, ValueError):
    """The requested placement cannot fit the cluster (or itself): names the field and numbers."""

    kind = "placement_error"


class ClusterUnreachable(TrainerError):
    """The driver cannot reach the Ray cluster: a wrong address, a cluster that is down, or a
    cluster with token auth and a driver started without the token settings."""

    kind = "cluster_unreachable"


class ResourceTimeout(TrainerError):
    """The GPUs or nodes the run needs did not show up within
    ``fault_tolerance.resources_timeout_s``."""

    kind = "resource_timeout"


class ActorsNeverStarted(ResourceTimeout):
    """The workers' first calls did not return within ``fault_tolerance.init_timeout_s``; the
    message names the workers that did not answer. Recoverable: a start that is slow once (an
    engine compiling its kernels, a cold cache) comes up on the next try, and a run that gave
    up on it for good would lose the whole job to one slow start. After a restart this is also
    what a driver whose job the GCS no longer serves sees (restarted from its store, Ray 2.60
    leaves such a job's actor creations waiting forever); the driver then reconnects once as a
    new driver and tries again."""

    kind = "start_timeout"
    recoverable = True


class WorkerLost(TrainerError):
    """A role's worker (or the node under it) died mid-call."""

    kind = "worker_died"
    recoverable = True


class JobLost(WorkerLost):
    """Ray removed this driver's placement groups under it: the GCS, restarted from its store
    after the head came back, took this driver's job for gone. Only a new driver (a reconnect)
    can place workers again."""

    kind = "job_lost"


class StepTimeout(TrainerError):
    """A role call did not answer within ``fault_tolerance.step_timeout_s`` (a hung or frozen
    node)."""

    kind = "step_timeout"
    recoverable = True


class WeightSyncTimeout(StepTimeout):
    """A weight push into the rollout engines did not finish within ``rollout.sync_timeout_s``:
    names each engine still loading, its node and what it was doing (a frozen engine, a hung
    transfer)."""

    kind = "weight_sync_timeout"


class CollectiveError(TrainerError):
    """A process-group operation failed: a peer went away (connection reset, closed)."""

    kind = "collective_error"
    recoverable = True


class CollectiveTimeout(CollectiveError):
    """A process-group operation waited past ``fault_tolerance.collective_timeout_s``."""

    kind = "collective_timeout"


class CheckpointError(TrainerError):
    """A checkpoint cannot be written or read (missing, corrupt, or of another run shape)."""

    kind = "checkpoint_error"


class CheckpointWriteFailed(CheckpointError):
    """The storage refused a checkpoint's files (disk full, quota, read-only). Mid-run the save is
    dropped with a ``checkpoint_write_failed`` event and training goes on; the last complete
    checkpoint stays the resume point. At the final step the run fails with this error."""

    kind = "checkpoint_write_failed"


class DataChanged(CheckpointError):
    """The checkpoint to resume from was made from other prompts than this run was given: the
    data position it restores (epoch, cursor) would skip or repeat samples of the new set (a
    resume with a changed dataset went on silently, NeMo-RL PR#2519). Names both and the fix."""

    kind = "data_changed"


class CheckpointNotShared(CheckpointError):
    """The checkpoint directory is node-local: workers wrote files the driver cannot see, so no
    node can resume from it. Names the nodes, example files and the fix."""

    kind = "checkpoint_not_shared"
