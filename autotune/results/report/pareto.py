"""The report's Pareto front: throughput against the objective's latency, memory as colour."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from autotune.results.report._labels import Frame, Label, axis_range, grouped, place_labels
from autotune.results.report._markup import Section, figure_html
from autotune.results.report.points import (
    FEASIBLE,
    HEIGHT,
    INFEASIBLE,
    PARTIAL,
    Axes,
    Point,
    axes,
    front,
    points,
)
from autotune.results.show import outcome, reason
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord


def _scatter(pts: Sequence[Point], ax: Axes, name: str, **marker: Any) -> go.Scatter:
    return go.Scatter(x=[p.throughput for p in pts], y=[p.latency_ms for p in pts],
                      mode="markers", name=name, hovertext=[p.hover(ax) for p in pts],
                      hoverinfo="text", marker={"size": 11, **marker})


def _unplaced_note(unplaced: Sequence[TrialRecord], limit: int = 8) -> str:
    items = [f"#{r.number}" + (f" {r.name}" if r.name else "")
             + f" ({outcome(r)}: {reason(r) or '-'})" for r in unplaced]
    more = f" and {len(items) - limit} more (see the table)" if len(items) > limit else ""
    return "not placed, no figures: " + ", ".join(items[:limit]) + more


def pareto_figure(study: StudyOrSnapshot) -> go.Figure:
    """Throughput against the objective's latency, memory as colour; the feasible front as a
    line, baselines labelled, infeasible trials as crosses, trials pruned mid-run hollow."""
    ax = axes(study)
    pts, unplaced = points(study)
    fig = go.Figure()
    line = front(pts)
    if line:
        fig.add_trace(go.Scatter(x=[p.throughput for p in line], y=[p.latency_ms for p in line],
                                 mode="lines", line={"dash": "dot", "color": "#444",
                                                     "shape": "hv"},
                                 name="Pareto front (feasible)", hoverinfo="skip"))
    searched = [p for p in pts if not p.name]
    colour = {"coloraxis": "coloraxis", "line": {"width": 1, "color": "#222"}}
    ok = [p for p in searched if p.kind == FEASIBLE]
    fig.add_trace(_scatter(ok, ax, "searched, feasible", symbol="circle",
                           color=[p.memory_mib for p in ok], **colour))
    bad = [p for p in searched if p.kind == INFEASIBLE]
    if bad:
        fig.add_trace(_scatter(bad, ax, "infeasible (SLO or quality)", symbol="x",
                               color="#d62728"))
    part = [p for p in pts if p.kind == PARTIAL]
    if part:
        fig.add_trace(_scatter(part, ax, "pruned mid-run (probe figures)",
                               symbol="circle-open", color="#7f7f7f",
                               line={"width": 2}))
    bases = [p for p in pts if p.name and p.kind != PARTIAL]
    if bases:
        fig.add_trace(_scatter(bases, ax, "baselines", color=[p.memory_mib for p in bases],
                               symbol=["star" if p.name == DEFAULTS else "diamond"
                                       for p in bases],
                               **{**colour, "line": {"width": 2, "color": "#000"}}, size=16))
    # Labels: trial numbers (what `autotune export --trial` takes) of the feasible points,
    # and every baseline by name; placed so that none hides another.
    labelled = [p for p in pts if p.name or p.kind == FEASIBLE]
    labels = [Label(p.throughput, p.latency_ms, text + ("" if p.kind == FEASIBLE or not p.name
                                                        else f" ({p.kind.split()[0]})"))
              for p, text in grouped(labelled)]
    if pts:
        xr = axis_range([p.throughput for p in pts])
        yr = axis_range([p.latency_ms for p in pts])
        fig.update_xaxes(range=xr)
        fig.update_yaxes(range=yr)
        place_labels(fig, labels, Frame(xr, yr), [(p.throughput, p.latency_ms) for p in pts])
    fig.update_layout(title=f"Pareto front: {ax.throughput_label} against {ax.latency_label}",
                      xaxis_title=ax.throughput_label, yaxis_title=ax.latency_label,
                      coloraxis={"colorscale": "Viridis", "colorbar": {"title": "memory MiB"}},
                      legend={"orientation": "h", "y": -0.18}, height=HEIGHT)
    if unplaced:
        fig.add_annotation(text=_unplaced_note(unplaced), xref="paper", yref="paper", x=0,
                           y=1.06, showarrow=False, xanchor="left", font={"size": 12})
    if not pts:
        fig.add_annotation(text="no trial has measured figures yet", xref="paper",
                           yref="paper", x=0.5, y=0.5, showarrow=False)
    return fig


def section(study: StudyOrSnapshot) -> Section:
    return Section("Pareto front", "<p>Each point is one configuration. Lower right is better: "
                   "more throughput at lower latency; colour is the engine's peak memory. Stars "
                   "and diamonds are vLLM's defaults and the named baselines; crosses missed an "
                   "SLO or the quality guardrail; hollow circles were pruned mid-run and show "
                   "their probe-phase figures.</p>" + figure_html(pareto_figure(study), "pareto"))
