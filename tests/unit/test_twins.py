"""Fault-free twins kept across runs (rlsim.scenario.twins): the record is the
twin's own bytes, found again by a new process, replaced by --fresh-twin, and the store stays
bounded."""

import json
import os

import pytest

from rlsim.scenario import twins
from rlsim.scenario.twins import Twins


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _twin_run(root, step=4, weights=b"\x00weights"):
    run = root / "baseline"
    (run / "checkpoints" / f"global_step_{step}" / "hf").mkdir(parents=True)
    (run / "checkpoints" / "global_step_2" / "hf").mkdir(parents=True)
    (run / "events.jsonl").write_text('{"ts": 1.5, "type": "step_end", "step": 1}\n')
    (run / "metrics.jsonl").write_text('{"step": 1, "attempt": 0, "train/loss": 0.1}\n')
    (run / "checkpoints" / f"global_step_{step}" / "hf" / "model.safetensors").write_bytes(weights)
    (run / "checkpoints" / "global_step_2" / "hf" / "model.safetensors").write_bytes(b"old")
    (run / "checkpoints" / f"global_step_{step}" / "optim.pt").write_bytes(b"x" * 100)
    return run


def test_a_kept_twin_is_the_same_bytes_and_found_by_the_next_process(home, tmp_path):
    run = _twin_run(tmp_path)
    first = Twins()
    record = first.keep("k1", run, {"command": ["x"]})
    assert "not_kept" not in record and record["key"] == "k1"
    later = Twins()  # a new rlsim run: nothing in memory
    where, about = later.found("k1")
    assert where != run and about["made"] == record["made"] and about["command"] == ["x"]
    for rel in ("events.jsonl", "metrics.jsonl",
                "checkpoints/global_step_4/hf/model.safetensors"):
        assert (where / rel).read_bytes() == (run / rel).read_bytes(), rel
    # only what the checks read: the final export, no older step, no optimizer state
    assert not (where / "checkpoints" / "global_step_2").exists()
    assert not (where / "checkpoints" / "global_step_4" / "optim.pt").exists()
    assert later.found("other") is None


def test_fresh_twin_trains_again_and_replaces_the_record(home, tmp_path):
    Twins().keep("k1", _twin_run(tmp_path / "a", weights=b"one"), {})
    fresh = Twins(fresh=True)
    assert fresh.found("k1") is None  # whatever an earlier run kept
    fresh.keep("k1", _twin_run(tmp_path / "b", weights=b"two"), {})
    assert fresh.found("k1")[0] == tmp_path / "b" / "baseline"  # its own, in this process
    where, _ = Twins().found("k1")
    assert (where / "checkpoints/global_step_4/hf/model.safetensors").read_bytes() == b"two"
    assert sorted(p.name for p in where.parent.iterdir()) == ["k1"]


def test_a_home_that_cannot_keep_it_serves_this_process_alone(home, tmp_path):
    home.parent.mkdir(parents=True, exist_ok=True)
    home.write_text("not a folder")
    kept = Twins()
    run = _twin_run(tmp_path)
    record = kept.keep("k1", run, {})
    assert "not_kept" in record
    assert kept.found("k1")[0] == run


def test_the_store_keeps_the_newest(home, tmp_path, monkeypatch):
    monkeypatch.setattr(twins, "KEEP", 3)
    run = _twin_run(tmp_path)
    for i in range(5):
        twins.keep(f"k{i}", run, {})
        os.utime(twins.store() / f"k{i}", (1000 + i, 1000 + i))
    twins.keep("k5", run, {})
    assert sorted(p.name for p in twins.store().iterdir()) == ["k3", "k4", "k5"]


def test_a_record_for_another_key_or_torn_is_not_read(home, tmp_path):
    twins.keep("k1", _twin_run(tmp_path), {})
    record = twins.store() / "k1" / "twin.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "key": "k2"}))
    assert twins.stored("k1") is None
    record.write_text("{")
    assert twins.stored("k1") is None


def test_a_trainer_of_ones_own_gets_a_new_twin_when_its_code_changes(tmp_path):
    """The default adapter inputs: the files the command names and the Python files of the
    folder it runs in (hidden folders and virtualenvs left out), so an edited train.py is a new
    key, and a change in a virtualenv's files or in a file the trainer does not run is not."""
    from rlsim.adapters import ADAPTERS
    from rlsim.scenario.schema import TrainerSection
    from rlsim.scenario.twins import key as twin_key

    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / "train.py").write_text("print('v1')\n")
    (project / "lib" / "model.py").write_text("W = 1\n")
    (project / "run.json").write_text('{"lr": 0.1}')
    (project / ".venv" / "lib" / "dep.py").write_text("x = 1\n")
    (project / "notes.txt").write_text("a")
    trainer = TrainerSection(adapter="events", cwd=str(project),
                             command=["{python}", "train.py", "--config", "run.json"])

    def key() -> str:
        return twin_key({"command": trainer.command}, ADAPTERS["events"].inputs(trainer))

    first = key()
    assert set(ADAPTERS["events"].inputs(trainer)) == {
        project / "train.py", project / "lib" / "model.py", project / "run.json"}
    (project / ".venv" / "lib" / "dep.py").write_text("x = 2\n")
    (project / "notes.txt").write_text("b")
    assert key() == first
    for path, text in ((project / "train.py", "print('v2')\n"), (project / "lib" / "model.py",
                       "W = 2\n"), (project / "run.json", '{"lr": 0.2}')):
        before = key()
        path.write_text(text)
        assert key() != before, path


