"""The capacity-at-SLO search itself, over any `measure` function: which rate to offer
next, when to stop, and what the search found (pure: no server, no clock).

Below saturation every sensible configuration shows the same throughput: the
arrival rate sets it. Launch flags separate near saturation, so a configuration
is scored by how much load it carries, found by search on one running engine:

1. a saturating burst (every request at once) measures the maximum request
   throughput R. It only sizes the search: a burst is over in a fraction of a
   second and is no steady state, so it never is the capacity;
2. sustained Poisson steps follow (`min_step_s`, 20 s by default), each judged on
   its steady window with no backlog growing (`autotune.measure.stepverdict`): R first
   (`ceiling`); x `expand_factor` (1.25) while steps pass (`expand`, up to
   `max_expand` x R, where the capacity is reported as a floor); halving while they
   fail; then bisection
   between the passing and the failing rate until (high - low) / high is within
   the tolerance or the step budget is spent;
3. the final rate is measured again (`repeats`), which gives the spread.

The halving gives up below `min_rate_fraction` of R: if a nearly idle engine misses
the SLOs, no rate meets them and the capacity is 0. Each step also records what
limited the engine (`autotune.measure.bottleneck`). An `Anchor` ties a search to
capacities measured before (where it starts, how it moves, when it stops). `plan` runs
the search; `autotune.measure.serversearch` gives it steps on a server,
`autotune.measure.vllmbench` steps through vLLM's own client.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from autotune import reasons
from autotune.measure import bottleneck, workloads
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.capacityrecord import CapacityRecord, StepRecord
from autotune.measure.summary import Summary
from autotune.traffic import CapacitySpec, WorkloadSpec

log = logging.getLogger("autotune")

BELOW_BEST = reasons.BELOW_BEST
TIED = reasons.TIED_WITH_BEST
# A search that starts at a capacity measured before moves by this factor from it: its
# steps stay around that capacity (a re-check, an ablation of the winner).
AROUND = 1.25
UNREACHABLE = reasons.UNREACHABLE


@dataclass(frozen=True)
class Step(StepRecord):
    """A step as the search measured it: the record's fields and the step's full workload
    summary, which the search reads (the best step's becomes the trial's summary) and the
    record leaves out."""

    summary: Summary = field(default_factory=Summary, repr=False, kw_only=True)

    def record(self) -> StepRecord:
        """The step without its full summary, for the trial's record."""
        return StepRecord(**{f.name: getattr(self, f.name) for f in fields(StepRecord)})


@dataclass
class Result:
    """The capacity (requests/s that met the SLOs; 0 if no step did) and its bracket."""

    request_rate: float
    low: float | None  # highest passing rate
    high: float | None  # lowest failing rate (None: every sustained rate passed)
    steps: list[Step]
    best: Step | None  # the passing step at `low` (its figures are the trial's)
    stopped: str | None = None
    spread: float | None = None  # relative std of output throughput over repeats

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


@dataclass(frozen=True)
class Anchor:
    """A trial's search tied to capacities measured before: it stops once its capacity
    lies below `floor` (the best trial's lower bound, `BELOW_BEST`) or its bracket inside
    [`floor`, `ceiling`] (the best's interval, `TIED`), and `start`, `factor`, `burst` and
    `ceiling` shape its steps (`plan`). The empty anchor is a search from its burst with
    no early stop."""

    floor: float | None = None
    start: float | None = None
    factor: float | None = None
    burst: bool | None = None
    ceiling: float | None = None

    def stop_rule(self) -> StopRule | None:
        """When `plan` stops early, as `rule(low, high)` -> a reason or None (None
        without a floor)."""
        floor, ceiling = self.floor, self.ceiling
        if not floor:
            return None

        def rule(low: float | None, high: float | None) -> str | None:
            if high is not None and high <= floor:
                return BELOW_BEST
            if ceiling is not None and low is not None and high is not None \
                    and low >= floor and high <= ceiling:
                return TIED
            return None

        return rule


Measure = Callable[[str, "float | None", int], Step]
StopRule = Callable[["float | None", "float | None"], "str | None"]


def next_rate(burst: float, low: float | None, high: float | None,
              factor: float = 2.0) -> tuple[str, float]:
    """The next rate to offer and its kind: the burst's rate first (`ceiling`), growing by
    `factor` while everything passes (`expand`), shrinking by it while everything fails,
    else the middle."""
    if high is None:
        return ("ceiling", burst) if low is None else ("expand", low * factor)
    return "bisect", high / factor if low is None else (low + high) / 2


