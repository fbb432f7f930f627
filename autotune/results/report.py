"""The study as pictures: Pareto front, history, importances, parallel coordinates, guardrail.

Every figure is a plain function of a study that returns a plotly Figure, so the notebooks
show exactly what `autotune report` writes (`autotune.results.reportpage` puts them in one HTML
file). A trial is placed by what it measured (its record's `measures`, or the probe phase's
partial figures for a trial pruned mid-run); baselines are labelled by name, since every
gain reads against them.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState
from plotly.subplots import make_subplots

from autotune.config import latency_key
from autotune.engine import phases
from autotune.errors import ConfigError
from autotune.flags import Flags
from autotune.measure.measurement import Measurement
from autotune.results import interactivity, summary
from autotune.results.gputime import LAUNCHED, GpuTime
from autotune.results.show import Thresholds, outcome, reason
from autotune.tuning.policy import objective as obj
from autotune.tuning.ranking import (
    choose,
    fixed_flags,
    reference_name,
    standing,
    stored_scenario,
)
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord

FEASIBLE, INFEASIBLE, PARTIAL = "feasible", "infeasible", "pruned (partial figures)"
HEIGHT = 520
THROUGHPUT_SHORT = {"output_throughput": "output tok/s", "request_throughput": "req/s",
                    "total_token_throughput": "total tok/s"}
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


def axes(study: StudyOrSnapshot) -> Axes:
    scenario = stored_scenario(study)
    if scenario is None:
        return Axes("weighted" if len(study.directions) == 1 else "pareto",
                    "output_throughput", "ttft_p95", reference=reference_name(study))
    o = scenario.objective
    return Axes(o.mode, o.throughput, o.latency, scenario.workload.mode == "capacity",
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
    flags: Flags = field(default_factory=dict)
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


def points(study: StudyOrSnapshot) -> tuple[list[Point], list[TrialRecord]]:
    """The trials that can be placed, and the rest (pruned or failed with no figures)."""
    ax, fixed = axes(study), fixed_flags(study)
    placed, unplaced = [], []
    for r in records(study):
        flags = {k: v for k, v in r.flags.items() if fixed.get(k) != v}
        common: dict[str, Any] = {"number": r.number, "name": r.name, "flags": flags,
                                  "why": reason(r), "gain": r.gain}
        if r.state == TrialState.COMPLETE and r.measures:
            m = r.measures
            placed.append(Point(kind=FEASIBLE if r.feasible else INFEASIBLE,
                                throughput=m.throughput, latency_ms=m.latency_ms,
                                memory_mib=m.memory_mib, **common))
        elif (partial := _partial(r.metrics, ax)) is not None:
            placed.append(Point(kind=PARTIAL, throughput=partial[0], latency_ms=partial[1],
                                memory_mib=obj.memory_mib(r.metrics), **common))
        else:
            unplaced.append(r)
    return placed, unplaced


def _partial(metrics: Measurement, ax: Axes) -> tuple[float, float] | None:
    """Throughput and latency of a trial stopped mid-run (the probe phase), if it has them."""
    thr, lat = metrics.value(ax.throughput), metrics.value(latency_key(ax.latency))
    if not metrics.completed or thr is None or lat is None:
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


# Pixel size of a figure's plotting area on the report page (1,280-px window) and of its
# label text, for placing labels where they cannot overlap.
PLOT_W, PLOT_H = 1000, HEIGHT - 180
CHAR_W, LINE_H = 7.0, 14.0
MARKER = 16.0  # px: a marker's box, kept clear of labels


@dataclass
class Label:
    """A text to write next to the point (x, y) of a figure, in data coordinates."""

    x: float
    y: float
    text: str
    colour: str = "#222"


def axis_range(values: Sequence[float], pad: float = 0.08, log: bool = False
               ) -> list[float]:
    """A range holding `values` with `pad` of it spare on both sides (labels fit inside)."""
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(max(lo, 1e-9)), math.log10(max(hi, 1e-9))
    span = (hi - lo) or abs(hi) or 1.0
    return [lo - pad * span, hi + pad * span]


def place_labels(fig: go.Figure, labels: Sequence[Label], xr: Sequence[float],
                 yr: Sequence[float], points: Sequence[tuple[float, float]] = (),
                 row: int | None = None, col: int | None = None, width: float = PLOT_W
                 ) -> None:
    """Write each label beside its point where it overlaps no other label, no marker and
    stays inside the plot (a label that finds no such place beside its point goes further
    out, on a leader line). Positions are worked out in pixels of the report's plot area."""
    def px(x: float, y: float) -> tuple[float, float]:
        return ((x - xr[0]) / (xr[1] - xr[0]) * width,
                (yr[1] - y) / (yr[1] - yr[0]) * PLOT_H)

    taken = [(cx - MARKER / 2, cy - MARKER / 2, cx + MARKER / 2, cy + MARKER / 2)
             for cx, cy in (px(x, y) for x, y in points)]
    for lab in sorted(labels, key=lambda lb: (lb.x, lb.y)):
        cx, cy = px(lab.x, lab.y)
        w, h = CHAR_W * len(lab.text) + 4, LINE_H + 2
        chosen: tuple[float, float, tuple[float, float, float, float]] | None = None
        dy: float  # whole pixels in the loop below, fractions in the fallback
        for dist in (14, 26, 40, 60, 85):
            for dx, dy in ((0, dist), (0, -dist), (dist + w / 2, 0), (-dist - w / 2, 0),
                           (dist + w / 2, dist), (-dist - w / 2, dist),
                           (dist + w / 2, -dist), (-dist - w / 2, -dist)):
                box = (cx + dx - w / 2, cy + dy - h / 2, cx + dx + w / 2, cy + dy + h / 2)
                inside = box[0] >= 0 and box[2] <= width and box[1] >= 0 and box[3] <= PLOT_H
                if inside and not any(_overlap(box, t) for t in taken):
                    chosen = (dx, dy, box)
                    break
            if chosen:
                break
        if chosen is None:  # crowded: straight up, as far as it takes
            dy = -30.0
            while any(_overlap((cx - w / 2, cy + dy - h / 2, cx + w / 2, cy + dy + h / 2), t)
                      for t in taken) and dy > -PLOT_H:
                dy -= h
            chosen = (0.0, dy, (cx - w / 2, cy + dy - h / 2, cx + w / 2, cy + dy + h / 2))
        dx, dy, box = chosen
        taken.append(box)
        near = abs(dx) <= w / 2 + 14 and abs(dy) <= 14
        # Beside its point the text is shifted (plotly's y grows upwards); further out it
        # hangs on a leader line from the point.
        where = {"xshift": dx, "yshift": -dy, "showarrow": False} if near else \
            {"ax": dx, "ay": dy, "showarrow": True, "arrowwidth": 1, "arrowhead": 0,
             "arrowcolor": "#999", "standoff": 6}
        fig.add_annotation(x=lab.x, y=lab.y, text=lab.text, font={"size": 11,
                           "color": lab.colour}, **where,
                           **({"row": row, "col": col} if row else {}))


