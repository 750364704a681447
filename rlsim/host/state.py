"""The machine-wide registry of rlsim clusters: one JSON state file per cluster in the home
(:mod:`rlsim.host.home`), guarded by its lock, and what each records of a running cluster
(:class:`ClusterState`).

Slot allocation happens under an exclusive ``flock`` so that pytest-xdist workers starting clusters
at the same moment get different slots, and picks only slots free on the whole machine, whoever
holds the others (:mod:`rlsim.host.slots`: another user's, another home's). A cluster whose owner
is gone (and that was not detached, or whose processes are all gone) is abandoned: its slot is
reclaimed and its leftovers reaped.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from rlsim.files import read_file, shown
from rlsim.host import procs, slots
from rlsim.host.home import (
    HOME_FIX,
    HomeError,
    check_private,
    home,
    locked,
    private_dir,
    rlsim_home,
    run_dir,
    write_private,
)
from rlsim.host.layout import MAX_SLOTS, ClusterLayout, lay_out, span
from rlsim.host.pids import pid_alive
from rlsim.host.spec import SESSION_RE, ClusterSpec, name_problem


class ClusterState(BaseModel):
    """What rlsim records about a running cluster, in ``<home>/clusters/<name>.json``.

    Enough for another shell (``rlsim status``, ``rlsim down``) or a reaper to find everything the
    cluster created: its processes by ``session``, its iptables chain by ``slot``.
    """

    spec: ClusterSpec
    slot: int = Field(ge=0, lt=MAX_SLOTS)
    session: str = Field(description="<name>-<8 hex digits>, unique per start: labels the "
                         "cluster's processes, cgroups and run directory")
    backend: str = Field(description="the backend that started it (a name of rlsim.backends)")
    owner_pid: int = Field(ge=1)
    owner_started: int | None = Field(None, description="when the owner started (clock ticks "
                                      "since boot): with owner_pid it names one process, never a "
                                      "later one that reuses the number (after a reboot, or on a "
                                      "machine restored from a snapshot); None in states written "
                                      "before it was recorded")
    detached: bool = False
    origin: str = Field("", max_length=400, description="what started it: the pytest test when "
                        "one did (PYTEST_CURRENT_TEST), else the command line; said when it is "
                        "found abandoned")
    created: float = Field(default_factory=time.time)
    cgroups: bool = Field(False, description="node i lives in cgroup "
                          "rlsim/<home id>.<session>/n<i>")
    pids: dict[int, int] = Field(default_factory=dict, description="node index -> raylet pid")
    accelerations: dict = Field(default_factory=dict, description="what of Ray's internals the "
                                "cluster started with (rlsim.ray_internals."
                                "cluster_report), as its launcher saw them")
    gpus_left: dict[int, int] = Field(default_factory=dict, description="node index -> the GPUs "
                                      "it advertises since one was lost (gpu_lost)")
    on: str = Field("", description="HOST:PORT of the substrate's GCS the cluster is spread over "
                    "(rlsim.backends.substrate), '' on one machine")
    machines: list[str] = Field(default_factory=list, description="the addresses of the "
                                "substrate's machines it uses: node i on machines[i % count]")
    gcs_store: str = Field("", description="HOST:PORT of the GCS's external store (gcs_ft: redis; "
                           "rlsim.backends.redis_store), '' without one")

    @field_validator("session")
    @classmethod
    def _session_ok(cls, v: str) -> str:
        # It becomes a cgroup path and the run directory's name: nothing that could climb out.
        if not SESSION_RE.match(v):
            raise ValueError(f"session {v!r} is not <cluster name>-<8 hex digits>")
        return v

    @property
    def layout(self) -> ClusterLayout:
        return lay_out(self.slot, self.spec.nodes)

    @property
    def root(self) -> Path:
        """This start's run directory: named by the session's random part, so that a cluster
        started later under the same name never shares (or loses) it, and short, for Ray's
        socket paths beneath it."""
        match = SESSION_RE.match(self.session)
        assert match is not None  # checked by the validator
        return rlsim_home() / "run" / match.group(1)

    def node_dir(self, index: int) -> Path:
        return self.root / f"n{index}"


def clusters_dir() -> Path:
    return private_dir(home() / "clusters")


def state_path(name: str) -> Path:
    """The state file of cluster ``name``; raises ValueError for a name that is not a cluster
    name (before any path is built from it)."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return clusters_dir() / f"{name}.json"


