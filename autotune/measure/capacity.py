"""Capacity at SLO: the highest request rate a running engine sustains within its SLOs.

Below saturation every sensible configuration shows the same throughput: the
arrival rate sets it. Launch flags separate near saturation, so a configuration
is scored by how much load it carries, found by search on one running engine:

1. a saturating burst (every request at once) measures the maximum request
   throughput R. It only sizes the search: a burst is over in a fraction of a
   second and is no steady state, so it never is the capacity;
2. sustained Poisson steps follow (`min_step_s`, 20 s by default), each judged on
   its steady window with no backlog growing (`autotune.measure.steady`): R first
   (`ceiling`); x `expand_factor` (1.25) while steps pass (`expand`, up to
   `max_expand` x R, where the capacity is reported as a floor); halving while they
   fail; then bisection
   between the passing and the failing rate until (high - low) / high is within
   the tolerance or the step budget is spent;
3. the final rate is measured again (`repeats`), which gives the spread.

The halving gives up below `min_rate_fraction` of R: if a nearly idle engine misses
the SLOs, no rate meets them and the capacity is 0. Each step also records what
limited the engine (`autotune.measure.bottleneck`).

The burst is preceded by `warmup_requests` (8 when the workload names none), since
a cold burst caps the search. Every step waits for an idle engine first (nothing
running or waiting) and uses its own prompts, so a step is not flattered by an
earlier one's cache unless the workload shares prefixes by design. `plan` is the
search itself, over any `measure` function; `search` runs it on a server.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import aiohttp

from autotune import reasons, slo
from autotune.engine import prometheus
from autotune.measure import bench, bottleneck, loadgen, metrics, probes, steady, watch, workloads
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.loadgen import Target
from autotune.measure.workloads import Tokenizer
from autotune.stored import Stored, plain
from autotune.traces import Replay
from autotune.traffic import CapacitySpec, WorkloadSpec

log = logging.getLogger("autotune")

BELOW_BEST = reasons.BELOW_BEST
TIED = reasons.TIED_WITH_BEST
# A search that starts at a capacity measured before moves by this factor from it: its
# steps stay around that capacity (a re-check, an ablation of the winner).
AROUND = 1.25
UNREACHABLE = reasons.UNREACHABLE
# Warm-up requests before the burst when the workload names none: a fresh engine's first
# requests are slow, and a cold burst would cap the whole search below the engine's
# capacity (the first search on a CPU engine gave 14.1 req/s against 24 for the next).
WARMUP = 8
# The probe figures a step keeps: what the bottleneck attribution read.
LOAD_FIGURES = ("api_server_cpu", "api_servers", "engine_core_cpu", "worker_cpu",
                "client_cpu", "gpu_util_mean", "kv_cache_usage_max", "requests_waiting_mean",
                "requests_running_max", "preemptions", "samples")
# Throughput figures at capacity, under the names the objective uses.
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")


@dataclass(frozen=True)
class StepRecord(Stored):
    """One load level as the trial's record keeps it: what was offered, what came back,
    and whether the SLOs held. Steps recorded before the steady window and the attribution
    lack `whole` ... `latencies`; before the window's rates and the trace's replay, lack
    `window_offered_rps` ... `replayed`."""

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
    backlog: dict[str, Any] = field(default_factory=dict)
    bottleneck: dict[str, Any] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)  # what the attribution read
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
    NESTED = {"replayed": Replay}

    @property
    def load(self) -> float:
        """The request rate this step stands for (the burst: what it achieved)."""
        return self.rate if self.rate is not None else self.achieved_rps


@dataclass(frozen=True)
class Step(StepRecord):
    """A step as the search measured it: the record's fields and the step's full workload
    summary, which the search reads (the best step's becomes the trial's summary) and the
    record leaves out."""

    summary: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)

    def record(self) -> StepRecord:
        """The step without its full summary, for the trial's record."""
        return StepRecord(**{f.name: getattr(self, f.name) for f in fields(StepRecord)
                             if f.name != "read"})


