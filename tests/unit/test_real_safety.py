"""Safe by default on real clusters: `rlsim run --dry-run` lists each scenario as runnable,
skipped (with the reason) or refused, touching no cluster; disruptive faults against
`--backend real` are refused before anything connects, unless --allow-disruptive."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from rlsim import commands as cli

pytest_plugins = ["pytester"]


def run(*args: str):
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def test_dry_run_lists_each_scenario_with_its_reason_and_connects_nowhere():
    code, out = run("run", "scenarios", "--backend", "real", "--dry-run")
    lines = {line.split()[1].rstrip(":"): line for line in out.splitlines()
             if line.startswith(("RUN", "SKIP", "REFUSED"))}
    assert code == 0, out
    assert lines["too_few_gpus"].startswith("RUN")
    assert lines["head_lost"].startswith("REFUSED") and "kill_head" in lines["head_lost"] \
        and "--allow-disruptive" in lines["head_lost"]
    assert lines["partitioned_worker"].startswith("SKIP") and "--backend local" in \
        lines["partitioned_worker"]
    assert lines["checkpoint_node_local"].startswith("SKIP")
    code, out = run("run", "scenarios", "--backend", "real", "--dry-run", "--allow-disruptive")
    assert "REFUSED" not in out and "RUN      head_lost (kill_head)" in out


def test_a_disruptive_scenario_on_a_real_cluster_is_refused_before_connecting():
    # no --ray-address at all: had it tried to connect, it would have said it needs one
    code, out = run("run", "scenarios/head_lost.yaml", "scenarios/node_failure_mid_run.yaml",
                    "--backend", "real")
    assert code == 2, out
    assert "head_lost (kill_head)" in out and "node_failure_mid_run (kill_node)" in out
    assert "--allow-disruptive" in out and "address" not in out


def test_pytest_refuses_them_too_unless_allowed(pytester):
    scenarios = pytester.mkdir("scenarios")
    (scenarios / "lose_a_node.yaml").write_text(
        "name: lose_a_node\ncluster: {nodes: 2, gpus_per_node: 1}\n"
        "trainer: {config: grpo_tiny}\n"
        "faults:\n  - at: {step: 2}\n    kill_node: {node: 1}\nexpect:\n  - completes: {}\n")
    result = pytester.runpytest("scenarios", "--backend", "real", "-p", "no:cacheprovider")
    assert result.ret == 4  # pytest's usage error: nothing ran
    result.stderr.fnmatch_lines(["*refused*lose_a_node (kill_node)*--allow-disruptive*"])
    result = pytester.runpytest("scenarios", "--backend", "real", "-k", "not lose_a_node")
    assert result.ret == 5  # deselected: nothing to refuse, nothing collected to run


def test_an_address_nobody_serves_is_one_line_in_seconds_not_minutes_of_retries():
    import time

    t0 = time.monotonic()
    code, out = run("run", "scenarios/too_few_gpus.yaml", "--backend", "real", "--ray-address",
                    "127.77.250.250:1")  # loopback: nothing listens there
    assert code == 2 and "no Ray cluster answers at 127.77.250.250:1" in out, out
    assert time.monotonic() - t0 < 10
    code, out = run("run", "scenarios/too_few_gpus.yaml", "--backend", "real")
    assert code == 2 and "--ray-address HOST:PORT" in out


def test_without_backend_each_scenario_runs_on_the_backend_its_file_names(tmp_path):
    """As the pytest plugin does: a file that names ``backend: docker`` is not skipped for want
    of ``--backend docker``; ``--backend`` still decides for all of them."""
    from rlsim.backends.base import Unsupported
    from rlsim.scenario.loader import load
    from rlsim.scenario.runnable import check_runnable

    sc = load("scenarios/checkpoint_node_local.yaml")
    try:
        check_runnable(sc, "docker")
        expected = "RUN      checkpoint_node_local"
    except Unsupported as e:  # no engine here: the docker backend's own reason, not the option's
        expected = f"SKIP     checkpoint_node_local: {e}"
    code, out = run("run", "scenarios/checkpoint_node_local.yaml", "--dry-run")
    assert code == 0 and expected in out, out
    code, out = run("run", "scenarios/checkpoint_node_local.yaml", "--dry-run", "--backend",
                    "local")
    assert code == 0 and "SKIP     checkpoint_node_local" in out and "--backend docker" in out


def test_gpu_oom_takes_all_it_can_get_in_pieces_though_less_than_mem_get_info_says(monkeypatch):
    # an H100 said 77.86 GiB free and refused one 77.86 GiB allocation: the hold must still
    # take nearly all of it, in pieces
    import torch

    from rlsim.backends.real import NodeAgent

    gib, room = 2**30, int(5.3 * 2**30)
    held = []

    def empty(size, dtype, device):
        if sum(held) + size > room:
            raise torch.OutOfMemoryError("CUDA out of memory")
        held.append(size)
        return size

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (room + gib, 80 * gib))
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    agent = NodeAgent(preload_torch=False)
    taken = agent.hold_gpu(80)
    assert room - sum(held) < 4 << 20 and taken == [{"gpu": 0, "gb": 5.3, "free_gb": 6.3}]
    # memory the trainer gives back later is taken too, until release
    room += gib
    deadline = time.monotonic() + 10
    while room - sum(held) >= 4 << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert room - sum(held) < 4 << 20
    assert agent.release_gpu() > 0 and agent._grower is None
    held.clear()
    assert agent.hold_gpu(2)[0]["gb"] == 2.0 and sum(held) == 2 * gib  # asked less: that much
    agent.release_gpu()
