"""A simulated engine for the steady-window tests: requests due on a schedule, a client that
may fall behind it, an engine that takes at most so many requests a second into service;
and a capacity step judged on what it served (`judged`), or a whole search's steps
(`Search`), with no server."""

from __future__ import annotations

import math

import numpy as np

from autotune.measure import _stepverdict as stepverdict
from autotune.measure._request import RequestResult
from autotune.measure.bench import StepRun
from autotune.measure.loadgen import RunResult
from autotune.measure.measurement import Measurement
from autotune.measure.probes import ProbeSample, Sampler
from autotune.measure.searchresult import Step
from autotune.traffic import CapacitySpec

T0 = 100.0  # perf_counter of a step's start
SLOS = {"e2el_p95_ms": 60_000}  # loose: only keeping pace decides


def engine(due: list[float], serve_rps: float, busy_s: float = 0.3,
           send_rps: float = math.inf) -> tuple[list[RequestResult], list[tuple[float, float]]]:
    """Requests due at `due` (s after T0) through a client that sends at most `send_rps`
    of them a second (behind its schedule beyond that) to an engine that takes at most
    `serve_rps` a second into service, first come first served, each then busy `busy_s`:
    their results, and the engine's running count every 0.25 s."""
    results, served = [], []
    sent = free = -math.inf
    for at in sorted(due):
        sent = max(at, sent + 1 / send_rps)
        start = max(sent, free)
        free, done = start + 1 / serve_rps, start + busy_s
        results.append(RequestResult(True, 32, 16, ttft=start - sent + 0.05,
                                     latency=done - sent, itl=[(done - start - 0.05) / 15] * 15,
                                     start_time=T0 + sent, due=T0 + at))
        served.append((start, done))
    end = max(d for _, d in served)
    running = [(T0 + t, float(sum(a <= t < d for a, d in served)))
               for t in np.arange(0.0, end, 0.25)]
    return results, running


def judged(results: list[RequestResult], running: list[tuple[float, float]], rate: float,
           send_s: float | None = None, *, kind: str = "expand", index: int = 2,
           cap: CapacitySpec | None = None) -> Step:
    """`stepverdict.judge` on a step's results, the engine sampled at `running`; the
    step's schedule ended at `send_s` (s after T0; default: the last request's due time)."""
    send_s = send_s if send_s is not None else max(r.arrival for r in results) - T0
    run = RunResult(results, max(r.start_time + r.latency for r in results) - T0, t0=T0,
                    send_s=send_s)
    whole = {"request_throughput": len(results) / run.duration_s,
             "output_throughput": 16 * len(results) / run.duration_s,
             "completed": len(results), "failed": 0, "total_output_tokens": 16 * len(results),
             "total_input_tokens": 32 * len(results)}
    sampler = Sampler("http://127.0.0.1:9")  # never started: its samples are set here
    sampler.samples = [ProbeSample(t, {"vllm:num_requests_running": n}) for t, n in running]
    return stepverdict.judge(kind, rate, index, StepRun(Measurement.of(whole), run, sampler),
                             cap or CapacitySpec(), SLOS)


def poisson(rate: float, seconds: float, seed: int) -> list[float]:
    """Poisson arrivals at `rate` for `seconds`, as the load generator draws them."""
    gaps = np.random.default_rng(seed).exponential(1 / rate, math.ceil(rate * seconds))
    return list(np.cumsum(gaps) - gaps[0])


class Search:
    """`searchplan.plan`'s `measure` over an engine that serves `serve_rps`: each sustained
    step's due times from `due(rate, seconds, index)` (Poisson by default), `seconds` the
    spec's `min_step_s` unless the search asks longer; the burst achieves `peak` and
    misses the SLOs, as a saturating burst does. `asked` records (kind, rate, seconds)."""

    def __init__(self, serve_rps: float, peak: float, cap: CapacitySpec, due=None):
        self.serve_rps, self.peak, self.cap = serve_rps, peak, cap
        self.due = due or (lambda rate, seconds, index: poisson(rate, seconds, index))
        self.asked: list[tuple[str, float | None, float | None]] = []

    def __call__(self, kind: str, rate: float | None, index: int,
                 seconds: float | None = None) -> Step:
        self.asked.append((kind, rate, seconds))
        if rate is None:
            summary = Measurement.of({"completed": 200, "failed": 0,
                                      "request_throughput": self.peak,
                                      "total_output_tokens": 3200, "total_input_tokens": 6400})
            return Step(index, "burst", None, False, self.peak, 16 * self.peak,
                        ["ttft_p95_ms 900>500"], 200, summary=summary)
        due = self.due(rate, seconds or self.cap.min_step_s, index)
        results, running = engine(due, self.serve_rps)
        return judged(results, running, rate, kind=kind, index=index, cap=self.cap)
