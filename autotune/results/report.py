"""The study as pictures: Pareto front, history, importances, parallel coordinates, guardrail.

Every figure is a plain function of a study that returns a plotly Figure, so the notebooks
show exactly what `autotune report` writes (`autotune.results.reportpage` puts them in one HTML
file). A trial is placed by what it measured (its record's `measures`, or the probe phase's
partial figures for a trial pruned mid-run); baselines are labelled by name, since every
gain reads against them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState
from plotly.subplots import make_subplots

from autotune.config import latency_key
from autotune.errors import ConfigError
from autotune.results.show import outcome, reason
from autotune.tuning import objective as obj
from autotune.tuning.ranking import choose, fixed_flags, reference_name, stored_scenario
from autotune.tuning.record import DEFAULTS, TrialRecord, records

FEASIBLE, INFEASIBLE, PARTIAL = "feasible", "infeasible", "pruned (partial figures)"
HEIGHT = 520
THROUGHPUT_LABELS = {"output_throughput": "output throughput (tok/s)",
                     "request_throughput": "request throughput (req/s)",
                     "total_token_throughput": "total token throughput (tok/s)"}


@dataclass(frozen=True)
class Axes:
    """What the study's objective measures, for reading the figures and labelling them."""

    mode: str  # weighted | pareto
    throughput: str  # a `vllm bench serve` key, e.g. output_throughput
    latency: str  # e.g. ttft_p95
    capacity: bool = False  # throughput is measured at the capacity at SLO
    reference: str = "vLLM defaults"  # what gains are over (`study.reference_name`)

    @property
    def throughput_label(self) -> str:
        label = THROUGHPUT_LABELS.get(self.throughput, self.throughput)
        return label.replace(" (", " at SLO capacity (") if self.capacity else label

    @property
    def latency_label(self) -> str:
        metric, _, stat = self.latency.partition("_")
        return f"{metric.upper()} {stat} (ms)"


def axes(study: optuna.Study) -> Axes:
    scenario = stored_scenario(study)
    o = scenario.get("objective") or {}
    return Axes(o.get("mode") or ("weighted" if len(study.directions) == 1 else "pareto"),
                o.get("throughput") or "output_throughput", o.get("latency") or "ttft_p95",
                (scenario.get("workload") or {}).get("mode") == "capacity",
                reference_name(study))


@dataclass
class Point:
    """One trial as the figures place it; `kind` is FEASIBLE, INFEASIBLE or PARTIAL."""

    number: int
    kind: str
    throughput: float
    latency_ms: float
    memory_mib: float | None
    name: str = ""  # the baseline's name, "" for a searched trial
    gain: float | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} #{self.number}" if self.name else f"#{self.number}"

    def hover(self, ax: Axes) -> str:
        lines = [f"<b>{self.label}</b> {self.kind}" + (f": {self.why}" if self.why else ""),
                 f"{ax.throughput_label}: {self.throughput:.4g}",
                 f"{ax.latency_label}: {self.latency_ms:.4g}",
                 "memory: " + ("-" if self.memory_mib is None else f"{self.memory_mib:.0f} MiB")]
        if self.gain is not None:
            lines.append(f"gain over {ax.reference}: {self.gain:+.1%}")
        lines += [f"--{k} {v}" for k, v in self.flags.items()] or ["(no flags beyond fixed)"]
        return "<br>".join(lines)


def points(study: optuna.Study) -> tuple[list[Point], list[TrialRecord]]:
    """The trials that can be placed, and the rest (pruned or failed with no figures)."""
    ax, fixed = axes(study), fixed_flags(study)
    placed, unplaced = [], []
    for r in records(study):
        flags = {k: v for k, v in r.flags.items() if fixed.get(k) != v}
        common = {"number": r.number, "name": r.name, "flags": flags, "why": reason(r),
                  "gain": r.gain}
        if r.state == TrialState.COMPLETE and r.measures:
            m = r.measures
            placed.append(Point(kind=FEASIBLE if r.feasible else INFEASIBLE,
                                throughput=m["throughput"], latency_ms=m["latency_ms"],
                                memory_mib=m.get("memory_mib"), **common))
        elif (partial := _partial(r.metrics, ax)) is not None:
            placed.append(Point(kind=PARTIAL, throughput=partial[0], latency_ms=partial[1],
                                memory_mib=obj.memory_mib(r.metrics), **common))
        else:
            unplaced.append(r)
    return placed, unplaced


