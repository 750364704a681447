"""`rlsim plan` as pure logic: each framework's reader against real launch scripts and configs
from the frameworks' repositories (tests/fixtures/plan, each with its source and commit in its
first line), fits and misfits both, and the findings naming the flag or key to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlsim import commands as cli
from rlsim.plan import openrlhf, rlinf, roll, verl
from rlsim.plan.emit import scenario
from rlsim.plan.model import PlanInputError, parse_cluster, place
from rlsim.scenario.schema import Scenario

FIXTURES = Path(__file__).parents[1] / "fixtures" / "plan"


def judge(framework: str, fixture: str, cluster: str, *extra: str):
    nodes = parse_cluster(cluster)
    if framework in ("openrlhf", "verl"):
        text = (FIXTURES / fixture).read_text().rstrip() if fixture else ""
        reader = openrlhf if framework == "openrlhf" else verl
        return place(reader.layout([text + " " + " ".join(extra)] if text else list(extra)),
                     nodes)
    return place((roll if framework == "roll" else rlinf).layout(str(FIXTURES / fixture), nodes),
                 nodes)


@pytest.mark.parametrize(("framework", "fixture", "cluster", "fits", "asked"), [
    ("openrlhf", "openrlhf-v0.8.11-train_ppo_llama_ray.sh", "1x8", True, 8),
    ("openrlhf", "openrlhf-v0.8.11-train_ppo_llama_ray.sh", "1x6", False, 8),
    ("openrlhf", "openrlhf-v0.8.11-train_grpo_ray_hybrid_engine.sh", "1x8", True, 8),
    ("openrlhf", "openrlhf-v0.11.0-train_ppo_ray_hybrid_engine.sh", "1x8", True, 8),
    ("openrlhf", "openrlhf-v0.11.0-train_ppo_ray_slurm.sh", "2x8", True, 16),
    ("openrlhf", "openrlhf-v0.11.0-train_ppo_ray_slurm.sh", "1x8", False, 16),
    ("verl", "verl-run_qwen2-7b.sh", "1x8", True, 8),
    ("verl", "verl-run_qwen2.5-32b.sh", "4x8", True, 32),
    ("verl", "verl-run_qwen2.5-32b.sh", "2x8", False, 32),
    ("roll", "roll-example_grpo.yaml", "2x8", True, 16),
    ("roll", "roll-example_grpo.yaml", "1x8", False, 16),
    ("roll", "roll-agent_val_frozen_lake_async.yaml", "1x8", True, 8),
    ("roll", "roll-agent_val_frozen_lake_multi_nodes_demo.yaml", "2x2", True, 4),
    ("roll", "roll-agent_val_frozen_lake_multi_nodes_demo.yaml", "1x2", False, 4),
    ("rlinf", "rlinf-qwen2.5-1.5b-grpo-megatron.yaml", "16x8", True, 128),
    ("rlinf", "rlinf-qwen2.5-1.5b-grpo-megatron.yaml", "8x8", False, 128),
    ("rlinf", "rlinf-qwen2.5-1.5b-grpo-megatron-pipeline.yaml", "8x8", True, 64),
    ("rlinf", "rlinf-maniskill_ppo_openvla.yaml", "1x8", True, 8),
])
def test_real_examples_are_judged_with_their_numbers(framework, fixture, cluster, fits, asked):
    p = judge(framework, fixture, cluster)
    assert (p.fits, p.asked) == (fits, asked), [f.line() for f in p.findings]
    if not fits:
        assert any(str(asked) in f.message and str(p.there) in f.message for f in p.findings) \
            or any("cannot meet" in f.message or "waits until" in f.message for f in p.findings)


def test_where_each_role_lands():
    grpo = judge("openrlhf", "openrlhf-v0.8.11-train_grpo_ray_hybrid_engine.sh", "1x8")
    # colocate_all: in the order OpenRLHF creates them (the engines before the actor)
    assert grpo.gpu_map()[0][3] == ["vllm1.tp1", "actor3", "ref3", "reward3"]
    ppo = judge("openrlhf", "openrlhf-v0.8.11-train_ppo_llama_ray.sh", "2x4")
    assert [g.name for g in ppo.layout.groups] == ["actor+ref", "vllm", "critic+reward"]
    assert ppo.gpu_map()[1] == {0: ["vllm0.tp0"], 1: ["vllm0.tp1"], 2: ["vllm1.tp0"],
                                3: ["vllm1.tp1"]}  # the 4-GPU vLLM group packs onto node 1
    pipeline = judge("rlinf", "rlinf-qwen2.5-1.5b-grpo-megatron-pipeline.yaml", "8x8")
    assert pipeline.gpu_map()[0][0] == ["rollout", "reward"] and \
        pipeline.gpu_map()[2][0] == ["inference"] and pipeline.gpu_map()[7][7] == ["actor"]
    demo = judge("roll", "roll-agent_val_frozen_lake_multi_nodes_demo.yaml", "2x2")
    assert demo.gpu_map()[1][1] == ["actor_train", "actor_infer", "reference"]


OPENRLHF = "python3 -m openrlhf.cli.train_ppo_ray"


@pytest.mark.parametrize(("args", "words"), [
    # colocate_all: the vLLM engines must fill the actor's GPUs exactly
    ("--actor.num_gpus_per_node 4 --ref.num_gpus_per_node 4 --vllm.num_engines 4 "
     "--vllm.tensor_parallel_size 2 --train.colocate_all --reward.remote_url x "
     "--algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 4",
     ["actor GPUs (4) == vllm_num_engines x vllm_tensor_parallel_size (8)",
      "--vllm.num_engines 2"]),
    # DeepSpeed's batch equation on 3 data-parallel ranks
    ("--actor.num_gpus_per_node 3 --ref.num_gpus_per_node 3 --train.colocate_actor_ref "
     "--train.batch_size 32 --train.micro_batch_size 1 --reward.remote_url x "
     "--algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 4",
     ["actor: train batch 32 is not a multiple of micro batch 1 x 3", "--train.batch_size"]),
    # colocate_all with the reward model's default 8 GPUs on a 4-GPU actor group
    ("--actor_num_gpus_per_node 4 --ref_num_gpus_per_node 4 --vllm_num_engines 4 "
     "--colocate_all_models --advantage_estimator group_norm --n_samples_per_prompt 4",
     ["reward has 8 ranks but shares the 4-bundle group", "invalid placement group bundle"]),
])
def test_openrlhf_refusals_name_the_numbers_and_the_flag(args, words):
    p = place(openrlhf.layout([f"{OPENRLHF} {args}"]), parse_cluster("1x8"))
    text = " ".join(f.line() for f in p.findings)
    assert not p.fits and all(w in text for w in words), text


@pytest.mark.parametrize(("framework", "argv", "words"), [
    ("openrlhf", "python3 train.py --x 1", ["no entry point openrlhf.cli.train_ppo_ray"]),
    ("verl", "python3 -m verl.trainer.main_ppo trainer.nnode=2",
     ["Could not override 'trainer.nnode'", "+trainer.nnode=2"]),
    ("verl", "python3 -m verl.trainer.main_ppo --config-name=my_cfg", ["--config-name my_cfg"]),
])
def test_bad_commands_are_refused_naming_the_flag(framework, argv, words):
    reader = openrlhf if framework == "openrlhf" else verl
    with pytest.raises(PlanInputError) as e:
        reader.layout([argv])
    assert all(w in str(e.value) for w in words), str(e.value)


def test_verl_rollout_parallel_size_must_divide_the_gpus():
    p = judge("verl", "verl-run_qwen2-7b.sh", "1x8", "trainer.n_gpus_per_node=6",
              "actor_rollout_ref.rollout.tensor_model_parallel_size=4")
    text = " ".join(f.line() for f in p.findings)
    assert "rollout world_size 6 is not divisible by infer_world_size 4" in text
    assert "real_train_batch_size (5120" in text and "minimal possible batch size (6" in text


@pytest.mark.parametrize(("yaml_text", "words"), [
    ("actor_train: {device_mapping: [0, 1]}", ["not a string", "quote it"]),
    ("actor_train: {device_mapping: \"__import__('os').getcwd()\"}", ["not a list of GPU"]),
    ("actor_train: {device_mapping: 'list(range(0,3))'}\nactor_infer: {device_mapping: "
     "'list(range(0,3))', strategy_args: {strategy_name: vllm, strategy_config: "
     "{tensor_parallel_size: 2}}}", None),
    ("not_a_role: 1", ["no role has a device_mapping"]),
])
def test_roll_device_mappings_are_read_safely(tmp_path, yaml_text, words):
    path = tmp_path / "roll.yaml"
    path.write_text(yaml_text)
    if words is None:  # reads, but ROLL would assert: 3 GPUs in vLLM workers of 2
        p = place(roll.layout(str(path), parse_cluster("1x4")), parse_cluster("1x4"))
        assert "len(device_mapping)=3 must be divisible by num_gpus_per_worker=2" in \
            " ".join(f.message for f in p.findings)
        return
    with pytest.raises(PlanInputError) as e:
        roll.layout(str(path), parse_cluster("1x4"))
    assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize(("placement", "rollout_tp", "words"), [
    ({"actor": "0-3", "rollout": "2-5", "reward": "0-5"}, 1, ["does not match either"]),
    ({"actor": "0-3", "rollout": "6-13", "reward": "6-13"}, 4, ["across two nodes"]),
    ({"actor,rollout,reward": "0-15"}, 1, ["rank 15 is past the 8 accelerators"]),
])
def test_rlinf_reasoning_placement_rules(tmp_path, placement, rollout_tp, words):
    path = tmp_path / "rlinf.yaml"
    path.write_text(yaml.safe_dump({
        "cluster": {"num_nodes": 2, "component_placement": placement},
        "runner": {"task_type": "reasoning"}, "rollout": {"tensor_parallel_size": rollout_tp}}))
    nodes = parse_cluster("2x8" if "0-15" not in str(placement) else "2x4")
    p = place(rlinf.layout(str(path), nodes), nodes)
    text = " ".join(f.message for f in p.findings)
    assert not p.fits and all(w in text for w in words), text


GUIDE = {"shared": {"actor,rollout": "all"},  # RLinf's multi-node guide, 4 nodes x 8 GPUs
         "disaggregated": {"rollout": "0-19", "inference": "20-23", "actor": "24-31"}}


@pytest.mark.parametrize("example", GUIDE)
def test_rlinf_guide_placements_by_release(tmp_path, example):
    # the guide predates RLinf's reward worker: every release from v0.1-rc1 asserts a reward
    # placement, said with the fix; the commit before the reward worker runs them
    path = tmp_path / "rlinf.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"num_nodes": 4, "component_placement":
                                                GUIDE[example]}}))
    nodes = parse_cluster("4x8")
    p = place(rlinf.layout(str(path), nodes), nodes)
    assert not p.fits and p.asked == 32 and "RLinf main" in p.layout.version
    said = [f for f in p.findings if f.level == "error"]
    assert len(said) == 1 and "Reward GPUs must be specified" in said[0].message
    assert "actor,rollout,reward: all" in said[0].fix and "--release 78ddc653" in said[0].message
    old = place(rlinf.layout(str(path), nodes, "78ddc653"), nodes)
    assert old.fits and old.asked == 32 and not old.findings
    roles = {w for gpus in old.gpu_map().values() for ws in gpus.values() for w in ws}
    assert roles == set(",".join(GUIDE[example]).split(","))
    # with the reward placed as RLinf's own configs do, main runs them
    placement = dict(GUIDE[example])
    if example == "shared":
        placement = {"actor,rollout,reward": "all"}
    else:
        placement["reward"] = "0-19"
    path.write_text(yaml.safe_dump({"cluster": {"num_nodes": 4, "component_placement":
                                                placement}}))
    assert place(rlinf.layout(str(path), nodes), nodes).fits
    if example == "disaggregated":  # the same ranges on 3 nodes: the driver waits for a 4th
        three = parse_cluster("3x8")
        p = place(rlinf.layout(str(path), three), three)
        assert not p.fits and any("waits until 4 Ray nodes" in f.message for f in p.findings)


def test_the_emitted_scenario_is_a_valid_scenario_mirroring_the_layout():
    p = judge("openrlhf", "openrlhf-v0.8.11-train_ppo_llama_ray.sh", "1x8")
    sc = scenario(p, "ppo_llama_mirror")
    placement = sc["trainer"]["overrides"]["placement"]
    assert placement["roles"] == {"actor": "0-1", "ref": "0-1", "rollout": "2-5",
                                  "critic": "6-7"}
    assert sc["trainer"]["config"] == "ppo_tiny" and sc["cluster"]["nodes"] == 3
    Scenario.model_validate(sc)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def test_exit_codes_and_json():
    script = (FIXTURES / "verl-run_qwen2-7b.sh").read_text()
    code, out = run("plan", "verl", "--cluster", "1x8", "--json", "--", script)
    data = json.loads(out)
    assert code == 0 and data["fits"] and data["gpus_asked"] == data["gpus_there"] == 8
    assert data["groups"][0]["bundles"][0] == {"CPU": 3, "GPU": 1}
    code, out = run("plan", "verl", "--cluster", "1x4", "--", script)
    assert code == 1 and "DOES NOT FIT" in out and "asks for 8 GPUs, the cluster has 4" in out
    for args, words in ((["plan", "verl", "--cluster", "4y8"], "NODESxGPUS"),
                        (["plan", "ray", "--cluster", "1x8"], "rlsim plans openrlhf"),
                        (["plan", "roll", "--cluster", "1x8", "/nonexistent.yaml"],
                         "cannot read it"),
                        (["plan", "verl", "--cluster", "1x8", "--ray-address", "x:1"],
                         "give one of")):
        code, out = run(*args)
        assert code == 2 and words in out and "Traceback" not in out, out


def test_emitting_is_checked_by_the_reference_trainer_itself():
    from rlsim.plan.emit import mirrorable

    pipeline = scenario(judge("rlinf", "rlinf-qwen2.5-1.5b-grpo-megatron-pipeline.yaml", "8x8"),
                        "pipeline")
    # 16 rollout engines, 40 actor ranks: the fewest prompts that split over both
    assert pipeline["trainer"]["overrides"]["data"] == {"prompts_per_step": 80}
    mirrorable(pipeline)
    grpo = scenario(judge("roll", "roll-example_grpo.yaml", "2x8"), "grpo")
    # ROLL's rollout on GPUs 0-11 inside the actor's 0-15: the shared GPUs share workers
    assert grpo["trainer"]["overrides"]["placement"]["roles"]["rollout"] == "0-11"
    mirrorable(grpo)


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "openrlhf", "--cluster", "1x8", "--", f"{OPENRLHF} --ring_attn_size 0"],
     "zero or missing"),
    (["plan", "verl", "--cluster", "1x8", "--",
      "python3 -m verl.trainer.main_ppo trainer.nnodes=0"], "trainer.nnodes=0: give 1 or more"),
    (["plan", "verl", "--cluster", "1x8", "--",
      "python3 -m verl.trainer.main_ppo trainer.nnodes=-2"], "trainer.nnodes=-2: give 1 or more"),
    # sizes a reader would build lists of are bounded first (these hung, building them)
    (["plan", "verl", "--cluster", "1x8", "--",
      "python3 -m verl.trainer.main_ppo trainer.nnodes=99999999999"],
     "trainer.nnodes=99999999999: more than the 4096 rlsim plans"),
    (["plan", "verl", "--cluster", "2x99999999999", "--", "python3 -m verl.trainer.main_ppo"],
     "--cluster GPUs per node=99999999999: more than the 64"),
    (["plan", "verl", "--cluster", "9999999999x8", "--", "python3 -m verl.trainer.main_ppo"],
     "--cluster nodes=9999999999: more than the 4096"),
    (["plan", "openrlhf", "--cluster", "1x8", "--",
      f"{OPENRLHF} --actor_num_gpus_per_node 99999999999"],
     "--actor_num_gpus_per_node=99999999999: more than the 64"),
    (["plan", "verl", "--cluster", "1x8", "--", "python3 -m verl.trainer.main_ppo "
      "trainer.nnodes=abc"], "trainer.nnodes=abc: not a whole number"),
    (["plan", "verl", "--cluster", "1x8", "--", "python3 -m verl.trainer.main_ppo "
      "trainer.nnodes=.inf"], "trainer.nnodes=inf: not a whole number"),
    (["plan", "openrlhf", "--cluster", "1x8", "--",
      f"{OPENRLHF} --vllm_num_engines 100000 --vllm_tensor_parallel_size 100000"],
     "--vllm_num_engines x --vllm_tensor_parallel_size=10000000000: more than the 262144"),
    (["plan", "verl", "--cluster", "1x8", "--cpus-per-node", "-4", "--",
      "python3 -m verl.trainer.main_ppo"], "--cpus-per-node -4.0: give the CPUs"),
    (["plan", "verl", "--cluster", "1x8", "--rehearse", "--rehearse-timeout", "-1", "--",
      "python3 -m verl.trainer.main_ppo"], "--rehearse-timeout -1.0: give seconds"),
    (["plan", "verl", "--cluster", "1x8", "--emit-scenario", "/nonexistent-dir/x.yaml", "--",
      "python3 -m verl.trainer.main_ppo trainer.nnodes=1"], "cannot write it"),
])
def test_zero_sizes_and_unwritable_files_are_bad_input_not_tracebacks(args, words):
    code, out = run(*args)
    assert code == 2 and words in out and "Traceback" not in out, out


@pytest.mark.parametrize(("framework", "text", "words"), [
    ("roll", "actor_train:\n  device_mapping: list(range(0,100000000))\n",
     "100000000 is past the 262144 GPUs rlsim plans"),
    ("roll", "actor_train:\n  device_mapping: list(range(0,200000))+list(range(0,200000))\n",
     "400000 GPUs, more than the 262144 rlsim plans"),
    ("roll", "rewards: [1, 2]\n", "a section of the roll config has the wrong type"),
    ("roll", "actor_train:\n  device_mapping: '[0, 99999999999]'\n",
     "99999999999 is past the 262144 GPUs rlsim plans"),
    ("rlinf", "cluster: [1]\n", "a section of the rlinf config has the wrong type"),
    ("rlinf", "cluster:\n  num_nodes: 99999\n", "rlsim plans at most 4096 nodes"),
    ("roll", "actor_train: {device_mapping: [0,\n", "not YAML at line 2"),
    ("roll", b"\x89PNG\r\n\x1a\n\x00\xff", "not text (a binary file?)"),
])
def test_a_config_of_the_wrong_shape_or_size_is_bad_input(tmp_path, framework, text, words):
    path = tmp_path / "config.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    code, out = run("plan", framework, "--cluster", "2x8", str(path))
    assert code == 2 and words in out and "Traceback" not in out, out


@pytest.mark.parametrize(("argv", "words"), [
    (f"{OPENRLHF} --actor.num_gpus_per_node 8 --actor.num_gpu_per_node 8",
     ["--actor.num_gpu_per_node: no OpenRLHF release", "did you mean --actor.num_gpus_per_node"]),
    (f"{OPENRLHF} --actor.num_gpus_per_node 8 --colocate_all_models",
     ["--colocate_all_models is a flag of OpenRLHF v0.5.8-v0.10.1.post2, not of v0.11.0"]),
])
def test_flags_no_release_has_together_are_said_never_refused(argv, words):
    from rlsim.plan import openrlhf

    said = [c.message for c in openrlhf.layout(argv.split()).findings]
    for w in words:
        assert any(w in m for m in said), (w, said)


# a GRPO launch (flat flags of v0.9) whose critic is not created: its sizes are never read
GRPO = (f"{OPENRLHF} --actor_num_nodes 1 --actor_num_gpus_per_node 4 --vllm_num_engines 4 "
        "--advantage_estimator group_norm --n_samples_per_prompt 4 --remote_rm_url x "
        "--critic_num_nodes 0 --critic_num_gpus_per_node 0 --reward_num_nodes 0 "
        "--reward_num_gpus_per_node 0 --train_batch_size 32 --rollout_batch_size 8")


@pytest.mark.parametrize(("extra", "fits", "said"), [
    # ref, critic and reward not created (no KL, group_norm, a remote reward): zeros are inert
    ("--init_kl_coef 0 --ref_num_nodes 0 --ref_num_gpus_per_node 0", True, ""),
    # a created ref given no GPUs: OpenRLHF starts its rank 0 with world size 0, which dies
    ("--init_kl_coef 0.01 --ref_num_nodes 0 --ref_num_gpus_per_node 0", False,
     "TCPStore world size cannot be 0"),
    # colocated with the actor, the sizes must match: OpenRLHF asserts before that
    ("--init_kl_coef 0.01 --colocate_actor_ref --ref_num_nodes 0 --ref_num_gpus_per_node 0",
     False, "must be the same when colocate actor and ref model"),
])
def test_openrlhf_zero_sizes_are_read_as_openrlhf_reads_them(extra, fits, said):
    p = place(openrlhf.layout([f"{GRPO} {extra}"]), parse_cluster("1x8"))
    errors = [f.message for f in p.findings if f.level == "error"]
    assert p.fits == fits and (said in " ".join(errors) if said else not errors), errors
    assert not any("Division" in e or "divides" in e for e in errors)


def test_openrlhf_release_judges_strictly_and_the_default_selects_releases():
    # dotted flags of v0.10.2+ beside two flat flags those releases dropped (as OpenRLHF's own
    # v0.11.0 README has them): by default a warning each; as v0.11.0 judges, argparse refuses
    launch = (f"{OPENRLHF} --actor.num_gpus_per_node 8 --vllm.num_engines 4 "
              "--vllm.tensor_parallel_size 2 --train.colocate_all --ref.num_gpus_per_node 8 "
              "--reward.remote_url x --prompt_max_len 1024 --generate_max_len 1024")
    loose = place(openrlhf.layout([launch]), parse_cluster("1x8"))
    assert loose.fits and sum("--prompt_max_len is a flag of OpenRLHF v0.5.0" in f.message
                              for f in loose.findings if f.level == "warning") == 1
    strict = place(openrlhf.layout([launch], "v0.11.0"), parse_cluster("1x8"))
    errors = [f.message for f in strict.findings if f.level == "error"]
    assert not strict.fits and len(errors) == 2 and all("unrecognized arguments" in e
                                                         for e in errors)
    code, out = run("plan", "openrlhf", "--release", "v9.9", "--cluster", "1x8", "--", launch)
    assert code == 2 and "--release v9.9" in out and "v0.11.0" in out


def test_group_baselines_need_two_samples_a_prompt():
    p = place(openrlhf.layout([GRPO.replace("--n_samples_per_prompt 4",
                                            "--n_samples_per_prompt 1")]), parse_cluster("1x8"))
    assert not p.fits and any("group_norm requires n_samples_per_prompt > 1" in f.message
                              for f in p.findings)
