"""The capacity-at-SLO search itself, over any `measure` function: which rate to offer
next, when to stop, and what the search found (pure: no server, no clock).

Below saturation every sensible configuration shows the same throughput: the
arrival rate sets it. Launch flags separate near saturation, so a configuration
is scored by how much load it carries, found by search on one running engine:

1. a saturating burst (every request at once) measures the maximum request
   throughput R. It only sizes the search: a burst is over in a fraction of a
   second and is no steady state, so it never is the capacity;
2. sustained Poisson steps follow (`min_step_s`, 20 s by default), each judged on
   its steady window with no backlog growing (`autotune.measure._stepverdict`): R first
   (`ceiling`); x `expand_factor` (1.25) while steps pass (`expand`, up to
   `max_expand` x R, where the capacity is reported as a floor); halving while they
   fail; then bisection
   between the passing and the failing rate until (high - low) / high is within
   the tolerance or the step budget is spent;
3. the final rate is measured again (`repeats`), which gives the spread;
4. a capacity still too uncertain to rank by (`capacityrecord.TOO_UNCERTAIN`) gets up to
   `extra_steps` more, each `max_step_s` long: the bracket bisected while it is wider
   than the tolerance, else the capacity's rate measured again.

A step whose window held too few arrivals to judge (`StepRecord.invalid`) is measured
again at once with twice its requests, and its rate keeps that length; still too short,
it neither passes nor fails. The capacity
is what the engine achieved at the highest passing rate (`capacityrecord.measured`), not
the rate the search offered. The halving gives up below `min_rate_fraction` of R: if a
nearly idle engine misses the SLOs, no rate meets them and the capacity is 0. Each step
also records what limited the engine (`autotune.measure.bottleneck`). An `Anchor` ties a
search to capacities measured before (where it starts, how it moves, when it stops).
`plan` runs the search (`searchresult` keeps what it found);
`autotune.measure.serversearch` gives it steps on a server, `autotune.measure.vllmbench`
steps through vLLM's own client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune import _reasons as reasons
from autotune.measure.capacityrecord import TOO_UNCERTAIN, measured
from autotune.measure.searchresult import SearchResult, Step
from autotune.measure.steprecord import spread_at
from autotune.traffic import CapacitySpec

log = logging.getLogger("autotune")

BELOW_BEST = reasons.BELOW_BEST
TIED = reasons.TIED_WITH_BEST
# A search that starts at a capacity measured before moves by this factor from it: its
# steps stay around that capacity (a re-check, an ablation of the winner).
AROUND = 1.25
UNREACHABLE = reasons.UNREACHABLE
LONGER = "longer"  # a rate measured again with a longer step


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


# measure(kind, rate, index, seconds): one step; `seconds` None for the spec's own length.
Measure = Callable[[str, "float | None", int, "float | None"], Step]
StopRule = Callable[["float | None", "float | None"], "str | None"]
Take = Callable[[str, float, int, "float | None"], Step]


def next_rate(burst: float, low: float | None, high: float | None,
              factor: float = 2.0) -> tuple[str, float]:
    """The next rate to offer and its kind: the burst's rate first (`ceiling`), growing by
    `factor` while everything passes (`expand`), shrinking by it while everything fails,
    else the middle."""
    if high is None:
        return ("ceiling", burst) if low is None else ("expand", low * factor)
    return "bisect", high / factor if low is None else (low + high) / 2


def plan(measure: Measure, spec: CapacitySpec, anchor: Anchor | None = None) -> SearchResult:
    """Burst, then sustained steps from the burst's rate: up by `expand_factor` while they
    pass, halving while they fail, then bisect; then repeat the capacity; at most
    `spec.max_steps` steps, and `spec.extra_steps` more on a capacity too uncertain to
    rank by (`remeasure`).

    The burst (everything at once) only sizes the search: it is no steady state, so it
    never is the capacity. A 32-request burst that "passes" in 0.2 s says nothing about
    an hour at that rate. `measure(kind, rate, index, seconds)` runs one step; the anchor's
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
    take = _taker(measure, steps)
    if start is None or burst:
        steps.append(measure("burst", None, 0, None))
        if steps[0].achieved_rps <= 0:
            return SearchResult(0.0, None, None, steps, None, reasons.NO_SUCCESSFUL_REQUESTS)
    base = start if start is not None else steps[0].achieved_rps
    burst_rate = steps[0].achieved_rps if steps else None
    best: Step | None = None
    high: float | None = None
    reserve = spec.repeats - 1
    # A burst that misses the SLOs under the best trial's capacity cannot win (the
    # sustained rate of an engine rarely beats what it drains at full load).
    stopped = should_stop(None, burst_rate) if should_stop is not None and steps and \
        not steps[0].passed else None
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
            step = take(kind, rate, spec.max_steps, None)
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
            again.append(take("repeat", best.load, spec.max_steps, None))
        # A repeat too short to judge (no budget left to lengthen it) is no verdict: it
        # neither confirms the rate nor fails it.
        judged = [s for s in again if s.invalid is None]
        if all(s.passed for s in judged):
            break
        # The SLOs held only some of the time: that rate fails (they must hold at the
        # reported rate); the capacity is the next passing rate below, searched further
        # while steps remain.
        log.info("capacity: %.3g req/s met the SLOs in %d of %d runs, so it is not the "
                 "capacity; looking below it", best.load, sum(s.passed for s in judged),
                 len(judged))
        high = best.load
        shrink = spec.expand_factor  # that rate passed once: the capacity is close below
        best = _below(steps, high)
        if len(steps) >= spec.max_steps:
            break
    remeasured = 0
    if best is not None and stopped is None:
        best, high, remeasured = remeasure(take, spec, steps, best, high)
    low = best.load if best else None
    return SearchResult(low or 0.0, low, high, steps, best, stopped, spread_at(steps, low),
                  remeasured)


