"""torch's side of the device stand-in: in a process on a node whose GPUs are fake, torch's CPU
build answers as if the node's GPUs Ray assigned the process were CUDA devices, and keeps their
tensors in host memory. Installed by :func:`rlsim.standin.install`; never edits a framework.

By torch's own extension points, in this order:

- a torch function mode (:class:`_Placement`) in every Python thread: a ``device`` that names
  CUDA (``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``, an ordinal) becomes the CPU, and the
  tensor made is charged to the fake GPU in the ledger; ``.cuda()`` and ``.to("cuda")`` copy a
  tensor that is not on a fake GPU yet (as a real move does), ``.cpu()`` copies one that is.
  The mode is per thread: new ``threading`` threads enter it as they start;
- kernels for ``aten::empty.memory_format`` and ``aten::empty_strided`` under the dispatch key
  CUDA: a factory given a CUDA device in a thread without the mode (one a C++ library started)
  still gets host memory;
- ``torch.cuda``'s queries answered from the process's view of the node (:class:`View`), its
  memory queries from the ledger (:mod:`rlsim.standin.ledger`), synchronisation, caches,
  streams, events, NVTX and graph capture made harmless;
- ``torch.distributed``: NCCL asked for becomes gloo, bound to the node's address
  (:mod:`rlsim.standin.gloo`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from rlsim.standin.ledger import GIB, Ledger, OutOfMemory

CPU = torch.device("cpu")
# what a real device of each accelerator type reports (torch.cuda.get_device_properties)
CAPABILITY = {"H100": (9, 0), "H200": (9, 0), "H20": (9, 0), "GH200": (9, 0), "B200": (10, 0),
              "A100": (8, 0), "A10G": (8, 6), "L4": (8, 9), "L40S": (8, 9), "V100": (7, 0)}


@dataclass
class View:
    """What this process sees of its node: the fake GPUs it may use (Ray's ids, in order; its
    device indices are positions in this list), their size and type, the node's address."""

    gpu_ids: list[str]
    memory_gb: float
    accelerator: str
    node: str
    address: str
    ledger_dir: Path | None

    @classmethod
    def from_env(cls, env=os.environ) -> View:
        """From the variables rlsim sets on a stand-in node (:func:`rlsim.standin.node_env`) and
        CUDA_VISIBLE_DEVICES, which Ray sets for a worker given GPUs; unset (a driver, a
        process Ray gave none), every GPU of the node, as CUDA shows them all."""
        visible = env.get("CUDA_VISIBLE_DEVICES")
        ids = [d for d in visible.split(",") if d] if visible is not None else \
            [str(i) for i in range(int(env.get("RLSIM_NODE_GPUS", "0") or 0))]
        folder = env.get("RLSIM_GPU_LEDGER")
        return cls(ids, float(env.get("RLSIM_GPU_MEMORY_GB", "80") or 80),
                   env.get("RLSIM_ACCELERATOR", ""), env.get("RLSIM_NODE", "0"),
                   env.get("RLSIM_NODE_ADDRESS", "127.0.0.1"), Path(folder) if folder else None)


class _State:
    view: View
    ledger: Ledger
    visible: str | None = None  # the CUDA_VISIBLE_DEVICES the view was read with
    current = threading.local()  # torch.cuda.set_device is per thread, as CUDA's is
    made: dict[int, list] = {}  # a storage's C object -> [fake GPU index, bytes], while alive
    lock = threading.RLock()


S = _State()


def view() -> View:
    """This process's view of its node, read again when CUDA_VISIBLE_DEVICES changes: Ray sets
    it for an actor given GPUs after the worker process started, and warm workers import torch
    (and so this stand-in) before that."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen != S.visible:
        with S.lock:
            if seen != S.visible:
                _use(View.from_env())
    return S.view


def ledger() -> Ledger:
    view()
    return S.ledger


def _use(v: View) -> None:
    S.view, S.visible = v, os.environ.get("CUDA_VISIBLE_DEVICES")
    S.ledger = Ledger(v.gpu_ids, int(v.memory_gb * GIB), v.ledger_dir, v.node, v.address)
    S.made.clear()


# ---- placement ----------------------------------------------------------------------------------

def _index(device) -> int | None:
    """The fake device index ``device`` names, or None when it names no CUDA device."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        if not device.startswith("cuda"):
            return None
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda":
        return device.index if device.index is not None else current_device()
    return None


