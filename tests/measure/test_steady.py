"""Steady-state windows, backlog trends and the verdict of a sustained step (no engine)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from autotune import _traces as traces
from autotune.measure import _steady as steady
from autotune.measure import _stepverdict as stepverdict
from autotune.measure import loadgen, searchresult
from autotune.measure.bench import StepRun
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.loadgen import RunResult
from autotune.measure.measurement import Measurement
from autotune.measure.metrics import RequestResult
from autotune.measure.probes import Sampler
from autotune.stored import json_data
from autotune.traffic import CapacitySpec
from tests import azure, served
from tests.served import T0


def _requests(rate: float, seconds: float, latency, t0: float = 100.0) -> list[RequestResult]:
    """Requests sent evenly at `rate`; `latency(i, t)` gives each one's E2EL."""
    out = []
    for i in range(int(rate * seconds)):
        t = t0 + i / rate
        e2el = latency(i, t - t0)
        out.append(RequestResult(True, 32, 16, ttft=min(0.05, e2el), latency=e2el,
                                 itl=[(e2el - 0.05) / 15] * 15, start_time=t))
    return out


def test_window_leaves_out_ramp_and_end():
    w = steady.window(10.0, 20.0, 0.2, 0.1)
    assert (w.start, w.end) == (14.0, 28.0)
    assert w.seconds == pytest.approx(14.0)


def test_arrivals_are_attributed_by_send_time():
    reqs = _requests(10, 10, lambda i, t: 30.0)  # slow to finish, sent inside
    w = steady.window(100.0, 10.0, 0.2, 0.1)
    inside = steady.arrived_in(reqs, w)
    assert inside and all(w.start <= r.start_time <= w.end for r in inside)
    assert len(inside) == pytest.approx(0.7 * len(reqs), abs=2)


def test_constant_latency_has_no_backlog():
    reqs = _requests(20, 20, lambda i, t: 1.0)
    grew = steady.backlog(reqs, steady.window(100.0, 20.0, 0.2, 0.1))
    assert abs(grew.growth) < 2
    assert grew.in_flight_mean == pytest.approx(20, abs=2)  # Little's law: rate x latency
    assert not grew.grows(0.05)


def test_latency_growing_with_arrival_time_is_a_backlog():
    # completions fall behind arrivals: each request waits 0.2 s longer per second sent
    reqs = _requests(20, 20, lambda i, t: 1.0 + 0.2 * t)
    grew = steady.backlog(reqs, steady.window(100.0, 20.0, 0.2, 0.1))
    assert grew.growth > 40 and grew.share > 0.1
    assert grew.grows(0.05)
    # the figures are kept at 4 decimals: a step's record holds the ones that judged it
    stored = json_data(grew)
    assert list(stored) == ["growth", "share", "in_flight_mean", "arrivals",
                            "in_flight_growth", "queue_mean", "offered_rps", "achieved_rps",
                            "completed_rps", "late_p99_s"]
    assert all(v == round(v, 4) for v in stored.values() if isinstance(v, float))


def test_failed_requests_hold_no_slot():
    reqs = [RequestResult(False, 1, 0, start_time=100 + i / 10, error="HTTP 500")
            for i in range(100)]
    grew = steady.backlog(reqs, steady.window(100.0, 10.0, 0.2, 0.1))
    assert grew.growth == 0 and grew.in_flight_mean == 0


def _judge(reqs, rate, slos, cap=None):
    run = RunResult(reqs, 25.0, t0=100.0, send_s=max(r.start_time for r in reqs) - 100.0)
    whole = {"request_throughput": rate, "output_throughput": rate * 16,
             "completed": len(reqs), "failed": 0, "p95_e2el_ms": 1.0}
    sampler = Sampler("http://127.0.0.1:9")  # never started: no samples
    return stepverdict.judge("bisect", rate, 1, StepRun(Measurement.of(whole), run, sampler),
                             cap or CapacitySpec(), slos)