def remeasure(take: Take, spec: CapacitySpec, steps: list[Step], best: Step,
              high: float | None) -> tuple[Step | None, float | None, int]:
    """Up to `spec.extra_steps` more steps, each `max_step_s` long, while the capacity is
    too uncertain to rank by (`capacityrecord.TOO_UNCERTAIN`): the bracket bisected while
    it is wider than the tolerance (the budget ran out), else the capacity's rate measured
    again (its repeats disagree). A fail there is a failed repeat: the capacity moves
    below it. The best step, the failing rate and the steps spent."""
    first = len(steps)
    budget = first + spec.extra_steps
    found: Step | None = best
    while found is not None and len(steps) < budget and \
            (measured(steps, found.load, high).uncertainty or 0.0) > TOO_UNCERTAIN:
        low = found.load
        kind, rate = ("bisect", (low + high) / 2) if high is not None and \
            (high - low) / high > spec.tolerance else (LONGER, low)
        log.info("capacity: %.3g req/s is too uncertain to rank by; %s step at %.3g req/s",
                 low, kind, rate)
        step = take(kind, rate, budget, spec.max_step_s)
        if step.passed:
            found = step if rate > low else found
        elif rate > low:
            high = rate
        else:
            high = low
            found = _below(steps, low)
    return found, high, len(steps) - first


def _taker(measure: Measure, steps: list[Step]) -> Take:
    """`take(kind, rate, budget, seconds)`: one step added to `steps`; a step too short
    to judge (`StepRecord.invalid`) is measured again at once with twice its requests
    while the budget allows, and the last of them returned.

    A rate that needed the longer step keeps that length for the rest of the search: its
    repeat is measured as the run it repeats was, not at the length already shown too
    short (which, with no budget left to lengthen it, would leave the repeat no verdict)."""
    lengths: dict[float, float] = {}

    def take(kind: str, rate: float, budget: int, seconds: float | None) -> Step:
        step = measure(kind, rate, len(steps),
                       seconds if seconds is not None else lengths.get(rate))
        steps.append(step)
        if step.invalid is not None and len(steps) < budget:
            log.info("capacity step %d at %.3g req/s is too short to judge (%s); measuring "
                     "it again longer", step.index, rate, step.invalid)
            lengths[rate] = 2 * max(step.requests, 1) / rate
            step = measure(LONGER, rate, len(steps), lengths[rate])
            steps.append(step)
        return step

    return take


def _below(steps: Sequence[Step], rate: float) -> Step | None:
    """The highest passing search step below `rate` (not a repeat: its rate's first step
    stands for it), the capacity once `rate` failed."""
    below = [s for s in steps if s.passed and s.kind not in ("repeat", "burst")
             and s.load < rate]
    return max(below, key=lambda s: s.load, default=None)
