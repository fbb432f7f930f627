"""`autotune report`: the figures of `autotune.results.report` and a table of every trial in
one HTML file that opens offline (plotly.js is inlined once, nothing is fetched)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from autotune.config import Scenario
from autotune.errors import ConfigError
from autotune.flags import Flags, FlagValue
from autotune.measure import capacityrecord, capacitytext
from autotune.measure.capacityrecord import CapacityRecord
from autotune.remeasurements import Validation
from autotune.results import cost, decision, interactivity, report, show, summary, whatif
from autotune.results.gputime import SESSION_GAP_S, GpuTime
from autotune.results.show import fmt, outcome, reason
from autotune.slo import Slo
from autotune.tuning import ablation, ranking
from autotune.tuning.policy import relief
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.origin import RELIEF
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord

# The page fits a 1,280-px window: the body is at most 1,200 px wide, and the trials table
# wraps its cells (long flag lists break between flags) instead of widening the page.
CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222;
       padding: 0 16px; }
.js-plotly-plot, .plotly-graph-div { max-width: 100%; }
td { overflow-wrap: anywhere; } td.num { white-space: nowrap; overflow-wrap: normal; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
div.decision { background: #eef6ee; border-left: 4px solid #3a7; padding: 6px 14px;
               overflow-wrap: anywhere; }
div.decision p { margin: 4px 0; } div.decision p:first-child { font-weight: 600; }
p.note { background: #f5f5f5; padding: 10px 14px; border-left: 4px solid #999; }
table { border-collapse: collapse; font-size: 12px; width: 100%; table-layout: auto; }
th, td { border: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
tr.infeasible td { background: #fff0f0; } tr.pruned td, tr.fail td { color: #777; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dt { font-weight: 600; } dd { margin: 0; }
"""
# Plotly's modebar links to plotly's site; a report is read offline.
CONFIG = {"displaylogo": False, "responsive": True}


def _e(value: Any) -> str:
    return html.escape(str(value))


def _flags(flags: Mapping[str, FlagValue]) -> str:
    return " ".join(f"--{k}" if v is True else f"--no-{k}" if v is False
                    else f"--{k} {json.dumps(v) if isinstance(v, dict) else v}"
                    for k, v in flags.items()) or "(defaults)"


def _validation(v: Validation | None) -> str:
    """`+6.2% [-3.1%, +16.4%] ×3, within noise` from a stored validation."""
    if v is None:
        return ""
    text = f"{v.gain:+.1%}"
    if v.ci_low is not None and v.ci_high is not None:
        text += f" [{v.ci_low:+.1%}, {v.ci_high:+.1%}]"
    if v.repeats:
        text += f" ×{v.repeats}"
    return text + (f", {v.verdict}" if v.verdict else "")


def _capacity(r: TrialRecord) -> tuple[str, str]:
    """Capacity at SLO in the words of every view (`capacitytext.describe`: its one range
    is the interval, as the page's header gives it), why not to quote it where that
    holds, and the output tok/s at that rate."""
    cap = r.capacity
    if not cap:
        return "", ""
    text = capacitytext.describe(cap)
    if caveat := show.capacity_caveat(cap):
        text += f"; {caveat}"
    return text, fmt(cap.output_throughput)


def _limit(cap: CapacityRecord | None) -> str:
    return (capacityrecord.limit_text(cap) if cap else None) or ""


def _gain(r: TrialRecord, tied: set[int], best: int | None) -> str:
    """The gain, or for a trial the study cannot tell from its best, a tie: its own
    figure differs from the best's by noise, so it reads neither as a loss nor a win."""
    if r.number in tied and r.gain is not None:
        return f"tied with #{best} ({r.gain:+.1%} measured, within noise)"
    return fmt(r.gain, "+.1%")


def _beyond(r: TrialRecord, fixed: Mapping[str, Any], scenario: Scenario | None = None
            ) -> Flags:
    """The trial's flags (`summary.shown_flags`: a waiting trial's queued ones) less the
    scenario's fixed ones (those hold for every trial)."""
    return {k: v for k, v in summary.shown_flags(r, scenario).items() if fixed.get(k) != v}


