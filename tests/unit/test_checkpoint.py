"""Checkpoint I/O: atomic commit, validation, fallback, keep-last-K, the writer lease.

Kills in the middle of a save are in test_checkpoint_crash.py.
"""

import json
import os
from pathlib import Path

import pytest

from trainer import checkpoint as ckpt
from trainer.config import PRESETS


@pytest.fixture
def lease(tmp_path):
    with ckpt.Lease.acquire(tmp_path) as held:
        yield held


def save(lease: ckpt.Lease, step: int, payload: bytes = b"w" * 1000, keep: int = 3) -> Path:
    tmp = ckpt.begin(lease.root, step)
    (tmp / "actor").mkdir()
    (tmp / "actor" / "weights.bin").write_bytes(payload)
    return ckpt.commit(lease, step, tmp, {"step": step}, keep)


def test_commit_writes_manifest_pointer_and_prunes(tmp_path, lease):
    for step in (1, 2, 3, 4):
        save(lease, step)
    assert ckpt.pointer(tmp_path) == 4
    assert ckpt.steps(tmp_path) == [4, 3, 2]
    final = tmp_path / "global_step_4"
    manifest = json.loads((final / "manifest.json").read_text())
    assert set(manifest["files"]) == {"actor/weights.bin", "trainer_state.json"}
    assert ckpt.validate(final) is None and ckpt.read_state(final) == {"step": 4}
    assert not list(tmp_path.glob(".tmp-*"))


def test_corrupt_latest_falls_back_to_previous_valid(tmp_path, lease):
    save(lease, 1)
    save(lease, 2)
    weights = tmp_path / "global_step_2" / "actor" / "weights.bin"
    weights.write_bytes(b"x" * 1000)  # same size, other bytes: only the checksum can tell
    path, rejected = ckpt.latest_valid(tmp_path)
    assert path.name == "global_step_1"
    assert "sha256" in rejected[0] and "global_step_2" in rejected[0]
    weights.write_bytes(b"short")
    assert "bytes" in ckpt.validate(weights.parents[1])


def test_missing_file_or_manifest_is_invalid(tmp_path, lease):
    final = save(lease, 5)
    (final / "actor" / "weights.bin").unlink()
    assert "missing" in ckpt.validate(final)
    (final / "manifest.json").unlink()
    assert "did not finish" in ckpt.validate(final)
    assert ckpt.latest_valid(tmp_path) == (None, [ckpt.validate(final)])


def test_resaving_a_step_replaces_it_whole(tmp_path, lease):
    save(lease, 3, b"a" * 10)
    save(lease, 3, b"b" * 20)
    final = tmp_path / "global_step_3"
    assert (final / "actor" / "weights.bin").read_bytes() == b"b" * 20
    assert ckpt.validate(final) is None
    assert not list(tmp_path.glob(".trash-*"))


def test_files_only_other_nodes_see_make_the_checkpoint_unresumable(tmp_path, lease):
    save(lease, 1)
    tmp = ckpt.begin(tmp_path, 2)
    (tmp / "rng").mkdir()
    (tmp / "rng" / "worker_0.pt").write_bytes(b"0")  # the driver's node wrote this one
    seen = {"10.0.0.10": ["rng/worker_0.pt"], "10.0.0.11": ["rng/worker_1.pt", "actor/x.pt"],
            "10.0.0.12": ["rng/worker_1.pt"]}
    not_here = ckpt.unseen(tmp, seen)
    assert not_here == {"actor/x.pt": ["10.0.0.11"], "rng/worker_1.pt": ["10.0.0.11", "10.0.0.12"]}
    final = ckpt.commit(lease, 2, tmp, {"step": 2}, 3, not_here)
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


