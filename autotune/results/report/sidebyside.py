"""Several studies side by side (e.g. two GPUs, two workloads), as the notebooks compare them:
their Pareto fronts in one figure, and one row of figures a study (`tables.table_html`)."""

from __future__ import annotations

from collections.abc import Mapping

import optuna
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.results.report._labels import PLOT_W, Frame, Label, axis_range, grouped, place_labels
from autotune.results.report.pareto import pareto_figure
from autotune.results.report.points import (
    FEASIBLE,
    HEIGHT,
    Point,
    axes,
    baseline_point,
    best,
    gain_of,
    points,
)
from autotune.tuning.records.snapshot import StudyOrSnapshot, records

Row = dict[str, float | str | None]  # a column's name -> its figure (an int is a float here)


def best_vs_baseline(study: StudyOrSnapshot, label: str | None = None) -> Row:
    """One row: vLLM's defaults and the best feasible trial, their figures and the gain."""
    ax = axes(study)
    pts = {p.number: p for p in points(study)[0]}
    ref = baseline_point(list(pts.values()))
    top = best(study)
    b = pts.get(top.number) if top is not None else None
    device = next((r.device_name for r in records(study) if r.device_name), None) or "-"

    def figures(p: Point | None, prefix: str) -> Row:
        return {f"{prefix} #": p.number if p else None,
                f"{prefix} {ax.throughput}": p.throughput if p else None,
                f"{prefix} {ax.latency} ms": p.latency_ms if p else None,
                f"{prefix} memory MiB": p.memory_mib if p else None}

    gain = gain_of(b, ref, ax) if b is not None else None
    return {"study": label or study.study_name, "device": device,
            "trials": len(records(study)), **figures(ref, "baseline"),
            **figures(b, "best"), "gain": gain,
            "throughput ratio": b.throughput / ref.throughput if b and ref else None,
            "latency ratio": b.latency_ms / ref.latency_ms if b and ref else None}


def compare_figure(studies: Mapping[str, optuna.Study]) -> go.Figure:
    """The Pareto fronts of several studies side by side (e.g. two GPUs, two workloads)."""
    labels = list(studies)
    fig = make_subplots(rows=1, cols=len(labels), subplot_titles=labels)
    for col, label in enumerate(labels, 1):
        one = pareto_figure(studies[label])
        for trace in one.data:
            trace.showlegend = col == 1
            trace.legendgroup = trace.name
            fig.add_trace(trace, row=1, col=col)
        ax = axes(studies[label])
        fig.update_xaxes(title_text=ax.throughput_label, row=1, col=col)
        fig.update_yaxes(title_text=ax.latency_label, row=1, col=col)
        pts = points(studies[label])[0]
        if pts:
            xr = axis_range([p.throughput for p in pts])
            yr = axis_range([p.latency_ms for p in pts])
            fig.update_xaxes(range=xr, row=1, col=col)
            fig.update_yaxes(range=yr, row=1, col=col)
            place_labels(fig, [Label(p.throughput, p.latency_ms, text) for p, text in
                               grouped([p for p in pts if p.name or p.kind == FEASIBLE])],
                         Frame(xr, yr, width=PLOT_W / len(labels), row=1, col=col),
                         [(p.throughput, p.latency_ms) for p in pts])
    fig.update_layout(title="Pareto fronts side by side", height=HEIGHT,
                      coloraxis={"colorscale": "Viridis", "colorbar": {"title": "memory MiB"}},
                      legend={"orientation": "h", "y": -0.2})
    return fig
