"""Node shapes as data: the real node types (``like``), one node's own shape, what each node of a
cluster ends up advertising, and the refusals that name the fix."""

from __future__ import annotations

import pytest
from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

from rlsim.host.layout import worker_ports
from rlsim.host.shape import NODE_TYPES, ray_memory_gib
from rlsim.host.spec import ClusterSpec
from rlsim.scenario.schema import ClusterSection


@pytest.mark.parametrize("node_type", NODE_TYPES.values(), ids=list(NODE_TYPES))
def test_each_node_type_reports_the_accelerator_ray_derives_from_its_gpu_name(node_type):
    # what Ray's own GPU detection makes of the name nvidia-smi shows on that node
    derived = NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(node_type.gpu_name)
    assert derived == node_type.accelerator
    assert node_type.source.startswith("https://")


def test_ray_memory_is_the_memory_less_the_object_store_share():
    assert ray_memory_gib(100) == 70.0  # 30% to the object store
    assert ray_memory_gib(2048) == round(2048 - 200e9 / 2**30, 1)  # at most 200 GB


def test_like_fills_the_shape_and_explicit_fields_win():
    spec = ClusterSpec(nodes=2, like="p5.48xlarge", gpus_per_node=4)
    (head, worker) = spec.node_shapes()
    assert (worker.gpus, worker.accelerator, worker.gpu_memory_gb, worker.cpus) == (4, "H100",
                                                                                   80, 192)
    assert worker.memory_gb == ray_memory_gib(2048) and head == worker.__class__(
        0, 4, 80, 192, worker.memory_gb, "H100")
    assert ClusterSpec.model_validate_json(spec.model_dump_json()) == spec  # a state file


def test_one_node_takes_its_own_fields_then_its_type_then_the_cluster():
    spec = ClusterSection(nodes=4, gpus_per_node=8, accelerator="H100", labels={"a": "1"},
                          node={3: {"gpus": 4, "accelerator": "A100", "gpu_memory_gb": 40,
                                    "labels": {"b": "2"}},
                                2: {"like": "g6e.12xlarge", "cpus": 6},
                                0: {"gpus": 0}})
    head, n1, n2, n3 = spec.node_shapes()
    assert (head.gpus, head.accelerator) == (0, None)  # no GPUs: Ray reports no accelerator
    assert (n1.gpus, n1.accelerator, n1.gpu_memory_gb, n1.cpus) == (8, "H100", 80.0, 4)
    assert (n2.gpus, n2.accelerator, n2.gpu_memory_gb, n2.cpus) == (4, "L40S", 48, 6)
    assert (n3.gpus, n3.accelerator, n3.gpu_memory_gb) == (4, "A100", 40)
    assert n3.labels == {"a": "1", "b": "2"} and n1.labels == {"a": "1"}
    assert spec.gpus() == 16 and n3.describe() == "4x A100 40G, 4 CPU"


@pytest.mark.parametrize(("fields", "words"), [
    ({"like": "p6"}, ["no node type 'p6'", "p5.48xlarge"]),
    ({"node": {2: {"gpus": 1}}}, ["node 2 has a shape of its own", "nodes 0..1"]),
    ({"node": {1: {"gpus": 0, "accelerator": "A100"}}}, ["node 1: an accelerator type needs"]),
    ({"node": {1: {"like": "x"}}}, ["no node type 'x'"]),
    ({"node": {1: {"gpu": 2}}}, ["Extra inputs"]),
    ({"cuda_devices": "0;1"}, ["cuda_devices '0;1'", "CUDA_VISIBLE_DEVICES"]),
    ({"node": {1: {"gpus": 0, "cuda_devices": "0"}}}, ["node 1: cuda_devices needs GPUs"]),
    ({"gpus_per_node": 0, "cuda_devices": "0"}, ["cuda_devices needs GPUs"]),
    ({"node": {1: {"resources": {"GPU": 1}}}}, ["'GPU' is set by Ray"]),
    ({"nodes": 32, "node": {3: {"gpus": 16}}}, ["node 3: nodes=32 with gpus=16", "22 Ray workers",
                                                "20 worker ports"]),
])
def test_a_shape_that_cannot_be_is_refused_naming_the_field_and_the_fix(fields, words):
    with pytest.raises(ValueError) as e:
        ClusterSpec(**{"nodes": 2, **fields})
    for word in words:
        assert word in str(e.value)


def test_a_node_types_cpus_count_for_placement_not_for_worker_ports():
    # 192 CPUs a node would need 202 worker ports if each ran a task at once; 32 nodes have 20
    assert worker_ports(32) == 20
    spec = ClusterSpec(nodes=32, like="p5.48xlarge")  # accepted: CPUs are not capped to fit...
    # ...and each node still advertises all 192 of its CPUs for Ray to place tasks on
    assert spec.cpus_per_node == 192
    assert [n.cpus for n in spec.node_shapes()] == [192] * 32


def test_real_gpus_stand_behind_the_nodes_gpus_in_turn_and_fake_ones_say_so():
    from rlsim.backends.node_start import gpu_env
    from rlsim.contract import FAKE_GPUS_VAR

    spec = ClusterSpec(nodes=3, gpus_per_node=4, cuda_devices="0,1",
                       node={2: {"cuda_devices": "GPU-8f3c-11"}})
    shapes = spec.node_shapes()
    assert [n.cuda_devices for n in shapes] == ["0,1", "0,1", "GPU-8f3c-11"]
    # GPU j of a node is device j mod their number: Ray hands worker j that entry
    assert gpu_env(shapes[0].cuda_devices, 4) == {"CUDA_VISIBLE_DEVICES": "0,1,0,1"}
    assert gpu_env(shapes[2].cuda_devices, 2) == {"CUDA_VISIBLE_DEVICES": "GPU-8f3c-11,GPU-8f3c-11"}
    # fake GPUs (the default), or a node that lost all its GPUs: the trainer keeps to the CPU
    assert gpu_env(None, 8) == {FAKE_GPUS_VAR: "1"}
    assert gpu_env("0", 0) == {FAKE_GPUS_VAR: "1"}
    assert ClusterSpec(nodes=2).node_shapes()[1].cuda_devices is None


def test_the_docker_backend_refuses_real_gpus_naming_the_field():
    from rlsim.backends.docker import DockerCluster

    refused = DockerCluster.refusal(ClusterSpec(nodes=2, cuda_devices="0"), node_local=False)
    assert refused is not None and "cuda_devices" in str(refused)


def test_one_device_repeated_for_a_nodes_gpus_is_seen_once_and_gpu_lost_is_refused_on_it():
    from rlsim.contract import distinct_devices
    from rlsim.faults.gpu_lost import GpuLost

    # CUDA reads "0,0" as no device at all: a process seeing several GPUs keeps each device once
    assert distinct_devices("0,0,0,0") == "0" and distinct_devices("1,0,1,0") == "1,0"
    spec = ClusterSpec(nodes=2, gpus_per_node=2, cuda_devices="0")
    field, why = GpuLost.cluster_problem(GpuLost.Params(node=1, gpu=0), spec)
    assert field == "node" and "cuda_devices" in why
    assert GpuLost.cluster_problem(GpuLost.Params(node=1, gpu=0),
                                   ClusterSpec(nodes=2, gpus_per_node=2)) is None
