"""A study read once into typed rows: what `show` and `tune`'s closing table print and what
`--json` writes.

Built from one `Snapshot` (`Summary.of`), so a study is read once however many ways it is
ranked; the printers read attributes, and mypy catches a renamed column. `as_json` goes
through `autotune.stored.json_data`, the one conversion to plain data: a row's fields under
their own names, nested records as objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune._flags import Flags, FlagValue
from autotune._remeasurements import Recheck, Validation
from autotune._slo import Slo
from autotune.config import Scenario
from autotune.measure import capacityrecord, capacitytext
from autotune.measure.speculation import Speculation
from autotune.results import _whatif as whatif
from autotune.results import cost
from autotune.results._decision import Decision, NoAnswer, no_answer, of_study
from autotune.results.gputime import GpuTime
from autotune.results.interactivity import Interactivity
from autotune.results.show import capacity_caveat, legend, outcome, reason
from autotune.stored import json_data
from autotune.tuning import ablation
from autotune.tuning import ranking as ranked
from autotune.tuning.policy import relief
from autotune.tuning.policy.objective import gain
from autotune.tuning.quality.accuracy import TaskScore
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.snapshot import Snapshot, records
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord


@dataclass(frozen=True)
class CapacityRow:
    """Capacity at SLO (the rate achieved), its interval and its uncertainty, with the words
    that describe it; `rate` and `offered_rps` are what the search offered there and what
    the capacity's windows were offered, `too_uncertain` whether it is too uncertain to
    rank by even after the steps spent on it (`remeasured`)."""

    request_throughput: float
    output_throughput: float | None
    low: float | None
    high: float | None
    uncertainty: float | None
    saturated: bool
    stopped: str | None
    interval: tuple[float, float]
    steps: int
    text: str
    bottleneck: str | None
    caveat: str | None
    rate: float | None = None
    offered_rps: float | None = None
    too_uncertain: bool = False
    remeasured: int = 0

    @property
    def span(self) -> str:
        """The interval in words, as `text` gives it (`capacitytext.span`)."""
        lo, hi = self.interval
        return capacitytext.span(lo, None if self.low and self.high is None else hi)

    @classmethod
    def of(cls, r: TrialRecord) -> CapacityRow | None:
        cap = r.capacity
        if cap is None:
            return None
        return cls(cap.request_throughput, cap.output_throughput, cap.low, cap.high,
                   cap.uncertainty, cap.saturated, cap.stopped, capacityrecord.interval(cap),
                   len(cap.steps), capacitytext.describe(cap), capacityrecord.limit_text(cap),
                   capacity_caveat(cap), cap.rate, cap.offered_rps, cap.too_uncertain,
                   cap.remeasured)


@dataclass(frozen=True)
class QualityCell:
    """The guardrail's verdict as the table shows it (`cell`) and in words."""

    passed: bool | None
    drift: float | None
    agreement: float | None
    verdict: str | None
    cell: str
    words: str
    tasks: TaskScore | None

    @classmethod
    def of(cls, q: Quality | None) -> QualityCell:
        q = q or Quality()
        return cls(q.passed, q.drift, q.agreement, q.verdict, q.short(), q.words(), q.tasks)


@dataclass
class TrialRow:
    """One trial as the table shows it (`flags` without the scenario's fixed ones)."""

    number: int
    name: str
    tried_because: str
    tried: str
    outcome: str
    reason: str
    flags: Flags
    throughput: float | None
    latency_ms: float | None
    memory_mib: float | None
    values: list[float] | None
    gain: float | None
    startup_s: float | None
    capacity: CapacityRow | None
    bottleneck: str | None
    detail: str | None
    quality: QualityCell
    speculation: Speculation | None
    validation: Validation | None  # without the per-run figures (`headline`)
    validation_vllm: Recheck | None
    tied_with_best: int | None = None  # the best's number, where the gain is within noise

    @classmethod
    def of(cls, r: TrialRecord, fixed: Mapping[str, FlagValue] | None = None,
           scenario: Scenario | None = None) -> TrialRow:
        """The row of `r` (its flags as `shown_flags` gives them)."""
        m = r.measures
        flags = shown_flags(r, scenario)
        return cls(r.number, r.name, r.tried_because.text, r.tried_because.short, outcome(r),
                   reason(r), {k: v for k, v in flags.items() if k not in (fixed or {})},
                   m.throughput if m else None, m.latency_ms if m else None,
                   m.memory_mib if m else None,
                   list(r.values) if r.values is not None else None, r.gain, r.startup_s,
                   CapacityRow.of(r), r.bottleneck.text if r.bottleneck else None, r.detail,
                   QualityCell.of(r.quality), _whole(r.speculation),
                   r.validation.headline() if r.validation else None,
                   r.validation_vllm.headline() if r.validation_vllm else None)


