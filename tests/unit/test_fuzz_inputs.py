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
from rlsim.host.spec import ClusterSpec, name_problem
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
        said = cli_contract(*args)
        outside = {p.name for p in Path(d).iterdir()} - {"out"}
        assert outside == set(), outside  # nothing written beside the target folder
        for script in out.glob("*") if out.exists() else []:
            text = script.read_text()
            assert "\x00" not in text
        if not out.exists() and said.startswith("rlsim launch:"):  # refused by rlsim (not by
            # click's usage box): one line, a value's control characters escaped
            assert len(said.strip().splitlines()) == 1 and said.strip().isprintable(), said


PARTS = ["", ".", "..", "proc", "etc", "usr", "lib", "tmp", "rlsim", "mnt", "x y", "\n", "\x1b"]
SYSTEM = {"/", "/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib",
          "/lib32", "/lib64", "/libx32", "/run", "/var", "/tmp", "/opt", "/home", "/root",
          "/srv", "/mnt", "/media"}
TREES = ("/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib")


@FUZZ
@given(st.lists(st.sampled_from(PARTS), max_size=5))
def test_substrate_shared_dir(parts):
    """Whatever folder --shared-dir names, the manifest never mounts the shared volume at the
    root, at a system folder or inside /proc, /etc, /usr...: written normalised, or refused on
    one line."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        said = cli_contract("launch", "kuberay-substrate", "--out", str(out), "--nodes", "2",
                            "--image", "img:1", "--shared-dir", "/" + "/".join(parts))
        if not out.exists():
            assert said.startswith("rlsim launch: --shared-dir"), said
            assert len(said.strip().splitlines()) == 1 and said.strip().isprintable(), said
            return
        doc = yaml.safe_load((out / "rlsim-substrate-raycluster.yaml").read_text())
        (mount,) = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
            "volumeMounts"]
        where = mount["mountPath"]
        assert where not in SYSTEM and ".." not in where.split("/") and "//" not in where
        assert not any(where.startswith(t + "/") for t in TREES), where


@FUZZ
@given(st.text(max_size=12))
def test_cluster_names(name):
    """A cluster name with anything in it: refused on one line that shows it escaped (no
    newline, no escape sequence reaches the terminal), or taken."""
    starts = [["cluster", "--name", name]] if name_problem(name) else []  # never a real start
    for args in (*starts, ["status", name], ["down", name]):
        with tempfile.TemporaryDirectory() as d:
            os.environ["RLSIM_HOME"] = d
            try:
                result = CliRunner().invoke(cli.app, args)
            finally:
                del os.environ["RLSIM_HOME"]
            assert result.exception is None or isinstance(result.exception, SystemExit), \
                (args, repr(result.exception))
            if result.exit_code == 2 and result.output.startswith("rlsim "):  # not click's
                said = result.output.strip()
                assert len(said.splitlines()) == 1 and said.isprintable(), (args, said)


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


DOCTOR_NODE = st.fixed_dictionaries({
    "index": st.one_of(st.integers(), st.sampled_from(ODD_TEXT)),
    "address": st.sampled_from(["10.0.0.1", "", "\x1b[2J"]),
    "reaches": st.sampled_from(["1/1", "", None]),
    "hardware": st.one_of(VALUES, st.fixed_dictionaries({"gpus": st.lists(VALUES, max_size=3)}),
                          st.fixed_dictionaries({"gpus": st.lists(st.dictionaries(
                              st.sampled_from(["name", "memory_mib", "driver", "error"]),
                              st.one_of(SCALARS, st.just("9" * 5000)), max_size=4),
                              max_size=3)})),
    "versions": VALUES})


@FUZZ
@given(st.one_of(st.binary(max_size=200), VALUES.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({"nodes": st.lists(DOCTOR_NODE, max_size=2)}).map(
                     lambda v: json.dumps(v).encode())))
def test_doctor_records(raw):
    """Whatever doctor.json holds, rlsim report shows it or says it is damaged; every page is
    written or none."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "summary.json").write_text(json.dumps([]))
        (root / "doctor.json").write_bytes(raw)
        said = cli_contract("report", str(root))
        pages = {p.name for p in root.iterdir()} & {"report.html", "signoff.html", "junit.xml"}
        assert pages == {"report.html", "signoff.html", "junit.xml"}, said


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
