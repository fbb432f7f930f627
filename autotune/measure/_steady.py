"""The steady part of a load step: which requests to judge, and whether a backlog grew.

A step that lasts a few request lifetimes measures the transient: a slowly growing queue
does not show in its p95 (docs/concepts.md, "Capacity at SLO"). So a step is judged on a
window of its arrival schedule without the ramp and the drain, requests attributed by
arrival time (`RequestResult.due`, so a client behind its schedule cannot hide a backlog),
and it fails when the backlog grows through the window even if the percentiles pass, however
short the step: a step passes only when the engine achieved within the limit of what was
offered. A window with too few arrivals to show a shortfall of that size (`needed`) is no
measurement: neither a pass nor a fail. Pure functions of the request records: the
client's in-flight count also sees a backlog held in front of the scheduler, which the
engine's `num_requests_waiting` misses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure._request import RequestResult
from autotune.stored import Stored


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
class Backlog(Stored):
    """How the queue moved through the window, and what the engine kept pace with.

    The queue is the requests in flight since arrival (unsent ones included) less the engine's
    running ones (without engine samples, the whole in-flight count). `growth` is its
    least-squares slope times the window's length, `share` that growth over the window's
    arrivals; `achieved_rps` is the arrivals less the growth, per second, so `share` > limit and
    `achieved_rps` < (1 - limit) x `offered_rps` are one rule. `in_flight_growth` (a batch that
    settles higher grows too, and is no backlog), `completed_rps` and `late_p99_s` (how late the
    client sent) are for the record. `backlog` rounds to 4 decimals, as the step's record does.
    """

    growth: float = 0.0
    share: float = 0.0
    in_flight_mean: float = 0.0
    arrivals: int = 0
    in_flight_growth: float = 0.0
    queue_mean: float | None = None  # None: no engine samples, the queue is the in-flight
    offered_rps: float = 0.0
    achieved_rps: float = 0.0
    completed_rps: float = 0.0
    late_p99_s: float = 0.0

    def grows(self, limit: float) -> bool:
        """True when more than `limit` of the arrivals piled up, whatever their number: the
        engine achieved more than `limit` less than was offered."""
        return self.share > limit

    def decides(self, limit: float) -> bool:
        """Whether the window held enough arrivals (`needed`) for keeping pace within
        `limit` to mean anything: with fewer, one request left waiting is already more."""
        return self.arrivals >= needed(limit)


def needed(limit: float) -> int:
    """The arrivals a window needs before a step can pass on it: one request piling up
    must be at most `limit` of them (20 at 5 %)."""
    return math.ceil(1 / limit - 1e-9)


def least_sent(limit: float, ramp: float, tail: float, sure: float = 0.95) -> int:
    """Requests a step sends at the least, so that its window (the share between `ramp`
    and `tail` of the sending period) holds `needed` arrivals with probability `sure`:
    36 at the defaults.

    Why not the count that merely expects them (29): the schedule's last arrival ends the
    period (`loadgen.arrival_offsets`), and the others fall in the window each with
    probability `1 - ramp - tail`, so the window's count is binomial around its mean and
    falls short about half the time. Each such step is no verdict and is measured again
    with twice its requests: a few more requests up front cost less."""
    share, want = 1.0 - ramp - tail, needed(limit)
    n = math.ceil(want / share)
    while _at_least(n - 1, share, want) < sure:
        n += 1
    return n


def _at_least(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < p <= 1, in log space (no overflow at any n)."""
    if p >= 1.0:
        return 1.0 if n >= k else 0.0

    def term(i: int) -> float:
        return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                        + i * math.log(p) + (n - i) * math.log1p(-p))
    return sum(term(i) for i in range(k, n + 1))


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
