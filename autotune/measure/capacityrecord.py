"""The capacity search as a trial's record keeps it, and what the records say together.

`CapacityRecord` is the whole search (its rates, bracket, throughputs at capacity, what
limited it and every step, `steprecord.StepRecord`s), `Stored`: any record version reads,
and writes back exactly what was stored. The capacity is an achieved rate: what the engine
achieved in the steady windows of its highest passing rate (`measured`); a record written
while the figure was the search's rate gives the figure its steps give (`current`, what a
trial record's reader gets). `interval`, `bounds`, `tied`, `ratio`, `unrepeated` and
`suspects` compare and read records; nothing here measures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from autotune.measure import bottleneck
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.steprecord import StepRecord, achieved_at, at_rate, offered_at, spread_at
from autotune.stored import Stored

# A capacity whose uncertainty is wider than this (±25 %) is too uncertain to rank by: the
# search spends up to `extra_steps` more on it, and a record still wider says so.
TOO_UNCERTAIN = 0.25


@dataclass(frozen=True)
class Measured:
    """What a search's steps say of its capacity. `capacity` (= `low`) is what the engine
    achieved at the highest passing rate (`steprecord.achieved_at`), `offered` what those
    windows were offered; `high` is what the lowest failing rate's steps were offered
    (`steprecord.offered_at`; None: no rate failed, a floor); `spread` the repeats'."""

    capacity: float
    offered: float | None
    low: float | None
    high: float | None
    spread: float | None

    @property
    def bracket(self) -> float | None:
        """The bracket's relative width, (high - low) / high; 0 for a floor."""
        if self.low is None:
            return None
        if self.high is None:
            return 0.0
        lo, hi = sorted((self.low, self.high))
        return (hi - lo) / hi if hi > 0 else 0.0

    @property
    def uncertainty(self) -> float | None:
        """The larger of the bracket's width and the repeats' spread."""
        width = self.bracket
        return None if width is None else max(width, self.spread or 0.0)


def measured(steps: Sequence[StepRecord], rate: float | None, failing: float | None,
             spread: float | None = None) -> Measured:
    """The capacity of a search whose highest passing rate is `rate` (None: none passed)
    and lowest failing one `failing`, from its steps; `spread` as given, else the passing
    steps' at `rate` (`steprecord.spread_at`)."""
    high = offered_at(steps, failing) if failing is not None else None
    if not rate:
        return Measured(0.0, None, None, high, None)
    windows = [got for s in at_rate(steps, rate) if s.passed and (got := s.offered) is not None]
    capacity = achieved_at(steps, rate)
    return Measured(capacity, sum(windows) / len(windows) if windows else None, capacity, high,
                    spread if spread is not None else spread_at(steps, rate))


@dataclass(frozen=True)
class CapacityRecord(Stored):
    """The capacity search as a trial's record keeps it (`searchresult.record`): rates,
    throughputs at capacity, bracket, what limited it and every step.

    `request_throughput` is the capacity: requests/s the engine achieved in the steady
    windows of the passing steps at the highest passing rate (their mean), or that rate
    where the steps kept no window (vLLM's client, records made before the window).
    `rate` is the rate the search offered there, `offered_rps` what those windows were
    offered. The bracket runs from `low`, the capacity itself, to `high`, what the lowest
    failing rate's steps were offered (None: every sustained rate passed, a floor);
    throughputs at capacity are the capacity times the workload's tokens per request.
    Records made before the steady window lack `step_s` ... `bottleneck_step`, before
    achieved capacities `rate` ... `remeasured`; vLLM's client's adds keys of its own."""

    EXTRA: ClassVar[tuple[str, ...]] = ("too_uncertain",)

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
    rate: float | None = None
    offered_rps: float | None = None
    # Steps spent beyond `max_steps` because the capacity was too uncertain to rank by.
    remeasured: int = 0
    steps: tuple[StepRecord, ...] = ()
    NESTED = {"steps": StepRecord, "bottleneck": Bottleneck}

    @property
    def too_uncertain(self) -> bool:
        """Whether the capacity is too uncertain to rank by (`TOO_UNCERTAIN`), even after
        the steps the search spent measuring it again."""
        return bool(self.low) and (self.uncertainty or 0.0) > TOO_UNCERTAIN

    @property
    def at_capacity(self) -> list[StepRecord]:
        """The valid sustained steps at the rate the capacity stands for."""
        return at_rate(self.steps, self.rate) if self.rate else []

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


