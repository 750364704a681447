"""One scenario's timeline as a Plotly figure: three panels on one time axis.

- top: a lane per fault (injection to heal) and per node (alive / dead / restarting, with what
  impaired it drawn over: paused, cut off, port blocked, memory held), the trainer's and Ray's
  node events marked where they happened;
- middle: every other event as a marker in its source's lane (rlsim, the trainer, Ray as
  watched), its fields on hover;
- bottom: the trainer's step and reward, the fault-free baseline's dashed beside them.
Each fault is also shaded across all three panels, as Jepsen shades its nemesis.
"""

from __future__ import annotations

from plotly import graph_objects as go
from plotly.subplots import make_subplots

from rlsim.report.lanes import Span, Story

COLORS = {"alive": "#9bd39b", "dead": "#444444", "restarting": "#f0b35a", "paused": "#6b8fd6",
          "cut off": "#e4572e", "port blocked": "#f08a5d", "GPU memory held": "#b05fc7",
          "memory squeezed": "#c78fd6", "fault": "#d62728"}
SPARE = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f")
BASE = frozenset({"alive", "dead", "restarting"})
MARKERS = {"worker_died": ("x", "#d62728"), "node_lost": ("x", "#8c1c13"),
           "ray_node_dead": ("x-thin", "#8c1c13"), "ray_actor_died": ("x-thin", "#d62728"),
           "restart": ("triangle-up", "#2ca02c"), "resume": ("triangle-right", "#2ca02c"),
           "checkpoint_saved": ("square", "#1f77b4"),
           "checkpoint_loaded": ("square-open", "#1f77b4"),
           "error": ("diamond", "#d62728"), "oom": ("diamond", "#9467bd"),
           "run_end": ("star", "#333333"), "fault": ("x", "#d62728"),
           "run_start": ("triangle-right-open", "#555555"),
           "placement": ("diamond-open", "#555555"),
           "trainer_started": ("line-ns", "#555555"), "trainer_exited": ("line-ns", "#222222"),
           "relaunch": ("triangle-up-open", "#2ca02c"), "trainer_timeout": ("hourglass", "#d62728"),
           "fault_error": ("diamond-x", "#d62728"), "fault_heal_error": ("diamond-x", "#d62728"),
           "cluster_refused": ("diamond", "#d62728"), "scenario_end": ("square-x-open", "#555555")}
EVENT_LANES = ("rlsim", "trainer", "Ray (watched)")
REWARD = "rollout/reward_mean"


def figure(story: Story, baseline: list[dict] | None = None) -> go.Figure:
    """The figure of one scenario (``baseline``: the twin's step_end events, clock from its
    own first event)."""
    lanes = list(dict.fromkeys(s.lane for s in story.spans if s.state == "fault")) + story.nodes
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        row_heights=[max(len(lanes), 1) * 26, 3 * 22, 200],
                        specs=[[{}], [{}], [{"secondary_y": True}]])
    _spans(fig, story.spans)
    _marks(fig, story, set(lanes))
    _steps(fig, story.steps, baseline)
    for s in story.spans:
        if s.state == "fault":
            fig.add_vrect(x0=s.start, x1=max(s.end, s.start + 0.05), fillcolor=COLORS["fault"],
                          opacity=0.08, line_width=0, layer="below", row="all", col=1)
    end = max([story.end, 1.0] + [e["ts"] for e in baseline or []])
    fig.update_xaxes(range=[-0.02 * end, end * 1.02], showgrid=True)
    fig.update_xaxes(title_text="seconds since the trainer started", row=3, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), row=1, col=1,
                     type="category", automargin=True)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(EVENT_LANES)), row=2,
                     col=1, type="category", automargin=True)
    fig.update_yaxes(title_text="step", row=3, col=1, secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="reward", row=3, col=1, secondary_y=True, showgrid=False,
                     tickformat=".2f")
    fig.update_layout(barmode="overlay", height=150 + 26 * len(lanes) + 66 + 200,
                      margin={"l": 10, "r": 10, "t": 30, "b": 40}, hovermode="closest",
                      legend={"orientation": "h", "y": -0.12, "font": {"size": 10}},
                      plot_bgcolor="#fcfcfc", font={"size": 11})
    return fig


