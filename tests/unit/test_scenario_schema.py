"""Scenario files as data: every shipped one validates; malformed ones say path:line: field."""

import re
from pathlib import Path

import pytest

from rlsim.scenario.loader import ScenarioError, discover, load
from rlsim.scenario.nemesis import Schedule
from rlsim.scenario.schema import FaultEntry

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("path", discover(ROOT / "scenarios"), ids=lambda p: p.stem)
def test_catalogue_validates(path):
    sc = load(path)
    assert sc.name == path.stem and sc.expect


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


BASE = "name: s\ntrainer: {config: grpo_tiny}\n"


@pytest.mark.parametrize("body,line,needle", [
    ("faults:\n  - at: {step: 3}\n    explode: {}\nexpect: [{completes: {}}]\n", 4,
     "faults[0]: unknown fault 'explode'"),
    ("faults:\n  - at: {step: 3}\n    kill_node: {node: 7}\nexpect: [{completes: {}}]\n", 5,
     "faults[0].kill_node.node: node 7 is outside the cluster (nodes 0-1)"),
    ("expect:\n  - completes: {}\n  - restarts: {min: x}\n", 5,
     "expect[1].restarts.min: Input should be a valid integer"),
    ("faults:\n  - at: {step: 3}\n    restart_node: {node: 0}\nexpect: [{completes: {}}]\n", 5,
     "faults[0].restart_node.node: node 0 is the head; restarting the head needs GCS fault "
     "tolerance (gcs_ft: redis"),
    ("faults:\n  - at: {}\n    kill_node: {node: 1}\nexpect: [{completes: {}}]\n", 4,
     "faults[0].at: say when"),
    ("clustr: {nodes: 2}\nexpect: [{completes: {}}]\n", 3, "clustr: unknown key"),
    ("cluster: {nodes: 2, python: {2: /usr/bin/python3}}\nexpect: [{completes: {}}]\n", 3,
     "cluster: python names node 2; the cluster has nodes 0..1"),
])
def test_malformed_files_name_line_and_field(tmp_path, body, line, needle):
    with pytest.raises(ScenarioError) as e:
        load(write(tmp_path, BASE + body))
    assert f"s.yaml:{line}: " in str(e.value) and needle in str(e.value), str(e.value)


SHORT_AND_LONG = [
    ("completes: true", "completes: {}"),
    ("restarts: 1", "restarts: {min: 1, max: 1}"),
    ("resumed_from_step: 5", "resumed_from_step: {step: 5}"),
    ("final_step: 20", "final_step: {step: 20}"),
    ("matches_baseline: true", "matches_baseline: {weights: true}"),
    ("no_leaks: true", "no_leaks: {}"),
    ("detected_within_s: 30", "detected_within_s: {seconds: 30}"),
    ("fails: 'OOM'", "fails: {pattern: 'OOM'}"),
    ("event: node_lost", "event: {type: node_lost}"),
]


@pytest.mark.parametrize("short,long", SHORT_AND_LONG, ids=[s for s, _ in SHORT_AND_LONG])
def test_scalar_shorthand_reads_as_the_long_form(tmp_path, short, long):
    base = BASE + "faults: [{at: {step: 3}, kill_node: {node: 1}}]\n"  # one to detect
    a = load(write(tmp_path, base + f"expect:\n  - {short}\n")).checks()
    b = load(write(tmp_path, base + f"expect:\n  - {long}\n")).checks()
    assert a == b and a[0][0] == short.split(":")[0]


@pytest.mark.parametrize("entry,needle", [
    ("restarts: true", "expect[1].restarts: write a whole number (`restarts: 1`)"),
    ("completes: false", "expect[1].completes: write `completes: true`"),
    ("final_step: 2.5", "expect[1].final_step: write a whole number"),
    ("resumed_from_step: -1", "expect[1].resumed_from_step.step: Input should be greater"),
    ("reward_improves: 0.2", "expect[1].reward_improves: write the mapping form"),
    ("detected_within_s: soon", "expect[1].detected_within_s: write a number of seconds"),
])
def test_a_wrong_scalar_names_line_check_and_form(tmp_path, entry, needle):
    with pytest.raises(ScenarioError) as e:
        load(write(tmp_path, BASE + f"expect:\n  - completes: true\n  - {entry}\n"))
    assert "s.yaml:5: " in str(e.value) and needle in str(e.value), str(e.value)


def test_bad_yaml_and_missing_trainer_config(tmp_path):
    with pytest.raises(ScenarioError, match=r"s.yaml:3: not valid YAML"):
        load(write(tmp_path, "name: s\nexpect: [unclosed\n"))
    text = "name: s\ntrainer: {config: fixtures/trainer/nope.yaml}\nexpect: [{completes: {}}]\n"
    with pytest.raises(ScenarioError, match=r"s.yaml:2: trainer.config: no such trainer config"):
        load(write(tmp_path, text))


def test_schedule_fires_by_step_event_and_seconds():
    entries = [FaultEntry.model_validate(e) for e in (
        {"at": {"step": 2}, "kill_node": {"node": 1}},
        {"at": {"event": "checkpoint_saved", "step": 5}, "corrupt_checkpoint": {}},
        {"at": {"seconds": 3}, "pause_node": {"node": 1}})]
    s = Schedule(entries)
    assert s.due([{"type": "step_end", "step": 1}], 0.5) == []
    assert [i for i, _ in s.due([{"type": "step_end", "step": 2}], 1.0)] == [0]
    assert s.due([{"type": "checkpoint_saved", "step": 4}], 1.0) == []
    assert [i for i, _ in s.due([{"type": "checkpoint_saved", "step": 5}], 3.1)] == [1, 2]
    assert s.due([], 99) == []  # each fires once


