"""The report's per-GPU chart: throughput per GPU against interactivity across load
(`autotune.results.interactivity`), with its definitions."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.results import interactivity
from autotune.results.report._markup import Section, escape, figure_html
from autotune.results.report.points import HEIGHT
from autotune.tuning.records.snapshot import StudyOrSnapshot


def interactivity_figure(study: StudyOrSnapshot) -> go.Figure:
    """Throughput per GPU, output and total tokens side by side, against interactivity
    (1000 / TPOT) at each sustained capacity step of the decision and vLLM's defaults
    (`autotune.results.interactivity`), in order of load: a solid line at the median TPOT,
    a dotted one at p95; hollow markers missed the SLOs. The burst is no steady state and
    is left out."""
    data = interactivity.of_study(study)
    per = f"per {data.per}"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        f"output tok/s {per}", f"total (input + output) tok/s {per}"))
    fig.update_layout(title={"text": f"Throughput {per} against interactivity across load",
                             "y": 0.98, "yanchor": "top"}, height=HEIGHT,
                      legend={"orientation": "h", "y": -0.2},
                      margin={"t": 80 + 16 * len(data.lines())})
    fig.update_xaxes(title_text="interactivity (tok/s/user = 1000 / TPOT ms)")
    if not any(c.points for c in data.curves):
        fig.add_annotation(text="no capacity step to place", xref="paper", yref="paper",
                           x=0.5, y=0.5, showarrow=False)
    elif not any(p.total_per_gpu for c in data.curves for p in c.points):
        fig.add_annotation(text="no total known", showarrow=False, row=1, col=2, x=0.5, y=0.5,
                           xref="x2 domain", yref="y2 domain")
    if data.lines():
        fig.add_annotation(text="<br>".join(data.lines()), xref="paper", x=0, yref="paper",
                           y=1.07, yanchor="bottom", showarrow=False, xanchor="left",
                           align="left", font={"size": 11})
    for n, (c, colour) in enumerate(zip(data.curves, ("#2ca02c", "#1f77b4"), strict=False)):
        pts = sorted((p for p in c.points if p.rate is not None), key=lambda p: (p.load, p.step))
        for stat, dash in (("median", "solid"), ("p95", "dot")):
            shown = [p for p in pts if getattr(p, f"interactivity_{stat}") is not None]
            if not shown:  # a record older than the per-step latencies has no median
                continue
            for col, ys in ((1, [p.output_per_gpu for p in shown]),
                            (2, [p.total_per_gpu for p in shown])):
                fig.add_trace(go.Scatter(
                    x=[getattr(p, f"interactivity_{stat}") for p in shown], y=ys,
                    mode="lines+markers", name=f"{c.label}, {stat} TPOT",
                    legendgroup=f"{n}{stat}", showlegend=col == 1,
                    line={"color": colour, "dash": dash}, marker={
                        "size": 9 if stat == "median" else 6, "color": colour,
                        "symbol": ["circle" if p.passed else "circle-open" for p in shown]},
                    hovertext=[interactivity.hover(c, p, data.per) for p in shown],
                    hoverinfo="text"), row=1, col=col)
    return fig


def section(study: StudyOrSnapshot) -> Section:
    """The definitions, then the chart; or, where neither trial has a capacity step, why."""
    data = interactivity.of_study(study)
    title = f"Throughput per {data.per} against interactivity"
    if not any(c.points for c in data.curves):
        why = "; ".join(data.lines()) or "no capacity step"
        return Section(title, f"<p class='note'>{escape(why)}.</p>")
    return Section(title, "<p>" + " ".join(map(escape, interactivity.DEFINITIONS)) + "</p>"
                   + figure_html(interactivity_figure(study), "interactivity"))
