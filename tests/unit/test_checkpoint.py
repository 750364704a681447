"""Checkpoint I/O: atomic commit, validation, fallback, keep-last-K, and kill -9 mid-save."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainer import checkpoint as ckpt


def save(run: Path, step: int, payload: bytes = b"w" * 1000, keep: int = 3) -> Path:
    tmp = ckpt.begin(run, step)
    (tmp / "actor").mkdir()
    (tmp / "actor" / "weights.bin").write_bytes(payload)
    return ckpt.commit(run, step, tmp, {"step": step}, keep)


def test_commit_writes_manifest_pointer_and_prunes(tmp_path):
    for step in (1, 2, 3, 4):
        save(tmp_path, step)
    assert ckpt.pointer(tmp_path) == 4
    assert ckpt.steps(tmp_path) == [4, 3, 2]
    final = tmp_path / "global_step_4"
    manifest = json.loads((final / "manifest.json").read_text())
    assert set(manifest["files"]) == {"actor/weights.bin", "trainer_state.json"}
    assert ckpt.validate(final) is None and ckpt.read_state(final) == {"step": 4}
    assert not list(tmp_path.glob(".tmp-*"))


def test_corrupt_latest_falls_back_to_previous_valid(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    weights = tmp_path / "global_step_2" / "actor" / "weights.bin"
    weights.write_bytes(b"x" * 1000)  # same size, other bytes: only the checksum can tell
    path, rejected = ckpt.latest_valid(tmp_path)
    assert path.name == "global_step_1"
    assert "sha256" in rejected[0] and "global_step_2" in rejected[0]
    weights.write_bytes(b"short")
    assert "bytes" in ckpt.validate(weights.parents[1])


def test_missing_file_or_manifest_is_invalid(tmp_path):
    final = save(tmp_path, 5)
    (final / "actor" / "weights.bin").unlink()
    assert "missing" in ckpt.validate(final)
    (final / "manifest.json").unlink()
    assert "did not finish" in ckpt.validate(final)
    assert ckpt.latest_valid(tmp_path) == (None, [ckpt.validate(final)])


def test_resaving_a_step_replaces_it_whole(tmp_path):
    save(tmp_path, 3, b"a" * 10)
    save(tmp_path, 3, b"b" * 20)
    final = tmp_path / "global_step_3"
    assert (final / "actor" / "weights.bin").read_bytes() == b"b" * 20
    assert ckpt.validate(final) is None
    assert not list(tmp_path.glob(".trash-*"))


SAVER = """
import sys
from pathlib import Path
from trainer import checkpoint as ckpt
run = Path(sys.argv[1])
step = ckpt.pointer(run) or 0
print("ready", flush=True)
while True:
    step += 1
    tmp = ckpt.begin(run, step)
    for i in range(4):
        (tmp / f"part{i}.bin").write_bytes(bytes([step % 256]) * 400_000)
    ckpt.commit(run, step, tmp, {"step": step}, keep_last=2)
"""


def test_kill_9_at_random_points_never_leaves_the_pointer_on_a_partial_checkpoint(tmp_path):
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    kills = 0
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"  # imports done: saves start now
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        at = ckpt.pointer(tmp_path)
        if at is None:
            continue
        # the pointer names a complete checkpoint, whatever the kill interrupted
        assert ckpt.validate(tmp_path / f"global_step_{at}") is None
        path, _ = ckpt.latest_valid(tmp_path)
        assert path is not None
        ckpt.clean_temp(tmp_path)
    assert kills == 8 and ckpt.pointer(tmp_path) > 1  # saves did complete between kills


def test_files_only_other_nodes_see_make_the_checkpoint_unresumable_with_the_reason(tmp_path):
    save(tmp_path, 1)
    tmp = ckpt.begin(tmp_path, 2)
    (tmp / "rng").mkdir()
    (tmp / "rng" / "worker_0.pt").write_bytes(b"0")  # the driver's node wrote this one
    seen = {"10.0.0.10": ["rng/worker_0.pt"], "10.0.0.11": ["rng/worker_1.pt", "actor/x.pt"],
            "10.0.0.12": ["rng/worker_1.pt"]}
    not_here = ckpt.unseen(tmp, seen)
    assert not_here == {"actor/x.pt": ["10.0.0.11"], "rng/worker_1.pt": ["10.0.0.11", "10.0.0.12"]}
    final = ckpt.commit(tmp_path, 2, tmp, {"step": 2}, 3, not_here)
    assert ckpt.validate(final) is None  # what the driver sees is intact...
    try:
        ckpt.latest_valid(tmp_path)  # ...but no node can resume it, and step 1 is no better
    except ckpt.NotShared as e:
        assert "2 of its files exist only on node(s) 10.0.0.11, 10.0.0.12" in str(e)
        assert "actor/x.pt" in str(e) and "node-local disk" in str(e)
    else:
        raise AssertionError("a scattered checkpoint was offered for resume")
    one = tmp_path / "global_step_1"
    assert ckpt.unseen(one, {"a": ckpt.listing(one)}) == {}