def test_a_node_interpreter_this_host_lacks_is_a_skip_not_a_bad_file(tmp_path):
    """The file is valid wherever it is read; the host that runs it skips it naming the part
    (a failure under RLSIM_STRICT)."""
    from rlsim.backends.base import Unsupported
    from rlsim.scenario.runner import make_cluster

    sc = load(write(tmp_path, BASE + "cluster: {nodes: 2, gpus_per_node: 1, "
                    "python: {1: /no/such/python3}}\nexpect: [{completes: {}}]\n"))
    assert sc.cluster.python == {1: "/no/such/python3"}
    with pytest.raises(Unsupported, match="needs container nodes"):
        make_cluster(sc, "local")
    with pytest.raises(ScenarioError, match="not an absolute path"):
        load(write(tmp_path, BASE + "cluster: {nodes: 2, python: {1: python3}}\n"
                   "expect: [{completes: {}}]\n"))


def test_a_framework_the_trainer_requires_missing_here_is_a_skip_saying_how(tmp_path):
    from rlsim.backends.base import Unsupported
    from rlsim.scenario.runnable import check_runnable

    sc = load(write(tmp_path, "name: s\ntrainer:\n  adapter: events\n  command: [\"{python}\", "
                    "\"-c\", \"pass\"]\n  requires: {no_such_framework_x: \"pip install x\"}\n"
                    "expect: [{completes: {}}]\n"))
    with pytest.raises(Unsupported, match=r"no_such_framework_x is not installed.*pip install x"):
        check_runnable(sc, "local")


@pytest.mark.parametrize("trainer,needle", [
    ("config: grpo_tiny\n  prepare: [\"{python}\", \"make.py\"]", "drop command/prepare"),
    ("adapter: events\n  command: [\"{python}\", \"t.py\"]\n  prepare: [\"{python}\", \"{out}\"]",
     "prepare: '{out}': unknown placeholder"),
    ("adapter: events\n  command: [\"{python}\", \"t.py\"]\n  prepare: [\"{python}\"]",
     "prepare: [\"{python}\"] alone")])
def test_prepare_is_checked_like_the_command(tmp_path, trainer, needle):
    with pytest.raises(ScenarioError, match=re.escape(needle)):
        load(write(tmp_path, f"name: s\ntrainer:\n  {trainer}\nexpect: [{{completes: {{}}}}]\n"))


def test_a_folder_is_searched_for_scenarios_less_hidden_folders(tmp_path):
    (tmp_path / "a.yaml").write_text(BASE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text(BASE)
    hydra = tmp_path / "outputs" / "2026-11-25" / "13-12-14" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text("trainer: {nnodes: 2}\n")
    assert discover(tmp_path) == [tmp_path / "a.yaml", tmp_path / "sub" / "b.yaml"]


@pytest.mark.parametrize("fault", [
    "degrade_link: {groups: [[\"actor:1\"]], delay_ms: 50}",
    "disk_full: {size_mb: 64}",
    "gpu_lost: {node: 1, gpu: 0}",
    "gpu_oom: {node: 1, gb: 80}",
    "host_oom: {node: 1}",
    "kill_role: {role: actor, rank: 1}",
    "partition: {groups: [[\"actor:1\"]]}",
    "pause_node: {node: 1}\n    for_s: 3",
    "slow_storage: {write_mbps: 1}",
])
def test_a_substrate_scenario_is_checked_against_the_substrate(tmp_path, fault):
    """`cluster: {on: ...}`: the faults are checked against the substrate's cluster, not the
    backend named (whose nodes would be on this machine only); every catalogue fault is built
    across machines."""
    from rlsim.scenario.runnable import check_runnable

    sc = load(write(tmp_path, "name: s\ncluster: {nodes: 2, gpus_per_node: 1, on: "
                    "\"10.0.0.1:6379\"}\ntrainer: {config: grpo_tiny}\nfaults:\n"
                    f"  - at: {{step: 2}}\n    {fault}\nexpect: [{{completes: true}}]\n"))
    assert check_runnable(sc, "local").__name__ == "SubstrateCluster"


def test_a_substrate_scenario_is_refused_what_a_substrate_cannot_run(tmp_path):
    """A disk per node needs container nodes: refused before anything starts, with the field
    and the fix for a substrate (not another backend: its nodes are processes)."""
    from rlsim.backends.base import Unsupported
    from rlsim.scenario.runnable import check_runnable

    sc = load(write(tmp_path, "name: s\ncluster: {nodes: 2, gpus_per_node: 1, checkpoint_storage: "
                    "node_local, on: \"10.0.0.1:6379\"}\ntrainer: {config: grpo_tiny}\n"
                    "expect: [{completes: true}]\n"))
    with pytest.raises(Unsupported, match=r"cluster.checkpoint_storage .*needs container nodes: "
                                          r"a substrate's .*fix: drop cluster.on"):
        check_runnable(sc, "local")


def test_a_missing_capability_is_said_in_plain_words():
    """What a fault needs comes from the capability's docstring: one line, no markup."""
    from rlsim.backends import base
    from rlsim.faults.base import _plain

    assert _plain(base.ShapesLinks.__doc__) == ("Delay and lose the packets between groups of "
                                                "nodes (a degraded link; see rlsim.host.links).")
