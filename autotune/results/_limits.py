"""Operating limits of an exported configuration, derived from its recorded capacity steps.

A user deploys the tuned flags to serve traffic at an SLO, so the export says what the
study learned about operating them, each figure traceable to a recorded step:

- capacity at SLO with its interval, the lowest failing rate seen, and what limited it;
- a safe request rate: what the highest sustained step that passed at or below the
  interval's low end achieved (else 90 % of that low end, and the export says so);
- an admission cap (maximum concurrent requests): the largest running batch the engine
  reported in the passing steps up to capacity (a rate at or above the safe one needed no
  more), or, where the probes have none, Little's law (safe rate x mean end-to-end latency
  at capacity: the mean number in flight, not its peaks), named as such;
- a queue threshold to watch: the queue gauge that grew when the steps started to fail.
  With a large max-num-seqs vLLM admits everything, so the backlog shows as running
  requests (`vllm:num_requests_running`), not waiting ones: the gauge is the one whose
  value at the first failing step exceeds every passing step's; the threshold lies halfway
  between the two;
- the engine metrics to alert on, as PromQL: that gauge above its threshold, preemptions,
  and the TTFT / end-to-end latency histograms above the SLO.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune.measure import capacityrecord, capacitytext
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.steprecord import StepRecord
from autotune.tuning.records.trialrecord import TrialRecord

SAFE_SHARE = 0.9  # of the interval's low end, where no passing step lies at or below it
WAITING, RUNNING = "vllm:num_requests_waiting", "vllm:num_requests_running"
# SLO metrics with a histogram in vLLM's /metrics, and its name.
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds",
              "e2el": "vllm:e2e_request_latency_seconds"}
_QUANTILES = {"p90": 0.9, "p95": 0.95, "p99": 0.99, "median": 0.5}


@dataclass(frozen=True)
class Watch:
    """An engine metric to alert on: a PromQL expression that is true when it fires."""

    name: str
    expr: str
    why: str


@dataclass(frozen=True)
class Limits:
    """What the study measured about operating one configuration. `available` is False
    (with `why`) for a trial without a capacity search: nothing here can be derived."""

    available: bool
    why: str = ""
    capacity_rps: float | None = None
    interval: tuple[float, float] | None = None
    first_failing_rps: float | None = None
    bottleneck: str | None = None
    safe_rps: float | None = None
    safe_source: str = ""
    max_concurrency: int | None = None
    concurrency_source: str = ""
    queue_metric: str | None = None
    queue_threshold: float | None = None
    queue_source: str = ""
    slos: dict[str, float] = field(default_factory=dict)
    watch: list[Watch] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The limits as comment lines of an export."""
        if not self.available:
            return [f"operating limits: none ({self.why})"]
        assert self.interval is not None and self.capacity_rps is not None
        lo, hi = self.interval
        fail = "-" if self.first_failing_rps is None else f"{self.first_failing_rps:.3g}"
        span = capacitytext.span(lo, None if self.first_failing_rps is None else hi)
        out = [f"operating limits: capacity {self.capacity_rps:.3g} req/s at "
               + ", ".join(f"{k}<={v:g}" for k, v in self.slos.items())
               + f" (interval {span}); first failing rate {fail} req/s"
               + (f"; limited by {self.bottleneck}" if self.bottleneck else ""),
               f"safe request rate {self.safe_rps:.3g} req/s ({self.safe_source})"]
        if self.max_concurrency is not None:
            out.append(f"admission cap {self.max_concurrency} concurrent requests "
                       f"({self.concurrency_source})")
        if self.queue_metric:
            out.append(f"queue: {self.queue_metric} above {self.queue_threshold:g} means the "
                       f"backlog grows ({self.queue_source})")
        out += [f"alert {w.name}: {w.expr}" for w in self.watch]
        return out


def _sustained(cap: CapacityRecord) -> list[StepRecord]:
    return [s for s in cap.steps if s.rate is not None]


