"""pytest collection of scenario files: one item per scenario, failures in the scenario's words.

Registered by ``rlsim.plugin`` (the ``pytest11`` entry point): any ``*.yaml`` under a
``scenarios`` directory becomes a :class:`ScenarioItem` named after the scenario, carrying its tags
as keywords and markers (``pytest scenarios/ -k node_failure``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.backends.base import Unsupported
from rlsim.checks import FIGURES
from rlsim.files import shown
from rlsim.plugin.session import require, scenario_session
from rlsim.result import ScenarioResult
from rlsim.scenario.loader import ScenarioError, load, parse_overrides
from rlsim.scenario.pool import scenario_key


def shape_scheduler(config: pytest.Config, log):
    """xdist's loadscope scheduler with one scope per scenario cluster shape (and per module for
    everything else)."""
    from xdist.scheduler import LoadScopeScheduling

    rootdir = Path(config.rootpath)

    class ShapeScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.endswith(".yaml"):
                try:
                    return "rlsim cluster " + scenario_key(load(rootdir / path))
                except ScenarioError:
                    return path
            return super()._split_scope(nodeid)

    return ShapeScopeScheduling(config, log)


OVERRIDES = pytest.StashKey[dict]()
OVERRIDE_OPTION = "--rlsim-override"


def check_overrides(config: pytest.Config) -> None:
    """Read ``--rlsim-override KEY=VALUE`` options once, at configure time: a bad one is a usage
    error of pytest's own (one line naming the option and the form, no traceback, nothing
    collected), not a collection error of every scenario file."""
    try:
        config.stash[OVERRIDES] = parse_overrides(config.getoption("rlsim_overrides") or [],
                                                  OVERRIDE_OPTION)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def overrides(config: pytest.Config) -> dict:
    """``--rlsim-override KEY=VALUE`` options as the reference trainer's overrides."""
    if OVERRIDES not in config.stash:
        check_overrides(config)
    return config.stash[OVERRIDES]


class ScenarioFailed(Exception):
    def __init__(self, result: ScenarioResult) -> None:
        super().__init__(f"{len(result.failed)} expectation(s) failed")
        self.result = result


NAMES = pytest.StashKey[dict]()  # scenario name -> the file that holds it, as collected


class ScenarioFile(pytest.File):
    def collect(self):
        try:
            scenario = load(self.path, overrides(self.config), OVERRIDE_OPTION)
        except ScenarioError as e:
            yield InvalidScenario.from_parent(self, name=self.path.stem, error=str(e))
            return
        names = self.config.stash.setdefault(NAMES, {})
        first = names.setdefault(scenario.name, self.path)
        if first != self.path:  # as rlsim validate refuses it: one report folder for both
            yield InvalidScenario.from_parent(self, name=self.path.stem, error=(
                f"{shown(self.path)}:1: name: two scenarios are named {scenario.name!r} "
                f"({shown(first)} and {shown(self.path)}); their results would share one "
                "report folder: rename one"))
            return
        yield ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)


class InvalidScenario(pytest.Item):
    """A scenario file that does not validate: fails with the loader's ``path:line`` message."""

    def __init__(self, *, error: str, **kw) -> None:
        super().__init__(**kw)
        self.error = error

    def runtest(self) -> None:
        raise ScenarioError(self.error)

    def repr_failure(self, excinfo, style=None) -> str:
        return f"invalid scenario:\n{self.error}"

    def reportinfo(self):
        return self.path, 0, f"scenario file {self.path.name}"


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario, **kw) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        for tag in scenario.tags:
            self.config.addinivalue_line("markers", f"{tag}: rlsim scenario tag")
            self.keywords[tag] = True
            self.add_marker(tag)

    def runtest(self) -> None:
        session = scenario_session(self.config)
        if session.skips_slow(self.scenario):
            pytest.skip(f"{self.scenario.name}: slow tier (minutes on a small machine); run it "
                        "with --rlsim-slow")
        backend = session.backend_of(self.scenario)
        report = self.config.getoption("rlsim_report")
        out = Path(report) / self.scenario.name if report else \
            self.config._tmp_path_factory.mktemp(self.scenario.name)
        if refused := session.auth_refusal([self.scenario]):
            pytest.fail(refused, pytrace=False)
        try:
            result = session.play(self.scenario, out)
        except Unsupported as e:
            if e.missing_part:  # no engine here: fails under RLSIM_STRICT, as in CI
                require(str(e))
            pytest.skip(f"{self.scenario.name} on --backend {backend}: {e}")
        for check, value in result.figures(FIGURES).items():
            self.user_properties.append((check, round(value, 3)))
        self.user_properties.append(("timeline", str(out / "timeline.jsonl")))
        if not result.ok:
            raise ScenarioFailed(result)

    def repr_failure(self, excinfo, style=None) -> str:
        if not isinstance(excinfo.value, ScenarioFailed):
            return super().repr_failure(excinfo, style)
        result = excinfo.value.result
        outcome = result.outcome
        lines = [f"scenario {self.scenario.name!r}: {len(result.failed)} expectation(s) not met"]
        for v in result.failed:
            lines.append(f"  - {v.check}: {v.message}")
        evidence = next((v.evidence for v in result.failed if v.evidence), [])
        if evidence:
            lines += ["", "timeline (last lines):", *("  " + e for e in evidence)]
        tail = outcome.output.strip().splitlines()[-8:]
        if tail and outcome.returncode:
            lines += ["", "trainer output (last lines):", *("  " + t for t in tail)]
        lines.append(f"\nfull timeline: {outcome.run_dir.parent / 'timeline.jsonl'}")
        return "\n".join(lines)

    def reportinfo(self):
        return self.path, 0, f"scenario {self.scenario.name}"
