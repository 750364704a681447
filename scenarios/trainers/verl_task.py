"""A tiny verl GRPO task, made here with no download: a GSM8K-shaped dataset in verl's data format,
a tokenizer trained on it, and a 2-layer Qwen2 with random weights, all written where verl's own
``main_ppo`` reads them.

    python verl_task.py OUT_DIR [--train 256] [--test 32] [--seed 1]

Writes ``OUT_DIR/{train,test}.parquet`` (columns as verl's ``examples/data_preprocess/gsm8k.py``
writes them: ``data_source`` "openai/gsm8k", ``prompt`` as chat messages, ``ability``,
``reward_model`` {style: rule, ground_truth}, ``extra_info``), so verl's own rule reward for GSM8K
(the number after ``####``) scores the responses; ``OUT_DIR/model/`` (``config.json``,
``model.safetensors``, the tokenizer files and a chat template) for
``actor_rollout_ref.model.path``.
Nothing is rewritten when ``OUT_DIR/.done`` exists: a relaunched scenario keeps its task.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL = ["<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<|unk|>"]


def questions(n: int, rng: random.Random, faker) -> list[dict]:
    out = []
    for _ in range(n):
        name, item = faker.first_name(), rng.choice(["apples", "pens", "books", "coins"])
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append({"question": f"{name} has {a} {item} and gets {b} more. How many {item} does "
                                f"{name} have?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
                    "value": a + b})
    return out


def rows(items: list[dict], split: str) -> list[dict]:
    return [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "user", "content": f"{q['question']} {INSTRUCTION}"}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(q["value"])},
             "extra_info": {"split": split, "index": i, "answer": q["answer"],
                            "question": q["question"]}}
            for i, q in enumerate(items)]


def tokenizer(texts: list[str], out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=384, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>",
                                   eos_token="<|end|>", unk_token="<|unk|>",
                                   bos_token=None, model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def model(tok, out: Path, seed: int, dtype: str = "float32") -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, tie_word_embeddings=True,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.eos_token_id, torch_dtype=dtype)
    Qwen2ForCausalLM(cfg).to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)


def tiny_model(items: list[dict], out: Path, seed: int, dtype: str = "float32"):
    """A tokenizer trained on the ``items``' questions and answers, and the model, in ``out``;
    the tokenizer back."""
    tok = tokenizer([f"{q['question']} {INSTRUCTION} {q['answer']}" for q in items], out)
    model(tok, out, seed, dtype)
    return tok


def seeded(seed: int):
    """The random source and the name maker of a task, both from ``seed``."""
    from faker import Faker

    Faker.seed(seed)
    return random.Random(seed), Faker()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--train", type=int, default=256)
    ap.add_argument("--test", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if (args.out / ".done").exists():
        return 0
    import pandas as pd

    rng, faker = seeded(args.seed)
    train, test = questions(args.train, rng, faker), questions(args.test, rng, faker)
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(train, "train")).to_parquet(args.out / "train.parquet")
    pd.DataFrame(rows(test, "test")).to_parquet(args.out / "test.parquet")
    tok = tiny_model(train + test, args.out / "model", args.seed)
    (args.out / ".done").write_text("")
    print(f"verl task: {len(train)} train and {len(test)} test prompts, vocabulary {len(tok)}, "
          f"model in {args.out / 'model'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
