"""Prompt sets with a verifiable reward, and a seeded dataloader whose position is checkpointed.

The task: a prompt is six digits and ``=`` (digits taken from faker's phone numbers, postcodes and
card numbers); the right answer repeats the prompt's last digit in every response token. Reward is
the share of response tokens that do. Chance is 1/12; a random-init 2-layer GPT learns it within
tens of GRPO steps on one CPU core.

Regenerate the shipped fixture (byte-identical for the same seed)::

    python -m trainer.data trainer/presets/digits.jsonl --count 512 --seed 1234
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer.config import read_small_file
from trainer.errors import ConfigError

if TYPE_CHECKING:
    import torch

MAX_PROMPT_BYTES = 64 * 1024**2  # the prompt sets this trainer reads are kilobytes

DIGITS = 6
EQ, PAD = 10, 11  # token ids: 0-9 are the digits themselves
PROMPT_CHARS = frozenset("0123456789=")


def generate(count: int, seed: int) -> list[dict]:
    """``count`` prompts from faker, seeded: the same arguments give the same list."""
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    sources = (fake.msisdn, fake.postcode, fake.credit_card_number, fake.ean13)
    out = []
    for i in range(count):
        digits = "".join(ch for ch in sources[i % len(sources)]() if ch.isdigit())
        digits = digits.rjust(DIGITS, "0")[-DIGITS:]
        out.append({"id": i, "prompt": digits + "=", "answer": digits[-1]})
    return out


def encode(prompt: str) -> list[int]:
    return [EQ if ch == "=" else int(ch) for ch in prompt]


def read_prompts(path: str | Path) -> list[list[int]]:
    """The token ids of every prompt in a jsonl file, one ``{"prompt": "123456="}`` object a line.

    Raises :class:`ConfigError` naming ``data.path``, the line and the fix for a file that is
    missing, unreadable, not UTF-8, empty, or has a line of another shape; never a traceback.
    """
    where = f"data.path={str(path)!r}"
    try:
        text = read_small_file(path, MAX_PROMPT_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such prompt file. Fix: point data.path at a jsonl "
                          "file such as trainer/presets/digits.jsonl (the default)") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a directory. Fix: point data.path at a jsonl file "
                          "inside it") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror}). Fix: make it readable "
                          "by this user") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start}). Fix: data.path takes a "
                          "jsonl file, one JSON object a line") from None
    except ValueError as e:
        raise ConfigError(f"{where}: {e}. Fix: data.path takes a jsonl file, one JSON object "
                          "a line") from None
    rows = [_prompt_row(line, f"{where} line {n}")
            for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        raise ConfigError(f"{where}: the file holds no prompts. Fix: one line per prompt, "
                          'e.g. {"prompt": "123456="}')
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        raise ConfigError(f"{where}: prompts of {sorted(widths)} tokens; they must all have the "
                          "same length (six digits and '=')")
    return rows


def _prompt_row(line: str, where: str) -> list[int]:
    example = 'Fix: write one JSON object a line, e.g. {"prompt": "123456="}'
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{where}: not JSON ({getattr(e, 'msg', e)}). {example}") from None
    prompt = row.get("prompt") if isinstance(row, dict) else None
    if not isinstance(prompt, str) or not prompt:
        raise ConfigError(f"{where}: no \"prompt\" string. {example}")
    if not set(prompt) <= PROMPT_CHARS:
        raise ConfigError(f"{where}: prompt {prompt[:40]!r} has characters other than the "
                          f"digits 0-9 and '=' (the fixtures' tokenizer). {example}")
    return encode(prompt)


def load_prompts(path: str | Path) -> np.ndarray:
    """All prompts of a jsonl file as one (N, 7) array of int64 token ids (errors as
    :func:`read_prompts`): the driver holds arrays, the workers make tensors of them."""
    return np.array(read_prompts(path), dtype=np.int64)


def fingerprint(path: str | Path, prompts: np.ndarray) -> dict:
    """What a checkpoint records of the prompts it was trained on, to be compared on resume:
    where they came from, how many, and a digest of the prompts themselves (the token ids, so
    the same prompts formatted otherwise are the same data)."""
    import hashlib

    return {"path": str(path), "prompts": int(len(prompts)),
            "sha256": hashlib.sha256(np.ascontiguousarray(prompts).tobytes()).hexdigest()[:16]}


def reward(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Rule-based reward in [0, 1]: share of response tokens equal to the prompt's last digit.
    Computed on a worker, with tensor methods only: this module imports no torch."""
    target = prompts[:, DIGITS - 1 : DIGITS]
    return (responses == target).float().mean(dim=1)


@dataclass
class PromptLoader:
    """Seeded epoch shuffles; ``state()``/``load_state()`` let a resumed run draw the same
    batches."""

    size: int
    batch: int
    seed: int
    epoch: int = 0
    cursor: int = 0

    def _order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next_indices(self) -> list[int]:
        if self.cursor + self.batch > self.size:
            self.epoch, self.cursor = self.epoch + 1, 0
        idx = self._order()[self.cursor : self.cursor + self.batch]
        self.cursor += self.batch
        return idx

    def state(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state(self, state: dict) -> None:
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="write a seeded faker prompt set")
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    lines = [json.dumps(r, sort_keys=True) for r in generate(args.count, args.seed)]
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
