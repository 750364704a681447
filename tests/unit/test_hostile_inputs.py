"""Twenty hostile inputs of classes the audits had not listed, each kept with its outcome: refused
with exit 2 (or the surface's typed error) naming the field and the fix, or taken as the contract
says. No cluster starts: faults by hand are refused before anything is done."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.host import state
from rlsim.host.spec import ClusterSpec
from rlsim.host.state import ClusterState
from rlsim.scenario.loader import ScenarioError, load
from trainer.config import PRESETS, load_config
from trainer.errors import ConfigError

ROOT = Path(__file__).parents[2]
GRPO = PRESETS / "grpo_tiny.yaml"
SCENARIO = f"""name: s
cluster: {{nodes: 3, gpus_per_node: 2}}
trainer: {{config: {GRPO}}}
expect: [{{completes: {{}}}}]
"""


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, " ".join(result.output.split())


# -- scenario files ------------------------------------------------------------------------------
def test_01_two_scenarios_of_one_name_in_a_run_are_refused(tmp_path):
    """Their report folders would be one: the second would move the first's results away."""
    for n in ("a", "b"):
        (tmp_path / f"{n}.yaml").write_text(SCENARIO)
    code, out = run("run", str(tmp_path), "--dry-run")
    assert code == 2 and "two scenarios are named 's'" in out, out


def test_02_a_utf8_byte_order_mark_and_crlf_lines_read_as_text(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + SCENARIO.replace("\n", "\r\n").encode())
    assert load(path).name == "s"


def test_03_tabs_for_indentation_name_the_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + "faults:\n\t- at: {step: 2}\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:6: not valid YAML"):
        load(path)


def test_04_a_trainer_config_that_is_a_fifo_is_named_as_one(tmp_path):
    os.mkfifo(tmp_path / "config.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace(str(GRPO), str(tmp_path / "config.yaml")))
    with pytest.raises(ScenarioError, match="a FIFO"):
        load(path)


def test_05_a_symlink_loop_in_a_scenario_folder_ends(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "loop").symlink_to(tmp_path / "sub")
    (tmp_path / "sub" / "s.yaml").write_text(SCENARIO)
    code, out = run("validate", str(tmp_path))
    assert code == 0 and out.count("ok ") == 1, out


def test_06_at_step_zero_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("expect:", "faults: [{at: {step: 0}, kill_node: {node: 1}}]"
                                     "\nexpect:"))
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.at\.step: Input should be greater"):
        load(path)


def test_07_an_override_of_a_section_with_a_scalar_names_the_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace(f"{{config: {GRPO}}}",
                                     f"{{config: {GRPO}, overrides: {{placement: 4}}}}"))
    with pytest.raises(ScenarioError, match="trainer.overrides.placement"):
        load(path)


# -- the trainer's own config --------------------------------------------------------------------
def test_08_a_key_given_twice_in_a_trainer_config_is_refused(tmp_path):
    """YAML keeps the last of two equal keys without a word: the first value silently lost."""
    path = tmp_path / "c.yaml"
    path.write_text("total_steps: 10\nseed: 1\ntotal_steps: 20\n")
    with pytest.raises(ConfigError, match="total_steps.*twice"):
        load_config(path)


def test_09_an_alias_bomb_in_a_trainer_config_is_refused_fast(tmp_path):
    path = tmp_path / "c.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1},"
              f" *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="more than .* values once its YAML aliases"):
        load_config(path)


# -- rlsim plan ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster", ["2x", "x8", "0x8", "-1x8", "2x8x3", "", "2x8,"])
def test_10_a_cluster_shape_that_is_not_NxG_is_refused(cluster):
    code, out = run("plan", "verl", "--cluster", cluster, "--", "python3", "-m",
                    "verl.trainer.main_ppo", "trainer.nnodes=1", "trainer.n_gpus_per_node=8")
    assert code == 2 and "--cluster" in out, (cluster, out)


def test_11_a_roll_config_with_an_alias_bomb_is_judged_without_expanding_it(tmp_path):
    """The aliases are never walked (no role reads them): judged at once, not expanded."""
    path = tmp_path / "roll.yaml"
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1},"
              f" *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    lines += ["actor_train: {device_mapping: '[0, 1]'}"]
    path.write_text("\n".join(lines) + "\n")
    code, out = run("plan", "roll", "--cluster", "1x8", str(path))
    assert code == 0 and "actor_train: GPUs 0-1 FITS" in out, out


# -- faults by hand, refused before anything is done ---------------------------------------------
@pytest.fixture
def registered(tmp_path, monkeypatch):
    """A cluster in the registry (this process its owner), none of its nodes running: a fault
    by hand must be refused from its arguments alone."""
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    st = state.reserve(ClusterSpec(name="c", nodes=3), "local", detached=False)
    return st


@pytest.mark.parametrize("args,said", [
    (["kill-node", "7"], "node 7 is outside the cluster (nodes 0-2)"),                       # 12
    (["partition", "0,1,2"], "that is every node"),                                          # 13
    (["block-port", "1", "gcs", "--from", "1"], "node 1 is the node whose port is blocked"),  # 14
    (["pause-node", "1", "--cpu", "3"], "pause-node has no option --cpu"),                   # 15
    (["kill-node", "x"], "node: 'x' is not a node; give a node index (1) or random"),         # 16
    (["block-port", "1", "workers:9"], "'workers:9' names node 9, outside the cluster"),     # 17
])
def test_12_to_17_faults_by_hand_refused_from_their_arguments(registered, args, said):
    code, out = run("fault", "c", *args)
    assert code == 2 and said in out, (args, out)
    assert not (registered.root / "faults.json").exists()


# -- records and reports -----------------------------------------------------------------------
def test_18_a_scenario_name_with_a_nul_in_a_summary_writes_no_broken_xml(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps([
        {"scenario": "a\x00b", "ok": True, "seconds": 1.0, "checks": []}]))
    code, out = run("report", str(tmp_path))
    assert code == 2 and "summary.json: 0.scenario" in out, out
    assert not (tmp_path / "junit.xml").exists()


def test_19_a_figure_that_is_not_finite_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text('[{"scenario": "a", "ok": true, "seconds": 1.0, '
                                           '"checks": [{"check": "restarts", "ok": true, '
                                           '"message": "m", "value": NaN}]}]')
    code, out = run("report", str(tmp_path))
    assert code == 2 and "a figure is a finite number" in out, out


def test_20_a_report_folder_that_is_a_file_is_named_as_such(tmp_path):
    (tmp_path / "r").write_text("")
    code, out = run("run", str(ROOT / "scenarios" / "head_lost.yaml"), "--report",
                    str(tmp_path / "r"), "--dry-run")
    assert code in (0, 2)  # a dry run writes nothing
    code, out = run("report", str(tmp_path / "r"))
    assert code == 2 and "not a folder" in out, out


def test_state_entries_stay_this_users(registered):
    assert isinstance(state.load_entry("c"), ClusterState)
