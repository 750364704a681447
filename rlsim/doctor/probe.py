"""One node's side of ``rlsim doctor``: ``python -m rlsim.doctor.probe PHASE JSON`` prints one JSON
object. Standard library only; it reads Ray's and torch's versions from their files instead of
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
           "reach": reach(args.get("targets", []))}
    if args.get("dir"):
        try:
            d = _marker_dir(args["dir"], args["nonce"])
            d.mkdir(parents=True, exist_ok=True)
            (d / f"n{args['index']}").write_text(socket.gethostname())
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


if __name__ == "__main__":
    os.umask(0o022)
    print(json.dumps(run(sys.argv[1], json.loads(sys.argv[2]))))
