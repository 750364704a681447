"""The doctor's plan and judgement as data, and its probe on this host (no cluster needed)."""

import json
import subprocess
import sys
from types import SimpleNamespace

from rlsim.backends.started import StartedCluster
from rlsim.doctor import diagnose, plan_targets
from rlsim.doctor.probe import run

EPS = [{"index": 0, "address": "10.0.0.10", "ports": {"gcs": 6379, "node_manager": 100}},
       {"index": 1, "address": "10.0.0.11", "ports": {"node_manager": 101}},
       {"index": 2, "address": "10.0.0.12", "ports": {"node_manager": 102}}]
V = {"python": "3.11.7", "ray": "2.60.0", "torch": "2.13.0", "deepspeed": "0.19.8"}


def look(**over):
    return {"versions": dict(V), "reach": [], **over}


def test_every_node_probes_every_other_nodes_ports_and_never_itself():
    targets = plan_targets(EPS)
    assert [(t["node"], t["port"], t["name"]) for t in targets[1]] == [
        (0, 6379, "gcs"), (0, 100, "node_manager"), (2, 102, "node_manager")]
    assert all(t["node"] != 0 for t in targets[0]) and len(targets[0]) == 2


def test_a_healthy_cluster_on_shared_storage_has_no_findings():
    looks = {i: look() for i in range(3)}
    assert diagnose(EPS, looks, {i: [0, 1, 2] for i in range(3)}, "/ckpt") == []


def test_node_local_storage_is_a_warning_that_says_who_sees_what():
    looks = {i: look() for i in range(3)}
    [f] = diagnose(EPS, looks, {0: [0, 1], 1: [0, 1], 2: [2]}, "/ckpt")
    assert (f.level, f.check) == ("warn", "checkpoint_dir")
    assert "/ckpt is node-local" in f.message and "node 2 sees the files of node(s) 2" in f.message
    assert "node 0 sees the files of node(s) 0, 1;" in f.message  # 0 and 1 share; 2 does not
    assert "storage every node mounts" in f.fix


def test_other_versions_blocked_ports_and_silent_nodes_are_errors_naming_both_ends():
    looks = {0: look(), 1: look(reach=[{"node": 0, "address": "10.0.0.10", "port": 6379,
                                        "name": "gcs", "ok": False, "error": "timed out"}]),
             2: {"error": "container is not running"}}
    looks[1]["versions"]["torch"] = "2.12.0"
    found = {f.check: f for f in diagnose(EPS, looks, {}, None)}
    assert set(found) == {"probe", "versions", "ports"}
    assert "node 1 (10.0.0.11) has torch 2.12.0 (head: 2.13.0)" in found["versions"].message
    assert found["ports"].message == ("node 1 (10.0.0.11) cannot reach node 0 (10.0.0.10) port "
                                      "6379 (gcs): timed out")
    assert "TCP 6379" in found["ports"].fix
    assert found["probe"].message == "node 2 (10.0.0.12) did not answer: container is not running"


def test_a_node_that_cannot_write_the_directory_is_an_error():
    looks = {0: look(), 1: look(write_error="Read-only file system"), 2: look()}
    [f] = diagnose(EPS, looks, {0: [0, 2], 2: [0, 2]}, "/ckpt")
    assert f.level == "error" and "node 1 (10.0.0.11) cannot write /ckpt" in f.message


def test_probe_phases_write_see_and_clean_a_marker(tmp_path):
    args = {"dir": str(tmp_path / "c"), "nonce": "n1", "index": 3}
    out = run("look", {**args, "targets": []})
    assert out["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert out["versions"]["ray"] and "write_error" not in out
    assert run("seen", args) == {"seen": [3]}
    run("clean", args)
    assert list((tmp_path / "c").iterdir()) == []


def test_probe_runs_as_a_process_and_reports_a_refused_port():
    targets = [{"node": 0, "address": "127.0.0.1", "port": 9, "name": "discard"}]
    out = subprocess.run([sys.executable, "-m", "rlsim.doctor.probe"],
                         input=json.dumps({"phase": "look", "args": {"targets": targets}}) + "\n",
                         capture_output=True, text=True, check=True)
    [r] = json.loads(out.stdout)["reach"]
    assert r["ok"] is False and r["error"]


class _Nodes(StartedCluster):
    """Just enough of a started cluster for its probes: node 1's probe cannot start."""

    _st = SimpleNamespace(spec=SimpleNamespace(python={}))

    def __init__(self, tmp_path):
        self.started = tmp_path / "started"
        self._endpoints = [{"index": i, "address": "127.0.0.1", "ports": {}} for i in (0, 1)]

    def endpoints(self):
        return self._endpoints

    def node_command(self, index, cmd):
        if index == 1:
            return ["sh", "-c", "echo no such interpreter >&2; exit 3"]
        return ["sh", "-c", f'echo {index} >> "{self.started}"; exec "$@"', "sh", *cmd]


def test_every_phase_of_a_node_asks_one_probe_and_a_node_that_cannot_answer_is_a_finding(
        tmp_path):
    from rlsim import doctor

    nodes = _Nodes(tmp_path)
    report = doctor.examine(nodes, str(tmp_path / "ckpt"))
    assert nodes.started.read_text().split() == ["0"]  # look, seen and clean: one process
    assert report.seen == {0: [0]} and list((tmp_path / "ckpt").iterdir()) == []  # cleaned
    [f] = [f for f in report.findings if f.check == "probe"]
    assert "node 1" in f.message and "probe exited 3: no such interpreter" in f.message


def test_a_node_that_could_not_list_the_directory_is_a_probe_error_not_node_local_storage():
    looks = {i: look() for i in range(3)}
    [f] = diagnose(EPS, looks, {0: [0, 1, 2], 1: [0, 1, 2]}, "/ckpt")
    assert (f.level, f.check) == ("error", "probe") and "node 2 (10.0.0.12)" in f.message


def test_the_probe_finds_the_nccl_wheel_by_its_folder(tmp_path, monkeypatch):
    """NCCL's wheel (nvidia-nccl-cu*) is found by its dist-info folder and its version read
    from it, without reading every installed distribution's metadata."""
    from rlsim.doctor.probe import cuda_and_nccl

    assert cuda_and_nccl()["nccl"] is None  # none beside this CPU build
    info = tmp_path / "nvidia_nccl_cu12-2.21.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\n"
                                   "Version: 2.21.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cuda_and_nccl()["nccl"] == "2.21.5"
