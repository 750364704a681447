"""matches_baseline on run directories written here: bit for bit by default, within rtol/atol
when a scenario allows it (trainers whose numbers are not bit-exact)."""

import json

import pytest
import torch
from safetensors.torch import save_file

from rlsim.checks import CHECKS, MatchesBaseline
from rlsim.history import Outcome


def run_dir(root, name, metrics, weight):
    d = root / name
    d.mkdir()
    rows = [{"step": s, "perf/step_s": 0.1 * s, **m} for s, m in enumerate(metrics, 1)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hf = d / "checkpoints" / f"global_step_{len(metrics)}" / "hf"
    hf.mkdir(parents=True)
    save_file({"w": torch.tensor([weight, 2.0])}, str(hf / "model.safetensors"))
    return d


def judge(tmp_path, run, twin, **params):
    o = Outcome(scenario=None, run_dir=run_dir(tmp_path, "run", *run),
                baseline_dir=run_dir(tmp_path, "twin", *twin))
    return CHECKS["matches_baseline"].judge(o, MatchesBaseline(**params))


TWIN = ([{"loss": 1.0, "reward": 0.5}, {"loss": 0.9, "reward": 0.6}], 1.0)


def test_equal_runs_match_bit_for_bit(tmp_path):
    v = judge(tmp_path, TWIN, TWIN)
    assert v.ok and "bit-identical" in v.message, v.message


def test_a_last_bit_off_fails_by_default_and_passes_within_a_tolerance(tmp_path):
    run = ([{"loss": 1.0, "reward": 0.5}, {"loss": 0.9 + 1e-9, "reward": 0.6}], 1.0 + 1e-7)
    v = judge(tmp_path, run, TWIN)
    assert not v.ok and "from step 2 on (1 steps)" in v.message, v.message
    (tmp_path / "run").rename(tmp_path / "old-run")
    (tmp_path / "twin").rename(tmp_path / "old-twin")
    v = judge(tmp_path, run, TWIN, rtol=1e-5)
    assert v.ok and "within rtol=1e-05, atol=0" in v.message, v.message


@pytest.mark.parametrize("run,needle", [
    (([{"loss": 1.0, "reward": 0.5}, {"loss": 0.95, "reward": 0.6}], 1.0),
     "metrics differ from the fault-free twin from step 2 on"),
    (([{"loss": 1.0, "reward": 0.5}, {"loss": 0.9}], 1.0), "from step 2 on"),  # a metric missing
    (([{"loss": 1.0, "reward": 0.5}], 1.0), "from step 2 on"),  # a step missing
    (([{"loss": 1.0, "reward": 0.5}, {"loss": float("nan"), "reward": 0.6}], 1.0),
     "from step 2 on"),
    ((TWIN[0], 1.5), "final weights differ in 1 tensors (first: w)"),
])
def test_what_a_tolerance_does_not_forgive(tmp_path, run, needle):
    v = judge(tmp_path, run, TWIN, rtol=1e-3, atol=1e-6)
    assert not v.ok and needle in v.message, v.message


def test_tolerances_are_not_negative():
    with pytest.raises(ValueError):
        MatchesBaseline(rtol=-1)


def _weights(tmp_path, name, tensors):
    path = tmp_path / name
    save_file(tensors, str(path))
    return path


@pytest.mark.parametrize("mine,theirs,exact,within", [
    ({"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([1.0, 2.0])}, True, True),
    # bit for bit means the bits: a zero of the other sign is another number's bits
    ({"w": torch.tensor([-0.0, 2.0])}, {"w": torch.tensor([0.0, 2.0])}, False, True),
    ({"w": torch.tensor([1.0, 2.0 + 1e-6])}, {"w": torch.tensor([1.0, 2.0])}, False, True),
    ({"w": torch.tensor([1.0, 2.5])}, {"w": torch.tensor([1.0, 2.0])}, False, False),
    ({"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)},
     {"w": torch.tensor([1.0, 2.015625], dtype=torch.bfloat16)}, False, True),
    ({"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)},
     {"w": torch.tensor([1.0, 2.5], dtype=torch.bfloat16)}, False, False),
    ({"w": torch.tensor([1.0, float("nan")])}, {"w": torch.tensor([1.0, float("nan")])}, True,
     False),
    ({"w": torch.tensor([[1.0, 2.0]])}, {"w": torch.tensor([1.0, 2.0])}, False, False),
    ({"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([1.0, 2.0], dtype=torch.float64)},
     False, False),
])
def test_weights_are_compared_as_torch_would_without_importing_it(tmp_path, mine, theirs, exact,
                                                                   within):
    from rlsim.checks.baseline import _safetensors, _tensors_close

    a = _safetensors(_weights(tmp_path, "a.safetensors", mine))["w"]
    b = _safetensors(_weights(tmp_path, "b.safetensors", theirs))["w"]
    assert (a == b) is exact
    assert _tensors_close(a, b, rtol=1e-2, atol=1e-5) is within
    if a[:2] == b[:2]:  # what torch says, where it compares at all
        assert within == torch.allclose(mine["w"].double(), theirs["w"].double(), rtol=1e-2,
                                        atol=1e-5)


def test_a_file_that_is_not_safetensors_fails_the_comparison_in_words(tmp_path):
    from rlsim.checks.baseline import _same_weights

    for d in ("run", "twin"):
        hf = tmp_path / d / "checkpoints" / "global_step_3" / "hf"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    ok, why = _same_weights(tmp_path / "run", tmp_path / "twin", 3)
    assert not ok and "is not a safetensors file" in why and "cannot be compared" in why, why


# ---- every tensor, both ways; records read back damaged are named, never a traceback -------


def _export(d, tensors, step=2):
    path = d / "checkpoints" / f"global_step_{step}" / "hf" / "model.safetensors"
    path.unlink()
    save_file(tensors, str(path))


BOTH = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5])}


@pytest.mark.parametrize("run,twin,needle", [
    ({}, BOTH, "the run's final HF export at step 2 holds no tensors"),  # the export emptied
    (BOTH, {}, "the twin's final HF export at step 2 holds no tensors"),
    ({"w": BOTH["w"]}, BOTH, "differ in 1 tensors (first: b, missing from the run's export)"),
    (BOTH, {"w": BOTH["w"]}, "differ in 1 tensors (first: b, missing from the twin's export)"),
    ({**BOTH, "e": torch.zeros(0)}, {**BOTH, "e": torch.zeros(0)},
     "first: e, empty in the run's export"),
])
def test_a_tensor_missing_extra_or_empty_on_either_side_fails_naming_it(tmp_path, run, twin,
                                                                         needle):
    o = Outcome(scenario=None, run_dir=run_dir(tmp_path, "run", *TWIN),
                baseline_dir=run_dir(tmp_path, "twin", *TWIN))
    _export(o.run_dir, run)
    _export(o.baseline_dir, twin)
    for params in ({}, {"rtol": 1e-3}):
        v = CHECKS["matches_baseline"].judge(o, MatchesBaseline(**params))
        assert not v.ok and needle in v.message, v.message


def test_all_tensors_equal_say_how_many(tmp_path):
    o = Outcome(scenario=None, run_dir=run_dir(tmp_path, "run", *TWIN),
                baseline_dir=run_dir(tmp_path, "twin", *TWIN))
    _export(o.run_dir, BOTH)
    _export(o.baseline_dir, BOTH)
    v = CHECKS["matches_baseline"].judge(o, MatchesBaseline())
    assert v.ok and "final weights bit-identical (2 tensors)" in v.message, v.message


def test_a_header_that_does_not_describe_its_bytes_is_not_weights(tmp_path):
    """Offsets past the data were sliced short before, so two damaged exports compared equal."""
    from rlsim.checks.baseline import _safetensors

    for entry in ({"dtype": "F32", "shape": [2], "data_offsets": [0, 800]},
                  {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]},
                  {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]},
                  {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]},
                  {"dtype": "F32", "shape": [2], "data_offsets": "08"}, [1]):
        header = json.dumps({"w": entry}).encode()
        path = tmp_path / "x.safetensors"
        path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
        with pytest.raises(ValueError, match="is not a safetensors file"):
            _safetensors(path)
    deep = b"[" * 100_000
    path.write_bytes(len(deep).to_bytes(8, "little") + deep)
    with pytest.raises(ValueError, match="nested too deep"):
        _safetensors(path)


