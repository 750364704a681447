"""A plugin that cannot serve is named as the cause, with its package, and the command exits 2: one
whose import fails or exits (SystemExit(0) would otherwise end `rlsim validate bad.yaml` with
exit 0, saying nothing), one that is not what its group holds, one that cannot be built, and one
whose validator has a bug (a TypeError where pydantic expects a ValueError)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RLSIM = Path(sys.executable).parent / "rlsim"

MODULE = """
from pydantic import field_validator
from rlsim.adapters import Adapter
from rlsim.faults import Fault
from rlsim.fields import Strict

class NotAFault:
    name = "not_a_fault"

class Broken(Adapter):
    name = "broken"
    observes = frozenset()
    def __init__(self):
        raise RuntimeError("needs a licence server")

class Params(Strict):
    level: int = 1
    @field_validator("level")
    @classmethod
    def _bad(cls, v):
        raise TypeError("unsupported operand")

class Buggy(Fault):
    name = "buggy"
    Params = Params
"""

KILL = "cluster: {nodes: 2}\nfaults: [{at: {step: 1}, kill_node: {node: 1}}]\n"
# group, entry point, what the module does at import, the scenario, what the refusal says
CASES = {
    "exits at import": ("rlsim.faults", "quits = evilplug:NotAFault", "raise SystemExit(0)",
                        KILL, "does not load: SystemExit: 0"),
    "fails at import": ("rlsim.checks", "boom = evilplug:Nope", "import no_such_module_x",
                        "", "does not load: ModuleNotFoundError"),
    "not a fault": ("rlsim.faults", "not_a_fault = evilplug:NotAFault", "", KILL,
                    "not a subclass of rlsim.faults.Fault"),
    "not a check": ("rlsim.checks", "not_a_check = evilplug:NotAFault", "", "",
                    "not a Check"),
    "adapter raises when built": ("rlsim.adapters", "broken = evilplug:Broken", "", "",
                                  "cannot be used: RuntimeError: needs a licence server"),
    "validator raises TypeError": ("rlsim.faults", "buggy = evilplug:Buggy", "",
                                   "faults: [{at: {step: 1}, buggy: {level: 2}}]\n",
                                   "the fault's own validator failed (TypeError"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_plugin_that_cannot_serve_is_named_and_exits_2(tmp_path, case):
    group, entry, at_import, faults, said = CASES[case]
    site = tmp_path / "site"
    info = site / "evil_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    (site / "evilplug.py").write_text(at_import + "\n" + MODULE)
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("name: s\ntrainer: {config: grpo_tiny}\n" + faults +
                        "expect: [{completes: true}]\n")
    done = subprocess.run([str(RLSIM), "validate", str(scenario)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True,
                          text=True, timeout=120)
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, out
    assert said in out and "Traceback" not in out, out
    assert "evil-plugin" in out or "buggy" in out, out


pytest_plugins = ["pytester"]
HEAD_LOST = Path(__file__).parents[2] / "scenarios" / "head_lost.yaml"


@pytest.mark.parametrize(("given", "said"), [
    ("nope", "--rlsim-override 'nope': write KEY=VALUE with a dotted config key, e.g. "
             "--rlsim-override step_delay_s=0.1"),
    ("=1", "--rlsim-override '=1': write KEY=VALUE"),
    ("actor.lr=[", "--rlsim-override actor.lr: not valid YAML"),
])
def test_a_bad_rlsim_override_is_a_usage_error_of_one_line(pytester, given, said):
    """The plugin's ``--rlsim-override`` is refused as pytest refuses its own options: one
    ``ERROR:`` line naming the option and the form KEY=VALUE, exit 4 (usage error), nothing
    collected. Before: a collection error of every scenario file, with the plugin's source
    frames, and a fix naming ``rlsim run``'s ``--override``."""
    (pytester.mkdir("scenarios") / "head_lost.yaml").write_text(HEAD_LOST.read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rlsim-override", given)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    (line,) = err.strip().splitlines()
    assert line.startswith("ERROR: ") and said in line, err
    assert "--override" not in line.replace("--rlsim-override", "")
    assert "items.py" not in result.stdout.str() + err


def test_a_scenario_an_rlsim_override_breaks_names_that_option(pytester):
    (pytester.mkdir("scenarios") / "head_lost.yaml").write_text(HEAD_LOST.read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--rlsim-override",
                                           "total_steps=1")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "(run with --rlsim-override total_steps=1)" in out and "Traceback" not in out, out
