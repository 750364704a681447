"""Property-based fuzzing of the surfaces added last (as ``test_fuzz_inputs`` fuzzes the older
ones): ``rlsim init`` and ``rlsim schema --out`` onto odd folders, names and planted paths; every
fault's and check's parameters in a scenario; the pytest plugin's options (its scenario patterns,
``--rlsim-override``). The property, for each: taken, or refused with exit 2 (or the surface's own
typed error) naming what is wrong; never a traceback or a hang; nothing written outside the
target, and nothing at all when refused.

Bounded for the gate (the ``rlsim-gate`` profile); ``--rlsim-slow`` runs ``rlsim-slow``."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.checks import CHECKS
from rlsim.faults import FAULTS
from rlsim.plugin import is_scenario_file, patterns_problem
from rlsim.scenario.loader import ScenarioError, parse_overrides, read

FUZZ = settings(deadline=timedelta(seconds=10), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

ODD = ["", " ", "\n", "\x1b[2K", "..", "/", "-1", "0", "0.0001", "1e300", "nan", ".inf", "é",
       "\u2028", "[red]x", ":fire:", "{run_dir:>9}", "$(id)", "*", "**", "?", "a b", "'", '"']
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(),
                    st.sampled_from(ODD), st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["node", "role", "rank", "gpu", "cpu", "period_s", "down_s", "groups", "seconds", "ratio",
         "after", "below", "step", "pattern", "matching", "type", "min", "max", "notice_s",
         "path", "mb", "write_mbps"]), inner, max_size=4)), max_leaves=8)


def cli_contract(*args: str) -> str:
    result = CliRunner().invoke(cli.app, list(args))
    assert result.exit_code in (0, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (args, repr(result.exception), result.output)
    assert "Traceback" not in result.output, (args, result.output)
    return result.output


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            st_ = os.lstat(os.path.join(top, name))
            out[os.path.relpath(os.path.join(top, name), root)] = (st_.st_ino, st_.st_mode,
                                                                    st_.st_size)
    return out


PLANTS = ["nothing", "file", "link to outside", "dangling link", "folder", "fifo"]
PLACES = ["scenarios", ".rlsim", ".github", ".github/workflows", "pytest.ini",
          "scenarios/clean_run.yaml", ".github/workflows/rlsim.yml"]


def _plant(path: Path, what: str, outside: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return  # a plant above it already (a file where a folder goes)
    if os.path.lexists(path) or not path.parent.is_dir():
        return
    if what == "file":
        path.write_text("mine\n")
    elif what == "link to outside":
        path.symlink_to(outside)
    elif what == "dangling link":
        path.symlink_to(outside / "nowhere")
    elif what == "folder":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)


@FUZZ
@given(st.sampled_from(["p", "a b", "é", "[x]", ":fire:", "-", "d/e"]),
       st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(PLANTS)), max_size=3),
       st.sampled_from(["rlsim", "events", "ray_train", "verl", "nope", ""]),
       st.one_of(st.none(), st.sampled_from(["python t.py", "'", "", "x {run_dir:>9}"])),
       st.booleans())
def test_init(name, plants, adapter, command, force):
    with tempfile.TemporaryDirectory() as tmp:
        root, outside = Path(tmp) / "root", Path(tmp) / "outside"
        outside.mkdir()
        (outside / "victim").write_text("precious")
        project = root / name
        for place, what in plants:
            _plant(project / place, what, outside)
        before, victims = tree(root) if root.exists() else {}, tree(outside)
        args = ["init", str(project), "--adapter", adapter, *(["--force"] if force else [])]
        out = cli_contract(*args, *(["--command", command] if command is not None else []))
        assert tree(outside) == victims and (outside / "victim").read_text() == "precious", out
        if not out.startswith("wrote") and "wrote " not in out:  # refused: nothing written
            assert (tree(root) if root.exists() else {}) == before, out


@FUZZ
@given(st.sampled_from(["x.json", "a b.json", "\x1b.json", "d/x.json", "..", ""]),
       st.sampled_from(PLANTS))
def test_schema_out(name, plant):
    with tempfile.TemporaryDirectory() as tmp:
        outside = Path(tmp) / "outside"
        outside.mkdir()
        (outside / "victim").write_text("precious")
        target = Path(tmp) / "out" / name if name else Path(tmp) / "out"
        (Path(tmp) / "out").mkdir()
        if plant != "nothing" and name not in ("", ".."):
            _plant(target, plant, outside)
        out = cli_contract("schema", "--out", str(target))
        assert (outside / "victim").read_text() == "precious", out
        if plant in ("link to outside", "dangling link", "folder", "fifo") and name not in (
                "", ".."):
            assert "rlsim replaces only a regular file" in out, out


BASE = ("name: s\ncluster: {nodes: 3, gpus_per_node: 2, cpus_per_node: 4}\n"
        "trainer: {config: grpo_tiny, overrides: {total_steps: 12, save_freq: 4}}\n")


def _load(doc: dict) -> None:
    text = BASE + yaml.safe_dump(doc, default_flow_style=True, width=10**6)
    try:
        read(text, Path(tempfile.gettempdir()) / "fuzz.yaml")
    except ScenarioError as e:
        assert str(e).strip() and "Traceback" not in str(e)


@FUZZ
@given(st.sampled_from(sorted(FAULTS)), VALUES,
       st.fixed_dictionaries({}, optional={"for_s": SCALARS, "heal_at": VALUES,
                                           "may_miss": SCALARS}),
       st.one_of(st.integers(-1, 20), SCALARS))
def test_every_faults_parameters(kind, params, extra, step):
    _load({"faults": [{"at": {"step": step}, kind: params, **extra}],
           "expect": [{"completes": True}]})


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(sorted(CHECKS)), VALUES), min_size=1, max_size=3),
       st.booleans())
def test_every_checks_parameters(checks, with_fault):
    faults = [{"at": {"step": 3}, "kill_node": {"node": 1}}] if with_fault else []
    _load({"faults": faults, "expect": [{name: value} for name, value in checks]})


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["scenarios/**/*.yaml", "../x.yaml", "/a/*.yaml",
                                           "s/[ab].yaml", "*.yml", "**", "x/*.txt", "~/*.yaml",
                                           "a\\b.yaml", "{a,b}.yaml", " "]),
                          st.text(max_size=12)), min_size=1, max_size=3),
       st.sampled_from(["scenarios/a.yaml", "scenarios/x/b.yml", "c.yaml", "a/b/c/d.yaml"]))
def test_scenario_patterns(patterns, rel):
    problem = patterns_problem(patterns)
    if problem is None:  # taken: matching is total, never an exception
        is_scenario_file(Path("/root") / rel, Path("/root"), patterns)
    else:
        assert problem.startswith("rlsim_scenarios: ")


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["total_steps", "step_delay_s", "a.b", "", "x y",
                                           "run_dir", "=", "é"]),
                          st.one_of(st.sampled_from(ODD + ["[" * 5000, "&a [*a]", "1\n---\n2",
                                                           "{a: {b: [1, 2]}}"]),
                                    st.text(max_size=20))), max_size=3))
def test_rlsim_overrides(items):
    words = [f"{k}={v}" for k, v in items]
    try:
        parse_overrides(words)
    except ValueError as e:
        assert str(e).startswith("--override ")
