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

    def wrap(fn, position: int):
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

    def gloo_barrier(group=None, async_op=False, device_ids=None):
        return barrier(group=group, async_op=async_op)

    for module in (dist, c10d):
        module.init_process_group = wrap(c10d.init_process_group, 0)
        module.new_group = wrap(c10d.new_group, 3)
        module.barrier = gloo_barrier
        module.is_nccl_available = lambda: True
