"""The steady part of a load step: which requests to judge, and whether a backlog grew.

A step that lasts a few request lifetimes measures the transient: a queue that grows
a little every second does not show in its p95 (on the H200 4-6-s steps reported a
1.24x capacity gain that `vllm bench serve` at 22-s steps did not reproduce). So a
step is judged on a window of its arrival schedule that leaves out the ramp (the
engine filling up from idle) and the end (the batch thinning out once arrivals stop),
with requests attributed to the window by their arrival time; and it fails when the
requests in flight grow through the window even if the percentiles pass, because
completions falling behind arrivals is what "above capacity" means.

Pure functions of the request records: the in-flight count is exact on the client's
clock, whereas the engine's `num_requests_waiting` misses a backlog held in front of
the engine (an API server at 100 % of a core queues requests before the scheduler).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.metrics import RequestResult


@dataclass(frozen=True)
class Window:
    """[start, end] in perf_counter seconds: the arrivals a step is judged on."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def window(t0: float, send_s: float, ramp: float, tail: float) -> Window:
    """The arrivals between `ramp` and `1 - tail` of the sending period that began at t0."""
    return Window(t0 + ramp * send_s, t0 + (1.0 - tail) * send_s)


def arrived_in(results: Sequence[RequestResult], w: Window) -> list[RequestResult]:
    """The requests sent inside the window (their fate is judged whenever it came)."""
    return [r for r in results if w.start <= r.start_time <= w.end]


@dataclass(frozen=True)
class Backlog:
    """How the queue moved through the window.

    The queue is what was sent and is not being served: the client's requests in flight
    less the engine's running ones (`vllm:num_requests_running`), i.e. requests waiting in
    the scheduler or still in front of it (an API server at 100 % of a core). `growth` is
    the least-squares slope of the queue times the window's length (requests); `share` is
    that growth over the requests that arrived in the window: the fraction of arrivals
    the engine did not keep up with. Without engine samples the queue is the whole
    in-flight count. `in_flight_growth` is the in-flight count's own trend, for the record:
    on the H200 the running batch itself grew by 30-70 % of its mean through 14-s windows
    at rates whose TTFT p95 stayed at a fifth of the SLO (a larger batch decodes slower,
    so it settles higher), which is not a backlog. `backlog` rounds the figures to 4
    decimals, as a step's record keeps them (`autotune.stored.plain`), so that the record
    holds the very figures that judged the step.
    """

    growth: float
    share: float
    in_flight_mean: float
    arrivals: int
    in_flight_growth: float = 0.0
    queue_mean: float | None = None  # None: no engine samples, the queue is the in-flight

    def grows(self, limit: float, floor: int = 4) -> bool:
        """True when more than `limit` of the arrivals (and `floor` requests) piled up."""
        return self.growth > floor and self.share > limit


def backlog(results: Sequence[RequestResult], w: Window, points: int = 64,
            running: Sequence[tuple[float, float]] = ()) -> Backlog:
    """The queue's trend over the window, from every request's send and finish time and
    the engine's running count sampled at (perf_counter time, count) points.

    A failed request counts as finished when it was sent: its latency is unknown. The
    engine's samples are used when at least 4 fall in the window.
    """
    arrivals = len(arrived_in(results, w))
    if w.seconds <= 0 or not results:
        return Backlog(0.0, 0.0, 0.0, arrivals)
    starts = np.array([r.start_time for r in results])
    ends = np.array([r.start_time + (r.latency if r.success else 0.0) for r in results])

    def in_flight(times: np.ndarray) -> np.ndarray:
        return ((starts[None, :] <= times[:, None]) & (ends[None, :] > times[:, None])).sum(1)

    def growth_of(times: np.ndarray, values: np.ndarray) -> float:
        return float(np.polyfit(times - w.start, values.astype(float), 1)[0]) * w.seconds

    grid = np.linspace(w.start, w.end, points)
    flight = in_flight(grid)
    flight_growth = growth_of(grid, flight)
    inside = [(t, n) for t, n in running if w.start <= t <= w.end]
    if len(inside) >= 4:
        times = np.array([t for t, _ in inside])
        queue = np.maximum(in_flight(times) - np.array([n for _, n in inside]), 0)
        growth, queue_mean = growth_of(times, queue), float(queue.mean())
    else:
        growth, queue_mean = flight_growth, None
    return Backlog(round(growth, 4), round(growth / arrivals, 4) if arrivals else 0.0,
                   round(float(flight.mean()), 4), arrivals, round(flight_growth, 4),
                   round(queue_mean, 4) if queue_mean is not None else None)
