"""Slots are free only machine-wide: a slot another home claimed, or where anything listens, is
never picked; two starts at once never get one slot; a claim outlives neither its process nor its
listeners; the claims folder is refused when others could tamper with it."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys

import pytest

from rlsim.host import listeners, slots, state
from rlsim.host.layout import MAX_SLOTS, lay_out, slot_base
from rlsim.host.spec import ClusterSpec

# A listening socket as /proc/net/tcp and tcp6 write it (state 0A), and one connected (01)
HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
TAIL = " 00000000:00000000 00:00000000 00000000     0        0 {} 1"
TCP = HEAD + "\n".join(f"   {i}: {local} {remote} {st}" + TAIL.format(inode) for i, (
    local, remote, st, inode) in enumerate([
        ("0A4D4D7F:4E20", "00000000:0000", "0A", 4242),
        ("00000000:1F90", "00000000:0000", "0A", 4343),
        ("0100007F:8AE2", "0100007F:4E20", "01", 4444)]))
ANY6 = "0" * 32
TCP6 = HEAD + "\n".join(f"   {i}: {local} {ANY6}:0000 0A" + TAIL.format(inode) for i, (
    local, inode) in enumerate([("0000000000000000FFFF00000B4D4D7F:4E84", 77),
                                (ANY6 + ":0016", 78)]))


def test_the_kernels_tables_parse_to_listeners_only():
    got = listeners.parse(TCP) + listeners.parse(TCP6)
    assert [(s.address, s.port, s.inode) for s in got] == [
        ("127.77.77.10", 20000, 4242), ("0.0.0.0", 8080, 4343),
        ("127.77.77.11", 20100, 77), ("::", 22, 78)]
    assert str(got[2]) == "127.77.77.11:20100" and str(got[3]) == "[::]:22"
    # the slot's addresses, or its ports on any address
    assert [s.inode for s in listeners.in_block(got, "127.77.77.", (20000, 20999))] == [4242, 77]
    assert [s.inode for s in listeners.in_block(got, "127.77.5.", (8000, 8999))] == [4343]
    assert [s.inode for s in listeners.at(got, "127.77.0.10", 22)] == [78]


def test_a_real_listener_is_found_and_its_holder_told_apart():
    sock = socket.socket()
    sock.bind(("127.77.9.10", 0))
    sock.listen()
    try:
        port = sock.getsockname()[1]
        found = listeners.at(listeners.listening(), "127.77.9.10", port)
        assert len(found) == 1
        assert listeners.held_by({found[0].inode}, [os.getpid()])
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listeners.held_by({found[0].inode}, [other.pid])
        finally:
            other.kill()
            other.wait()
    finally:
        sock.close()
    assert listeners.at(listeners.listening(), "127.77.9.10", port) == []


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_slot_claimed_by_another_home_is_never_picked(home, tmp_path, monkeypatch):
    a = state.reserve(ClusterSpec(name="a"), "local", detached=False)
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "other"))
    b = state.reserve(ClusterSpec(name="a"), "local", detached=False)  # same name, other home
    assert a.slot != b.slot
    # the second home's cluster gone: its claim goes with its state, the first's stays
    assert state.forget(b)
    with slots.lock():
        held = slots.busy()
    assert ": session a-" in str(held[a.slot]) and b.slot not in held


def _free_slot() -> int:
    """A slot nothing holds now (clusters of other tests and jobs may run on this machine)."""
    with slots.lock():
        return min(set(range(MAX_SLOTS)) - set(slots.busy()))


def test_a_slot_where_something_listens_is_never_picked(home):
    slot = _free_slot()
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", slot_base(slot) + 1))  # a port of the block, on another address
    held.listen()
    try:
        with slots.lock():
            assert str(slots.busy()[slot]) == \
                f"something listening: 127.0.0.1:{slot_base(slot) + 1}"
        st = state.reserve(ClusterSpec(name="a"), "local", detached=False)
        assert st.slot != slot
    finally:
        held.close()


def _claim_stale(tmp_path, slot: int, session: str) -> None:
    """A claim whose process has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    path = slots.claims_dir() / f"{slot}.{os.geteuid()}.{session}"
    path.write_text(f'{{"pid": {proc.stdout.strip()}, "started": 1, "session": "{session}"}}')


def test_a_claim_outlives_neither_its_process_nor_its_listeners(home, tmp_path):
    slot = _free_slot()
    _claim_stale(tmp_path, slot, "gone-0000aaaa")
    with slots.lock():
        assert slot not in slots.busy()
    assert not list(slots.claims_dir().glob(f"{slot}.*"))  # this user's stale claim removed
    # a claim whose process ended but whose cluster still listens (a detached cluster) holds
    _claim_stale(tmp_path, slot, "detached-0000bbbb")
    sock = socket.socket()
    sock.bind((lay_out(slot, 1).head.address, 0))
    sock.listen()
    try:
        with slots.lock():
            assert "something listening: 127.77." in str(slots.busy()[slot])
        assert list(slots.claims_dir().glob(f"{slot}.*"))  # kept: its cluster still listens
    finally:
        sock.close()


