"""The Ray releases rlsim claims are one edit: rlsim/ray_internals/releases.py's PROVEN. The code
reads it; what cannot read Python (pyproject.toml's dependencies, the README, the docs, the CI
templates, the integration test that pins the oldest release) says the same range, or a test here
names the file, the line and what to write there."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from rlsim.ray_internals import releases

ROOT = Path(__file__).parents[2]
# where a person reads the range: the front page, the docs, the CI templates a user copies
PROSE = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
         *sorted((ROOT / "ci" / "github").glob("*.yml"))]
# "the Ray your project pins (2.48 to 2.60", "every Ray release from 2.48 to 2.60"
WORDS = re.compile(r"\bRay\b[^.]{0,60}?\b(\d+\.\d+)\s+to\s+(\d+\.\d+)\b")
# a requirement on Ray with a range: ray[default]>=2.48,<2.61
SPEC = re.compile(r"\bray(\[[\w,]+\])?((?:[<>]=?[\d.]+,?)+)")
# a pin of one Ray release, in a command a user copies: "ray[default]==2.48.0"
PIN = re.compile(r"\bray(\[[\w,]+\])?==([\d.]+)")
HOME = "rlsim/ray_internals/releases.py"


def _where(path: Path, text: str, at: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, at) + 1}"


def range_disagreements(path: Path) -> list[str]:
    """Each statement of Ray's range, or pin of a Ray release, in the file at ``path`` that
    disagrees with rlsim's (:mod:`rlsim.ray_internals.releases`): where, what it says, and what
    to write."""
    text = path.read_text()
    supported = SpecifierSet(releases.SUPPORTED_TEXT)
    out = []
    for m in WORDS.finditer(text):
        if (m.group(1), m.group(2)) != releases.PROVEN:
            out.append(f"{_where(path, text, m.start(1))} says {m.group(1)} to {m.group(2)}; "
                       f"write {releases.SUPPORTED_WORDS}")
    for m in SPEC.finditer(text):
        if SpecifierSet(m.group(2).rstrip(",")) != supported:
            out.append(f"{_where(path, text, m.start())} says {m.group(0)}; write "
                       f"ray{m.group(1) or ''}{releases.SUPPORTED_TEXT}")
    for m in PIN.finditer(text):
        if Version(m.group(2)) not in supported:
            out.append(f"{_where(path, text, m.start())} pins {m.group(0)}, outside "
                       f"{releases.SUPPORTED_TEXT}; pin a release from {releases.SUPPORTED_WORDS}")
    return out


@pytest.mark.parametrize("path", [ROOT / "pyproject.toml", *PROSE],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_statement_of_rays_range_is_rlsims(path):
    bad = range_disagreements(path)
    assert bad == [], (f"Ray's range is {releases.SUPPORTED_TEXT} ({HOME}, PROVEN); change "
                       + "; ".join(bad))


def test_the_range_is_stated_where_a_user_reads_it():
    """The check above looks in these places: a rewording that it no longer recognises would
    leave them unchecked."""
    stated = {path.relative_to(ROOT).as_posix() for path in PROSE
              if WORDS.search(path.read_text()) or SPEC.search(path.read_text())}
    assert {"README.md", "docs/quickstart.md", "docs/concepts/cluster.md",
            "docs/ray-releases.md", "ci/github/scenarios.yml"} <= stated


def test_pyprojects_requirements_on_ray_are_the_range():
    """Every requirement on Ray that pyproject.toml declares (the dependencies, each extra) is a
    valid requirement with rlsim's range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in [*project["dependencies"],
                                     *(r for extra in project["optional-dependencies"].values()
                                       for r in extra)]]
    on_ray = [r for r in reqs if r.name == "ray"]
    assert len(on_ray) >= 2, "pyproject.toml no longer requires ray (dependencies, dev extra)"
    assert {str(r.specifier) for r in on_ray} == {str(SpecifierSet(releases.SUPPORTED_TEXT))}


def test_the_gates_oldest_ray_is_the_oldest_rlsim_claims():
    """The integration test that stands for the matrix in the gate pins the oldest release rlsim
    claims; its expectations (no token auth, Train V1 by default) are that release's, so it is
    named here to be revised, not derived."""
    path = ROOT / "tests" / "integration" / "test_user_project.py"
    text = path.read_text()
    m = re.search(r'^OLDEST_RAY = "([\d.]+)"', text, re.M)
    assert m, f"{path.relative_to(ROOT)} no longer names OLDEST_RAY"
    assert m.group(1) == f"{releases.FIRST}.0", (
        f"{_where(path, text, m.start())}: OLDEST_RAY is {m.group(1)}; rlsim's oldest Ray is "
        f"{releases.FIRST}.0 ({HOME}): change it and the test's expectations of that release")


def test_the_matrix_knows_every_release_rlsim_claims():
    spec = importlib.util.spec_from_file_location("ray_matrix", ROOT / "ci" / "ray_matrix.py")
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    assert matrix.unknown_minors() == [], (
        f"ci/ray_matrix.py: NEWEST_PATCH names no patch of Ray {matrix.unknown_minors()}, "
        f"which rlsim claims ({HOME}): add the newest patch of each")
    assert matrix.RELEASES.SUPPORTED_TEXT == releases.SUPPORTED_TEXT
    assert matrix.EVERY[0].startswith(releases.LAST + ".")
    assert f"{releases.FIRST}.0" in matrix.DEFAULT
    assert all(Version(r) in SpecifierSet(releases.SUPPORTED_TEXT) for r in matrix.EVERY)


@pytest.mark.parametrize(("text", "said"), [
    ("the Ray your project pins (2.48 to\n  2.59, proven", "says 2.48 to 2.59; write"),
    ('dependencies = [\n    "ray[default]>=2.48,<2.60",\n', 'pyproject.toml:2 says ray[default]'),
    ('pip install "ray[default]==2.47.1" x.whl', "pins ray[default]==2.47.1, outside"),
    ("every Ray release from 2.49 to 2.60, every step", "says 2.49 to 2.60"),
])
def test_the_range_check_sees_a_stale_statement(tmp_path, monkeypatch, text, said):
    monkeypatch.setattr(releases, "PROVEN", ("2.48", "2.60"))
    monkeypatch.setattr(releases, "SUPPORTED_TEXT", ">=2.48,<2.61")
    monkeypatch.setattr(releases, "SUPPORTED_WORDS", "2.48 to 2.60")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    bad = range_disagreements(path)
    assert len(bad) == 1 and said in bad[0], bad
    path.write_text("the Ray your project pins (2.48 to 2.60), ray[train]>=2.48,<2.61, "
                    "ray==2.60.1, and a reward rising from 0.12 to 1.0")
    assert range_disagreements(path) == []
