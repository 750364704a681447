"""The machine-wide claims folder against another local user: whatever they plant there (a folder
of their own, a link swapped in, hostile claims, a held or FIFO lock) never makes this user's
rlsim write or delete outside it, hang, crash, or blame the wrong user.

The second user is ``nobody`` (or uid 65534), reached by a forked child that drops to its uid:
it needs root, and the tests that need it skip, saying so, elsewhere. Each test here failed on
the claims code before the folder was opened by descriptor and its owner checked."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pwd
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.host import slots, state
from rlsim.host.layout import MAX_SLOTS
from rlsim.host.spec import ClusterSpec

try:
    OTHER = pwd.getpwnam("nobody")
    OTHER_UID, OTHER_GID, OTHER_NAME = OTHER.pw_uid, OTHER.pw_gid, "nobody"
except KeyError:
    OTHER_UID = OTHER_GID = 65534
    OTHER_NAME = "uid 65534"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="acting as a second user (setuid, chown) "
                                "needs root; these run in the gate's root container")


@pytest.fixture
def claims(monkeypatch) -> Iterator[Path]:
    """A claims folder in a folder like /tmp (sticky, everyone's), which the second user can
    reach (tmp_path's parents are this user's alone)."""
    top = Path(tempfile.mkdtemp(prefix="rlsim-claims-", dir="/tmp"))
    os.chmod(top, 0o1777)
    monkeypatch.setattr(slots, "CLAIMS", top / "rlsim-slots")
    yield top / "rlsim-slots"
    shutil.rmtree(top, ignore_errors=True)


@contextlib.contextmanager
def as_other(action: Callable[[], object]) -> Iterator[int]:
    """Run ``action`` in a child process of the second user; it lives (keeping whatever it
    opened) until the block ends. Yields its pid."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the second user
        code = 1
        try:
            os.close(ready_r)
            os.close(stop_w)
            os.setgroups([])
            os.setgid(OTHER_GID)
            os.setuid(OTHER_UID)
            kept = action()  # noqa: F841  (kept open while the child lives)
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(stop_r)
    try:
        assert select.select([ready_r], [], [], 30)[0] and os.read(ready_r, 1) == b"1", \
            "the second user's action failed (its traceback is above)"
        yield pid
    finally:
        os.close(stop_w)
        os.waitpid(pid, 0)
        os.close(ready_r)


def _stale_body() -> str:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return json.dumps({"pid": int(gone), "started": 1, "session": "s"})


def _free_slot(highest: bool = False) -> int:
    """A slot where nothing listens on this machine now; ``highest``: the last such, the one
    the clusters other tests start meanwhile take last (they take the lowest free)."""
    order = range(MAX_SLOTS - 1, -1, -1) if highest else range(MAX_SLOTS)
    return next(s for s in order if not slots.listeners_in(s))


def _sessions(held: dict) -> dict[int, str]:
    return {s: str(h) for s, h in held.items() if "session" in h.what}


@needs_root
def test_a_folder_another_user_made_first_is_refused_naming_them(claims):
    def make():
        os.mkdir(claims)
        os.chmod(claims, 0o1777)  # as rlsim's own fix text once invited
    with as_other(make):
        pass
    with pytest.raises(slots.SlotError, match=rf"owned by {OTHER_NAME} .*as root.*rm -r"), \
            slots.lock():
        pass
    with pytest.raises(slots.SlotError, match=f"owned by {OTHER_NAME}"):
        slots.claim(0, "c-0000aaaa", os.getpid())
    slots.release("c-0000aaaa")  # refused quietly: nothing to release in a folder not trusted
    assert os.listdir(claims) == []


def test_the_folder_is_1777_from_the_moment_it_exists(claims, monkeypatch):
    """At every step of its making, a start that looks finds it whole (mode 1777) or not there:
    one that found it half made (mode 700 or 1755, before a chmod) refused it, about once in
    ten runs of six starts at once."""
    seen = []

    def then_look(step):
        def looked(*args, **kwargs):
            try:
                return step(*args, **kwargs)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    seen.append(stat.S_IMODE(os.stat(claims).st_mode))
        return looked
    for name in ("mkdir", "chmod", "fchmod", "rmdir"):
        monkeypatch.setattr(os, name, then_look(getattr(os, name)))
    monkeypatch.setattr(slots, "_rename_noreplace", then_look(slots._rename_noreplace))
    slots.claims_dir()
    assert seen and set(seen) == {0o1777}, [oct(m) for m in seen]


def test_making_the_folder_never_touches_the_umask(claims, monkeypatch):
    """The umask is the whole process's: set to 0 for a moment (as every lock, pick, claim and
    release did), a file another thread creates then is writable by all."""
    set_to = []
    real = os.umask
    monkeypatch.setattr(os, "umask", lambda mask: set_to.append(mask) or real(mask))
    slots.claims_dir()  # made here
    with slots.lock():
        slots.busy()
        slots.claim(_free_slot(highest=True), "mine-0000bbbb", os.getpid())
    slots.release("mine-0000bbbb")
    assert set_to == []
    assert stat.S_IMODE(os.stat(claims).st_mode) == 0o1777


def test_a_start_that_loses_the_race_to_make_the_folder_uses_the_winners(claims, monkeypatch):
    """Another start makes the folder (empty, as it is until a claim) while this one makes its
    own: this one's is dropped, never renamed over the winner's (the two would then lock two
    different folders and could pick one slot)."""
    real, winner = os.fchmod, []

    def fchmod(fd, mode):
        real(fd, mode)
        if not winner:  # this start's folder has its mode; the other start is faster
            os.mkdir(claims)
            os.chmod(claims, 0o1777)
            winner.append(os.open(claims, os.O_RDONLY | os.O_DIRECTORY))
    monkeypatch.setattr(os, "fchmod", fchmod)
    try:
        fd = slots.open_dir()
        try:
            assert os.path.samestat(os.fstat(fd), os.fstat(winner[0]))
        finally:
            os.close(fd)
    finally:
        for fd in winner:
            os.close(fd)
    assert os.listdir(claims.parent) == [claims.name]  # its own folder removed


def test_without_a_rename_that_never_replaces_the_folder_is_made_in_place(claims, monkeypatch):
    """A libc or file system without ``RENAME_NOREPLACE``: ``mkdir`` then ``fchmod``, no
    folder of its own left beside."""
    monkeypatch.setattr(slots, "_rename_noreplace", lambda src, dst: None)
    slots.claims_dir()
    assert stat.S_IMODE(os.stat(claims).st_mode) == 0o1777
    assert os.listdir(claims.parent) == [claims.name]


def _swap_on_first_call(monkeypatch, claims: Path, victim: Path) -> None:
    """At the first start_time call, move the claims folder aside and put a link to ``victim``
    in its place, as the owner of a folder could between two steps of a pick."""
    real = slots.start_time
    swapped = []

    def swap(pid: int):
        if not swapped:
            swapped.append(claims.rename(claims.with_name("moved")))
            claims.symlink_to(victim)
        return real(pid)
    monkeypatch.setattr(slots, "start_time", swap)


def test_a_swap_of_the_folder_mid_pick_deletes_nothing_where_the_link_points(
        claims, tmp_path, monkeypatch):
    slot = _free_slot(highest=True)
    name = f"{slot}.{os.geteuid()}.gone-0000aaaa"
    slots.claims_dir()
    (claims / name).write_text(_stale_body())
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / name).write_text("precious")
    _swap_on_first_call(monkeypatch, claims, victim)
    with slots.lock():
        assert slot not in _sessions(slots.busy())
    assert (victim / name).read_text() == "precious"
    assert not (claims.with_name("moved") / name).exists()  # removed where it was: stale