def _partial(metrics: Mapping[str, Any], ax: Axes) -> tuple[float, float] | None:
    """Throughput and latency of a trial stopped mid-run (the probe phase), if it has them."""
    thr, lat = metrics.get(ax.throughput), metrics.get(latency_key(ax.latency))
    if not metrics.get("completed") or thr is None or lat is None:
        return None
    return float(thr), float(lat)


def front(pts: Sequence[Point]) -> list[Point]:
    """Feasible points no other feasible point beats on both throughput and latency."""
    ok = [p for p in pts if p.kind == FEASIBLE]
    return sorted((p for p in ok if not any(
        o.throughput >= p.throughput and o.latency_ms <= p.latency_ms
        and (o.throughput, o.latency_ms) != (p.throughput, p.latency_ms) for o in ok)),
        key=lambda p: p.throughput)


def _scatter(pts: Sequence[Point], ax: Axes, name: str, **marker: Any) -> go.Scatter:
    return go.Scatter(x=[p.throughput for p in pts], y=[p.latency_ms for p in pts],
                      mode="markers", name=name, hovertext=[p.hover(ax) for p in pts],
                      hoverinfo="text", marker={"size": 11, **marker})


def _unplaced_note(unplaced: Sequence[TrialRecord], limit: int = 8) -> str:
    items = [f"#{r.number}" + (f" {r.name}" if r.name else "")
             + f" ({outcome(r)}: {reason(r) or '-'})" for r in unplaced]
    more = f" and {len(items) - limit} more (see the table)" if len(items) > limit else ""
    return "not placed, no figures: " + ", ".join(items[:limit]) + more


def pareto_figure(study: optuna.Study) -> go.Figure:
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
    searched_trace = _scatter(ok, ax, "searched, feasible", symbol="circle",
                              color=[p.memory_mib for p in ok], **colour)
    # Trial numbers on the points: the number is what `autotune export --trial` takes.
    searched_trace.update(mode="markers+text", text=[p.label for p in ok],
                          textposition="bottom center")
    fig.add_trace(searched_trace)
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
        trace = _scatter(bases, ax, "baselines", color=[p.memory_mib for p in bases],
                         symbol=["star" if p.name == DEFAULTS else "diamond" for p in bases],
                         **{**colour, "line": {"width": 2, "color": "#000"}}, size=16)
        trace.update(mode="markers+text", textposition="top center",
                     text=[p.label + ("" if p.kind == FEASIBLE else " (infeasible)")
                           for p in bases])
        fig.add_trace(trace)
    for p in part:
        if p.name:
            fig.add_annotation(x=p.throughput, y=p.latency_ms, text=p.label, showarrow=False,
                               yshift=14)
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


def gain_of(p: Point, ref: Point | None, ax: Axes) -> float | None:
    """The weighted gain over vLLM's defaults; in Pareto studies, the throughput gain."""
    if ax.mode == "weighted":
        return p.gain
    if ref is None or not ref.throughput:
        return None
    return p.throughput / ref.throughput - 1


def baseline_point(pts: Sequence[Point]) -> Point | None:
    """vLLM's defaults as measured, else the first measured baseline (as the study does)."""
    done = [p for p in pts if p.kind != PARTIAL]
    return next((p for p in done if p.name == DEFAULTS), None) or \
        next((p for p in done if p.name), None)


