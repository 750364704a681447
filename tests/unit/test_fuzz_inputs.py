"""Property-based fuzzing of every input surface besides the scenario loader (which
``test_scenario_property`` fuzzes): the trainer config, each ``rlsim plan`` reader, the launch
options, the report records, the state and fault-ledger readers. The property, for each: the
input is taken, or refused with exit 2 (or the surface's own typed error) naming what is wrong;
never a traceback, a hang, or a file written outside the target folder.

Bounded for the gate (the ``rlsim-gate`` profile, about 40 examples each); ``--rlsim-slow`` runs
the ``rlsim-slow`` profile, 500 each (both in tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.faults.ledger import FaultError, ledger
from rlsim.host import state
from rlsim.host.spec import ClusterSpec
from rlsim.host.state import ClusterState
from trainer.config import TrainerConfig, load_config
from trainer.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "plan"
FUZZ = settings(deadline=timedelta(seconds=10), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

ODD_TEXT = ["", " ", "\n", "\x00", "-1", "0", "0.5", ".inf", "nan", "1e300", "99999999999",
            "auto", "é", "\u2028", "[/x]", "$(id)", "a,b", "a:b", "'", '"', "--x", "=", "~"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.sampled_from(ODD_TEXT), st.text(max_size=10))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10)


def _keys(model, prefix: str = "") -> list[str]:
    """Every dotted key of a pydantic config model, sections included."""
    out = []
    for name, info in model.model_fields.items():
        out.append(prefix + name)
        sub = info.annotation
        if isinstance(sub, type) and hasattr(sub, "model_fields"):
            out += _keys(sub, f"{prefix}{name}.")
    return out


CONFIG_KEYS = _keys(TrainerConfig)


def cli_contract(*args: str) -> str:
    """``rlsim ARGS`` exits 0, 1 or 2 with words, never with a traceback; its output."""
    result = CliRunner().invoke(cli.app, list(args))
    assert result.exit_code in (0, 1, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (args, repr(result.exception), result.output)
    assert "Traceback" not in result.output, (args, result.output)
    return result.output


@FUZZ
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), VALUES, max_size=4))
def test_trainer_config_overrides(overrides):
    try:
        cfg = load_config(None, overrides)
    except ConfigError as e:
        assert str(e).strip()
        return
    assert isinstance(cfg, TrainerConfig)


OPENRLHF = (FIXTURES / "openrlhf-v0.11.0-train_ppo_ray_slurm.sh").read_text().split()
VERL = (FIXTURES / "verl-run_qwen2-7b.sh").read_text().split()
FLAGS = sorted({w for w in OPENRLHF if w.startswith("--")})
VERL_KEYS = sorted({w.split("=", 1)[0] for w in VERL if "=" in w and not w.startswith("-")})


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(FLAGS), st.sampled_from(ODD_TEXT)), max_size=4),
       st.sampled_from(["1x8", "2x8", "4x8", "1x1"]))
def test_openrlhf_launches(changes, cluster):
    argv = list(OPENRLHF)
    for flag, value in changes:
        argv += [flag, value]
    cli_contract("plan", "openrlhf", "--cluster", cluster, "--", *argv)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(VERL_KEYS), st.sampled_from(ODD_TEXT)), max_size=4))
def test_verl_launches(changes):
    cli_contract("plan", "verl", "--cluster", "2x8", "--", *VERL,
                 *(f"{k}={v}" for k, v in changes))


def _mutate(data, path: list, value):
    """``data`` with the leaf at ``path`` (indices into its keys and items) set to ``value``."""
    if not path or not isinstance(data, dict | list) or not data:
        return value
    if isinstance(data, dict):
        key = sorted(data, key=str)[path[0] % len(data)]
        return {**data, key: _mutate(data[key], path[1:], value)}
    i = path[0] % len(data)
    return [*data[:i], _mutate(data[i], path[1:], value), *data[i + 1:]]


CONFIGS = {name: yaml.safe_load((FIXTURES / name).read_text()) for name in (
    "roll-example_grpo.yaml", "rlinf-qwen2.5-1.5b-grpo-megatron.yaml")}


@FUZZ
@given(st.sampled_from(sorted(CONFIGS)), st.lists(st.integers(0, 50), min_size=1, max_size=5),
       VALUES)
@example("rlinf-qwen2.5-1.5b-grpo-megatron.yaml", [38, 36], float("inf"))  # a gate found it
def test_roll_and_rlinf_configs(name, path, value):
    with tempfile.TemporaryDirectory() as d:
        config = Path(d) / "config.yaml"
        config.write_text(yaml.safe_dump(_mutate(CONFIGS[name], path, value),
                                         allow_unicode=True))
        cli_contract("plan", name.split("-")[0], "--cluster", "4x8", str(config))


LAUNCH_OPTIONS = {"--report-dir": ["/shared/r", "/a\nb: c", "/x,y", "/x:y", "rel", "/é \t",
                                   "/r\x00"],
                  "--python": ["python3", "python3 -u", "/opt/my py/bin/python", "a/b", "",
                               "py\nthon"],
                  "--time": ["90", "1-00:30", "0", "-5", "99:99:99", "abc", "9" * 20],
                  "--image": ["img:1", "a\nb", ""], "--scenarios": ["/s", ",", "a\nb", "/x y"],
                  "--port": ["6379", "0", "70000", "x"], "--wait": ["600", "0", "-1", "inf"]}


@FUZZ
@given(st.sampled_from(["slurm", "kuberay", "skypilot", "dstack"]),
       st.dictionaries(st.sampled_from(sorted(LAUNCH_OPTIONS)), st.integers(0, 10), max_size=4))
def test_launch_options(platform, picks):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        args = ["launch", platform, "--out", str(out), "--nodes", "2", "--gpus-per-node", "8"]
        for option, i in picks.items():
            args += [option, LAUNCH_OPTIONS[option][i % len(LAUNCH_OPTIONS[option])]]
        if "--scenarios" not in picks and platform != "slurm":
            args += ["--scenarios", "/s"]
        if "--image" not in picks and platform in ("kuberay", "dstack"):
            args += ["--image", "img:1"]
        cli_contract(*args)
        outside = {p.name for p in Path(d).iterdir()} - {"out"}
        assert outside == set(), outside  # nothing written beside the target folder
        for script in out.glob("*") if out.exists() else []:
            text = script.read_text()
            assert "\x00" not in text


RECORD = st.fixed_dictionaries({
    "scenario": st.one_of(st.text(max_size=8), st.sampled_from([".", "..", "a/b", "x\x00"])),
    "ok": st.one_of(st.booleans(), st.sampled_from(["false", 0, None])),
    "seconds": st.one_of(st.floats(), st.integers(), st.sampled_from(["1", None])),
    "checks": st.lists(st.fixed_dictionaries({
        "check": st.text(max_size=8), "ok": st.booleans(), "message": st.text(max_size=20),
        "value": st.one_of(st.none(), st.floats(), st.integers())}), max_size=3)})


@FUZZ
@given(st.one_of(st.lists(RECORD, max_size=3), VALUES))
def test_report_records(summary):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "report"
        root.mkdir()
        (root / "summary.json").write_text(json.dumps(summary, allow_nan=True))
        cli_contract("report", str(root))
        assert {p.name for p in Path(d).iterdir()} == {"report"}


@FUZZ
@given(st.one_of(st.binary(max_size=200), VALUES.map(lambda v: json.dumps(v).encode())))
def test_state_files(raw):
    with tempfile.TemporaryDirectory() as d:
        os.environ["RLSIM_HOME"] = d
        try:
            path = state.clusters_dir() / "x.json"
            path.write_bytes(raw)
            path.chmod(0o600)
            entry = state.load_entry("x")
            assert isinstance(entry, ClusterState | state.Corrupt)
        finally:
            del os.environ["RLSIM_HOME"]


@FUZZ
@given(VALUES)
def test_fault_ledgers(value):
    with tempfile.TemporaryDirectory() as d:
        os.environ["RLSIM_HOME"] = d
        try:
            st_ = ClusterState(spec=ClusterSpec(name="x"), slot=0, session="x-0123abcd",
                               owner_pid=1, backend="local")
            st_.root.mkdir(parents=True)
            (st_.root / "faults.json").write_text(json.dumps(value))
            try:
                entries = ledger(st_)
            except FaultError as e:
                assert "the fault ledger does not parse" in str(e)
                return
            assert isinstance(entries, list)
        finally:
            del os.environ["RLSIM_HOME"]