Column = tuple[str, Callable[[TrialRecord], str], bool]  # header, cell, numeric
# The guardrail's verdict (a trial's `quality.passed`); "" where it did not run.
_VERDICTS: dict[object, str] = {True: "passed", False: "REJECTED"}


def _m(r: TrialRecord) -> Measures:
    """The trial's measures; one without reads as not measured (NaN, shown as `-`)."""
    return r.measures or Measures()


def _q(r: TrialRecord) -> Quality:
    """The trial's quality verdict; one without reads as not checked (None, `-`)."""
    return r.quality or Quality()


def columns(study: StudyOrSnapshot, price: cost.Price | None = None) -> list[Column]:
    """The table's columns; capacity and validation only where some trial has them, and
    with a known `price`, each trial's cost per million output tokens at its capacity."""
    ax = report.axes(study)
    fixed = report.fixed_flags(study)
    trials = records(study)
    tied = summary.tied_with_best(study)
    top = ranking.feasible_best(study)
    scenario = ranking.stored_scenario(study)

    cols: list[Column] = [
        ("#", lambda r: str(r.number), True),
        ("tried because", lambda r: r.tried_because.text, False),
        ("flags beyond the fixed ones", lambda r: _flags(_beyond(r, fixed, scenario)), False),
        ("outcome", outcome, False),
        ("reason", lambda r: reason(r) + (f": {r.detail[:160]}" if r.detail else ""), False),
        (ax.throughput_label, lambda r: fmt(_m(r).throughput), True),
        (ax.latency_label, lambda r: fmt(_m(r).latency_ms), True),
        ("memory MiB", lambda r: fmt(_m(r).memory_mib, ".0f"), True),
        ("gain", lambda r: _gain(r, tied, top.number if top else None), False),
        ("drift (nats)", lambda r: fmt(_q(r).drift, ".2g"), True),
        ("agreement", lambda r: fmt(_q(r).agreement, ".3f"), True),
        ("quality", lambda r: _q(r).words() if _q(r).verdict
         else _VERDICTS.get(_q(r).passed, ""), False),
        ("start-up s", lambda r: fmt(r.startup_s), True),
    ]
    if any(r.speculation for r in trials):
        cols.append(("speculation: acceptance (tokens a step)",
                     lambda r: show.speculation_text(r).removeprefix("acceptance "), False))
    if any(r.capacity for r in trials):
        cols += [("capacity at SLO (interval)", lambda r: _capacity(r)[0], False),
                 ("capacity out tok/s", lambda r: _capacity(r)[1], True),
                 ("limited by", lambda r: _limit(r.capacity), False)]
        if price is not None and price.known:
            cols.append((f"{price.currency} per M output tokens", lambda r: fmt(
                cost.trial_cost(r, price).per_million if r.feasible else None, ".3g"), True))
    elif any(r.bottleneck for r in trials):
        cols.append(("limited by", lambda r: r.bottleneck.text if r.bottleneck else "", False))
    if any(r.validation_vllm for r in trials):
        cols.append(("re-measured by vllm bench serve",
                     lambda r: r.validation_vllm.line()
                     if r.validation_vllm else "", False))
    if any(r.validation for r in trials):
        cols.append(("validated gain [95% CI] ×runs", lambda r: _validation(r.validation),
                     False))
    return cols


def trials_table(study: StudyOrSnapshot, price: cost.Price | None = None) -> str:
    """Every trial with its outcome and reason, as an HTML table."""
    cols = columns(study, price)
    head = "".join(f"<th>{_e(name)}</th>" for name, _, _ in cols)
    rows = []
    for r in records(study):
        cells = "".join(f"<td{' class=num' if num else ''}>{_e(cell(r))}</td>"
                        for _, cell, num in cols)
        rows.append(f"<tr class='{_e(outcome(r))}' data-trial='{r.number}'>{cells}</tr>")
    return (f"<table id='trials'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>")


