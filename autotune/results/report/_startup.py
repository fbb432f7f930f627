"""The report's engine start-up: where each started engine's start-up went, phase by phase."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from autotune.engine import phases
from autotune.results.report._markup import Section, figure_html
from autotune.results.report.points import HEIGHT
from autotune.tuning.records.snapshot import StudyOrSnapshot, records

# One colour per start-up phase, by name (a phase added to `phases.PHASES` later leaves
# the others' colours as they were, and is brown until it has one of its own), black for
# the end of a failed start, and grey for records older than the split.
_COLOURS = {"imports": "#9467bd", "inspect": "#8c564b", "engine_core": "#d62728",
            "worker": "#e377c2", "load": "#7f7f7f", "compile": "#ff7f0e",
            "kv_cache": "#2ca02c", "graphs": "#aec7e8", "init": "#1f77b4", "serve": "#17becf",
            phases.FIRST_REQUEST: "#bcbd22"}
PHASE_COLOURS = {**{p: _COLOURS.get(p, "#c49c94") for p in phases.PHASES},
                 phases.FAILED: "#000000", "not split": "#c7c7c7"}


def startup_figure(study: StudyOrSnapshot) -> go.Figure:
    """Where each started engine's start-up went, phase by phase, and how it was launched
    (a warm start skips the API server's imports): what a faster start must cut."""
    started = [r for r in records(study) if r.startup_s is not None]
    fig = go.Figure()
    fig.update_layout(title="Engine start-up by phase", barmode="stack", height=HEIGHT,
                      xaxis_title="seconds from launch to the first completed request",
                      legend={"traceorder": "normal"})
    if not started:
        fig.add_annotation(text="no trial started an engine", xref="paper", yref="paper",
                           x=0.5, y=0.5, showarrow=False)
        return fig
    # A trial that did not complete names why: a start that failed shows where it stopped;
    # what the compile cache did, where the record says.
    ys = [" ".join(filter(None, (f"#{r.number}", r.name, r.startup.launch,
                                 r.startup.compile_cache and f"compile {r.startup.compile_cache}",
                                 f"({r.reason})" if r.reason else "")))
          for r in started]
    # Records written before the split hold only the total.
    split: list[Mapping[str, float | None]] = [
        r.startup.phases or {"not split": r.startup_s} for r in started]
    for phase, colour in PHASE_COLOURS.items():
        xs = [s.get(phase) for s in split]
        if any(x is not None for x in xs):
            fig.add_trace(go.Bar(y=ys, x=xs, name=phase.replace("_", " "), orientation="h",
                                 marker_color=colour,
                                 hovertemplate=f"{phase}: %{{x:.1f}} s<extra>%{{y}}</extra>"))
    fig.update_yaxes(autorange="reversed")
    return fig


def section(study: StudyOrSnapshot) -> Section:
    return Section("Engine start-up", "<p>Each bar is one engine start, from launch to the "
                   "first completed request, split where the engine's log shows each phase "
                   "ending. A warm start has already imported vLLM in its API server.</p>"
                   + figure_html(startup_figure(study), "startup"))