def test_growing_backlog_fails_a_step_whose_percentiles_pass():
    reqs = _requests(20, 20, lambda i, t: 1.0 + 0.2 * t)
    step = _judge(reqs, 20.0, {"e2el_p95_ms": 60_000})
    assert step.figures["e2el_p95_ms"] < 60_000  # the percentile alone would pass
    assert not step.passed
    assert any(v.startswith("backlog +") for v in step.violations)
    assert step.backlog.share > 0.05
    assert step.window_s == pytest.approx(0.7 * (20 - 1 / 20), rel=0.01)


def test_steady_step_passes_and_keeps_whole_step_figures():
    # a slow start (cold engine) inflates the whole step's p95, not the window's
    reqs = _requests(20, 20, lambda i, t: 3.0 if t < 2 else 0.5)
    step = _judge(reqs, 20.0, {"e2el_p95_ms": 1000})
    assert step.passed, step.violations
    assert step.figures["e2el_p95_ms"] == pytest.approx(500, rel=0.01)
    assert step.bottleneck.kind == "none"


def test_the_burst_is_judged_whole():
    reqs = _requests(20, 2, lambda i, t: 0.5)
    run = RunResult(reqs, 2.0, t0=100.0, send_s=0.0)
    whole = {"request_throughput": 20.0, "output_throughput": 320.0, "completed": 40,
             "failed": 0, "p95_e2el_ms": 5000.0}
    step = stepverdict.judge("burst", None, 0,
                             StepRun(Measurement.of(whole), run, Sampler("http://127.0.0.1:9")),
                             CapacitySpec(), {"e2el_p95_ms": 1000})
    assert not step.passed and step.window_s is None and not step.backlog


def test_window_settings_are_validated():
    with pytest.raises(ValueError, match="at least 10 %"):
        CapacitySpec(ramp_fraction=0.5, tail_fraction=0.45)
    assert CapacitySpec().min_step_s == 20.0


def test_limiting_step_is_the_gentlest_failure_above_capacity():
    def step(i, rate, ok, kind):
        return searchresult.Step(i, "bisect", rate, ok, rate or 10.0,
                             bottleneck=Bottleneck(kind))
    steps = [step(0, None, False, "front_end"), step(1, 5.0, True, "none"),
             step(2, 7.5, False, "kv_cache"), step(3, 6.2, False, "gpu")]
    result = searchresult.SearchResult(5.0, 5.0, 6.2, steps, steps[1])
    assert searchresult.limiting(result).bottleneck.kind == "gpu"
    saturated = searchresult.SearchResult(10.0, 10.0, None, steps[:1], steps[0])
    assert searchresult.limiting(saturated) is steps[0]
    assert not math.isnan(searchresult.limiting(result).load)


def _running(reqs, cap: float | None, t0=100.0, t1=120.0, every=0.5):
    """The engine's running count at sample times: what is in flight, up to `cap`."""
    out = []
    t = t0
    while t <= t1:
        n = sum(1 for r in reqs if r.start_time <= t < r.start_time + r.latency)
        out.append((t, float(min(n, cap) if cap else n)))
        t += every
    return out


def test_a_batch_that_settles_higher_is_not_a_backlog():
    """On the H200 the running batch grew through 14-s windows at rates whose TTFT p95
    stayed at a fifth of the SLO: everything in flight was being served."""
    reqs = _requests(20, 20, lambda i, t: 1.0 + 0.2 * t)
    w = steady.window(100.0, 20.0, 0.2, 0.1)
    grew = steady.backlog(reqs, w, running=_running(reqs, None))
    assert grew.in_flight_growth > 40  # the in-flight count alone would fail the step
    assert abs(grew.growth) < 2 and grew.queue_mean == pytest.approx(0, abs=0.5)
    assert not grew.grows(0.05)


def test_requests_waiting_beyond_the_running_batch_are_a_backlog():
    reqs = _requests(20, 20, lambda i, t: 1.0 + 0.2 * t)
    w = steady.window(100.0, 20.0, 0.2, 0.1)
    grew = steady.backlog(reqs, w, running=_running(reqs, 16.0))  # max-num-seqs 16
    assert grew.growth > 40 and grew.queue_mean > 5
    assert grew.grows(0.05)
    # too few engine samples in the window: the in-flight count is the queue
    sparse = steady.backlog(reqs, w, running=_running(reqs, 16.0, every=10.0))
    assert sparse.queue_mean is None and sparse.growth == sparse.in_flight_growth


