"""Which clusters scenarios may share, and which fault-free twins are the same run."""

from pathlib import Path

from rlsim.scenario.pool import shape_key, twin_key
from rlsim.spec import ClusterSpec

SPEC = ClusterSpec(name="x", nodes=2, gpus_per_node=1)
CONFIG = Path(__file__).resolve().parents[2] / "fixtures" / "trainer" / "grpo_tiny.yaml"


def test_only_local_clusters_of_one_shape_without_node_local_storage_are_shared():
    assert shape_key(SPEC, "local") == shape_key(SPEC.model_copy(update={"name": "y"}), "local")
    assert shape_key(SPEC, "local") != shape_key(SPEC.model_copy(update={"nodes": 3}), "local")
    assert shape_key(SPEC, "local") != shape_key(
        SPEC.model_copy(update={"gpu_memory_gb": 13}), "local")
    assert shape_key(SPEC, "docker") is None
    assert shape_key(SPEC.model_copy(update={"node_local": ["/tmp/c"]}), "local") is None


def test_a_twin_is_the_same_only_for_the_same_command_config_and_shape(tmp_path):
    cmd = ["python", "-m", "trainer", "--config", str(CONFIG), "run_dir=<twin>", "save_freq=4"]
    key = twin_key(cmd, [CONFIG], SPEC, "local")
    assert key == twin_key(list(cmd), [CONFIG], SPEC.model_copy(update={"name": "y"}), "local")
    assert key != twin_key([*cmd[:-1], "save_freq=5"], [CONFIG], SPEC, "local")
    assert key != twin_key(cmd, [CONFIG], SPEC.model_copy(update={"nodes": 3}), "local")
    copy = tmp_path / "grpo_tiny.yaml"
    copy.write_text(CONFIG.read_text())
    before = twin_key(cmd, [copy], SPEC, "local")
    copy.write_text(CONFIG.read_text() + "\nseed: 2\n")  # same path, other contents
    assert twin_key(cmd, [copy], SPEC, "local") != before