def shown_flags(r: TrialRecord, scenario: Scenario | None) -> Flags:
    """The flags trial `r` ran with or, while it waits, those it is queued with (read
    through `scenario` where they are Optuna parameters): a queued relief move is not
    vLLM's defaults, whatever its empty record says."""
    if r.state != TrialState.WAITING:
        return r.flags
    return relief.planned_flags(r, scenario) or {}


def _whole(spec: Speculation | None) -> Speculation | None:
    """`spec` with every figure, as made now (`read` None): the row shows the same keys for
    a record of any version (one written before `generated_tokens` has it as 0)."""
    return dataclasses.replace(spec, read=None) if spec is not None else None


@dataclass(frozen=True)
class RankRow(CapacityRow):
    """A feasible capacity-mode trial in the ranking: its capacity, whether it is among the
    trials the winner was chosen from (`tied`: the study cannot separate them; the winner
    too, where it has such ties), how many flags it overrides and, with a known price, its
    cost per million output tokens."""

    number: int = 0
    name: str = ""
    overrides: int = 0
    tied: bool = False
    per_million: float | None = None
    currency: str | None = None


def ranking(standing: ranked.Standing, defaults: Mapping[str, FlagValue],
            price: cost.Price | None = None) -> list[RankRow]:
    """Feasible capacity-mode trials in the order of the study's rule (`ranked.standing`:
    the winner first, the decision's trial); `tied` marks the winner and the trials it
    was chosen from, and `overrides` counts flags set to other than `defaults` (vLLM's
    effective defaults and the scenario's fixed flags). A copy of a trial (`same as #N`)
    is its twin's row."""
    group = standing.tied_numbers
    if group and standing.order:
        group |= {standing.order[0].number}
    priced = price is not None and price.known
    out = []
    for r in standing.order:
        row = CapacityRow.of(r)
        if row is None or not row.low or r.duplicate_of is not None:
            continue
        out.append(RankRow(**{f.name: getattr(row, f.name) for f in dataclasses.fields(row)},
                           number=r.number, name=r.name,
                           overrides=ranked.overrides(r, defaults), tied=r.number in group,
                           per_million=cost.trial_cost(r, price).per_million
                           if priced and price else None,
                           currency=price.currency if priced and price else None))
    return out


