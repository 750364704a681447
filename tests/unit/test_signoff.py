"""The sign-off report from a run's summary and the doctor's record: nodes with their GPUs,
driver, CUDA and NCCL, the findings, each scenario's figures; JUnit with them as properties."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from rlsim.report.signoff import render

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": "81559", "driver": "570.86.15"}


def test_signoff_and_junit(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps([
        {"scenario": "node_failure_mid_run", "ok": True, "seconds": 61.2, "checks": [
            {"check": "completes", "ok": True, "message": "the trainer completed", "value": None},
            {"check": "detected_within_s", "ok": True, "message": "0.8 s", "value": 0.8149},
            {"check": "restarts", "ok": True, "message": "1 restart(s)", "value": 1}]},
        {"scenario": "head_lost", "ok": False, "seconds": 20.0, "checks": [
            {"check": "fails", "ok": False, "message": "the trainer logged no error",
             "value": None}]}]))
    (tmp_path / "doctor.json").write_text(json.dumps({"ok": True, "seconds": 1.2, "findings": [
        {"level": "warn", "check": "checkpoint_dir", "message": "node-local", "fix": "NFS"}],
        "nodes": [{"index": 0, "address": "10.0.0.1", "host": "gpu-a", "error": None,
                   "versions": {"python": "3.12.3", "ray": "2.60.0", "torch": "2.9.0",
                                "deepspeed": None},
                   "hardware": {"gpus": [H100] * 8, "cuda": "12.8", "nccl": "2.27.3",
                                "interface": "ens5"}, "reaches": "4/4"},
                  {"index": 1, "address": "10.0.0.2", "host": None, "error": "probe timed out",
                   "versions": {}, "hardware": {}, "reaches": "0/0"}]}))
    page_path, junit_path = render(tmp_path)
    page = page_path.read_text()
    # figures rounded as report.html rounds them
    for cell in ("<td>8 x NVIDIA H100 80GB HBM3 (79 GiB)</td><td>570.86.15</td><td>12.8</td>"
                 "<td>2.27.3</td>", "<td>ens5</td>", "<td>probe timed out</td>",
                 "<td>node_failure_mid_run</td><td>PASS</td><td>61.2 s</td><td>0.81</td>"
                 # goodput, progress, recovered, replacements: none
                 "<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>1</td>",
                 "<td>head_lost</td><td>FAIL</td>",
                 "the trainer logged no error", "node-local"):
        assert cell in page, cell
    suite = ET.parse(junit_path).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    first = suite.find("testcase[@name='node_failure_mid_run']")
    assert {p.get("name"): p.get("value") for p in first.iter("property")} == \
        {"detected_within_s": "0.8149", "restarts": "1"}  # every digit for machines
    assert suite.find("testcase[@name='head_lost']/failure") is not None


def test_without_a_readable_doctor_record_it_says_how_to_get_one(tmp_path):
    (tmp_path / "summary.json").write_text("[]")
    page, _ = render(tmp_path)
    assert "rlsim doctor --json" in page.read_text()
    (tmp_path / "doctor.json").write_text("")  # a doctor that could not reach the cluster
    page, _ = render(tmp_path)
    assert "No readable doctor.json" in page.read_text()


def test_a_doctor_record_of_the_wrong_shape_is_said_on_the_page(tmp_path):
    (tmp_path / "summary.json").write_text("[]")
    for record in ({"nodes": 5}, {"nodes": [{}], "findings": []}, [1, 2]):
        (tmp_path / "doctor.json").write_text(json.dumps(record))
        page, _ = render(tmp_path)
        assert "No readable doctor.json" in page.read_text(), record
    node = {"index": 0, "address": "10.0.0.1", "reaches": "1/1",
            "hardware": {"gpus": [{"memory_mib": "81559"}]}}  # no name, no driver
    (tmp_path / "doctor.json").write_text(json.dumps({"nodes": [node], "findings": []}))
    page, _ = render(tmp_path)
    assert "<td>1 x unnamed GPU (79 GiB)</td><td>-</td>" in page.read_text()
