"""Scenario reports: ``summary.json`` plus ``report.html`` with one timeline plot per scenario.

The plot (inline SVG, no plotting library) shows steps and reward over time since the trainer
started, each fault (red), its detection (orange: the trainer's first worker_died, node_lost, oom
or error after it) and recovery (green: the first step after the restart).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

W, H, PAD = 760, 220, 40


def verdicts_record(name: str, ok: bool, seconds: float, verdicts) -> dict:
    """One scenario's entry in ``summary.json`` (also ``<scenario>/verdicts.json``)."""
    return {"scenario": name, "ok": ok, "seconds": round(seconds, 2),
            "checks": [{"check": v.check, "ok": v.ok, "message": v.message, "value": v.value}
                       for v in verdicts]}


def _events(timeline: Path) -> list[dict]:
    return [json.loads(x) for x in timeline.read_text().splitlines() if x.strip()]


def _svg(events: list[dict]) -> str:
    start = next((e["ts"] for e in events if e["type"] == "trainer_started"), None)
    steps = [e for e in events if e["type"] == "step_end"]
    if start is None or not steps:
        return "<p>(no steps logged)</p>"
    end = max(e["ts"] for e in events) - start
    top = max(e["step"] for e in steps)

    def x(t: float) -> float:
        return PAD + (W - 2 * PAD) * max(t - start, 0) / max(end, 1e-9)

    def y(v: float, vmax: float) -> float:
        return H - PAD + (2 * PAD - H) * v / max(vmax, 1e-9)

    parts = [f'<svg width="{W}" height="{H}" style="background:#fafafa;border:1px solid #ddd">',
             f'<text x="{PAD}" y="16" font-size="11">step (blue, 0-{top}) and reward (purple, '
             f'0-1) against seconds since the trainer started (0-{end:.0f} s)</text>']
    pts = " ".join(f"{x(e['ts']):.1f},{y(e['step'], top):.1f}" for e in steps)
    parts.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts}"/>')
    pts = " ".join(f"{x(e['ts']):.1f},{y(e['metrics'].get('rollout/reward_mean', 0), 1):.1f}"
                   for e in steps)
    parts.append(f'<polyline fill="none" stroke="#9467bd" stroke-width="1" points="{pts}"/>')
    for e in events:
        color, label = None, ""
        if e["type"] == "fault_injected":
            color, label = "#d62728", e["fault"]
        elif e["type"] == "fault_healed":
            color, label = "#7f7f7f", "healed"
        elif e["source"] == "trainer" and e["type"] in ("worker_died", "node_lost", "oom",
                                                         "error"):
            color, label = "#ff7f0e", e["type"]
        elif e["type"] == "restart":
            color, label = "#2ca02c", "restart"
        if color:
            xx = x(e["ts"])
            parts.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD - 10}" y2="{H - PAD}" '
                         f'stroke="{color}" stroke-dasharray="3,2"/><text x="{xx + 2:.1f}" '
                         f'y="{H - PAD + 14}" font-size="10" fill="{color}">'
                         f'{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(root: str | Path) -> Path:
    """(Re)write ``<root>/report.html`` from ``summary.json`` and each scenario's timeline."""
    root = Path(root)
    if (root / "summary.json").exists():
        summary = json.loads((root / "summary.json").read_text())
    else:  # written by the pytest plugin: one verdicts.json per scenario
        summary = [json.loads(p.read_text()) for p in sorted(root.glob("*/verdicts.json"))]
    body = [f"<h1>rlsim scenarios: {sum(s['ok'] for s in summary)}/{len(summary)} passed</h1>"]
    for s in summary:
        verdict = "PASS" if s["ok"] else "FAIL"
        body.append(f"<h2>{html.escape(s['scenario'])}: {verdict} ({s['seconds']} s)</h2>")
        timeline = root / s["scenario"] / "timeline.jsonl"
        if timeline.exists():
            body.append(_svg(_events(timeline)))
        rows = "".join(
            f"<tr><td>{'ok' if c['ok'] else '<b>no</b>'}</td><td>{html.escape(c['check'])}</td>"
            f"<td>{html.escape(c['message'])}</td></tr>" for c in s["checks"])
        body.append(f"<table border=1 cellpadding=3>{rows}</table>")
    page = ("<!doctype html><meta charset=utf-8><title>rlsim report</title>"
            "<body style='font-family:sans-serif'>" + "".join(body) + "</body>")
    out = root / "report.html"
    out.write_text(page)
    return out
