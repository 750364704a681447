"""Classes of hostile input met by construction, one test per class: reading a scenario never runs
code it names; a scenario's patterns can never hang a check; a file's name is printed as the text
it is, never as markup, an emoji or a forged line."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.fields import SEARCH_S, PatternTooSlow, regex, search
from rlsim.scenario.loader import ScenarioError, load

EVENTS = 'trainer:\n  adapter: events\n  command: ["{python}", "-c", "pass"]\n'


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """A package that leaves a mark when imported, on the import path."""
    pkg = tmp_path / "lib" / "evilmod"
    pkg.mkdir(parents=True)
    mark = tmp_path / "IMPORTED"
    (pkg / "__init__.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    (pkg / "sub.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    return mark


@pytest.mark.parametrize("module", ["evilmod.sub", "evilmod.missing", "evilmod"])
def test_reading_a_scenario_never_imports_what_it_requires(tmp_path, evil, module):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\n{EVENTS}  requires: {{{module}: pip install it}}\n"
                        "expect: [{completes: {}}]\n")
    for args in (["validate", str(scenario)], ["run", "--dry-run", str(scenario)]):
        done = CliRunner().invoke(cli.app, args)
        assert done.exit_code == 0, done.output
        if args[0] == "run":
            assert ("SKIP" in done.output) == (module == "evilmod.missing"), done.output
    (tmp_path / "pytest.ini").write_text("[pytest]\nrlsim_scenarios = *.yaml\n")
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                                "-p", "no:cacheprovider", str(scenario)], cwd=tmp_path,
                               capture_output=True, text=True, timeout=120)
    assert "1 test collected" in collected.stdout, collected.stdout + collected.stderr
    assert not evil.exists()


def test_a_required_name_that_is_not_a_module_is_refused(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\n{EVENTS}  requires: {{'os; import x': y}}\n"
                        "expect: [{completes: {}}]\n")
    with pytest.raises(ScenarioError, match="not a Python module name"):
        load(scenario)


# every field that holds a pattern, as a scenario writes it
PATTERN_FIELDS = {
    "fails": "expect: [{{fails: {{pattern: '{p}'}}}}]",
    "refused": "expect: [{{refused: {{pattern: '{p}'}}}}]",
    "doctor_warns": "expect: [{{completes: {{}}}}, {{doctor_warns: {{pattern: '{p}'}}}}]",
    "event.matching": "expect: [{{completes: {{}}}}, {{event: {{type: x, matching: '{p}'}}}}]",
    "trainer.roles": "expect: [{{completes: {{}}}}]",
}


@pytest.mark.parametrize("field", PATTERN_FIELDS)
@pytest.mark.parametrize("pattern", ["(x+x+)+y", "(a|ab)+c", "x" * 501])
def test_a_pattern_that_could_hang_its_search_is_refused_in_every_field(tmp_path, field, pattern):
    trainer = EVENTS + (f"  roles: {{actor: '{pattern}'}}\n" if field == "trainer.roles" else "")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\n{trainer}" + PATTERN_FIELDS[field].format(p=pattern) + "\n")
    cpu = time.process_time()  # what the engine's time limits count; the wall clock is the load's
    with pytest.raises(ScenarioError, match="took over|500"):
        load(scenario)
    assert time.process_time() - cpu < 5


def test_patterns_people_write_pass_and_every_search_is_time_limited():
    for ok in ["ResourceTimeout|OutOfMemory", ".*node.*lost", "(.+)+QQ", ".*.*.*QQ",
               r'"step": 7\b', r"^Actor\w*Worker$", r"(\d+\.)+\d+"]:
        assert regex(ok) == ok
    assert search("(.+)+QQ", "a" * 10_000) is False  # Python's re: hours
    cpu = time.process_time()  # the engine counts CPU: 2.0 s of it took 6 s beside two busy loops
    with pytest.raises(PatternTooSlow, match=r"over 2 s of CPU.*fewer repetitions"):
        search("(x+x+)+y", "x" * 5000)  # unchecked, as a plugin could pass one
    assert time.process_time() - cpu < SEARCH_S + 1


@pytest.mark.parametrize("name", ["run:fire:1.yaml", "[red]x.yaml", "a\nok  forged.yaml",
                                  "b\x1b[2Kc.yaml"])
def test_a_files_name_is_printed_as_text(tmp_path, name):
    good = tmp_path / name
    good.write_text(f"name: s\n{EVENTS}expect: [{{completes: {{}}}}]\n")
    done = CliRunner().invoke(cli.app, ["validate", str(good)])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ok  "), done.output
    assert "\x1b" not in done.output and "🔥" not in done.output
    shown = name.replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert shown in done.output
    good.write_text("name: s\n")  # and in a refusal
    done = CliRunner().invoke(cli.app, ["validate", str(good)])
    assert done.exit_code == 2 and shown in done.output and "\x1b" not in done.output
    assert not any(line.startswith("ok") for line in done.output.splitlines())


# ---- what a run is given beside the file is held to the file's rules ----------------------------

CATALOGUE_FAULT_AT_7 = """name: s
trainer: {config: grpo_tiny, overrides: {total_steps: 10}}
cluster: {nodes: 2, gpus_per_node: 1}
faults: [{at: {step: 7}, kill_node: {node: 1}}]
expect: [{completes: {}}]
"""


@pytest.mark.parametrize("override,said", [
    ("total_steps=3", "step 7"),
    ("a=" + "[" * 100_000, "nested more than"),
    ("a=&x [1, *x]", "anchor"),
    ("a=1\n---\n2", "second YAML document"),
])
def test_an_override_is_read_and_checked_as_the_file_is(tmp_path, override, said):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CATALOGUE_FAULT_AT_7)
    assert CliRunner().invoke(cli.app, ["run", "--dry-run", str(scenario)]).exit_code == 0
    done = CliRunner().invoke(cli.app, ["run", "--dry-run", "--override", override,
                                        str(scenario)])
    assert done.exit_code == 2 and said in done.output, done.output[-2000:]
    assert "Traceback" not in done.output


@pytest.mark.parametrize("tag", ["skip", "xfail", "skipif", "not a word", "x" * 65])
def test_a_tag_pytest_would_act_on_or_cannot_select_is_refused(tmp_path, tag):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\ntags: ['{tag}']\n{EVENTS}expect: [{{completes: {{}}}}]\n")
    with pytest.raises(ScenarioError, match="tags: "):
        load(scenario)


def test_a_cwd_that_is_a_link_loop_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\n{EVENTS}  cwd: a\nexpect: [{{completes: {{}}}}]\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:\d+: trainer.cwd: 'a' cannot be resolved"):
        load(scenario)


# ---- the pytest plugin collects as strictly as rlsim validate reads -----------------------------

def _collect(tmp_path, ini: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nrlsim_scenarios = {ini}\n")
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("pattern,said", [
    ("../*.yaml", "climbs out"), ("/abs/*.yaml", "not relative"),
    ("scenarios/[ab].yaml", "do not read"), ("scenarios/*.txt", "names no .yaml"),
])
def test_a_pattern_that_would_collect_nothing_is_a_usage_error(tmp_path, pattern, said):
    done = _collect(tmp_path, pattern)
    assert done.returncode == 4 and said in done.stderr and "rlsim_scenarios" in done.stderr, \
        done.stdout + done.stderr


def test_a_file_reached_again_through_a_link_loop_is_collected_once(tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "s.yaml").write_text(f"name: s\n{EVENTS}expect: [{{completes: {{}}}}]\n")
    (scenarios / "loop").symlink_to(scenarios)
    done = _collect(tmp_path, "scenarios/**/*.yaml")
    assert "1 test collected" in done.stdout, done.stdout + done.stderr


def test_two_files_with_one_scenario_name_are_refused_as_validate_does(tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("a.yaml", "b.yaml"):
        (scenarios / name).write_text(f"name: same\n{EVENTS}expect: [{{completes: {{}}}}]\n")
    done = _collect(tmp_path, "scenarios/*.yaml")
    assert "2 tests collected" in done.stdout, done.stdout + done.stderr
    # the second file read is the refused one (selected alone: no cluster starts)
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                          "b", "scenarios"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert "1 failed, 1 deselected" in ran.stdout, ran.stdout + ran.stderr
    assert "two scenarios are named 'same'" in ran.stdout, ran.stdout + ran.stderr
    validated = CliRunner().invoke(cli.app, ["validate", str(scenarios)])
    assert validated.exit_code == 2 and "two scenarios are named 'same'" in validated.output