def current(cap: CapacityRecord) -> CapacityRecord:
    """`cap` as this version reads it. A record written while the capacity was the
    search's passing rate (no `rate` stored: `low` that rate, `high` the failing one)
    gives the figures its steps give (`measured`, the stored spread kept): the rate
    achieved where its steps kept a steady window (or a backlog to derive it from), else
    the stored figure; its throughputs at capacity and time scale move with it. The
    stored record itself is left as it was; the record returned, written again (a twin's
    copy), carries `rate` and so reads as it is."""
    if cap.read is None or "rate" in cap.read or not cap.steps:
        return cap
    rate = cap.low or None
    now = measured(cap.steps, rate, cap.high, cap.spread)
    if now.high == cap.high and (not rate or now.capacity == rate):
        return dataclasses.replace(cap, rate=rate)
    keys = (*cap.read, "rate", "offered_rps")  # written again, it reads as it is
    if not rate:  # no capacity: only the failing end moves
        return dataclasses.replace(cap, high=now.high, read=keys)
    scale = now.capacity / rate
    return dataclasses.replace(
        cap, request_throughput=now.capacity, output_throughput=cap.output_throughput * scale,
        total_token_throughput=cap.total_token_throughput * scale, low=now.low, high=now.high,
        bracket=now.bracket, uncertainty=now.uncertainty,
        time_scale=cap.time_scale * scale if cap.time_scale else cap.time_scale, rate=rate,
        offered_rps=now.offered, read=keys)


def suspects(cap: CapacityRecord) -> list[str]:
    """The resources with evidence against them at the record's knee, best supported
    first (`bottleneck.suspects`); the recorded limit always first."""
    limit = cap.limiting_step
    named = [cap.limit.kind] if cap.limit is not None else []
    if limit is None or limit.passed or not cap.low:
        return named
    found = bottleneck.suspects([s.probes for s in cap.at_capacity if s.passed], limit.probes)
    return named + [k for k in found if k not in named]


def unrepeated(cap: CapacityRecord) -> list[tuple[float, int, int]]:
    """Rates whose SLOs held in some of their sustained steps and not in others, as
    (rate, steps passed, steps): the search could not repeat its own result there (the
    engine's speed moved, or the SLO sits inside the noise), so it is no figure to rank
    on."""
    runs: dict[float, list[bool]] = {}
    for s in cap.steps:
        if s.rate is not None and s.sustained and s.invalid is None:
            runs.setdefault(s.rate, []).append(s.passed)
    return [(rate, sum(got), len(got)) for rate, got in runs.items() if 0 < sum(got) < len(got)]


def interval(cap: CapacityRecord) -> tuple[float, float]:
    """Where the true capacity lies (requests/s): from the rate achieved at capacity to
    the rate offered where the SLOs broke, widened by the spread. A failing step offered
    less than a passing one achieved (a trace's busier stretch passed, a calmer one
    failed) does not turn it round: it spans both."""
    low = cap.low or 0.0
    high = cap.high if cap.high is not None else low
    if cap.low and high < low:
        low, high = high, low
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
class CapacityRatio:
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


def ratio(cap: CapacityRecord, reference: CapacityRecord) -> CapacityRatio | None:
    """`cap` over `reference`, None where either found no capacity; a floor leaves its
    side of the interval open (`bounds`)."""
    if not cap.low or not reference.low:
        return None
    blo, bhi = bounds(cap)
    rlo, rhi = bounds(reference)
    if rlo <= 0 or (rhi is not None and rhi <= 0):
        return None
    return CapacityRatio(cap.request_throughput / reference.request_throughput,
                 0.0 if rhi is None else blo / rhi, None if bhi is None else bhi / rlo,
                 reference.request_throughput)


def limiting_probes(cap: CapacityRecord) -> dict[str, float | None]:
    """The probe figures of the step that named the capacity's bottleneck."""
    step = cap.limiting_step
    return dict(step.probes or {}) if step is not None else {}


def limit_text(cap: CapacityRecord) -> str | None:
    """What limited the capacity, in words (None for records made before attribution)."""
    return cap.bottleneck.text if cap.bottleneck is not None else None
