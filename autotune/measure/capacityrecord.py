"""The capacity search as a trial's record keeps it, and what the records say together.

`StepRecord` is one load level, `CapacityRecord` the whole search (its rates, bracket,
throughputs at capacity, what limited it and every step), both `Stored`: any record
version reads, and writes back exactly what was stored. `interval`, `bounds`, `tied`,
`ratio`, `unrepeated` and `suspects` compare and read records; nothing here measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from autotune.measure import bottleneck
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.steady import Backlog
from autotune.stored import Stored
from autotune.traces import Replay


@dataclass(frozen=True)
class StepRecord(Stored):
    """One load level as the trial's record keeps it: what was offered, what came back,
    and whether the SLOs held. Steps recorded before the steady window and the attribution
    lack `whole` ... `latencies`; before the window's rates and the trace's replay, lack
    `window_offered_rps` ... `replayed`; before the per-GPU chart, `total_token_throughput`."""

    index: int = 0
    kind: str = ""  # burst | ceiling | expand | bisect | repeat
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
    # study can be re-ranked under another SLO later (`autotune.results.whatif`).
    latencies: dict[str, float] = field(default_factory=dict)
    # Requests/s over the judged window: offered (the arrival schedule's) and achieved
    # (taken into service: arrivals less the queue's growth, `steady.Backlog`); a step
    # passes only when achieved keeps within `backlog_limit` of offered. `achieved_rps`
    # is the whole step's, its drain included: no figure to hold against the rate.
    window_offered_rps: float | None = None
    window_achieved_rps: float | None = None
    replayed: Replay | None = None  # a trace's step: which part of the trace it sent
    # Input and output tokens/s of the whole step, as `output_throughput` counts output
    # (`autotune.results.interactivity` reads it per GPU; None: recorded before it).
    total_token_throughput: float | None = None
    NESTED = {"replayed": Replay, "backlog": Backlog, "bottleneck": Bottleneck}
    EMPTY = ("backlog", "bottleneck")

    @property
    def load(self) -> float:
        """The request rate this step stands for (the burst: what it achieved)."""
        return self.rate if self.rate is not None else self.achieved_rps


@dataclass(frozen=True)
class CapacityRecord(Stored):
    """The capacity search as a trial's record keeps it (`searchplan.record`): rates,
    throughputs at capacity, bracket, what limited it and every step. Records made before
    the steady window lack `step_s` ... `bottleneck_step`; vLLM's client's adds keys of its
    own."""

    request_throughput: float = 0.0
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    low: float | None = None
    high: float | None = None
    max_request_throughput: float | None = None
    saturated: bool = False
    bracket: float | None = None
    spread: float | None = None
    uncertainty: float | None = None
    stopped: str | None = None
    tolerance: float | None = None
    step_s: float | None = None
    window: list[float] | None = None
    bottleneck: Bottleneck | None = None
    bottleneck_step: int | None = None
    # A trace's capacity as a pace: how many times faster than recorded it was served
    # (`request_throughput` is this times the trace's mean rate). None for other workloads.
    time_scale: float | None = None
    steps: tuple[StepRecord, ...] = ()
    NESTED = {"steps": StepRecord, "bottleneck": Bottleneck}

    @property
    def limit(self) -> Bottleneck | None:
        """What limited the capacity (None for records made before attribution)."""
        found = self.bottleneck
        return found if found is not None and found.kind else None

    @property
    def limiting_step(self) -> StepRecord | None:
        """The step that named the bottleneck, if recorded."""
        index = self.bottleneck_step
        return self.steps[index] if index is not None and index < len(self.steps) else None


def suspects(cap: CapacityRecord) -> list[str]:
    """The resources with evidence against them at the record's knee, best supported
    first (`bottleneck.suspects`); the recorded limit always first."""
    limit = cap.limiting_step
    named = [cap.limit.kind] if cap.limit is not None else []
    if limit is None or limit.passed or not cap.low:
        return named
    found = bottleneck.suspects([s.probes for s in cap.steps if s.passed and s.load == cap.low],
                                limit.probes)
    return named + [k for k in found if k not in named]


def unrepeated(cap: CapacityRecord) -> list[tuple[float, int, int]]:
    """Rates whose SLOs held in some of their sustained steps and not in others, as
    (rate, steps passed, steps): the search could not repeat its own result there (the
    engine's speed moved, or the SLO sits inside the noise), so it is no figure to rank
    on."""
    runs: dict[float, list[bool]] = {}
    for s in cap.steps:
        if s.rate is not None and s.kind != "burst":
            runs.setdefault(s.rate, []).append(s.passed)
    return [(rate, sum(got), len(got)) for rate, got in runs.items() if 0 < sum(got) < len(got)]


def interval(cap: CapacityRecord) -> tuple[float, float]:
    """Where the true capacity lies (requests/s): the bracket widened by the spread."""
    low = cap.low or 0.0
    high = cap.high if cap.high is not None else low
    spread = cap.spread or 0.0
    return low * (1 - spread), high * (1 + spread)


def bounds(cap: CapacityRecord) -> tuple[float, float | None]:
    """`interval` for a comparison: open above (None) for a floor. A search whose every
    sustained rate met the SLOs never found where they break, so its capacity may lie
    anywhere above its lower bound; two floors cannot be ranked by their last rates."""
    low, high = interval(cap)
    return low, None if cap.low and cap.high is None else high


def tied(a: CapacityRecord, b: CapacityRecord) -> bool:
    """Capacities whose uncertainty intervals overlap cannot be told apart (a floor's is
    open above, `bounds`)."""
    (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
    return (bhi is None or alo <= bhi) and (ahi is None or blo <= ahi)


@dataclass(frozen=True)
class Ratio:
    """One capacity over another (a configuration's over vLLM's defaults'): the ratio of the
    two and the interval their intervals allow (low over high, high over low; `high` None
    where the configuration's capacity is a floor, `low` 0 where the reference's is); its
    verdict is written beside them in JSON (`EXTRA`)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("verdict",)

    ratio: float
    low: float
    high: float | None
    reference_rps: float

    @property
    def verdict(self) -> str:
        """`gain`, `loss` or `within noise`: a gain only when the interval excludes 1."""
        if self.low > 1:
            return "gain"
        return "loss" if self.high is not None and self.high < 1 else "within noise"

    def span(self) -> str:
        """The interval in words: `1.05-1.40x`, `at least 1.05x` above a floor, `at most
        1.40x` against a floor, `unbounded: both floors`."""
        if self.high is None:
            return f"at least {self.low:.2f}x" if self.low > 0 else "unbounded: both floors"
        if self.low <= 0:
            return f"at most {self.high:.2f}x"
        return f"{self.low:.2f}-{self.high:.2f}x"

    def text(self, reference: str) -> str:
        """`1.21x vLLM defaults at 7.5 req/s (1.05-1.40x: gain)`."""
        return (f"{self.ratio:.2f}x {reference} at {self.reference_rps:.3g} req/s "
                f"({self.span()}: {self.verdict})")


def ratio(cap: CapacityRecord, reference: CapacityRecord) -> Ratio | None:
    """`cap` over `reference`, None where either found no capacity; a floor leaves its
    side of the interval open (`bounds`)."""
    if not cap.low or not reference.low:
        return None
    blo, bhi = bounds(cap)
    rlo, rhi = bounds(reference)
    if rlo <= 0 or (rhi is not None and rhi <= 0):
        return None
    return Ratio(cap.request_throughput / reference.request_throughput,
                 0.0 if rhi is None else blo / rhi, None if bhi is None else bhi / rlo,
                 reference.request_throughput)


def limiting_probes(cap: CapacityRecord) -> dict[str, float | None]:
    """The probe figures of the step that named the capacity's bottleneck."""
    step = cap.limiting_step
    return dict(step.probes or {}) if step is not None else {}


def limit_text(cap: CapacityRecord) -> str | None:
    """What limited the capacity, in words (None for records made before attribution)."""
    return cap.bottleneck.text if cap.bottleneck is not None else None