# -- pruning: only this run's checkpoints, by commit order, valid ones counted --------------------
def test_an_earlier_runs_higher_steps_never_push_out_this_runs_checkpoints(tmp_path):
    with ckpt.Lease.acquire(tmp_path) as earlier:
        for step in (10, 20, 30):
            save(earlier, step)
    with ckpt.Lease.acquire(tmp_path) as run:
        save(run, 5)  # sorted by step, 5 was the oldest of four and went at once
        assert ckpt.pointer(tmp_path) == 5
        assert ckpt.latest_valid(tmp_path) == (tmp_path / "global_step_5", [])
        for step in (6, 7, 8):
            save(run, step, keep=2)
    assert ckpt.steps(tmp_path) == [30, 20, 10, 8, 7]  # the earlier run's are not this run's
    assert ckpt.latest_valid(tmp_path)[0].name == "global_step_8"


def test_prune_counts_only_valid_checkpoints(tmp_path, lease):
    save(lease, 1, keep=2)
    save(lease, 2, keep=2)
    (tmp_path / "global_step_2" / "actor" / "weights.bin").write_bytes(b"x" * 1000)  # bit rot
    save(lease, 3, keep=2)
    assert ckpt.steps(tmp_path) == [3, 1]  # step 1 is the second valid one; 2 cannot be resumed


def test_prune_never_deletes_the_pointers_target(tmp_path, lease):
    for step in (1, 2, 3):
        save(lease, step)
    (tmp_path / ckpt.POINTER).write_text("1")  # e.g. a re-save of an older step moved it
    assert ckpt.prune(lease, keep_last=1) == [2]
    assert ckpt.steps(tmp_path) == [3, 1] and lease.committed == [1, 3]


def test_resaving_an_older_step_moves_it_to_the_end_of_the_commit_order(tmp_path, lease):
    for step in (1, 2, 3, 2):  # a restart resumed from step 1 and saved step 2 again
        save(lease, step, keep=2)
    assert lease.committed == [3, 2] and ckpt.steps(tmp_path) == [3, 2]
    assert ckpt.latest_valid(tmp_path)[0].name == "global_step_2"


# -- a re-save of the same step interrupted between its two renames --------------------------------
def test_clean_temp_puts_back_a_checkpoint_a_killed_resave_had_moved_aside(tmp_path, lease):
    save(lease, 2)
    save(lease, 3, b"a" * 10)
    new = ckpt.begin(tmp_path, 3)  # the re-save: sealed, then killed after the first rename
    (new / "actor").mkdir()
    (new / "actor" / "weights.bin").write_bytes(b"b" * 10)
    (tmp_path / "global_step_3").rename(tmp_path / ".trash-global_step_3-0badcafe")
    assert ckpt.pointer(tmp_path) == 3 and not (tmp_path / "global_step_3").exists()
    ckpt.clean_temp(tmp_path)
    assert ckpt.latest_valid(tmp_path) == (tmp_path / "global_step_3", [])
    assert (tmp_path / "global_step_3" / "actor" / "weights.bin").read_bytes() == b"a" * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ckpt.LEASE, "global_step_2", "global_step_3", ckpt.POINTER]


def test_clean_temp_drops_a_moved_aside_checkpoint_that_no_longer_validates(tmp_path, lease):
    save(lease, 2)
    save(lease, 3)
    (tmp_path / "global_step_3" / "actor" / "weights.bin").write_bytes(b"short")
    (tmp_path / "global_step_3").rename(tmp_path / ".trash-global_step_3-0badcafe")
    ckpt.clean_temp(tmp_path)
    assert ckpt.steps(tmp_path) == [2] and ckpt.latest_valid(tmp_path)[0].name == "global_step_2"


def test_clean_temp_removes_stray_pointer_temps_and_half_pruned_dirs(tmp_path, lease):
    save(lease, 1)
    stray = tmp_path / f".{ckpt.POINTER}.1234abcd"  # a kill between writing it and its rename
    stray.write_text("2")
    (tmp_path / ".del-global_step_0-1234abcd" / "actor").mkdir(parents=True)
    ckpt.clean_temp(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ckpt.LEASE, "global_step_1",
                                                          ckpt.POINTER]


