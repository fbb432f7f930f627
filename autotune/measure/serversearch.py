"""The capacity search run on a live server: each step waits for an idle engine over HTTP,
sends its own prompts at its rate (`autotune.measure.bench.step`) and is judged on its
steady window (`autotune.measure._stepverdict`); the search is `searchplan.plan`.

The burst is preceded by `warmup_requests` (8 when the workload names none), since
a cold burst caps the search. Every step waits for an idle engine first (nothing
running or waiting) and uses its own prompts, so a step is not flattered by an
earlier one's cache unless the workload shares prefixes by design.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import aiohttp

from autotune.engine import prometheus
from autotune.measure import _steady as steady
from autotune.measure import _stepverdict as stepverdict
from autotune.measure import bench, searchplan, searchresult, watch, workloads
from autotune.measure.bench import Load
from autotune.measure.capacitytext import rates, step_name
from autotune.measure.measurement import Measurement
from autotune.measure.searchplan import Anchor
from autotune.measure.searchresult import Step
from autotune.measure.workloads import Tokenizer

log = logging.getLogger("autotune")

# Warm-up requests before the burst when the workload names none: a fresh engine's first
# requests are slow, and a cold burst would cap the whole search below the engine's
# capacity (the first search on a CPU engine gave 14.1 req/s against 24 for the next).
WARMUP = 8
# The attribute of a log record about one capacity step (its value a `StepNote`), so that a
# live view can name the step under way, e.g. when a Ctrl-C stops it mid-step.
STEP = "autotune_step"


@dataclass(frozen=True)
class StepNote:
    """The capacity step a log record is about, by name (`capacitytext.step_name`), and
    whether the record announces it (`starts`: before anything waits or is sent; a live
    view shows it in its status line, not as a line of its own) or gives its verdict."""

    name: str
    starts: bool


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


def search(load: Load, slos: Mapping[str, float], anchor: Anchor | None = None
           ) -> Measurement:
    """Find the capacity of the engine behind `load.target` under `load.spec`; the result
    is a bench summary (of the step at capacity) with a `capacity` record. `anchor` ties
    the search to capacities measured before (`searchplan.plan`): where its first
    sustained step is offered, how it moves and when it stops early.

    `load.alive` watches the engine through every wait, the idle waits between steps
    included: once it names a reason the search ends with `Halted` within a poll,
    instead of waiting `idle_timeout_s` per step for an engine that is gone.

    Args:
        load: the server, the workload (its `capacity` settings), the tokenizer and the
            engine's watch.
        slos: the percentile SLOs a passing step meets, by key (`ttft_p95_ms`: 500.0).
        anchor: capacities measured before (a floor to beat, a start, a factor).

    Returns:
        The `Measurement` of the step at capacity, its `capacity` the search's record
        (the achieved rate of the highest passing step, its interval and every step).

    Raises:
        Halted: the engine died or the trial's time ran out during the search.
    """
    spec = load.spec
    cap = spec.capacity
    tokenizer = load.tokenizer or (Tokenizer.of(load.tokenizer_model)
                                   if spec.kind in ("random", "chat", "trace") else None)
    pace = workloads.pace(spec)  # a trace's rates are its pace times a time-scale factor
    count = "conversations" if spec.kind == "chat" else "num_requests"
    base_n = getattr(spec, count)

    least = steady.least_sent(cap.backlog_limit, cap.ramp_fraction, cap.tail_fraction)

    def measure(kind: str, rate: float | None, index: int, seconds: float | None) -> Step:
        n = base_n
        if seconds is not None and rate is not None:  # a step the search asked longer
            n = max(base_n, least, math.ceil(rate * seconds))
        elif rate is not None:  # long enough to be measured, short enough at low rates
            n = max(base_n, math.ceil(rate * cap.min_step_s))
            n = max(least, min(n, math.floor(rate * cap.max_step_s)))
        name = step_name(index, kind, rate)
        log.info("starting %s: %d %s", name, n, count.replace("num_", ""),
                 extra={STEP: StepNote(name, starts=True)})
        waited = watch.run(wait_idle(load.target.url, cap.idle_timeout_s), load.alive)
        step_spec = spec.model_copy(update={
            "request_rate": math.inf if rate is None else rate, count: n,
            "warmup_requests": (spec.warmup_requests or WARMUP) if index == 0 else 0,
            **({"time_scale": math.inf if rate is None else rate / pace} if pace else {})})
        t0 = time.monotonic()
        sent = bench.step(replace(load, spec=step_spec, tokenizer=tokenizer),
                          offset=7919 * index)
        step = replace(stepverdict.judge(kind, rate, index, sent, cap, slos),
                       idle_wait_s=round(waited, 3),
                       duration_s=round(time.monotonic() - t0, 3))
        log.info("capacity step %d (%s): %s -> %s, %s; %s%s", index, kind,
                 "burst" if rate is None else f"{rate:.3g} req/s", rates(step),
                 "pass" if step.passed else "fail: " + ", ".join(step.violations),
                 step.bottleneck.text if step.bottleneck else "",
                 f"; {step.replayed.text()}" if step.replayed else "",
                 extra={STEP: StepNote(name, starts=False)})
        return step

    result = searchplan.plan(measure, cap, anchor)
    return searchresult.summary_of(result).replace(capacity=searchresult.record(result, spec))
