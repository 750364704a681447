"""pytest plugin (entry point ``pytest11: rlsim``): the ``rlsim_cluster`` fixture and markers.

Shape a cluster with a marker or indirect parametrization::

    @pytest.mark.rlsim_cluster(nodes=3, gpus_per_node=8)
    def test_x(rlsim_cluster): ...

    @pytest.mark.parametrize("rlsim_cluster", [{"nodes": 2}], indirect=True)
    def test_y(rlsim_cluster): ...

Each test gets its own cluster (its own slot: addresses and ports), so pytest-xdist workers never
collide; teardown runs whether the test passed, failed or was interrupted, and a cluster whose
test process died is reaped by the next rlsim start on the machine.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlsim.backends import described, names
from rlsim.backends.local import LocalCluster
from rlsim.host.spec import ClusterSpec
from rlsim.plugin.session import close_session
from rlsim.ray_internals import export_auth_env

_counter = itertools.count()
# the scenario files pytest collects unless the ini option rlsim_scenarios says otherwise
SCENARIO_FILES = ("scenarios/**/*.yaml",)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("rlsim_scenarios", type="args", default=list(SCENARIO_FILES),
                  help="glob patterns (relative to the rootdir, ** for any folders) of the YAML "
                       "files that are rlsim scenarios, as python_files is for test modules")
    group = parser.getgroup("rlsim", "rlsim scenarios")
    group.addoption("--backend", dest="rlsim_backend", default=None, choices=names(),
                    help=f"run scenarios on this backend: {described()}")
    group.addoption("--ray-address", dest="rlsim_ray_address", default=None,
                    help="a real cluster's address (with --backend real)")
    group.addoption("--rlsim-report", dest="rlsim_report", default=None,
                    help="write each scenario's timeline and run directory under this folder")
    group.addoption("--rlsim-slow", dest="rlsim_slow", action="store_true", default=False,
                    help="also run scenarios tagged slow and tests marked slow (skipped "
                         "otherwise, saying so)")
    group.addoption("--allow-disruptive", dest="rlsim_allow_disruptive", action="store_true",
                    default=False, help="with --backend real: run scenarios whose faults kill "
                    "nodes or processes, take GPU memory or damage checkpoints (refused "
                    "otherwise)")
    group.addoption("--rlsim-override", dest="rlsim_overrides", action="append", default=[],
                    metavar="KEY=VALUE", help="a reference-trainer override for every scenario "
                    "that runs it (repeatable), e.g. step_delay_s=0.1: the catalogue on slower "
                    "steps")
    group.addoption("--rlsim-fresh-twin", dest="rlsim_fresh_twin", action="store_true",
                    default=False, help="train each fault-free twin again, replacing the one an "
                    "earlier run kept under the rlsim home (default: reuse it)")
    group.addoption("--no-reuse", dest="rlsim_no_reuse", action="store_true", default=False,
                    help="start and stop a cluster per scenario (default: scenarios of one shape "
                         "share a cluster within a worker, checked clean in between)")


SEEN = pytest.StashKey[set]()  # scenario files outside the rootdir collected through a link


def pytest_collect_file(parent: pytest.Collector, file_path):
    """A file the ``rlsim_scenarios`` patterns match (``scenarios/**/*.yaml`` unless the ini
    file says otherwise) -> one item per scenario (see rlsim.plugin.items); a matched file that
    is no scenario is a collection error naming the file. A file reached through a symlinked
    folder is collected once, by its own path (a link loop reaches one file dozens of times)."""
    config = parent.config
    patterns = config.getini("rlsim_scenarios")
    if file_path.suffix in (".yaml", ".yml") and is_scenario_file(
            file_path, config.rootpath, patterns):
        from rlsim.plugin.items import ScenarioFile

        real = Path(os.path.realpath(file_path))
        if real != Path(os.path.abspath(file_path)):
            if real.is_relative_to(config.rootpath) and is_scenario_file(
                    real, config.rootpath, patterns):
                return None  # collected by its own path
            seen = config.stash.setdefault(SEEN, set())
            if real in seen:
                return None
            seen.add(real)
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def patterns_problem(patterns: list[str]) -> str | None:
    """Why the ``rlsim_scenarios`` globs cannot be used as written, or None: each is relative
    to the rootdir, inside it, and uses only what :func:`_regex` reads (``**``, ``*``, ``?``).
    A pattern that can match nothing collects no scenario, and pytest would say nothing."""
    for pattern in patterns:
        fix = "write a glob relative to the rootdir, e.g. scenarios/**/*.yaml"
        if not pattern.strip():
            return f"rlsim_scenarios: an empty pattern; {fix}"
        if pattern.startswith("/") or pattern.startswith("~"):
            return f"rlsim_scenarios: {pattern!r} is not relative to the rootdir; {fix}"
        if ".." in pattern.split("/"):
            return (f"rlsim_scenarios: {pattern!r} climbs out of the rootdir ('..'); pytest "
                    f"collects inside it: {fix}")
        if any(c in pattern for c in "[]{}\\"):
            return (f"rlsim_scenarios: {pattern!r} uses [ ] {{ }} or \\, which these globs do "
                    f"not read (only **, * and ?); {fix}")
        if not pattern.endswith((".yaml", ".yml", "*")):
            return f"rlsim_scenarios: {pattern!r} names no .yaml files; {fix}"
    return None


def is_scenario_file(path, rootdir, patterns: list[str]) -> bool:
    """Whether ``path`` matches one of the glob ``patterns``, relative to ``rootdir`` (a path
    outside it, as given): ``**`` stands for any folders, none included."""
    try:
        rel = path.relative_to(rootdir).as_posix()
    except ValueError:
        rel = path.as_posix()
    return any(re.fullmatch(_regex(p), rel) for p in patterns)


def _regex(pattern: str) -> str:
    """A glob as a regular expression: ``**/`` any folders (or none), ``*`` within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under ``--dist loadscope``, scenarios of one cluster shape form one scope, so they run on
    one worker one after another and share its kept cluster (see rlsim.scenario.pool)."""
    if config.getoption("dist", None) != "loadscope" or config.getoption("rlsim_no_reuse"):
        return None
    from rlsim.plugin.items import shape_scheduler

    return shape_scheduler(config, log)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: a deselected scenario is no refusal
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scenarios of one cluster shape in a row, those that can leave a node down last in their
    row, so that each earlier one hands its cluster on (see rlsim.scenario.pool). On
    ``--backend real``, scenarios whose faults harm a real cluster are refused unless
    ``--allow-disruptive``."""
    from rlsim.plugin.session import scenario_session

    session = scenario_session(config)
    items[:] = session.order(items, lambda item: getattr(item, "scenario", None))
    # before anything connects to a real cluster
    if refused := session.disruptive_refusal(
            [i.scenario for i in items if getattr(i, "scenario", None)], "deselect them (-k)"):
        raise pytest.UsageError(refused)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``slow`` runs only with ``--rlsim-slow``, like a scenario tagged slow."""
    if item.get_closest_marker("slow") and not item.config.getoption("rlsim_slow"):
        pytest.skip(f"{item.name}: slow tier (minutes on a small machine); run it with "
                    "--rlsim-slow")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After this process's last test and its fixtures' teardown (its ``monkeypatch`` undone),
    stop the clusters scenarios kept; a leak in their teardown is an error of that test (a
    worker's session end would hide it)."""
    result = yield
    if nextitem is None:
        leaks = close_session(item.config)
        if leaks:
            pytest.fail("clusters kept between scenarios leaked at teardown: " + "; ".join(leaks),
                        pytrace=False)
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop kept clusters (also after Ctrl-C); with ``--rlsim-report DIR``, render
    DIR/report.html once (on the xdist controller)."""
    close_session(session.config)
    report = session.config.getoption("rlsim_report", None)
    if report and not hasattr(session.config, "workerinput"):
        from pathlib import Path

        if list(Path(report).glob("*/verdicts.json")):
            import sys

            from rlsim.report import render

            problems: list[str] = []
            render(report, problems=problems)
            for problem in problems:
                print(f"rlsim report: {problem}", file=sys.stderr)


def pytest_configure(config: pytest.Config) -> None:
    if problem := patterns_problem(config.getini("rlsim_scenarios")):
        raise pytest.UsageError(f"{config.inipath or 'the ini file'}: {problem}")
    if config.getoption("rlsim_overrides", None):  # a bad one: pytest's usage error, one line
        from rlsim.plugin.items import check_overrides

        check_overrides(config)
    # before any test module imports ray: Ray fixes its auth mode at import (see export_auth_env)
    export_auth_env()
    for line in (
        "rlsim_cluster(**spec): shape of the rlsim_cluster fixture (ClusterSpec fields)",
        "root: needs root, iptables and cgroup2 (network faults)",
        "docker: needs a reachable Docker engine",
        "slow: the slow tier, run with --rlsim-slow (minutes on a small machine)",
        "gpu: needs a real GPU",
        "real: runs against a real cluster (--backend real)",
    ):
        config.addinivalue_line("markers", line)


def _spec(request: pytest.FixtureRequest) -> ClusterSpec:
    fields: dict = {}  # the cluster-shape defaults (rlsim.host.spec.ClusterShape), as everywhere
    marker = request.node.get_closest_marker("rlsim_cluster")
    if marker:
        fields.update(marker.kwargs)
    if isinstance(getattr(request, "param", None), dict):
        fields.update(request.param)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    fields.setdefault("name", f"pt-{worker}-{os.getpid()}-{next(_counter)}")
    return ClusterSpec(**fields)


@pytest.fixture
def rlsim_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running local rlsim cluster (the default shape, 2 nodes x 8 fake GPUs, unless shaped
    otherwise)."""
    with LocalCluster(_spec(request)) as cluster:
        yield cluster
