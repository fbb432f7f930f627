"""One capacity step as a trial's record keeps it, and what a search's steps say at one rate.

The search offers each sustained step a rate (`StepRecord.rate`); over the step's steady
window the step records the arrivals per second it was offered and how many of them per
second the engine took into service (`window_offered_rps`, `window_achieved_rps`; a step
recorded before those fields gives them from its backlog record). A capacity is an
achieved rate: the mean of what the passing steps at the highest passing rate achieved
(`achieved_at`), and a failing rate counts by what its steps were offered (`offered_at`).
A step with no window (the burst, vLLM's client, records made before the steady window)
stands for its rate.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune._traces import Replay
from autotune.measure._steady import Backlog
from autotune.measure.bottleneck import Bottleneck
from autotune.stored import Stored


@dataclass(frozen=True)
class StepRecord(Stored):
    """One load level as the trial's record keeps it: what was offered, what came back,
    and whether the SLOs held. Steps recorded before the steady window and the attribution
    lack `whole` ... `latencies`; before the window's rates and the trace's replay, lack
    `window_offered_rps` ... `replayed`; before the arrival floor, `invalid`; before the
    per-GPU chart, `total_token_throughput`."""

    index: int = 0
    kind: str = ""  # burst | ceiling | expand | bisect | repeat | longer
    rate: float | None = None  # offered requests/s; None for the burst (everything at once)
    passed: bool = False
    achieved_rps: float = 0.0  # completed requests per second of the step
    output_throughput: float = 0.0
    violations: list[str] = field(default_factory=list)
    requests: int = 0
    figures: dict[str, float] = field(default_factory=dict)  # SLO metrics, preemptions
    idle_wait_s: float = 0.0
    duration_s: float = 0.0
    # Sustained steps are judged on their steady window (`figures`); `whole` has the same
    # figures over every request of the step, for comparison with a short step's view.
    whole: dict[str, float] = field(default_factory=dict)
    window_s: float | None = None  # the judged window's length (None: the whole step)
    backlog: Backlog | None = None  # None (stored `{}`): a burst, or no window
    bottleneck: Bottleneck | None = None  # None (stored `{}`): not attributed
    probes: dict[str, float | None] = field(default_factory=dict)  # what attribution read
    # Every latency figure of the judged window, by SLO key (`ttft_p95_ms`), so that a
    # study can be re-ranked under another SLO later (`autotune.results._whatif`).
    latencies: dict[str, float] = field(default_factory=dict)
    # Requests/s over the judged window: offered (the arrival schedule's) and achieved
    # (taken into service: arrivals less the queue's growth, `steady.Backlog`); a step
    # passes only when achieved keeps within `backlog_limit` of offered. `achieved_rps`
    # is the whole step's, its drain included: no figure to hold against the rate.
    window_offered_rps: float | None = None
    window_achieved_rps: float | None = None
    replayed: Replay | None = None  # a trace's step: which part of the trace it sent
    # Why the step is no measurement (its window held too few arrivals to tell whether the
    # engine kept pace, `steady.needed`): it neither passed nor failed. None: a valid step.
    invalid: str | None = None
    # Input and output tokens/s of the whole step, as `output_throughput` counts output
    # (`autotune.results.interactivity` reads it per GPU; None: recorded before it).
    total_token_throughput: float | None = None
    NESTED = {"replayed": Replay, "backlog": Backlog, "bottleneck": Bottleneck}
    EMPTY = ("backlog", "bottleneck")

    @property
    def load(self) -> float:
        """The request rate this step stands for (the burst: what it achieved)."""
        return self.rate if self.rate is not None else self.achieved_rps

    @property
    def sustained(self) -> bool:
        """A sustained step, not the burst (which has no steady state)."""
        return self.rate is not None and self.kind != "burst"

    @property
    def offered(self) -> float | None:
        """Requests/s its steady window was offered: as recorded, else from its backlog
        (the window's arrivals over its length); None without a window."""
        if self.window_offered_rps is not None:
            return self.window_offered_rps
        grew, seconds = self.backlog, self.window_s
        return grew.arrivals / seconds if grew is not None and grew.arrivals and seconds \
            else None

    @property
    def achieved(self) -> float | None:
        """Requests/s the engine achieved over its steady window: as recorded, else from
        its backlog (the arrivals less the queue's growth, over the window's length); None
        without a window."""
        if self.window_achieved_rps is not None:
            return self.window_achieved_rps
        grew, seconds = self.backlog, self.window_s
        return max(grew.arrivals - grew.growth, 0.0) / seconds \
            if grew is not None and grew.arrivals and seconds else None

    @property
    def capacity_rps(self) -> float:
        """The rate this step gives as a capacity: what its window achieved, else the rate
        it was offered (a step without a window)."""
        got = self.achieved
        return got if got is not None else self.load


def at_rate(steps: Sequence[StepRecord], rate: float | None) -> list[StepRecord]:
    """The valid sustained steps the search offered `rate`."""
    return [s for s in steps if s.sustained and s.rate == rate and s.invalid is None]


def achieved_at(steps: Sequence[StepRecord], rate: float) -> float:
    """The capacity `rate` stands for: the mean of what its passing steps achieved
    (`StepRecord.capacity_rps`), `rate` itself where none of them passed."""
    passed = [s.capacity_rps for s in at_rate(steps, rate) if s.passed]
    return statistics.fmean(passed) if passed else rate


def offered_at(steps: Sequence[StepRecord], rate: float) -> float:
    """What a failing `rate` was offered: the mean of its failing steps' windows'
    offered rates, `rate` itself where they recorded none."""
    got = [x for s in steps if s.sustained and s.rate == rate and not s.passed
           and (x := s.offered) is not None]
    return statistics.fmean(got) if got else rate


def spread_at(steps: Sequence[StepRecord], rate: float | None) -> float | None:
    """How far the passing steps at `rate` disagree: the relative standard deviation of
    what they achieved (of their output throughput where a step recorded no window);
    None with fewer than two."""
    passed = [s for s in at_rate(steps, rate) if s.passed]
    if len(passed) < 2:
        return None
    got = [s.achieved for s in passed]
    values = [float(x) for x in got if x is not None] if None not in got \
        else [s.output_throughput for s in passed]
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else None
