"""Whether each capability is in force with the installed Ray, and why not: its probe's answer,
kept in the rlsim home between processes (:mod:`.record` says how), turned off on purpose by
``RLSIM_RAY_PLAIN``, and what the timeline, ``rlsim doctor`` and ``rlsim ray`` say of it all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

from rlsim.ray_internals import capabilities, installed, probes, releases, settings
from rlsim.ray_internals.capabilities import BY_NAME, CAPABILITIES, Status
from rlsim.ray_internals.installed import RaySurface
from rlsim.ray_internals.releases import SUPPORTED_TEXT
from rlsim.ray_internals.settings import PLAIN_VAR


class RayInternalsError(RuntimeError):
    """A capability rlsim cannot do without is missing from the installed Ray."""


def _forced_plain() -> set[str]:
    """The capabilities ``RLSIM_RAY_PLAIN`` turns off: names, ``all`` for every acceleration."""
    names = {n.strip() for n in os.environ.get(PLAIN_VAR, "").split(",") if n.strip()}
    if names & {"all", "1", "true", "yes"}:
        names |= {c.name for c in CAPABILITIES if c.acceleration}
    return names


def probe(name: str, s: RaySurface | None = None) -> Status:
    """Whether capability ``name`` can be used with the installed Ray (or ``s``), and why not."""
    cap = BY_NAME[name]
    s = s or installed.surface()
    if s.root is None:
        why = "Ray is not installed"
    elif name in _forced_plain() and s is installed.surface():
        why = f"{PLAIN_VAR} turned it off"
    else:
        why = cap.probe(s)
    return Status(name, why is None, why or "", cap.gives, cap.plain, cap.required)


RECORD_NAME = "ray_probes.json"


def _record_key(s: RaySurface) -> dict:
    """What a record of probe answers holds for: this install of Ray, and these probes (the
    modules that define and read them, and ``record.py``, how they are kept)."""
    from rlsim.ray_internals import record

    sources = [Path(m.__file__) for m in (installed, probes, capabilities, settings, releases,
                                          record)] + [Path(__file__)]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources))
    return {"root": str(s.root), "version": s.version, "probes": digest.hexdigest()}


def _file_stamps(s: RaySurface, rels) -> dict[str, list[int] | None]:
    stamps = {}
    for rel in sorted(rels):
        try:
            st = os.stat(s.root / rel)
            stamps[rel] = [st.st_mtime_ns, st.st_size]
        except OSError:
            stamps[rel] = None
    return stamps


def _record_path() -> Path | None:
    """The record of the installed Ray in the rlsim home (one per install: venvs of several Ray
    releases share a home), where the home exists (a process of a container node,
    or one that never made a home, probes without one)."""
    try:
        from rlsim.host.home import home, rlsim_home

        if not rlsim_home().is_dir():
            return None
        install = hashlib.sha256(str(installed.surface().root).encode()).hexdigest()[:12]
        return home() / RECORD_NAME.replace(".json", f"-{install}.json")
    except Exception:  # noqa: BLE001 - a home rlsim refuses: probe without a record
        return None


_record_damage: list[str] = []  # what was wrong with the kept record this process read


@functools.cache
def _installed_answers() -> dict[str, str | None]:
    """Every capability's probe of the installed Ray (None: in force, else why not). Probing
    parses a dozen of Ray's files and scans _raylet.so (0.23 s here, in every rlsim process:
    the CLI and the node launcher it waits for each paid it), so the answers are kept in the
    rlsim home, keyed by the install, its version and these probes, with the size and mtime of
    every file the probes read: a Ray reinstalled, upgraded or edited is probed again. A record
    read back damaged (its checksum, its shape, a FIFO: :mod:`.record`) is probed again too, and
    :func:`record_note` says so."""
    from rlsim.ray_internals import record

    _record_damage.clear()
    s = installed.surface()
    path = _record_path() if s.root is not None else None
    key = _record_key(s) if path is not None else None
    if path is not None:
        kept, damage = record.read(path, key, lambda rels: _file_stamps(s, rels), set(BY_NAME))
        if kept is not None:
            return kept
        if damage:
            _record_damage[:] = [damage]
    answers = {c.name: (c.probe(s) if s.root is not None else "Ray is not installed")
               for c in CAPABILITIES}
    if path is not None:
        from rlsim.files import write_file

        kept = record.make(key, _file_stamps(s, s.read), answers)
        try:
            write_file(path, json.dumps(kept, indent=1), mode=0o600)
        except OSError as e:  # answered all the same; the next process probes
            if _record_damage:
                _record_damage.append(f"not rewritten: {e}")
    return answers


def record_note() -> str | None:
    """What to tell the user of the kept probe answers, once this process has read them: that
    the record was damaged and Ray probed again instead (None: nothing to tell)."""
    _installed_answers()
    if not _record_damage:
        return None
    damage, *unwritten = _record_damage
    return (f"the kept probe answers were damaged ({damage}): Ray's files were probed again"
            + (f"; the record was {unwritten[0]}" if unwritten else ", and the record rewritten"))


@functools.cache
def _installed(name: str, forced: frozenset[str]) -> Status:
    cap = BY_NAME[name]
    why = _installed_answers()[name]
    if name in forced and installed.surface().root is not None:
        why = f"{PLAIN_VAR} turned it off"
    return Status(name, why is None, why or "", cap.gives, cap.plain, cap.required)


def status(name: str) -> Status:
    """:func:`probe` of the installed Ray, once per process (and per ``RLSIM_RAY_PLAIN``)."""
    return _installed(name, frozenset(_forced_plain()))


def available(name: str) -> bool:
    return status(name).available


def statuses() -> list[Status]:
    return [status(c.name) for c in CAPABILITIES]


def require(name: str) -> None:
    """Raise :class:`RayInternalsError` naming the Ray version and the range when capability
    ``name`` (one rlsim cannot do without) is missing."""
    st = status(name)
    if not st.available:
        raise RayInternalsError(
            f"rlsim cannot use Ray {installed.ray_version()}: {st.why} ({st.gives}). rlsim is "
            f"proven on Ray {SUPPORTED_TEXT}; fix: install a Ray release in that range")


def summary() -> dict:
    """What the timeline, ``rlsim doctor --json`` and ``rlsim ray --json`` say of the installed
    Ray: its version, whether rlsim is proven on it, and each capability in force or not, why."""
    all_ = statuses()
    return {"version": installed.ray_version(), "python": sys.version.split()[0],
            "outside_range": installed.version_problem(),
            "in_force": [s.name for s in all_ if s.available],
            "plain": {s.name: s.why for s in all_ if not s.available}}


def cluster_report(rewrites: dict[str, int] | None, *, lean: bool, forked: bool) -> dict:
    """:func:`summary` for one simulated cluster: an acceleration this cluster has no use for is
    under ``unused`` (``lean``: it runs without the dashboard; ``forked``: its nodes have
    cgroups, which the agent zygote needs), and one whose rewrite of Ray's raylet command
    matched fewer agent commands than the launcher saw raylets (``rewrites``, counted by
    :mod:`.launch`; None: not counted) is on Ray's plain path, with the counts."""
    report = {**summary(), "unused": {}, "rewrites": rewrites}
    in_force, plain = report["in_force"], report["plain"]
    for name, wanted, kind, per_raylet, why in (
            ("lean_agent", lean, "lean", 1, "the cluster runs the dashboard"),
            ("forked_agents", forked, "forked", 2, "the nodes have no cgroups")):
        if name not in in_force:
            continue
        if not wanted:
            in_force.remove(name)
            report["unused"][name] = why
        elif rewrites and rewrites.get("raylets"):
            want, got = rewrites["raylets"] * per_raylet, rewrites.get(kind, 0)
            if got < want:
                in_force.remove(name)
                plain[name] = (f"{got} of {want} agent commands in Ray's raylet commands had "
                               "the form rlsim rewrites")
    # the dashboard's two: its fork, and its forkserver's (which needs the dashboard forked)
    for name, kind in (("forked_dashboard", "dashboard"), ("dashboard_forkserver", "forkserver")):
        if name not in in_force:
            continue
        if lean or not forked:
            in_force.remove(name)
            report["unused"][name] = ("the cluster runs no dashboard" if lean else
                                      "the nodes have no cgroups")
        elif rewrites and rewrites.get("raylets") and not rewrites.get(kind):
            in_force.remove(name)
            plain[name] = "Ray's dashboard command had no form rlsim rewrites"
    return report

