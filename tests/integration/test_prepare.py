"""trainer.prepare: run once before the first launch, where the command runs and with its
placeholders; a failing one ends the run before any launch."""

from __future__ import annotations

import pytest

from rlsim.checks import judge
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

pytestmark = pytest.mark.integration

WRITE = ("import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('made'); "
         "sys.exit(int(sys.argv[2]))")
READ = "import pathlib, sys; sys.exit(0 if pathlib.Path(sys.argv[1]).read_text() == 'made' else 5)"


def scenario(tmp_path, prepare_exit: int):
    path = tmp_path / "s.yaml"
    path.write_text(f"""name: prepared
cluster: {{nodes: 1}}
trainer:
  adapter: events
  prepare: ["{{python}}", "-c", "{WRITE}", "{{run_dir}}/task.txt", "{prepare_exit}"]
  command: ["{{python}}", "-c", "{READ}", "{{run_dir}}/task.txt"]
  timeout_s: 60
expect: [{{completes: true}}]  # events' run_end is the trainer's own: judged only when it fails
""")
    return load(path)


def test_the_command_reads_what_prepare_made(tmp_path):
    outcome = run_scenario(scenario(tmp_path, 0), tmp_path / "out")
    assert outcome.returncode == 0  # the command found the file with what prepare wrote
    prepared = [e for e in outcome.timeline if e["type"] == "trainer_prepared"]
    assert prepared and prepared[0]["returncode"] == 0


def test_a_failing_prepare_ends_the_run_before_any_launch(tmp_path):
    outcome = run_scenario(scenario(tmp_path, 3), tmp_path / "out")
    assert outcome.returncode == 3
    assert not [e for e in outcome.timeline if e["type"] == "trainer_started"]
    assert [v.ok for v in judge(outcome)] == [False]
