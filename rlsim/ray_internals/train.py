"""Ray Train's controller, as rlsim's ``ray_train`` adapter watches it (train_callbacks).

Ray Train (V2) builds the callbacks named in ``RAY_TRAIN_CALLBACKS`` in the driver and runs their
hooks in its controller; the classes they derive from and the controller's states live in
``ray.train.v2._internal``, which Ray promises to no one. What changed across the releases rlsim
runs on, and is absorbed here:

- Ray 2.48-2.49 call ``after_report(metrics, checkpoint)``; 2.50 and later
  ``after_report(training_report, metrics)``, the checkpoint on the report;
- Ray 2.48-2.50 run Train V1 unless ``RAY_TRAIN_V2_ENABLED=1`` (V1 has no such callbacks: its
  controller is Tune's); from 2.51 V2 is the default;
- Ray 2.57 added replica groups (``TorchftConfig``: a lost group replaced in place) and their
  hook, ``ReplicaGroupCallback.after_replica_group_start``.

Importing this module imports nothing of Ray; :func:`callback_bases` does.
"""

from __future__ import annotations

import re

from rlsim import ray_internals as ri
from rlsim.ray_internals import installed
from rlsim.ray_internals.settings import TRAIN_V2_VAR

V2_VAR = TRAIN_V2_VAR  # Ray Train's own switch between its V1 and V2 APIs


def v2_by_default() -> bool:
    """Whether the installed Ray runs Ray Train V2 when ``RAY_TRAIN_V2_ENABLED`` is unset."""
    text = installed.surface().source("train/v2/_internal/constants.py") or ""
    m = re.search(r"def is_v2_enabled\(\).*?env_bool\(\s*V2_ENABLED_ENV_VAR\s*,\s*(True|False)",
                  text, re.S)
    return m is None or m.group(1) == "True"


def callback_bases() -> tuple[type, ...]:
    """The classes a callback of Ray Train's controller derives from: its controller, worker
    group and report hooks, and its replica group hook where this Ray has one (2.57+: a
    replica group replaced in place). Raises :class:`rlsim.ray_internals.
    RayInternalsError` where this Ray has none (train_callbacks)."""
    ri.require("train_callbacks")
    from ray.train.v2._internal.execution import callback

    bases = [callback.ControllerCallback, callback.WorkerGroupCallback, callback.ReportCallback]
    if replica := getattr(callback, "ReplicaGroupCallback", None):
        bases.append(replica)
    return tuple(bases)


def report(args: tuple, kwargs: dict) -> tuple[list[dict], object | None]:
    """``(metrics of every rank, checkpoint or None)`` from the arguments Ray Train hands
    ``after_report``, in either of its forms."""
    if "training_report" in kwargs or (args and hasattr(args[0], "checkpoint")):
        training_report = kwargs.get("training_report", args[0] if args else None)
        metrics = kwargs.get("metrics", args[1] if len(args) > 1 else [])
        return list(metrics or []), getattr(training_report, "checkpoint", None)
    metrics = kwargs.get("metrics", args[0] if args else [])
    checkpoint = kwargs.get("checkpoint", args[1] if len(args) > 1 else None)
    return list(metrics or []), checkpoint


def worker_ranks(worker_group) -> list[dict]:
    """A started worker group's workers in world-rank order, as a ``placement`` event lists
    workers: ``{"roles": ["worker"], "rank", "ip", "pid"}``."""
    return group_workers(worker_group)


def group_workers(group) -> list[dict]:
    """The workers of a worker group or of one of its replica groups (both have
    ``get_workers``), in world-rank order: ``{"roles": ["worker"], "rank", "ip", "pid"}``."""
    workers = sorted(group.get_workers(), key=lambda w: w.distributed_context.world_rank)
    return [{"roles": ["worker"], "rank": w.distributed_context.world_rank,
             "ip": w.metadata.node_ip, "pid": w.metadata.pid} for w in workers]


def state(controller_state) -> tuple[str, BaseException | None] | None:
    """What a controller state means to rlsim: ``("restarting", error)`` for a failure Ray Train
    retries (restarting or rescheduling), ``("errored", error)``, ``("finished", None)``; None
    for any other state."""
    from ray.train.v2._internal.execution.controller.state import (
        ErroredState,
        FinishedState,
        ReschedulingState,
        RestartingState,
    )

    if isinstance(controller_state, RestartingState | ReschedulingState):
        return "restarting", getattr(controller_state, "training_failed_error", None)
    if isinstance(controller_state, ErroredState):
        return "errored", getattr(controller_state, "training_failed_error", None)
    if isinstance(controller_state, FinishedState):
        return "finished", None
    return None
