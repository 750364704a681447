"""What the installed Ray has, read from its files, never imported: its version, whether rlsim
is proven on it, and the text, functions, messages and compiled-in names its probes read.

A probe costs milliseconds and starts nothing: :class:`RaySurface` parses a module with ``ast``,
decodes a generated ``*_pb2.py``'s descriptor with protobuf, and scans ``_raylet.so`` for the
names it was built with.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import mmap
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rlsim.ray_internals.releases import BELOW, DETACHED_PORTS_SINCE, FIRST, SUPPORTED_TEXT
from rlsim.ray_internals.settings import ALL_FLAGS

SUPPORTED_RAY = (Version(FIRST), Version(BELOW))  # from, up to (excluded)


class RaySurface:
    """The files of one Ray install (``root`` is the ``ray`` package's folder), read, never
    imported: a probe costs milliseconds and starts nothing."""

    def __init__(self, root: Path | None, version: str | None = None) -> None:
        self.root = root
        self.version = version
        self.read: set[str] = set()  # the files of the install its probes read (see _record)

    @functools.cache  # noqa: B019 - one surface per install, kept for the process
    def source(self, rel: str) -> str | None:
        """The text of ``ray/<rel>``, or None where it is not there."""
        if self.root is None:
            return None
        self.read.add(rel)
        try:
            return (self.root / rel).read_text(errors="replace")
        except OSError:
            return None

    @functools.cache  # noqa: B019
    def _tree(self, rel: str) -> ast.Module | None:
        text = self.source(rel)
        try:
            return ast.parse(text) if text is not None else None
        except SyntaxError:
            return None

    def function(self, rel: str, qualname: str) -> ast.FunctionDef | None:
        """The definition of ``qualname`` (``f`` or ``Class.method``) in ``ray/<rel>``."""
        tree = self._tree(rel)
        if tree is None:
            return None
        scope: list[ast.stmt] = tree.body
        *outer, name = qualname.split(".")
        for part in outer:
            found = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == part),
                         None)
            if found is None:
                return None
            scope = found.body
        return next((n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                     and n.name == name), None)

    def params(self, rel: str, qualname: str) -> set[str] | None:
        """The parameter names of ``qualname`` in ``ray/<rel>``, or None where it is absent."""
        fn = self.function(rel, qualname)
        if fn is None:
            return None
        a = fn.args
        return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}

    def required(self, rel: str, qualname: str) -> set[str] | None:
        """The parameters of ``qualname`` a call must give (no default; ``self`` left out)."""
        fn = self.function(rel, qualname)
        if fn is None:
            return None
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        bare = positional[:len(positional) - len(a.defaults)]
        bare += [p for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None]
        return {p.arg for p in bare} - {"self", "cls"}

    def function_source(self, rel: str, qualname: str) -> str:
        fn, text = self.function(rel, qualname), self.source(rel)
        return ast.get_source_segment(text, fn) or "" if fn is not None and text else ""

    @functools.cache  # noqa: B019
    def _descriptor(self, rel: str):
        """The FileDescriptorProto a generated ``*_pb2.py`` registers (its serialized literal,
        decoded with protobuf: no Ray import)."""
        tree = self._tree(rel)
        if tree is None:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == \
                    "AddSerializedFile" and node.args and isinstance(node.args[0], ast.Constant):
                from google.protobuf import descriptor_pb2

                return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
        return None

    def message(self, rel: str, name: str) -> set[str] | None:
        """The field names of message ``name`` (``Outer.Inner`` for a nested one) in the
        generated ``ray/<rel>``, with the value names of the enums declared in it; None where
        there is no such message."""
        fd = self._descriptor(rel)
        if fd is None:
            return None
        scope = fd.message_type
        found = None
        for part in name.split("."):
            found = next((m for m in scope if m.name == part), None)
            if found is None:
                return None
            scope = found.nested_type
        enums = [*found.enum_type, *fd.enum_type]
        return {f.name for f in found.field} | {v.name for e in enums for v in e.value}

    @functools.cache  # noqa: B019
    def compiled(self, names: tuple[bytes, ...]) -> frozenset[bytes]:
        """Which of ``names`` (NUL-terminated strings, such as a ``RAY_`` setting's name) Ray's
        core library was built with: Ray reads each of its settings from the environment under
        a name it compiles in, and ignores any other."""
        if self.root is None:
            return frozenset()
        self.read.add("_raylet.so")
        try:
            with open(self.root / "_raylet.so", "rb") as f, \
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return frozenset(n for n in names if m.find(n + b"\0") >= 0)
        except (OSError, ValueError):
            return frozenset()

    def flags_known(self, *flags: str) -> list[str]:
        """Those of ``flags`` (``RAY_name``) the installed Ray does not read (one scan of
        ``_raylet.so`` for every setting rlsim uses)."""
        known = self.compiled(tuple(f.encode() for f in sorted({*ALL_FLAGS, *flags})))
        return [f for f in flags if f.encode() not in known]


@functools.cache
def surface() -> RaySurface:
    """The installed Ray's files (found, not imported)."""
    spec = importlib.util.find_spec("ray")
    root = Path(spec.origin).parent if spec and spec.origin else None
    try:
        version = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return RaySurface(root, version)


def ray_version() -> str | None:
    return surface().version


def version_problem(version: str | None = None) -> str | None:
    """Why the installed Ray (or ``version``) is outside the range rlsim is proven on, or None."""
    version = version or ray_version()
    if version is None:
        return "Ray is not installed; fix: pip install 'ray[default]" + SUPPORTED_TEXT + "'"
    try:
        v = Version(version)
    except InvalidVersion:
        return f"Ray {version!r} is not a release version rlsim can place"
    if SUPPORTED_RAY[0] <= Version(v.base_version) < SUPPORTED_RAY[1]:
        return None
    return (f"Ray {version} is outside the releases rlsim is proven on ({SUPPORTED_TEXT}, "
            "each run by its Ray matrix); rlsim may still work, taking Ray's plain path where "
            "its probes find the internals changed")


def detached_actors_problem() -> str | None:
    """Why actors that outlive the command that made them (a substrate's detached host actors)
    must not be left on this Ray, or None. Below :data:`DETACHED_PORTS_SINCE`, once that command
    ended its raylet handed the actor's worker port to a later driver on the same machine (the
    next `rlsim status` or `rlsim down`), whose core worker then aborted: grpc's "address already
    in use". A fix in the raylet's C++, with no trace in Ray's Python to probe: known by the
    release."""
    version = ray_version()
    if version is None or Version(Version(version).base_version) >= Version(DETACHED_PORTS_SINCE):
        return None
    return (f"Ray {version}'s raylet gives a detached actor's worker port to the next driver on "
            f"its machine once the actor's creator ended, and that driver aborts (address "
            f"already in use); Ray {DETACHED_PORTS_SINCE} and later keep it")
