"""The report's "Where the GPU time went" (`autotune.results.gputime`): the study's own clock
in words, then one bar for the whole study and one a trial."""

from __future__ import annotations

import plotly.graph_objects as go

from autotune.results.gputime import LAUNCHED, SESSION_GAP_S, GpuTime
from autotune.results.report._markup import Section, escape, figure_html
from autotune.results.report.points import HEIGHT
from autotune.tuning.records.snapshot import StudyOrSnapshot, records


def gpu_time_figure(study: StudyOrSnapshot) -> go.Figure:
    """Where the study's GPU time went (`autotune.results.gputime`): one bar for the whole
    study, the share of each activity of 5 % or more written on it, then one bar a
    trial."""
    g = GpuTime.of(records(study))
    fig = go.Figure()
    fig.update_layout(title="Where the GPU time went", barmode="stack", height=HEIGHT,
                      xaxis_title="seconds", legend={"traceorder": "normal"})
    if not g.rows:
        fig.add_annotation(text="no trial has finished", xref="paper", yref="paper", x=0.5,
                           y=0.5, showarrow=False)
        return fig
    ys = [f"study ({g.seconds:,.0f} s)"] + [
        f"#{row.number} {row.outcome}" + (f" ({row.counts})" if row.counts != LAUNCHED
                                          else "") for row in g.rows]
    per_trial = [dict(row.spent.items()) for row in g.rows]
    for a in g.activities:
        if not round(a.seconds, 1):
            continue
        fig.add_trace(go.Bar(y=ys, x=[a.seconds] + [t[a.name] for t in per_trial],
                             name=a.words, orientation="h",
                             text=[f"{a.percent:.1f} %" if a.percent >= 5 else ""]
                             + [""] * len(g.rows),
                             textposition="inside",
                             hovertemplate=f"{a.words}: %{{x:.1f}} s<extra>%{{y}}</extra>"))
    fig.update_yaxes(autorange="reversed")
    return fig


def section(study: StudyOrSnapshot) -> Section:
    return Section("Where the GPU time went", "<p>" + "<br>".join(
        escape(line) for line in GpuTime.of(records(study)).lines()) + "</p><p>The study's "
        "own clock: each worker's trials from the first start to the last end (a pause of "
        f"over {SESSION_GAP_S / 60:g} minutes, a study resumed later, left out). The first "
        "bar is the whole study, idle time between trials included; the others are its "
        "trials.</p>" + figure_html(gpu_time_figure(study), "gputime"))
