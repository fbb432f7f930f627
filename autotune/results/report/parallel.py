"""The report's parallel coordinates: each measured trial across its searched flags and its
figures, coloured by its gain."""

from __future__ import annotations

import json
from collections.abc import Sequence

import plotly.graph_objects as go

from autotune._flags import FlagValue
from autotune.results.report._markup import Section, figure_html
from autotune.results.report.points import (
    HEIGHT,
    PARTIAL,
    THROUGHPUT_SHORT,
    axes,
    baseline_point,
    gain_of,
    points,
)
from autotune.tuning.records.snapshot import StudyOrSnapshot

Tick = tuple[int, float | str, str]  # the value's kind, its sort key, its text


def _categories(values: Sequence[FlagValue | None]) -> tuple[list[int], list[int], list[str]]:
    """Flag values as axis positions: numbers in order, then the rest; None is 'default'."""
    uniq = sorted(set(map(_key, values)), key=lambda kv: (kv[0], kv[1]))
    index = {kv: i for i, kv in enumerate(uniq)}
    return [index[_key(v)] for v in values], list(range(len(uniq))), [kv[2] for kv in uniq]


def _key(v: FlagValue | None) -> Tick:
    if v is None:
        return (0, 0, "default")
    if isinstance(v, bool):
        return (2, str(v), "on" if v else "off")
    if isinstance(v, (int, float)):
        return (1, float(v), f"{v:g}")
    return (2, json.dumps(v, sort_keys=True, default=str), short_value(v))


def short_value(v: FlagValue, limit: int = 14) -> str:
    """A flag's value as a short axis tick: `ngram x3` for a speculative config."""
    if isinstance(v, dict):
        if "method" in v:
            text = f"{v['method']} x{v.get('num_speculative_tokens', '?')}"
        else:
            text = ",".join(f"{k}={x}" for k, x in v.items())
    else:
        text = str(v)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parallel_figure(study: StudyOrSnapshot) -> go.Figure:
    """One line per measured trial across its searched flags ('default' where vLLM picks)
    and its figures, coloured by gain (weighted) or throughput (Pareto)."""
    ax = axes(study)
    pts = [p for p in points(study)[0] if p.kind != PARTIAL]
    ref = baseline_point(pts)
    fig = go.Figure(layout={"title": "Parallel coordinates: flags and figures of measured "
                                     "trials", "height": HEIGHT})
    if not pts:
        fig.add_annotation(text="no trial has measured figures yet", xref="paper",
                           yref="paper", x=0.5, y=0.5, showarrow=False)
        return fig
    dims = []
    for flag in sorted({k for p in pts for k in p.flags}):
        pos, ticks, labels = _categories([p.flags.get(flag) for p in pts])
        dims.append({"label": flag, "values": pos, "tickvals": ticks, "ticktext": labels})
    pos, ticks, labels = _categories([p.kind for p in pts])
    dims.append({"label": "outcome", "values": pos, "tickvals": ticks, "ticktext": labels})
    dims += [{"label": THROUGHPUT_SHORT.get(ax.throughput, ax.throughput),
              "values": [p.throughput for p in pts]},
             {"label": ax.latency_label, "values": [p.latency_ms for p in pts]}]
    if any(p.memory_mib is not None for p in pts):
        dims.append({"label": "memory MiB", "values": [p.memory_mib or 0 for p in pts]})
    gains = [gain_of(p, ref, ax) for p in pts]
    colour = [g * 100 if g is not None else 0.0 for g in gains]
    # Axis titles are tilted so that a dozen of them fit side by side in 1,280 px.
    fig.add_trace(go.Parcoords(dimensions=dims, labelangle=-30, labelside="top",
                               labelfont={"size": 11}, tickfont={"size": 10}, line={
                                   "color": colour, "colorscale": "Viridis", "showscale": True,
                                   "colorbar": {"title": "gain %"}}))
    fig.update_layout(margin={"l": 90, "r": 90, "t": 170})
    return fig


def section(study: StudyOrSnapshot) -> Section:
    return Section("Parallel coordinates", "<p>Drag along an axis to select a range.</p>"
                   + figure_html(parallel_figure(study), "parallel"))
