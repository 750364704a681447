"""The one safe writer and the one safe reader of every file rlsim writes or reads.

rlsim often runs as root, in folders other people can write to (a shared report folder, a
checkout, ``/tmp``). So a file is written whole into a fresh temp file beside its target (created
exclusively, never through a symlink), flushed, then renamed over the target: an existing path is
never opened for writing, only a regular file (or nothing) is ever replaced (a symlink, a device, a
folder at the target is refused, named), and no mode is ever changed on a path rlsim did not
create. A file is read only when it is a regular file, and at
most ``limit`` bytes of it: a FIFO would block the reader forever, a device would never end, a
folder or a symlink where a file of rlsim's is expected is someone else's doing. A record read
back as JSON (:func:`read_json`, :func:`read_json_lines`) that does not parse is
:class:`Damaged`, naming the file and the line: never a traceback of the parser's, however deep
its nesting. A file hashed (:func:`hash_file`) is streamed, never read whole.

The standard library only: a trainer may use these too.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

MAX_READ = 16 << 20  # a record rlsim reads back (a summary, a ledger, a state file, a config)
CHUNK = 1 << 20  # read at most this much at a time: a limit is a bound, not a buffer size


class FileRefused(OSError):
    """A path is not what rlsim reads or writes there; ``str()`` names the path, what it is
    and the fix."""

    def __str__(self) -> str:
        return self.strerror


class Damaged(ValueError):
    """A record rlsim reads back does not hold what rlsim writes there (not JSON, a line cut
    short, nested past any record's depth); ``str()`` names the file and the line."""


def write_file(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``path`` whole: a fresh temp file in its folder (``O_EXCL``, never through a
    symlink), flushed to disk, then renamed over the target. Only a regular file or nothing is
    ever replaced: a symlink, a folder, a device, a FIFO or a socket at the target is refused as
    FileRefused naming what is there and the fix (as root, ``--out /dev/null`` would otherwise
    replace the system's ``/dev/null``), and so is a folder that does not exist."""
    path = Path(path)
    if problem := write_problem(path):
        raise FileRefused(errno.EEXIST, problem)
    blob = data.encode() if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # an unwritable or read-only folder, a full disk
        raise FileRefused(e.errno, f"{path} cannot be written ({e.strerror} in {path.parent}): "
                          "choose a folder you can write") from None
    try:
        os.fchmod(fd, mode)  # the temp file is rlsim's own, just made
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    return path


def write_problem(path: str | Path) -> str | None:
    """Why rlsim must not write a file at ``path`` (something other than a regular file there,
    or no folder to hold it), or None."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        what = "does not exist" if not os.path.lexists(parent) else "is not a folder"
        return f"{parent}, the folder of {path}, {what}: create it or choose another place"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"{path} cannot be looked at ({e.strerror}): choose another place"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return (f"{path} is {_kind(st.st_mode)}, where rlsim writes a file: rlsim replaces only "
                "a regular file; remove it or choose another place")
    return None


def read_file(path: str | Path, limit: int = MAX_READ, follow: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. FileRefused (an
    OSError) for a symlink (unless ``follow``: a file the user named may be a link to one), a
    folder, a FIFO, a device or socket, or a file over ``limit``; FileNotFoundError as usual."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: a FIFO without a writer must not block
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FileRefused(e.errno, f"{path} is a symlink, where rlsim reads a file of its "
                              "own; remove it (rlsim never follows one there)") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(errno.EINVAL, f"{path} is {_kind(mode)}, not a regular file; give a "
                              "file")
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(limit + 1 - size, CHUNK))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(errno.EFBIG, f"{path} is larger than {limit} bytes, more than such a "
                          "file ever holds: is it the right file?")
    return b"".join(chunks)


def read_text(path: str | Path, limit: int = MAX_READ, follow: bool = False) -> str:
    """:func:`read_file` as UTF-8 text; FileRefused naming the byte when it is not."""
    raw = read_file(path, limit, follow)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileRefused(errno.EILSEQ, f"{path}: not UTF-8 text (byte {e.start}): a binary "
                          "file?") from None


def read_json(path: str | Path, limit: int = MAX_READ, follow: bool = False):
    """The JSON value of the file ``path`` (:func:`read_file`: a link, a FIFO, a file over
    ``limit`` refused as FileRefused). Damaged when it is not JSON, or nested deeper than
    Python's parser goes (a RecursionError is no answer to a damaged file)."""
    raw = read_file(path, limit, follow)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise Damaged(f"{shown(path)} is not JSON ({why_not_read(e)})") from None


def read_json_lines(path: str | Path, limit: int = MAX_READ) -> tuple[list, bool]:
    """The values of the JSON-lines file ``path`` (blank lines skipped), and whether its last
    line was cut short: no newline after it and not JSON, as a writer killed mid-line leaves it
    (left out of the values; the caller says whether that is normal). Damaged naming the line
    for any other line that is not JSON; FileRefused as :func:`read_file`."""
    raw = read_file(path, limit)
    lines = raw.split(b"\n")
    values, torn = [], False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except (ValueError, RecursionError) as e:
            if n == len(lines):  # the text after the last newline: a line never finished
                torn = True
                continue
            raise Damaged(f"{shown(path)} line {n} is not JSON ({why_not_read(e)})") from None
    return values, torn


def hash_file(path: str | Path, limit: int, into=None):
    """The hash object ``into`` (a fresh SHA-256 by default) fed the bytes of the regular file
    ``path`` (a link followed: a user's file), read in chunks, never whole. FileRefused
    (``errno.EFBIG``) for a file over ``limit`` bytes, before reading any (a sparse file of
    gigabytes costs nothing to refuse); FileRefused for a FIFO, a device or a folder."""
    h = hashlib.sha256() if into is None else into
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(errno.EINVAL, f"{shown(path)} is {_kind(st.st_mode)}, not a "
                              "regular file")
        if st.st_size > limit:
            raise FileRefused(errno.EFBIG, f"{shown(path)} is larger than {limit} bytes")
        size = 0
        while size <= limit and (chunk := os.read(fd, CHUNK)):
            h.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:  # it grew while read
        raise FileRefused(errno.EFBIG, f"{shown(path)} is larger than {limit} bytes")
    return h


def new_file(path: str | Path, mode: int = 0o644):
    """A file object writing the new file ``path`` (binary): created here, exclusively (an
    existing path, a symlink included, is refused as FileExistsError), for a log rlsim streams
    into (a trainer's output)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    return os.fdopen(fd, "wb")


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to the log file ``path`` (created if missing, never through
    a symlink), flushed to disk: what survives a writer killed right after."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused(errno.EINVAL, f"{path} is not a regular file; rlsim appends its log "
                              "there")
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def shown(path: str | Path) -> str:
    """``path`` as it may be printed: a control character (a newline, an escape) written as its
    escape, so that a file's name can never forge a line of rlsim's output or move the cursor."""
    text = str(path)
    return text if text.isprintable() else "".join(
        c if c.isprintable() else repr(c)[1:-1] for c in text)


def why_not_read(e: Exception) -> str:
    """What a parser's error says of a record, in a few words: a RecursionError (JSON nested
    past what the parser goes) as "nested too deep", else its message, cut short."""
    return "nested too deep" if isinstance(e, RecursionError) else str(e)[:120]


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"