def _overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _grouped(pts: Sequence[Point]) -> list[tuple[Point, str]]:
    """Points at the same place (a configuration measured twice: `same as #N`) share one
    label, `#2 = #3`."""
    groups: dict[tuple[float, float], list[Point]] = {}
    for p in pts:
        groups.setdefault((p.throughput, p.latency_ms), []).append(p)
    return [(g[0], " = ".join(p.label for p in g)) for g in groups.values()]


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
              for p, text in _grouped(labelled)]
    if pts:
        xr = axis_range([p.throughput for p in pts])
        yr = axis_range([p.latency_ms for p in pts])
        fig.update_xaxes(range=xr)
        fig.update_yaxes(range=yr)
        place_labels(fig, labels, xr, yr, [(p.throughput, p.latency_ms) for p in pts])
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
                     xr, yr, [(p.number, g * 100) for p, g in done])
    title = f"Optimisation history: {what} over {ax.reference} (the dashed line)"
    if unplaced or any(p.kind == PARTIAL for p in pts):
        n = len(unplaced) + sum(p.kind == PARTIAL for p in pts)
        title += f"; {n} pruned or failed trial(s) have no gain: see the table"
    fig.update_layout(title=title, xaxis_title="trial", yaxis_title=f"{what} (%)",
                      height=HEIGHT, legend={"orientation": "h", "y": -0.18})
    return fig


MIN_DISTINCT = 5  # distinct searched configurations before importances mean anything
# Importances are shares of 1 resting on a handful of configurations: four decimals are more
# than they mean. Rounding also keeps the report the same on every machine: numpy's
# vectorised exp and log differ in the last bits between CPUs (AVX-512 or not).
IMPORTANCE_DECIMALS = 4


