"""Checkpoint directories, written atomically and validated before use. No Ray, no torch.

Every function takes ``root``, the checkpoint directory (``trainer.checkpoint_dir``, by default
``<run_dir>/checkpoints``), or the :class:`Lease` on it. Every node must see it: workers on all
nodes write into it and the driver seals it.

Layout: ``<root>/global_step_N/`` plus ``latest_checkpointed_iteration.txt`` (the pointer).
A save goes: workers write into ``.tmp-global_step_N-<nonce>/`` -> ``trainer_state.json`` ->
``manifest.json`` (size and sha256 of every file) -> fsync files and dirs -> rename to
``global_step_N`` -> fsync the parent -> pointer replaced atomically (temp file + rename) ->
prune to ``keep_last``. A kill at any point leaves the pointer on the previous complete checkpoint.

One writer per directory: the driver holds a :class:`Lease` (an ``flock`` on ``.writer.lease``)
for its whole run, restarts included, and only its holder may clean, commit or prune. A second
run on the same directory is refused with :class:`LeaseHeld` instead of deleting the first run's
saves in progress; the kernel drops the lock of a driver that dies, so a crash never blocks the
next run.

Saving a step again (after a restart resumed from an older one) cannot replace a directory in
one rename, so it takes two: the old ``global_step_N`` moves aside to ``.trash-global_step_N-*``,
the sealed temp dir takes its name. A kill between the two leaves the pointer naming a step whose
complete copy sits in ``.trash-``: :func:`clean_temp`, which the holder runs before it resumes,
moves it back (if it still validates) before removing leftovers. This works on any filesystem,
NFS included, where an exchange rename does not.

Pruning removes only checkpoints this lease committed, oldest commit first, keeping the newest
``keep_last`` that still validate, and never the pointer's target: directories an earlier run
left behind (higher steps included) are not this run's to delete.

Node-local disks: files that workers wrote but the driver cannot see are listed in the manifest
under ``unseen`` (path -> the nodes that have it). Such a checkpoint can never be resumed, on any
node: :func:`latest_valid` raises :class:`NotShared` for it rather than fall back to older ones
(also scattered) and let a run silently start again from step 0.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

POINTER = "latest_checkpointed_iteration.txt"
MANIFEST = "manifest.json"
STATE = "trainer_state.json"
LEASE = ".writer.lease"
STEP_RE = re.compile(r"^global_step_(\d+)$")
# what an interrupted writer leaves
LEFTOVERS = (".tmp-*", ".trash-*", ".del-*", f".{POINTER}.*", ".probe-*")


class NotShared(Exception):
    """The checkpoint was saved across node-local disks: the driver cannot see all of it."""


class LeaseHeld(Exception):
    """Another live process holds the writer lease of this checkpoint directory."""


class Lease:
    """The right to write one checkpoint directory, held from :meth:`acquire` to :meth:`release`
    (a context manager too). ``committed`` lists the steps this holder committed, oldest first:
    the only ones :func:`prune` may delete. Must not be shared with a forked child (the child
    would keep the lock alive after the holder dies)."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root, self._fd = root, fd
        self.committed: list[int] = []

    @classmethod
    def acquire(cls, root: str | Path) -> Lease:
        """Take the lease on ``root`` (created if missing) or raise :class:`LeaseHeld`."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        path = root / LEASE
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise LeaseHeld(_held_message(root, path)) from None
            try:  # the last holder may have unlinked the file between our open and our lock
                same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder).encode())
        os.fsync(fd)
        return cls(root, fd)

    def release(self) -> None:
        """Give the lease up; safe to call twice. The file goes too, so a finished run leaves
        only its checkpoints."""
        if self._fd is None:
            return
        (self.root / LEASE).unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _held_message(root: Path, path: Path) -> str:
    try:
        h = json.loads(path.read_text())
        who = f"pid {h['pid']} on host {h['host']} (since {h['since']})"
    except (OSError, ValueError, TypeError, KeyError):
        who = "another process"
    return (f"checkpoint_dir {root} is in use: {who} holds its writer lease {path}. Two runs "
            "writing one checkpoint directory delete each other's saves. Fix: let that run "
            "finish or stop it, or give this run its own checkpoint_dir (or run_dir)")


# What storage says when it cannot take a checkpoint, as opposed to a bug writing one.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
PROBE_BYTES = 64 * 1024


def storage_refused(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in STORAGE_ERRNOS


def storage_refusal(root: str | Path) -> OSError | None:
    """Why ``root``'s storage refuses writes now (disk full, quota, read-only), or None when it
    takes a small probe file. A failed save needs this: torch's zip writer reports a full disk as
    ``RuntimeError: ... unexpected pos``, not as the OSError underneath."""
    probe = Path(root) / f".probe-{uuid.uuid4().hex[:8]}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        return e if storage_refused(e) else None
    finally:
        probe.unlink(missing_ok=True)
    return None


def begin(root: str | Path, step: int) -> Path:
    """A fresh temp dir for step ``step``'s checkpoint."""
    tmp = Path(root) / f".tmp-global_step_{step}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    return tmp