def table_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """Plain rows (e.g. `report.best_vs_baseline` of several studies) as an HTML table."""
    keys = list(dict.fromkeys(k for row in rows for k in row))

    def cell(v: Any) -> str:
        return fmt(v, ".4g") if isinstance(v, float) else ("-" if v is None else str(v))

    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_e(cell(row.get(k)))}</td>" for k in keys)
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _about(study: StudyOrSnapshot) -> str:
    """What was tuned, where, against what: the context every figure needs."""
    scenario = ranking.stored_scenario(study)
    trials = records(study)
    first = next((r for r in trials if r.engine_version), None)
    counts: dict[str, int] = {}
    for r in trials:
        counts[outcome(r)] = counts.get(outcome(r), 0) + 1
    top = report.best(study)
    fixed = report.fixed_flags(study)
    device = f"{first.engine_version} on {first.device_name}" if first else "-"
    if first and first.device_name == "cpu":
        device = f"{first.engine_version} on the CPU (vLLM's CPU build)"
    ranked = summary.ranking(ranking.standing(study), ranking.not_overrides(study))
    tied = [r for r in ranked if r.tied]
    explained = ablation.latest(study)  # which of the winner's flags carry its gain
    guided = [r for r in trials if r.origin_kind == RELIEF]
    # (label, text) in the order shown; None: not said of this study.
    items: list[tuple[str, str | None]] = [
        ("model", show.model_text(scenario.model if scenario else None)),
        ("engine, device", device),
        ("workload", show.workload_text(scenario.workload if scenario else None)),
        ("objective", show.objective_text(scenario.objective if scenario else None)),
        ("fixed flags", _flags(fixed) if fixed else "none"),
        ("trials", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"),
        ("best feasible", _best_line(study, top, fixed)),
        ("cannot separate", (
            f"the top {len(tied)} configurations ("
            + ", ".join(f"#{r.number}" for r in tied) + ") have overlapping capacity "
            "intervals: the study cannot tell them apart; the one with the fewest "
            "overrides of vLLM's defaults is preferred") if len(tied) > 1 else None),
        ("limited by", f"#{ranked[0].number}: {ranked[0].bottleneck}"
         if ranked and ranked[0].bottleneck else None),
        ("headroom", relief.ceiling(top) or None),
        ("the gain rests on", " ".join(line.strip() for line in explained.lines())
         if explained else None),
        ("relief moves", f"{len(guided)} of {len(trials)} trials relieved another "
         "trial's bottleneck (column 'tried because')" if guided else None),
    ]
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items
                            if v is not None) + "</dl>"


def _decision(study: Snapshot, price: cost.Price, load: float | None) -> str:
    """The decision first, in the words `show` gives it (`autotune.results.decision`), or
    why the study has none; a Pareto study's front."""
    if len(study.directions) != 1:
        return ""
    found, none = decision.of_study(study, price, load)
    lines = found.lines() if found is not None else [none.line()] if none else []
    return "<div class='decision'>" + "".join(f"<p>{_e(line.strip())}</p>"
                                              for line in lines) + "</div>"


def _best_line(study: StudyOrSnapshot, top: TrialRecord | None, fixed: Mapping[str, Any]
               ) -> str:
    """`#7 --max-num-seqs 256 ..., gain +21.7 % over vLLM defaults, capacity ...; ship it
    with: ...`, with the capacity's caveat where it has one."""
    if top is None:
        return "none yet"
    effective = ranking.effective_defaults(study)
    own = _beyond(top, fixed)
    changes = effective.overrides(own)
    text = (f"#{top.number} {_flags(changes) if changes else '(vLLM defaults)'}, "
            f"score gain {fmt(top.gain, '+.1%')} over {ranking.reference_name(study)}")
    if left := effective.words(own):
        text += f" (also set, at vLLM's defaults on this machine: {left})"
    if top.capacity:
        text += f"; capacity at SLO {capacitytext.describe(top.capacity)}"
        if caveat := show.capacity_caveat(top.capacity):
            text += f" (not a figure to quote: {caveat})"
    return text + (f"; ship it with: autotune export {study.study_name} --trial {top.number} "
                   "--format k8s")


