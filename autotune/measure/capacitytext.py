"""A capacity in words and tables for a terminal: the one line every view prints
(`describe`) and its one range (`span`), what the capacity was offered and achieved
(`achieved_text`), a step's name and rates for a log line, and the table of a search's
steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.measure.capacityrecord import CapacityRecord, bounds, unrepeated
from autotune.measure.steprecord import StepRecord


def describe(cap: CapacityRecord) -> str:
    """One line: `3.2 req/s (2.9-3.4, ±5.0 %)` (a floor: `(at least 2.9)`) or why there
    is no capacity."""
    if not cap.low:
        high = cap.high
        text = "no rate met the SLOs" + (f" (fails at {high:.3g} req/s)" if high else "")
        moved = unrepeated(cap)
        if moved:
            rate, passed, runs = moved[0]
            text += f"; unrepeatable: {rate:.3g} req/s met them in {passed} of {runs} steps"
        return text
    text = f"{cap.request_throughput:.3g} req/s ({span(*bounds(cap))}"
    text += f", ±{cap.uncertainty:.1%})" if cap.uncertainty else ")"
    if cap.time_scale:
        text += f", {cap.time_scale:.3g}x the trace's recorded pace"
    if cap.saturated:
        text += ", a floor: the SLOs held at every rate tried"
    if cap.stopped:
        text += f", stopped: {cap.stopped}"
    if cap.remeasured:
        text += f", measured again in {steps(cap.remeasured)}" + (
            ": still too uncertain to rank by" if cap.too_uncertain else "")
    return text


def span(low: float, high: float | None) -> str:
    """A capacity's interval (`capacityrecord.bounds`), the one range every view gives a
    capacity: `2.9-3.4`, or `at least 2.9` for a floor (open above)."""
    return f"at least {low:.3g}" if high is None else f"{low:.3g}-{high:.3g}"


def steps(n: int) -> str:
    """`1 more step`, `3 more steps`."""
    return f"{n} more step{'s' if n != 1 else ''}"


def achieved_text(cap: CapacityRecord) -> str | None:
    """Where the capacity's figure comes from: `achieved 18.3 req/s of 18.4 offered in the
    steady windows of steps 5, 6 (the search's rate 14.8 req/s)`, or that it is the rate
    offered where the steps kept no window; None without a capacity."""
    if not cap.low or not cap.rate:
        return None
    at = [s.index for s in cap.at_capacity if s.passed]
    where = f"step{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}"
    if cap.offered_rps is None or any(s.achieved is None for s in cap.at_capacity):
        return (f"{cap.request_throughput:.3g} req/s is the rate offered at {where}: these "
                "steps kept no steady window to measure what the engine achieved")
    return (f"achieved {cap.request_throughput:.3g} req/s of {cap.offered_rps:.3g} offered in "
            f"the steady windows of {where} (the search's rate {cap.rate:.3g} req/s)")


def step_name(index: int, kind: str, rate: float | None) -> str:
    """A step as a log line or a Ctrl-C names it: `capacity step 4 (bisect) at 5.1 req/s`,
    `capacity step 0 (burst)`."""
    return f"capacity step {index} ({kind})" + ("" if rate is None else f" at {rate:.3g} req/s")


def rates(step: StepRecord) -> str:
    """What a step offered and achieved, for a log line: `117 req/s offered, 86.4
    achieved` over its judged window, else `86.4 req/s` achieved (the burst, older steps)."""
    offered, achieved = step.offered, step.achieved
    if offered is None or achieved is None:
        return f"{step.achieved_rps:.3g} req/s"
    return f"{offered:.3g} req/s offered, {achieved:.3g} achieved"


def step_columns(cap: CapacityRecord, slo_keys: Sequence[str]) -> list[str]:
    """The headers of `step_rows`: a trace's steps add what each replayed."""
    traced = any(s.replayed for s in cap.steps)
    return ["step", "kind", "rate req/s", "offered req/s", "achieved req/s", "out tok/s",
            *slo_keys, "preempt", "backlog", "limit", *(["replayed"] if traced else []),
            "verdict"]


def step_rows(cap: CapacityRecord, slo_keys: Sequence[str]) -> list[list[str]]:
    """A table of the steps for a terminal (`step_columns`): step, kind, the search's rate,
    what the judged window was offered and achieved (requests/s; steps recorded before
    the window's rates give them from their backlog, those without a window the rate and
    the whole step's), SLO figures of the window, backlog growth, what limited the step,
    what a trace's step replayed, verdict (`invalid`: too few arrivals to judge)."""
    traced = any(s.replayed for s in cap.steps)
    rows = []
    for s in cap.steps:
        rate = "burst" if s.rate is None else f"{s.rate:.3g}"
        offered = rate if s.offered is None else f"{s.offered:.3g}"
        achieved = s.achieved_rps if s.achieved is None else s.achieved
        figs = [f"{s.figures.get(k, float('nan')):.1f}" for k in slo_keys]
        rows.append([str(s.index), s.kind, rate, offered, f"{achieved:.3g}",
                     f"{s.output_throughput:.1f}", *figs,
                     f"{s.figures.get('preemptions', 0):g}",
                     f"{s.backlog.share:+.0%}" if s.backlog else "-",
                     s.bottleneck.kind or "-" if s.bottleneck else "-",
                     *([s.replayed.short() if s.replayed else "-"] if traced else []),
                     "pass" if s.passed else "invalid" if s.invalid else "fail"])
    return rows


def slo_keys(cap: CapacityRecord) -> list[str]:
    """The SLO figures its steps were judged on (the first step's), for `step_rows`."""
    return [k for k in (cap.steps[0].figures if cap.steps else {}) if k.endswith("_ms")]
