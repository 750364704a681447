"""Property-based fuzzing of the records rlsim reads back (as ``test_fuzz_new_surfaces`` fuzzes
the inputs people write): a run's and a twin's ``metrics.jsonl``, a twin's ``twin.json``, a
safetensors export, Ray's kept probe answers and a cluster's state file, each given random
bytes, JSON of odd shapes, or a well-formed record with one field made odd. The property, for
each: a verdict, a refusal named by the reader's own type, or a fresh computation; never a
traceback, a hang or an answer read from a damaged record.

Bounded for the gate (the ``rlsim-gate`` profile); ``--rlsim-slow`` runs ``rlsim-slow``."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.checks import CHECKS, MatchesBaseline
from rlsim.checks.baseline import _safetensors
from rlsim.history import Outcome

FUZZ = settings(deadline=timedelta(seconds=10), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**20), st.floats(),
                    st.sampled_from(["", "x", "²", "\x1b[2K", "1e300", "made", "step"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["step", "loss", "key", "made", "files", "answers",
                                     "checksum", "dtype", "shape", "data_offsets", "slot",
                                     "spec", "session", "name", "like"]), inner, max_size=4)),
    max_leaves=10)
@contextlib.contextmanager
def _home(tmp: str):
    """RLSIM_HOME in ``tmp`` for one example (a fixture's lasts the whole test)."""
    old = os.environ.get("RLSIM_HOME")
    os.environ["RLSIM_HOME"] = str(Path(tmp) / "home")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RLSIM_HOME")
        else:
            os.environ["RLSIM_HOME"] = old


DEEP = st.integers(1, 60_000).map(lambda n: "[" * n)


def _text(value) -> bytes:
    try:
        return json.dumps(value).encode()
    except ValueError:  # NaN is fine; a float too large for repr is not JSON's
        return b"null"


BLOBS = st.one_of(st.binary(max_size=200), JSON.map(_text), DEEP.map(str.encode))
LINES = st.lists(st.one_of(JSON.map(_text), st.binary(max_size=30), DEEP.map(str.encode),
                           st.fixed_dictionaries({"step": st.integers(1, 3)},
                                                 optional={"loss": SCALARS}).map(_text)),
                 max_size=4).map(b"\n".join)


def _run_dir(root: Path, name: str, metrics: bytes, weights: bytes) -> Path:
    d = root / name
    hf = d / "checkpoints" / "global_step_1" / "hf"
    hf.mkdir(parents=True)
    (d / "metrics.jsonl").write_bytes(metrics)
    (hf / "model.safetensors").write_bytes(weights)
    return d


GOOD_ROW = b'{"step": 1, "loss": 0.5}\n'


def _export(header) -> bytes:
    raw = _text(header)
    return len(raw).to_bytes(8, "little") + raw + b"\0" * 8


EXPORTS = st.one_of(BLOBS, JSON.map(_export), st.dictionaries(
    st.sampled_from(["w", "b", "__metadata__"]), st.fixed_dictionaries(
        {"dtype": st.sampled_from(["F32", "F16", "U8", "X"]),
         "shape": st.lists(st.integers(-1, 3), max_size=2),
         "data_offsets": st.lists(st.integers(-1, 10), min_size=2, max_size=2)}),
    max_size=2).map(_export))


@FUZZ
@given(LINES, LINES, EXPORTS, JSON)
def test_matches_baseline_judges_any_record(run_metrics, twin_metrics, export, about):
    with tempfile.TemporaryDirectory() as tmp:
        o = Outcome(scenario=None,
                    run_dir=_run_dir(Path(tmp), "run", run_metrics, export),
                    baseline_dir=_run_dir(Path(tmp), "twin", twin_metrics, export),
                    baseline_about=about if isinstance(about, dict) else None)
        v = CHECKS["matches_baseline"].judge(o, MatchesBaseline())
        assert v.message and "Traceback" not in v.message


@FUZZ
@given(EXPORTS)
def test_an_export_is_tensors_or_a_named_refusal(export):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        path.write_bytes(export)
        try:
            tensors = _safetensors(path)
        except ValueError as e:
            assert "model.safetensors" in str(e) and "cannot be compared" in str(e)
            return
        for dtype, shape, data in tensors.values():
            assert isinstance(dtype, str) and all(n >= 0 for n in shape)
            assert isinstance(data, bytes)


@FUZZ
@given(st.one_of(BLOBS, JSON.map(lambda v: {"key": "k1", "made": 1.7e9, "files": [], "x": v})
                 .map(_text), JSON.map(lambda v: {"key": "k1", "made": v, "files": v}).map(_text)),
       LINES)
def test_a_kept_twin_is_sound_or_trained_again(about, metrics):
    from rlsim.scenario import twins

    with tempfile.TemporaryDirectory() as tmp, _home(tmp):
        record = twins.store() / "k1"
        record.mkdir()
        (record / "twin.json").write_bytes(about)
        (record / "metrics.jsonl").write_bytes(metrics)
        found = twins.stored("k1")
        if found is not None:  # what the judge reads of it is whole
            where, said = found
            assert said["key"] == "k1" and isinstance(said["files"], list)
        else:
            assert "k1" in twins._damaged or not about.strip()
        twins._damaged.clear()


NAMES = {"node_start", "fast_health_checks"}


@FUZZ
@given(st.one_of(BLOBS, JSON.map(lambda v: {"key": {}, "files": {}, "checksum": "", "answers": v})
                 .map(_text)))
def test_a_probe_record_is_used_whole_or_probed_again(raw):
    from rlsim.ray_internals import record

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ray_probes.json"
        path.write_bytes(raw)
        answers, damage = record.read(path, {}, lambda rels: {}, NAMES)
    if answers is not None:  # only what passed its checksum
        assert set(answers) == NAMES and damage is None
    else:
        assert damage is None or "ray_probes.json" in damage


@FUZZ
@given(st.one_of(BLOBS, JSON.map(lambda v: {"slot": 1, "session": "a-0123abcd", "spec": v})
                 .map(_text), JSON.map(lambda v: {"slot": v, "spec": {"name": "a"}}).map(_text)))
def test_a_state_file_is_a_state_or_corrupt(raw):
    from rlsim.host import state

    with tempfile.TemporaryDirectory() as tmp, _home(tmp):
        path = state.clusters_dir() / "a.json"
        path.write_bytes(raw)
        path.chmod(0o600)
        [entry] = state.scan()
    assert isinstance(entry, state.ClusterState | state.Corrupt)
    if isinstance(entry, state.Corrupt):
        assert entry.reason.isprintable() and "rlsim down a" in entry.fix