def _guardrail(study: StudyOrSnapshot) -> str:
    ref = Snapshot.of(study).attrs.reference or {}
    checked = [(r.number, r.quality) for r in records(study) if r.quality and r.quality.checked]
    if not checked:
        return "<p class='note'>No trial was checked against reference outputs.</p>"
    q = checked[-1][1]
    th, noise = show.Thresholds.of(q), q.noise or {}
    rejected = [f"#{number}" for number, verdict in checked if not verdict.passed]
    worded = "".join(f"<li>#{number}: {_e(v.words())}</li>" for number, v in checked
                     if v.verdict)
    budget = next((v.budget for _, v in checked if v.budget is not None), None)
    rule = (f"<p>The verdict a trial gets is in task terms: each answers {q.tasks.items} "
            "scorable questions that the reference configuration also answered; "
            "<b>unchanged</b> (log-probs within the noise floor), <b>changed within "
            f"budget</b> (its accuracy is not shown to drop more than {budget:g} "
            "point(s)), or <b>worse</b> (a drop beyond the budget that the paired 95 % "
            "interval shows): only worse is rejected.</p><ul>" + worded + "</ul>") \
        if worded and q.tasks is not None and budget is not None else ""
    return (rule + f"<p>Reference outputs made by trial #{_e(ref.get('trial', '-'))}; its own "
            f"noise floor: drift {fmt(noise.get('drift'), '.2g')} nats, agreement "
            f"{fmt(noise.get('agreement'), '.3f')}. "
            f"{'Its log-probs are unchanged' if rule else 'A trial passes'} with drift &le; "
            f"{fmt(th.drift, '.3g')} nats and agreement &ge; "
            f"{fmt(th.agreement, '.3g')}. Checked: {len(checked)} trial(s); rejected: "
            f"{_e(', '.join(rejected) or 'none')}.</p>")


def _figure(fig: Any, div_id: str) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, config=CONFIG,
                       div_id=div_id)


def what_if_table(study: StudyOrSnapshot, slos: Sequence[Slo]) -> str:
    """The trials re-ranked under `slos` from their recorded steps (`whatif.rerank`)."""
    data = whatif.rerank(records(study), slos)
    head = "".join(f"<th>{_e(c)}</th>" for c in ("#", "tried because", "flags", "answer",
                                                 "steps with data"))
    rows = "".join(
        f"<tr><td>{t.number}</td><td>{_e(t.tried)}</td><td>{_e(_flags(t.flags))}"
        f"</td><td>{_e(t.text + ('' if t.quality_ok else ' (rejected by the guardrail)'))}"
        f"</td><td>{t.steps}</td></tr>" for t in data.trials)
    return f"<p>{_e(data.text())}</p><table><tr>{head}</tr>{rows}</table>"


def _interactivity(study: Snapshot, data: interactivity.Interactivity) -> str:
    """The definitions, then the chart; or, where neither trial has a capacity step, why."""
    if not any(c.points for c in data.curves):
        return f"<p class='note'>{_e('; '.join(data.lines()) or 'no capacity step')}.</p>"
    return ("<p>" + " ".join(map(_e, interactivity.DEFINITIONS)) + "</p>"
            + _figure(report.interactivity_figure(study), "interactivity"))


def cost_section(study: StudyOrSnapshot, price: cost.Price, load: float) -> str:
    """The winner beside the defaults at `load` req/s: replicas, cost, the saving."""
    winner = ranking.feasible_best(study)
    if winner is None:
        return ("<p class='note'>No single winner to size: no feasible trial yet, or a "
                "Pareto study (export --trial N --load R sizes one trial).</p>")
    side = cost.side_by_side(winner, ranking.reference_trial(study),
                             ranking.reference_name(study), price, load)
    head = "".join(f"<th>{_e(c)}</th>" for c in ("", "winner", side.reference_name))
    rows = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                   for row in side.rows)
    return (f"<p>Price: {_e(side.price_text)}. Each replica is sized at its capacity at SLO, "
            "the highest sustained request rate at which every SLO held: a load of R req/s "
            "needs R / capacity replicas, rounded up, and a million output tokens cost what a "
            "replica costs while it makes them at that rate.</p>"
            f"<table><tr>{head}</tr>{rows}</table><p>{_e(side.saving)}</p>")