def derive(rec: TrialRecord, slos: Mapping[str, float]) -> Limits:
    """The operating limits of trial `rec` (measured under `slos`)."""
    cap = rec.capacity
    if not cap or not cap.low:
        return Limits(False, "the trial ran no capacity search, or no rate met its SLOs: "
                      "give the scenario SLOs (capacity mode) to measure them")
    lo, hi = capacityrecord.interval(cap)
    steps = _sustained(cap)
    passed = [s for s in steps if s.passed]
    below = [s for s in passed if s.capacity_rps <= lo]
    if below:
        top = max(below, key=lambda s: s.capacity_rps)
        safe = float(top.capacity_rps)
        safe_source = (f"step {top.index} passed {_rate(top)}, at or below the interval's "
                       f"low end {lo:.3g}")
    else:
        top, safe = None, lo * SAFE_SHARE
        safe_source = f"{SAFE_SHARE:.0%} of the interval's low end {lo:.3g}: no passing " \
            "step lies at or below it"
    concurrency, conc_source = _concurrency(
        rec, [s for s in passed if s.load <= (cap.rate or cap.low)], safe)
    metric, threshold, q_source = _queue(steps, cap)
    watch = _watch(metric, threshold, slos, steps)
    return Limits(True, capacity_rps=float(cap.request_throughput), interval=(lo, hi),
                  first_failing_rps=cap.high, bottleneck=capacityrecord.limit_text(cap),
                  safe_rps=safe, safe_source=safe_source, max_concurrency=concurrency,
                  concurrency_source=conc_source, queue_metric=metric,
                  queue_threshold=threshold, queue_source=q_source, slos=dict(slos),
                  watch=watch)


def _rate(step: StepRecord) -> str:
    """`achieving 45.1 req/s (offered 45.3)`, or `at 45 req/s` for a step with no window."""
    if step.achieved is None:
        return f"at {step.load:.3g} req/s"
    return f"achieving {step.achieved:.3g} req/s (offered {step.offered or step.load:.3g})"


def _concurrency(rec: TrialRecord, passed: list[StepRecord], safe: float
                 ) -> tuple[int | None, str]:
    running = [(s.index, s.load, most) for s in passed
               if (most := s.probes.get("requests_running_max"))]
    if running:
        index, rate, most = max(running, key=lambda x: x[2])
        return math.ceil(most), (f"the largest running batch the engine reported in the "
                                 f"passing steps up to capacity: step {index} at "
                                 f"{rate:.3g} req/s")
    e2el = rec.metrics.value("mean_e2el_ms")
    if e2el:
        mean = safe * e2el / 1000
        return math.ceil(mean), (f"Little's law: {safe:.3g} req/s x {e2el / 1000:.3g} s mean "
                                 "end-to-end latency at capacity, the mean number in flight")
    return None, "no running batch or latency recorded"


def _queue(steps: list[StepRecord], cap: CapacityRecord
           ) -> tuple[str | None, float | None, str]:
    """The gauge that grew at the first failing step above capacity, and a threshold
    halfway between the passing steps' highest value and that step's."""
    low = cap.rate or cap.low or 0.0  # the rate the search offered at capacity
    failing = [s for s in steps if not s.passed and s.invalid is None and s.load > low]
    first = min(failing, key=lambda s: s.load, default=None)
    passing = [s for s in steps if s.passed]
    if first is None or not passing:
        return None, None, "no failing step above capacity was recorded"
    for metric, key in ((WAITING, "requests_waiting_mean"), (RUNNING, "requests_running_max")):
        ok = max(float((s.probes or {}).get(key) or 0.0) for s in passing)
        bad = float((first.probes or {}).get(key) or 0.0)
        if bad > ok:
            threshold = max(1.0, math.ceil((ok + bad) / 2))
            what = "mean" if key.endswith("mean") else "max"
            return metric, threshold, (f"{what} {ok:g} in the passing steps, {bad:g} at step "
                                       f"{first.index} ({first.load:.3g} req/s), the "
                                       "first failing one")
    return None, None, "no queue gauge grew at the first failing step"


def _watch(metric: str | None, threshold: float | None, slos: Mapping[str, float],
           steps: list[StepRecord]) -> list[Watch]:
    out = []
    if metric and threshold is not None:
        out.append(Watch("QueueGrowing", f"max_over_time({metric}[1m]) > {threshold:g}",
                         "the backlog grows past what the study saw at capacity"))
    if not any((s.probes or {}).get("preemptions") for s in steps if s.passed):
        out.append(Watch("Preempting", "rate(vllm:num_preemptions_total[5m]) > 0",
                         "the KV cache is full: no passing step preempted"))
    for key, limit in slos.items():
        metric_, stat = key.split("_")[:2]
        if metric_ in HISTOGRAMS and stat in _QUANTILES:
            out.append(Watch(f"SLO_{key}", f"histogram_quantile({_QUANTILES[stat]}, sum by "
                             f"(le) (rate({HISTOGRAMS[metric_]}_bucket[5m]))) > "
                             f"{limit / 1000:g}", f"the engine's own {key} is over the SLO"))
    return out
