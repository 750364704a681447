"""The kinds of probe a capability is made of: each reads one thing from the installed Ray's files
(a function's parameters, a text in a module or a function, a message of a generated proto, a name
compiled into ``_raylet.so``) and says why it is missing, or None where it is there.

A probe takes a :class:`~rlsim.ray_internals.installed.RaySurface`, so that a test can hand it a
copy of Ray's files with one thing changed.
"""

from __future__ import annotations

from collections.abc import Callable

from rlsim.ray_internals.installed import RaySurface

Probe = Callable[[RaySurface], str | None]  # why not, or None: there


def all_of(*probes: Probe) -> Probe:
    def probe(s: RaySurface) -> str | None:
        return next((why for p in probes if (why := p(s))), None)
    return probe


def has_params(rel: str, qualname: str, *names: str) -> Probe:
    """``qualname`` in ``ray/<rel>`` takes ``names``, and needs no other argument (rlsim calls
    it, or stands in for it, with those alone)."""
    def probe(s: RaySurface) -> str | None:
        got = s.params(rel, qualname)
        if got is None:
            return f"ray/{rel} has no {qualname}"
        missing = [n for n in names if n not in got]
        if missing:
            return f"ray/{rel}: {qualname} takes no {', '.join(missing)}"
        needs = sorted((s.required(rel, qualname) or set()) - set(names))
        return f"ray/{rel}: {qualname} also needs {', '.join(needs)}" if needs else None
    return probe


def leads_with(rel: str, qualname: str, *names: str) -> Probe:
    """``qualname`` in ``ray/<rel>`` takes ``names`` first, in order (rlsim wraps it: the
    wrapper reads those and hands every argument on)."""
    def probe(s: RaySurface) -> str | None:
        fn = s.function(rel, qualname)
        if fn is None:
            return f"ray/{rel} has no {qualname}"
        first = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)][:len(names)]
        return None if first == list(names) else (
            f"ray/{rel}: {qualname} takes ({', '.join(first)}) first, not {', '.join(names)}")
    return probe


def has_text(rel: str, *texts: str, what: str = "") -> Probe:
    def probe(s: RaySurface) -> str | None:
        text = s.source(rel)
        if text is None:
            return f"ray/{rel} is not there"
        missing = [t for t in texts if t not in text]
        return f"ray/{rel} has no {what or ', '.join(missing)}" if missing else None
    return probe


def in_function(rel: str, qualname: str, *texts: str) -> Probe:
    def probe(s: RaySurface) -> str | None:
        body = s.function_source(rel, qualname)
        if not body:
            return f"ray/{rel} has no {qualname}"
        missing = [t for t in texts if t not in body]
        return f"ray/{rel}: {qualname} no longer builds {', '.join(missing)}" if missing else None
    return probe


def flags(*flags: str) -> Probe:
    def probe(s: RaySurface) -> str | None:
        unknown = s.flags_known(*flags)
        return (f"this Ray does not read {', '.join(unknown)} (not compiled into _raylet.so)"
                if unknown else None)
    return probe


def compiled_in(*names: str) -> Probe:
    """Cython names (``ray._raylet.Config.initialize``) Ray's core library was built with."""
    def probe(s: RaySurface) -> str | None:
        known = s.compiled(tuple(n.encode() for n in names))
        missing = [n for n in names if n.encode() not in known]
        return f"_raylet.so has no {', '.join(missing)}" if missing else None
    return probe


def proto(rel: str, message: str, *fields: str) -> Probe:
    """A message of ``ray/core/generated/<rel>`` with ``fields`` (field or enum value names)."""
    def probe(s: RaySurface) -> str | None:
        names = s.message(f"core/generated/{rel}", message)
        if names is None:
            return f"ray/core/generated/{rel} has no message {message}"
        missing = [f for f in fields if f not in names]
        return (f"ray/core/generated/{rel}: {message} has no {', '.join(missing)}" if missing
                else None)
    return probe


def any_of(*probes: Probe) -> Probe:
    def probe(s: RaySurface) -> str | None:
        whys = [p(s) for p in probes]
        return None if any(w is None for w in whys) else "; ".join(w for w in whys if w)
    return probe


def python_forkserver(_s: RaySurface) -> str | None:
    """Python's side of dashboard_forkserver: its forkserver's layout, whatever the Ray
    (standard library only, as this module)."""
    from rlsim.ray_internals.forkserver import python_problem

    return python_problem()