def importances(study: StudyOrSnapshot) -> Importances | str:
    """PED-ANOVA importances of the searched flags for the first objective, rounded to
    `IMPORTANCE_DECIMALS`, or why there are none: fewer than `MIN_DISTINCT` distinct
    completed searched configurations (a copy of a configuration measured before, `same as
    #N`, adds nothing; two identical trials once gave 0.33/0.33/0.33), or no flag that
    varied."""
    done = [r for r in records(study, (TrialState.COMPLETE,))
            if r.params and r.duplicate_of is None and r.values]
    distinct = {json.dumps(r.params, sort_keys=True, default=str) for r in done}
    if len(distinct) < MIN_DISTINCT:
        return (f"Parameter importances need at least {MIN_DISTINCT} distinct completed "
                f"searched configurations to mean anything; this study has {len(distinct)}.")
    params = sorted(p for p in set.intersection(*(set(r.params) for r in done))
                    if len({json.dumps(r.params[p], default=str) for r in done}) > 1)
    if not params:
        return "Parameter importances: no searched flag took more than one value."
    numbers = {r.number for r in done}
    trials = [t for t in Snapshot.of(study).study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,)) if t.number in numbers]
    view = optuna.create_study(directions=study.directions)  # the distinct trials only
    view.add_trials(trials)
    target = None if len(study.directions) == 1 else (lambda t: t.values[0])
    # Optuna's default evaluator (PED-ANOVA; fANOVA would need scikit-learn). It warns when
    # a flag's values were each tried by few trials: that caveat is kept, for the caption,
    # instead of going to stderr.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            imp = optuna.importance.get_param_importances(view, params=params, target=target)
        except (ValueError, RuntimeError, ZeroDivisionError) as err:
            return f"Parameter importances could not be computed: {err}"
    thin = sorted({m.group(1) for w in caught
                   if (m := re.search(r"parameter `([^`]+)` have less than", str(w.message)))})
    shares = {name: round(value, IMPORTANCE_DECIMALS) for name, value in imp.items()}
    # Largest first, ties by name: the order no longer hangs on last bits either.
    ordered = dict(sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])))
    return Importances(ordered, len(distinct), thin)


class Importances(dict[str, float]):
    """Importances by flag, with how many distinct configurations they rest on and the
    flags some of whose values only one trial tried (where the figure may be off)."""

    def __init__(self, values: Mapping[str, float], configurations: int,
                 thin: Sequence[str] = ()):
        super().__init__(values)
        self.configurations = configurations
        self.thin = list(thin)

    @property
    def caption(self) -> str:
        text = f"from {self.configurations} distinct searched configurations"
        if self.thin:
            text += (f"; some values of {', '.join(self.thin)} were tried only once, so "
                     "their share may be off")
        return text


def importance_figure(study: StudyOrSnapshot) -> go.Figure:
    """Bars of `importances`, or the reason there are none written on an empty figure."""
    imp = importances(study)
    what = "weighted score" if len(study.directions) == 1 else axes(study).throughput_label
    fig = go.Figure(layout={"title": f"Parameter importances (PED-ANOVA, for the {what})",
                            "height": HEIGHT})
    if isinstance(imp, str):
        fig.add_annotation(text=imp, xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False)
        return fig
    names = list(reversed(imp))
    fig.add_trace(go.Bar(x=[imp[n] for n in names], y=names, orientation="h",
                         text=[f"{imp[n]:.2f}" for n in names], name="importance"))
    fig.update_layout(xaxis_title=f"importance ({imp.caption})")
    return fig


def _categories(values: Sequence[Any]) -> tuple[list[int], list[Any], list[str]]:
    """Flag values as axis positions: numbers in order, then the rest; None is 'default'."""
    uniq = sorted(set(map(_key, values)), key=lambda kv: (kv[0], kv[1]))
    index = {kv: i for i, kv in enumerate(uniq)}
    return [index[_key(v)] for v in values], list(range(len(uniq))), [kv[2] for kv in uniq]


def _key(v: Any) -> tuple[int, Any, str]:
    if v is None:
        return (0, 0, "default")
    if isinstance(v, bool):
        return (2, str(v), "on" if v else "off")
    if isinstance(v, (int, float)):
        return (1, float(v), f"{v:g}")
    return (2, json.dumps(v, sort_keys=True, default=str), short_value(v))


def short_value(v: Any, limit: int = 14) -> str:
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