@dataclass(frozen=True)
class CapacityRecord(Stored):
    """The capacity search as a trial's record keeps it (`record`): rates, throughputs at
    capacity, bracket, what limited it and every step. Records made before the steady
    window lack `step_s` ... `bottleneck_step`; vLLM's client's adds keys of its own."""

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
    bottleneck: dict[str, Any] | None = None
    bottleneck_step: int | None = None
    # A trace's capacity as a pace: how many times faster than recorded it was served
    # (`request_throughput` is this times the trace's mean rate). None for other workloads.
    time_scale: float | None = None
    steps: tuple[StepRecord, ...] = ()
    NESTED = {"steps": StepRecord}

    @property
    def limit(self) -> Bottleneck | None:
        """What limited the capacity (None for records made before attribution)."""
        found = self.bottleneck
        if not isinstance(found, Mapping) or not found.get("kind"):
            return None
        return Bottleneck(found["kind"], found.get("text", ""), found.get("valid", True))

    @property
    def limiting_step(self) -> StepRecord | None:
        """The step that named the bottleneck, if recorded."""
        index = self.bottleneck_step
        return self.steps[index] if index is not None and index < len(self.steps) else None


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
    `ceiling` shape its steps as `plan`'s arguments of those names. The empty anchor is a
    search from its burst with no early stop."""

    floor: float | None = None
    start: float | None = None
    factor: float | None = None
    burst: bool | None = None
    ceiling: float | None = None

    def stop_rule(self) -> StopRule | None:
        """`plan`'s `should_stop` for this anchor (None without a floor)."""
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


def plan(measure: Measure, spec: CapacitySpec, should_stop: StopRule | None = None, *,
         start: float | None = None, factor: float | None = None,
         burst: bool | None = None, ceiling: float | None = None) -> Result:
    """Burst, then sustained steps from the burst's rate: up by `expand_factor` while they
    pass, halving while they fail, then bisect; then repeat the capacity; at most
    `spec.max_steps` steps.

    The burst (everything at once) only sizes the search: it is no steady state, so it
    never is the capacity. A 32-request burst that "passes" in 0.2 s says nothing about
    an hour at that rate. `measure(kind, rate, index)` runs one step;
    `should_stop(low, high)` may end the search early with a reason (e.g. the capacity
    is already below the best one's). With `repeats` > 1 the final rate is measured
    again; if the SLOs then fail, that rate counts as failing and the search goes on
    below it while steps remain.

    Rates grow by `spec.expand_factor` from a passing burst rate and halve from a failing
    one. With `start` (a capacity measured before) the first sustained step offers `start`
    instead, and `factor` (default: the expand factor) grows or shrinks the rate from
    there. A re-check spends its steps around the capacity it re-measures, with no burst;
    a study's trial (`burst=True`) keeps its burst, which stops a clear loser within
    seconds, and then runs its first sustained step at the best's lower bound. With
    `ceiling` (the best's upper bound) a rate that passes below it is followed by a step
    at `ceiling`: a fail there brackets the trial inside the best's interval (a tie that
    `should_stop` may end the search on: no further step could tell the two apart), a
    pass searches upward from it.
    """
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


def violations(summary: Mapping[str, Any], slos: Mapping[str, float],
               min_success_rate: float) -> list[str]:
    """The SLOs a step broke, e.g. `ttft_p95_ms 812>500`; an empty list is a pass."""
    out = []
    total = summary.get("completed", 0) + summary.get("failed", 0)
    rate = summary.get("completed", 0) / total if total else 0.0
    if rate < min_success_rate:
        out.append(f"success_rate {rate:.3f}<{min_success_rate:g}")
    if summary.get("truncated"):
        out.append("truncated by max_duration_s")
    for goal in slo.of(slos):
        value = summary.get(goal.summary_key)
        if not goal.met(value):
            key, limit = goal.key, goal.limit_ms
            out.append(f"{key} {value if value is None else round(value, 1)}>{limit:g}")
    return out


def record(result: Result, spec: WorkloadSpec) -> CapacityRecord:
    """The capacity as a trial keeps it: rates, throughputs at capacity, bracket, steps.

    Throughputs at capacity are the rate times the workload's mean tokens per request,
    so they do not depend on how quickly a short step's last requests drained.
    """
    best = result.best.summary if result.best else {}
    done = best.get("completed") or 0
    out_per = (best.get("total_output_tokens") or 0) / done if done else 0.0
    in_per = (best.get("total_input_tokens") or 0) / done if done else 0.0
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
         ) -> dict[str, Any] | None:
    """What limited the capacity (`Bottleneck.as_dict`): by contrast between the steps that
    passed at capacity and the gentlest failing step above it (`bottleneck.across`), else
    that step's own reading."""
    if not limit.passed and low:
        found = bottleneck.across([s.probes for s in steps if s.passed and s.load == low],
                                  limit.probes)
        if found is not None:
            return plain(found)
    return limit.bottleneck or None


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


