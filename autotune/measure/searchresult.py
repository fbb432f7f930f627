"""What a capacity search found, and the record a trial keeps of it.

`Step` is a step as the search measured it (a `StepRecord` with the step's full summary),
`SearchResult` the search's own view (`searchplan.plan`: the rates it offered); `record` turns it
into the `CapacityRecord` a trial keeps (the rate the engine achieved at capacity, the
bracket, what limited it), `knee` and `limiting` read what limited it, `summary_of` gives
the figures the trial is scored on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from autotune.measure import bottleneck, workloads
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.capacityrecord import CapacityRecord, measured
from autotune.measure.measurement import Measurement
from autotune.measure.steprecord import StepRecord
from autotune.traffic import WorkloadSpec


@dataclass(frozen=True)
class Step(StepRecord):
    """A step as the search measured it: the record's fields and the step's full workload
    summary, which the search reads (the best step's becomes the trial's summary) and the
    record leaves out."""

    summary: Measurement = field(default_factory=Measurement, repr=False, kw_only=True)

    def record(self) -> StepRecord:
        """The step without its full summary, for the trial's record."""
        return StepRecord(**{f.name: getattr(self, f.name) for f in fields(StepRecord)})


@dataclass
class SearchResult:
    """The search's own view of what it found: the highest passing rate it offered (0 if
    no step passed) and its bracket of offered rates; `record` turns it into the rates the
    engine achieved."""

    request_rate: float
    low: float | None  # highest passing rate
    high: float | None  # lowest failing rate (None: every sustained rate passed)
    steps: list[Step]
    best: Step | None  # the passing step at `low` (its figures are the trial's)
    stopped: str | None = None
    spread: float | None = None  # the passing steps' at `low` (`steprecord.spread_at`)
    remeasured: int = 0  # steps spent beyond `max_steps` on a capacity too uncertain

    @property
    def bracket(self) -> float | None:
        """(high - low) / high, the bisection's relative width; 0 when saturated."""
        if self.low is None:
            return None
        if self.high is None:
            return 0.0
        return (self.high - self.low) / self.high

    @property
    def uncertainty(self) -> float | None:
        """Relative uncertainty of the capacity: the bracket or the repeat spread."""
        if self.bracket is None:
            return None
        return max(self.bracket, self.spread or 0.0)


def record(result: SearchResult, spec: WorkloadSpec) -> CapacityRecord:
    """The capacity as a trial keeps it: the rate achieved at capacity and the bracket
    (`capacityrecord.measured`), throughputs at capacity, what limited it, steps.

    Throughputs at capacity are the capacity times the workload's mean tokens per
    request, so they do not depend on how quickly a short step's last requests drained.
    A trace's time scale is the capacity over the trace's own pace.
    """
    best = result.best.summary if result.best else Measurement()
    done = best.completed or 0
    out_per = (best.total_output_tokens or 0) / done if done else 0.0
    in_per = (best.total_input_tokens or 0) / done if done else 0.0
    found = measured(result.steps, result.low, result.high)
    rate = found.capacity
    pace = workloads.pace(spec)
    return CapacityRecord(
        request_throughput=rate, output_throughput=rate * out_per,
        total_token_throughput=rate * (in_per + out_per), low=found.low, high=found.high,
        max_request_throughput=result.steps[0].achieved_rps
        if result.steps and result.steps[0].kind == "burst" else None,
        saturated=result.low is not None and result.high is None, bracket=found.bracket,
        spread=found.spread, uncertainty=found.uncertainty, stopped=result.stopped,
        tolerance=spec.capacity.tolerance, step_s=spec.capacity.min_step_s,
        window=[spec.capacity.ramp_fraction, 1 - spec.capacity.tail_fraction],
        bottleneck=knee(result.steps, result.low, limiting(result)),
        bottleneck_step=limiting(result).index,
        time_scale=rate / pace if pace else None, rate=result.low, offered_rps=found.offered,
        remeasured=result.remeasured, steps=tuple(s.record() for s in result.steps))


def limiting(result: SearchResult) -> Step:
    """The step that shows what limits capacity: the gentlest failing step above it (the
    limit bites there), else the step at capacity, else the burst."""
    above = [s for s in result.steps if not s.passed and s.invalid is None
             and (result.low is None or s.load > result.low)]
    failing = min(above, key=lambda s: s.load, default=None)
    return failing or result.best or result.steps[0]  # a search always has a step


def knee(steps: Sequence[StepRecord], low: float | None, limit: StepRecord
         ) -> Bottleneck | None:
    """What limited the capacity: by contrast between the steps that
    passed at capacity and the gentlest failing step above it (`bottleneck.across`), else
    that step's own reading."""
    if not limit.passed and low:
        found = bottleneck.across([s.probes for s in steps if s.passed and s.load == low],
                                  limit.probes)
        if found is not None:
            return found
    return limit.bottleneck


def summary_of(result: SearchResult) -> Measurement:
    """The figures the trial is scored on: the step at capacity, else the gentlest failure."""
    if result.best is not None:
        return result.best.summary
    tried = [s for s in result.steps if s.summary.keys]
    gentlest = min(tried, key=lambda s: s.load, default=None)
    return gentlest.summary if gentlest else Measurement()
