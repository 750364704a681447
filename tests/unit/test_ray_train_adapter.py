"""The ray_train adapter's callback, fed Ray Train's own report and state objects: what each
controller hook writes to events.jsonl (end to end: scenarios/ray_train_node_lost.yaml)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.train.v2", reason="Ray Train is not installed (pip install 'ray[train]')")

from ray.train import Checkpoint  # noqa: E402
from ray.train.v2._internal.execution.controller.state import (  # noqa: E402
    ErroredState,
    FinishedState,
    RestartingState,
    RunningState,
)
from ray.train.v2._internal.execution.training_report import _TrainingReport  # noqa: E402

from rlsim.adapters import ADAPTERS  # noqa: E402
from rlsim.adapters.ray_train_callback import RlsimCallback  # noqa: E402
from rlsim.scenario.schema import Scenario  # noqa: E402


def events(run_dir) -> list[tuple]:
    rows = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    return [(r["type"], r.get("step", r.get("from_step", r.get("restart", r.get("status")))))
            for r in rows]


def report(cb, metrics: dict, checkpoint=None, workers: int = 2) -> None:
    cb.after_report(_TrainingReport(checkpoint=checkpoint, metrics=metrics, validation=False),
                    [metrics] * workers)


@pytest.fixture
def cb(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSIM_RUN_DIR", str(tmp_path))
    return RlsimCallback()


def test_a_run_with_a_retried_failure_reads_as_steps_a_restart_and_a_resume(cb, tmp_path):
    ckpt = Checkpoint.from_directory(str(tmp_path))
    cb.after_worker_group_start(None)
    report(cb, {"step": 1, "loss": 2.0})
    report(cb, {"step": 2, "loss": 1.5, "note": "text"}, ckpt)
    report(cb, {"step": 3, "loss": 1.2})
    cb.after_controller_state_update(RunningState(), RestartingState(
        training_failed_error=RuntimeError("rank 2 died")))
    cb.after_worker_group_start(None)
    report(cb, {"step": 3, "loss": 1.2})
    cb.after_controller_state_update(RunningState(), FinishedState())
    assert events(tmp_path) == [
        ("step_end", 1), ("step_end", 2), ("checkpoint_saved", 2), ("step_end", 3),
        ("worker_died", None), ("restart", 1), ("resume", 2), ("step_end", 3),
        ("run_end", 3)]
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert rows[1]["metrics"] == {"step": 2, "loss": 1.5}  # text metrics are left out
    assert rows[4]["cause"] == "RuntimeError" and "rank 2 died" in rows[4]["message"]
    assert rows[-1]["status"] == "completed"


def test_without_a_step_metric_the_report_count_is_the_step(cb, tmp_path):
    report(cb, {"loss": 2.0})
    report(cb, {"epoch": 7, "loss": 1.0})
    report(cb, {"loss": 0.5, "step": True})  # a flag is not a step
    assert events(tmp_path) == [("step_end", 1), ("step_end", 7), ("step_end", 3)]


def test_a_failure_ray_train_gives_up_on_is_an_error_and_a_failed_end(cb, tmp_path):
    report(cb, {"step": 1})
    cb.after_controller_state_update(RunningState(), ErroredState(
        training_failed_error=ValueError("max_failures reached")))
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["type"], r.get("kind"), r.get("status")) for r in rows[1:]] == [
        ("error", "ValueError", None), ("run_end", None, "failed")]


def test_a_write_that_fails_never_fails_the_job(cb, tmp_path, caplog):
    cb.log.path = tmp_path / "missing" / "events.jsonl"
    report(cb, {"step": 1})
    assert "could not write the step_end event" in caplog.text


def test_the_adapter_names_its_callback_and_keeps_the_users_own():
    sc = Scenario.model_validate({"name": "s", "trainer": {
        "adapter": "ray_train", "command": ["{python}", "t.py"],
        "env": {"RAY_TRAIN_CALLBACKS": "mine.Callback"}}, "expect": [{"completes": {}}]})
    assert ADAPTERS["ray_train"].env(sc.trainer, None) == {
        "RAY_TRAIN_CALLBACKS": "mine.Callback,rlsim.adapters.ray_train_callback.RlsimCallback"}


def test_checks_the_adapter_cannot_see_are_refused_naming_both():
    with pytest.raises(ValueError, match="matches_baseline.*ray_train"):
        Scenario.model_validate({"name": "s", "trainer": {
            "adapter": "ray_train", "command": ["{python}", "t.py"]},
            "expect": [{"matches_baseline": {}}]})


def group(*workers: tuple[int, str, int]):
    """A worker group or replica group as Ray Train hands it to its callbacks: its workers,
    each with its world rank, node address and pid."""
    from types import SimpleNamespace

    made = [SimpleNamespace(distributed_context=SimpleNamespace(world_rank=rank),
                            metadata=SimpleNamespace(node_ip=ip, pid=pid))
            for rank, ip, pid in workers]
    return SimpleNamespace(get_workers=lambda: made)


def test_a_replica_group_replaced_in_place_is_a_replacement_not_a_restart(cb, tmp_path):
    """torchft under Ray Train (2.57+): the lost replica group is replaced while the other keeps
    its state; only a new worker group is a restart."""
    cb.after_worker_group_start(group((1, "127.77.0.12", 12), (0, "127.77.0.11", 11)))
    report(cb, {"step": 1})
    cb.after_controller_state_update(RunningState(), RestartingState(
        training_failed_error=RuntimeError("replica group 1 lost")))
    cb.after_replica_group_start(group((1, "127.77.0.13", 23)))
    report(cb, {"step": 2})
    cb.after_controller_state_update(RunningState(), RestartingState(
        training_failed_error=RuntimeError("every worker lost")))
    cb.after_worker_group_start(group((0, "127.77.0.11", 31), (1, "127.77.0.13", 32)))
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [r["type"] for r in rows] == [
        "placement", "step_end", "worker_died", "worker_replaced", "placement", "step_end",
        "worker_died", "placement", "restart"]
    replaced = rows[3]
    assert replaced["workers"] == [{"roles": ["worker"], "rank": 1, "ip": "127.77.0.13",
                                    "pid": 23}]
    assert replaced["replaced"] == [{"roles": ["worker"], "rank": 1, "ip": "127.77.0.12",
                                     "pid": 12, "index": 1}]
    assert replaced["cause"] == "RuntimeError"
    assert [(w["rank"], w["pid"]) for w in rows[4]["workers"]] == [(0, 11), (1, 23)]
    assert rows[-1]["restart"] == 1 and rows[-1]["cause"] == "RuntimeError"


def test_workers_are_forked_with_torch_only_for_a_job_that_imports_it(tmp_path):
    """A TorchTrainer job's workers import torch: the cluster's zygote does it once for them; a
    job whose code imports no torch preloads nothing. Ray Train places them: no count."""
    from rlsim.scenario.loader import load

    (tmp_path / "helpers").mkdir()
    (tmp_path / "train.py").write_text("import ray.train\nfrom helpers import loop\n")
    (tmp_path / "helpers" / "__init__.py").write_text("# import torch (a comment)\n")
    (tmp_path / "s.yaml").write_text(
        "name: s\ncluster: {nodes: 2, gpus_per_node: 1}\ntrainer:\n  adapter: ray_train\n"
        "  command: ['{python}', 'train.py']\n  total_steps: 2\nexpect:\n  - completes: true\n")
    adapter = ADAPTERS["ray_train"]
    assert adapter.warm_workers(load(tmp_path / "s.yaml").trainer) == ([], [])
    (tmp_path / "helpers" / "__init__.py").write_text(
        "import ray.train\n    from ray.train.torch import TorchTrainer\n")
    assert adapter.warm_workers(load(tmp_path / "s.yaml").trainer) == (["torch"], [])
