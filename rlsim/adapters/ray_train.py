"""A Ray Train (V2) job, unmodified: the scenario's ``command`` is started as given, and Ray Train
builds rlsim's callback (:mod:`rlsim.adapters.ray_train_callback`) from ``RAY_TRAIN_CALLBACKS``,
its way of adding callbacks without touching the script (a setting of Ray Train's internals: its
name is the annex's, :mod:`rlsim.ray_internals.settings`). The callback writes the run's
``events.jsonl``: reports as steps, checkpoints, failures Ray Train retries, the end.

Ray Train restarts a failed worker group itself (``FailureConfig``), so a relaunch is rarely
needed; a relaunched job that resumes from its storage path is not reported as a resume.

The callback hooks exist in Ray Train V2 only. Ray 2.48-2.50 run Train V1 unless
``RAY_TRAIN_V2_ENABLED=1``: there the adapter sets it (V1 has no hook rlsim could use, so the job
runs the V2 trainer its Ray ships), unless the scenario's ``trainer.env`` sets it itself; a
scenario that turns V2 off is refused, as is a Ray without the hooks.
"""

from __future__ import annotations

import re

from rlsim import ray_internals
from rlsim.adapters.base import Adapter, TrainerLaunch, TrainerProblem, trainer_files
from rlsim.ray_internals import train
from rlsim.ray_internals.settings import TRAIN_CALLBACKS_VAR

CALLBACK = "rlsim.adapters.ray_train_callback.RlsimCallback"
# a line of the job's own code that imports torch (TorchTrainer's jobs)
TORCH_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+(?:torch|ray\.train\.torch)\b", re.M)
MAX_READ = 1 << 20  # bytes of each code file looked at


class RayTrainAdapter(Adapter):
    name = "ray_train"
    worker_table = True  # its callback logs each worker group's ranks (role worker)
    core_actors = ("TrainController",)  # the controller: lost with it, the job is lost
    observes = frozenset({"step_end", "checkpoint_saved", "resume", "worker_died", "restart",
                          "worker_replaced", "error", "run_end", "placement"})

    def warm_workers(self, trainer, nodes: list | None = None) -> tuple[list[str], list[int]]:
        """torch, where the job's own code imports it: each worker Ray Train starts for such a
        job (its controller, every RayTrainWorker) imported torch itself, 1.9 s of CPU apiece
        here before its first report; forked from the cluster's zygote it has it (a 3-node job
        of two workers went from 10.7 to 7.4 s between its start and its placement). No count:
        Ray Train places its workers itself."""
        for path in trainer_files(trainer):
            try:
                with open(path, "rb") as f:
                    if TORCH_IMPORT.search(f.read(MAX_READ)):
                        return ["torch"], []
            except OSError:
                continue
        return [], []

    def env(self, trainer, launch: TrainerLaunch) -> dict[str, str]:
        """The user's own RAY_TRAIN_CALLBACKS (scenario env) are kept, rlsim's is added; Train V2
        turned on where this Ray's default is V1 and the scenario does not say."""
        own = trainer.env.get(TRAIN_CALLBACKS_VAR, "")
        v2 = {} if train.v2_by_default() or train.V2_VAR in trainer.env else {train.V2_VAR: "1"}
        return {TRAIN_CALLBACKS_VAR: ",".join(c for c in (own, CALLBACK) if c), **v2}

    def facts(self, trainer, refusals: list[str]):
        where = ("trainer", "adapter")
        if not (hooks := ray_internals.status("train_callbacks")).available:
            raise TrainerProblem(where, "trainer.adapter", f"the ray_train adapter cannot see "
                                 f"this Ray's Train jobs (Ray {ray_internals.ray_version()}: "
                                 f"{hooks.why}); fix: use Ray {ray_internals.SUPPORTED_TEXT}, "
                                 "or adapter: events with a job that writes events.jsonl")
        if trainer.env.get(train.V2_VAR, "1").strip().lower() in ("0", "false", "no"):
            raise TrainerProblem(("trainer", "env"), f"trainer.env.{train.V2_VAR}",
                                 f"{train.V2_VAR}={trainer.env[train.V2_VAR]} runs Ray Train V1, "
                                 "whose controller the ray_train adapter cannot hook; fix: drop "
                                 "it (the adapter runs Train V2), or use adapter: events")
        return super().facts(trainer, refusals)
