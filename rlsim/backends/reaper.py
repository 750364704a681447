"""Reaping, in one place: tear down a cluster from its state file alone (its owner may be dead),
sweep what abandoned or unreadable state files still name, and this home's Docker objects no state
file knows. Every backend's ``stop`` ends here; so do ``rlsim down``/``gc`` and a start's sweep."""

from __future__ import annotations

import contextlib
import signal

from rlsim.backends.docker_engine import HOME_LABEL, LABEL, docker_client, engine_problem, is_orphan
from rlsim.host import cgroups, disk, iptables, machines, procs, state
from rlsim.host.home import home_id, locked, rlsim_home, run_dir
from rlsim.host.iptables import Firewall
from rlsim.host.state import ClusterState


def reap_abandoned() -> list[str]:
    """Tear down clusters whose owner died without stopping them; returns their names.

    Under the registry lock, so that no cluster starts under a reaped name meanwhile."""
    reaped = []
    with locked():
        for st in state.abandoned():
            reap(st)
            reaped.append(st.spec.name)
        with contextlib.suppress(Exception):  # never in the way of a cluster's start
            machines.reap_abandoned()  # namespace machines of an interrupted test or bench
        end_idle_zygotes()
    return reaped


def end_idle_zygotes() -> list[int]:
    """End the zygotes this home's clusters share (:func:`rlsim.backends.zygote.start_shared`)
    once no cluster of the home is registered, abandoned or unreadable ones included; the pids
    ended. Under the registry lock: a cluster registers (``state.reserve``) before it starts
    its nodes, so none is using them. Until then a zygote whose key no running cluster shares
    any more stays (0.4 GB of memory each here, the price of a gate's clusters sharing four
    zygotes instead of starting 35)."""
    from rlsim.backends import zygote

    with locked():
        if not any((rlsim_home() / "run").glob("z-*.pid")) or state.scan():
            return []
        return zygote.end_shared(run_dir())


def reap(st: ClusterState) -> None:
    """Remove every trace of ``st`` with its backend's own reaping (``reap_state``): network
    rules, processes, cgroups, containers, state file, node dirs.

    Safe twice, and safe against a new cluster that took the same name or slot meanwhile: under
    the registry lock, the state file goes only if it is still this session's, the chain only if
    no other cluster holds the slot; processes, cgroups and the run directory are the session's
    own. Network rules go first so that nothing stays cut off if a later step fails.
    """
    from rlsim.backends import BACKENDS, cluster_class

    with locked():
        run_dir()  # refuses a home whose run/ is not rlsim's own before anything is touched
        if st.backend in BACKENDS:
            cluster_class(st.backend).reap_state(st)
        else:  # a backend this rlsim does not know: what is here is a local cluster's
            reap_local(st)
        end_idle_zygotes()


def reap_local(st: ClusterState) -> None:
    """A local cluster's reaping: its slot's chain (when no one else holds it), its session's
    processes, cgroups and filesystems, its state file and run directory."""
    if Firewall.available() is None and not state.slot_held_by_other(st):
        iptables.heal_slot(st.slot)
    _end_session(st.session)
    state.forget(st)
    state.remove_run_dir(st.session)


def _end_session(session: str) -> None:
    """Kill every process of ``session``, remove its cgroups and unmount its filesystems."""
    cgroups.remove_session(session)
    procs.signal_all(procs.find(session), signal.SIGCONT)  # a stopped process ignores KILL
    procs.kill_and_wait(session)
    disk.unmount_all(session)


def reap_corrupt(entry: state.Corrupt) -> None:
    """Remove a state file that does not parse, and what it still names: the processes, cgroups
    and run directory of its session and, when no one else holds it, its slot's chain."""
    with locked():
        if entry.session:
            _end_session(entry.session)
        if entry.slot is not None and Firewall.available() is None:
            held = any(isinstance(o, ClusterState) and o.slot == entry.slot for o in state.scan())
            if not held:
                iptables.heal_slot(entry.slot)
        state.forget(entry)
        if entry.session:
            state.remove_run_dir(entry.session)
        end_idle_zygotes()


def reap_docker(st: ClusterState) -> None:
    """A docker cluster's reaping: the containers, network and volumes labelled with ``st``'s
    session, its state and dirs (nothing, when the name is another cluster's now: docker's orphan
    reaper finds this session's containers by label)."""
    current = state.load_entry(st.spec.name)
    if isinstance(current, ClusterState) and current.session != st.session:
        return
    if engine_problem() is None:
        client = docker_client()
        for c in client.containers.list(all=True, filters={"label": f"{LABEL}={st.session}"}):
            with contextlib.suppress(Exception):
                c.remove(force=True)
        for n in client.networks.list(filters={"label": f"{LABEL}={st.session}"}):
            with contextlib.suppress(Exception):
                n.remove()
        for v in client.volumes.list(filters={"label": f"{LABEL}={st.session}"}):
            with contextlib.suppress(Exception):
                v.remove(force=True)
    # host processes of the session: a pending self-heal of `rlsim fault ... --for`
    with contextlib.suppress(TimeoutError):
        procs.kill_and_wait(st.session)
    disk.unmount_all(st.session)  # the host's side of a slow_storage device
    state.forget(st)  # only if the name is still this session's
    state.remove_run_dir(st.session)


def reap_orphans(known_sessions: set[str]) -> list[str]:
    """What every backend that starts clusters left of sessions no state file knows (their
    owner's state is gone), removed; returns what was removed."""
    from rlsim.backends import BACKENDS, cluster_class

    return [thing for name, entry in BACKENDS.items() if entry.starts
            for thing in cluster_class(name).reap_orphans(known_sessions)]


def reap_docker_orphans(known_sessions: set[str]) -> list[str]:
    """Remove this home's containers, networks and volumes of sessions no state file knows (their
    owner's state is gone); returns what was removed. Another home's objects are left alone."""
    if engine_problem() is not None:
        return []
    client, removed, home = docker_client(), [], home_id()
    mine = {"label": f"{HOME_LABEL}={home}"}
    for c in client.containers.list(all=True, filters=mine):
        if is_orphan(c.labels, known_sessions, home):
            c.remove(force=True)
            removed.append(f"container {c.name}")
    for n in client.networks.list(filters=mine):
        if is_orphan(n.attrs.get("Labels"), known_sessions, home):
            n.remove()
            removed.append(f"network {n.name}")
    for v in client.volumes.list(filters=mine):
        if is_orphan(v.attrs.get("Labels"), known_sessions, home):
            v.remove(force=True)
            removed.append(f"volume {v.name}")
    return removed