@dataclass(frozen=True)
class Corrupt:
    """A state file that does not parse as a cluster's state. It still holds its slot (when the
    file says which) and its name until `rlsim down NAME` removes it."""

    name: str
    path: Path
    reason: str
    slot: int | None
    session: str | None

    @property
    def fix(self) -> str:
        return (f"`rlsim down {self.name}` removes it (and stops what it still names), or fix "
                "the file by hand")


def _read(path: Path) -> ClusterState | Corrupt:
    """The state in ``path`` (a checked entry of the clusters dir)."""
    check_private(path, os.lstat(path), want_dir=False)
    name = path.name.removesuffix(".json")
    raw = b""
    try:
        raw = read_file(path)
        st = ClusterState.model_validate_json(raw)
        if st.spec.name != name:
            raise ValueError(f"it names cluster {st.spec.name!r}, not {name!r}")
        return st
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        reason = f"{where + ': ' if where else ''}{first['msg']}"
    except (OSError, ValueError, TypeError) as e:  # TypeError: a validator met an odd type
        reason = str(e)
    return Corrupt(name, path, shown(" ".join(reason.split()))[:200], *_salvage(raw))


def _salvage(raw: bytes) -> tuple[int | None, str | None]:
    """The slot and session a state file that does not parse still names (a torn write keeps
    its first fields), so that its slot stays held and `rlsim down` can stop its processes."""
    text = raw.decode(errors="replace")
    slot = re.search(r'"slot"\s*:\s*(\d{1,9})\s*[,}\n]', text)  # (5,000 digits: no int)
    session = re.search(r'"session"\s*:\s*"([^"]*)"', text)
    return (int(slot.group(1)) if slot else None,
            session.group(1) if session and SESSION_RE.match(session.group(1)) else None)


def load_entry(name: str) -> ClusterState | Corrupt | None:
    """What the registry holds under ``name``: a state, a corrupt file, or nothing (always
    nothing for a string that is not a cluster name)."""
    if name_problem(name):
        return None
    path = state_path(name)
    if not os.path.lexists(path):
        return None
    return _read(path)


def load(name: str) -> ClusterState | None:
    """The state of cluster ``name``, or None when there is none or it is corrupt."""
    entry = load_entry(name)
    return entry if isinstance(entry, ClusterState) else None


def scan() -> list[ClusterState | Corrupt]:
    """Every entry of the registry, by name."""
    out = []
    for path in sorted(clusters_dir().iterdir()):
        if path.name.endswith(".json") and not name_problem(path.name.removesuffix(".json")):
            try:
                out.append(_read(path))
            except FileNotFoundError:  # removed since it was listed (another `rlsim down`)
                continue
    return out


def load_all() -> list[ClusterState]:
    return [e for e in scan() if isinstance(e, ClusterState)]


def corrupt() -> list[Corrupt]:
    return [e for e in scan() if isinstance(e, Corrupt)]


def save(state: ClusterState) -> None:
    write_private(state_path(state.spec.name), state.model_dump_json(indent=2))


def remove(name: str) -> None:
    state_path(name).unlink(missing_ok=True)


def forget(st: ClusterState | Corrupt) -> bool:
    """Remove the state file of ``st`` only if it is still this session's (or, for a corrupt
    file, still the same corrupt file): a cluster started since under the same name keeps its
    own. Call under :func:`locked`. Returns whether it removed the file."""
    name = st.spec.name if isinstance(st, ClusterState) else st.name
    current = load_entry(name)
    if isinstance(st, ClusterState):
        mine = isinstance(current, ClusterState) and current.session == st.session
    else:
        mine = isinstance(current, Corrupt) and current.reason == st.reason
    if mine:
        remove(name)
    if st.session and (mine or current is None):  # gone already (its home removed): the
        slots.release(st.session)                 # session's claims are still its own
    return mine


def slot_held_by_other(st: ClusterState) -> bool:
    """Does another registered cluster (a corrupt file whose slot is unknown included) hold the
    slot of ``st``? Then its network rules are not ``st``'s to remove. Call under the lock."""
    for other in scan():
        if isinstance(other, ClusterState):
            if other.session != st.session and set(other.layout.slots) & set(st.layout.slots):
                return True
        elif other.slot in (st.slot, None) and other.session != st.session:
            return True
    return False


def remove_run_dir(session: str) -> None:
    """Delete the run directory of ``session``, only ever inside the home's run/ directory."""
    match = SESSION_RE.match(session)
    if match is None:
        raise ValueError(f"session {session!r} is not <cluster name>-<8 hex digits>")
    top = run_dir()
    path = top / match.group(1)
    if os.path.islink(path) or path.resolve().parent != top.resolve():
        raise HomeError(f"{path} is not a directory inside {top}: {HOME_FIX}")
    shutil.rmtree(path, ignore_errors=True)