def _check(index: int) -> int:
    if not 0 <= index < len(view().gpu_ids):
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {index}: this process "
                           f"sees {len(view().gpu_ids)} fake GPU(s) of node {view().node}, "
                           f"CUDA_VISIBLE_DEVICES={','.join(view().gpu_ids)!r}) [rlsim device "
                           "stand-in]")
    return index


def _take(index: int, nbytes: int) -> None:
    """``nbytes`` more on fake GPU ``index``, or torch's own out-of-memory error."""
    try:
        ledger().charge(index, nbytes)
    except OutOfMemory as e:
        raise torch.OutOfMemoryError(str(e)) from None


def _charge(t, index: int):
    """Count ``t``'s storage on fake GPU ``index`` until it is freed; ``t`` back. Storages are
    known by their C object (stable through ``resize_``), each with the bytes it holds."""
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.untyped_storage()
    key, nbytes = storage._cdata, storage.nbytes()
    with S.lock:
        if key in S.made or not nbytes:
            return t
        _take(index, nbytes)
        S.made[key] = [index, nbytes]
    weakref.finalize(storage, _freed, key)
    return t


def _freed(key: int) -> None:
    with S.lock:
        entry = S.made.pop(key, None)
        if entry is not None:
            ledger().release(*entry)


def _resized(real):
    """``UntypedStorage.resize_`` that keeps the ledger right: FSDP frees a parameter's memory
    with ``storage.resize_(0)`` and gets it back by resizing again."""

    def resize_(self, size):
        with S.lock:
            entry = S.made.get(self._cdata)
            if entry is not None and size > entry[1]:
                _take(entry[0], size - entry[1])
            elif entry is not None:
                ledger().release(entry[0], entry[1] - size)
            if entry is not None:
                entry[1] = size
        return real(self, size)

    return resize_


def _storage_cuda(self, device=None, non_blocking=False):
    """``UntypedStorage.cuda`` (and ``.to`` a CUDA device): a host copy, counted on the fake GPU
    (what ``torch.load(map_location="cuda")`` restores each storage through)."""
    index = current_device() if device is None else _index(device)
    if index is None or index < 0:
        index = current_device()
    if (entry := S.made.get(self._cdata)) is not None and entry[0] == index:
        return self
    copy = self.clone()
    _charge(torch.empty(0, dtype=torch.uint8).set_(copy), _check(index))
    return copy


def on_fake_gpu(t: torch.Tensor) -> int | None:
    """The fake GPU ``t``'s storage is on, or None."""
    entry = S.made.get(t.untyped_storage()._cdata)
    return None if entry is None else entry[0]


def _to_cuda(t: torch.Tensor, index: int, dtype=None, memory_format=None, copy=False):
    if on_fake_gpu(t) == index and (dtype is None or dtype == t.dtype) and not copy and \
            memory_format in (None, torch.preserve_format):
        return t
    kwargs = {"memory_format": memory_format} if memory_format is not None else {}
    return _charge(t.to(CPU, dtype=dtype, copy=True, **kwargs), _check(index))


def _to_cpu(t: torch.Tensor, dtype=None, memory_format=None, copy=False):
    kwargs = {"memory_format": memory_format} if memory_format is not None else {}
    copy = copy or on_fake_gpu(t) is not None
    return t.to(CPU, dtype=dtype, copy=copy, **kwargs) if copy or dtype is not None or kwargs \
        else t


def _parse_to(args, kwargs):
    """``Tensor.to``'s arguments: (device or None, dtype, memory_format, copy), in each of its
    forms (``to(device, dtype, non_blocking, copy)``, ``to(dtype, non_blocking, copy)``,
    ``to(other, non_blocking, copy)``); an ordinal is a CUDA device (torch's own parser asks for
    an accelerator), and a tensor on a fake GPU stands for that GPU."""
    args, kwargs = list(args), dict(kwargs)
    copy = kwargs.pop("copy", False)
    first = args[0] if args else None
    # where the positional copy flag sits: after non_blocking
    at = 2 if isinstance(first, (torch.dtype, torch.Tensor)) else 3
    if len(args) > at:
        copy = args.pop(at)
    if isinstance(first, torch.Tensor) and (index := on_fake_gpu(first)) is not None:
        args[0] = torch.device("cuda", index)
        kwargs.setdefault("dtype", first.dtype)
    elif isinstance(first, int) and not isinstance(first, bool):
        args[0] = f"cuda:{first}"
    if isinstance(kwargs.get("device"), int) and not isinstance(kwargs["device"], bool):
        kwargs["device"] = f"cuda:{kwargs['device']}"
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    return device, dtype, memory_format, copy


