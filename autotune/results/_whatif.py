"""What-if SLOs: re-rank a study under an SLO it did not run with, from its recorded steps.

A capacity search keeps every sustained step's rate, its verdict and the latency figures of
its steady window (`Step.latencies`; studies made before kept only the study's own SLO
figures). Under another SLO each step passes or fails again, without a GPU, and each trial's
answer is one of:

- covered: a rate that passed and a higher one that failed under the new SLO; the capacity is
  what the engine achieved at the highest passing rate below the lowest failing one (its
  steps' steady windows, as `show` gives a capacity), and the failing rate counts by what
  its steps were offered;
- at least N req/s: every step with figures passed, so the knee lies above the steps tried;
- at most N req/s: every step failed, so the capacity is below the lowest rate tried;
- no data: no step recorded the figure (the study measured another metric, or the trial has
  no capacity search).

What a step failed on besides latency (a growing backlog, failed requests) still fails it:
those do not depend on the SLO. The steps were placed to find the knee of the study's own
SLO, so a stricter or looser SLO is often answered only as a bound; the answer says so
instead of guessing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from optuna.trial import TrialState

from autotune._flags import Flags
from autotune._slo import Slo
from autotune.measure.steprecord import StepRecord
from autotune.tuning.records.trialrecord import TrialRecord

COVERED, AT_LEAST, AT_MOST, NO_DATA = "covered", "at_least", "at_most", "no_data"


@dataclass(frozen=True)
class Answer:
    """One trial under the new SLO: how much is known, and the rates that say it."""

    EXTRA: ClassVar[tuple[str, ...]] = ("text",)

    number: int
    status: str
    passed: float | None  # achieved at the highest passing rate below the lowest failing one
    failed: float | None  # offered at the lowest failing rate
    steps: int  # sustained steps that had the figures
    quality_ok: bool = True  # the guardrail did not reject it (the SLO cannot change that)
    name: str = ""
    tried: str = ""  # why it ran, in a word (`TriedBecause.short`)
    flags: Flags = field(default_factory=dict)

    @property
    def low(self) -> float:
        """What the trial is known to carry (0 where nothing passed)."""
        return self.passed or 0.0

    @property
    def text(self) -> str:
        if self.status == COVERED:
            return f"{self.passed:.3g} req/s (passes {self.passed:.3g}, fails {self.failed:.3g})"
        if self.status == AT_LEAST:
            return f"at least {self.passed:.3g} req/s (every step tried passed)"
        if self.status == AT_MOST:
            return f"at most {self.failed:.3g} req/s (every step tried failed)"
        return "no data: no step recorded these figures"


@dataclass(frozen=True)
class Counts:
    """How many trials the recorded steps answer, and how."""

    covered: int
    at_least: int
    at_most: int
    no_data: int


@dataclass(frozen=True)
class Rerank:
    """The trials ranked under other SLOs, the pick, and the trials the steps cannot rank
    below it (`contenders`: their capacity may lie above the pick's passing rate)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("best_text",)

    slos: dict[str, float]
    trials: list[Answer]
    best: int | None
    contenders: list[int]
    counts: Counts

    @property
    def best_text(self) -> str | None:
        pick = next((a for a in self.trials if a.number == self.best), None)
        return pick.text if pick is not None else None

    def text(self) -> str:
        """One sentence: the pick under the new SLO, and what the steps cannot say."""
        c = self.counts
        slo = ", ".join(f"{k} <= {v:g}" for k, v in self.slos.items())
        pick = f"#{self.best} carries {self.best_text}" if self.best is not None \
            else "no trial is known to meet it"
        rivals = f"; the steps cannot rank #{', #'.join(map(str, self.contenders))} below it" \
            if self.contenders else ""
        return (f"Under {slo}, from the recorded steps only: {pick}{rivals}. {c.covered} "
                f"trial(s) answered, {c.at_least} only as a lower bound, {c.at_most} only "
                f"as an upper bound, {c.no_data} without data.")


def _latency_broken(violation: str) -> bool:
    """An SLO violation (`ttft_p95_ms 812.0>500`), which the new SLO replaces."""
    return violation.split(" ", 1)[0].endswith("_ms")


def answer(rec: TrialRecord, slos: Sequence[Slo]) -> Answer:
    """Trial `rec`'s capacity under `slos`, from its recorded sustained steps."""
    quality_ok = rec.quality is None or rec.quality.passed is not False
    rows: list[tuple[float, bool, StepRecord]] = []
    for step in rec.capacity.steps if rec.capacity else ():
        if step.rate is None or step.invalid:
            continue  # the burst has no steady state, a step too short no verdict
        figures = {**(step.figures or {}), **(step.latencies or {})}
        if any(s.key not in figures for s in slos):
            continue
        other = [v for v in step.violations or [] if not _latency_broken(v)]
        rows.append((float(step.rate),
                     not other and all(s.met(figures[s.key]) for s in slos), step))
    about = (rec.name, rec.tried_because.short, rec.flags)
    if not rows:
        return Answer(rec.number, NO_DATA, None, None, 0, quality_ok, *about)
    fails = [rate for rate, ok, _ in rows if not ok]
    first_fail = min(fails) if fails else None
    passes = [rate for rate, ok, _ in rows if ok and (first_fail is None or rate < first_fail)]
    failed = None if first_fail is None else statistics.fmean(
        s.offered or rate for rate, ok, s in rows if not ok and rate == first_fail)
    if passes:
        top = max(passes)
        passed = statistics.fmean(s.capacity_rps for rate, ok, s in rows if ok and rate == top)
        return Answer(rec.number, AT_LEAST if failed is None else COVERED, passed, failed,
                      len(rows), quality_ok, *about)
    return Answer(rec.number, AT_MOST, None, failed, len(rows), quality_ok, *about)


def rerank(trials: Sequence[TrialRecord], slos: Sequence[Slo]) -> Rerank:
    """Every trial that ran a capacity search, ranked by what it is known to carry under
    `slos` (covered and at-least answers by their passing rate), with the pick and how many
    trials the recorded steps answer only as a bound or not at all."""
    ran = [r for r in trials if r.capacity and r.duplicate_of is None
           and r.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    answers = [answer(r, slos) for r in ran]
    order = {COVERED: 0, AT_LEAST: 0, AT_MOST: 1, NO_DATA: 2}
    answers.sort(key=lambda a: (not a.quality_ok, order[a.status], -a.low, a.number))
    usable = [a for a in answers if a.quality_ok and a.status in (COVERED, AT_LEAST)]
    best = usable[0] if usable else None
    return Rerank(
        {s.key: s.limit_ms for s in slos}, answers, best.number if best else None,
        [a.number for a in usable if best is not None and a is not best
         and (a.failed is None or a.failed > best.low)],
        Counts(*(sum(1 for a in answers if a.status == s)
                 for s in (COVERED, AT_LEAST, AT_MOST, NO_DATA))))