def guardrail_figure(study: StudyOrSnapshot) -> go.Figure:
    """Drift (log scale) and agreement of every checked trial against their thresholds."""
    checked = [r for r in records(study) if r.quality and r.quality.checked]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "drift of the reference tokens' log-probabilities (nats, lower is better)",
        "agreement of greedy outputs (higher is better)"))
    fig.update_layout(title="Quality guardrail", height=HEIGHT, showlegend=False)
    if not checked:
        fig.add_annotation(text="no trial was checked (guardrail off, or nothing completed)",
                           xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
        return fig
    qs = [r.quality for r in checked if r.quality is not None]  # each of them has one
    xs = [f"#{r.number} {r.name}".strip() for r in checked]
    colours = ["#2ca02c" if q.passed else "#d62728" for q in qs]
    hover = [("reference run (its drift is the noise floor)" if q.made_reference
              else ("passed" if q.passed else "REJECTED")) for q in qs]
    # A log axis cannot show 0: a drift of exactly 0 is drawn at a tiny floor.
    drifts = [max(q.drift or 0.0, 1e-9) for q in qs]  # each checked one has a drift
    fig.add_trace(go.Bar(x=xs, y=drifts, marker_color=colours,
                         hovertext=hover, name="drift"), row=1, col=1)
    fig.add_trace(go.Bar(x=xs, y=[q.agreement for q in qs], marker_color=colours,
                         hovertext=hover, name="agreement"), row=1, col=2)
    th = Thresholds.of(next((q for q in reversed(qs) if q.thresholds), None))
    if th.drift is not None:
        fig.add_hline(y=th.drift, line_dash="dash", line_color="#d62728", row=1, col=1,
                      annotation_text=f"max {th.drift:.3g}")
    if th.agreement is not None:
        fig.add_hline(y=th.agreement, line_dash="dash", line_color="#d62728", row=1, col=2,
                      annotation_text=f"min {th.agreement:.3g}")
    shown = drifts + ([th.drift] if th.drift else [])
    fig.update_yaxes(type="log", row=1, col=1, range=[math.log10(min(shown)) - 0.5,
                                                      math.log10(max(shown)) + 0.5])
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    return fig


# One colour per start-up phase, by name (a phase added to `phases.PHASES` later leaves
# the others' colours as they were, and is brown until it has one of its own), black for
# the end of a failed start, and grey for records older than the split.
_COLOURS = {"imports": "#9467bd", "inspect": "#8c564b", "engine_core": "#d62728",
            "worker": "#e377c2", "load": "#7f7f7f", "compile": "#ff7f0e",
            "kv_cache": "#2ca02c", "graphs": "#aec7e8", "init": "#1f77b4", "serve": "#17becf",
            phases.FIRST_REQUEST: "#bcbd22"}
PHASE_COLOURS = {**{p: _COLOURS.get(p, "#c49c94") for p in phases.PHASES},
                 phases.FAILED: "#000000", "not split": "#c7c7c7"}


def speculation_figure(study: StudyOrSnapshot) -> go.Figure:
    """Acceptance of every speculative trial, with its mean acceptance length and the
    workload's TPOT: whether drafting paid on this traffic."""
    spec = [(r, r.speculation) for r in records(study) if r.speculation is not None]
    fig = go.Figure()
    fig.update_layout(title="Speculative decoding: draft tokens accepted", height=HEIGHT,
                      xaxis_title="accepted / drafted tokens", xaxis_range=[0, 1])
    if not spec:
        fig.add_annotation(text="no trial speculated", xref="paper", yref="paper",
                           x=0.5, y=0.5, showarrow=False)
        return fig
    ys = [" ".join(filter(None, (f"#{r.number}", r.name, short_value(
        r.flags["speculative-config"], 24) if r.flags.get("speculative-config") else "")))
          for r, _ in spec]
    tpot = [r.metrics.value("median_tpot_ms") for r, _ in spec]
    fig.add_trace(go.Bar(
        y=ys, x=[s.acceptance_rate or 0.0 for _, s in spec], orientation="h",
        marker_color="#2ca02c",
        text=[f"x{s.mean_acceptance_length:.2f}" if s.mean_acceptance_length else ""
              for _, s in spec], textposition="outside",
        customdata=[[s.drafts, s.accepted_tokens, s.draft_tokens, t] for (_, s), t
                    in zip(spec, tpot, strict=True)],
        hovertemplate="%{customdata[1]} of %{customdata[2]} draft tokens accepted in "
                      "%{customdata[0]} drafts; median TPOT %{customdata[3]:.2f} ms"
                      "<extra>%{y}</extra>"))
    fig.update_yaxes(autorange="reversed")
    return fig


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


def best(study: StudyOrSnapshot) -> TrialRecord | None:
    """The trial `autotune export` ships by default (its `balanced` policy), if any."""
    try:
        return choose(study, policy="balanced")
    except ConfigError:
        return None


def best_vs_baseline(study: StudyOrSnapshot, label: str | None = None) -> dict[str, Any]:
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
                               _grouped([p for p in pts if p.name or p.kind == FEASIBLE])],
                         xr, yr, [(p.throughput, p.latency_ms) for p in pts], row=1, col=col,
                         width=PLOT_W / len(labels))
    fig.update_layout(title="Pareto fronts side by side", height=HEIGHT,
                      coloraxis={"colorscale": "Viridis", "colorbar": {"title": "memory MiB"}},
                      legend={"orientation": "h", "y": -0.2})
    return fig
