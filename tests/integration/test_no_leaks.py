"""no_leaks on real Ray objects: what a trainer leaves (a detached actor and placement group of
its own) fails, named with the fix; what Ray's own libraries keep (Ray Data's detached actors) is
a note, and is removed before the cluster is handed to the next scenario."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlsim.history import read_events
from rlsim.plugin.session import require
from rlsim.scenario.loader import load
from rlsim.scenario.pool import Pool
from rlsim.scenario.runner import play

pytestmark = pytest.mark.integration
LEAKY = Path(__file__).parents[1] / "fixtures" / "leaky" / "leaky.py"
SCENARIO = """name: {mode}
cluster: {{nodes: 2, gpus_per_node: 0}}
trainer: {{adapter: events, command: ["{{python}}", "leaky.py", "{mode}"], timeout_s: 120}}
expect: [{{completes: true}}, {{no_leaks: true}}]
"""


def _stories(tmp_path: Path, backend: str) -> dict:
    shutil.copy(LEAKY, tmp_path / "leaky.py")
    pool, results = Pool(reuse=True), {}
    try:
        for mode in ("data", "leak"):  # one shape: the first hands its cluster to the second
            (tmp_path / f"{mode}.yaml").write_text(SCENARIO.format(mode=mode))
            results[mode] = play(load(tmp_path / f"{mode}.yaml"), tmp_path / "out" / mode,
                                 backend=backend, pool=pool)
    finally:
        assert pool.close() == []
    return results


def _verdict(result):
    return next(v for v in result.checks if v.check == "no_leaks")


def test_the_trainers_leftovers_fail_and_rays_own_are_a_note(tmp_path):
    results = _stories(tmp_path, "local")
    data, leak = _verdict(results["data"]), _verdict(results["leak"])
    assert data.ok and "note, Ray's own libraries keep" in data.message and "(ray.data)" in \
        data.message, data.message
    assert not leak.ok and leak.value == 2, leak.message
    assert "the trainer's actor Keeper 'keeper'" in leak.message and "ray.kill(" in leak.message
    assert "the trainer's placement group" in leak.message and "remove_placement_group" in \
        leak.message
    assert "Ray given" in leak.message  # how long Ray was waited for
    timeline = read_events(tmp_path / "out" / "data" / "timeline.jsonl")
    removed = [e for e in timeline if e["type"] == "ray_leftovers_removed"]
    assert removed and not removed[0]["failed"], removed  # the next scenario saw none of them
    end = next(e for e in read_events(tmp_path / "out" / "leak" / "timeline.jsonl")
               if e["type"] == "scenario_end")
    assert not end["kept"] and json.dumps(end["leaks"]).count('"owner": "trainer"') == 2


@pytest.mark.docker
@pytest.mark.slow
def test_on_container_nodes_too(tmp_path):
    from rlsim.backends.docker_engine import engine_problem

    require(engine_problem())
    results = _stories(tmp_path, "docker")
    assert _verdict(results["data"]).ok and not _verdict(results["leak"]).ok