def _reserve(home: str, name: str, queue, done) -> None:
    os.environ["RLSIM_HOME"] = home
    st = state.reserve(ClusterSpec(name=name), "local", detached=False)
    queue.put(st.slot)
    done.wait(30)  # its claim lives as long as this process does


def test_starts_at_once_from_many_homes_get_distinct_slots(tmp_path):
    ctx = multiprocessing.get_context("fork")  # keeps this test's private claims folder
    queue, done = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_reserve, args=(str(tmp_path / f"h{i}"), "same", queue, done))
             for i in range(6)]
    for p in procs:
        p.start()
    try:
        got = [queue.get(timeout=30) for _ in procs]
    finally:
        done.set()
        for p in procs:
            p.join(30)
    assert len(set(got)) == 6, got


def slots_busy() -> dict[int, str]:
    with slots.lock():
        return slots.busy()


def test_all_slots_held_names_the_holders(home):
    # Reserved until none is left, not counted first: other processes on this machine (the
    # gate's other worker) take and give back slots meanwhile, and are named first when they do
    # ('...: something listening holds slots 0, 3 (...); this home holds slots 1-2, 4-11 ...')
    with pytest.raises(RuntimeError, match=r"^no free slot [^:]*: (.*; )?this home holds "
                                           r"slots? [-, 0-9]+ \(cluster 'c0'.*rlsim down"):
        for i in range(MAX_SLOTS + 8):
            state.reserve(ClusterSpec(name=f"c{i}"), "local", detached=False)


def test_a_64_node_cluster_takes_two_free_slots_in_a_row(home):
    held = set(slots_busy())
    small = state.reserve(ClusterSpec(name="small"), "local", detached=False)
    big = state.reserve(ClusterSpec(name="big", nodes=64), "local", detached=False)
    pair = set(big.layout.slots)
    assert len(pair) == 2 and not pair & (held | {small.slot})
    with slots.lock():
        now = slots.busy()
    assert all(f"session {big.session}" in now[s] for s in pair)
    # this home's registry counts both slots too: nothing new lands in the second one
    other = state.reserve(ClusterSpec(name="other"), "local", detached=False)
    assert other.slot not in pair
    assert state.forget(big)
    with slots.lock():
        assert not pair & set(slots.busy())


def test_no_two_free_slots_in_a_row_names_the_need(home):
    # one slot more taken at a time until no two free ones are left in a row (other processes
    # on this machine take and give back slots meanwhile), with one free slot most often left
    with pytest.raises(RuntimeError, match="no 2 free slots in a row for 64 nodes"):
        for i in range(MAX_SLOTS + 8):
            state.forget(state.reserve(ClusterSpec(name="big", nodes=64), "local",
                                       detached=False))
            state.reserve(ClusterSpec(name=f"c{i}"), "local", detached=False)


@pytest.mark.parametrize("plant", ["link", "file", "open_mode"])
def test_a_claims_folder_others_could_tamper_with_is_refused(tmp_path, monkeypatch, plant):
    target = tmp_path / "rlsim-slots"
    if plant == "link":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    elif plant == "file":
        target.write_text("")
    else:
        target.mkdir()
        os.chmod(target, 0o777)  # world-writable without the sticky bit
    monkeypatch.setattr(slots, "CLAIMS", target)
    with pytest.raises(slots.SlotError, match=f"{target}.*Fix: as root.*rm -r"):
        slots.claims_dir()


def test_a_node_joins_only_a_gcs_its_own_head_runs(home):
    """What listens at a cluster's GCS address must be a process of that cluster before a node
    starts there: another home's GCS on the same address would take the node in."""
    from rlsim.backends import node_start

    st = state.reserve(ClusterSpec(name="c", nodes=2), "local", detached=False)
    plan = st.layout
    with pytest.raises(RuntimeError, match="nothing listens at its GCS.*head is down"):
        node_start.check_own_gcs(st)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind((plan.head.address, plan.gcs_port))
    squatter.listen()
    try:
        with pytest.raises(RuntimeError, match="is not its head's GCS"):
            node_start.check_own_gcs(st)
        # and a head is never started where something listens already
        with pytest.raises(RuntimeError, match="already listens, before its head started"):
            node_start.start_nodes(st, [0, 1])
    finally:
        squatter.close()


def test_forgetting_a_cluster_whose_state_file_is_gone_still_releases_its_claims(home):
    st = state.reserve(ClusterSpec(name="gone"), "local", detached=False)
    state.remove("gone")  # its home cleaned up under it
    with state.locked():
        assert not state.forget(st)
    with slots.lock():
        assert st.slot not in slots.busy() or st.session not in slots.busy()[st.slot]
    assert not [p for p in slots.claims_dir().iterdir() if st.session in p.name]