def clean_temp(root: str | Path) -> list[Path]:
    """Undo an interrupted save: put back a checkpoint that a re-save of its step had moved
    aside (when its name is free and it validates), then remove the leftovers (temp and trash
    dirs, half-pruned dirs, temp pointer files). Returns what was removed. Only the lease's
    holder may call it: the leftovers of a writer still running look the same."""
    root = Path(root)
    for trash in sorted(root.glob(".trash-global_step_*")):
        final = root / trash.name.removeprefix(".trash-").rsplit("-", 1)[0]
        if STEP_RE.match(final.name) and not final.exists() and validate(trash) is None:
            trash.rename(final)
            _fsync(root)
    gone = [p for pattern in LEFTOVERS for p in root.glob(pattern)]
    for p in gone:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
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


def commit(lease: Lease, step: int, tmp: Path, state: dict, keep_last: int,
           not_here: dict[str, list[str]] | None = None) -> Path:
    """Seal ``tmp`` as ``global_step_<step>``, move the pointer to it and prune; returns the final
    dir. ``not_here``: files workers wrote that this process cannot see (see :func:`unseen`)."""
    if not lease.held:
        raise ValueError(f"{lease.root}: commit needs the writer lease, which was released")
    root = lease.root
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
    trash = None
    if final.exists():  # a save of the same step by an earlier attempt: see the module docstring
        trash = root / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
        final.rename(trash)
    tmp.rename(final)
    _fsync(root)
    _write_pointer(root, step)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    if step in lease.committed:
        lease.committed.remove(step)
    lease.committed.append(step)
    prune(lease, keep_last, fresh=step)
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


def prune(lease: Lease, keep_last: int, fresh: int | None = None) -> list[int]:
    """Delete this lease's checkpoints beyond the newest ``keep_last`` valid ones (by commit
    order), never the pointer's target; returns the steps deleted. ``fresh``: a step just
    sealed, known valid without hashing it again."""
    root, at = lease.root, pointer(lease.root)
    kept, gone = 0, []
    for step in reversed(list(lease.committed)):
        path = root / f"global_step_{step}"
        valid = step == fresh or validate(path) is None
        if step == at or (valid and kept < keep_last):
            kept += valid
            continue
        _remove(root, path)
        lease.committed.remove(step)
        gone.append(step)
    return gone


def _remove(root: Path, path: Path) -> None:
    """Delete a checkpoint dir so that it vanishes at once: a kill halfway through the delete
    leaves a ``.del-`` dir for :func:`clean_temp`, never a half-empty ``global_step_N``."""
    doomed = root / f".del-{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        path.rename(doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _manifest_shape(manifest: object) -> str | None:
    """None if a parsed manifest has the shape :func:`commit` writes, else what is wrong."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return "is not an object with a 'files' mapping"
    for rel, meta in manifest["files"].items():
        if not isinstance(meta, dict) or type(meta.get("size")) is not int \
                or not isinstance(meta.get("sha256"), str):
            return f"entry {rel!r} is not {{'size': int, 'sha256': str}}"
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"entry {rel!r} points outside the checkpoint"
    unseen_files = manifest.get("unseen", {})
    if not isinstance(unseen_files, dict) or not all(
            isinstance(nodes, list) for nodes in unseen_files.values()):
        return "has an 'unseen' entry that is not a mapping of path -> nodes"
    return None


def validate(path: Path) -> str | None:
    """None if ``path`` is a complete checkpoint, else the reason it is not."""
    mf = path / MANIFEST
    if not path.is_dir():
        return f"{path}: no such checkpoint directory"
    if not mf.is_file():
        return f"{path}: no {MANIFEST} (the save did not finish)"
    try:
        manifest = json.loads(mf.read_text())
    except (ValueError, RecursionError) as e:
        return f"{mf}: unreadable ({e})"
    if wrong := _manifest_shape(manifest):
        return f"{mf}: not a checkpoint manifest: it {wrong}"
    for rel, meta in manifest["files"].items():
        f = path / rel
        if not f.is_file():
            return f"{path}: {rel} is missing"
        if f.stat().st_size != meta["size"]:
            return f"{path}: {rel} has {f.stat().st_size} bytes, the manifest says {meta['size']}"
        if _sha256(f) != meta["sha256"]:
            return f"{path}: {rel} does not match its sha256 in the manifest (corrupt)"
    if STATE not in manifest["files"]:
        return f"{path}: the manifest lists no {STATE}"
    try:
        state = read_state(path)
    except (ValueError, RecursionError) as e:
        return f"{path / STATE}: unreadable ({e})"
    if not isinstance(state, dict):
        return f"{path / STATE}: not a JSON object"
    return None


def pointer(root: str | Path) -> int | None:
    p = Path(root) / POINTER
    try:
        return int(p.read_text().strip())
    except (FileNotFoundError, IsADirectoryError, ValueError):
        return None


def scattered(path: Path) -> str | None:
    """None unless the checkpoint at ``path`` (validated) was saved across node-local disks;
    then why."""
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
