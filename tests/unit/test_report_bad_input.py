"""`rlsim report DIR` on folders that are not what `rlsim run --report` writes: exit 2 with one
line naming the file, the field and the fix, never a traceback. A timeline line of the wrong shape
costs only that scenario's drawing: the page is written and says which file and why."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlsim import commands as cli

FIXTURE = Path(__file__).parents[1] / "fixtures" / "report"
GOOD = {"scenario": "head_lost", "ok": True, "seconds": 12.5,
        "checks": [{"check": "detected_within_s", "ok": True, "message": "0.8 s", "value": 0.8}]}


def report(root: Path, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["report", str(root), *more])
    assert "Traceback" not in result.output and result.exception is None or \
        isinstance(result.exception, SystemExit), result.output
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(("summary", "words"), [
    ('[{"scenario": "head_lost", "ok": tr', "summary.json: not readable JSON (JSONDecodeError"),
    (b"\x89PNG\r\n\x1a\n\xff", "summary.json: not readable JSON (UnicodeDecodeError"),
    ({"a": 1}, "summary.json: (the whole file): Input should be a valid list"),
    ([{**GOOD, "seconds": None}], "summary.json: 0.seconds: Input should be a valid number"),
    ([{**GOOD, "checks": [{**GOOD["checks"][0], "value": "fast"}]}],
     "summary.json: 0.checks.0.value: Input should be a valid number"),
    ([{k: v for k, v in GOOD.items() if k != "checks"}], "summary.json: 0.checks: Field required"),
    ([{**GOOD, "scenario": "../../etc"}], "summary.json: 0.scenario: String should match"),
    ([{**GOOD, "ok": "false"}], "summary.json: 0.ok: Input should be a valid boolean"),
])
def test_a_summary_of_the_wrong_shape_is_named_with_its_field(tmp_path, summary, words):
    path = tmp_path / "summary.json"
    if isinstance(summary, bytes):
        path.write_bytes(summary)
    else:
        path.write_text(summary if isinstance(summary, str) else json.dumps(summary))
    code, out = report(tmp_path)
    assert code == 2 and words in out and "fix: write the folder again" in out, out
    assert not (tmp_path / "report.html").exists()


def test_a_verdicts_file_of_the_wrong_shape_is_named(tmp_path):
    (tmp_path / "head_lost").mkdir()
    (tmp_path / "head_lost" / "verdicts.json").write_text("[1, 2]")
    code, out = report(tmp_path)
    assert code == 2 and "head_lost/verdicts.json: (the whole file)" in out, out


@pytest.mark.parametrize("line", [
    {"type": "cluster_ready", "nodes": 5},
    {"type": "fault_injected", "fault": "kill_node", "index": [1]},
    {"type": "fault_healed", "fault": "kill_node", "index": {"a": 1}},
    {"type": "baseline_done", "run_dir": 5, "returncode": 0},
])
def test_a_timeline_line_of_the_wrong_shape_costs_only_its_drawing(tmp_path, line):
    shutil.copytree(FIXTURE / "head_lost", tmp_path / "head_lost")
    shutil.copytree(FIXTURE / "host_oom", tmp_path / "host_oom")
    summary = [s for s in json.loads((FIXTURE / "summary.json").read_text())
               if s["scenario"] in ("head_lost", "host_oom")]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    timeline = tmp_path / "head_lost" / "timeline.jsonl"
    lines = timeline.read_text().splitlines()
    first = json.loads(lines[0])
    bad = json.dumps({"ts": first["ts"] + 0.001, "source": "rlsim", **line})
    timeline.write_text("\n".join([lines[0], bad, *lines[1:]]) + "\n")  # read before its twin
    code, out = report(tmp_path)
    assert code == 2 and "head_lost/timeline.jsonl: not drawn" in out and "fix: run the " \
        "scenario again" in out, out
    page = (tmp_path / "report.html").read_text()
    assert "head_lost/timeline.jsonl: not drawn" in page and "plot-sc-host_oom" in page


def test_a_folder_that_is_missing_or_a_file_and_an_unwritable_screenshots_folder(tmp_path):
    code, out = report(tmp_path / "nope")
    assert code == 2 and "no such folder" in out, out
    (tmp_path / "afile").write_text("")
    code, out = report(tmp_path / "afile")
    assert code == 2 and "not a folder" in out, out
    (tmp_path / "summary.json").write_text(json.dumps([GOOD]))
    code, out = report(tmp_path, "--screenshots", str(tmp_path / "afile"))
    assert code == 2 and "--screenshots" in out and "cannot write there" in out, out
    assert not (tmp_path / "report.html").exists()  # refused before anything was rewritten


NODE = {"index": 0, "address": "10.0.0.1", "reaches": "1/1"}


@pytest.mark.parametrize(("doctor", "words"), [
    ('"\u00b2"', "doctor.json is damaged: a string of JSON, where the doctor writes an object"),
    ("[" * 100_000, "doctor.json is damaged: not JSON (nested too deep)"),
    (b"\xff\xfe\x00", "doctor.json is damaged: not JSON"),
    ({"nodes": [{**NODE, "index": "\u00b2"}]}, "doctor.json is damaged: nodes.0.index"),
    ({"nodes": 5}, "doctor.json is damaged: nodes: Input should be a valid list"),
])
def test_a_damaged_doctor_record_is_named_and_shown_as_damaged(tmp_path, doctor, words):
    """Each page is made before any is written: a doctor.json rlsim cannot show is one line
    naming it and the fix (exit 2), and the sign-off page says it is damaged. Before: '²' in
    it raised a traceback after report.html had already been rewritten."""
    (tmp_path / "summary.json").write_text(json.dumps([GOOD]))
    raw = doctor if isinstance(doctor, bytes) else \
        (doctor if isinstance(doctor, str) else json.dumps(doctor)).encode()
    (tmp_path / "doctor.json").write_bytes(raw)
    code, out = report(tmp_path)
    assert code == 2 and words in out and "fix: run `rlsim doctor --json" in out, out
    page = (tmp_path / "signoff.html").read_text()
    assert "No readable doctor.json here" in page and "is damaged" in page
    assert "head_lost" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("hardware", [
    {"gpus": [{"error": 5}]},  # an error that is no text
    {"gpus": [{"name": "H100", "memory_mib": "9" * 5000}]},  # int() refuses 5,000 digits
])
def test_a_doctor_record_with_odd_values_is_shown_as_text(tmp_path, hardware):
    (tmp_path / "summary.json").write_text(json.dumps([GOOD]))
    (tmp_path / "doctor.json").write_text(json.dumps({"nodes": [{**NODE, "hardware": hardware}]}))
    code, out = report(tmp_path)  # no findings key: none (it raised KeyError 'findings')
    assert code == 0, out
    assert "<td>10.0.0.1</td>" in (tmp_path / "signoff.html").read_text()


def test_no_page_is_rewritten_when_one_cannot_be_written(tmp_path):
    """signoff.html is a folder: refused before report.html is replaced (it was rewritten
    first, then the refusal came)."""
    (tmp_path / "summary.json").write_text(json.dumps([GOOD]))
    (tmp_path / "report.html").write_text("the page of an earlier render")
    (tmp_path / "signoff.html").mkdir()
    code, out = report(tmp_path)
    assert code == 2 and "signoff.html" in out and "cannot write the report there" in out, out
    assert (tmp_path / "report.html").read_text() == "the page of an earlier render"
    assert not (tmp_path / "junit.xml").exists()


def test_a_doctor_record_that_is_a_fifo_is_damaged_not_waited_on(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps([GOOD]))
    os.mkfifo(tmp_path / "doctor.json")
    code, out = report(tmp_path)
    assert code == 2 and "damaged:" in out and "a FIFO" in out and "fix: run" in out, out
