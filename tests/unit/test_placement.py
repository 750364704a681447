"""Placement math as data, with the seeds' own examples."""

import pytest

from trainer.config import TrainerConfig
from trainer.errors import PlacementError
from trainer.placement import check_cluster, largest_fit, plan_placement, worker_bundles


def cfg(**kw) -> TrainerConfig:
    return TrainerConfig.model_validate(kw)


def rlinf(**roles) -> TrainerConfig:
    """RLinf's 4 x 8 example: rollout 0-19, inference (our ref) 20-23, actor 24-31."""
    ranges = {"rollout": "0-19", "ref": "20-23", "actor": "24-31"} | roles
    return cfg(placement={"nnodes": 4, "gpus_per_node": 8, "mode": "disaggregated",
                          "roles": ranges},
               data={"prompts_per_step": 40}, rollout={"n_samples": 8},
               actor={"micro_batch_size": 8})


def test_rlinf_ranges_on_4x8():
    plan = plan_placement(rlinf())
    assert plan.dp == {"rollout": 20, "ref": 4, "actor": 8}
    assert [w.node for w in plan.of("actor")] == [3] * 8
    assert [w.gpus for w in plan.of("ref")] == [(20,), (21,), (22,), (23,)]
    assert {w.node for w in plan.of("rollout")} == {0, 1, 2}
    assert len(worker_bundles(plan, 2)) == 8
    assert plan.warnings == ()
    check_cluster(plan, [8, 8, 8, 8])


def test_openrlhf_example_asking_40_gpus_on_32_fails_at_once():
    # OpenRLHF's 4-node example: actor, ref, reward, critic 8 GPUs each + 4 vLLM engines x TP 2
    c = cfg(algorithm="ppo", placement={
        "nnodes": 4, "gpus_per_node": 8, "mode": "disaggregated",
        "roles": {"actor": "0-7", "ref": "8-15", "reward": "16-23", "critic": "24-31",
                  "rollout": "32-39"}}, rollout={"tensor_parallel_size": 2})
    with pytest.raises(PlacementError) as e:
        plan_placement(c)
    msg = str(e.value)
    assert "placement.roles.rollout=32-39" in msg and "32 GPUs" in msg and "40 GPUs" in msg


def test_tensor_parallel_must_divide_gpus_per_node():
    c = cfg(placement={"nnodes": 2, "gpus_per_node": 6}, rollout={"tensor_parallel_size": 4})
    with pytest.raises(PlacementError, match="rollout.tensor_parallel_size=4 does not divide"):
        plan_placement(c)