def build(study: StudyOrSnapshot, what_if: Sequence[Slo] = (), *, load: float | None = None,
          gpu_hour: float | None = None, gpus: int | None = None) -> str:
    """The whole report as one HTML document (with `what_if`, a section re-ranking the
    trials under those SLOs; with `load`, one setting the winner beside the defaults at
    that load, priced by the scenario's cost or `gpu_hour`). The study is read once: every
    section works on that snapshot."""
    study = Snapshot.of(study)
    price = cost.price_of(ranking.stored_scenario(study), gpu_hour, gpus)
    imp = report.importances(study)
    chart = interactivity.of_study(study)
    sections: Sequence[tuple[str, str]] = [
        ("Pareto front", "<p>Each point is one configuration. Lower right is better: more "
         "throughput at lower latency; colour is the engine's peak memory. Stars and diamonds "
         "are vLLM's defaults and the named baselines; crosses missed an SLO or the quality "
         "guardrail; hollow circles were pruned mid-run and show their probe-phase figures."
         "</p>" + _figure(report.pareto_figure(study), "pareto")),
        (f"Throughput per {chart.per} against interactivity", _interactivity(study, chart)),
        ("Optimisation history", _figure(report.history_figure(study), "history")),
        ("Parameter importances",
         f"<p class='note'>{_e(imp)}</p>" if isinstance(imp, str)
         else _figure(report.importance_figure(study), "importances")),
        ("Parallel coordinates", "<p>Drag along an axis to select a range.</p>"
         + _figure(report.parallel_figure(study), "parallel")),
        ("Quality guardrail", _guardrail(study)
         + _figure(report.guardrail_figure(study), "guardrail")),
        *([("Speculative decoding", "<p>Each bar is one trial that speculated: the share "
            "of draft tokens the target model accepted during its workload, as the engine "
            "counted them; the label gives the tokens a verification step yielded on "
            "average (1 + accepted per draft).</p>"
            + _figure(report.speculation_figure(study), "speculation"))]
          if any(r.speculation for r in records(study)) else []),
        ("Engine start-up", "<p>Each bar is one engine start, from launch to the first "
         "completed request, split where the engine's log shows each phase ending. A warm "
         "start has already imported vLLM in its API server.</p>"
         + _figure(report.startup_figure(study), "startup")),
        ("Where the GPU time went", "<p>" + "<br>".join(
            _e(line) for line in GpuTime.of(records(study)).lines()) + "</p><p>The study's "
         "own clock: each worker's trials from the first start to the last end (a pause of "
         f"over {SESSION_GAP_S / 60:g} minutes, a study resumed later, left out). The first "
         "bar is the whole study, idle time between trials included; the others are its "
         "trials.</p>"
         + _figure(report.gpu_time_figure(study), "gputime")),
        *([("What if the SLO were " + ", ".join(map(str, what_if)),
            what_if_table(study, what_if))] if what_if else []),
        *([(f"Money and machines at {load:g} req/s", cost_section(study, price, load))]
          if load is not None else []),
        ("All trials", trials_table(study, price)),
    ]
    body = "".join(f"<section><h2>{_e(title)}</h2>{content}</section>"
                   for title, content in sections)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>autotune report: {_e(study.study_name)}</title><style>{CSS}</style>"
            # The whole plotly.js bundle, inlined: the report works with no network at all.
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>autotune report: study {_e(study.study_name)}</h1>"
            f"{_decision(study, price, load)}{_about(study)}"
            f"{body}</body></html>")


def write(study: StudyOrSnapshot, path: Path, what_if: Sequence[Slo] = (), *,
          load: float | None = None, gpu_hour: float | None = None,
          gpus: int | None = None) -> Path:
    try:
        path.write_text(build(study, what_if, load=load, gpu_hour=gpu_hour, gpus=gpus),
                        encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"report: cannot write {path}: {err.strerror or err}") from None
    return path