def interval(cap: CapacityRecord) -> tuple[float, float]:
    """Where the true capacity lies (requests/s): the bracket widened by the spread."""
    low = cap.low or 0.0
    high = cap.high if cap.high is not None else low
    spread = cap.spread or 0.0
    return low * (1 - spread), high * (1 + spread)


def tied(a: CapacityRecord, b: CapacityRecord) -> bool:
    """Capacities whose uncertainty intervals overlap cannot be told apart."""
    (alo, ahi), (blo, bhi) = interval(a), interval(b)
    return alo <= bhi and blo <= ahi


@dataclass(frozen=True)
class Ratio:
    """One capacity over another (a configuration's over vLLM's defaults'): the ratio of the
    two and the interval their intervals allow (low over high, high over low); its verdict
    is written beside them in JSON (`EXTRA`)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("verdict",)

    ratio: float
    low: float
    high: float
    reference_rps: float

    @property
    def verdict(self) -> str:
        """`gain`, `loss` or `within noise`: a gain only when the interval excludes 1."""
        if self.low > 1:
            return "gain"
        return "loss" if self.high < 1 else "within noise"

    def text(self, reference: str) -> str:
        """`1.21x vLLM defaults at 7.5 req/s (1.05-1.40x: gain)`."""
        return (f"{self.ratio:.2f}x {reference} at {self.reference_rps:.3g} req/s "
                f"({self.low:.2f}-{self.high:.2f}x: {self.verdict})")


def ratio(cap: CapacityRecord, reference: CapacityRecord) -> Ratio | None:
    """`cap` over `reference`, None where either found no capacity."""
    if not cap.low or not reference.low:
        return None
    blo, bhi = interval(cap)
    rlo, rhi = interval(reference)
    if rlo <= 0 or rhi <= 0:
        return None
    return Ratio(cap.request_throughput / reference.request_throughput, blo / rhi, bhi / rlo,
                 reference.request_throughput)


def summary_of(result: Result) -> dict[str, Any]:
    """The figures the trial is scored on: the step at capacity, else the gentlest failure."""
    if result.best is not None:
        return dict(result.best.summary)
    tried = [s for s in result.steps if s.summary]
    gentlest = min(tried, key=lambda s: s.load, default=None)
    return dict(gentlest.summary) if gentlest else {}


def judge(kind: str, rate: float | None, index: int, whole: dict[str, Any],
          run: loadgen.RunResult, sampler: probes.Sampler, cap: CapacitySpec,
          slos: Mapping[str, float]) -> Step:
    """A step's verdict: the SLOs on its steady window, and the engine keeping pace there
    with what was offered (no backlog growing through it: `steady.Backlog`).

    The burst (everything at once) has no steady state and is judged whole.
    """
    if rate is None or run.send_s <= 0:
        summary, win, grew = whole, None, None
    else:
        win = steady.window(run.t0, run.send_s, cap.ramp_fraction, cap.tail_fraction)
        inside = steady.arrived_in(run.results, win)
        summary = metrics.summarize(inside, win.seconds) if inside else dict(whole)
        summary.update(probes=plain(sampler.summary(win.start, win.end)),
                       client=run.lag, truncated=whole.get("truncated"),
                       workload=whole.get("workload"), whole={
                           k: whole.get(k) for k in ("completed", "failed", "duration",
                                                     "request_throughput",
                                                     "output_throughput")})
        if "replayed" in whole:
            summary["replayed"] = whole["replayed"]
        grew = steady.backlog(run.results, win,
                              running=sampler.series("vllm:num_requests_running"))
    broken = violations(summary, slos, cap.min_success_rate)
    if grew is not None and grew.grows(cap.backlog_limit):
        # One rule, said both ways: the queue grew by more than the limit's share of the
        # arrivals, so the engine achieved more than that share less than was offered.
        broken.append(f"backlog +{grew.growth:.0f} requests ({grew.share:.0%} of arrivals): "
                      f"achieved {grew.achieved_rps:.3g} of {grew.offered_rps:.3g} req/s "
                      "offered")
    replay = whole.get("replayed")
    figures = slo_figures(summary, slos)
    figures["preemptions"] = (summary.get("probes") or {}).get("preemptions", 0)
    seen = summary.get("probes") or {}
    limit = bottleneck.attribute(seen, run.lag)
    read = {k: round(v, 2) if isinstance(v, float) else v for k, v in seen.items()
            if k in LOAD_FIGURES}
    return Step(index, kind, rate, not broken, whole.get("request_throughput", 0.0),
                whole.get("output_throughput", 0.0), broken,
                whole.get("completed", 0) + whole.get("failed", 0), figures,
                summary=summary, whole=slo_figures(whole, slos),
                window_s=round(win.seconds, 3) if win else None,
                backlog=plain(grew) if grew else {}, bottleneck=plain(limit),
                probes={**read, **{k: round(v, 2) for k, v in run.lag.items()}},
                latencies=latency_figures(summary),
                window_offered_rps=grew.offered_rps if grew else None,
                window_achieved_rps=grew.achieved_rps if grew else None,
                replayed=Replay.from_dict(replay) if isinstance(replay, Mapping) else None)


def latency_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """Every latency statistic of a summary under its SLO key: {"ttft_p95_ms": 312.5}."""
    return slo_figures(summary, dict.fromkeys(slo.KEYS, 0.0))


def slo_figures(summary: Mapping[str, Any], slos: Mapping[str, float]) -> dict[str, float]:
    """The SLO metrics of a summary, rounded, e.g. {"ttft_p95_ms": 312.5}."""
    return slo.figures(summary, slos)


async def wait_idle(url: str, timeout_s: float, poll_s: float = 0.2) -> float:
    """Wait until the engine has nothing running or waiting; seconds waited."""
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10),
                                     trust_env=False) as http:
        while time.monotonic() - t0 < timeout_s:
            try:
                async with http.get(url + "/metrics") as resp:
                    values = prometheus.scrape(await resp.text(), prometheus.PROBED)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError):
                values = {}
            if values and values.get("vllm:num_requests_running", 1) == 0 \
                    and values.get("vllm:num_requests_waiting", 1) == 0:
                break
            await asyncio.sleep(poll_s)
    return time.monotonic() - t0


def search(target: Target, spec: WorkloadSpec, *, tokenizer_model: str,
           slos: Mapping[str, float], pids: Callable[[], list[int]] | None = None,
           should_stop: StopRule | None = None,
           alive: watch.Alive | None = None, start: float | None = None,
           factor: float | None = None, burst: bool | None = None,
           ceiling: float | None = None) -> dict[str, Any]:
    """Find the capacity of the engine behind `target`; the result is a bench summary
    (of the step at capacity) with a `capacity` record. `start`, `factor`, `burst` and
    `ceiling` are `plan`'s: a search whose first sustained step offers a capacity measured
    before.

    `alive` watches the engine through every wait, the idle waits between steps
    included: once it names a reason the search ends with `Halted` within a poll,
    instead of waiting `idle_timeout_s` per step for an engine that is gone."""
    cap = spec.capacity
    tokenizer = Tokenizer.of(tokenizer_model) \
        if spec.kind in ("random", "chat", "trace") else None
    pace = workloads.pace(spec)  # a trace's rates are its pace times a time-scale factor
    count = "conversations" if spec.kind == "chat" else "num_requests"
    base_n = getattr(spec, count)

    def measure(kind: str, rate: float | None, index: int) -> Step:
        waited = watch.run(wait_idle(target.url, cap.idle_timeout_s), alive)
        n = base_n
        if rate is not None:  # long enough to be measured, short enough at low rates
            n = max(base_n, math.ceil(rate * cap.min_step_s))
            n = min(n, max(4, math.floor(rate * cap.max_step_s)))
        step_spec = spec.model_copy(update={
            "request_rate": math.inf if rate is None else rate, count: n,
            "warmup_requests": (spec.warmup_requests or WARMUP) if index == 0 else 0,
            **({"time_scale": math.inf if rate is None else rate / pace} if pace else {})})
        t0 = time.monotonic()
        whole, run, sampler = bench.step(target, step_spec, tokenizer_model=tokenizer_model,
                                         pids=pids, offset=7919 * index, tokenizer=tokenizer,
                                         alive=alive)
        step = replace(judge(kind, rate, index, whole, run, sampler, spec.capacity, slos),
                       idle_wait_s=round(waited, 3),
                       duration_s=round(time.monotonic() - t0, 3))
        log.info("capacity step %d (%s): %s -> %s, %s; %s%s", index, kind,
                 "burst" if rate is None else f"{rate:.3g} req/s", rates(step),
                 "pass" if step.passed else "fail: " + ", ".join(step.violations),
                 step.bottleneck.get("text", ""),
                 f"; {step.replayed.text()}" if step.replayed else "")
        return step

    result = plan(measure, cap, should_stop, start=start, factor=factor, burst=burst,
                  ceiling=ceiling)
    summary = summary_of(result)
    summary["capacity"] = plain(record(result, spec))
    return summary


def rates(step: StepRecord) -> str:
    """What a step offered and achieved, for a log line: `117 req/s offered, 86.4
    achieved` over its judged window, else `86.4 req/s` achieved (the burst, older steps)."""
    if step.window_offered_rps is None or step.window_achieved_rps is None:
        return f"{step.achieved_rps:.3g} req/s"
    return (f"{step.window_offered_rps:.3g} req/s offered, {step.window_achieved_rps:.3g} "
            "achieved")


def step_columns(cap: CapacityRecord, slo_keys: Sequence[str]) -> list[str]:
    """The headers of `step_rows`: a trace's steps add what each replayed."""
    traced = any(s.replayed for s in cap.steps)
    return ["step", "kind", "rate req/s", "offered req/s", "achieved req/s", "out tok/s",
            *slo_keys, "preempt", "backlog", "limit", *(["replayed"] if traced else []),
            "verdict"]