def _trace_due(tmp_path, rate: float, seconds: float = 20.0) -> list[float]:
    """A trace step's due times at `rate` requests/s, as `serversearch.search` schedules it:
    rate x `seconds` requests of a 360-request Azure trace, four stretches of it (with their
    lulls) below 360, the whole trace again and again above."""
    trace = traces.load(azure.write(tmp_path / "azure.csv"), 512)
    scale = rate / trace.mean_rate
    return [at / scale for at, _ in trace.sample(math.ceil(rate * seconds))]


@pytest.mark.parametrize("rate", [15.0, 117.0])  # four stretches of the trace; 6.5 times it
def test_a_trace_step_passes_only_when_achieved_keeps_pace_with_offered(tmp_path, rate):
    """The rule of every sustained step, on a bursty trace's arrivals: the window's offered
    and achieved rates are both requests/s over the window, and a step that achieves more
    than `backlog_limit` less than it offered fails, its queue having grown by as much."""
    due = _trace_due(tmp_path, rate)
    kept = served.judged(*served.engine(due, serve_rps=3 * rate), rate)
    assert kept.passed, kept.violations
    assert kept.window_offered_rps == pytest.approx(kept.backlog.offered_rps)
    assert kept.window_achieved_rps >= 0.95 * kept.window_offered_rps
    short = served.judged(*served.engine(due, serve_rps=0.75 * rate), rate)
    assert not short.passed
    assert short.window_achieved_rps < 0.9 * short.window_offered_rps
    assert short.backlog.share > 0.05  # one rule: the queue grew by that share
    assert short.window_achieved_rps == pytest.approx(
        short.window_offered_rps * (1 - short.backlog.share), rel=1e-3)
    assert any(v.startswith("backlog +") and f"of {short.window_offered_rps:.3g} req/s offered"
               in v for v in short.violations)


def test_a_client_behind_its_schedule_offered_less_than_the_rate(tmp_path):
    """As a 117-req/s trace step a user saw pass with 84-89 req/s achieved: a client that
    could send 86 requests a second, not 117 (on 2 shared cores its event loop fell up to 2 s
    behind), to an engine that kept pace with what it was sent. By send times the queue
    never grew (the backlog waited in the client) and the step passed; by the schedule it
    grew by a quarter of the arrivals, so the step fails, and says how late the client sent."""
    due = _trace_due(tmp_path, 117.0)
    results, running = served.engine(due, serve_rps=300.0, send_rps=86.0)
    by_send = [dataclasses.replace(r, due=None) for r in results]
    assert served.judged(by_send, running, 117.0, send_s=max(due)).passed  # the rule as it was
    step = served.judged(results, running, 117.0)
    assert not step.passed and step.backlog.late_p99_s > 3
    assert step.window_offered_rps == pytest.approx(117, rel=0.1)
    assert step.window_achieved_rps == pytest.approx(86, rel=0.1)


def test_a_long_reply_at_the_end_is_no_shortfall():
    """The whole step's achieved rate includes the drain: one long reply among the last
    requests stretches it (20 s of sending, 27 s in all: 74 % of the rate), while over the
    window everything offered was served."""
    reqs = _requests(117, 20, lambda i, t: 7.0 if t > 19.9 else 0.3, t0=T0)
    whole_rps = len(reqs) / (max(r.start_time + r.latency for r in reqs) - T0)
    assert whole_rps < 0.8 * 117
    w = steady.window(T0, 20.0 - 1 / 117, 0.2, 0.1)
    grew = steady.backlog(reqs, w)
    assert grew.offered_rps == pytest.approx(117, rel=0.01)
    assert grew.achieved_rps == pytest.approx(117, rel=0.03)
    assert grew.completed_rps == pytest.approx(117, rel=0.03) and not grew.grows(0.05)