def test_an_export_that_is_a_fifo_or_a_link_to_the_twins_is_refused_not_read(tmp_path):
    import os
    import threading

    from rlsim.checks.baseline import _same_weights

    o = Outcome(scenario=None, run_dir=run_dir(tmp_path, "run", *TWIN),
                baseline_dir=run_dir(tmp_path, "twin", *TWIN))
    export = o.run_dir / "checkpoints" / "global_step_2" / "hf" / "model.safetensors"
    export.unlink()
    os.mkfifo(export)
    done = []
    worker = threading.Thread(target=lambda: done.append(
        _same_weights(o.run_dir, o.baseline_dir, 2)), daemon=True)
    worker.start()
    worker.join(30)
    assert done and not done[0][0] and "is a FIFO" in done[0][1], done
    export.unlink()
    export.symlink_to(o.baseline_dir / "checkpoints" / "global_step_2" / "hf" /
                      "model.safetensors")
    ok, why = _same_weights(o.run_dir, o.baseline_dir, 2)
    assert not ok and "is the twin's own file" in why, why
    # a link to a copy of its own (weights linked from a cache) is read as the run's export
    copy = tmp_path / "cache" / "model.safetensors"
    copy.parent.mkdir()
    copy.write_bytes(export.read_bytes())
    export.unlink()
    export.symlink_to(copy)
    ok, why = _same_weights(o.run_dir, o.baseline_dir, 2)
    assert ok, why


