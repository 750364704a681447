"""The sign-off report of a run: ``signoff.html`` and ``junit.xml`` beside ``summary.json``.

What a cluster owner signs off on: each node (address, host, the interface of its Ray address,
GPU model and count with memory, driver, CUDA and NCCL as read on the node, Python, Ray, torch,
DeepSpeed), the doctor's findings, and each scenario's result with its detection and recovery
figures and restart count. The nodes and findings come from ``doctor.json`` in the same directory
(``rlsim doctor --json``, which the launchers write before the scenarios); without it the report
says so. On simulated clusters the same report shows what there is (fake GPUs have no
``nvidia-smi``: their GPU columns say so).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from xml.etree import ElementTree as ET

from pydantic import BaseModel

from rlsim.checks import FIGURES
from rlsim.files import read_file, write_file
from rlsim.result import ScenarioResult, figure_text, read_results


class _Node(BaseModel):
    index: int
    address: str
    host: str | None = None
    error: str | None = None
    versions: dict[str, str | None] = {}
    hardware: dict = {}
    reaches: str


class _Finding(BaseModel):
    level: str
    check: str
    message: str
    fix: str


class _Record(BaseModel):
    nodes: list[_Node]
    findings: list[_Finding] = []


def _doctor(path: Path) -> dict | None:
    """The doctor's record, or None: absent, empty, cut short (a doctor that could not reach
    the cluster wrote nothing) or not a doctor's record: the page says so instead of failing
    the run."""
    try:
        record = json.loads(read_file(path))
        _Record.model_validate(record)
    except (OSError, ValueError):  # ValidationError is a ValueError
        return None
    return record


def _gpus(hw: dict) -> tuple[str, str]:
    """(GPU model x count and memory, driver) of one node's hardware record."""
    gpus = hw.get("gpus")
    if gpus is None:
        return "no nvidia-smi (fake or no GPUs)", "-"
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return "unreadable GPU record", "-"
    if any("error" in g for g in gpus):
        return "; ".join(g.get("error", "") for g in gpus if "error" in g), "-"
    models: dict[str, int] = {}
    for g in gpus:
        name = str(g.get("name", "unnamed GPU"))
        mib = str(g.get("memory_mib", ""))
        key = f"{name} ({int(mib) // 1024} GiB)" if mib.isascii() and mib.isdigit() else name
        models[key] = models.get(key, 0) + 1
    drivers = sorted({str(g.get("driver", "-")) for g in gpus})
    return ", ".join(f"{n} x {m}" for m, n in models.items()) or "none", ", ".join(drivers)


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table border=1 cellpadding=3><tr>{cells}</tr>{body}</table>"


def render(root: str | Path, results: list[ScenarioResult] | None = None) -> tuple[Path, Path]:
    """Write ``signoff.html`` and ``junit.xml`` in ``root`` from the run's results (read from the
    folder when not given); their paths."""
    root = Path(root)
    summary = read_results(root) if results is None else results
    doctor = _doctor(root / "doctor.json")
    passed = sum(s.ok for s in summary)
    body = [f"<h1>rlsim sign-off: {passed}/{len(summary)} scenarios passed</h1>"]
    if doctor is None:
        body.append("<p>No readable doctor.json here (absent, or the doctor could not reach the "
                    "cluster): run <code>rlsim doctor --json</code> into this directory before "
                    "the scenarios to record the nodes.</p>")
    else:
        rows = []
        for n in doctor["nodes"]:
            hw, v = n.get("hardware") or {}, n.get("versions") or {}
            gpus, driver = _gpus(hw)
            rows.append([n["index"], n["address"], n.get("host") or n.get("error") or "-",
                         hw.get("interface") or "-", gpus, driver, hw.get("cuda") or "-",
                         hw.get("nccl") or "-", v.get("python") or "-", v.get("ray") or "-",
                         v.get("torch") or "-", v.get("deepspeed") or "-", n["reaches"]])
        body += ["<h2>Nodes</h2>", _table(
            ["node", "address", "host", "interface", "GPUs", "driver", "CUDA", "NCCL", "python",
             "ray", "torch", "deepspeed", "reaches"], rows), "<h2>Doctor findings</h2>",
            _table(["level", "check", "message", "fix"],
                   [[f["level"], f["check"], f["message"], f["fix"]] for f in
                    doctor["findings"]]) if doctor["findings"] else "<p>no findings</p>"]
    rows = []
    for s in summary:
        fig = s.figures(FIGURES)
        failed = "; ".join(v.message for v in s.failed)
        rows.append([s.scenario, "PASS" if s.ok else "FAIL", f"{figure_text(s.seconds)} s",
                     *(figure_text(fig[k]) if k in fig else "-" for k in FIGURES),
                     failed or "-"])
    body += ["<h2>Scenarios</h2>", _table(
        ["scenario", "result", "took", *FIGURES.values(), "failed checks"], rows),
             "<p>Timelines: <a href='report.html'>report.html</a></p>"]
    page = ("<!doctype html><meta charset=utf-8><title>rlsim sign-off</title>"
            "<body style='font-family:sans-serif'>" + "".join(body) + "</body>")
    return write_file(root / "signoff.html", page), _junit(root, summary)


def _junit(root: Path, summary: list[ScenarioResult]) -> Path:
    """JUnit XML: one testcase per scenario, its figures as properties."""
    suite = ET.Element("testsuite", name="rlsim", tests=str(len(summary)),
                       failures=str(sum(not s.ok for s in summary)),
                       time=f"{sum(s.seconds for s in summary):.2f}")
    for s in summary:
        case = ET.SubElement(suite, "testcase", classname="rlsim.scenarios", name=s.scenario,
                             time=f"{s.seconds:.2f}")
        props = ET.SubElement(case, "properties")
        for key, value in s.figures(FIGURES).items():
            ET.SubElement(props, "property", name=key, value=f"{value:g}")
        if failed := s.failed:
            ET.SubElement(case, "failure", message=failed[0].message[:500]).text = "\n".join(
                f"{c.check}: {c.message}" for c in failed)
    text = ET.tostring(suite, encoding="unicode", xml_declaration=True)
    return write_file(root / "junit.xml", text)
