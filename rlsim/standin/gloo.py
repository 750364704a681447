"""gloo bound to one address, and NCCL asked for answered by gloo: the device stand-in's
``torch.distributed`` (and the reference trainer's gloo groups).

torch binds a gloo group's device to the address the hostname resolves to and takes no argument
for another (GLOO_SOCKET_IFNAME names an interface, and every simulated node shares ``lo``). A
simulated node has an address of its own (127.77.x.y): traffic bound to it is what a partition
or a blocked port of that node cuts, so every gloo group of a node's process is bound there.
torch and the standard library only: the reference trainer imports this module.
"""

from __future__ import annotations

import contextlib
import inspect

import torch


def bound_class(ip):
    """A stand-in for ``ProcessGroupGloo`` whose groups bind their device to ``ip`` (an address,
    or a function that gives it as each group is made); called as torch calls the class, and
    ``isinstance`` still sees the real one."""
    from torch.distributed import distributed_c10d as c10d

    real = getattr(c10d.ProcessGroupGloo, "real", c10d.ProcessGroupGloo)

    class _Bound(type):
        def __call__(cls, store, rank, size, timeout, **options):
            # torch passes more options as it grows (2.14: enable_reconfigure); each is a field
            # of the options object, and one that is not fails here rather than being dropped
            opts = real._Options()
            opts._timeout = timeout
            for name, value in options.items():
                if not hasattr(opts, name):
                    raise TypeError(f"ProcessGroupGloo option {name!r}: torch "
                                    f"{torch.__version__}'s gloo options have no such field")
                setattr(opts, name, value)
            opts._devices = [real.create_device(hostname=ip() if callable(ip) else ip)]
            return real(store, rank, size, opts)

        def __instancecheck__(cls, obj) -> bool:
            return isinstance(obj, real)

        def __getattr__(cls, name):
            return getattr(real, name)

    return _Bound("ProcessGroupGloo", (), {"real": real})


@contextlib.contextmanager
def bound_to(ip: str):
    """Within: ``init_process_group('gloo')`` binds its device to ``ip``."""
    from torch.distributed import distributed_c10d as c10d

    before = c10d.ProcessGroupGloo
    c10d.ProcessGroupGloo = bound_class(ip)
    try:
        yield
    finally:
        c10d.ProcessGroupGloo = before


def as_gloo(backend) -> str | None:
    """The backend a stand-in process uses for ``backend``: gloo for anything that names NCCL
    (``"nccl"``, ``"cpu:gloo,cuda:nccl"``); None (unchanged) for anything else."""
    if backend is None:
        return "gloo"  # torch's default for a CUDA device would be NCCL
    text = str(backend).lower()
    return "gloo" if "nccl" in text or text.startswith("cuda") else None