def history_figure(study: optuna.Study) -> go.Figure:
    """Gain over vLLM's defaults per trial, with the best feasible gain so far as a line."""
    ax = axes(study)
    pts, unplaced = points(study)
    ref = baseline_point(pts)
    done = [(p, g) for p in pts if p.kind != PARTIAL
            and (g := gain_of(p, ref, ax)) is not None]
    what = "weighted gain" if ax.mode == "weighted" else "throughput gain"
    fig = go.Figure()
    best, xs, ys = -math.inf, [], []
    for p, g in sorted(done, key=lambda pg: pg[0].number):
        if p.kind == FEASIBLE:
            best = max(best, g)
        if best > -math.inf:
            xs.append(p.number)
            ys.append(best * 100)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"shape": "hv", "color": "#2ca02c"},
                             name="best feasible so far"))
    for kind, symbol, colour in ((FEASIBLE, "circle", "#1f77b4"), (INFEASIBLE, "x", "#d62728")):
        sel = [(p, g) for p, g in done if p.kind == kind]
        if sel:
            fig.add_trace(go.Scatter(
                x=[p.number for p, _ in sel], y=[g * 100 for _, g in sel],
                mode="markers+text", text=[p.name for p, _ in sel], textposition="top center",
                marker={"symbol": symbol, "size": 10, "color": colour}, name=kind,
                hovertext=[p.hover(ax) for p, _ in sel], hoverinfo="text"))
    checked = [(r.number, v) for r in records(study)
               if (v := r.validation) and v.get("gain") is not None]
    if checked:
        fig.add_trace(go.Scatter(
            x=[n for n, _ in checked], y=[v["gain"] * 100 for _, v in checked], mode="markers",
            name="validated (95% CI)", marker={"symbol": "line-ew-open", "size": 18},
            error_y={"type": "data", "symmetric": False,
                     "array": [((v.get("ci_high") or v["gain"]) - v["gain"]) * 100
                               for _, v in checked],
                     "arrayminus": [(v["gain"] - (v.get("ci_low") or v["gain"])) * 100
                                    for _, v in checked]}))
    fig.add_hline(y=0, line_dash="dash", line_color="#888", annotation_text=ax.reference)
    title = f"Optimisation history: {what} over {ax.reference}"
    if unplaced or any(p.kind == PARTIAL for p in pts):
        n = len(unplaced) + sum(p.kind == PARTIAL for p in pts)
        title += f" ({n} pruned or failed trial(s) have no gain: see the table)"
    fig.update_layout(title=title, xaxis_title="trial", yaxis_title=f"{what} (%)",
                      height=HEIGHT, legend={"orientation": "h", "y": -0.18})
    return fig


def importances(study: optuna.Study) -> dict[str, float] | str:
    """fANOVA importances of the searched flags for the first objective, or why there are
    none (fewer than two completed searched trials, or nothing varied)."""
    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.params]
    params = sorted(set.intersection(*(set(t.params) for t in trials))) if trials else []
    if len(trials) < 2 or not params:
        return (f"Parameter importances need at least two completed searched trials; "
                f"this study has {len(trials)}.")
    target = None if len(study.directions) == 1 else (lambda t: t.values[0])
    try:
        return optuna.importance.get_param_importances(study, params=params, target=target)
    except (ValueError, RuntimeError, ZeroDivisionError) as err:
        return f"Parameter importances could not be computed: {err}"


def importance_figure(study: optuna.Study) -> go.Figure:
    """Bars of `importances`, or the reason there are none written on an empty figure."""
    imp = importances(study)
    what = "weighted score" if len(study.directions) == 1 else axes(study).throughput_label
    fig = go.Figure(layout={"title": f"Parameter importances (fANOVA, for the {what})",
                            "height": HEIGHT})
    if isinstance(imp, str):
        fig.add_annotation(text=imp, xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False)
        return fig
    names = list(reversed(imp))
    fig.add_trace(go.Bar(x=[imp[n] for n in names], y=names, orientation="h",
                         text=[f"{imp[n]:.2f}" for n in names], name="importance"))
    fig.update_layout(xaxis_title="share of the score's variance")
    return fig


def _categories(values: Sequence[Any]) -> tuple[list[int], list[Any], list[str]]:
    """Flag values as axis positions: numbers in order, then the rest; None is 'default'."""
    uniq = sorted(set(map(_key, values)), key=lambda kv: (kv[0], kv[1]))
    index = {kv: i for i, kv in enumerate(uniq)}
    return [index[_key(v)] for v in values], list(range(len(uniq))), [kv[2] for kv in uniq]


def _key(v: Any) -> tuple[int, Any, str]:
    if v is None:
        return (0, 0, "default")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (1, float(v), f"{v:g}")
    return (2, str(v), str(v))


