"""The pytest plugin with pytester: scenarios collected from YAML, selected by tag, failing in
their own words, timing as JUnit properties, invalid files reported as path:line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import PRESETS

pytest_plugins = ["pytester"]
ROOT = Path(__file__).parents[2]
CONFIG = PRESETS / "ppo_tiny.yaml"

WRONG = f"""
name: wrong_expectation
tags: [placement, demo_tag]
cluster: {{nodes: 2, gpus_per_node: 1}}
trainer:
  config: {CONFIG}
  overrides: {{placement: {{nnodes: 4}}, fault_tolerance: {{resources_timeout_s: 2}}}}
expect:
  - completes: {{}}
  - restarts: {{max: 0}}
"""

INVALID = """
name: broken
trainer: {config: grpo_tiny}
faults:
  - at: {step: 2}
    kill_node: {node: 9}
expect: [{completes: {}}]
"""


@pytest.fixture
def scenarios(pytester):
    d = pytester.mkdir("scenarios")
    (d / "wrong.yaml").write_text(WRONG)
    (d / "broken.yaml").write_text(INVALID)
    return d


def test_collects_one_item_per_scenario_and_selects_by_tag(pytester, scenarios):
    result = pytester.runpytest_subprocess("scenarios", "--collect-only", "-q", "-k", "demo_tag")
    result.stdout.fnmatch_lines(["scenarios/wrong.yaml::wrong_expectation", "*1/2 tests*"])


@pytest.mark.integration
def test_a_wrong_expectation_fails_in_the_scenarios_words(pytester, scenarios):
    result = pytester.runpytest_subprocess("scenarios", "-p", "no:cacheprovider",
                                           "--junitxml=junit.xml")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "scenario 'wrong_expectation': 1 expectation(s) not met" in out
    assert "- completes: the trainer did not complete (exit 2; run_end failed)" in out
    assert "placement asks for 4 nodes" in out and "timeline (last lines):" in out
    assert "invalid scenario:" in out and "broken.yaml:6: faults[0].kill_node.node: node 9" in out
    assert "Traceback" not in out
    junit = (pytester.path / "junit.xml").read_text()
    assert '<property name="restarts" value="0"' in junit


def test_the_slow_tier_is_skipped_in_words_unless_asked_for(pytester, scenarios, tmp_path):
    (scenarios / "wrong.yaml").write_text(WRONG.replace("demo_tag]", "demo_tag, slow]"))
    result = pytester.runpytest_subprocess("scenarios", "-k", "demo_tag", "-rs",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*wrong_expectation: slow tier*run it with --rlsim-slow*"])
    # rlsim run: a folder's slow scenario is skipped saying how to run it; nothing starts
    (scenarios / "broken.yaml").unlink()
    rlsim = Path(sys.executable).parent / "rlsim"
    out = subprocess.run([str(rlsim), "run", str(scenarios), "--report", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SKIP wrong_expectation: slow tier; name its file or pass --slow" in out.stdout


def test_which_yaml_files_are_scenarios_is_the_ini_files_choice(pytester):
    pytester.makeini("[pytest]\nrlsim_scenarios = stories/*.yaml\n")
    stories = pytester.mkdir("stories")
    (stories / "wrong.yaml").write_text(WRONG)
    (stories / "compose.yaml").write_text("services: {web: {image: nginx}}\n")  # not a story
    other = pytester.mkdir("scenarios")
    (other / "broken.yaml").write_text(INVALID)  # outside the patterns: not collected
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "stories/wrong.yaml::wrong_expectation" in out and "broken" not in out, out
    assert "stories/compose.yaml::compose" in out, out  # collected: run, it fails in words
    result = pytester.runpytest_subprocess("stories/compose.yaml", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    said = result.stdout.str()
    assert "invalid scenario:" in said and "compose.yaml:1" in said and "Traceback" not in said
