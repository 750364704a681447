"""The writer that test_checkpoint_crash.py kills: a small process that forks one writer per
request, each saving checkpoints through the real checkpoint code until it SIGKILLs itself.

Run as ``python crash_writer.py CHECKPOINT_PY ROOT``; it loads ``trainer/checkpoint.py`` from its
path (no torch, no Ray, so a fork costs a millisecond), then answers each stdin line
``SEED KIND N`` with ``SIGNAL STEP...``: how the writer ended and every step the pointer moved to.
"""

import importlib.util
import os
import pathlib
import random
import signal
import sys

ckpt = None  # trainer/checkpoint.py, loaded from the path given on the command line


def trainer_files(rng: random.Random, step: int) -> dict[str, bytes]:
    """What the workers of a small actor-critic run write for one checkpoint."""
    files = {f"actor/rank_{r}/model_states.pt": rng.randbytes(rng.randint(1, 24_000))
             for r in range(2)}
    files |= {f"actor/rank_{r}/optim_states.pt": rng.randbytes(rng.randint(1, 24_000))
              for r in range(2)}
    files |= {f"rng/worker_{r}.pt": step.to_bytes(8, "little") for r in range(3)}
    files |= {"critic/ddp.pt": rng.randbytes(8_000), "hf/model.safetensors": rng.randbytes(16_000),
              "hf/config.json": b'{"n_layer": 2}'}
    return files


def arm(kind: str, n: int, root: pathlib.Path, report: int) -> None:
    """In the writer: SIGKILL itself at the n-th call of ``kind``; report every pointer move.
    fsync is a kill point but not carried out: a killed process loses nothing the kernel has,
    and skipping it keeps the rounds fast."""
    seen = {"n": 0}
    real = {name: getattr(os, name) for name in ("mkdir", "rename", "unlink", "rmdir")}
    real |= {"fsync": lambda fd: None}
    real_write = pathlib.Path.write_bytes, pathlib.Path.write_text

    def point(*names: str) -> None:
        if kind == "any" or kind in names:
            seen["n"] += 1
            if seen["n"] == n:
                os.kill(os.getpid(), signal.SIGKILL)

    def wrap(name):
        def call(*args, **kwargs):
            # "seal": the rename that puts a sealed temp dir in place (in a re-save, the second
            # of its two renames)
            sealing = name == "rename" and pathlib.Path(args[0]).name.startswith(".tmp-")
            point(name, *(["seal"] if sealing else []))
            result = real[name](*args, **kwargs)
            if name == "rename" and str(args[1]).endswith(ckpt.POINTER):
                os.write(report, f"{ckpt.pointer(root)}\n".encode())
            return result
        return call

    for name in real:
        setattr(os, name, wrap(name))
    pathlib.Path.write_bytes = lambda self, data: (point("write"), real_write[0](self, data))[1]
    pathlib.Path.write_text = lambda self, text: (point("write"), real_write[1](self, text))[1]


def writer(root: pathlib.Path, seed: int, kind: str, n: int, report: int) -> None:
    """The driver's part in a save loop, killed by :func:`arm`. Never returns."""
    rng = random.Random(seed)
    arm(kind, n, root, report)
    lease = ckpt.Lease.acquire(root)
    ckpt.clean_temp(root)
    latest, _ = ckpt.latest_valid(root)
    step = ckpt.read_state(latest)["step"] if latest else 0
    while True:
        # mostly the next step; sometimes the same or an older one again, as after a restart
        step = max(1, step + rng.choice((1, 1, 1, 0, -2)))
        tmp = ckpt.begin(root, step)
        for rel, data in trainer_files(rng, step).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        ckpt.commit(lease, step, tmp, {"step": step, "loader": {"cursor": step}}, keep_last=2)


def kill_one_save(root: pathlib.Path, seed: int, kind: str, n: int) -> tuple[int, list[int]]:
    """Fork a writer that dies at the n-th ``kind`` call; its exit signal and reported steps."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: never back into pytest, whatever happens
        try:
            os.close(read)
            writer(root, seed, kind, n, write)
        finally:
            os._exit(3)
    os.close(write)
    with os.fdopen(read) as reports:
        moved = [int(line) for line in reports]
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status), moved


def serve(root: pathlib.Path) -> None:
    for line in sys.stdin:
        seed, kind, n = line.split()
        sig, moved = kill_one_save(root, int(seed), kind, int(n))
        print(sig, *moved, flush=True)


if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("checkpoint", sys.argv[1])
    ckpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ckpt)
    serve(pathlib.Path(sys.argv[2]))
