"""The fake-GPU memory ledger's out-of-memory error, in a module of its own: it subclasses
``torch.OutOfMemoryError``, and the driver, which meets it only when a plan does not fit (or a
worker reports one), imports torch no sooner (see :mod:`trainer.memory`)."""

from __future__ import annotations

import torch

from trainer.errors import TrainerError


class SimulatedCudaOOM(torch.OutOfMemoryError, TrainerError):
    """The fake-GPU memory ledger found a rank over its GPU's capacity.

    Subclasses ``torch.OutOfMemoryError`` so code that handles a real CUDA OOM handles this one too;
    the message follows torch's wording, then names role, node, GPU and the knob to turn.
    """

    kind = "oom"
    knob = ""  # the config field that would fix it (set by the ledger)


class CudaOOM(torch.OutOfMemoryError, TrainerError):
    """A real CUDA out-of-memory error in a worker, named as the ledger names its own: torch's
    message, then role, node, GPU, what was running and the knob to turn. A bare
    ``torch.OutOfMemoryError`` would reach the driver as an internal error."""

    kind = "oom"
