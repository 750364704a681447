"""Bad input to ``python -m trainer``: exit 2, one message naming the file or field and the fix, no
traceback, and nothing written to ``run_dir`` (the run is refused before it starts).

One row per case. The table drives the trainer's CLI entry (``trainer.__main__.main``) in-process,
which is what ``python -m trainer`` runs; a few rows also go through a real subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainer.__main__ import main
from trainer.config import PRESETS

ROOT = Path(__file__).parents[2]
GRPO = PRESETS / "grpo_tiny.yaml"
DIGITS = PRESETS / "digits.jsonl"


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # {tmp} is the test's own directory (files made by ``files``)
    words: tuple[str, ...]  # all must appear in stderr
    config: str = str(GRPO)
    files: tuple[tuple[str, bytes], ...] = ()  # written under {tmp} first; name ending / = dir


PROMPT = b'{"prompt": "123456="}\n'
# nine levels of nine aliases each: 9**9 (387 million) values once expanded, in 300 bytes
BOMB = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]).encode()
CASES = [
    Case("config is a directory", (), ("is a directory", "--config"), config="{tmp}"),
    Case("config is binary", (), ("bin.yaml", "not UTF-8", "--config"), config="{tmp}/bin.yaml",
         files=(("bin.yaml", bytes(range(256))),)),
    Case("config missing", (), ("no such config file",), config="{tmp}/nope.yaml"),
    Case("config is a device", (), ("/dev/zero", "not a regular file"), config="/dev/zero"),
    Case("config is a list", (), ("list.yaml", "mapping"), config="{tmp}/list.yaml",
         files=(("list.yaml", b"- a\n- b\n"),)),
    Case("config nests too deeply", (), ("deep.yaml", "nests too deeply"),
         config="{tmp}/deep.yaml", files=(("deep.yaml", b"[" * 500),)),
    Case("config is an alias bomb", (), ("bomb.yaml", "aliases"), config="{tmp}/bomb.yaml",
         files=(("bomb.yaml", BOMB),)),
    Case("config is huge", (), ("huge.yaml", "bytes is no trainer config"),
         config="{tmp}/huge.yaml", files=(("huge.yaml", b"a: " + b"x" * (2 << 20)),)),
    Case("value then section", ("total_steps=5", "total_steps.x=1"),
         ("total_steps.x=1", "conflicts with", "total_steps=5")),
    Case("section then value", ("actor.lr=1", "actor=3"), ("actor=3", "conflicts with")),
    Case("override not YAML", ("actor.lr=[",), ("actor.lr=[", "not valid YAML", "Fix")),
    Case("override empty key part", ("actor..lr=1",), ("key=value",)),
    Case("unknown key", ("actor.lrr=1",), ("actor.lrr", "unknown key")),
    Case("infinite number", ("actor.lr=.inf",), ("actor.lr", "finite number")),
    Case("absurd seed", ("seed=100000000000000000000",), ("`seed`", "less than")),
    Case("data.path missing", ("data.path={tmp}/none.jsonl",), ("data.path", "no such prompt")),
    Case("data.path is a directory", ("data.path={tmp}",), ("data.path", "is a directory")),
    Case("data.path is a device", ("data.path=/dev/zero",), ("data.path", "not a regular file")),
    Case("data.path binary", ("data.path={tmp}/bin.jsonl",), ("data.path", "not UTF-8"),
         files=(("bin.jsonl", b"\xff\xfe\x00\x01" * 50),)),
    Case("data.path not JSON", ("data.path={tmp}/d.jsonl",), ("d.jsonl", "line 2", "not JSON"),
         files=(("d.jsonl", PROMPT + b"oops\n"),)),
    Case("data.path without prompt", ("data.path={tmp}/d.jsonl",), ("line 1", '"prompt"'),
         files=(("d.jsonl", b'{"text": "hello"}\n'),)),
    Case("data.path foreign tokens", ("data.path={tmp}/d.jsonl",), ("line 1", "digits"),
         files=(("d.jsonl", b'{"prompt": "hello="}\n'),)),
    Case("data.path ragged prompts", ("data.path={tmp}/d.jsonl",), ("same length",),
         files=(("d.jsonl", PROMPT * 16 + b'{"prompt": "12="}\n'),)),
    Case("data.path empty", ("data.path={tmp}/d.jsonl",), ("holds no prompts",),
         files=(("d.jsonl", b"\n"),)),
    Case("fewer prompts than a step", ("data.path={tmp}/d.jsonl",),
         ("data.prompts_per_step=16", "exceeds the 2 prompts"), files=(("d.jsonl", PROMPT * 2),)),
    Case("n_head does not divide n_embd", ("model.n_head=3",),
         ("model.n_head=3", "model.n_embd=64", "Fix")),
    Case("n_positions too short", ("model.n_positions=8",), ("model.n_positions", "9 or more")),
    Case("model.path missing", ("model.path={tmp}/nomodel",), ("model.path", "no such directory")),
    Case("model.path not a model", ("model.path={tmp}/m",), ("model.path", "config.json"),
         files=(("m/", b""),)),
    Case("resume missing", ("resume=/nonexistent",), ("resume='/nonexistent'", "resume=auto")),
    Case("resume not a checkpoint", ("resume={tmp}/ck",), ("manifest.json", "resume=auto"),
         files=(("ck/", b""),)),
    Case("run_dir is a file", ("run_dir={tmp}/f",), ("run_dir", "is a file"),
         files=(("f", b"x"),)),
    Case("run_dir under a file", ("run_dir={tmp}/f/run",), ("run_dir", "f is a file"),
         files=(("f", b"x"),)),
    # a NUL in a path: Path.resolve() raised ValueError ("embedded null byte") in the driver
    Case("run_dir with a NUL", ('run_dir="{tmp}/a\\0b"',), ("field `run_dir`", "NUL", "fix")),
    Case("data.path with a NUL", ('data.path="{tmp}/d\\0.jsonl"',), ("field `data.path`", "NUL")),
    Case("checkpoint_dir with a NUL in the file", (), ("nul.yaml", "field `checkpoint_dir`", "NUL"),
         config="{tmp}/nul.yaml", files=(("nul.yaml", b'checkpoint_dir: "/ck\\0"\n'),)),
    Case("resume with an escape", ('resume="/ck\\e[2J"',), ("field `resume`", "'\\x1b'")),
    Case("checkpoint_dir is a file", ("checkpoint_dir={tmp}/f",), ("checkpoint_dir", "is a file"),
         files=(("f", b"x"),)),
    Case("placement outside the run", ("placement.mode=disaggregated",
                                       'placement.roles={actor: 0-1, ref: 0-1, rollout: 2-3}'),
         ("placement.roles", "lies outside the run's 2 GPUs")),
    Case("batch does not split", ("placement.nnodes=3",),
         ("data.prompts_per_step=16", "3 rollout engines")),
]


def _setup(case: Case, tmp: Path) -> tuple[list[str], Path]:
    """The argv for ``case`` and its run_dir (inside ``tmp``, not created)."""
    for name, data in case.files:
        target = tmp / name
        if name.endswith("/"):
            target.mkdir()
        else:
            target.write_bytes(data)
    run_dir = tmp / "run"
    args = [a.replace("{tmp}", str(tmp)) for a in case.args]
    if not any(a.startswith("run_dir=") for a in args):
        args.append(f"run_dir={run_dir}")
    return ["--config", case.config.replace("{tmp}", str(tmp)), *args], run_dir


def _assert_refused(case: Case, rc: int, err: str, run_dir: Path, tmp: Path) -> None:
    assert rc == 2, f"{case.id}: exit {rc}\n{err}"
    assert "Traceback" not in err, err
    missing = [w for w in case.words if w not in err]
    assert not missing, f"{case.id}: {missing} not in {err!r}"
    assert err.startswith("trainer: ") and err.count("trainer: ") == 1, f"one message: {err!r}"
    assert not run_dir.exists(), f"{case.id}: {run_dir} was written before the checks"
    if (tmp / "f").is_file():
        assert (tmp / "f").read_bytes() == b"x"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_before_the_run_starts(case, tmp_path, capsys):
    argv, run_dir = _setup(case, tmp_path)
    rc = main(argv)  # an uncaught exception here is the traceback the contract rules out
    _assert_refused(case, rc, capsys.readouterr().err, run_dir, tmp_path)


SUBPROCESS = ("config is a directory", "override not YAML", "placement outside the run",
              "resume missing")


@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS], ids=SUBPROCESS)
def test_python_m_trainer_refuses_without_a_traceback(case, tmp_path):
    argv, run_dir = _setup(case, tmp_path)
    # a closed port: should a check ever let the run through, it must not join a real cluster
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-m", "trainer", *argv], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=env)
    _assert_refused(case, out.returncode, out.stderr, run_dir, tmp_path)
    assert out.stdout == ""


def test_preflight_passes_the_fixtures_without_ray_or_writes(tmp_path):
    """``rlsim validate`` calls load_config + preflight: they must not import Ray nor write."""
    code = ("import sys; from trainer.config import load_config, preflight\n"
            f"for name in ('grpo_tiny.yaml', 'ppo_tiny.yaml'):\n"
            f"    preflight(load_config({str(GRPO.parent)!r} + '/' + name,"
            f" ['data.path={DIGITS}', 'run_dir={tmp_path}/run']))\n"
            "assert 'ray' not in sys.modules, 'preflight imported ray'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_keys_value_is_not_echoed(tmp_path, capsys):
    """A file that is no trainer config (a file of secrets, given by mistake) names its keys but
    never prints their values."""
    config = tmp_path / "secrets.yaml"
    config.write_text("db_password: hunter2\n")
    assert main(["--config", str(config), f"run_dir={tmp_path}/run"]) == 2
    err = capsys.readouterr().err
    assert "db_password" in err and "unknown key" in err
    assert "hunter2" not in err
