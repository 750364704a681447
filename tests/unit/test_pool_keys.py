"""Which clusters scenarios may share, and which fault-free twins are the same run."""


from rlsim.backends.base import Unsupported
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.pool import shape_key
from rlsim.scenario.twins import inputs as twin_inputs
from rlsim.scenario.twins import key as twin_key
from trainer.config import PRESETS

SPEC = ClusterSpec(name="x", nodes=2, gpus_per_node=1)
CONFIG = PRESETS / "grpo_tiny.yaml"


def test_only_local_clusters_of_one_shape_without_node_local_storage_are_shared():
    assert shape_key(SPEC, "local") == shape_key(SPEC.model_copy(update={"name": "y"}), "local")
    assert shape_key(SPEC, "local") != shape_key(SPEC.model_copy(update={"nodes": 3}), "local")
    assert shape_key(SPEC, "local") != shape_key(
        SPEC.model_copy(update={"gpu_memory_gb": 13}), "local")
    assert shape_key(SPEC, "docker") is None
    assert shape_key(SPEC.model_copy(update={"node_local": ["/tmp/c"]}), "local") is None


def _key(cmd, inputs, spec=SPEC, backend="local", env=None):
    return twin_key(twin_inputs(cmd, spec, backend, env or {}), inputs)


def test_a_twin_is_the_same_only_for_the_same_command_config_shape_env_and_versions(
        tmp_path, monkeypatch):
    cmd = ["python", "-m", "trainer", "--config", str(CONFIG), "run_dir=<twin>", "save_freq=4"]
    key = _key(cmd, [CONFIG])
    assert key == _key(list(cmd), [CONFIG], SPEC.model_copy(update={"name": "y"}))
    assert key != _key([*cmd[:-1], "save_freq=5"], [CONFIG])
    assert key != _key(cmd, [CONFIG], SPEC.model_copy(update={"nodes": 3}))
    assert key != _key(cmd, [CONFIG], env={"STEPS": "7"})
    copy = tmp_path / "grpo_tiny.yaml"
    copy.write_text(CONFIG.read_text())
    before = _key(cmd, [copy])
    copy.write_text(CONFIG.read_text() + "\nseed: 2\n")  # same path, other contents
    assert _key(cmd, [copy]) != before
    from rlsim.scenario import twins
    real = twins.versions()
    monkeypatch.setattr(twins, "versions", lambda: {**real, "torch": "0.0.1"})
    assert _key(cmd, [CONFIG]) != key  # another torch: another twin


def test_the_catalogue_runs_each_shape_in_a_row_node_killers_last():
    """Scenarios whose clusters are interchangeable (equal scenario_key) end up adjacent, those
    that can leave a node down last among them; other items keep their places. The runner's
    own spec (rlsim.scenario.runner.make_cluster) must agree: equal keys, equal pool keys."""
    from rlsim.scenario.loader import load
    from rlsim.scenario.pool import hand_on_order, scenario_key
    from rlsim.scenario.runnable import check_runnable
    from rlsim.scenario.runner import make_cluster

    def runs_here(sc) -> bool:  # not one that this host skips (trainer.requires a framework)
        try:
            check_runnable(sc, "local")
        except Unsupported:
            return False
        return True

    root = CONFIG.parents[2] / "scenarios"
    catalogue = [load(p) for p in sorted(root.glob("*.yaml"))]
    items = ["first", *catalogue, "last"]
    ordered = hand_on_order(items, lambda x: None if isinstance(x, str) else x)
    assert ordered[0] == "first" and ordered[-1] == "last"
    scenarios = ordered[1:-1]
    assert sorted(sc.name for sc in scenarios) == sorted(sc.name for sc in catalogue)
    keys = [scenario_key(sc) for sc in scenarios]
    for key in set(keys):
        row = [i for i, k in enumerate(keys) if k == key]
        assert row == list(range(row[0], row[-1] + 1)), f"shape {key} not in a row"
        downs = [scenarios[i].may_down_node for i in row]
        assert downs == sorted(downs), [scenarios[i].name for i in row]
    local = [sc for sc in scenarios if sc.cluster.backend == "local" and runs_here(sc)]
    by_key: dict[str, set] = {}
    for sc in local:
        spec = make_cluster(sc, "local").spec
        by_key.setdefault(scenario_key(sc), set()).add(shape_key(spec, "local"))
    assert all(len(pool_keys) == 1 for pool_keys in by_key.values())
    assert {"head_lost", "node_failure_mid_run"} <= {sc.name for sc in local if sc.may_down_node}


def test_workers_are_warmed_only_for_a_run_that_will_place_them():
    """The reference trainer's warm workers (one per worker slot, per logical node) are asked for
    only where its plan fits the cluster: a run the memory ledger or a too-small cluster refuses
    before any worker starts gets none (their imports would be CPU no one uses)."""
    from rlsim.adapters import ADAPTERS
    from rlsim.scenario.loader import load

    adapter = ADAPTERS["rlsim"]

    def counts(name: str) -> list[int]:
        sc = load(PRESETS.parents[1] / "scenarios" / f"{name}.yaml")
        nodes = ClusterSpec(name="x", **sc.cluster.shape()).node_shapes()
        modules, per_node = adapter.warm_workers(sc.trainer, nodes)
        assert modules[:2] == ["torch", "torch._dynamo"] and "trainer.host" in modules
        return per_node

    assert counts("node_failure_mid_run") == [1, 1]
    assert counts("gpu_oom_at_start") == []  # the ledger refuses 1B params on 13 GiB GPUs
    assert counts("vllm_engine_cannot_fit") == []  # the same for a vLLM engine's 90%
    assert counts("too_few_gpus") == []  # 4 nodes asked of 3
    assert counts("gpu_oom_micro_batch_halving") != []  # it fits once halved
