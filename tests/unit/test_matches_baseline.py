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
    from rlsim.checks import _safetensors, _tensors_close

    a = _safetensors(_weights(tmp_path, "a.safetensors", mine))["w"]
    b = _safetensors(_weights(tmp_path, "b.safetensors", theirs))["w"]
    assert (a == b) is exact
    assert _tensors_close(a, b, rtol=1e-2, atol=1e-5) is within
    if a[:2] == b[:2]:  # what torch says, where it compares at all
        assert within == torch.allclose(mine["w"].double(), theirs["w"].double(), rtol=1e-2,
                                        atol=1e-5)


def test_a_file_that_is_not_safetensors_fails_the_comparison_in_words(tmp_path):
    from rlsim.checks import _same_weights

    for d in ("run", "twin"):
        hf = tmp_path / d / "checkpoints" / "global_step_3" / "hf"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    ok, why = _same_weights(tmp_path / "run", tmp_path / "twin", 3)
    assert not ok and "is not a safetensors file" in why and "cannot be compared" in why, why
