"""The verl, OpenRLHF and NeMo-RL adapters on their frameworks' console formats
(fixtures/formats, with the sources they follow) and checkpoint layouts: the events each run
yields, launch by launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.adapters import ADAPTERS
from rlsim.adapters.base import TrainerLaunch
from rlsim.adapters.logs import number
from rlsim.scenario.schema import Scenario

FORMATS = Path(__file__).resolve().parents[2] / "fixtures" / "formats"


def source(adapter: str, tmp_path: Path, command: list[str] | None = None, env=None):
    sc = Scenario.model_validate({"name": "s", "trainer": {
        "adapter": adapter, "command": command or ["{python}", "train.py"], "env": env or {}},
        "expect": [{"completes": {}}]})
    run_dir = tmp_path / "out" / "run"
    run_dir.mkdir(parents=True)
    return ADAPTERS[adapter].events(sc.trainer, run_dir), run_dir.parent


def append(out: Path, attempt: int, fixture: Path, ckpt: Path) -> None:
    with (out / f"trainer-{attempt}.log").open("a") as f:
        f.write(fixture.read_text().replace("/CKPT", str(ckpt)))


def brief(events: list[dict]) -> list[tuple]:
    return [(e["attempt"], e["type"], e.get("step", e.get("from_step", e.get("kind"))))
            for e in events]


@pytest.mark.parametrize("text,value", [
    ("0.25", 0.25), ("np.float64(-0.0042)", -0.0042), ("5e-07", 5e-07), ("1834", 1834.0),
    ("True", None), ("tensor(0.1)", None), ("abc", None)])
def test_printed_numbers(text, value):
    assert number(text) == value


def test_verl_console_file_logger_checkpoints_and_a_relaunch(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    src, out = source("verl", tmp_path)
    append(out, 0, FORMATS / "verl" / "trainer-0.part1.log", ckpt)
    first = src.poll()
    (ckpt / "global_step_2").mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")  # written last, no newline
    first += src.poll()
    append(out, 0, FORMATS / "verl" / "trainer-0.part2.log", ckpt)
    first += src.poll() + src.exited(0, 1)
    # the file logger of the relaunch: step 3 also on the console, step 5 only here
    (out / "run" / "verl-metrics-1.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 3, "data": {"critic/score/mean": 0.188}},
        {"step": 5, "data": {"critic/score/mean": 0.3, "note": "x", "flag": True}}]) + "\n")
    append(out, 1, FORMATS / "verl" / "trainer-1.log", ckpt)
    second = src.poll() + src.exited(1, 0)
    assert brief(first) == [
        (0, "step_end", 1), (0, "step_end", 2), (0, "checkpoint_saved", 2), (0, "step_end", 3),
        (0, "error", "ActorDiedError"), (0, "error", "ActorDiedError"), (0, "run_end", 3)]
    assert brief(second) == [(1, "resume", 2), (1, "step_end", 3), (1, "step_end", 4),
                             (1, "step_end", 5), (1, "run_end", 5)]
    step1 = first[0]["metrics"]
    assert step1["actor/pg_loss"] == -0.0042 and "actor/entropy" not in step1  # nan left out
    assert step1["rollout/reward_mean"] == 0.0625  # critic/score/mean, as reward_improves reads
    assert first[2]["path"] == str(ckpt / "global_step_2")
    assert first[-1]["status"] == "failed" and second[-1]["status"] == "completed"
    assert second[3]["metrics"] == {"critic/score/mean": 0.3, "rollout/reward_mean": 0.3}


def test_verl_lines_made_by_verls_own_loggers(tmp_path):
    """console-0.9.1.log and file-logger-0.9.1.jsonl were written by verl 0.9.1's own
    concat_dict_to_str and FileLogger (fixtures/formats/verl/make.py)."""
    src, out = source("verl", tmp_path)
    lines = (FORMATS / "verl" / "console-0.9.1.log").read_text().splitlines()
    (out / "trainer-0.log").write_text("".join(f"\x1b[36m(TaskRunner pid=7)\x1b[0m {x}\n"
                                               for x in lines[:2]))
    (out / "run" / "verl-metrics-0.jsonl").write_bytes(
        (FORMATS / "verl" / "file-logger-0.9.1.jsonl").read_bytes())
    events = src.poll() + src.exited(0, 0)
    assert brief(events) == [(0, "step_end", 1), (0, "step_end", 2), (0, "step_end", 3),
                             (0, "run_end", 3)]
    console, from_file = events[0]["metrics"], events[2]["metrics"]
    assert console["actor/pg_loss"] == -0.004 and console["actor/entropy"] == 0.61
    assert "perf/max_memory_allocated_gb" not in console  # np.float64(nan)
    assert "perf/max_memory_allocated_gb" not in from_file  # null in verl's file
    assert from_file["rollout/reward_mean"] == 0.1875


def test_verl_as_a_real_run_of_verl_0_9_1_printed_and_wrote_it(tmp_path):
    """fixtures/formats/verl/real-0.9.1: scenarios/verl_real_node_lost.yaml's run (verl 0.9.1,
    unpatched: node 1 rebooted after step 3, the relaunch resumed from global_step_2), each
    launch's console lines the adapter reads (as printed, Ray's prefix and colours included) and
    its file logger's jsonl, as verl wrote them."""
    real = FORMATS / "verl" / "real-0.9.1"
    ckpt = tmp_path / "ckpt"
    src, out = source("verl", tmp_path)
    events = []
    for attempt, steps in ((0, (2,)), (1, (4, 6))):
        append(out, attempt, real / f"trainer-{attempt}.log", ckpt)
        (out / "run" / f"verl-metrics-{attempt}.jsonl").write_bytes(
            (real / f"verl-metrics-{attempt}.jsonl").read_bytes())
        events += src.poll()
        for step in steps:  # what verl wrote last for each save the console announced
            (ckpt / f"global_step_{step}").mkdir(parents=True)
            (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
            events += src.poll()
        events += src.exited(attempt, 1 - attempt)
    assert sorted(brief(events)) == sorted([
        (0, "step_end", 1), (0, "step_end", 2), (0, "step_end", 3), (0, "checkpoint_saved", 2),
        (0, "error", "ActorDiedError"), (0, "error", "ActorDiedError"), (0, "run_end", 3),
        (1, "resume", 2), (1, "step_end", 3), (1, "step_end", 4), (1, "step_end", 5),
        (1, "step_end", 6), (1, "checkpoint_saved", 4), (1, "checkpoint_saved", 6),
        (1, "run_end", 6)])
    step1 = next(e for e in events if e["type"] == "step_end")["metrics"]
    assert step1["rollout/reward_mean"] == step1["critic/score/mean"]
    assert step1["training/rollout_probs_diff_max"] < 1e-3  # vLLM's and FSDP's log-probs agree
    assert next(e for e in events if e["type"] == "resume")["path"] == str(ckpt / "global_step_2")


def test_verl_gets_one_metrics_file_per_launch_unless_the_scenario_names_one(tmp_path):
    src, out = source("verl", tmp_path)
    adapter = ADAPTERS["verl"]
    launch = TrainerLaunch(python="py", run_dir=out / "run", attempt=2, ray_address="")
    sc = Scenario.model_validate({"name": "s", "trainer": {
        "adapter": "verl", "command": ["x"], "env": {"VERL_FILE_LOGGER_PATH": "/m.jsonl"}},
        "expect": [{"completes": {}}]})
    assert adapter.env(src.reader.trainer, launch) == {
        "VERL_FILE_LOGGER_PATH": str(out / "run" / "verl-metrics-2.jsonl")}
    assert adapter.env(sc.trainer, launch) == {}


def test_openrlhf_steps_checkpoints_and_the_resume_deepspeed_loads(tmp_path):
    ckpt = tmp_path / "ckpt"
    src, out = source("openrlhf", tmp_path, ["{python}", "-m", "openrlhf.cli.train_ppo_ray",
                                             "--ckpt.path", str(ckpt), "--ckpt.load_enable"])
    append(out, 0, FORMATS / "openrlhf" / "trainer-0.log", ckpt)
    (ckpt / "_actor" / "global_step2").mkdir(parents=True)
    (ckpt / "_actor" / "latest").write_text("global_step2")
    first = src.poll() + src.exited(0, 1)
    append(out, 1, FORMATS / "openrlhf" / "trainer-1.log", ckpt)
    second = src.poll() + src.exited(1, 0)
    assert brief(first) == [(0, "step_end", 1), (0, "step_end", 2), (0, "checkpoint_saved", 2),
                            (0, "run_end", 2)]
    assert brief(second) == [(1, "resume", 2), (1, "step_end", 3), (1, "run_end", 3)]
    assert first[0]["metrics"]["rollout/reward_mean"] == 0.25
    assert first[1]["metrics"] == {"policy_loss": 0.011, "reward": 0.3125,
                                   "rollout/reward_mean": 0.3125}  # tensor(...) left out


def test_openrlhf_as_a_real_run_of_openrlhf_0_11_2_printed_it(tmp_path):
    """fixtures/formats/openrlhf/real-0.11.2: scenarios/openrlhf_real_actor_node_lost.yaml's run
    (OpenRLHF 0.11.2 unmodified on fake GPUs through the device stand-in: the policy actor's node
    rebooted as global_step4 was saved, the relaunch resumed from it), each launch's console lines
    the adapter reads, as printed (Ray's prefix and colours, the sparkle), and its errors."""
    real = FORMATS / "openrlhf" / "real-0.11.2"
    ckpt = tmp_path / "ckpt"
    src, out = source("openrlhf", tmp_path, ["{python}", "-m", "openrlhf.cli.train_ppo_ray",
                                             f"--ckpt.path={ckpt}", "--ckpt.load_enable"])
    actor = ckpt / "_actor"
    actor.mkdir(parents=True)
    events = []
    for attempt, saves in ((0, (4,)), (1, (8, 12, 16))):
        append(out, attempt, real / f"trainer-{attempt}.log", ckpt)
        events += src.poll()
        for step in saves:  # DeepSpeed writes the tag's files, then names it in `latest`
            (actor / f"global_step{step}").mkdir()
            (actor / "latest").write_text(f"global_step{step}")
            events += src.poll()
        events += src.exited(attempt, 1 - attempt)
    steps = [e["step"] for e in events if e["type"] == "step_end"]
    assert steps == list(range(1, 7)) + list(range(5, 17))
    assert [e["from_step"] for e in events if e["type"] == "resume"] == [4]
    assert [e["step"] for e in events if e["type"] == "checkpoint_saved"] == [4, 8, 12, 16]
    assert any(e["type"] == "error" and e.get("kind") == "ActorDiedError" for e in events)
    rewards = [e["metrics"]["rollout/reward_mean"] for e in events if e["type"] == "step_end"]
    assert rewards[-1] > rewards[0] + 0.5  # as reward_improves reads it


def test_nemo_rl_counts_steps_from_the_checkpoint_it_resumes_from(tmp_path):
    ckpt = tmp_path / "results"
    cmd = ["{python}", "examples/run_grpo_math.py", f"checkpointing.checkpoint_dir={ckpt}"]
    src, out = source("nemo_rl", tmp_path, cmd)
    append(out, 0, FORMATS / "nemo_rl" / "trainer-0.log", ckpt)
    (ckpt / "tmp_step_2").mkdir(parents=True)  # not complete until renamed
    first = src.poll()
    (ckpt / "tmp_step_2").rename(ckpt / "step_2")
    (ckpt / "step_2" / "training_info.json").write_text('{"total_steps": 2}')
    first += src.poll() + src.exited(0, 1)
    append(out, 1, FORMATS / "nemo_rl" / "trainer-0.log", ckpt)
    second = src.poll() + src.exited(1, 0)
    assert brief(first) == [(0, "step_end", 1), (0, "step_end", 2), (0, "checkpoint_saved", 2),
                            (0, "run_end", 2)]
    assert brief(second) == [(1, "resume", 2), (1, "step_end", 3), (1, "step_end", 4),
                             (1, "run_end", 4)]
    assert first[0]["metrics"] == {"loss": 0.0412, "avg_reward": 0.25, "step_time_s": 14.21,
                                   "rollout/reward_mean": 0.25}


@pytest.mark.parametrize("adapter", ["verl", "openrlhf", "nemo_rl"])
def test_what_output_cannot_show_is_refused_naming_the_check_and_adapter(adapter):
    with pytest.raises(ValueError, match=f"matches_baseline.*{adapter}"):
        Scenario.model_validate({"name": "s", "trainer": {
            "adapter": adapter, "command": ["{python}", "t.py"]},
            "expect": [{"matches_baseline": {}}]})