def parallel_figure(study: optuna.Study) -> go.Figure:
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
    dims += [{"label": ax.throughput_label, "values": [p.throughput for p in pts]},
             {"label": ax.latency_label, "values": [p.latency_ms for p in pts]}]
    if any(p.memory_mib is not None for p in pts):
        dims.append({"label": "memory MiB", "values": [p.memory_mib or 0 for p in pts]})
    gains = [gain_of(p, ref, ax) for p in pts]
    colour = [g * 100 if g is not None else 0.0 for g in gains]
    fig.add_trace(go.Parcoords(dimensions=dims, line={
        "color": colour, "colorscale": "Viridis", "showscale": True,
        "colorbar": {"title": "gain %"}}))
    fig.update_layout(margin={"l": 90, "r": 90, "t": 110})
    return fig


def guardrail_figure(study: optuna.Study) -> go.Figure:
    """Drift (log scale) and agreement of every checked trial against their thresholds."""
    checked = [r for r in records(study) if "drift" in (r.quality or {})]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "drift of the reference tokens' log-probabilities (nats, lower is better)",
        "agreement of greedy outputs (higher is better)"))
    fig.update_layout(title="Quality guardrail", height=HEIGHT, showlegend=False)
    if not checked:
        fig.add_annotation(text="no trial was checked (guardrail off, or nothing completed)",
                           xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
        return fig
    qs = [r.quality for r in checked]
    xs = [f"#{r.number} {r.name}".strip() for r in checked]
    colours = ["#2ca02c" if q.get("passed") else "#d62728" for q in qs]
    hover = [("reference run (its drift is the noise floor)" if q.get("made_reference")
              else ("passed" if q.get("passed") else "REJECTED")) for q in qs]
    # A log axis cannot show 0: a drift of exactly 0 is drawn at a tiny floor.
    fig.add_trace(go.Bar(x=xs, y=[max(q["drift"], 1e-9) for q in qs], marker_color=colours,
                         hovertext=hover, name="drift"), row=1, col=1)
    fig.add_trace(go.Bar(x=xs, y=[q.get("agreement") for q in qs], marker_color=colours,
                         hovertext=hover, name="agreement"), row=1, col=2)
    th = next((q["thresholds"] for q in reversed(qs) if q.get("thresholds")), {})
    if th.get("drift") is not None:
        fig.add_hline(y=th["drift"], line_dash="dash", line_color="#d62728", row=1, col=1,
                      annotation_text=f"max {th['drift']:.3g}")
    if th.get("agreement") is not None:
        fig.add_hline(y=th["agreement"], line_dash="dash", line_color="#d62728", row=1, col=2,
                      annotation_text=f"min {th['agreement']:.3g}")
    shown = [max(q["drift"], 1e-9) for q in qs] + ([th["drift"]] if th.get("drift") else [])
    fig.update_yaxes(type="log", row=1, col=1, range=[math.log10(min(shown)) - 0.5,
                                                      math.log10(max(shown)) + 0.5])
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    return fig


def best(study: optuna.Study) -> TrialRecord | None:
    """The trial `autotune export` ships by default (its `balanced` policy), if any."""
    try:
        return choose(study, policy="balanced")
    except ConfigError:
        return None


def best_vs_baseline(study: optuna.Study, label: str | None = None) -> dict[str, Any]:
    """One row: vLLM's defaults and the best feasible trial, their figures and the gain."""
    ax = axes(study)
    pts = {p.number: p for p in points(study)[0]}
    ref = baseline_point(list(pts.values()))
    top = best(study)
    b = pts.get(top.number) if top is not None else None
    device = next((r.device_name for r in records(study) if r.device_name), None) or "-"

    def figures(p: Point | None, prefix: str) -> dict[str, Any]:
        return {f"{prefix} #": p.number if p else None,
                f"{prefix} {ax.throughput}": p.throughput if p else None,
                f"{prefix} {ax.latency} ms": p.latency_ms if p else None,
                f"{prefix} memory MiB": p.memory_mib if p else None}

    gain = gain_of(b, ref, ax) if b is not None else None
    return {"study": label or study.study_name, "device": device,
            "trials": len(study.get_trials(deepcopy=False)), **figures(ref, "baseline"),
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
    fig.update_layout(title="Pareto fronts side by side", height=HEIGHT,
                      coloraxis={"colorscale": "Viridis", "colorbar": {"title": "memory MiB"}},
                      legend={"orientation": "h", "y": -0.2})
    return fig
