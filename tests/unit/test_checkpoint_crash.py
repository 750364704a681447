"""kill -9 of the checkpoint writer at seeded points of a save, through the real checkpoint code.

Each round forks a writer (``crash_writer.py``, a process without torch, so forks are cheap)
that does what the driver does (take the lease, clean up, resume from the latest valid
checkpoint, save again and again with a trainer's file set: sharded weights, optimizer states,
RNG files, an HF export) and SIGKILLs itself at the n-th file-system call of a chosen kind
(mkdir, write, fsync, rename, unlink, rmdir, or the rename that seals a save), n drawn from a
seeded RNG. Each time the pointer moves it reports the step through a pipe, so the parent knows
the newest committed checkpoint. After each kill the parent checks, as the next run would see it:

- the pointer never names a partial checkpoint (the only moment it names no directory at all is
  between the two renames of a re-save, and then the moved-aside copy is complete);
- the dead writer's lease does not block the next run;
- after the next run's cleanup the resume lookup returns exactly the newest committed step,
  complete and with that step's state, and nothing of the interrupted save is left.
"""

import pathlib
import random
import signal
import subprocess
import sys

import pytest

from trainer import checkpoint as ckpt

WRITER = pathlib.Path(__file__).with_name("crash_writer.py")

SEED = 11
ROUNDS = 60
KINDS = ("any", "any", "rename", "fsync", "seal", "unlink")  # what the kill point counts


@pytest.fixture
def writers(tmp_path):
    """Ask for a writer killed at the n-th call of a kind: returns (exit signal, steps reported)."""
    proc = subprocess.Popen([sys.executable, str(WRITER), ckpt.__file__, str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def kill_one_save(seed: int, kind: str, n: int) -> tuple[int, list[int]]:
        proc.stdin.write(f"{seed} {kind} {n}\n")
        proc.stdin.flush()
        sig, *moved = (int(word) for word in proc.stdout.readline().split())
        return sig, moved

    yield kill_one_save
    proc.stdin.close()
    proc.wait(timeout=30)


def pointer_names_no_partial_checkpoint(root: pathlib.Path) -> str:
    """'complete', 'moved aside' (a re-save between its renames) or 'none'; fails otherwise."""
    at = ckpt.pointer(root)
    if at is None:
        return "none"
    target = root / f"global_step_{at}"
    if target.exists():
        assert ckpt.validate(target) is None, f"the pointer names a partial {target}"
        return "complete"
    aside = [p for p in root.glob(f".trash-global_step_{at}-*") if ckpt.validate(p) is None]
    assert aside, f"the pointer names {target}, which is gone with no complete copy aside"
    return "moved aside"


def test_kill_9_at_seeded_points_of_a_save_never_loses_the_newest_committed_checkpoint(tmp_path,
                                                                                      writers):
    rng = random.Random(SEED)
    newest, kills, seen = None, 0, {"complete": 0, "moved aside": 0, "none": 0}
    for round_ in range(ROUNDS):
        kind = rng.choice(KINDS)
        n = rng.randint(1, {"any": 150, "seal": 5}.get(kind, 25))
        sig, moved = writers(SEED * 1000 + round_, kind, n)
        assert sig == signal.SIGKILL, f"round {round_}: the writer ended with {sig}, not a kill"
        kills += 1
        newest = moved[-1] if moved else newest
        seen[pointer_names_no_partial_checkpoint(tmp_path)] += 1
        assert ckpt.pointer(tmp_path) == newest
        with ckpt.Lease.acquire(tmp_path) as lease:  # the dead writer's lease blocks no one
            ckpt.clean_temp(lease.root)
            latest, _ = ckpt.latest_valid(tmp_path)
            if newest is None:
                assert latest is None
                continue
            assert latest == tmp_path / f"global_step_{newest}", (round_, kind, n, moved)
            assert ckpt.read_state(latest) == {"step": newest, "loader": {"cursor": newest}}
            leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
            assert leftovers == [ckpt.LEASE], leftovers
    assert kills == ROUNDS and newest is not None and newest > 3
    assert seen["moved aside"] > 0 and seen["complete"] > ROUNDS // 2, seen


def test_a_writer_killed_while_holding_the_lease_leaves_it_free(tmp_path, writers):
    sig, _ = writers(SEED, "any", 5)  # dies in its first save, lease held
    assert sig == signal.SIGKILL and (tmp_path / ckpt.LEASE).exists()
    with ckpt.Lease.acquire(tmp_path) as lease:
        assert lease.held
    assert not (tmp_path / ckpt.LEASE).exists()
