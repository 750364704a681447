"""Scenario reports: ``summary.json`` plus ``report.html``, one self-contained page (Plotly's
JavaScript inlined once, so it opens offline and can be mailed or kept as a CI artifact).

The page: a sortable summary of every scenario (result, duration, the figures checks report),
then per scenario its timeline (:mod:`rlsim.report.figure`), its checks with their figures, and
links to the trainer's output, each node's Ray logs and the raw timeline, all files beside the
page in the scenario's folder.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator

from rlsim.checks import FIGURES
from rlsim.history import read_events
from rlsim.report.lanes import story

__all__ = ["ReportInputError", "figure_text", "figures", "render", "summaries",
           "verdicts_record"]


def verdicts_record(name: str, ok: bool, seconds: float, verdicts) -> dict:
    """One scenario's entry in ``summary.json`` (also ``<scenario>/verdicts.json``)."""
    return {"scenario": name, "ok": ok, "seconds": round(seconds, 2),
            "checks": [{"check": v.check, "ok": v.ok, "message": v.message, "value": v.value}
                       for v in verdicts]}


def figures(scenario: dict) -> dict[str, float]:
    """The figures a scenario's checks measured (:data:`rlsim.checks.FIGURES`), by check."""
    return {c["check"]: c["value"] for c in scenario["checks"]
            if c["check"] in FIGURES and c.get("value") is not None}


class ReportInputError(ValueError):
    """A report folder's record does not parse or has the wrong shape; the message names the
    file, the field and the fix."""


class _Check(BaseModel):
    check: str
    ok: bool
    message: str
    value: float | None = None


class _Scenario(BaseModel):
    scenario: str = Field(pattern=r"^[^/\\]+$")  # a folder name under the root
    ok: bool
    seconds: float
    checks: list[_Check]

    @field_validator("scenario")
    @classmethod
    def _folder(cls, v: str) -> str:
        if v in (".", ".."):
            raise ValueError("a scenario's name is a folder under the report, not . or ..")
        return v


def summaries(root: Path) -> list[dict]:
    """``summary.json`` (``rlsim run --report``), or each scenario's ``verdicts.json`` (pytest);
    ReportInputError naming the file and the field when one does not hold such records."""
    if (root / "summary.json").exists():
        return _records(root / "summary.json", list[_Scenario])
    return [_records(p, _Scenario) for p in sorted(root.glob("*/verdicts.json"))]


def _records(path: Path, shape):
    fix = "fix: write the folder again with `rlsim run --report DIR`"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportInputError(f"{path}: not readable JSON ({type(e).__name__}: "
                               f"{str(e)[:200]}); {fix}") from None
    try:
        TypeAdapter(shape).validate_python(data, strict=True)  # "ok": "false" is no verdict
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(the whole file)"
        raise ReportInputError(f"{path}: {where}: {first['msg']}; {fix}") from None
    return data


def render(root: str | Path, problems: list[str] | None = None) -> Path:
    """(Re)write ``<root>/report.html`` from the summaries and each scenario's timeline. A
    timeline that cannot be drawn is said in its scenario's section and added to ``problems``;
    records that do not parse raise ReportInputError."""
    from plotly.offline import get_plotlyjs

    root = Path(root)
    summary = summaries(root)
    problems = [] if problems is None else problems
    passed = sum(s["ok"] for s in summary)
    body = [f"<h1>rlsim scenarios: {passed}/{len(summary)} passed</h1>", _summary(summary)]
    body += [_section(root, s, problems) for s in summary]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlsim report: {passed}/"
            f"{len(summary)} passed</title><style>{CSS}</style><script>{get_plotlyjs()}</script>"
            f"</head><body>{''.join(body)}<script>{SORT_JS}</script></body></html>")
    out = root / "report.html"
    out.write_text(page)
    return out