def test_tp_engines_hold_tp_gpus_inside_one_node():
    plan = plan_placement(rlinf(rollout="0-19") .model_copy(
        update={"rollout": TrainerConfig().rollout.model_copy(update={
            "tensor_parallel_size": 4, "n_samples": 8})}))
    assert plan.dp["rollout"] == 5
    assert all(len({g // 8 for g in w.gpus}) == 1 and len(w.gpus) == 4
               for w in plan.of("rollout"))


def test_roles_on_shared_gpus_share_their_workers_and_keep_every_rank():
    plan = plan_placement(rlinf(ref="24-31"))
    assert all(set(w.roles) == {"actor", "ref"} for w in plan.of("actor"))
    assert any("use 28 of the run's 32" in w for w in plan.warnings)
    # ranges that overlap in part (ROLL's rollout on part of the actor's GPUs): each shared GPU's
    # worker hosts both, and every rank of every role has a worker
    plan = plan_placement(rlinf(ref="18-23"))
    assert [w.gpus for w in plan.workers if {"rollout", "ref"} <= set(w.roles)] == [(18,), (19,)]
    for role, n in plan.dp.items():
        assert [w.ranks[role] for w in plan.of(role)] == list(range(n))
    # a tensor-parallel engine on the actor's GPUs rides on its first GPU's worker: the actor
    # ranks on the engine's other GPUs are not swallowed by a two-GPU worker
    c = rlinf(actor="0-3", ref="0-3", rollout="0-3")
    c.rollout.tensor_parallel_size = 2
    plan = plan_placement(c)
    assert [w.ranks["actor"] for w in plan.of("actor")] == [0, 1, 2, 3]
    assert [w.gpus for w in plan.of("rollout")] == [(0,), (2,)]


def test_backwards_missing_and_unknown_ranges():
    with pytest.raises(PlacementError, match="runs backwards"):
        plan_placement(rlinf(actor="31-24"))
    c = rlinf()
    c.placement.roles = {"rollout": "0-19", "actor": "24-31"}
    with pytest.raises(PlacementError, match=r"lacks \['ref'\]"):
        plan_placement(c)
    c.placement.roles = {"rollout": "0-19", "actor": "24-31", "ref": "20-23", "judge": "0"}
    with pytest.raises(PlacementError, match="unknown role"):
        plan_placement(c)


def test_colocated_puts_every_role_on_every_gpu():
    plan = plan_placement(cfg(algorithm="ppo", placement={"nnodes": 2, "gpus_per_node": 1},
                              rollout={"n_samples": 4}))
    assert [w.node for w in plan.workers] == [0, 1]
    assert all(set(w.roles) == {"actor", "rollout", "ref", "critic"} for w in plan.workers)


def test_batches_must_split_over_data_parallel_ranks():
    with pytest.raises(PlacementError, match="data.prompts_per_step=10 does not split over 4"):
        plan_placement(cfg(placement={"nnodes": 2, "gpus_per_node": 2},
                           data={"prompts_per_step": 10}))
    with pytest.raises(PlacementError, match="actor.micro_batch_size=24 does not divide the 64"):
        plan_placement(cfg(actor={"micro_batch_size": 24}))


def test_cluster_too_small_names_the_numbers_and_the_fix():
    plan = plan_placement(cfg(placement={"nnodes": 2, "gpus_per_node": 8},
                              data={"prompts_per_step": 16}, actor={"micro_batch_size": 8}))
    with pytest.raises(PlacementError) as e:
        check_cluster(plan, [8, 4])
    assert "2 nodes x 8 GPUs = 16 GPUs" in str(e.value) and "placement.nnodes" in str(e.value)


def _elastic(nnodes: int, gpus: int, **extra) -> TrainerConfig:
    return TrainerConfig.model_validate({
        "data": {"prompts_per_step": 16}, "rollout": {"n_samples": 8},
        "actor": {"engine": "ddp", "micro_batch_size": 8},
        "placement": {"nnodes": nnodes, "gpus_per_node": gpus},
        "fault_tolerance": {"elastic": True}, **extra})


@pytest.mark.parametrize("asked,alive,fit", [
    ((2, 1), [1, 0], (1, 1)),          # a node's only GPU lost: the one left
    ((2, 2), [2, 1], (1, 2)),          # 2x1 or 1x2: two GPUs either way, more per node wins
    ((2, 2), [2, 2, 2], (2, 2)),       # a spare: the whole placement
    ((4, 1), [1, 1, 1, 0], (2, 1)),    # 3 nodes: 3 does not divide the 16 prompts: 2
    ((2, 4), [3, 3], (2, 2)),          # never more per node than asked, nor more than is alive
])
def test_an_elastic_rebuild_takes_the_largest_placement_that_fits_and_splits(asked, alive, fit):
    got = largest_fit(_elastic(*asked), alive, min_gpus=1)
    assert (got.placement.nnodes, got.placement.gpus_per_node) == fit
    assert got.data.prompts_per_step == 16  # the global batch: the samples a step consumes


def test_an_elastic_rebuild_under_min_gpus_or_on_nothing_is_none():
    assert largest_fit(_elastic(2, 2), [2, 1], min_gpus=3) is None
    assert largest_fit(_elastic(2, 1), [0, 0], min_gpus=1) is None


def test_elastic_refuses_zero_partitioned_optimizer_state_naming_the_fix():
    with pytest.raises(ValueError, match=r"ZeRO partitions the optimizer state.*actor.engine: ddp"):
        _elastic(2, 1, actor={"engine": "deepspeed", "zero_stage": 2})
    with pytest.raises(ValueError, match="placement.mode: colocated"):
        TrainerConfig.model_validate({
            "fault_tolerance": {"elastic": True}, "actor": {"engine": "ddp"},
            "placement": {"mode": "disaggregated", "roles": {"actor": "0-1", "rollout": "0-1",
                                                              "ref": "0-1"}}})
    assert _elastic(2, 1, actor={"engine": "deepspeed", "zero_stage": 0})
