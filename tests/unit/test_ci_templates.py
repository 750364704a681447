"""The CI templates a user copies (ci/github/*.yml) are workflows that can run: each parses as
YAML, and every file of this repository a step runs exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "ci" / "github").glob("*.yml"))
# a path into the repository a step names: a test, a scenario, a script of ci/
NAMED = re.compile(r"(?<![\w/.-])((?:tests|scenarios|ci)/[\w/.-]+\.(?:py|yaml|sh))")


def named_paths(workflow: dict) -> list[str]:
    return [p for job in workflow["jobs"].values() for step in job["steps"]
            for p in NAMED.findall(step.get("run", ""))]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_a_template_parses_and_runs_files_that_exist(template):
    workflow = yaml.safe_load(template.read_text())
    assert workflow["jobs"], f"{template.name} has no job"
    missing = [p for p in named_paths(workflow) if not (ROOT / p).is_file()]
    assert missing == [], f"{template.name} runs files that do not exist: {missing}"


def test_the_check_sees_a_missing_file():
    flow = {"jobs": {"j": {"steps": [{"run": "pytest tests/integration/test_nothing.py"}]}}}
    assert named_paths(flow) == ["tests/integration/test_nothing.py"]
