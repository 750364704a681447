"""The scenario report in a real browser: headless Chromium opens report.html rendered from
timelines recorded by real catalogue runs (tests/fixtures/report: a kill with a restart, a
partition, a pause, a port block, GPU and host memory faults, a relaunch, a failed scenario),
and the page must raise no script error and draw, for every scenario, a lane per node, a lane
and a shaded span per fault, the steps, and the checks. Screenshots are kept as CI artifacts
in ``$RLSIM_ARTIFACTS`` (default ``reports/``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rlsim.plugin.session import require
from rlsim.report import render
from rlsim.report.browser import find_chromium, look
from rlsim.result import read_results

pytestmark = pytest.mark.integration
RECORDED = Path(__file__).parents[1] / "fixtures" / "report"
ARTIFACTS = Path(os.environ.get("RLSIM_ARTIFACTS", Path(__file__).parents[2] / "reports"))


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    if find_chromium() is None:
        require("no Chromium on PATH: the report's browser test needs Debian's `chromium` "
                "(ci/setup.sh installs it as root)")
    root = tmp_path_factory.mktemp("report")
    shutil.copytree(RECORDED, root, dirs_exist_ok=True)
    page = render(root)
    return root, look(page, ARTIFACTS / "report-screenshots", then=SORT_BY_DURATION)


# a user clicks the summary's "took (s)" head twice: the rows' durations, as they then stand
SORT_BY_DURATION = """
(() => {
  const th = Array.from(document.querySelectorAll('table.summary th'))
    .find(h => h.textContent === 'took (s)');
  const took = () => Array.from(document.querySelectorAll('table.summary tbody tr'))
    .map(r => Number(r.cells[th.cellIndex].textContent));
  th.click(); const up = took(); th.click();
  return JSON.stringify({up, down: took()});
})()
"""


def test_the_page_raises_no_script_error_and_draws_every_timeline(seen):
    root, look_ = seen
    assert look_.errors == []
    names = [s.scenario for s in read_results(root)]
    assert look_.summary_rows == len(names) >= 8
    assert [p["id"] for p in look_.plots] == [f"plot-sc-{n}" for n in names]
    assert all(p["drawn"] and p["points"] for p in look_.plots)


# What each recorded timeline (tests/fixtures/report/*/timeline.jsonl) holds, read off the files:
# its nodes (cluster_ready's addresses, node 0 the head) and its faults (fault_injected's index
# and fault), as the page names their lanes
HEAD, N1, N2, N3 = ("node 0 (head) 127.77.0.10", "node 1 127.77.0.11", "node 2 127.77.0.12",
                    "node 3 127.77.0.13")
LANES = {
    "node_failure_mid_run": ([HEAD, N1, N2, N3], ["fault 0: kill_node"]),
    "relaunch_after_node_restart": ([HEAD, N1], ["fault 0: restart_node"]),
    "partitioned_worker": ([HEAD, N1, N2], ["fault 0: partition"]),
    "paused_straggler": ([HEAD, N1, N2], ["fault 0: pause_node"]),
    "worker_ports_blocked": ([HEAD, N1, N2], ["fault 0: block_port"]),
    "gpu_oom_colocated": ([HEAD, N1], ["fault 0: gpu_oom"]),
    "host_oom": ([HEAD, N1], ["fault 0: host_oom"]),
    "actor_killed_by_class": ([HEAD, N1], ["fault 0: kill_role"]),
    "head_lost": ([HEAD, N1], ["fault 0: kill_head"]),
    "python_version_mismatch": ([], []),  # cluster_refused: no cluster, no fault
}
REFUSED = {"python_version_mismatch"}


def test_each_node_and_each_fault_has_its_lane_and_each_fault_its_shading(seen):
    root, look_ = seen
    scenarios = [s.scenario for s in read_results(root)]
    assert sorted(scenarios) == sorted(LANES)  # a newly recorded scenario is listed above
    for plot, name in zip(look_.plots, scenarios, strict=True):
        nodes, faults = LANES[name]
        drawn = {lane for lane in plot["lanes"] if lane.startswith(("node ", "fault "))}
        assert drawn == set(nodes) | set(faults), name  # each one's lane, and no other
        assert plot["shaded"] == 3 * len(faults), name  # one per panel per fault
        if name in REFUSED:  # a cluster that never formed: no nodes, no trainer, the refusal said
            assert plot["bars"] == 0 and "cluster_refused" in plot["legend"], name
            continue
        assert plot["bars"] >= len(nodes) + len(faults), name
        assert "step" in plot["legend"], name


def test_each_scenario_shows_its_checks_and_links_its_files(seen):
    root, look_ = seen
    for section, s in zip(look_.sections, read_results(root), strict=True):
        folder = root / s.scenario
        assert section["checks"] == len(s.checks)
        assert "timeline.jsonl" in section["links"]
        nodes = [f"nodes/{p.name}" for p in sorted(folder.glob("nodes/node-*.log"))]
        trainer = [p.name for p in sorted(folder.glob("trainer-*.log"))]
        assert set(nodes + trainer) <= set(section["links"])
        assert bool(nodes) == bool(trainer) == (s.scenario != "python_version_mismatch")


def test_the_summary_sorts_by_a_column_when_its_head_is_clicked(seen):
    root, look_ = seen
    took = json.loads(look_.then)
    durations = [s.seconds for s in read_results(root)]
    assert took == {"up": sorted(durations), "down": sorted(durations, reverse=True)}


def test_screenshots_are_kept_for_each_scenario(seen):
    root, look_ = seen
    assert len(look_.screenshots) == len(read_results(root)) + 1
    for shot in look_.screenshots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_fixtures_were_recorded_by_the_current_runner():
    """Every fault heal in the recorded timelines carries its index (what the report pairs by),
    as the runner writes it now: re-record the fixtures when the timeline's form changes."""
    for timeline in RECORDED.glob("*/timeline.jsonl"):
        for e in map(json.loads, timeline.read_text().splitlines()):
            if e["type"] == "fault_healed":
                assert "index" in e, timeline
