"""Each concept has one definition: the fault and check registries are the only ones, everything
else reads them; every fault is exercised by a scenario of the catalogue."""

import ast
from pathlib import Path

import pytest

from rlsim.backends.base import Unsupported
from rlsim.checks import CHECKS
from rlsim.faults import FAULTS
from rlsim.faults.base import Fault
from rlsim.scenario.loader import discover, load
from rlsim.scenario.schema import FaultEntry

ROOT = Path(__file__).parents[2]


def test_every_fault_has_a_scenario_in_the_catalogue():
    used = {f.kind for path in discover(ROOT / "scenarios") for f in load(path).faults}
    assert set(FAULTS) - used == set()


def test_the_schema_reads_fault_parameters_from_the_fault_module():
    entry = FaultEntry.model_validate({"at": {"step": 1}, "disk_full": {}})
    assert isinstance(entry.params, FAULTS["disk_full"].Params)
    assert entry.params.path == "checkpoints"
    with pytest.raises(ValueError, match=r"disk_full.path: '../x': name a directory inside"):
        FaultEntry.model_validate({"at": {"step": 1}, "disk_full": {"path": "../x"}})


def test_disruptive_faults_are_those_that_hit_the_cluster():
    disruptive = {name for name, f in FAULTS.items() if f.disruptive}
    assert set(FAULTS) - {"corrupt_checkpoint", "disk_full", "slow_storage"} == disruptive


def test_no_backend_name_is_branched_on_outside_the_backends():
    offenders = []
    for path in (ROOT / "rlsim").rglob("*.py"):
        if "backends" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "cluster.name ==" in line or ".name == \"real\"" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []


def test_every_check_has_its_parameters_beside_its_judge():
    for name, check in CHECKS.items():
        assert check.judge.__name__ == name
        assert check.Params.__module__ == check.judge.__module__
        assert check.judge.__module__.startswith("rlsim.checks.")  # a family's module


def test_a_fault_a_machine_cannot_run_is_a_missing_part():
    class NeedsRoot(Fault):
        name = "needs_root"

        @classmethod
        def unavailable(cls):
            return "needs root"

    with pytest.raises(Unsupported, match="needs root") as e:
        NeedsRoot.check_backend(object, "local", {})
    assert e.value.missing_part


def _imports(path: Path, modules: set[str]) -> set[str]:
    """rlsim modules ``path`` imports anywhere in it (in functions and TYPE_CHECKING blocks too):
    ``from a import b`` is an edge to module ``a.b`` when there is one, else to ``a``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                      else node.module for a in node.names}
    return found & modules


def test_no_import_cycles_lazy_ones_included():
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "rlsim").rglob("*.py")}
    graph = {m: _imports(p, set(files)) - {m} for m, p in files.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start] - seen:
            seen.add(nxt)
            if nxt == goal or reaches(nxt, goal, seen):
                return True
        return False

    assert sorted(m for m in graph if reaches(m, m, set())) == []


def test_one_cluster_shape_with_one_set_of_defaults():
    from rlsim.commands.cluster import default as _default
    from rlsim.host.spec import ClusterShape, ClusterSpec
    from rlsim.scenario.schema import ClusterSection

    assert issubclass(ClusterSection, ClusterShape) and issubclass(ClusterSpec, ClusterShape)
    assert ClusterSection().shape() == ClusterSpec().shape() == ClusterShape().shape()
    assert (_default("nodes"), _default("gpus_per_node")) == (2, 8)
    for model in (ClusterSection, ClusterSpec):
        with pytest.raises(ValueError, match="less than or equal to 64"):
            model(nodes=65)


@pytest.mark.parametrize("backend,section,needle", [
    ("local", {"python": {1: "/usr/bin/python3"}}, "needs container nodes"),
    ("docker", {"gcs_ft": "redis"}, "runs on --backend local"),
    ("real", {"gcs_ft": "redis"}, "the cluster owner's setting"),
    ("real", {"ray_version": {1: "2.59.0"}}, "needs container nodes"),
])
def test_each_backend_says_what_of_a_cluster_section_it_cannot_run(backend, section, needle):
    from rlsim.backends import cluster_class
    from rlsim.scenario.schema import ClusterSection

    refused = cluster_class(backend).refusal(ClusterSection(nodes=2, **section), False)
    assert refused is not None and needle in str(refused)
    assert cluster_class("local").refusal(ClusterSection(nodes=2), False) is None