@dataclass(frozen=True)
class MemoryModel:
    """How well the KV-capacity prediction matched what the engines reported."""

    trials: int
    median_error: float | None
    max_abs_error: float | None
    not_launched: int

    @classmethod
    def of(cls, trials: Sequence[TrialRecord]) -> MemoryModel:
        launched = [r for r in trials if r.duplicate_of is None]
        errors = sorted(r.memory_estimate.kv_capacity_tokens / r.kv_capacity_reported - 1
                        for r in launched
                        if r.memory_estimate and r.memory_estimate.kv_capacity_tokens
                        and r.kv_capacity_reported)
        return cls(len(errors), errors[len(errors) // 2] if errors else None,
                   max((abs(e) for e in errors), default=None),
                   sum(1 for r in launched if r.launched is False))


@dataclass
class Summary:
    """Every trial, the baseline, and the best feasible trial (one objective) or the
    feasible Pareto set; the capacity ranking; where the GPU time went; throughput per GPU
    against interactivity at the decision's and the defaults' steps; with a load, the
    winner priced beside the defaults; with what-if SLOs, the trials re-ranked from their
    recorded steps."""

    study: str
    directions: list[str]
    trials: list[TrialRow]
    baseline: TrialRow | None
    memory_model: MemoryModel
    ranking: list[RankRow]
    price: cost.Price
    fixed_flags: Flags
    reasons: dict[str, str]
    best: TrialRow | None = None
    best_changes: Flags | None = None  # what the best changes from vLLM's defaults
    best_left_out: str | None = None  # what it sets to vLLM's effective defaults
    ceiling: str | None = None
    best_gain: float | None = None
    gain_over: str | None = None
    pareto: list[TrialRow] | None = None
    explanation: ablation.Explanation | None = None
    explanation_lines: list[str] = field(default_factory=list)
    load: float | None = None  # the load `cost` sizes replicas for, where one was asked
    cost: cost.SideBySide | None = None
    what_if: whatif.Rerank | None = None
    # What to launch (one objective) or why the study has no answer (`decision`).
    decision: Decision | None = None
    no_answer: NoAnswer | None = None
    # Where the study's GPU time went (`autotune.results.gputime`).
    gpu_time: GpuTime | None = None
    # Throughput per GPU against interactivity at the capacity steps of the decision and
    # vLLM's defaults (`autotune.results.interactivity`).
    interactivity: Interactivity | None = None

    @property
    def weighted(self) -> bool:
        return len(self.directions) == 1

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON data (`--json`); a section that was not asked for (no load,
        no what-if SLOs) or does not apply (`pareto` of one objective, `best` of several) is
        absent, not null."""
        out = json_data(self)
        absent = ["pareto"] if self.weighted else [
            "best", "best_changes", "best_left_out", "ceiling", "best_gain", "gain_over",
            "decision"]
        absent += ["no_answer"] if self.no_answer is None else []
        absent += ["load", "cost"] if self.load is None else []
        absent += ["what_if"] if self.what_if is None else []
        return {k: v for k, v in out.items() if k not in absent}

    @classmethod
    def of(cls, study: optuna.Study, what_if: Sequence[Slo] = (), *,
           load: float | None = None, gpu_hour: float | None = None,
           gpus: int | None = None) -> Summary:
        """Read `study` once. The price is the scenario's `cost`, or `gpu_hour` and `gpus`;
        with `load` (req/s), `cost` sets the winner beside the defaults: replicas for that
        load and what they cost."""
        snap = Snapshot.of(study)  # read once, ranked several ways below
        scenario = ranked.stored_scenario(snap)
        price = cost.price_of(scenario, gpu_hour, gpus)
        trials = records(snap)
        fixed = ranked.fixed_flags(snap)
        rows = [TrialRow.of(r, fixed, scenario) for r in trials]
        effective = ranked.effective_defaults(snap)
        defaults = {**effective.values, **fixed}  # `ranked.not_overrides`, read once
        standing = ranked.standing(snap)  # the one rule: the decision, the table, the ties
        best = standing.winner  # None in a Pareto study: no ties with a best either
        tied = standing.tied_numbers if best is not None else frozenset()
        for row in rows:  # a gain within noise of the best's is a tie, not a loss or a win
            row.tied_with_best = best.number if best and row.number in tied else None
        explained = ablation.latest(snap)  # which of the winner's flags carry its gain
        out = cls(study.study_name, [d.name.lower() for d in study.directions], rows,
                  next((r for r in rows if r.name == DEFAULTS and r.outcome != "pruned"), None),
                  MemoryModel.of(trials), ranking(standing, defaults, price), price, fixed,
                  legend(trials), explanation=explained,
                  explanation_lines=explained.lines() if explained else [], load=load,
                  gpu_time=GpuTime.of(trials))
        feasible = [r for r in trials if r.feasible]
        if out.weighted:
            if best is not None:  # what the winner changes, against vLLM's effective defaults
                out.best = next(r for r in rows if r.number == best.number)
                own = {k: v for k, v in best.flags.items() if k not in fixed}
                out.best_changes = effective.overrides(own)
                out.best_left_out = effective.words(own)
                out.best_gain = gain(ranked.objective_value(best))
            out.ceiling = relief.ceiling(best)
            out.gain_over = ranked.reference_name(snap)
            out.decision, out.no_answer = of_study(snap, price, load)
        else:
            front = {t.number for t in study.best_trials}  # feasible and non-dominated
            out.pareto = [r for r in rows if r.number in front
                          and any(f.number == r.number for f in feasible)]
            if not out.pareto:
                out.no_answer = no_answer(trials)
        reference = ranked.reference_trial(snap)
        out.interactivity = Interactivity.of(trials, out.decision.trial if out.decision else None,
                                             reference.number if reference else None)
        if load is not None:
            out.cost = cost.side_by_side(best, ranked.reference_trial(snap),
                                         ranked.reference_name(snap), price, load) \
                if best else None
        if what_if:
            out.what_if = whatif.rerank(trials, what_if)
        return out


def tied_with_best(study: optuna.Study | Snapshot) -> set[int]:
    """Trials the study cannot tell apart from its best (`ranked.standing`: those the
    winner was chosen from), the best itself left out: their gains over the defaults differ
    by noise, not by configuration."""
    found = ranked.standing(study)
    return set(found.tied_numbers) if found.winner is not None else set()