# conversions of a tensor that stay on its device (a cast of a model on a GPU stays there)
_SAME_DEVICE = {torch.Tensor.half, torch.Tensor.float, torch.Tensor.bfloat16, torch.Tensor.double,
                torch.Tensor.clone, torch.Tensor.contiguous, torch.Tensor.type}
# functions that may return their input's own memory, where a move to a GPU would copy it
_MAY_ALIAS = {torch.as_tensor, torch.asarray}


class _Placement(TorchFunctionMode):
    """Every call that names a CUDA device gets the CPU instead, and its result the ledger's
    charge (see the module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            t, *rest = args
            device = rest[0] if rest else kwargs.get("device")
            return _to_cuda(t, current_device() if device is None else _index(device),
                            memory_format=kwargs.get("memory_format"))
        if func is torch.Tensor.to:
            device, dtype, memory_format, copy = _parse_to(args[1:], kwargs)
            t = args[0]
            if device is not None and device.type == "cuda":
                return _to_cuda(t, _index(device), dtype, memory_format, copy)
            if device is not None and device.type == "cpu":
                return _to_cpu(t, dtype, memory_format, copy)
            return self._same_device(func, args, kwargs)
        if func is torch.Tensor.cpu:
            return _to_cpu(args[0], memory_format=kwargs.get("memory_format"))
        if func is torch.Tensor.pin_memory:
            return args[0]  # host memory already; nothing to pin it for
        if func is torch.Tensor.is_pinned:
            return False
        if func in _SAME_DEVICE:
            return self._same_device(func, args, kwargs)
        if kwargs.get("pin_memory"):
            kwargs = {k: v for k, v in kwargs.items() if k != "pin_memory"}
        index = _index(kwargs["device"]) if "device" in kwargs else None
        if index is None:
            return func(*args, **kwargs)
        kwargs = {**kwargs, "device": CPU}
        with torch._C.DisableTorchFunction():
            out = func(*args, **kwargs)
        if func in _MAY_ALIAS and isinstance(out, torch.Tensor) and args and \
                not isinstance(args[0], (list, tuple, int, float, bool)):
            out = out.clone()  # the input's memory (a tensor, a numpy array) is not the GPU's
        return _charge(out, _check(index))

    @staticmethod
    def _same_device(func, args, kwargs):
        out = func(*args, **kwargs)
        index = on_fake_gpu(args[0]) if isinstance(args[0], torch.Tensor) else None
        if index is not None and isinstance(out, torch.Tensor) and out is not args[0]:
            _charge(out, index)
        return out


_MODE = _Placement()


def enter_mode() -> None:
    """The placement mode in this thread (a no-op where it already is)."""
    if not getattr(S.current, "mode", False):
        _MODE.__enter__()
        S.current.mode = True


def _threads_enter_mode() -> None:
    """Every thread ``threading`` starts enters the mode first, whatever its ``run``."""
    real = threading.Thread._bootstrap_inner

    def bootstrap(self):
        enter_mode()
        return real(self)

    threading.Thread._bootstrap_inner = bootstrap


def _dispatcher_net() -> None:
    """Host memory for a factory given a CUDA device in a thread without the mode."""
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kept alive below

    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
        out = torch.empty(size, dtype=dtype, layout=layout, device=CPU,
                          memory_format=memory_format)
        return _charge(out, _check(_index(device) if device is not None else 0))

    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
        out = torch.empty_strided(size, stride, dtype=dtype, layout=layout, device=CPU)
        return _charge(out, _check(_index(device) if device is not None else 0))

    lib.impl("empty.memory_format", empty, "CUDA")
    lib.impl("empty_strided", empty_strided, "CUDA")
    S.library = lib


# ---- torch.cuda's answers ----------------------------------------------------------------------

def current_device() -> int:
    return getattr(S.current, "device", 0)


def set_device(device) -> None:
    index = _index(device)
    if index is None or index < 0:  # torch ignores a negative ordinal
        return
    S.current.device = _check(index)


def _device_arg(device=None) -> int:
    if device is None:
        return current_device()
    index = _index(device)
    if index is None:
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return _check(index)


class _Properties:
    def __init__(self, index: int) -> None:
        v = view()
        self.name = f"NVIDIA {v.accelerator}" if v.accelerator else "rlsim fake GPU"
        self.total_memory = int(v.memory_gb * GIB)
        self.major, self.minor = CAPABILITY.get(v.accelerator, (9, 0))
        self.multi_processor_count = 132
        self.is_integrated, self.is_multi_gpu_board = False, False
        self.uuid = f"GPU-rlsim-{v.node}-{v.gpu_ids[index]}"
        self.L2_cache_size = 50 * 1024**2
        self.warp_size = 32
        # what else torch's own _CudaDeviceProperties carries, which torch reads (inductor's
        # cache key asks gcnArchName where torch.version.cuda is None, as on the CPU build)
        self.gcnArchName = ""
        self.pci_bus_id, self.pci_device_id, self.pci_domain_id = index, 0, 0
        self.max_threads_per_multi_processor = 2048
        self.regs_per_multiprocessor = 65536
        self.shared_memory_per_block = 48 * 1024
        self.shared_memory_per_multiprocessor = 228 * 1024

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 1024**2}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid})")


class Stream:
    """A stream that runs everything at once: work is done when it is asked for."""

    def __init__(self, device=None, priority: int = 0, **_):
        self.device = torch.device("cuda", _device_arg(device))
        self.priority = priority
        self.cuda_stream = 0

    def synchronize(self) -> None: ...
    def wait_stream(self, stream) -> None: ...
    def wait_event(self, event) -> None: ...
    def query(self) -> bool: return True
    def is_capturing(self) -> bool: return False

    def record_event(self, event=None):
        return event or Event()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None: ...

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        import time

        self._clock, self._at = time.perf_counter, None

    def record(self, stream=None) -> None:
        self._at = self._clock()

    def synchronize(self) -> None: ...
    def wait(self, stream=None) -> None: ...
    def query(self) -> bool: return True

    def elapsed_time(self, end: Event) -> float:
        return ((end._at or 0.0) - (self._at or 0.0)) * 1000.0


_STREAM = None


class _Graph:
    """Capture runs the captured code once, eagerly; replay does not run it again."""

    def capture_begin(self, *a, **k) -> None: ...
    def capture_end(self) -> None: ...
    def replay(self) -> None: ...
    def reset(self) -> None: ...
    def pool(self): return (0, 0)


@contextlib.contextmanager
def _graph(cuda_graph, *a, **k):
    yield cuda_graph


class _DeviceContext:
    """``torch.cuda.device``: a class, as torch's own code checks ``isinstance(x,
    torch.cuda.device)`` (``torch.load(map_location="cuda")`` does)."""

    def __init__(self, device) -> None:
        index = _index(device)
        self.idx = index if index is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)
        return self

    def __exit__(self, *exc) -> bool:
        S.current.device = self.prev_idx
        return False


class _DeviceOf(_DeviceContext):
    """``torch.cuda.device_of(obj)``: the device of a tensor on a fake GPU, else none."""

    def __init__(self, obj) -> None:
        index = on_fake_gpu(obj) if isinstance(obj, torch.Tensor) else None
        super().__init__(-1 if index is None else index)


def _noop(*a, **k) -> None:
    return None


def _stats(device=None) -> dict:
    d = _device_arg(device)
    held, peak = ledger().held[d], ledger().peak[d]
    out = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        out[f"{kind}.all.current"], out[f"{kind}.all.peak"] = held, peak
    out["num_ooms"] = 0
    return out


def _answers() -> dict:
    cuda = torch.cuda

    def stream(device=None):
        global _STREAM
        _STREAM = _STREAM or Stream(device)
        return _STREAM

    def rng_state(device="cuda"):
        return torch.get_rng_state()

    return {
        "is_available": lambda: bool(view().gpu_ids), "is_initialized": lambda: True,
        "_lazy_init": _noop, "init": _noop, "_is_in_bad_fork": lambda: False,
        "device_count": lambda: len(view().gpu_ids), "current_device": current_device,
        "set_device": set_device, "device": _DeviceContext, "device_of": _DeviceOf,
        "get_device_properties": lambda device=None: _Properties(_device_arg(device)),
        "get_device_name": lambda device=None: _Properties(_device_arg(device)).name,
        "get_device_capability": lambda device=None: (
            (p := _Properties(_device_arg(device))).major, p.minor),
        "get_arch_list": lambda: ["sm_80", "sm_90"], "is_bf16_supported": lambda *a, **k: True,
        "synchronize": _noop, "empty_cache": _noop, "ipc_collect": _noop,
        "mem_get_info": lambda device=None: (ledger().free(_device_arg(device)),
                                             ledger().capacity),
        "memory_allocated": lambda device=None: ledger().held[_device_arg(device)],
        "memory_reserved": lambda device=None: ledger().held[_device_arg(device)],
        "max_memory_allocated": lambda device=None: ledger().peak[_device_arg(device)],
        "max_memory_reserved": lambda device=None: ledger().peak[_device_arg(device)],
        "reset_peak_memory_stats": lambda device=None: ledger().reset_peak(
            _device_arg(device)),
        "reset_max_memory_allocated": lambda device=None: ledger().reset_peak(
            _device_arg(device)),
        "reset_accumulated_memory_stats": _noop, "memory_stats": _stats,
        "memory_summary": lambda device=None, abbreviated=False: str(_stats(device)),
        "set_per_process_memory_fraction": _noop, "utilization": lambda device=None: 0,
        "current_stream": stream, "default_stream": stream, "set_stream": _noop,
        "stream": lambda s=None: contextlib.nullcontext(s), "Stream": Stream, "Event": Event,
        "is_current_stream_capturing": lambda: False, "CUDAGraph": _Graph, "graph": _graph,
        "manual_seed": _noop, "manual_seed_all": _noop, "seed": _noop, "seed_all": _noop,
        "initial_seed": torch.initial_seed, "get_rng_state": rng_state,
        "get_rng_state_all": lambda: [torch.get_rng_state() for _ in view().gpu_ids],
        "set_rng_state": _noop, "set_rng_state_all": _noop,
    } if cuda else {}


def _answer_accelerator() -> None:
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    for name, fn in {"is_available": lambda: bool(view().gpu_ids),
                     "current_accelerator": lambda *a, **k: torch.device("cuda"),
                     "device_count": lambda: len(view().gpu_ids),
                     "current_device_index": current_device,
                     "current_device_idx": current_device,
                     "set_device_index": set_device, "set_device_idx": set_device,
                     "synchronize": _noop,
                     "current_stream": lambda *a, **k: torch.cuda.current_stream()}.items():
        if hasattr(acc, name):
            setattr(acc, name, _own(fn))


def _own(fn):
    """``fn`` as a function object of its own: TorchDynamo keeps a rule per torch function and
    refuses one object under two names with different rules."""
    if isinstance(fn, type):
        return fn

    def answer(*args, **kwargs):
        return fn(*args, **kwargs)

    answer.__name__ = getattr(fn, "__name__", "answer")
    return answer


def _nvtx() -> None:
    nvtx = torch.cuda.nvtx
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        setattr(nvtx, name, _own(_noop))
    nvtx.range = lambda *a, **k: contextlib.nullcontext()


def install(seen: View) -> None:
    """Put the stand-in in force in this process (once)."""
    with S.lock:  # anew in a worker forked from a process that had it in force
        _use(seen)
    S.current.device = 0
    if getattr(S, "installed", False):
        return
    S.installed = True
    memory = getattr(torch.cuda, "memory", None)
    for name, fn in _answers().items():
        own = _own(fn)
        setattr(torch.cuda, name, own)
        if memory is not None and hasattr(memory, name):  # torch.cuda.memory.mem_get_info...
            setattr(memory, name, own)
    torch.UntypedStorage.resize_ = _resized(torch.UntypedStorage.resize_)
    torch.UntypedStorage.cuda = _storage_cuda
    to = torch.UntypedStorage.to

    def storage_to(self, *, device, non_blocking=False):
        if _index(device) is not None:
            return _storage_cuda(self, device, non_blocking)
        return to(self, device=device, non_blocking=non_blocking)

    torch.UntypedStorage.to = storage_to
    torch.cuda.graphs.CUDAGraph = _Graph
    _nvtx()
    _answer_accelerator()
    _dispatcher_net()
    from rlsim.standin import gloo

    gloo.nccl_as_gloo(lambda: view().address)
    enter_mode()
    _threads_enter_mode()