def plan(measure: Measure, spec: CapacitySpec, anchor: Anchor | None = None) -> Result:
    """Burst, then sustained steps from the burst's rate: up by `expand_factor` while they
    pass, halving while they fail, then bisect; then repeat the capacity; at most
    `spec.max_steps` steps.

    The burst (everything at once) only sizes the search: it is no steady state, so it
    never is the capacity. A 32-request burst that "passes" in 0.2 s says nothing about
    an hour at that rate. `measure(kind, rate, index)` runs one step; the anchor's
    `stop_rule` may end the search early with a reason (the capacity is already below
    the best one's, or tied with it). With `repeats` > 1 the final rate is measured
    again; if the SLOs then fail, that rate counts as failing and the search goes on
    below it while steps remain.

    Rates grow by `spec.expand_factor` from a passing burst rate and halve from a failing
    one. With `anchor.start` (a capacity measured before) the first sustained step offers
    it instead, and `anchor.factor` (default: the expand factor) grows or shrinks the rate
    from there. A re-check spends its steps around the capacity it re-measures, with no
    burst; a study's trial (`burst=True`) keeps its burst, which stops a clear loser
    within seconds, and then runs its first sustained step at the best's lower bound.
    With `anchor.ceiling` (the best's upper bound) a rate that passes below it is
    followed by a step at the ceiling: a fail there brackets the trial inside the best's
    interval (a tie that the stop rule may end the search on: no further step could tell
    the two apart), a pass searches upward from it.
    """
    anchor = anchor or Anchor()
    should_stop = anchor.stop_rule()
    start, factor, burst, ceiling = anchor.start, anchor.factor, anchor.burst, anchor.ceiling
    steps: list[Step] = []
    if start is None or burst:
        steps = [measure("burst", None, 0)]
        if steps[0].achieved_rps <= 0:
            return Result(0.0, None, None, steps, None, reasons.NO_SUCCESSFUL_REQUESTS)
    base = start if start is not None else steps[0].achieved_rps
    burst_rate = steps[0].achieved_rps if steps else None
    best: Step | None = None
    high: float | None = None
    reserve = spec.repeats - 1
    # A burst that misses the SLOs under the best trial's capacity cannot win (the
    # sustained rate of an engine rarely beats what it drains at full load).
    stopped = should_stop(None, burst_rate) if should_stop is not None and steps and \
        not steps[0].passed else None
    spread: float | None = None
    shrink = 2.0  # from a failing rate down, until a rate passes
    while stopped is None:
        while len(steps) < spec.max_steps - (reserve if best else 0):
            low = best.load if best else None
            if low is not None and high is not None and (high - low) / high <= spec.tolerance:
                break
            if low is not None and high is None and low >= base * spec.max_expand:
                break  # the SLOs hold far above the burst's rate: report it as a floor
            kind, rate = next_rate(base, low, high,
                                   factor or (spec.expand_factor if high is None else shrink))
            if ceiling is not None and kind == "expand" and low is not None and low < ceiling:
                rate = ceiling  # beat the best's interval, or be proven tied with it
            if low is None and rate < base * spec.min_rate_fraction:
                stopped = UNREACHABLE  # not even a nearly idle engine meets the SLOs
                break
            step = measure(kind, rate, len(steps))
            steps.append(step)
            if step.passed:
                best = step
            else:
                high = rate
            if should_stop is not None and (stopped := should_stop(
                    best.load if best else None, high)):
                break
        if best is None or stopped is not None or reserve == 0:
            break
        again = [best]
        while len(again) < spec.repeats and len(steps) < spec.max_steps:
            steps.append(measure("repeat", best.rate, len(steps)))
            again.append(steps[-1])
        outs = [s.output_throughput for s in again]
        if len(outs) > 1 and statistics.fmean(outs) > 0:
            spread = statistics.stdev(outs) / statistics.fmean(outs)
        if all(s.passed for s in again):
            break
        # The SLOs held only some of the time: that rate fails (they must hold at the
        # reported rate); the capacity is the next passing rate below, searched further
        # while steps remain.
        log.info("capacity: %.3g req/s met the SLOs in %d of %d runs, so it is not the "
                 "capacity; looking below it", best.load, sum(s.passed for s in again),
                 len(again))
        high = best.load
        shrink = spec.expand_factor  # that rate passed once: the capacity is close below
        below = [s for s in steps if s.passed and s.kind not in ("repeat", "burst")
                 and s.load < high]
        best = max(below, key=lambda s: s.load, default=None)
        if len(steps) >= spec.max_steps:
            break
    low = best.load if best else None
    return Result(low or 0.0, low, high, steps, best, stopped, spread)


def record(result: Result, spec: WorkloadSpec) -> CapacityRecord:
    """The capacity as a trial keeps it: rates, throughputs at capacity, bracket, steps.

    Throughputs at capacity are the rate times the workload's mean tokens per request,
    so they do not depend on how quickly a short step's last requests drained.
    """
    best = result.best.summary if result.best else Summary()
    done = best.completed or 0
    out_per = (best.total_output_tokens or 0) / done if done else 0.0
    in_per = (best.total_input_tokens or 0) / done if done else 0.0
    rate = result.request_rate
    pace = workloads.pace(spec)
    return CapacityRecord(
        request_throughput=rate, output_throughput=rate * out_per,
        total_token_throughput=rate * (in_per + out_per), low=result.low, high=result.high,
        max_request_throughput=result.steps[0].achieved_rps
        if result.steps and result.steps[0].kind == "burst" else None,
        saturated=result.low is not None and result.high is None, bracket=result.bracket,
        spread=result.spread, uncertainty=result.uncertainty, stopped=result.stopped,
        tolerance=spec.capacity.tolerance, step_s=spec.capacity.min_step_s,
        window=[spec.capacity.ramp_fraction, 1 - spec.capacity.tail_fraction],
        bottleneck=knee(result.steps, result.low, limiting(result)),
        bottleneck_step=limiting(result).index,
        time_scale=rate / pace if pace else None,
        steps=tuple(s.record() for s in result.steps))


def limiting(result: Result) -> Step:
    """The step that shows what limits capacity: the gentlest failing step above it (the
    limit bites there), else the step at capacity, else the burst."""
    above = [s for s in result.steps if not s.passed and (result.low is None
                                                         or s.load > result.low)]
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


def summary_of(result: Result) -> Summary:
    """The figures the trial is scored on: the step at capacity, else the gentlest failure."""
    if result.best is not None:
        return result.best.summary
    tried = [s for s in result.steps if s.summary.keys]
    gentlest = min(tried, key=lambda s: s.load, default=None)
    return gentlest.summary if gentlest else Summary()
