"""flash-attn's CUDA extension, as the device stand-in answers for it: flash-attn installed
without its kernels (``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE``, the only way it installs where
there is no CUDA) imports this module by name, and frameworks import flash-attn for its
pure-PyTorch helpers (``flash_attn.bert_padding``). Importing works; any kernel called raises,
naming it: flash attention itself has no CPU path (pick another ``attn_implementation``)."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def kernel(*args, **kwargs):
        raise RuntimeError(f"flash_attn_2_cuda.{name}: flash-attn's CUDA kernels do not run on "
                           "rlsim's device stand-in (the fake GPUs' memory is the host's); use "
                           "an attention implementation with a CPU path (sdpa, eager)")

    kernel.__name__ = name
    return kernel
