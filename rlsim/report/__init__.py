"""Scenario reports: ``summary.json`` plus ``report.html``, one self-contained page (Plotly's
JavaScript inlined once, so it opens offline and can be mailed or kept as a CI artifact).

The page: a sortable summary of every scenario (result, duration, the figures checks report),
then per scenario its timeline (:mod:`rlsim.report.figure`), its checks with their figures, and
links to the trainer's output, each node's Ray logs and the raw timeline, all files beside the
page in the scenario's folder.
"""

from __future__ import annotations

import errno
import html
from pathlib import Path
from urllib.parse import quote

from rlsim.checks import FIGURES
from rlsim.files import FileRefused, write_file, write_problem
from rlsim.goodput import DEFINITION as GOODPUT_DEFINITION
from rlsim.goodput import said
from rlsim.history import read_events
from rlsim.report.lanes import story
from rlsim.report.signoff import pages as signoff_pages
from rlsim.result import ScenarioResult, figure_text, read_results

__all__ = ["page", "render", "render_all"]


def render(root: str | Path, results: list[ScenarioResult] | None = None,
           problems: list[str] | None = None) -> Path:
    """(Re)write ``<root>/report.html`` from the run's results (read from the folder when not
    given: :func:`rlsim.result.read_results`, which raises ResultInputError for records that do
    not parse) and each scenario's timeline. A timeline that cannot be drawn is said in its
    scenario's section and added to ``problems``."""
    root = Path(root)
    summary = read_results(root) if results is None else results
    return write_file(root / "report.html", page(root, summary, problems))


def render_all(root: Path, results: list[ScenarioResult], problems: list[str],
               signoff: bool) -> list[Path]:
    """``report.html`` and, with ``signoff``, ``signoff.html`` and ``junit.xml``: every page
    made whole before any is written (each then replaced in one rename), so that input that
    cannot be rendered leaves the folder's pages as they were. Their paths; what cannot be
    drawn or read (a timeline, a damaged doctor.json) is added to ``problems``."""
    texts = {root / "report.html": page(root, results, problems)}
    if signoff:
        texts[root / "signoff.html"], texts[root / "junit.xml"] = signoff_pages(
            root, results, problems)
    for path in texts:  # a page that cannot be written (a folder there) stops all of them
        if problem := write_problem(path):
            raise FileRefused(errno.EEXIST, problem)
    return [write_file(path, text) for path, text in texts.items()]


def page(root: Path, summary: list[ScenarioResult], problems: list[str] | None = None) -> str:
    """The text of ``report.html``; writes nothing (see :func:`render`)."""
    from plotly.offline import get_plotlyjs

    problems = [] if problems is None else problems
    passed = sum(s.ok for s in summary)
    body = [f"<h1>rlsim scenarios: {passed}/{len(summary)} passed</h1>", _summary(summary)]
    body += [_section(root, s, problems) for s in summary]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>rlsim report: {passed}/"
            f"{len(summary)} passed</title><style>{CSS}</style><script>{get_plotlyjs()}</script>"
            f"</head><body>{''.join(body)}<script>{SORT_JS}</script></body></html>")


def _summary(summary: list[ScenarioResult]) -> str:
    heads = ["scenario", "result", "took (s)", *FIGURES.values(), "failed checks"]
    rows = []
    for s in summary:
        fig = s.figures(FIGURES)
        failed = "; ".join(v.check for v in s.failed)
        cells = [f"<a href='#{_id(s.scenario)}'>{html.escape(s.scenario)}</a>",
                 _verdict(s.ok), _num(s.seconds),
                 *(_num(fig[k]) if k in fig else "" for k in FIGURES),
                 html.escape(failed)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th title='click to sort'>{html.escape(h)}</th>" for h in heads)
    return (f"<table class='summary sortable'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            f"<p class='note'>goodput: {html.escape(GOODPUT_DEFINITION)}. The field's anchors "
            "use the same ratio: ByteRobust 97% over three months of production training, "
            "RobustRL above 80% on 256 GPUs with 10% of them failed.</p>")


def _section(root: Path, s: ScenarioResult, problems: list[str]) -> str:
    name, folder = s.scenario, root / s.scenario
    parts = [f"<section id='{_id(name)}' class='scenario'><h2>{html.escape(name)}: "
             f"{_verdict(s.ok)} <small>{_num(s.seconds)} s</small></h2>"]
    timeline = folder / "timeline.jsonl"
    try:
        parts += _timeline(folder, timeline, name)
    except (OSError, TypeError, ValueError, KeyError, AttributeError) as e:
        # a hand-edited or foreign line: this scenario's drawing is lost, not the page
        problem = (f"{timeline}: not drawn ({type(e).__name__}: {str(e)[:200]}); fix: run the "
                   "scenario again, or remove the line that does not match what rlsim writes")
        problems.append(problem)
        parts.append(f"<pre class='refusal'>{html.escape(problem)}</pre>")
    if s.goodput:
        parts.append(f"<p class='goodput'>{html.escape(said(s.goodput))}</p>")
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
        if st.teardown is not None:
            parts.append(f"<p class='setup'>after the last step: the trainer's teardown "
                         f"{_num(st.teardown)} s</p>")
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


def _checks(s: ScenarioResult) -> str:
    rows = "".join(
        f"<tr><td>{_verdict(c.ok, 'ok', 'FAILED')}</td><td>{html.escape(c.check)}</td>"
        f"<td>{'' if c.value is None else _num(c.value)}</td>"
        f"<td>{html.escape(c.message)}</td></tr>" for c in s.checks)
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
