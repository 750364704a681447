"""verl's vLLM rollout on vLLM's CPU build: verl's own replica, server and weight receiver, with
the one step vLLM's CPU build needs done differently, loading pushed weights.

vLLM's CPU build packs each linear layer's weight for its kernels once loaded and drops the
original parameter (``vllm/model_executor/layers/linear.py``, ``process_weights_after_loading``:
``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``). verl 0.9.1 pushes new weights with
``model.load_weights`` (``verl/workers/rollout/vllm_rollout/utils.py:405``), which on CPU meets the
dropped parameter: ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``.
vLLM's own way to load weights into a running engine, ``model_runner.reload_weights``, restores
the layers, loads and packs again; :class:`CPUWeightsExtension` receives verl's buckets exactly as
verl does and hands them to it. The server names that extension through verl's own hook
(``vLLMHttpServer._get_worker_extension_cls``) and the replica through verl's registry
(``RolloutReplicaRegistry.register``); nothing of verl is patched.

Imported only in verl's processes, when ``VERL_PLATFORM=rlsim_cpu`` (see ``verl_platform``).
"""

from __future__ import annotations

import ray
import torch
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

EXTENSION = f"{__name__}.CPUWeightsExtension"


class CPUWeightsExtension(vLLMColocateWorkerExtension):
    """verl's worker extension, loading pushed weights through vLLM's reload path."""

    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        if peft_config and base_sync_done:
            raise NotImplementedError("LoRA weight sync on vLLM's CPU build: not supported by "
                                      "rlsim")
        receiver = BucketedWeightReceiver(
            zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"), use_shm=use_shm
        )
        received: list[tuple[str, torch.Tensor]] = []

        def keep(weights, is_last: bool) -> None:
            # the bucket's buffer is reused for the next bucket: copy out
            received.extend((name, tensor.clone()) for name, tensor in weights)

        receiver.receive_weights(on_bucket_received=keep)
        self.model_runner.reload_weights(weights_iterator=received)


class CPUvLLMHttpServer(vLLMHttpServer):
    def _get_worker_extension_cls(self) -> str:
        return EXTENSION


class CPUvLLMReplica(vLLMReplica):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CPUvLLMHttpServer)
