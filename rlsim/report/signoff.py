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

from pydantic import BaseModel, ValidationError

from rlsim.checks import FIGURES
from rlsim.files import FileRefused, read_file, shown, why_not_read, write_file
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


DOCTOR_FIX = ("run `rlsim doctor --json > doctor.json` in this directory before the scenarios "
              "to record the nodes")


def _doctor(path: Path) -> tuple[_Record | None, str, bool]:
    """The doctor's record, or None, why not and whether it is damaged: absent, empty (a
    doctor that could not reach the cluster wrote nothing), or damaged (not JSON, nested past
    any record, not a doctor's record, a link, a FIFO, unreadable). The page says which instead
    of failing the run."""
    try:
        raw = read_file(path)
        if not raw.strip():
            return None, f"{shown(path)} is empty (the doctor could not reach the cluster)", False
        record = json.loads(raw)
        if not isinstance(record, dict):
            kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
            return None, (f"{shown(path)} is damaged: {kind.get(type(record), 'a number')} "
                          "of JSON, where the doctor writes an object (nodes, findings)"), True
        return _Record.model_validate(record), "", False
    except FileNotFoundError:
        return None, f"no {path.name} here", False
    except ValidationError as e:  # before ValueError, of which it is one
        return None, f"{shown(path)} is damaged: {_first_error(e)}", True
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested past any record
        return None, f"{shown(path)} is damaged: not JSON ({why_not_read(e)})", True
    except OSError as e:  # FileRefused (a link, a FIFO, a folder, too large) names the path
        why = str(e) if isinstance(e, FileRefused) else f"{shown(path)}: {e.strerror}"
        return None, f"damaged: {why}", True


def _first_error(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(the whole file)"
    return f"{where}: {first['msg']} ({len(e.errors())} problem(s) in all)"


def _gpus(hw: dict) -> tuple[str, str]:
    """(GPU model x count and memory, driver) of one node's hardware record; any value in it
    is shown as text, never trusted to be of the type the doctor writes."""
    gpus = hw.get("gpus")
    if gpus is None:
        return "no nvidia-smi (fake or no GPUs)", "-"
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return "unreadable GPU record", "-"
    if any("error" in g for g in gpus):
        return "; ".join(str(g["error"])[:200] for g in gpus if "error" in g), "-"
    models: dict[str, int] = {}
    for g in gpus:
        name = str(g.get("name", "unnamed GPU"))
        mib = str(g.get("memory_mib", ""))
        known = mib.isascii() and mib.isdigit() and len(mib) <= 12  # int() of 5,000 digits raises
        key = f"{name} ({int(mib) // 1024} GiB)" if known else name
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
    folder when not given); their paths. Both are made whole before either is written."""
    root = Path(root)
    page, junit = pages(root, read_results(root) if results is None else results)
    return write_file(root / "signoff.html", page), write_file(root / "junit.xml", junit)


def pages(root: Path, summary: list[ScenarioResult],
          notes: list[str] | None = None) -> tuple[str, str]:
    """The text of ``signoff.html`` and of ``junit.xml``; writes nothing. Why the doctor's
    record is not shown, when it is there but damaged, is added to ``notes``."""
    doctor, why, damaged = _doctor(root / "doctor.json")
    if damaged and notes is not None:
        notes.append(f"{why}; the sign-off page shows no nodes; fix: {DOCTOR_FIX}")
    passed = sum(s.ok for s in summary)
    body = [f"<h1>rlsim sign-off: {passed}/{len(summary)} scenarios passed</h1>"]
    body += _doctor_part(doctor, why)
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
    return page, _junit(summary)


def _doctor_part(doctor: _Record | None, why: str) -> list[str]:
    """The nodes and the doctor's findings, or a paragraph saying why there are none."""
    if doctor is None:
        return [f"<p>No readable doctor.json here ({html.escape(why)}): "
                f"{html.escape(DOCTOR_FIX)}.</p>"]
    rows = []
    for n in doctor.nodes:
        hw, v = n.hardware, n.versions
        gpus, driver = _gpus(hw)
        rows.append([n.index, n.address, n.host or n.error or "-", hw.get("interface") or "-",
                     gpus, driver, hw.get("cuda") or "-", hw.get("nccl") or "-",
                     v.get("python") or "-", v.get("ray") or "-", v.get("torch") or "-",
                     v.get("deepspeed") or "-", n.reaches])
    findings = [[f.level, f.check, f.message, f.fix] for f in doctor.findings]
    return ["<h2>Nodes</h2>", _table(
        ["node", "address", "host", "interface", "GPUs", "driver", "CUDA", "NCCL", "python",
         "ray", "torch", "deepspeed", "reaches"], rows), "<h2>Doctor findings</h2>",
        _table(["level", "check", "message", "fix"], findings) if findings
        else "<p>no findings</p>"]


def _junit(summary: list[ScenarioResult]) -> str:
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
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)
