"""What a trainer and rlsim agree on, written once, here: file layout, node labels and resources,
the event types by which a trainer says it noticed a fault.

The standard library only. The reference trainer imports this module (and :mod:`rlsim.events`,
:mod:`rlsim.reach`, :mod:`rlsim.standin.gloo`), as a trainer of your own may; it imports nothing
else of rlsim. rlsim's
backends import nothing of the trainer at all: a backend hosts any workload.
"""

# ``<run_dir>/faults/gpu_reserve.json``: ``{"<node ip>" or "*": GiB}`` a harness holds on every
# GPU of that node (fake GPUs' memory pressure); the workers read it before each phase.
RESERVE_FILE = "faults/gpu_reserve.json"

# ``<run_dir>/faults/gpus_lost.json``: ``{"<node ip>": [GPU ids as Ray hands them out]}``: fake
# GPUs a harness has failed (an Xid, a device fallen off the bus). A worker whose
# CUDA_VISIBLE_DEVICES holds one, on that node, dies of it, as a process does whose device is
# gone, after recording ``Fatal GPU error: ...`` in its crash log.
GPU_LOST_FILE = "faults/gpus_lost.json"

# Set (to 1) in the environment of every process of a node whose GPUs are fake: a trainer treats
# its GPUs as the CPU there, even on a host with real GPUs, whose ordinals Ray's numbering of the
# fake ones would otherwise reach. Nodes given real devices (``cluster.cuda_devices``) lack it.
FAKE_GPUS_VAR = "RLSIM_FAKE_GPUS"

# Set (to 1) beside FAKE_GPUS_VAR where the node has rlsim's device stand-in (cluster.cuda_standin,
# rlsim.standin): torch there sees the fake GPUs as CUDA devices whose memory is the host's, so a
# trainer may place its tensors on ``cuda`` as on a real GPU node.
STANDIN_VAR = "RLSIM_CUDA_STANDIN"



def distinct_devices(visible: str) -> str:
    """A CUDA_VISIBLE_DEVICES value with each device once: a node's GPUs may stand on one real
    device (``cluster.cuda_devices``), and CUDA reads a list that repeats an ordinal as no
    device at all, so a process that sees several of the node's GPUs keeps one entry each."""
    return ",".join(dict.fromkeys(d for d in visible.split(",") if d))


# The Ray node label a harness sets on every fake-GPU node: GiB per GPU it simulates.
MEMORY_LABEL = "rlsim-gpu-memory-gb"

# Event types by which the trainer says it noticed a fault (see trainer.events).
DETECTION_EVENTS = ("worker_died", "stalled", "node_lost", "preemption_notice", "error", "oom")