def _summary(summary: list[dict]) -> str:
    heads = ["scenario", "result", "took (s)", *FIGURES.values(), "failed checks"]
    rows = []
    for s in summary:
        fig = figures(s)
        failed = "; ".join(c["check"] for c in s["checks"] if not c["ok"])
        cells = [f"<a href='#{_id(s['scenario'])}'>{html.escape(s['scenario'])}</a>",
                 _verdict(s["ok"]), _num(s["seconds"]),
                 *(_num(fig[k]) if k in fig else "" for k in FIGURES),
                 html.escape(failed)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th title='click to sort'>{html.escape(h)}</th>" for h in heads)
    return (f"<table class='summary sortable'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _section(root: Path, s: dict, problems: list[str]) -> str:
    name, folder = s["scenario"], root / s["scenario"]
    parts = [f"<section id='{_id(name)}' class='scenario'><h2>{html.escape(name)}: "
             f"{_verdict(s['ok'])} <small>{_num(s['seconds'])} s</small></h2>"]
    timeline = folder / "timeline.jsonl"
    try:
        parts += _timeline(folder, timeline, name)
    except (OSError, TypeError, ValueError, KeyError, AttributeError) as e:
        # a hand-edited or foreign line: this scenario's drawing is lost, not the page
        problem = (f"{timeline}: not drawn ({type(e).__name__}: {str(e)[:200]}); fix: run the "
                   "scenario again, or remove the line that does not match what rlsim writes")
        problems.append(problem)
        parts.append(f"<pre class='refusal'>{html.escape(problem)}</pre>")
    parts.append(_checks(s))
    parts.append(_links(root, folder))
    return "".join(parts) + "</section>"


def _timeline(folder: Path, timeline: Path, name: str) -> list[str]:
    from rlsim.report.figure import figure

    parts = []
    events = read_events(timeline) if timeline.exists() else []
    if events:
        st = story(events)
        before = [f"{k} {_num(v)} s" for k, v in st.setup.items()]
        if st.reused:
            before.insert(0, "the cluster of an earlier scenario, checked clean")
        if before:
            parts.append(f"<p class='setup'>before the clock starts: {', '.join(before)}</p>")
        if st.refusal:
            parts.append(f"<pre class='refusal'>cluster refused to start: "
                         f"{html.escape(str(st.refusal))}</pre>")
        fig = figure(st, _baseline(folder, events, st.t0))
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False,
                                 div_id=f"plot-{_id(name)}",
                                 config={"displaylogo": False, "responsive": True}))
    else:
        parts.append("<p>(no timeline recorded)</p>")
    return parts


def _checks(s: dict) -> str:
    rows = "".join(
        f"<tr><td>{_verdict(c['ok'], 'ok', 'FAILED')}</td><td>{html.escape(c['check'])}</td>"
        f"<td>{'' if c.get('value') is None else _num(c['value'])}</td>"
        f"<td>{html.escape(c['message'])}</td></tr>" for c in s["checks"])
    return (f"<table class='checks'><thead><tr><th></th><th>check</th><th>figure</th>"
            f"<th>what was seen</th></tr></thead><tbody>{rows}</tbody></table>")


def _links(root: Path, folder: Path) -> str:
    nodes = sorted(folder.glob("nodes/node-*.log"),
                   key=lambda p: (len(p.name), p.name))  # node-2 before node-10
    files = (sorted(folder.glob("trainer-*.log")) + nodes
             + [folder / "timeline.jsonl", folder / "ray_events.jsonl"])
    links = [f"<a href='{html.escape(quote(p.relative_to(root).as_posix()))}'>"
             f"{html.escape(p.relative_to(folder).as_posix())}</a>" for p in files if p.exists()]
    return f"<p class='links'>files: {' · '.join(links) or '(none)'}</p>"


def _baseline(folder: Path, events: list[dict], t0: float) -> list[dict] | None:
    """The fault-free twin's steps on the run's clock (its first launch aligned with the run's),
    read from the twin's event log where it still is."""
    done = next((e for e in events if e["type"] == "baseline_done"), None)
    if done is None:
        return None
    for path in (folder / "baseline" / "events.jsonl",
                 done.get("run_dir") and Path(done["run_dir"]) / "events.jsonl"):
        if path and path.is_file():
            twin = read_events(path)
            break
    else:
        return None
    starts = [e["ts"] for e in events if e["type"] == "run_start" and not e.get("attempt")]
    twin_start = next((e["ts"] for e in twin if e["type"] == "run_start"), None)
    if not starts or twin_start is None:
        return None
    shift = twin_start - (starts[0] - t0)
    return [{**e, "ts": e["ts"] - shift} for e in twin if e["type"] == "step_end" and "step" in e]


def _verdict(ok: bool, yes: str = "PASS", no: str = "FAIL") -> str:
    return f"<span class='{'pass' if ok else 'fail'}'>{yes if ok else no}</span>"


def figure_text(v) -> str:
    """A figure as people read it on a page (seconds to the hundredth, counts whole); the
    sign-off page prints it the same way. Machine-read outputs (JUnit, JSON) keep every digit."""
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def _num(v) -> str:
    return html.escape(figure_text(v))


def _id(name: str) -> str:
    return "sc-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


CSS = """
body{font-family:system-ui,sans-serif;margin:18px;color:#222}
table{border-collapse:collapse;margin:6px 0 10px}
td,th{border:1px solid #ddd;padding:3px 7px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.sortable th{cursor:pointer}.sortable th:hover{background:#e6e6e6}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
section.scenario{border-top:2px solid #ccc;margin-top:22px}
.setup,.links{font-size:12px;color:#555}pre.refusal{white-space:pre-wrap;color:#cf222e}
"""

# Click a column head to sort the summary by it (numbers as numbers, blanks last); again to flip.
SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      table.querySelectorAll('th').forEach(function (h) { delete h.dataset.dir; });
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      function key(row) {
        var t = row.cells[col].textContent.trim();
        return t === '' ? null : (isNaN(Number(t)) ? t.toLowerCase() : Number(t));
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""
