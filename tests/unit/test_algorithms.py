"""GRPO and PPO math, the prompt set and the reward: pure functions on small tensors."""

import json
from pathlib import Path

import torch

from trainer import data
from trainer.config import PRESETS
from trainer.grpo import group_advantages
from trainer.losses import clipped_policy_loss, kl_k3
from trainer.ppo import gae

ROOT = Path(__file__).parents[2]


def test_group_advantages_are_normalised_within_each_group():
    adv = group_advantages(torch.tensor([0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5]), 4)
    assert torch.allclose(adv[:4].mean(), torch.tensor(0.0), atol=1e-6)
    assert adv[1] > 0 > adv[0]
    assert torch.all(adv[4:] == 0)  # a group where every answer scored the same teaches nothing


def test_gae_with_lambda_one_is_return_minus_value():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 0.6]])
    adv, ret = gae(rewards, values, gamma=1.0, lam=1.0)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0]]))
    assert torch.allclose(adv, ret - values)


def test_clipped_loss_and_k3():
    logp = torch.log(torch.tensor([0.5, 0.5]))
    loss, frac = clipped_policy_loss(logp, logp, torch.tensor([1.0, -1.0]), 0.2)
    assert loss.item() == 0.0 and frac.item() == 0.0
    assert kl_k3(logp, logp).item() == 0.0
    assert kl_k3(logp, logp - 1).item() > 0


def test_the_shipped_prompt_set_regenerates_byte_identical(tmp_path):
    out = tmp_path / "digits.jsonl"
    data.main([str(out), "--count", "512", "--seed", "1234"])
    assert out.read_bytes() == (PRESETS / "digits.jsonl").read_bytes()
    first = json.loads(out.read_text().splitlines()[0])
    assert first["answer"] == first["prompt"][-2]


def test_reward_is_the_share_of_tokens_repeating_the_last_digit():
    prompts = torch.tensor([data.encode("123457=")] * 2)
    assert data.reward(prompts, torch.tensor([[7, 7], [7, 3]])).tolist() == [1.0, 0.5]


def test_loader_resumes_on_the_same_batches():
    a = data.PromptLoader(10, 4, seed=3)
    seen = [a.next_indices() for _ in range(3)]  # crosses an epoch boundary
    b = data.PromptLoader(10, 4, seed=3)
    b.next_indices()
    state = b.state()
    c = data.PromptLoader(10, 4, seed=3)
    c.load_state(state)
    assert [c.next_indices(), c.next_indices()] == seen[1:]


def test_models_are_pure_functions_in_train_mode():
    """No dropout anywhere (the critic's head defaults to 0.1 in transformers): a forward pass must
    not depend on the process's RNG, or ranks and placements disagree and resume drifts."""
    from trainer.config import ModelConfig
    from trainer.model import build_critic, build_policy

    seqs = torch.tensor([data.encode("123457=") + [7, 7]] * 3)
    for build in (build_policy, build_critic):
        model = build(ModelConfig(), seed=5).train()
        torch.manual_seed(0)
        a = model(input_ids=seqs).logits
        torch.manual_seed(1)
        assert torch.equal(a, model(input_ids=seqs).logits)
        assert torch.equal(a, build(ModelConfig(), seed=5).train()(input_ids=seqs).logits)


def test_model_path_loads_an_hf_export(tmp_path):
    """``model.path`` loads real weights (here: the format checkpoints export the actor in)."""
    from trainer.config import ModelConfig
    from trainer.model import build_policy

    trained = build_policy(ModelConfig(), seed=9)
    trained.save_pretrained(tmp_path)
    loaded = build_policy(ModelConfig(path=str(tmp_path)), seed=0)
    a, b = trained.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
