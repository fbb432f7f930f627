"""The report's optimisation history: the gain of each trial, and the best feasible so far."""

from __future__ import annotations

import plotly.graph_objects as go

from autotune.results import summary
from autotune.results.report._labels import Frame, Label, axis_range, place_labels
from autotune.results.report._markup import Section, figure_html
from autotune.results.report.points import (
    FEASIBLE,
    HEIGHT,
    INFEASIBLE,
    PARTIAL,
    axes,
    baseline_point,
    gain_of,
    points,
)
from autotune.tuning.ranking import standing
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records


def history_figure(study: StudyOrSnapshot) -> go.Figure:
    """Gain over vLLM's defaults per trial, with the best feasible trial so far as a line.

    The best is chosen as `autotune show` chooses it, by the study's one rule
    (`ranking.standing`: capacity at SLO where the study measures it, ties broken towards
    the fewest overrides of vLLM's defaults), among the trials so far; the line is drawn at
    its gain. Trials tied with the study's best are drawn as ties (hollow), not read as the
    losses or gains their own figures suggest."""
    study = Snapshot.of(study)  # read once: ranked again at every trial
    ax = axes(study)
    pts, unplaced = points(study)
    ref = baseline_point(pts)
    done = sorted(((p, g) for p in pts if p.kind != PARTIAL
                   and (g := gain_of(p, ref, ax)) is not None), key=lambda pg: pg[0].number)
    what = "weighted gain" if ax.mode == "weighted" else "throughput gain"
    recs = {r.number: r for r in records(study)}
    gains = {p.number: g for p, g in done}
    fig = go.Figure()
    xs, ys = [], []
    for p, _ in done:
        so_far = [recs[q.number] for q, _ in done if q.number <= p.number and q.kind == FEASIBLE]
        if ax.mode == "weighted":
            top = standing(study, [r for r in so_far if r.values]).winner
        else:
            top = max(so_far, key=lambda r: gains[r.number], default=None)
        if top is not None:
            xs.append(p.number)
            ys.append(gains[top.number] * 100)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"shape": "hv", "color": "#2ca02c"},
                             name="best feasible so far (ties: fewest overrides)"))
    tied = summary.tied_with_best(study)
    for name, sel_kind, symbol, colour in (
            ("feasible", lambda p: p.kind == FEASIBLE and p.number not in tied, "circle",
             "#1f77b4"),
            ("tied with the best (capacity within noise)",
             lambda p: p.kind == FEASIBLE and p.number in tied, "circle-open", "#1f77b4"),
            ("infeasible", lambda p: p.kind == INFEASIBLE, "x", "#d62728")):
        sel = [(p, g) for p, g in done if sel_kind(p)]
        if sel:
            fig.add_trace(go.Scatter(
                x=[p.number for p, _ in sel], y=[g * 100 for _, g in sel], mode="markers",
                marker={"symbol": symbol, "size": 10, "color": colour,
                        "line": {"width": 2, "color": colour}}, name=name,
                hovertext=[p.hover(ax) for p, _ in sel], hoverinfo="text"))
    checked = [(r.number, v) for r in recs.values() if (v := r.validation) is not None]
    if checked:
        fig.add_trace(go.Scatter(
            x=[n for n, _ in checked], y=[v.gain * 100 for _, v in checked], mode="markers",
            name="validated (95% CI)", marker={"symbol": "line-ew-open", "size": 18},
            error_y={"type": "data", "symmetric": False,
                     "array": [((v.ci_high or v.gain) - v.gain) * 100 for _, v in checked],
                     "arrayminus": [(v.gain - (v.ci_low or v.gain)) * 100
                                    for _, v in checked]}))
    fig.add_hline(y=0, line_dash="dash", line_color="#888")
    if done:
        ypts = [g * 100 for _, g in done] + [0.0] + [
            (bound if bound is not None else v.gain) * 100
            for _, v in checked for bound in (v.ci_low, v.ci_high)]
        xr = [min(p.number for p, _ in done) - 0.6, max(p.number for p, _ in done) + 0.6]
        yr = axis_range(ypts, pad=0.15)
        fig.update_xaxes(range=xr)
        fig.update_yaxes(range=yr)
        place_labels(fig, [Label(p.number, g * 100, p.name) for p, g in done if p.name],
                     Frame(xr, yr), [(p.number, g * 100) for p, g in done])
    title = f"Optimisation history: {what} over {ax.reference} (the dashed line)"
    if unplaced or any(p.kind == PARTIAL for p in pts):
        n = len(unplaced) + sum(p.kind == PARTIAL for p in pts)
        title += f"; {n} pruned or failed trial(s) have no gain: see the table"
    fig.update_layout(title=title, xaxis_title="trial", yaxis_title=f"{what} (%)",
                      height=HEIGHT, legend={"orientation": "h", "y": -0.18})
    return fig


def section(study: StudyOrSnapshot) -> Section:
    return Section("Optimisation history", figure_html(history_figure(study), "history"))
