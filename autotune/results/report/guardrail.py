"""The report's quality guardrail: how each checked trial's answers compare with the reference
outputs, the thresholds, and the verdicts in task terms."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.results.report._markup import Section, escape, figure_html
from autotune.results.report.points import HEIGHT
from autotune.results.show import Thresholds, fmt
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records


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


def verdicts(study: StudyOrSnapshot) -> str:
    """The guardrail's rule, its reference and noise floor, and what it rejected, as HTML."""
    ref = Snapshot.of(study).attrs.reference or {}
    checked = [(r.number, r.quality) for r in records(study) if r.quality and r.quality.checked]
    if not checked:
        return "<p class='note'>No trial was checked against reference outputs.</p>"
    q = checked[-1][1]
    th, noise = Thresholds.of(q), q.noise or {}
    rejected = [f"#{number}" for number, verdict in checked if not verdict.passed]
    worded = "".join(f"<li>#{number}: {escape(v.words())}</li>" for number, v in checked
                     if v.verdict)
    budget = next((v.budget for _, v in checked if v.budget is not None), None)
    rule = (f"<p>The verdict a trial gets is in task terms: each answers {q.tasks.items} "
            "scorable questions that the reference configuration also answered; "
            "<b>unchanged</b> (log-probs within the noise floor), <b>changed within "
            f"budget</b> (its accuracy is not shown to drop more than {budget:g} "
            "point(s)), or <b>worse</b> (a drop beyond the budget that the paired 95 % "
            "interval shows): only worse is rejected.</p><ul>" + worded + "</ul>") \
        if worded and q.tasks is not None and budget is not None else ""
    return (rule + f"<p>Reference outputs made by trial #{escape(ref.get('trial', '-'))}; its "
            f"own noise floor: drift {fmt(noise.get('drift'), '.2g')} nats, agreement "
            f"{fmt(noise.get('agreement'), '.3f')}. "
            f"{'Its log-probs are unchanged' if rule else 'A trial passes'} with drift &le; "
            f"{fmt(th.drift, '.3g')} nats and agreement &ge; "
            f"{fmt(th.agreement, '.3g')}. Checked: {len(checked)} trial(s); rejected: "
            f"{escape(', '.join(rejected) or 'none')}.</p>")


def section(study: StudyOrSnapshot) -> Section:
    return Section("Quality guardrail",
                   verdicts(study) + figure_html(guardrail_figure(study), "guardrail"))
