"""A tiny OpenRLHF task, made here with no download: prompts in OpenRLHF's prompt-dataset format,
a reward function file, and a 2-layer Qwen2 with random weights and a tokenizer trained on the
prompts (both from verl_task.py), all where ``python -m openrlhf.cli.train_ppo_ray`` reads them.

    python openrlhf_task.py OUT_DIR [--prompts 16] [--seed 1]

Writes ``OUT_DIR/prompts.jsonl`` (``{"input": question, "label": answer}`` a line: OpenRLHF's
``--data.input_key input --data.label_key label``), ``OUT_DIR/reward.py`` (``reward_func``, which
``--reward.remote_url OUT_DIR/reward.py`` loads in each vLLM engine) and ``OUT_DIR/model/`` (bf16:
OpenRLHF's vLLM engines load bfloat16, and its weight push asserts the trainer's dtype equals
theirs) for ``--actor.model_name_or_path``. The reward is the share of digits in the response,
which a random policy finds now and then and GRPO can raise within a few steps. Nothing is
rewritten when ``OUT_DIR/.done`` exists: a relaunched scenario keeps its task.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl_task import INSTRUCTION, questions, seeded, tiny_model

REWARD = '''\
"""The reward OpenRLHF's engines call for each sample: the share of digits in the response."""

import torch


def reward_func(queries, prompts, labels):
    rewards = []
    for query, prompt in zip(queries, prompts):
        response = query[len(prompt):] if query.startswith(prompt) else query
        chars = [c for c in response if not c.isspace()]
        rewards.append(sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0)
    scores = torch.tensor(rewards, dtype=torch.float32)
    return {"rewards": scores, "scores": scores, "extra_logs": {}}
'''


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if (args.out / ".done").exists():
        return 0
    rng, faker = seeded(args.seed)
    items = questions(args.prompts, rng, faker)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "prompts.jsonl").open("w") as f:
        for q in items:
            f.write(json.dumps({"input": f"{q['question']} {INSTRUCTION}",
                                "label": str(q["value"])}) + "\n")
    (args.out / "reward.py").write_text(REWARD)
    tok = tiny_model(items, args.out / "model", args.seed, dtype="bfloat16")
    (args.out / ".done").write_text("")
    print(f"openrlhf task: {len(items)} prompts, vocabulary {len(tok)}, model in "
          f"{args.out / 'model'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
