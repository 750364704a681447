"""The reference trainer's GPT-2 is Hugging Face's on disk: files either side writes, the other
loads, with the same logits (vLLM and users' tools read these exports)."""

import json

import pytest
import torch

from trainer.config import ModelConfig
from trainer.model import build_critic, build_policy, hf_config_problem, load_pretrained

transformers = pytest.importorskip("transformers")
SEQS = torch.tensor([[1, 2, 3, 10, 4, 5, 6, 7], [9, 8, 7, 10, 6, 5, 4, 3]])


def test_our_export_loads_in_transformers_with_the_same_logits(tmp_path):
    ours = build_policy(ModelConfig(n_layer=2, n_embd=32, n_head=4), seed=3)
    ours.save_pretrained(tmp_path)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=SEQS).logits, ours(input_ids=SEQS).logits)


def test_a_transformers_export_loads_here_with_the_same_logits(tmp_path):
    config = transformers.GPT2Config(vocab_size=12, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=SEQS).logits, hf(input_ids=SEQS).logits)


def test_same_seed_same_weights_and_the_critic_has_its_own():
    mc = ModelConfig()
    a, b = build_policy(mc, seed=4).state_dict(), build_policy(mc, seed=4).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    critic = build_critic(mc, seed=4)
    assert critic(input_ids=SEQS).logits.shape == (2, 8, 1)
    wte = "transformer.wte.weight"
    assert not torch.equal(critic.state_dict()[wte], a[wte])


@pytest.mark.parametrize("change, said", [
    ({"model_type": "llama"}, "GPT-2 only"),
    ({"activation_function": "relu"}, "activation_function"),
    ({"n_inner": 7}, "n_inner"),
])
def test_other_architectures_are_refused_by_name(change, said):
    hf = {"model_type": "gpt2", "n_embd": 32, **change}
    assert said in hf_config_problem(hf)
    assert hf_config_problem({"model_type": "gpt2", "n_embd": 32}) is None


def test_preflight_names_a_non_gpt2_model_path(tmp_path):
    from trainer.config import TrainerConfig
    from trainer.errors import ConfigError
    from trainer.preflight import preflight

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    cfg = TrainerConfig.model_validate({"model": {"path": str(tmp_path)},
                                        "run_dir": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match="model.path=.*GPT-2 only.*Fix"):
        preflight(cfg)