def _metrics_judge(tmp_path, run_text=None, twin_text=None, about=None):
    o = Outcome(scenario=None, run_dir=run_dir(tmp_path, "run", *TWIN),
                baseline_dir=run_dir(tmp_path, "twin", *TWIN), baseline_about=about)
    for d, text in ((o.run_dir, run_text), (o.baseline_dir, twin_text)):
        if text is not None:
            (d / "metrics.jsonl").write_text((d / "metrics.jsonl").read_text() + text)
    return CHECKS["matches_baseline"].judge(o, MatchesBaseline())


def test_a_torn_last_line_of_a_killed_run_is_left_out_and_said(tmp_path):
    v = _metrics_judge(tmp_path, run_text='{"step": 3, "loss": 0.')
    assert v.ok, v.message
    assert "the last line of the run's metrics.jsonl was cut short" in v.message, v.message


@pytest.mark.parametrize("run_text,twin_text,needle", [
    ('{"step": 3, "loss": 0.\n{"step": 4}\n', None, "line 3 is not JSON"),
    ('{"loss": 0.1}\n', None, "row 3 is not a metrics row (a JSON object with an integer step)"),
    ('[1, 2]\n', None, "row 3 is not a metrics row"),
    ('{"step": "3"}\n', None, "row 3 is not a metrics row"),
    ('[' * 100_000 + "\n{}\n", None, "line 3 is not JSON (nested too deep)"),
    (None, "not json\n", "line 3 is not JSON"),
    (None, '{"loss": 1}\n', "row 3 is not a metrics row"),
    (None, '{"step": 3, "lo', "its last line is cut short"),
])
def test_damaged_metrics_are_a_named_verdict(tmp_path, run_text, twin_text, needle):
    v = _metrics_judge(tmp_path, run_text, twin_text)
    assert not v.ok and needle in v.message, v.message
    if twin_text is not None:
        assert "twin/metrics.jsonl" in v.message and "`--fresh-twin`" in v.message, v.message


@pytest.mark.parametrize("made", [1e300, float("nan"), -1e300, "yesterday", None, [1]])
def test_a_twin_made_at_no_time_is_said_so(tmp_path, made):
    v = _metrics_judge(tmp_path, about={"key": "abc", "made": made, "cached": True})
    assert v.ok and "(twin abc, kept from an earlier run, made ?)" in v.message, v.message
