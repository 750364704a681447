"""`rlsim plan` against the frameworks' own launches across their releases: every file under
tests/fixtures/plan/corpus is a launch command or config copied from a framework's repository or
documentation (its source, path and commit in its first line and in the corpus README), and
corpus.yaml holds the verdict the framework itself reaches on each cluster, read from its source
at that release: whether it gets placed and running, and the GPUs it asks for. A launch the
framework refuses before placing anything (its note starts with REFUSED) must not fit here either;
no launch is ever refused for a flag or a zero."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsim.plan import openrlhf, rlinf, roll, verl
from rlsim.plan.emit import mirrorable, scenario, scenario_name
from rlsim.plan.model import parse_cluster, place
from rlsim.scenario.schema import Scenario

CORPUS = Path(__file__).parents[1] / "fixtures" / "plan" / "corpus"
ENTRIES = yaml.safe_load((CORPUS / "corpus.yaml").read_text())
READERS = {"openrlhf": openrlhf, "verl": verl, "roll": roll, "rlinf": rlinf}


def release(entry: dict) -> str | None:
    """The release the corpus judged the file by, where rlsim knows that release's rules (the
    OpenRLHF docs example names a docs commit, not a release: judged as the flags select)."""
    tag = entry["release"]
    return tag if tag.startswith("v") else None


def judge(entry: dict, strict: bool = True):
    nodes = parse_cluster(entry["cluster"])
    reader, path = READERS[entry["framework"]], CORPUS / entry["file"]
    tag = release(entry) if strict else None
    if entry["framework"] in ("openrlhf", "verl"):  # a launch command, as the user pastes it
        return place(reader.layout([path.read_text()], tag), nodes)
    return place(reader.layout(str(path), nodes, tag), nodes)


def test_every_fixture_is_judged_and_names_its_source():
    files = {p.name for p in CORPUS.iterdir() if p.suffix in (".sh", ".yaml")} - {"corpus.yaml"}
    assert files == {e["file"] for e in ENTRIES}
    for name in files:
        first = (CORPUS / name).read_text().splitlines()[0]
        assert first.startswith("# source: "), name


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e['file']}@{e['cluster']}")
def test_each_launch_gets_its_frameworks_verdict(entry):
    """Judged with --release of the corpus entry: as that release would judge it."""
    p = judge(entry)
    said = [f.line() for f in p.findings]
    assert (p.fits, p.asked) == (entry["fits"], entry["gpus"]), \
        f"{entry['why']} {entry.get('note', '')}\nrlsim: {said}"
    if not p.fits and not entry.get("note", "").startswith("REFUSED"):
        # a capacity misfit is said as one: the GPUs asked and there, or the node shape
        assert any(f.level == "error" for f in p.findings)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["fits"]],
                         ids=lambda e: f"{e['file']}@{e['cluster']}")
def test_each_launch_that_fits_emits_a_valid_scenario(entry):
    sc = scenario(judge(entry), scenario_name(Path(entry["file"])))
    Scenario.model_validate(sc)
    mirrorable(sc)  # and the reference trainer can run its placement


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["framework"] in ("openrlhf", "verl")],
                         ids=lambda e: f"{e['file']}@{e['cluster']}")
def test_without_a_release_no_launch_is_refused_for_a_flag(entry):
    """As a user runs it, with no --release: the flags select the releases; a flag or key of
    another release is a warning, and the verdict stands on what the launch asks."""
    p = judge(entry, strict=False)
    errors = " ".join(f.message for f in p.findings if f.level == "error")
    assert "unrecognized arguments" not in errors and "Could not override" not in errors
    assert p.asked == entry["gpus"]
