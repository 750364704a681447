"""The reference RL trainer rlsim's scenarios drive: GRPO and PPO on Ray, fault-tolerant.

``python -m trainer --config fixtures/trainer/grpo_tiny.yaml`` (see ``trainer/config.py``).
"""

from trainer.config import TrainerConfig, load_config
from trainer.errors import (
    CheckpointError,
    CollectiveError,
    CollectiveTimeout,
    ConfigError,
    PlacementError,
    ResourceTimeout,
    SimulatedCudaOOM,
    StepTimeout,
    TrainerError,
    WorkerLost,
)

__all__ = [
    "CheckpointError",
    "CollectiveError",
    "CollectiveTimeout",
    "ConfigError",
    "PlacementError",
    "ResourceTimeout",
    "SimulatedCudaOOM",
    "StepTimeout",
    "TrainerConfig",
    "TrainerError",
    "WorkerLost",
    "load_config",
]
