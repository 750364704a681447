"""Bad input to the top-level ``rlsim`` commands: exit 2, one line naming the option or name and
the fix, no traceback, nothing written outside the home. One row per case, run through the real
entry point (``rlsim.commands.main``) in this process with RLSIM_HOME in a temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlsim import commands as cli
from rlsim.host import state
from rlsim.host.spec import ClusterSpec

OTHER_UID = 65534


def corrupt(home: Path, text: str = "{not json") -> None:
    (home / "clusters").mkdir(parents=True, mode=0o700, exist_ok=True)
    (home / "clusters" / "broken.json").write_text(text)


def foreign_home(home: Path) -> None:
    home.mkdir()
    os.chown(home, OTHER_UID, -1)


def abandoned(home: Path) -> None:
    st = state.reserve(ClusterSpec(name="gone"), "local", detached=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    st.owner_pid = int(dead.stdout)
    state.save(st)


CASES = [
    # (argv, plant, exit, words in the output)
    (["cluster", "--nodes", "0"], None, 2, ["--nodes 0", "greater than or equal to 1", "fix"]),
    (["cluster", "--nodes", "999"], None, 2, ["--nodes 999", "less than or equal to 64"]),
    (["cluster", "--fake-gpus", "-1"], None, 2, ["--fake-gpus -1", "greater than or equal to 0"]),
    (["cluster", "--name", "../../etc"], None, 2, ["--name ../../etc", "cluster name"]),
    (["cluster", "--backend", "k8s"], None, 2, ["--backend k8s", "fix"]),
    (["cluster", "--memory-gb", "0"], None, 2, ["--memory-gb 0", "greater than 0"]),
    (["cluster", "--accelerator", "H100;rm"], None, 2, ["--accelerator", "e.g. H100"]),
    (["cluster", "-g", "0", "--accelerator", "H100"], None, 2, ["needs GPUs", "drop the"]),
    (["cluster", "--resources", "{x"], None, 2, ["--resources {x: not JSON", "fix"]),
    (["cluster", "--resources", '{"a": true}'], None, 2, ["names and numbers"]),
    (["cluster", "--resources", '{"GPU": 2}'], None, 2, ["'GPU' is set by Ray", "custom_GPU"]),
    (["cluster", "--resources", '{"accelerator_type:H100": 1}'], None, 2, ["set by Ray"]),
    (["cluster", "--label", "zone"], None, 2, ["--label zone", "KEY=VALUE"]),
    (["cluster", "--label", "ray.io/accelerator-type=H100"], None, 2, ["Ray's and rlsim's own"]),
    (["cluster", "--label", "a b=c"], None, 2, ["not a label key"]),
    (["cluster", "--like", "p6"], None, 2, ["--like p6", "no node type", "p5.48xlarge"]),
    (["fault", "nope", "heal"], None, 2, ["no rlsim cluster named 'nope'", "rlsim status"]),
    (["fault", "Bad Name", "heal"], None, 2, ["cluster name", "fix"]),
    (["fault", "nope", "kill-node", "1", "--for", "5"], None, 2, ["no rlsim cluster"]),
    (["cluster", "--node", "x"], None, 2, ["--node x", "I:KEY=VALUE"]),
    (["cluster", "--node", "1:gpu=2"], None, 2, ["no key 'gpu'", "gpus"]),
    (["cluster", "--node", "1:gpus=x"], None, 2, ["--node 1:gpus=x", "valid integer"]),
    (["cluster", "--node", "5:gpus=1"], None, 2, ["node 5", "nodes 0..1", "more nodes"]),
    (["cluster", "--node", "1:gpus=0,accelerator=A100"], None, 2, ["node 1", "needs GPUs"]),
    (["cluster", "-n", "32", "--node", "3:gpus=16"], None, 2, ["node 3", "20 worker ports"]),
    (["cluster", "--cuda-devices", "0 1"], None, 2, ["--cuda-devices 0 1", "CUDA_VISIBLE_DEVICES"]),
    (["cluster", "--node", "1:cuda_devices=0,x"], None, 2, ["1:cuda_devices=0,x",
                                                            "CUDA_VISIBLE_DEVICES"]),
    (["cluster", "--node", "1:gpus=0,cuda_devices=0"], None, 2, ["node 1", "needs GPUs"]),
    (["demo", "--nodes", "0"], None, 2, ["--nodes 0", "greater than or equal to 1"]),
    (["status", "../../etc/passwd"], None, 2, ["cluster name '../../etc/passwd'", "fix"]),
    (["status", "[/oops]"], None, 2, ["cluster name '[/oops]'"]),
    (["down", "../x"], None, 2, ["cluster name '../x'"]),
    (["status", "nosuch"], None, 2, ["no rlsim cluster named 'nosuch'", "rlsim status"]),
    (["down", "nosuch"], None, 2, ["no rlsim cluster named 'nosuch'", "rlsim status"]),
    (["doctor", "nosuch"], None, 2, ["no rlsim cluster named 'nosuch'"]),
    (["status"], corrupt, 0, ["broken: corrupt state file", "broken.json", "rlsim down broken"]),
    (["status", "broken"], corrupt, 0, ["corrupt state file", "rlsim down broken"]),
    (["down", "broken"], corrupt, 0, ["removed corrupt state file"]),
    (["status"], foreign_home, 2, [f"belongs to uid {OTHER_UID}", "RLSIM_HOME"]),
    (["down", "--all"], foreign_home, 2, [f"belongs to uid {OTHER_UID}"]),
    (["validate", "no/such/scenario.yaml"], abandoned, 2, ["scenario.yaml"]),
    (["status"], abandoned, 0, ["gone: abandoned", "rlsim down gone"]),
    # a name or a value with a newline or an escape sequence: refused on one line, escaped
    (["cluster", "--name", "a\nb"], None, 2, ["--name a\\nb: cluster name 'a\\nb'", "fix"]),
    (["cluster", "--name", "a\x1b[31mb"], None, 2, ["--name a\\x1b[31mb", "fix"]),
    (["launch", "slurm", "--nodes", "2", "--gpus-per-node", "1", "--out", "x", "--report-dir",
      "/r\n\x1b[2J"], None, 2, ["--report-dir /r\\n\\x1b[2J", "give it without"]),
    # a shared folder that is the system's: mounted over it in every pod, or written among it
    (["launch", "kuberay-substrate", "--nodes", "2", "--image", "i", "--out", "x",
      "--shared-dir", "/"], None, 2, ["--shared-dir /: '/' is the root folder", "fix"]),
    (["launch", "kuberay-substrate", "--nodes", "2", "--image", "i", "--out", "x",
      "--shared-dir", "/proc"], None, 2, ["--shared-dir /proc", "a system folder", "fix"]),
    (["launch", "kuberay-substrate", "--nodes", "2", "--image", "i", "--out", "x",
      "--shared-dir", "/../../etc"], None, 2, ["(as /etc) is a system folder", "fix"]),
    (["launch", "kuberay-substrate", "--nodes", "2", "--image", "i", "--out", "x",
      "--shared-dir", "/usr/lib"], None, 2, ["inside /usr, a system folder"]),
    (["launch", "slurm", "--nodes", "2", "--gpus-per-node", "1", "--out", "x", "--report-dir",
      "//etc/"], None, 2, ["--report-dir //etc/: '//etc/' (as /etc) is a system folder"]),
]


def tree(path: Path) -> set[str]:
    return {str(p) for p in path.rglob("*")}


@pytest.mark.parametrize("argv,plant,code,words", CASES,
                         ids=[" ".join(c[0]) + (f" ({c[1].__name__})" if c[1] else "")
                              for c in CASES])
def test_bad_input_exits_with_one_clear_line(tmp_path, monkeypatch, capsys, argv, plant, code,
                                             words):
    home = tmp_path / "home"
    monkeypatch.setenv("RLSIM_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    if plant:
        plant(home)
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert e.value.code == code, text
    assert "Traceback" not in text
    for word in words:
        assert word in text, text
    if code == 2:
        assert len(text.strip().splitlines()) == 1, text
    created = {p for p in tree(tmp_path) - before if not p.startswith(str(home))}
    assert not created


def test_down_removes_a_corrupt_state_file_and_status_no_longer_shows_it(tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path))
    corrupt(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["down", "broken"])
    assert not (tmp_path / "clusters" / "broken.json").exists()
    with pytest.raises(SystemExit) as e:
        cli.main(["status"])
    assert e.value.code == 0 and "no rlsim clusters are running" in capsys.readouterr().out


def test_validate_does_not_reap(tmp_path, monkeypatch):
    """Only commands that start or stop clusters reap abandoned ones."""
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path))
    abandoned(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["validate", str(tmp_path / "none.yaml")])
    assert state.load("gone") is not None


def test_every_command_documents_its_exit_codes():
    for command in cli.app.registered_commands:
        doc = command.callback.__doc__
        assert "Exit 0" in doc or "exit 0" in doc, command.callback.__name__


@pytest.mark.parametrize("field,value,needle", [
    ("ray_version", {1: '2.9"; import os; "'}, "node 1: ray_version '2.9\"; import os; \"' is not "
     "a PEP 440 version"),
    ("ray_version", {0: "2.9\n"}, "node 0: ray_version '2.9\\n' has surrounding whitespace"),
    ("ray_version", {5: "2.9.0"}, "ray_version names node 5; the cluster has nodes 0..3"),
    ("python", {2: "python3"}, "node 2: python 'python3' is not an absolute path"),
    ("python", {1: "/no/such/python"}, "node 1: python '/no/such/python' is not an executable"),
    ("python", {1: "{tmp}/plain.txt"}, "is not an executable file"),
])
def test_spec_refuses_versions_and_interpreters_that_would_become_code(tmp_path, field, value,
                                                                       needle):
    (tmp_path / "plain.txt").write_text("not a program")
    value = {k: v.replace("{tmp}", str(tmp_path)) for k, v in value.items()}
    with pytest.raises(ValidationError) as e:
        ClusterSpec(nodes=4, **{field: value})
    assert needle in str(e.value)


def test_spec_takes_plain_versions_and_real_interpreters():
    spec = ClusterSpec(nodes=3, ray_version={2: "2.59.0", 1: "3.0.0rc1"},
                       python={2: sys.executable})
    assert spec.ray_version[2] == "2.59.0"