def nccl_as_gloo(ip) -> None:
    """In this process from now on: every group bound to ``ip``; one asked for on NCCL made on
    gloo, without the NCCL-only arguments (``device_id``, a barrier's ``device_ids``)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_available():
        return
    c10d.ProcessGroupGloo = bound_class(ip)

    def wrap(fn):
        position = list(inspect.signature(fn).parameters).index("backend")

        def call(*args, **kwargs):
            args = list(args)
            if len(args) > position:
                args[position] = as_gloo(args[position]) or args[position]
            elif "backend" in kwargs or fn.__name__ == "init_process_group":
                kwargs["backend"] = as_gloo(kwargs.get("backend")) or kwargs["backend"]
            kwargs.pop("device_id", None)
            if kwargs.get("pg_options") is not None and kwargs.get("backend") == "gloo":
                kwargs.pop("pg_options")  # NCCL's options; gloo's group takes none of them
            return fn(*args, **kwargs)

        call.__name__, call.__doc__, call.__wrapped__ = fn.__name__, fn.__doc__, fn
        return call

    barrier = c10d.barrier

    def gloo_barrier(group=None, async_op=False, device_ids=None, **kwargs):
        return barrier(group=group, async_op=async_op, **kwargs)  # device_ids: NCCL's alone

    init, new = wrap(c10d.init_process_group), wrap(c10d.new_group)
    for module in (dist, c10d):
        module.init_process_group, module.new_group, module.barrier = init, new, gloo_barrier
    # is_nccl_available() stays False: torch's own code asks it before it names ProcessGroupNCCL,
    # which the CPU build does not have (inductor's cache, for one, then fails)


class GlooCommunicator:
    """vLLM's ``PyNcclCommunicator`` as the device stand-in gives it: the calls frameworks make
    to push weights and reduce (``broadcast``, ``all_reduce``, ``send``, ``recv``,
    ``all_gather``, ``reduce_scatter``; not ``reduce``, ``scatter``, the ``v`` variants or
    ``batch_isend_irecv``) on a gloo group over the group's own store, its device bound to the
    node's address. Frameworks make one between their trainer's rank 0 and the vLLM engines to
    push weights (OpenRLHF's ``stateless_init_process_group``); vLLM's CPU build has no NCCL, so
    its own communicator disables itself without a word and every push would load uninitialised
    memory as weights.

    ``group``: a vLLM ``StatelessProcessGroup`` (its ``store``, ``rank``, ``world_size``) or a
    torch process group; ``device`` is kept for what reads it (``.device``); ``ip``: the address
    (or a function giving it) gloo binds to."""

    def __init__(self, group, device, library_path=None, *, ip="127.0.0.1") -> None:
        import datetime

        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        self.group, self.available, self.disabled = group, True, False
        self.device = torch.device("cuda", device) if isinstance(device, int) else \
            torch.device(device)
        if hasattr(group, "store") and hasattr(group, "world_size"):
            self.rank, self.world_size = group.rank, group.world_size
            store = c10d.PrefixStore("rlsim-gloo", group.store)
        else:
            self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
            store = c10d.PrefixStore("rlsim-gloo", c10d._get_default_store())
        real = getattr(c10d.ProcessGroupGloo, "real", c10d.ProcessGroupGloo)
        opts = real._Options()
        opts._timeout = datetime.timedelta(minutes=30)
        opts._devices = [real.create_device(hostname=ip() if callable(ip) else ip)]
        self.pg = real(store, self.rank, self.world_size, opts)
        import sys

        print(f"rlsim device stand-in: vLLM's NCCL communicator made on gloo (rank {self.rank} "
              f"of {self.world_size}, {opts._devices[0]})", file=sys.stderr, flush=True)

    def broadcast(self, tensor, src: int, stream=None) -> None:
        opts = dist_options("BroadcastOptions", rootRank=src)
        self.pg.broadcast([tensor], opts).wait()

    def all_reduce(self, in_tensor, out_tensor=None, op=None, stream=None):
        """vLLM's order and contract: the input is left alone; the sum lands in ``out_tensor``
        (a new tensor when none is given), which is returned."""
        import torch.distributed as dist

        out = torch.empty_like(in_tensor) if out_tensor is None else out_tensor
        out.copy_(in_tensor)
        opts = dist_options("AllreduceOptions", reduceOp=op or dist.ReduceOp.SUM)
        self.pg.allreduce([out], opts).wait()
        return out

    def all_gather(self, output_tensor, input_tensor, stream=None) -> None:
        parts = list(output_tensor.chunk(self.world_size))
        self.pg.allgather([parts], [input_tensor]).wait()

    def reduce_scatter(self, output_tensor, input_tensor, op=None, stream=None) -> None:
        summed = self.all_reduce(input_tensor, op=op)
        output_tensor.copy_(summed.chunk(self.world_size)[self.rank])

    def send(self, tensor, dst: int, stream=None) -> None:
        self.pg.send([tensor], dst, 0).wait()

    def recv(self, tensor, src: int, stream=None) -> None:
        self.pg.recv([tensor], src, 0).wait()

    def group_start(self) -> None: ...
    def group_end(self) -> None: ...
    def destroy(self) -> None: ...


def dist_options(name: str, **fields):
    """A torch.distributed options object (``BroadcastOptions``...) with ``fields`` set."""
    import torch.distributed as dist

    opts = getattr(dist, name)()
    for key, value in fields.items():
        setattr(opts, key, value)
    return opts