def owner_alive(state: ClusterState) -> bool:
    """Whether the process that started ``state``'s cluster still runs: its pid alive and, where
    both are known, started when the state says (a pid alone may name a later process: pids are
    reused, from low numbers again after a reboot or a restore from a snapshot)."""
    started = slots.start_time(state.owner_pid)
    if started is None:  # gone, or /proc hides it (hidepid): the pid is all there is to go by
        return pid_alive(state.owner_pid)
    return state.owner_started in (None, started)


def is_abandoned(state: ClusterState, live_sessions: set[str]) -> bool:
    """True when no one will ever tear this cluster down: its owner process is gone and it was
    not detached (a crashed test or CLI: its processes, if any, are leaks), or it was detached and
    none of its processes runs any more (on this machine: a detached cluster on a substrate is
    never abandoned)."""
    if owner_alive(state):
        return False
    if state.detached and state.on:  # its processes run on the substrate's machines, which
        return False                 # this one need not be: only `rlsim down` ends it
    return not state.detached or state.session not in live_sessions


def reserve(spec: ClusterSpec, backend: str, detached: bool) -> ClusterState:
    """Reserve a slot and write the state file for a new cluster named ``spec.name``.

    Raises RuntimeError naming the fix when a live cluster already has that name, a corrupt state
    file has it, or all slots are taken. A corrupt state file holds its slot; one whose slot is
    unknown holds them all until removed. Abandoned clusters give their slot back; the caller
    reaps their leftovers first through :func:`abandoned`. The slot is claimed machine-wide
    (:mod:`rlsim.host.slots`) before the state is written, and released by :func:`forget`.
    """
    with locked(), slots.lock():
        live = procs.sessions()
        taken: dict[int, slots.Holder] = {}
        entries = scan()
        for other in entries:
            if isinstance(other, Corrupt):
                if other.name == spec.name or other.slot is None:
                    raise RuntimeError(
                        f"the state file {other.path} does not parse ({other.reason}) and may "
                        f"belong to a running cluster: {other.fix}")
                taken[other.slot] = slots.Holder("this home", f"corrupt state file {other.path}")
                continue
            if other.spec.name == spec.name and not is_abandoned(other, live):
                raise RuntimeError(
                    f"an rlsim cluster named {spec.name!r} is already running "
                    f"(slot {other.slot}): pick another --name or run `rlsim down {spec.name}`"
                )
            if not is_abandoned(other, live):
                for slot in other.layout.slots:
                    taken[slot] = slots.Holder("this home", f"cluster {other.spec.name!r}")
        # this home's sessions are judged by its registry above (an abandoned one's slot is
        # free once reaped, whatever its claim says); what still listens holds its slot
        ours = frozenset(e.session for e in entries if e.session)
        for slot, holder in slots.busy(exclude=ours).items():
            taken.setdefault(slot, holder)
        need = span(spec.nodes)
        free = [slot for slot in range(MAX_SLOTS - need + 1)
                if not any(s in taken for s in range(slot, slot + need))]
        if not free:
            want = f"{need} free slots in a row for {spec.nodes} nodes" if need > 1 else \
                "free slot"
            raise RuntimeError(
                f"no {want} among the {MAX_SLOTS} rlsim cluster slots on this machine: "
                f"{slots.held_line(taken)}. Stop one with `rlsim down NAME` (or `--all`), "
                "or wait for the other users' clusters to end")
        state = ClusterState(
            spec=spec,
            slot=free[0],
            session=f"{spec.name}-{secrets.token_hex(4)}",
            backend=backend,
            owner_pid=os.getpid(),
            owner_started=slots.start_time(os.getpid()),
            detached=detached,
            origin=_origin(),
        )
        run_dir()
        for slot in state.layout.slots:
            slots.claim(slot, state.session, state.owner_pid)
        try:
            save(state)
        except BaseException:
            slots.release(state.session)
            raise
        return state


def _origin() -> str:
    """What is starting a cluster now, for :attr:`ClusterState.origin`."""
    import sys

    test = os.environ.get("PYTEST_CURRENT_TEST")
    return (f"pytest {test}" if test else " ".join(sys.argv))[:400]


def abandoned() -> list[ClusterState]:
    """Clusters that no one will tear down (see :func:`is_abandoned`)."""
    live = procs.sessions()
    return [s for s in load_all() if is_abandoned(s, live)]
