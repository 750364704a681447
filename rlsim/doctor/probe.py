"""One node's side of ``rlsim doctor``: ``python -m rlsim.doctor.probe`` answers each request line
on its standard input (``{"phase": ..., "args": {...}}``) with one JSON line, until the input
ends: one process per node serves all of a doctor's phases (three processes per node cost 2.1 s
of CPU on a 3-node cluster, one 0.8 s, while the trainer's warm workers import). Standard library
only; it reads Ray's and torch's versions from their files instead of
importing them, so a probe answers in a fraction of a second on any node.

Phases (each run on every node before the next starts):

- ``look``: versions; TCP connections to the ``targets`` given (in parallel, each bounded);
  a marker ``<dir>/.rlsim-doctor-<nonce>/n<index>`` written in the checkpoint directory.
- ``seen``: which nodes' markers this node sees there.
- ``clean``: remove this node's marker (and the marker dir once empty).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlsim.files import write_file
from rlsim.host.listeners import interface

CONNECT_TIMEOUT_S = 2.0


def versions() -> dict[str, str | None]:
    """Python, Ray (as ``ray/_version.py`` says: what Ray compares at join), torch, DeepSpeed."""
    found: dict[str, str | None] = {"python": platform.python_version(), "ray": None}
    spec = importlib.util.find_spec("ray")
    if spec and spec.submodule_search_locations:
        text = (Path(list(spec.submodule_search_locations)[0]) / "_version.py").read_text()
        m = re.search(r'^version = "([^"]+)"', text, re.M)
        found["ray"] = m.group(1) if m else None
    for dist in ("torch", "deepspeed"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


NVIDIA_SMI_TIMEOUT_S = 10.0


def gpus() -> list[dict] | None:
    """Each GPU as ``nvidia-smi`` reports it (name, memory, driver), or None without nvidia-smi
    (a node without NVIDIA GPUs, or fake GPUs). Bounded: a hung driver answers within 10 s."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [{"error": f"nvidia-smi: {type(e).__name__}"}]
    if out.returncode:
        return [{"error": f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[:200]}"}]
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line]
    return [{"name": r[0], "memory_mib": r[1], "driver": r[2]} for r in rows if len(r) == 3]


def cuda_and_nccl() -> dict[str, str | None]:
    """The CUDA torch was built for (torch/version.py, read, not imported) and the NCCL wheel
    installed beside it (nvidia-nccl-cu*), each None when absent."""
    found: dict[str, str | None] = {"cuda": None, "nccl": None}
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
        m = re.search(r"^cuda(?:: \S+)? = '([^']+)'", path.read_text(), re.M) \
            if path.exists() else None
        found["cuda"] = m.group(1) if m else None
    # by the wheel's folder name: reading every installed distribution's metadata to find it
    # was 0.19 s of a probe's 0.28 s (208 distributions beside vLLM)
    for entry in map(Path, sys.path):
        for info in entry.glob("nvidia_nccl_cu*.dist-info"):
            found["nccl"] = importlib.metadata.PathDistribution(info).version
    return found


def _connect(target: dict) -> dict:
    try:
        socket.create_connection((target["address"], target["port"]), CONNECT_TIMEOUT_S).close()
        return {**target, "ok": True}
    except OSError as e:
        return {**target, "ok": False, "error": str(e) or type(e).__name__}


def reach(targets: list[dict]) -> list[dict]:
    """Try every target at once: a dropped port costs one timeout, not one per port."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        return list(pool.map(_connect, targets))


def _marker_dir(directory: str, nonce: str) -> Path:
    return Path(directory) / f".rlsim-doctor-{nonce}"


def look(args: dict) -> dict:
    out = {"versions": versions(), "host": socket.gethostname(),
           "reach": reach(args.get("targets", [])),
           "hardware": {"gpus": gpus(), **cuda_and_nccl(),
                        "interface": interface(args.get("address"))}}
    if args.get("dir"):
        try:
            d = _marker_dir(args["dir"], args["nonce"])
            d.mkdir(parents=True, exist_ok=True)
            write_file(d / f"n{args['index']}", socket.gethostname())
        except OSError as e:
            out["write_error"] = str(e)
    return out


def seen(args: dict) -> dict:
    d = _marker_dir(args["dir"], args["nonce"])
    names = [p.name for p in d.glob("n*")] if d.is_dir() else []
    return {"seen": sorted(int(n[1:]) for n in names if n[1:].isdigit())}


def clean(args: dict) -> dict:
    d = _marker_dir(args["dir"], args["nonce"])
    (d / f"n{args['index']}").unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # other nodes' markers still there, or gone already
        d.rmdir()
    return {}


PHASES = {"look": look, "seen": seen, "clean": clean}


def run(phase: str, args: dict) -> dict:
    return PHASES[phase](args)


def serve(requests, answers) -> None:
    """Answer each request line with one flushed JSON line: the asking side waits for it before
    it sends the next phase, which needs every node's previous answer first."""
    for line in requests:
        if line.strip():
            request = json.loads(line)
            answers.write(json.dumps(run(request["phase"], request["args"])) + "\n")
            answers.flush()


if __name__ == "__main__":
    os.umask(0o022)
    serve(sys.stdin, sys.stdout)