# -- manifests that parse but have the wrong shape -------------------------------------------------
@pytest.mark.parametrize("manifest, words", [
    ([], "not an object with a 'files' mapping"),
    ({"files": []}, "not an object with a 'files' mapping"),
    ({"files": {"trainer_state.json": "abc"}}, "entry 'trainer_state.json' is not"),
    ({"files": {"trainer_state.json": {"size": "2", "sha256": "x"}}}, "is not {'size'"),
    ({"files": {"trainer_state.json": {"size": 2, "sha256": None}}}, "is not {'size'"),
    ({"files": {"../../x": {"size": 2, "sha256": "x"}}}, "points outside the checkpoint"),
    ({"files": {}, "unseen": ["a"]}, "'unseen' entry"),
    ({"files": {}, "unseen": {"a": "10.0.0.1"}}, "'unseen' entry"),
])
def test_a_manifest_of_the_wrong_shape_is_rejected_and_resume_falls_back(tmp_path, lease,
                                                                         manifest, words):
    save(lease, 1)
    bad = save(lease, 2)
    (bad / ckpt.MANIFEST).write_text(json.dumps(manifest))
    path, rejected = ckpt.latest_valid(tmp_path)
    assert path == tmp_path / "global_step_1"
    assert len(rejected) == 1 and str(bad / ckpt.MANIFEST) in rejected[0] and words in rejected[0]


def test_a_state_file_that_is_not_an_object_is_rejected(tmp_path, lease):
    save(lease, 1)
    tmp = ckpt.begin(tmp_path, 2)
    final = ckpt.commit(lease, 2, tmp, {"step": 2}, 3)
    (final / ckpt.STATE).write_text("[]")
    manifest = json.loads((final / ckpt.MANIFEST).read_text())
    manifest["files"][ckpt.STATE] = {"size": 2, "sha256": ckpt._sha256(final / ckpt.STATE)}
    (final / ckpt.MANIFEST).write_text(json.dumps(manifest))
    path, rejected = ckpt.latest_valid(tmp_path)
    assert path.name == "global_step_1" and "not a JSON object" in rejected[0]


# -- one writer per directory ----------------------------------------------------------------------
def test_a_second_writer_is_refused_naming_the_directory_the_holder_and_the_fix(tmp_path, lease):
    with pytest.raises(ckpt.LeaseHeld) as refused:
        ckpt.Lease.acquire(tmp_path)
    message = str(refused.value)
    assert f"checkpoint_dir {tmp_path} is in use" in message
    assert f"pid {os.getpid()} on host" in message and "Fix:" in message
    assert "own checkpoint_dir" in message
    lease.release()
    lease.release()  # twice is fine
    assert not (tmp_path / ckpt.LEASE).exists()  # a finished run leaves only its checkpoints
    with ckpt.Lease.acquire(tmp_path) as second:
        assert second.held


def test_commit_needs_a_held_lease(tmp_path, lease):
    tmp = ckpt.begin(tmp_path, 1)
    lease.release()
    with pytest.raises(ValueError, match="writer lease"):
        ckpt.commit(lease, 1, tmp, {"step": 1}, 3)


def test_the_trainer_refuses_a_checkpoint_dir_another_run_writes_before_it_starts(tmp_path,
                                                                                  monkeypatch,
                                                                                  capsys):
    from trainer.__main__ import main

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # were it to go on, no cluster to reach
    run_dir = tmp_path / "run"
    config = PRESETS / "grpo_tiny.yaml"
    with ckpt.Lease.acquire(run_dir / "checkpoints"):  # the first run, still going
        assert main(["--config", str(config), f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint_dir {run_dir / 'checkpoints'} is in use: pid {os.getpid()}" in err
    assert "Fix:" in err and "Traceback" not in err
    assert [p.name for p in run_dir.iterdir()] == ["checkpoints"]  # no event log of its own
