"""The report's tables: every trial with its outcome, reason and figures (`trials_table`, the
page's last section), and plain rows as a table (`table_html`, the notebooks')."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from autotune._flags import Flags, FlagValue
from autotune._remeasurements import Validation
from autotune.config import Scenario
from autotune.measure import capacityrecord, capacitytext
from autotune.measure.capacityrecord import CapacityRecord
from autotune.results import cost, show, summary
from autotune.results.report._markup import Section, escape, flags_text
from autotune.results.report.points import axes
from autotune.results.show import fmt, outcome, reason
from autotune.tuning import ranking
from autotune.tuning.policy.objective import Measures
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.snapshot import StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord

Column = tuple[str, Callable[[TrialRecord], str], bool]  # header, cell, numeric
# The guardrail's verdict (a trial's `quality.passed`); "" where it did not run.
_VERDICTS: dict[object, str] = {True: "passed", False: "REJECTED"}


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


def flags_beyond(r: TrialRecord, fixed: Mapping[str, FlagValue],
                 scenario: Scenario | None = None) -> Flags:
    """The trial's flags (`summary.shown_flags`: a waiting trial's queued ones) less the
    scenario's fixed ones (those hold for every trial)."""
    return {k: v for k, v in summary.shown_flags(r, scenario).items() if fixed.get(k) != v}


def _m(r: TrialRecord) -> Measures:
    """The trial's measures; one without reads as not measured (NaN, shown as `-`)."""
    return r.measures or Measures()


def _q(r: TrialRecord) -> Quality:
    """The trial's quality verdict; one without reads as not checked (None, `-`)."""
    return r.quality or Quality()


def columns(study: StudyOrSnapshot, price: cost.Price | None = None) -> list[Column]:
    """The table's columns; capacity and validation only where some trial has them, and
    with a known `price`, each trial's cost per million output tokens at its capacity."""
    ax = axes(study)
    fixed = ranking.fixed_flags(study)
    trials = records(study)
    tied = summary.tied_with_best(study)
    top = ranking.feasible_best(study)
    scenario = ranking.stored_scenario(study)

    cols: list[Column] = [
        ("#", lambda r: str(r.number), True),
        ("tried because", lambda r: r.tried_because.text, False),
        ("flags beyond the fixed ones",
         lambda r: flags_text(flags_beyond(r, fixed, scenario)), False),
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
    head = "".join(f"<th>{escape(name)}</th>" for name, _, _ in cols)
    rows = []
    for r in records(study):
        cells = "".join(f"<td{' class=num' if num else ''}>{escape(cell(r))}</td>"
                        for _, cell, num in cols)
        rows.append(f"<tr class='{escape(outcome(r))}' data-trial='{r.number}'>{cells}</tr>")
    return (f"<table id='trials'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>")


def table_html(rows: Sequence[Mapping[str, object]]) -> str:
    """Plain rows (e.g. `sidebyside.best_vs_baseline` of several studies) as an HTML table."""
    keys = list(dict.fromkeys(k for row in rows for k in row))

    def cell(v: object) -> str:
        return fmt(v, ".4g") if isinstance(v, float) else ("-" if v is None else str(v))

    head = "".join(f"<th>{escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell(row.get(k)))}</td>" for k in keys)
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(study: StudyOrSnapshot, price: cost.Price) -> Section:
    return Section("All trials", trials_table(study, price))
