"""The report's speculative decoding: how many draft tokens each speculative trial's target
model accepted (only in a study with such a trial)."""

from __future__ import annotations

import plotly.graph_objects as go

from autotune.results.report._markup import Section, figure_html
from autotune.results.report.parallel import short_value
from autotune.results.report.points import HEIGHT
from autotune.tuning.records.snapshot import StudyOrSnapshot, records


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


def section(study: StudyOrSnapshot) -> Section | None:
    """The section, in a study where some trial speculated."""
    if not any(r.speculation for r in records(study)):
        return None
    return Section("Speculative decoding", "<p>Each bar is one trial that speculated: the "
                   "share of draft tokens the target model accepted during its workload, as "
                   "the engine counted them; the label gives the tokens a verification step "
                   "yielded on average (1 + accepted per draft).</p>"
                   + figure_html(speculation_figure(study), "speculation"))
