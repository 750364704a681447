"""Checks that a loaded config can start, made before Ray starts and before anything is written.

A field that passes loading can still doom a run: a prompt file that is missing or of another
shape, a model whose heads do not divide its width, a checkpoint to resume that is not there, a
placement that cannot fit itself. Each of these would otherwise surface only after the cluster is
joined and the workers are up, minutes in, with the run directory already written. Here they fail
in well under a second, naming the field and the fix.

Pure: reads the files the config names, writes nothing, imports no Ray. What needs the cluster
(enough alive nodes and GPUs) is checked by the driver once it has joined.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainer import checkpoint as ckpt
from trainer.config import (
    HF_CONFIG,
    HF_WEIGHTS,
    TrainerConfig,
    hf_config_problem,
    read_small_file,
)
from trainer.data import read_prompts
from trainer.errors import ConfigError, PlacementError
from trainer.placement import plan_placement


def preflight(cfg: TrainerConfig) -> None:
    """Raise :class:`ConfigError` naming the field and the fix for the first problem found."""
    _check_model(cfg)
    _check_data(cfg)
    _check_run_dir(cfg)
    _check_resume(cfg)
    try:
        plan_placement(cfg)
    except PlacementError as e:
        raise ConfigError(str(e)) from None


def _check_model(cfg: TrainerConfig) -> None:
    mc = cfg.model
    if mc.path is None and mc.n_embd % mc.n_head:
        raise ConfigError(
            f"model.n_head={mc.n_head} does not divide model.n_embd={mc.n_embd}: every attention "
            f"head gets n_embd / n_head dims. Fix: make n_embd a multiple of n_head (e.g. "
            f"model.n_embd={mc.n_embd + mc.n_head - mc.n_embd % mc.n_head})")
    if mc.path is None:
        return
    path = Path(mc.path)
    if not path.is_dir():
        raise ConfigError(f"model.path={mc.path!r}: no such directory. Fix: point it at a local "
                          "Hugging Face model directory, or drop it for a random-init model")
    if not (path / HF_CONFIG).is_file():
        raise ConfigError(f"model.path={mc.path!r} has no {HF_CONFIG}: not a Hugging Face model "
                          "directory. Fix: point it at the directory save_pretrained() wrote")
    try:
        hf = json.loads(read_small_file(path / HF_CONFIG, 1 << 20))
    except (OSError, ValueError) as e:
        raise ConfigError(f"model.path={mc.path!r}: {HF_CONFIG} cannot be read ({e}). Fix: point "
                          "it at the directory save_pretrained() wrote") from None
    problem = hf_config_problem(hf) if isinstance(hf, dict) else f"{HF_CONFIG} is not a mapping"
    if problem:
        raise ConfigError(f"model.path={mc.path!r}: {problem}. Fix: export a GPT-2 "
                          "(GPT2LMHeadModel.save_pretrained) or drop model.path")
    if not (path / HF_WEIGHTS).is_file():
        raise ConfigError(f"model.path={mc.path!r} has no {HF_WEIGHTS}. Fix: save with "
                          "safetensors (the default of save_pretrained)")


def _check_data(cfg: TrainerConfig) -> None:
    rows = read_prompts(cfg.data.path)
    width, count = len(rows[0]), len(rows)
    if cfg.data.prompts_per_step > count:
        raise ConfigError(
            f"data.prompts_per_step={cfg.data.prompts_per_step} exceeds the {count} prompts in "
            f"data.path={cfg.data.path!r}. Fix: lower data.prompts_per_step or add prompts")
    need = width + cfg.rollout.response_length
    if cfg.model.path is None and cfg.model.n_positions < need:
        raise ConfigError(
            f"model.n_positions={cfg.model.n_positions} is shorter than a prompt ({width} tokens "
            f"in data.path) plus rollout.response_length={cfg.rollout.response_length}. Fix: "
            f"model.n_positions={need} or more")


def _check_run_dir(cfg: TrainerConfig) -> None:
    """run_dir and checkpoint_dir must be, or be creatable as, directories this user can write."""
    for field, value in (("run_dir", cfg.run_dir), ("checkpoint_dir", cfg.checkpoint_dir)):
        if not value:
            continue
        path = Path(value).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise ConfigError(f"{field}={value!r}: {existing} is a file, not a directory. Fix: "
                              f"point {field} at a directory (it is created if missing)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(f"{field}={value!r}: {existing} is not writable by this user. "
                              f"Fix: point {field} somewhere writable")


def _check_resume(cfg: TrainerConfig) -> None:
    if cfg.resume in ("auto", "disable"):
        return
    path = Path(cfg.resume)
    if not path.is_dir():
        raise ConfigError(f"resume={cfg.resume!r}: no such checkpoint directory. Fix: point "
                          "resume at a global_step_N directory, or use resume=auto (the latest "
                          "valid checkpoint, if any) or resume=disable")
    if not (path / ckpt.MANIFEST).is_file():
        raise ConfigError(f"resume={cfg.resume!r} has no {ckpt.MANIFEST}: not a complete "
                          "checkpoint. Fix: point resume at a global_step_N directory a save "
                          "finished, or use resume=auto")
