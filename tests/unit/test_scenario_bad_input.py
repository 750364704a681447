"""Bad scenario input, one row per case: ``rlsim validate FILE`` and ``rlsim run FILE`` exit 2 with
one message naming the file and line (or the field) and the fix; no traceback, nothing written,
no cluster started. Run through the real entry point (``rlsim.commands.main``) in this process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlsim import commands as cli

pytest_plugins = ["pytester"]
TINY = "grpo_tiny"
ROOT = Path(__file__).parents[2]


def scenario(faults: str = "", trainer: str = f"{{config: {TINY}}}", cluster: str = "",
             expect: str = "[{completes: {}}]", extra: str = "") -> str:
    cluster = f"cluster: {cluster}\n" if cluster else ""
    faults = f"faults:\n{faults}" if faults else ""
    return f"name: s\n{extra}{cluster}trainer: {trainer}\n{faults}expect: {expect}\n"


def fault(body: str, at: str = "{step: 3}") -> str:
    return f"  - at: {at}\n    {body}\n"


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True))


def fifo(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "pipe.yaml")
    return tmp_path / "pipe.yaml"


def empty_dir(tmp_path: Path) -> Path:
    (tmp_path / "none").mkdir()
    return tmp_path / "none"


def dir_without_scenarios(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# not a scenario\n")
    return tmp_path / "docs"


CASES = [
    # (id, file content or a function making the path, words in the one message)
    ("binary", bytes(range(256)) * 4, [":2: not UTF-8 text (byte 128)", "binary file"]),
    ("latin-1", "name: s\ndescription: caf\xe9\n".encode("latin-1"), [":2: not UTF-8"]),
    ("nul byte", "name: s\x00\n", [":1: not valid YAML: character #x0000 at offset 7",
                                   "remove it"]),
    ("markup key", scenario(extra='"[/oops]": 1\n'), [":2: [/oops]: unknown key"]),
    ("deep nesting", "expect: " + "[" * 100_000 + "]" * 100_000,
     [":1: nested more than 64 levels deep"]),
    ("alias bomb", BOMB, [":1: anchor &a is not allowed", "write each value out"]),
    ("alias", scenario(extra="tags: &t [x]\ndescription: *t\n"), [":2: anchor &t"]),
    ("5 MB", scenario(extra="tags:\n" + "  - x\n" * 900_000),
     [":1: larger than 1024 KiB", "the limit for a scenario file"]),
    ("empty file", "", [":1: the file is empty"]),
    ("two documents", scenario() + "---\nname: t\n", [":4: a second YAML document"]),
    ("duplicate key", scenario(extra="name: t\n"),
     [":2: <top level>: key 'name' appears twice (lines 1 and 2): keep one"]),
    ("duplicate nested key", scenario(cluster="{nodes: 3, nodes: 2}"),
     [":2: cluster: key 'nodes' appears twice (same line)"]),
    ("unhashable key", scenario(extra="? [a]\n: 1\n"), ["not valid YAML", "unhashable key"]),
    ("impossible date", scenario(extra="description: 2020-02-30\n"), ["not valid YAML", "day"]),
    ("for_s .inf", scenario(fault("kill_node: {node: 1}\n    for_s: .inf")),
     [":6: faults[0].for_s: .inf is not a finite number"]),
    ("seconds .nan", scenario(fault("kill_node: {node: 1}", at="{seconds: .nan}")),
     [":4: faults[0].at.seconds: .nan is not a finite number"]),
    ("step 1.0e+30", scenario(fault("kill_node: {node: 1}", at="{step: 1.0e+30}")),
     [":4: faults[0].at.step: 1.0e+30 is too large"]),
    ("for_s '1e30'", scenario(fault("kill_node: {node: 1}\n    for_s: '1e30'")),
     [":6: faults[0].for_s: Input should be a valid number"]),
    ("gb absurd", scenario(fault("gpu_oom: {node: 1, gb: 1.0e+9}")),
     ["faults[0].gpu_oom.gb: Input should be less than or equal to 4096"]),
    ("unknown override key", scenario(trainer=f"{{config: {TINY}, overrides: {{total_stepz: 5}}}}"),
     [":2: trainer.overrides.total_stepz: the trainer refuses its config", "unknown key"]),
    ("override of the wrong type",
     scenario(trainer=f"{{config: {TINY}, overrides: {{actor: {{lr: fast}}}}}}"),
     ["trainer.overrides.actor", "actor.lr", "valid number"]),
    ("data path typo",
     scenario(trainer=f"{{config: {TINY}, overrides: {{data.path: fixtures/data/nope.jsonl}}}}"),
     ["trainer.overrides.data.path", "no such prompt file", "Fix"]),
    ("model shape", scenario(trainer=f"{{config: {TINY}, overrides: {{model.n_head: 3}}}}"),
     ["trainer.overrides.model.n_head", "does not divide model.n_embd=64", "Fix"]),
    ("resume missing",
     scenario(trainer=f"{{config: {TINY}, overrides: {{resume: /nonexistent/global_step_3}}}}"),
     ["trainer.overrides.resume", "no such checkpoint directory"]),
    ("override key not a key",
     scenario(trainer=f"{{config: {TINY}, overrides: {{'total_steps=3': 1}}}}"),
     [":2: trainer.overrides: override key 'total_steps=3' is not a trainer config key"]),
    ("data.path a device",
     scenario(trainer=f"{{config: {TINY}, overrides: {{data.path: /dev/zero}}}}"),
     ["trainer.overrides.data.path", "data.path='/dev/zero' is not a regular file"]),
    ("expect event never logged", scenario(expect="[{event: {type: ckpt_saved, max: 0}}]"),
     [":3: expect[0].event.type: the trainer never logs an event 'ckpt_saved'"]),
    ("at.event never logged", scenario(fault("kill_node: {node: 1}", at="{event: ckpt_saved}")),
     [":4: faults[0].at.event: the trainer never logs an event 'ckpt_saved'", "checkpoint_saved"]),
    ("step beyond total_steps",
     scenario(fault("kill_node: {node: 1}", at="{step: 12}"),
              trainer=f"{{config: {TINY}, overrides: {{total_steps: 10}}}}"),
     [":4: faults[0].at.step: step 12 is never reached", "total_steps=10"]),
    ("port name", scenario(fault("block_port: {node: 1, port: gcs_port}")),
     ["faults[0].block_port.port", "unknown port name 'gcs_port'", "workers:<node>"]),
    ("port out of range", scenario(fault("block_port: {node: 1, port: 70000}")),
     ["port 70000 is out of range: a TCP port is 1-65535"]),
    ("port range reversed", scenario(fault("block_port: {node: 1, port: [9000, 8000]}")),
     ["port range [9000, 8000]: the low end comes first"]),
    ("port of a node outside", scenario(fault("block_port: {node: 1, port: 'workers:5'}")),
     ["faults[0].block_port.port: 'workers:5' names node 5, outside the cluster (nodes 0-1)"]),
    ("partition names a node twice", scenario(fault("partition: {groups: [[1], [1, 2]]}")),
     ["faults[0].partition.groups", "node 1 is named twice"]),
    ("node random on one node",
     scenario(fault("kill_node: {node: random}"), cluster="{nodes: 1}"),
     [":6: faults[0].kill_node.node: random picks a node other than the head", "add nodes"]),
    ("node beyond the cluster", scenario(fault("kill_node: {node: 7}")),
     [":5: faults[0].kill_node.node: node 7 is outside the cluster (nodes 0-1)"]),
    ("trainer.config is a scenario",
     scenario(trainer=f"{{config: {ROOT}/scenarios/head_lost.yaml}}"),
     [":2: trainer.config: the trainer refuses its config", "unknown key"]),
    ("trainer.config is a directory", scenario(trainer="{config: .}"),
     ["is a folder, not a trainer config file"]),
    ("fails pattern not a regex", scenario(expect="[{fails: {pattern: '('}}]"),
     ["expect[0].fails.pattern: not a valid regular expression"]),
    ("ray_version as code", scenario(cluster="{ray_version: {1: '2.9\"; import os; \"'}}"),
     [":2: cluster: node 1: ray_version", "is not a PEP 440 version"]),
    ("python not absolute", scenario(cluster="{python: {1: python3}}"),
     [":2: cluster: node 1: python 'python3' is not an absolute path"]),
    ("unknown adapter", scenario(trainer="{adapter: verlx, command: [x]}"),
     [":2: trainer: adapter: unknown adapter 'verlx'; known: events, nemo_rl, openrlhf, "
      "plain, ray_train, rlsim, verl"]),
    ("command that does not exist",
     scenario(trainer="{adapter: events, command: [bin/no_such_trainer]}"),
     [":2: trainer.command: 'bin/no_such_trainer' is not an executable here"]),
    ("script that does not exist",
     scenario(trainer="{adapter: events, command: ['{python}', nope/train.py]}"),
     [":2: trainer.command: no such script 'nope/train.py'"]),
    ("placeholder that does not exist",
     scenario(trainer="{adapter: events, command: ['{python}', '{rundir}']}"),
     [":2: trainer: command: '{rundir}': unknown placeholder {rundir}", "{run_dir}"]),
    ("check the adapter cannot observe",
     scenario(trainer="{adapter: events, command: [/bin/true]}",
              expect="[{completes: true}, {matches_baseline: true}]"),
     [":3: expect[1]: check matches_baseline needs metrics.jsonl, which adapter events cannot"]),
    ("event the adapter never sees",
     scenario(trainer="{adapter: events, command: [/bin/true]}",
              expect="[{event: generation_done}]"),
     [":3: expect[0].event.type: the trainer never logs an event 'generation_done' (adapter "
      "events)"]),
    ("command with the reference trainer",
     scenario(trainer=f"{{config: {TINY}, command: [/bin/true]}}"),
     [":2: trainer: command: the reference trainer is started from its config"]),
    ("kill_role with no class for a trainer's roles",
     scenario(trainer="{adapter: events, command: [/bin/true]}",
              faults=fault("kill_role: {role: actor}")),
     ["faults[0].kill_role.role: adapter events logs no worker table",
      "add trainer.roles: {actor: <class name pattern>}"]),
    ("role class pattern not a regex",
     scenario(trainer="{adapter: events, command: [/bin/true], roles: {actor: '('}}"),
     [":2: trainer.roles: roles.actor: not a valid regular expression"]),
    ("roles for the reference trainer",
     scenario(trainer=f"{{config: {TINY}, roles: {{actor: Worker}}}}"),
     [":2: trainer: roles: the reference trainer logs where each rank runs"]),
    ("fifo", fifo, [":1: a FIFO (named pipe), not a regular file"]),
    ("missing file", lambda tmp: tmp / "nope.yaml", [":1: no such file"]),
    ("empty directory", empty_dir, ["a directory with no scenario files"]),
    ("directory without scenarios", dir_without_scenarios, ["a directory with no scenario files"]),
]


def make(tmp_path: Path, content) -> Path:
    if callable(content):
        return content(tmp_path)
    path = tmp_path / "s.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def tree(path: Path) -> set[str]:
    return {str(p) for p in path.rglob("*")}


def refusal(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    out = capsys.readouterr()
    return e.value.code, out.out + out.err


@pytest.mark.parametrize("content,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_scenario_exits_2_with_one_message(tmp_path, monkeypatch, capsys, content, words):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.chdir(tmp_path)
    path = make(tmp_path, content)
    before = tree(tmp_path)
    code, text = refusal(["validate", str(path)], capsys)
    assert code == 2, text
    assert "Traceback" not in text
    assert text.startswith(str(path)), text
    for word in words:
        assert word in text, text
    assert len(text.strip().splitlines()) == 1, text
    # run validates everything before it starts a cluster or writes its report
    code, text_run = refusal(["run", str(path), "--report", str(tmp_path / "report")], capsys)
    assert (code, text_run) == (2, text)
    assert tree(tmp_path) == before


def test_every_shipped_scenario_still_validates(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", str(Path(__file__).parents[2] / "scenarios")])
    out = capsys.readouterr().out
    assert e.value.code == 0, out
    assert out.count("\nok  ") + out.startswith("ok  ") >= 20


def test_a_refusal_the_scenario_expects_is_not_an_error(tmp_path):
    """A scenario whose story is the trainer refusing its config (a ``fails`` check that matches
    the refusal) validates; the same config without that check does not."""
    from rlsim.scenario.loader import ScenarioError, load

    body = scenario(trainer=f"{{config: {TINY}, overrides: {{model.n_head: 3}}}}",
                    expect="[{fails: {pattern: 'model.n_head=3 does not divide'}}]")
    path = make(tmp_path, body)
    assert load(path).name == "s"
    path.write_text(body.replace("does not divide", "is something else"))
    with pytest.raises(ScenarioError, match="model.n_head=3 does not divide"):
        load(path)


def test_pytest_reports_bad_scenario_files_as_invalid_items(pytester):
    """Collected by the plugin, each bad file is one failing item in the loader's words: no
    collection error, no traceback, no cluster (nothing valid to run)."""
    d = pytester.mkdir("scenarios")
    (d / "binary.yaml").write_bytes(bytes(range(256)))
    (d / "bomb.yaml").write_text(BOMB)
    (d / "markup.yaml").write_text(scenario(extra='"[/oops]": 1\n'))
    result = pytester.runpytest("scenarios", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "invalid scenario:" in out and "Traceback" not in out
    for needle in ("binary.yaml:2: not UTF-8 text", "bomb.yaml:1: anchor &a is not allowed",
                   "markup.yaml:2: [/oops]: unknown key"):
        assert needle in out, out


@pytest.mark.parametrize("argv,words", [
    (["report", "{tmp}/[/oops]"], ["[/oops]: no such folder"]),
    (["run", "scenarios/head_lost.yaml", "--backend", "[/x]", "--report", "{tmp}/r"],
     ["--backend [/x]: unknown; fix: give one of local"]),
])
def test_markup_in_arguments_is_printed_as_text(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(Path(__file__).parents[2])
    (tmp_path / "[").mkdir()
    code, text = refusal([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 2 and "Traceback" not in text
    for word in words:
        assert word in text, text
    assert not (tmp_path / "r").exists()


def test_a_plain_on_key_is_the_word_and_a_yaml_boolean_key_is_named(tmp_path):
    """YAML 1.1 reads a plain `on`, `yes` or `off` as a boolean: as a key of a scenario it is
    the word (`cluster: {on: HOST:PORT}`), and an unknown one is named as the user wrote it."""
    from rlsim.scenario.loader import ScenarioError, load

    base = "name: k\ntrainer: {config: grpo_tiny}\nexpect: [{completes: {}}]\n"
    (tmp_path / "on.yaml").write_text(base + 'cluster: {nodes: 2, on: "10.9.0.1:6379"}\n')
    assert load(tmp_path / "on.yaml").cluster.on == "10.9.0.1:6379"
    (tmp_path / "yes.yaml").write_text(base + "yes: 1\n")
    with pytest.raises(ScenarioError, match=r"yes.yaml:4: yes: unknown key"):
        load(tmp_path / "yes.yaml")
    (tmp_path / "value.yaml").write_text(base + "cluster: {nodes: 2, dashboard: on}\n")
    with pytest.raises(ScenarioError, match="dashboard"):  # a value stays YAML's boolean
        load(tmp_path / "value.yaml")
