"""The fake-GPU memory ledger as data: estimates by ZeRO stage, OOM wording, auto halving."""

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.memory import GIB, check_gpu, fit, param_count, role_items
from trainer.oom import SimulatedCudaOOM
from trainer.placement import plan_placement


def big(**kw) -> TrainerConfig:
    """A 7B-parameter model accounted on 8 GPUs of one node, colocated."""
    base = {"memory": {"model_params_b": 7.0}, "placement": {"nnodes": 1, "gpus_per_node": 8},
            "data": {"prompts_per_step": 32}, "actor": {"micro_batch_size": 4}}
    for k, v in kw.items():
        base[k] = base.get(k, {}) | v
    return TrainerConfig.model_validate(base)


def by_what(items):
    return {i.what: i.nbytes / GIB for i in items}


def test_param_count_matches_the_real_model():
    from trainer.model import build_policy

    cfg = TrainerConfig()
    model = build_policy(cfg.model, 0)
    unique = sum(p.numel() for p in model.parameters())  # lm_head is tied to the embedding
    assert param_count(cfg) == unique


@pytest.mark.parametrize("stage,weights,grads,optim", [
    (0, 13.04, 13.04, 78.23), (1, 13.04, 13.04, 9.78), (2, 13.04, 1.63, 9.78),
    (3, 1.63, 1.63, 9.78)])
def test_zero_stages_partition_what_they_should(stage, weights, grads, optim):
    cfg = big(actor={"zero_stage": stage})
    items = by_what(role_items(cfg, plan_placement(cfg), "actor", {"actor": 4, "critic": 4},
                               80 * GIB))
    assert items["weights"] == pytest.approx(weights, abs=0.01)
    assert items["grads"] == pytest.approx(grads, abs=0.01)
    assert items["optimizer"] == pytest.approx(optim, abs=0.01)


def test_ddp_holds_everything_on_every_gpu_and_ooms_like_torch():
    cfg = big(actor={"engine": "ddp"})
    plan = plan_placement(cfg)
    with pytest.raises(torch.OutOfMemoryError) as e:
        check_gpu(cfg, plan, 3, {"actor": 4, "critic": 4}, 80 * GIB)
    msg = str(e.value)
    assert msg.startswith("CUDA out of memory. Tried to allocate")
    assert "GPU 3 has a total capacity of 80.00 GiB" in msg
    assert "role=actor node=0 gpu=3" in msg and "allocating optimizer" in msg
    assert "set actor.engine=deepspeed with actor.zero_stage>=1" in msg
    assert "Fix:" in msg and isinstance(e.value, SimulatedCudaOOM)


def test_activations_overflow_names_micro_batch_and_auto_halving_fixes_it():
    cfg = big(actor={"zero_stage": 3, "micro_batch_size": 128}, data={"prompts_per_step": 64},
              rollout={"n_samples": 16, "response_length": 512})
    plan = plan_placement(cfg)
    with pytest.raises(SimulatedCudaOOM, match=r"reduce actor.micro_batch_size \(now 128\)"):
        fit(cfg, plan, 80 * GIB)
    cfg.actor.auto_micro_batch = True
    micro, changes = fit(cfg, plan, 80 * GIB)
    assert micro["actor"] < 128 and changes[0] == "actor.micro_batch_size 128 -> 64"


def test_colocated_roles_add_up_and_the_fix_mentions_disaggregation():
    cfg = big(actor={"zero_stage": 3}, rollout={"engine": "vllm", "gpu_memory_utilization": 0.9,
                                                "free_cache_after_generate": False})
    with pytest.raises(SimulatedCudaOOM) as e:
        fit(cfg, plan_placement(cfg), 80 * GIB)
    assert "placement.mode=disaggregated" in str(e.value)


def test_reserve_from_others_counts():
    cfg = big(actor={"zero_stage": 3})
    plan = plan_placement(cfg)
    fit(cfg, plan, 80 * GIB)
    cfg.memory.reserve_gb = 70
    with pytest.raises(SimulatedCudaOOM, match="70.00 GiB by others"):
        fit(cfg, plan, 80 * GIB)


def test_the_tiny_fixture_fits_easily():
    cfg = TrainerConfig()
    micro, changes = fit(cfg, plan_placement(cfg), 80 * GIB)
    assert changes == [] and micro["actor"] == cfg.actor.micro_batch_size


@pytest.mark.parametrize("gb", [40, 80])
def test_a_vllm_engine_takes_its_share_of_the_gpu_it_is_on(gb):
    # vLLM reserves gpu_memory_utilization of the GPU at start-up, weights included
    cfg = big(rollout={"engine": "vllm", "gpu_memory_utilization": 0.5})
    items = by_what(role_items(cfg, plan_placement(cfg), "rollout", {"actor": 4, "critic": 4},
                               gb * GIB))
    assert items["weights"] + items["kv_cache"] == pytest.approx(0.5 * gb, abs=0.01)
