"""The probe answers kept in the rlsim home, one record per install of Ray (see
:func:`rlsim.ray_internals.answers._installed_answers`).

Probing costs every rlsim process a quarter second, so its answers are kept; but an answer read
back is shown as Ray's ("in force", or why not) and decides what rlsim does with Ray, so a record
is used only when whole: read as rlsim reads every record (never through a link or a FIFO, at
most :data:`MAX_RECORD` bytes), shaped as written (one answer per capability, each None or a
reason), and with the checksum written over its key, files and answers matching them. A record
that fails any of these is damaged: Ray is probed again, the record rewritten, and the damage
said (``rlsim ray``). One that is whole but for another install or changed files is merely out of
date: probed again, nothing to say.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from rlsim.files import Damaged, read_json, shown

MAX_RECORD = 1 << 20
FIELDS = {"key", "files", "answers", "checksum"}


def checksum(key: dict, files: dict, answers: dict) -> str:
    """The SHA-256 of what a record says, written beside it."""
    said = json.dumps([key, files, answers], sort_keys=True)
    return hashlib.sha256(said.encode()).hexdigest()


def make(key: dict, files: dict, answers: dict) -> dict:
    """A record of ``answers`` for the install ``key`` whose probes read ``files`` (rel ->
    [mtime_ns, size] or None)."""
    return {"key": key, "files": files, "answers": answers,
            "checksum": checksum(key, files, answers)}


def read(path: Path, key: dict, stamps: Callable[[list[str]], dict],
         names: set[str]) -> tuple[dict | None, str | None]:
    """The answers the record at ``path`` keeps for the capabilities ``names``, where it holds
    for the install ``key`` and the files it names are as ``stamps(rels)`` finds them now; else
    None, with why where the record is damaged (None when there is none, or it is out of date)."""
    try:
        record = read_json(path, MAX_RECORD)
    except FileNotFoundError:
        return None, None
    except (OSError, Damaged) as e:
        return None, str(e)
    if problem := _shape_problem(record, names):
        return None, f"{shown(path)}: {problem}"
    if record["key"] != key:
        return None, None  # another Ray, or other probes: written by them, not damaged
    if record["checksum"] != checksum(record["key"], record["files"], record["answers"]):
        return None, f"{shown(path)}: its checksum does not match what it says (edited?)"
    if record["files"] != stamps(sorted(record["files"])):
        return None, None  # Ray's files changed since: probed again
    return record["answers"], None


def _shape_problem(record, names: set[str]) -> str | None:
    """What in ``record`` is not as :func:`make` writes it, or None."""
    if not isinstance(record, dict) or set(record) != FIELDS:
        return f"it is not a probe record (an object of {', '.join(sorted(FIELDS))})"
    answers, files = record["answers"], record["files"]
    if not (isinstance(answers, dict) and set(answers) == names
            and all(v is None or isinstance(v, str) for v in answers.values())):
        return "its answers are not one per capability, each null (in force) or why not"
    if not (isinstance(files, dict) and all(
            v is None or (isinstance(v, list) and len(v) == 2
                          and all(type(n) is int for n in v)) for v in files.values())):
        return "its files are not each [mtime_ns, size] or null"
    if not isinstance(record["key"], dict) or not isinstance(record["checksum"], str):
        return "its key or checksum is not as written"
    return None