def step_rows(cap: CapacityRecord, slo_keys: Sequence[str]) -> list[list[str]]:
    """A table of the steps for a terminal (`step_columns`): step, kind, the search's rate,
    what the judged window was offered and achieved (requests/s; steps recorded before
    the window's rates: the rate and the whole step's), SLO figures of the window,
    backlog growth, what limited the step, what a trace's step replayed, verdict."""
    traced = any(s.replayed for s in cap.steps)
    rows = []
    for s in cap.steps:
        rate = "burst" if s.rate is None else f"{s.rate:.3g}"
        offered = rate if s.window_offered_rps is None else f"{s.window_offered_rps:.3g}"
        achieved = s.achieved_rps if s.window_achieved_rps is None else s.window_achieved_rps
        figs = [f"{s.figures.get(k, float('nan')):.1f}" for k in slo_keys]
        rows.append([str(s.index), s.kind, rate, offered, f"{achieved:.3g}",
                     f"{s.output_throughput:.1f}", *figs,
                     f"{s.figures.get('preemptions', 0):g}",
                     f"{s.backlog['share']:+.0%}" if s.backlog else "-",
                     s.bottleneck.get("kind", "-") if s.bottleneck else "-",
                     *([s.replayed.short() if s.replayed else "-"] if traced else []),
                     "pass" if s.passed else "fail"])
    return rows


