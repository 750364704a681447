"""Whose is what a run left: the attribution of the GCS's live objects, as data."""

from __future__ import annotations

from rlsim.backends.ray_state import RayObject
from rlsim.scenario.leftovers import attribute, library


def actor(name: str, module: str, detached: bool, id_: str = "a1" * 8) -> RayObject:
    return RayObject("actor", id_, name, module, "01000000", detached, "127.77.0.11", "ALIVE")


def test_library_of_a_module():
    assert library("ray.data._internal.cluster_autoscaler.x") == "ray.data"
    assert library("ray.train.v2._internal.state") == "ray.train"
    assert library("mypkg.actors") == "" and library("ray") == ""


def test_each_object_has_its_owner_and_fix():
    coordinator = actor("_AutoscalingCoordinatorActor 'AutoscalingCoordinator'",
                        "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator",
                        True, "c0" * 8)
    objects = [
        coordinator,
        actor("Keeper 'keeper'", "__main__", True),
        actor("Worker", "train", False, "b2" * 8),
        actor("NodeAgent", "rlsim.backends.real", True, "d3" * 8),
        actor("TrainWorker", "ray.train._internal.worker_group", False, "e4" * 8),
        RayObject("placement group", "f5" * 8, "(unnamed)", job="01000000", detached=True,
                  state="CREATED", creator=""),
        RayObject("placement group", "a6" * 8, "coord", state="CREATED", creator="c0" * 8),
        RayObject("job", "02000000", "driver pid 42", job="02000000", node="127.77.0.10"),
    ]
    got = [(x.kind, x.owner, x.library) for x in attribute(objects)]
    assert got == [("actor", "ray", "ray.data"), ("actor", "trainer", ""),
                   ("actor", "trainer", ""), ("actor", "rlsim", ""),
                   ("actor", "trainer", ""),  # a library's actor the job still holds: the job's
                   ("placement group", "trainer", ""), ("placement group", "ray", "ray.data"),
                   ("job", "trainer", "")]
    fixes = [x.fix for x in attribute(objects)]
    assert "ray.kill(ray.get_actor" in fixes[1] and "remove_placement_group" in fixes[5]
    assert "report it" in fixes[3] and "ray.shutdown()" in fixes[7]