def test_a_swap_of_the_folder_mid_claim_creates_nothing_where_the_link_points(
        claims, tmp_path, monkeypatch):
    slots.claims_dir()
    victim = tmp_path / "victim"
    victim.mkdir()
    _swap_on_first_call(monkeypatch, claims, victim)
    with contextlib.suppress(slots.SlotError):  # refused, or made in the folder it opened
        slots.claim(_free_slot(highest=True), "c-0000aaaa", os.getpid())
    assert list(victim.iterdir()) == []


HOSTILE = {
    "empty object": "{}",
    "no started": json.dumps({"pid": os.getpid()}),
    "pid Infinity": '{"pid": Infinity, "started": 1}',
    "pid NaN": '{"pid": NaN, "started": 1}',
    "started true": json.dumps({"pid": os.getpid(), "started": True}),
    "deep JSON": "[" * 4000,
    "a list": "[1, 2]",
    "not UTF-8": b"\xff\xfe{",
    "oversized": json.dumps({"pid": os.getpid(), "started": 1, "pad": "x" * 9000}),
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_any_claim_content_is_stale_never_a_traceback(claims, body):
    slot = _free_slot(highest=True)
    path = slots.claims_dir() / f"{slot}.{os.geteuid()}.bad-0000aaaa"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    with slots.lock():
        assert slot not in _sessions(slots.busy())
    assert not path.exists()  # this user's own: removed as stale


@pytest.mark.parametrize("plant", ["folder", "fifo", "link", "odd name"])
def test_any_claim_entry_is_passed_over_never_a_traceback(claims, tmp_path, plant):
    slot = _free_slot(highest=True)
    path = slots.claims_dir() / f"{slot}.{os.geteuid()}.odd-0000aaaa"
    if plant == "folder":
        path.mkdir()
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "link":
        (tmp_path / "target").write_text(json.dumps({"pid": os.getpid(), "started": 1}))
        path.symlink_to(tmp_path / "target")
    else:
        path = slots.claims_dir() / "\u00b2.0.x-0000aaaa"  # str.isdigit() says yes
        path.write_text(_stale_body())
    with slots.lock():
        assert slot not in _sessions(slots.busy())
    slots.release("odd-0000aaaa")
    assert os.path.lexists(path)  # not a claim rlsim wrote: never removed
    assert plant != "link" or (tmp_path / "target").exists()


def _run_bounded(target: Callable[[], str]) -> str:
    """``target()`` in a forked child, its answer back within 30 s (a hang fails the test)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child():
        try:
            queue.put(target())
        except BaseException as e:  # noqa: BLE001  (the answer is the error's text)
            queue.put(f"{type(e).__name__}: {e}")
    proc = ctx.Process(target=child)
    proc.start()
    try:
        proc.join(30)
        assert not proc.is_alive(), "hung: the claims lock was waited on without a bound"
        return queue.get(timeout=5)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _pick() -> str:
    with slots.lock():
        return f"picked {sorted(slots.busy())}"


def test_a_fifo_where_the_lock_was_never_hangs(claims):
    os.mkfifo(slots.claims_dir() / "lock")
    assert _run_bounded(_pick).startswith("picked")


@needs_root
def test_a_lock_another_user_holds_is_waited_on_with_a_bound_naming_them(claims, monkeypatch):
    import fcntl
    slots.claims_dir()
    monkeypatch.setattr(slots, "LOCK_WAIT_S", 0.3)

    def hold():  # shared locks on the folder and on the lock file older rlsims used
        fds = [os.open(claims, os.O_RDONLY),
               os.open(claims / "lock", os.O_RDONLY | os.O_CREAT, 0o644)]
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_SH)
        return fds
    with as_other(hold) as holder:
        said = _run_bounded(_pick)
    assert said.startswith("SlotError") and f"by pid {holder} ({OTHER_NAME}:" in said, said
    assert "end that process" in said


@needs_root
def test_claims_another_user_forges_hold_nothing_and_are_never_removed(claims):
    slots.claims_dir()
    init = json.dumps({"pid": 1, "started": slots.start_time(1)})  # alive, but root's

    def plant():
        for slot in range(MAX_SLOTS):
            for uid in (0, OTHER_UID):
                (claims / f"{slot}.{uid}.forged-0000aaaa").write_text(init)
    with as_other(plant):
        pass
    with slots.lock():
        assert _sessions(slots.busy()) == {}
    slots.release("forged-0000aaaa")
    assert len(os.listdir(claims)) == 2 * MAX_SLOTS  # another user's files stay theirs


@needs_root
def test_another_users_live_claim_names_them_and_the_refusal_is_one_line(
        claims, tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    # a cluster another test starts in the slot meanwhile would be named instead of the claim
    # (a gate saw 'something listening: 127.77.0.10:20000' in slot 0)
    slot = _free_slot(highest=True)
    slots.claims_dir()
    with as_other(lambda: slots.claim(slot, "theirs-0000dddd", os.getpid())):
        with slots.lock():
            assert slots.busy()[slot] == slots.Holder(OTHER_NAME, "session theirs-0000dddd")
        with pytest.raises(RuntimeError) as refused:
            for i in range(MAX_SLOTS + 1):
                state.reserve(ClusterSpec(name=f"c{i}"), "local", detached=False)
    said = str(refused.value)
    assert said.startswith("no free slot among") and "\n" not in said and len(said) < 600, said
    assert f"{OTHER_NAME} holds slot {slot} (session theirs-0000dddd)" in said, said


@needs_root
def test_another_users_stale_claims_are_read_a_few_a_slot(claims, monkeypatch):
    slot = _free_slot(highest=True)
    d = slots.claims_dir()
    body = _stale_body()
    for i in range(3 * slots.FOREIGN_READS):
        for uid in (OTHER_UID, 0):  # theirs, and theirs named as root's: a stat, no read
            (d / f"{slot}.{uid}.old{i}-0000aaaa").write_text(body)
            os.chown(d / f"{slot}.{uid}.old{i}-0000aaaa", OTHER_UID, OTHER_GID)
    real, read = slots.read_claim, []
    monkeypatch.setattr(slots, "read_claim", lambda *a: read.append(a) or real(*a))
    with slots.lock():
        assert slot not in _sessions(slots.busy())
    assert len(read) == slots.FOREIGN_READS


ENTRY_NAMES = st.one_of(
    st.builds(lambda s, u, x: f"{s}.{u}.{x}", st.integers(-1, 13).map(str) | st.just("\u00b2"),
              st.sampled_from([str(os.geteuid()), str(OTHER_UID), "0", "x", ""]),
              st.sampled_from(["f-0000aaaa", "F-0000AAAA", "a.b", "", "x-0000aaaa.1"])),
    st.text(min_size=1, max_size=12).filter(lambda n: "/" not in n and n not in (".", "..")))
BODIES = st.one_of(st.binary(max_size=64), st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["pid", "started", "session"]), inner, max_size=3), max_leaves=6)))
ENTRIES = st.lists(st.tuples(ENTRY_NAMES, st.sampled_from(["file", "folder", "fifo", "link"]),
                             BODIES, st.booleans()), max_size=6)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ENTRIES)
def test_fuzz_whatever_is_planted_a_pick_holds_nothing_and_touches_nothing_outside(entries):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(slots, "CLAIMS", Path(tmp) / "rlsim-slots")
        outside = Path(tmp) / "outside"
        outside.mkdir()
        (outside / "victim").write_text("precious")
        d = slots.claims_dir()
        for name, kind, body, theirs in entries:
            path = d / name
            if os.path.lexists(path):
                continue
            with contextlib.suppress(OSError, ValueError):  # too long, a NUL, a surrogate
                if kind == "folder":
                    path.mkdir()
                elif kind == "fifo":
                    os.mkfifo(path)
                elif kind == "link":
                    path.symlink_to(outside / "victim")
                else:
                    path.write_bytes(body.encode() if isinstance(body, str) else body)
                if theirs and ROOT:
                    os.chown(path, OTHER_UID, OTHER_GID, follow_symlinks=False)
        with slots.lock():
            assert _sessions(slots.busy()) == {}
        slots.release("f-0000aaaa")
        slot = _free_slot(highest=True)
        slots.claim(slot, "mine-0000aaaa", os.getpid())
        with slots.lock():
            assert _sessions(slots.busy()) == {
                slot: f"{slots.user_name(os.geteuid())}: session mine-0000aaaa"}
        assert (outside / "victim").read_text() == "precious"
        assert os.listdir(outside) == ["victim"]
