"""A Ray Train (V2) job, unmodified: the scenario's ``command`` is started as given, and Ray Train
builds rlsim's callback (:mod:`rlsim.adapters.ray_train_callback`) from ``RAY_TRAIN_CALLBACKS``,
its documented way of adding callbacks without touching the script. The callback writes the run's
``events.jsonl``: reports as steps, checkpoints, failures Ray Train retries, the end.

Ray Train restarts a failed worker group itself (``FailureConfig``), so a relaunch is rarely
needed; a relaunched job that resumes from its storage path is not reported as a resume.
"""

from __future__ import annotations

from rlsim.adapters.base import Adapter, TrainerLaunch

CALLBACK = "rlsim.adapters.ray_train_callback.RlsimCallback"
CALLBACKS_VAR = "RAY_TRAIN_CALLBACKS"


class RayTrainAdapter(Adapter):
    name = "ray_train"
    observes = frozenset({"step_end", "checkpoint_saved", "resume", "worker_died", "restart",
                          "error", "run_end"})

    def env(self, trainer, launch: TrainerLaunch) -> dict[str, str]:
        """The user's own RAY_TRAIN_CALLBACKS (scenario env) are kept, rlsim's is added."""
        own = trainer.env.get(CALLBACKS_VAR, "")
        return {CALLBACKS_VAR: ",".join(c for c in (own, CALLBACK) if c)}
