"""The model: a GPT-2 causal LM (and a critic on the same backbone), random init, no downloads.

Written here rather than imported from ``transformers``: importing transformers costs 2.9 s of CPU
in every worker process of every attempt (it pulls in TorchDynamo, DTensor and sympy), more than
torch itself, for a model of a few dozen lines. On disk the model is Hugging Face's GPT-2: the same
parameter names, ``config.json`` and ``model.safetensors``, so ``save_pretrained`` output loads in
``transformers.GPT2LMHeadModel`` and vLLM, and ``model.path`` accepts a GPT-2 export from them.

The critic is the backbone with a one-output token head (like ``GPT2ForTokenClassification``).
There is no dropout: a forward pass is a pure function of weights and input (exact resume needs it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import HF_CONFIG, HF_WEIGHTS, LN_EPS, ModelConfig, hf_config_problem

INIT_STD = 0.02  # GPT-2's initializer_range


@dataclass
class Output:
    logits: torch.Tensor


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored (in, out), as in the original checkpoints."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1])


class Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(n_embd, 3 * n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        scores = q @ k.transpose(-1, -2) / math.sqrt(c // self.n_head)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        y = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(n_embd, 4 * n_embd)
        self.c_proj = Conv1D(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2's gelu_new


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.attn = Attention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.mlp = MLP(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Backbone(nn.Module):
    """GPT-2's ``transformer``: token and position embeddings, blocks, final layer norm."""

    def __init__(self, mc: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(mc.vocab_size, mc.n_embd)
        self.wpe = nn.Embedding(mc.n_positions, mc.n_embd)
        self.h = nn.ModuleList(Block(mc.n_embd, mc.n_head) for _ in range(mc.n_layer))
        self.ln_f = nn.LayerNorm(mc.n_embd, eps=LN_EPS)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class _GPT2(nn.Module):
    architecture = ""

    def __init__(self, mc: ModelConfig) -> None:
        super().__init__()
        self.mc = mc
        self.transformer = Backbone(mc)

    def init_weights(self) -> None:
        """GPT-2's initialisation: normal(0, 0.02) weights, zero biases, unit layer norms, and
        residual projections scaled down by sqrt(2 * n_layer)."""
        for name, p in self.named_parameters():
            if p.dim() == 1 and ".ln_" in name and name.endswith("weight"):
                nn.init.ones_(p)
            elif p.dim() == 1:
                nn.init.zeros_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, INIT_STD / math.sqrt(2 * self.mc.n_layer))
            else:
                nn.init.normal_(p, 0.0, INIT_STD)

    def save_pretrained(self, path: str | Path) -> None:
        """``config.json`` and ``model.safetensors`` as Hugging Face writes them for GPT-2."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()
                 if k != "lm_head.weight"}  # tied to the token embedding, as HF saves it
        save_file(state, str(path / HF_WEIGHTS), metadata={"format": "pt"})
        (path / HF_CONFIG).write_text(json.dumps(self.hf_config(), indent=2) + "\n")

    def hf_config(self) -> dict:
        mc = self.mc
        return {"model_type": "gpt2", "architectures": [self.architecture],
                "vocab_size": mc.vocab_size, "n_positions": mc.n_positions, "n_embd": mc.n_embd,
                "n_layer": mc.n_layer, "n_head": mc.n_head, "n_inner": None,
                "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
                "initializer_range": INIT_STD, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0, "tie_word_embeddings": True, "bos_token_id": None,
                "eos_token_id": None, "pad_token_id": None}


class GPT2LMHead(_GPT2):
    architecture = "GPT2LMHeadModel"

    def __init__(self, mc: ModelConfig) -> None:
        super().__init__(mc)
        self.lm_head = nn.Linear(mc.n_embd, mc.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2

    def forward(self, input_ids: torch.Tensor) -> Output:
        return Output(self.lm_head(self.transformer(input_ids)))


class GPT2TokenValue(_GPT2):
    architecture = "GPT2ForTokenClassification"

    def __init__(self, mc: ModelConfig) -> None:
        super().__init__(mc)
        self.classifier = nn.Linear(mc.n_embd, 1)

    def forward(self, input_ids: torch.Tensor) -> Output:
        return Output(self.classifier(self.transformer(input_ids)))


def _seeded(cls: type[_GPT2], mc: ModelConfig, seed: int) -> _GPT2:
    with torch.random.fork_rng(devices=[]):  # seeded init must not reset the caller's RNG
        torch.manual_seed(seed)
        model = cls(mc)
        model.init_weights()
    return model


def load_pretrained(path: str | Path) -> GPT2LMHead:
    """A GPT-2 from a local Hugging Face directory (``config.json`` + ``model.safetensors``)."""
    from safetensors.torch import load_file

    path = Path(path)
    hf = json.loads((path / HF_CONFIG).read_text())
    if problem := hf_config_problem(hf):
        raise ValueError(f"{path / HF_CONFIG}: {problem}")
    mc = ModelConfig(**{k: hf[k] for k in ("n_layer", "n_embd", "n_head", "vocab_size",
                                           "n_positions")})
    model = GPT2LMHead(mc)
    state = load_file(str(path / HF_WEIGHTS))
    # exports of GPT2LMHeadModel carry a "transformer." prefix; the original GPT-2 files do not
    state = {k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}": v
             for k, v in state.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    state.setdefault("lm_head.weight", state["transformer.wte.weight"])
    model.load_state_dict(state, strict=True)
    return model


def build_policy(mc: ModelConfig, seed: int) -> GPT2LMHead:
    """The actor/ref/rollout model: the same weights in every process for the same seed."""
    if mc.path:
        return load_pretrained(mc.path)
    return _seeded(GPT2LMHead, mc, seed)


def build_critic(mc: ModelConfig, seed: int) -> GPT2TokenValue:
    return _seeded(GPT2TokenValue, mc, seed + 1)


def response_logprobs(model: torch.nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probabilities of each response token under ``model``: shape (rows, response_len)."""
    logits = model(input_ids=seqs).logits[:, prompt_len - 1 : -1].float()
    return torch.gather(F.log_softmax(logits, -1), 2, seqs[:, prompt_len:, None]).squeeze(2)


def response_values(critic: torch.nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The critic's value before each response token: shape (rows, response_len)."""
    return critic(input_ids=seqs).logits[:, prompt_len - 1 : -1, 0].float()


@torch.no_grad()
def sample(model: torch.nn.Module, prompts: torch.Tensor, n: int, length: int,
           temperature: float, seeds: list[int]) -> torch.Tensor:
    """``n`` responses per prompt, batched; prompt ``i``'s draws come from its own generator seeded
    with ``seeds[i]``, so a response does not depend on how prompts were split over engines."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    seqs = prompts.repeat_interleave(n, dim=0)
    for _ in range(length):
        logits = model(input_ids=seqs).logits[:, -1].float() / temperature
        # the draw on the CPU whatever the model's device: a CUDA cumsum of floats has no
        # deterministic kernel (torch refuses it in deterministic mode), and CPU generators give
        # the same uniforms everywhere
        probs = torch.softmax(logits, -1).cpu()
        noise = torch.cat([torch.rand(n, 1, generator=g) for g in gens])
        # inverse-CDF draw with per-prompt uniforms: one categorical sample per row
        cdf = probs.cumsum(-1)
        nxt = (cdf < noise * cdf[:, -1:]).sum(-1, keepdim=True).clamp(max=probs.shape[1] - 1)
        seqs = torch.cat([seqs, nxt.to(seqs.device)], dim=1)
    return seqs