def test_a_scenario_that_times_its_twin_never_reads_a_kept_one():
    # a twin's pace is the machine's when it ran: slow_node's throttled steps went at 1.04 of a
    # twin kept from a busier run, and the check that the fault slowed anything failed
    from pathlib import Path

    from rlsim.scenario.loader import load
    from rlsim.scenario.twins import times_its_twin

    root = Path(__file__).resolve().parents[2] / "scenarios"
    assert times_its_twin(load(root / "slow_node.yaml"))  # throughput_within
    assert not times_its_twin(load(root / "node_failure_mid_run.yaml"))  # matches_baseline only


# ---- a kept record read back damaged is no record: trained again, and said --------------------


def _damage(record_dir, how):
    about = record_dir / "twin.json"
    data = json.loads(about.read_text())
    if how in ("made 1e300", "made NaN", "made yesterday"):
        data["made"] = {"made 1e300": 1e300, "made NaN": float("nan"),
                        "made yesterday": "yesterday"}[how]
    elif how == "files climb out":
        data["files"] = ["../../../../etc/hostname"]
    elif how == "files not a list":
        data["files"] = {"metrics.jsonl": 1}
    elif how == "a listed file gone":
        (record_dir / "events.jsonl").unlink()
    if how.startswith(("made", "files", "a listed")):
        about.write_text(json.dumps(data))
    elif how == "deep JSON":
        about.write_text("[" * 100_000)
    elif how == "a list":
        about.write_text("[1, 2]")
    elif how == "a FIFO":
        about.unlink()
        os.mkfifo(about)
    elif how == "a symlink":
        (record_dir / "elsewhere.json").write_text(json.dumps(data))
        about.unlink()
        about.symlink_to(record_dir / "elsewhere.json")
    elif how == "metrics not JSON":
        (record_dir / "metrics.jsonl").write_text('{"step": 1}\nnot json\n')
    elif how == "metrics without steps":
        (record_dir / "metrics.jsonl").write_text('{"loss": 1}\n')
    elif how == "metrics torn":
        (record_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "lo')


DAMAGE = ["made 1e300", "made NaN", "made yesterday", "files climb out", "files not a list",
          "a listed file gone", "deep JSON", "a list", "a FIFO", "a symlink", "metrics not JSON",
          "metrics without steps", "metrics torn"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_record_is_trained_again_and_the_new_one_says_so(home, tmp_path, how):
    import threading

    run = _twin_run(tmp_path)
    twins.keep("k1", run, {})
    _damage(twins.store() / "k1", how)
    found = []
    reader = threading.Thread(target=lambda: found.append(Twins().found("k1")),
                              daemon=True)
    reader.start()
    reader.join(30)  # a FIFO read without O_NONBLOCK never returns
    assert found == [None], found
    record = Twins().keep("k1", run, {})
    assert "twin.json" in record["replaced_damaged"] or "metrics.jsonl" in \
        record["replaced_damaged"], record
    where, about = Twins().found("k1")
    assert about["replaced_damaged"] == record["replaced_damaged"]
    from rlsim.checks.base import _twin
    from rlsim.history import Outcome

    said = _twin(Outcome(scenario=None, run_dir=tmp_path, baseline_about=about))
    assert "replacing a damaged record (" in said, said
    twins.keep("k1", run, {})  # kept again from a sound record: nothing to say
    assert "replaced_damaged" not in twins.stored("k1")[1]


def test_a_twin_without_metrics_is_a_sound_record(home, tmp_path):
    run = _twin_run(tmp_path)
    (run / "metrics.jsonl").unlink()
    twins.keep("k1", run, {})
    assert twins.stored("k1") is not None


def test_an_input_too_large_to_hash_is_keyed_by_size_and_time_never_read(tmp_path, monkeypatch):
    """A 3 GiB sparse .py in the trainer's folder was read whole to key the twin (MemoryError)."""
    from rlsim.scenario.twins import key as twin_key

    monkeypatch.setattr(twins, "MAX_KEYED", 1024)
    big = tmp_path / "data.py"
    big.write_bytes(b"a" * 4096)
    os.utime(big, ns=(10**18, 10**18))
    first = twin_key({}, [big])
    big.write_bytes(b"b" * 4096)  # same size, same time: not read, so the same key
    os.utime(big, ns=(10**18, 10**18))
    assert twin_key({}, [big]) == first
    os.utime(big, ns=(10**18 + 1, 10**18 + 1))
    assert twin_key({}, [big]) != first
    small = tmp_path / "train.py"
    small.write_text("x = 1\n")
    keyed = twin_key({}, [small])
    small.write_text("x = 2\n")
    assert twin_key({}, [small]) != keyed


def test_an_input_that_is_a_fifo_or_gone_still_makes_a_key(tmp_path):
    import threading

    from rlsim.scenario.twins import key as twin_key

    os.mkfifo(tmp_path / "pipe.py")
    keys = []
    worker = threading.Thread(target=lambda: keys.append(
        twin_key({}, [tmp_path / "pipe.py", tmp_path / "gone.py"])), daemon=True)
    worker.start()
    worker.join(30)
    assert len(keys) == 1 and len(keys[0]) == 16