def _spans(fig: go.Figure, spans: list[Span]) -> None:
    """Bars from start to end, one trace per state (its legend entry); impairments narrower,
    over the base state. A state a fault names that has no colour here gets one of the spare
    colours (a fault's module alone decides what it impairs)."""
    states = [*COLORS, *sorted({s.state for s in spans} - set(COLORS))]
    for i, state in enumerate(states):
        mine = [s for s in spans if s.state == state]
        if not mine:
            continue
        color = COLORS.get(state) or SPARE[i % len(SPARE)]
        width = 0.8 if state in BASE or state == "fault" else 0.45
        fig.add_trace(go.Bar(
            orientation="h", name=state, y=[s.lane for s in mine],
            x=[max(s.end - s.start, 0.05) for s in mine], base=[s.start for s in mine],
            width=width, marker={"color": color, "line": {"width": 0}},
            customdata=[[f"{s.start:.2f}", f"{s.end:.2f}", _br(s.detail)] for s in mine],
            hovertemplate=(f"<b>{state}</b> %{{customdata[0]}}-%{{customdata[1]}} s<br>"
                           "%{customdata[2]}<extra>%{y}</extra>")), row=1, col=1)


def _marks(fig: go.Figure, story: Story, lanes: set[str]) -> None:
    """One marker trace per event type: node events in the top panel, the rest in the middle."""
    in_events = {m.label for m in story.marks if m.lane in EVENT_LANES}  # legend given there
    for row, keep in ((1, lambda m: m.lane in lanes), (2, lambda m: m.lane in EVENT_LANES)):
        by_type: dict[str, list] = {}
        for m in story.marks:
            if keep(m):
                by_type.setdefault(m.label, []).append(m)
        for label, marks in sorted(by_type.items()):
            symbol, color = MARKERS.get(label) or MARKERS.get(marks[0].kind) or \
                ("circle", "#7f7f7f")
            fig.add_trace(go.Scatter(
                mode="markers", name=_br(label), legendgroup=label,
                showlegend=row == 2 or label not in in_events,
                x=[m.t for m in marks], y=[m.lane for m in marks],
                marker={"symbol": symbol, "color": color, "size": 10,
                        "line": {"width": 1.5, "color": color}},
                customdata=[[_br(m.detail)] for m in marks],
                hovertemplate=f"<b>{_br(label)}</b> at %{{x:.2f}} s<br>%{{customdata[0]}}"
                              "<extra>%{y}</extra>"), row=row, col=1)


def _steps(fig: go.Figure, steps: list[dict], baseline: list[dict] | None) -> None:
    """Step and reward against time; a launch's line breaks where the next launch starts."""
    for name, events, dash in (("step", steps, None), ("baseline step", baseline or [], "dot")):
        if not events:
            continue
        x, y, r = [], [], []
        attempt = events[0].get("attempt")
        for e in events:
            if e.get("attempt") != attempt:
                x, y, r = x + [None], y + [None], r + [None]
                attempt = e.get("attempt")
            x.append(round(e["ts"], 3))
            y.append(e["step"])
            metrics = e.get("metrics")
            reward = metrics.get(REWARD) if isinstance(metrics, dict) else None
            r.append(reward if isinstance(reward, int | float) else None)
        fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines+markers",
                                 marker={"size": 4}, line={"color": "#1f77b4", "dash": dash}),
                      row=3, col=1, secondary_y=False)
        if any(v is not None for v in r):
            fig.add_trace(go.Scatter(x=x, y=r, name=name.replace("step", "reward"),
                                     mode="lines", connectgaps=False,
                                     line={"color": "#9467bd", "dash": dash, "width": 1.2}),
                          row=3, col=1, secondary_y=True)


def _br(text: str) -> str:
    """Plotly hover text breaks lines with <br>, reads < and > as markup and %{...} as a
    template field."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace(
        "%{", "%&#123;").replace("\n", "<br>")