def test_a_batch_that_settles_higher_is_served_not_short():
    """Completions lag arrivals while the running batch grows (the H200's 5-14 % of the
    arrivals through a window, far below capacity): that is service, not a shortfall."""
    reqs = _requests(20, 20, lambda i, t: 1.0 + 0.2 * t)
    w = steady.window(100.0, 20.0, 0.2, 0.1)
    grew = steady.backlog(reqs, w, running=_running(reqs, None))
    assert grew.completed_rps < 0.85 * grew.offered_rps
    assert grew.achieved_rps == pytest.approx(grew.offered_rps, rel=0.05)


def _even(rate: float, seconds: float) -> list[float]:
    """Due times every 1/`rate` s for `seconds`."""
    return [i / rate for i in range(round(rate * seconds))]


@pytest.mark.parametrize("seconds", [3.0, 20.0])
def test_a_step_achieving_12_percent_less_than_offered_fails_at_any_length(seconds):
    """As a user's CPU step offered 4.97 req/s and achieving 4.4 passed: the rule without
    its floor. An engine taking 88 % of a 12-req/s schedule into service falls behind in a
    3-s step as in a 20-s one; the 3-s window's queue grew by 3 requests, under the 4 that
    once had to pile up before a step could fail."""
    results, running = served.engine(_even(12.0, seconds), serve_rps=0.88 * 12.0)
    step = served.judged(results, running, 12.0)
    assert not step.passed and step.invalid is None
    assert step.window_achieved_rps == pytest.approx(0.88 * step.window_offered_rps, abs=0.3)
    assert any(v.startswith("backlog +") for v in step.violations)
    if seconds == 3.0:
        assert step.backlog.growth < 4 and step.backlog.arrivals >= 20
    # the engine that keeps up passes it
    results, running = served.engine(_even(12.0, seconds), serve_rps=3 * 12.0)
    kept = served.judged(results, running, 12.0)
    assert kept.passed and not kept.violations and kept.invalid is None


@pytest.mark.parametrize("serve", [24.0, 0.88 * 8.0])
def test_a_step_too_short_to_judge_is_invalid_not_passing(serve):
    """16 arrivals in the window of a 3-s step at 8 req/s: one request left waiting would be
    6 % of them, beyond the 5 % limit, so keeping pace cannot be told from falling behind.
    Such a step neither passes nor fails, whether the engine kept up or fell 12 % short;
    the search measures it again longer."""
    results, running = served.engine(_even(8.0, 3.0), serve_rps=serve)
    step = served.judged(results, running, 8.0)
    assert step.backlog.arrivals < steady.needed(0.05) == 20
    assert not step.passed and not step.violations
    assert step.invalid == (f"{step.backlog.arrivals} arrivals in its window, fewer than the 20 "
                            "that keeping pace within 5% needs")
    assert not step.backlog.decides(0.05)
    assert steady.least_sent(0.05, 0.2, 0.1) == 36  # what a step sends at the least


@pytest.mark.parametrize("burstiness", [1.0, 0.5])
def test_the_least_a_step_sends_fills_its_window_nearly_always(burstiness):
    """Over 400 arrival schedules as the load generator draws them, a step of `least_sent`
    requests leaves too few arrivals in its window about 5 % of the time (Poisson): the
    count that merely expects 20 (29 requests) fell short about half the time, and each
    such step was measured again with twice its requests."""
    def short_share(n: int) -> float:
        short = 0
        for seed in range(400):
            offsets = loadgen.arrival_offsets(n, 5.0, burstiness, seed)
            w = steady.window(0.0, offsets[-1], 0.2, 0.1)
            short += sum(w.start <= t <= w.end for t in offsets) < steady.needed(0.05)
        return short / 400

    least = steady.least_sent(0.05, 0.2, 0.1)
    assert short_share(29) > 0.3
    assert short_share(least) <= (0.1 if burstiness == 1.0 else 0.25)
    assert steady.least_sent(0.05, 0.0, 0.0) == 21  # every arrival but the last counts
    assert steady.least_sent(0.001, 0.45, 0.45) > 10_000  # no overflow at large counts
