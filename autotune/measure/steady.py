"""The steady part of a load step: which requests to judge, and whether a backlog grew.

A step that lasts a few request lifetimes measures the transient: a queue that grows
a little every second does not show in its p95 (on the H200 4-6-s steps reported a
1.24x capacity gain that `vllm bench serve` at 22-s steps did not reproduce). So a
step is judged on a window of its arrival schedule that leaves out the ramp (the
engine filling up from idle) and the end (the batch thinning out once arrivals stop),
with requests attributed to the window by their arrival time; and it fails when the
requests in flight grow through the window even if the percentiles pass, because
completions falling behind arrivals is what "above capacity" means.

A request arrives when the arrival schedule offered it (`RequestResult.due`), not when
the client managed to send it: a client that falls behind its schedule (a busy event
loop on a shared machine) would otherwise offer less than the step's rate, and the
engine keep pace with what it was sent. The window's offered and achieved rates are
both requests per second over the window, so that they can be compared: the verdict
fails a step that achieved more than `backlog_limit` less than it offered.

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
    """The requests that arrived inside the window, by the schedule (`arrival`): their
    fate is judged whenever it came."""
    return [r for r in results if w.start <= r.arrival <= w.end]


@dataclass(frozen=True)
class Backlog:
    """How the queue moved through the window, and what the engine kept pace with.

    The queue is what arrived and is not being served: the requests in flight since their
    arrival (a request the client has not sent yet included) less the engine's running
    ones (`vllm:num_requests_running`), i.e. requests waiting in the client, in the
    scheduler or in front of it (an API server at 100 % of a core). `growth` is the
    least-squares slope of the queue times the window's length (requests); `share` is
    that growth over the requests that arrived in the window: the fraction of arrivals
    the engine did not keep up with. Without engine samples the queue is the whole
    in-flight count. `in_flight_growth` is the in-flight count's own trend, for the record:
    on the H200 the running batch itself grew by 30-70 % of its mean through 14-s windows
    at rates whose TTFT p95 stayed at a fifth of the SLO (a larger batch decodes slower,
    so it settles higher), which is not a backlog.

    `offered_rps` is the window's arrivals per second; `achieved_rps` the requests per
    second the engine took into service over the same window (the arrivals less the
    queue's growth), so `share` > limit and `achieved_rps` < (1 - limit) x `offered_rps`
    are one rule. `completed_rps` (replies ended in the window, per second) is for the
    record: a batch that settles higher completes fewer than arrive while it grows.
    `late_p99_s` is how late the client sent the window's requests (p99 of send time less
    due time): behind its schedule, it offered less than the step's rate. `backlog`
    rounds the figures to 4 decimals, as a step's record keeps them
    (`autotune.stored.json_data`), so that the record holds the very figures that judged the
    step.
    """

    growth: float
    share: float
    in_flight_mean: float
    arrivals: int
    in_flight_growth: float = 0.0
    queue_mean: float | None = None  # None: no engine samples, the queue is the in-flight
    offered_rps: float = 0.0
    achieved_rps: float = 0.0
    completed_rps: float = 0.0
    late_p99_s: float = 0.0

    def grows(self, limit: float, floor: int = 4) -> bool:
        """True when more than `limit` of the arrivals (and `floor` requests) piled up:
        the engine achieved more than `limit` less than was offered."""
        return self.growth > floor and self.share > limit


def backlog(results: Sequence[RequestResult], w: Window, points: int = 64,
            running: Sequence[tuple[float, float]] = ()) -> Backlog:
    """The queue's trend over the window, from every request's arrival, send and finish
    time and the engine's running count sampled at (perf_counter time, count) points.

    A failed request counts as finished when it was sent: its latency is unknown. The
    engine's samples are used when at least 4 fall in the window.
    """
    inside = arrived_in(results, w)
    arrivals = len(inside)
    if w.seconds <= 0 or not results:
        return Backlog(0.0, 0.0, 0.0, arrivals)
    starts = np.array([r.arrival for r in results])
    ends = np.array([r.start_time + (r.latency if r.success else 0.0) for r in results])

    def in_flight(times: np.ndarray) -> np.ndarray:
        return ((starts[None, :] <= times[:, None]) & (ends[None, :] > times[:, None])).sum(1)

    def growth_of(times: np.ndarray, values: np.ndarray) -> float:
        return float(np.polyfit(times - w.start, values.astype(float), 1)[0]) * w.seconds

    grid = np.linspace(w.start, w.end, points)
    flight = in_flight(grid)
    flight_growth = growth_of(grid, flight)
    sampled = [(t, n) for t, n in running if w.start <= t <= w.end]
    if len(sampled) >= 4:
        times = np.array([t for t, _ in sampled])
        queue = np.maximum(in_flight(times) - np.array([n for _, n in sampled]), 0)
        growth, queue_mean = growth_of(times, queue), float(queue.mean())
    else:
        growth, queue_mean = flight_growth, None
    completed = sum(1 for r in results if r.success
                    and w.start <= r.start_time + r.latency <= w.end)
    late = [r.start_time - r.due for r in inside if r.due is not None]
    return Backlog(round(growth, 4), round(growth / arrivals, 4) if arrivals else 0.0,
                   round(float(flight.mean()), 4), arrivals, round(flight_growth, 4),
                   round(queue_mean, 4) if queue_mean is not None else None,
                   offered_rps=round(arrivals / w.seconds, 4),
                   achieved_rps=round(max(arrivals - growth, 0.0) / w.seconds, 4),
                   completed_rps=round(completed / w.seconds, 4),
                   late_p99_s=round(max(float(np.percentile(late, 99)), 0.0), 4)
                   if late else 0.0)
