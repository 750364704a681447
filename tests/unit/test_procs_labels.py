"""rlsim.host.procs finds a cluster's processes by their labels, and a worker forked by a zygote
the home's clusters share by its node's cgroup: its environment is the zygote's, which names no
session. Read from a /proc laid out by the test."""

import pytest

from rlsim.host import procs
from rlsim.host.home import home_id


@pytest.fixture
def proc(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(procs, "PROC", tmp_path / "proc")

    def add(pid: int, env: dict[str, str], cgroup: str = "0::/", state: str = "S") -> None:
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        d.joinpath("environ").write_bytes(b"".join(f"{k}={v}\0".encode()
                                                   for k, v in env.items()))
        d.joinpath("cgroup").write_text(cgroup + "\n")
        d.joinpath("stat").write_text(f"{pid} (python) {state} 1 1 1")
    return add


def test_a_labelled_process_and_a_shared_zygotes_worker_are_found_by_session_and_node(proc):
    me = home_id()
    proc(10, {**procs.labels("sess-a"), procs.NODE_VAR: "0"})
    # a worker forked by the shared zygote, moved into node 1 of sess-a
    proc(11, {procs.ZYGOTE_HOME_VAR: me}, f"0::/init.scope/rlsim/{me}.sess-a/n1")
    proc(12, {procs.ZYGOTE_HOME_VAR: me})  # the zygote itself: in no node's group
    proc(13, {procs.ZYGOTE_HOME_VAR: "otherhome"}, "0::/rlsim/otherhome.sess-a/n1")
    proc(14, {"PATH": "/bin"}, f"0::/rlsim/{me}.sess-a/n1")  # not rlsim's: no mark at all
    proc(15, {procs.ZYGOTE_HOME_VAR: me}, f"0::/rlsim/{me}.sess-b/n0")
    proc(16, {procs.ZYGOTE_HOME_VAR: me}, f"0::/rlsim/{me}.sess-a/n2", state="Z")
    assert procs.find("sess-a") == [10, 11]
    assert procs.find("sess-a", 1) == [11]
    assert procs.find("sess-b") == [15]
    assert procs.sessions() == {"sess-a", "sess-b"}


def test_a_cgroup_v1_line_names_the_node_too(proc):
    me = home_id()
    proc(20, {procs.ZYGOTE_HOME_VAR: me},
         f"12:memory:/rlsim/{me}.sess-c/n3\n0::/")
    assert procs.find("sess-c", 3) == [20]
