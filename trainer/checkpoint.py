"""Checkpoint directories, written atomically and validated before use. No Ray, no torch.

Every function takes ``root``, the checkpoint directory (``trainer.checkpoint_dir``, by default
``<run_dir>/checkpoints``), which every node must see: workers on all nodes write into it and the
driver seals it.

Layout: ``<root>/global_step_N/`` plus ``latest_checkpointed_iteration.txt``.
A save goes: workers write into ``.tmp-global_step_N-<nonce>/`` -> ``trainer_state.json`` ->
``manifest.json`` (size and sha256 of every file) -> fsync files and dirs -> rename to
``global_step_N`` -> fsync the parent -> pointer replaced atomically (temp file + rename) ->
prune to ``keep_last``. A kill at any point leaves the pointer on the previous complete checkpoint.

Node-local disks (FIELD-NOTES 7): files that workers wrote but the driver cannot see are listed in
the manifest under ``unseen`` (path -> the nodes that have it). Such a checkpoint can never be
resumed, on any node: :func:`latest_valid` raises :class:`NotShared` for it rather than fall back
to older ones (also scattered) and let a run silently start again from step 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path

POINTER = "latest_checkpointed_iteration.txt"
MANIFEST = "manifest.json"
STATE = "trainer_state.json"
STEP_RE = re.compile(r"^global_step_(\d+)$")


class NotShared(Exception):
    """The checkpoint was saved across node-local disks: the driver cannot see all of it."""


def begin(root: str | Path, step: int) -> Path:
    """A fresh temp dir for step ``step``'s checkpoint."""
    tmp = Path(root) / f".tmp-global_step_{step}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    return tmp


def clean_temp(root: str | Path) -> list[Path]:
    """Remove leftovers of interrupted saves (only one driver writes a checkpoint dir)."""
    root = Path(root)
    gone = [p for p in root.glob(".tmp-*")] + [p for p in root.glob(".trash-*")]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def listing(path: str | Path) -> list[str]:
    """The files under ``path`` as this process sees them (relative paths, sorted)."""
    root = Path(path)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def unseen(tmp: Path, seen_by_nodes: dict[str, list[str]]) -> dict[str, list[str]]:
    """Files some node's workers see under ``tmp`` that this process does not: path -> nodes."""
    here = set(listing(tmp))
    missing: dict[str, list[str]] = {}
    for node, files in sorted(seen_by_nodes.items()):
        for rel in files:
            if rel not in here:
                missing.setdefault(rel, []).append(node)
    return missing


def commit(root: str | Path, step: int, tmp: Path, state: dict, keep_last: int,
           not_here: dict[str, list[str]] | None = None) -> Path:
    """Seal ``tmp`` as ``global_step_<step>`` and move the pointer to it; returns the final dir.
    ``not_here``: files workers wrote that this process cannot see (see :func:`unseen`)."""
    root = Path(root)
    (tmp / STATE).write_text(json.dumps(state, sort_keys=True))
    files = _files(tmp)
    manifest = {"step": step, "files": {str(p.relative_to(tmp)): {
        "size": p.stat().st_size, "sha256": _sha256(p)} for p in files},
        "unseen": not_here or {}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1))
    for p in [*files, tmp / MANIFEST]:
        _fsync(p)
    for d in sorted({p.parent for p in files} | {tmp}, key=lambda d: -len(d.parts)):
        _fsync(d)
    final = root / f"global_step_{step}"
    if final.exists():  # a save of the same step by an earlier attempt: replace it whole
        final.rename(root / f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
    tmp.rename(final)
    _fsync(root)
    _write_pointer(root, step)
    prune(root, keep_last)
    return final


def _write_pointer(root: Path, step: int) -> None:
    tmp = root / f".{POINTER}.{uuid.uuid4().hex[:8]}"
    with tmp.open("w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(root / POINTER)
    _fsync(root)


def steps(root: str | Path) -> list[int]:
    """Steps with a ``global_step_N`` dir, newest first (valid or not)."""
    root = Path(root)
    found = [int(m.group(1)) for p in root.glob("global_step_*") if (m := STEP_RE.match(p.name))]
    return sorted(found, reverse=True)


def prune(root: str | Path, keep_last: int) -> None:
    root = Path(root)
    for old in steps(root)[keep_last:]:
        shutil.rmtree(root / f"global_step_{old}", ignore_errors=True)
    for trash in root.glob(".trash-*"):
        shutil.rmtree(trash, ignore_errors=True)


def validate(path: Path) -> str | None:
    """None if ``path`` is a complete checkpoint, else the reason it is not."""
    mf = path / MANIFEST
    if not path.is_dir():
        return f"{path}: no such checkpoint directory"
    if not mf.is_file():
        return f"{path}: no {MANIFEST} (the save did not finish)"
    try:
        manifest = json.loads(mf.read_text())
    except ValueError as e:
        return f"{mf}: unreadable ({e})"
    for rel, meta in manifest.get("files", {}).items():
        f = path / rel
        if not f.is_file():
            return f"{path}: {rel} is missing"
        if f.stat().st_size != meta["size"]:
            return f"{path}: {rel} has {f.stat().st_size} bytes, the manifest says {meta['size']}"
        if _sha256(f) != meta["sha256"]:
            return f"{path}: {rel} does not match its sha256 in the manifest (corrupt)"
    if STATE not in manifest.get("files", {}):
        return f"{path}: the manifest lists no {STATE}"
    return None


def pointer(root: str | Path) -> int | None:
    p = Path(root) / POINTER
    try:
        return int(p.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def scattered(path: Path) -> str | None:
    """None unless the checkpoint at ``path`` was saved across node-local disks; then why."""
    try:
        missing = json.loads((path / MANIFEST).read_text()).get("unseen") or {}
    except (OSError, ValueError):
        return None
    if not missing:
        return None
    nodes = sorted({n for where in missing.values() for n in where})
    return (f"{path}: {len(missing)} of its files exist only on node(s) {', '.join(nodes)} "
            f"(e.g. {', '.join(sorted(missing)[:3])}): the checkpoint directory {path.parent} "
            "is on node-local disk, not storage every node shares")


def latest_valid(root: str | Path) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from: the pointer's, else the newest valid one; plus the reasons
    each newer candidate was rejected (the driver logs them as ``checkpoint_invalid`` events).
    Raises :class:`NotShared` when the first complete candidate was saved across node-local
    disks: no older one can be better, and starting from scratch would hide it."""
    root = Path(root)
    rejected: list[str] = []
    at = pointer(root)
    order = ([at] if at is not None else []) + [s for s in steps(root) if s != at]
    for step in order:
        path = root / f"global_step_{step}"
        reason = validate(path)
        if reason is None and (why := scattered(path)):
            raise NotShared(why)
        if reason is None:
            return path, rejected
        rejected.append(reason)
    return None, rejected


def read_state(path: Path) -> dict:
    return json.loads((path / STATE).read_text())