def slo_keys(cap: CapacityRecord) -> list[str]:
    """The SLO figures its steps were judged on (the first step's), for `step_rows`."""
    return [k for k in (cap.steps[0].figures if cap.steps else {}) if k.endswith("_ms")]


def limiting_probes(cap: CapacityRecord) -> dict[str, Any]:
    """The probe figures of the step that named the capacity's bottleneck."""
    step = cap.limiting_step
    return dict(step.probes or {}) if step is not None else {}


def limit_text(cap: CapacityRecord) -> str | None:
    """What limited the capacity, in words (None for records made before attribution)."""
    found = cap.bottleneck
    return found.get("text") if isinstance(found, Mapping) else None


def describe(cap: CapacityRecord) -> str:
    """One line: `3.2 req/s (2.9-3.4, ±5.0 %)` or why there is no capacity."""
    if not cap.low:
        high = cap.high
        return "no rate met the SLOs" + (f" (fails at {high:.3g} req/s)" if high else "")
    lo, hi = interval(cap)
    text = f"{cap.request_throughput:.3g} req/s ({lo:.3g}-{hi:.3g}"
    text += f", ±{cap.uncertainty:.1%})" if cap.uncertainty else ")"
    if cap.time_scale:
        text += f", {cap.time_scale:.3g}x the trace's recorded pace"
    if cap.saturated:
        text += ", a floor: the SLOs held at every rate tried"
    if cap.stopped:
        text += f", stopped: {cap.stopped}"
    return text
