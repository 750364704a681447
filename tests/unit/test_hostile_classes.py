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
    t0 = time.monotonic()
    with pytest.raises(ScenarioError, match="took over|500"):
        load(scenario)
    assert time.monotonic() - t0 < 5


def test_patterns_people_write_pass_and_every_search_is_time_limited():
    for ok in ["ResourceTimeout|OutOfMemory", ".*node.*lost", "(.+)+QQ", ".*.*.*QQ",
               r'"step": 7\b', r"^Actor\w*Worker$", r"(\d+\.)+\d+"]:
        assert regex(ok) == ok
    assert search("(.+)+QQ", "a" * 10_000) is False  # Python's re: hours
    t0 = time.monotonic()
    with pytest.raises(PatternTooSlow, match=r"over 2 s.*fewer repetitions"):
        search("(x+x+)+y", "x" * 5000)  # unchecked, as a plugin could pass one
    assert time.monotonic() - t0 < SEARCH_S + 3


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
