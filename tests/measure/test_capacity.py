"""The capacity search over a simulated engine: bracket, budget, repeats, early stop, ties."""

from __future__ import annotations

import math

import pytest

from autotune._traces import Replay
from autotune.measure import _stepverdict as stepverdict
from autotune.measure import capacityrecord, capacitytext, searchplan, searchresult
from autotune.measure._steady import Backlog
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.searchresult import Step
from autotune.stored import json_data
from autotune.traffic import CapacitySpec, WorkloadSpec


class Engine:
    """Passes every rate up to `cap` req/s; the burst achieves `peak` req/s, and with
    `queueing` it misses the SLOs whatever the cap (every request waits at once)."""

    def __init__(self, cap: float, peak: float, flaky: set[int] = frozenset(),
                 queueing: bool = False, lenient_burst: bool = False):
        self.cap, self.peak, self.flaky, self.queueing = cap, peak, flaky, queueing
        self.lenient_burst = lenient_burst
        self.calls: list[tuple[str, float | None]] = []

    def __call__(self, kind: str, rate: float | None, index: int,
                 seconds: float | None = None) -> Step:
        self.calls.append((kind, rate))
        load = self.peak if rate is None else rate
        ok = load <= self.cap and index not in self.flaky and not (
            self.queueing and rate is None) or (self.lenient_burst and rate is None)
        summary = {"completed": 10, "total_output_tokens": 320, "total_input_tokens": 640,
                   "request_throughput": min(load, self.peak)}
        return Step(index, kind, rate, ok, min(load, self.peak), 32 * min(load, self.peak),
                    [] if ok else ["ttft_p95_ms 900>500"], 10, summary=Measurement.of(summary))


@pytest.mark.parametrize("cap", [1.0, 7.3, 12.9, 19.9])
def test_bisection_brackets_the_capacity_within_tolerance(cap):
    engine = Engine(cap, peak=20.0)
    spec = CapacitySpec(tolerance=0.05, max_steps=12, repeats=1)
    r = searchplan.plan(engine, spec)
    assert r.low <= cap < r.high
    assert (r.high - r.low) / r.high <= 0.05
    assert r.request_rate == r.low and r.best.passed and r.best.load == r.low
    assert engine.calls[0] == ("burst", None)  # the saturating burst comes first
    assert len(r.steps) <= spec.max_steps


@pytest.mark.parametrize("max_steps", range(1, 10))
def test_the_step_budget_counts_every_step(max_steps):
    engine = Engine(9.0, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.001, max_steps=max_steps, repeats=2,
                                             extra_steps=0))
    assert len(engine.calls) == len(r.steps) <= max_steps and r.remeasured == 0
    if r.low:  # whatever passed is below the capacity, whatever failed above it
        assert r.low <= 9.0 < r.high
    # the extra steps go only to a capacity the budget left too uncertain to rank by
    again = searchplan.plan(Engine(9.0, peak=20.0),
                            CapacitySpec(tolerance=0.001, max_steps=max_steps, repeats=2))
    assert len(again.steps) == max(max_steps, len(r.steps)) + again.remeasured
    assert again.remeasured <= 3
    assert bool(again.remeasured) == bool(r.low and r.uncertainty > 0.25)


def test_sustained_steps_grow_while_they_pass_and_then_report_a_floor():
    engine = Engine(100.0, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(repeats=3))  # x1.25 per step, 8 steps
    assert [k for k, _ in engine.calls] == ["burst", "ceiling", "expand", "expand", "expand",
                                            "expand", "repeat", "repeat"]
    assert [rate for _, rate in engine.calls][1:6] == pytest.approx(
        [20.0, 25.0, 31.25, 39.0625, 48.828125])
    assert r.request_rate == pytest.approx(48.828125) and r.high is None
    # with doubling the search reaches max_expand x the burst's rate and stops there
    engine = Engine(100.0, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(repeats=3, expand_factor=2.0))
    assert engine.calls == [("burst", None), ("ceiling", 20.0), ("expand", 40.0),
                            ("expand", 80.0), ("repeat", 80.0), ("repeat", 80.0)]
    assert r.request_rate == 80.0 and r.high is None and r.bracket == 0.0
    assert r.spread == 0.0 and r.uncertainty == 0.0
    assert searchresult.record(r, WorkloadSpec()).saturated
    assert capacitytext.describe(searchresult.record(r, WorkloadSpec())) == \
        "80 req/s (at least 80), a floor: the SLOs held at every rate tried"


def test_a_passing_burst_is_never_the_capacity():
    """A burst is over in a moment; only sustained steps can show the capacity."""
    engine = Engine(10.0, peak=20.0, lenient_burst=True)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.15, max_steps=8, repeats=2))
    assert r.steps[0].passed and r.best.kind != "burst"
    assert r.request_rate == 10.0 and r.high == pytest.approx(11.25)


def test_nothing_passes_gives_zero_with_an_upper_bound():
    engine = Engine(0.001, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(max_steps=5, repeats=2))
    assert r.request_rate == 0.0 and r.best is None
    assert r.high == pytest.approx(20.0 / 8)
    assert len(r.steps) == 5


def test_a_failed_repeat_moves_the_capacity_below_that_rate():
    # Step 5 (the repeat of the best rate) fails: that rate cannot be reported.
    engine = Engine(10.0, peak=20.0, flaky={5})
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.3, max_steps=10, repeats=2))
    kinds = [k for k, _ in engine.calls]
    assert kinds[:6] == ["burst", "ceiling", "bisect", "bisect", "bisect", "repeat"]
    assert r.high <= engine.calls[5][1]  # the flaky rate now counts as failing
    assert r.low < engine.calls[5][1] and r.best.passed
    assert all(s.passed for s in r.steps if s.load == r.low)


def test_early_stop_below_the_best_lower_bound():
    engine = Engine(3.0, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.01, max_steps=10),
                        searchplan.Anchor(floor=8.0))
    assert r.stopped == searchplan.BELOW_BEST
    assert [rate for _, rate in engine.calls] == [None, 20.0, 10.0, 5.0]  # fails at 5 < 8
    assert len(r.steps) == 4


def test_violations_name_each_broken_slo():
    summary = {"completed": 9, "failed": 1, "p95_ttft_ms": 812.4, "p99_tpot_ms": 20.0}
    summary = Measurement.of(summary)
    out = stepverdict.violations(summary, {"ttft_p95_ms": 500, "tpot_p99_ms": 25}, 1.0)
    assert out == ["success_rate 0.900<1", "ttft_p95_ms 812.4>500"]
    assert stepverdict.violations(summary, {"tpot_p99_ms": 25}, 0.9) == []
    none_measured = Measurement.of({"completed": 3, "failed": 0})
    assert stepverdict.violations(none_measured, {"e2el_p90_ms": 1}, 1) == ["e2el_p90_ms None>1"]


def test_record_gives_throughputs_at_capacity():
    engine = Engine(7.3, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.05, max_steps=12, repeats=1))
    typed = searchresult.record(r, WorkloadSpec())
    assert typed.request_throughput == r.low
    assert typed.output_throughput == pytest.approx(r.low * 32)  # 320 tokens / 10 requests
    assert typed.total_token_throughput == pytest.approx(r.low * 96)
    assert typed.max_request_throughput == 20.0 and not typed.saturated
    stored = json_data(typed)  # as a trial keeps it: the steps without their full summaries
    assert len(stored["steps"]) == len(r.steps) and "summary" not in stored["steps"][0]
    assert CapacityRecord.from_dict(stored) == typed
    lo, hi = capacityrecord.interval(typed)
    assert lo == r.low and hi == r.high
    assert "req/s" in capacitytext.describe(typed)


def test_an_interval_open_above_has_no_nan():
    assert not math.isnan(
        capacityrecord.interval(CapacityRecord(low=1.0, high=None, spread=0.1))[1])


def test_halving_gives_up_when_even_low_load_misses_the_slos():
    engine = Engine(0.0, peak=20.0)
    r = searchplan.plan(engine, CapacitySpec(max_steps=20, min_rate_fraction=1 / 8))
    assert [rate for _, rate in engine.calls] == [None, 20.0, 10.0, 5.0, 2.5]  # 1.25 < 20/8
    assert r.request_rate == 0.0 and r.stopped == searchplan.UNREACHABLE


def test_early_stop_right_after_the_burst():
    engine = Engine(3.0, peak=6.0)
    anchor = searchplan.Anchor(floor=7.5)
    r = searchplan.plan(engine, CapacitySpec(), anchor)  # the burst peaks under 7.5
    below = anchor.stop_rule()
    assert r.stopped == searchplan.BELOW_BEST and len(r.steps) == 1
    assert searchplan.Anchor().stop_rule() is None and below is not None
    assert below(None, 8.0) is None


@pytest.mark.parametrize("cap, peak, calls, stopped", [
    # a clear loser: its burst already fails below the best's lower bound
    (3.0, 6.0, [("burst", None)], searchplan.BELOW_BEST),
    # a loser whose burst drains faster: its first sustained step, at the best's lower
    # bound, fails, and it is pruned at once (no bisection from the burst's rate)
    (6.0, 20.0, [("burst", None), ("ceiling", 8.0)], searchplan.BELOW_BEST),
    # a contender passes there and searches upward from it, never below it
    (11.0, 20.0, [("burst", None), ("ceiling", 8.0), ("expand", 10.0), ("expand", 12.5),
                  ("bisect", 11.25), ("bisect", 10.625)], None),
])
def test_a_study_trial_starts_at_the_best_rate(cap, peak, calls, stopped):
    """As the study runs a searched trial once it has a complete one: the burst, then the
    first sustained step at the best's lower bound, which is also the early-stop floor."""
    engine = Engine(cap, peak=peak)
    anchor = searchplan.Anchor(floor=8.0, start=8.0, burst=True)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.1, max_steps=8, repeats=1), anchor)
    assert engine.calls == calls and r.stopped == stopped
    assert all(rate is None or rate >= 8.0 for _, rate in engine.calls)


@pytest.mark.parametrize("cap, calls, stopped, low, high", [
    # inside the best's interval (8-9.5): passes at its lower bound, fails at its upper
    # bound; no step could tell the two apart, so the search ends there (no bisection, no
    # repeat): two sustained steps in all
    (9.0, [("burst", None), ("ceiling", 8.0), ("expand", 9.5)], searchplan.TIED, 8.0, 9.5),
    # beats the best's interval: passes at its upper bound and searches on from it
    (12.0, [("burst", None), ("ceiling", 8.0), ("expand", 9.5), ("expand", 11.875),
            ("expand", 14.84375), ("bisect", 13.359375), ("repeat", 11.875)], None, 11.875,
     13.359375),
    # below the best: pruned at its lower bound, as without a ceiling
    (7.0, [("burst", None), ("ceiling", 8.0)], searchplan.BELOW_BEST, None, 8.0),
])
def test_a_tie_with_the_best_is_proven_in_two_sustained_steps(cap, calls, stopped, low, high):
    """The study's anchor: the best's interval 8-9.5 req/s. A trial that passes at 8 runs
    its next step at 9.5, not at 8 x 1.25 = 10."""
    engine = Engine(cap, peak=20.0)
    anchor = searchplan.Anchor(floor=8.0, start=8.0, burst=True, ceiling=9.5)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.15, max_steps=8, repeats=2), anchor)
    assert engine.calls == calls
    assert (r.stopped, r.low, r.high) == (stopped, low, high)
    if stopped == searchplan.TIED:  # a feasible trial, tied with the best by its record
        rec = searchresult.record(r, WorkloadSpec())
        best = CapacityRecord(low=8.0, high=9.5, request_throughput=8.0)
        assert capacityrecord.tied(rec, best)
        assert "stopped: tied_inside_best" in capacitytext.describe(rec)


def test_a_burst_that_queues_does_not_cap_the_search():
    """The burst missed the SLOs by queueing alone: sustained steps go above its rate."""
    engine = Engine(25.0, peak=20.0, queueing=True)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.15, max_steps=8, repeats=2))
    assert engine.calls == [("burst", None), ("ceiling", 20.0), ("expand", 25.0),
                            ("expand", 31.25), ("bisect", 28.125), ("repeat", 25.0)]
    assert r.request_rate == 25.0 and r.high == 28.125 and r.best.kind == "expand"


def test_the_step_budget_keeps_a_repeat_in_reserve():
    engine = Engine(25.0, peak=20.0, queueing=True)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.01, max_steps=5, repeats=2))
    assert [k for k, _ in engine.calls] == ["burst", "ceiling", "expand", "expand", "repeat"]
    assert r.request_rate == 25.0 and r.high == 31.25


def test_a_re_check_starts_at_a_known_capacity_without_a_burst():
    engine = Engine(60.0, peak=100.0)
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.1, max_steps=6, repeats=2),
                        searchplan.Anchor(start=70.0, factor=1.25))
    assert engine.calls[:3] == [("ceiling", 70.0), ("bisect", 56.0), ("bisect", 63.0)]
    assert "burst" not in [k for k, _ in engine.calls]
    assert r.low <= 60.0 < r.high and (r.high - r.low) / r.high <= 0.1
    assert searchresult.record(r, WorkloadSpec()).max_request_throughput is None
    # passing at the start grows by the factor, not by doubling
    engine = Engine(80.0, peak=100.0)
    searchplan.plan(engine, CapacitySpec(tolerance=0.1, max_steps=4, repeats=1),
                    searchplan.Anchor(start=50.0, factor=1.25))
    assert engine.calls[:2] == [("ceiling", 50.0), ("expand", 62.5)]


def test_a_flaky_rate_near_capacity_leaves_a_capacity_below_it():
    """The H200 defaults: 60 req/s passed, then failed its repeat on a growing backlog,
    with every rate above failing. The search goes on just below, not from zero."""
    engine = Engine(62.0, peak=60.2, queueing=True, flaky={5})
    r = searchplan.plan(engine, CapacitySpec(tolerance=0.1, max_steps=8, repeats=2))
    assert [k for k, _ in engine.calls][:6] == ["burst", "ceiling", "expand", "bisect",
                                                "bisect", "repeat"]
    assert engine.calls[6][1] == pytest.approx(60.2 / 1.25)  # not halved to 30
    assert r.request_rate == pytest.approx(60.2 / 1.25) and r.high == pytest.approx(60.2)


def test_a_trace_step_record_says_what_it_replayed_and_reads_without_it():
    """A trace's steps keep which part of the trace each replayed and what their window
    was offered and achieved; the step table shows both; records from before read."""
    part = Replay(118, 360, 4, 0.2778, 136.3)
    passed = Step(1, "ceiling", 15.0, True, 13.9, 139.0, [], 300, {"e2el_p95_ms": 900.0},
                  backlog=Backlog(share=0.01), window_offered_rps=16.5, window_achieved_rps=16.4,
                  replayed=part)
    failed = Step(2, "expand", 117.0, False, 86.8, 868.0, ["backlog +410 requests"], 2340,
                  {"e2el_p95_ms": 4000.0}, backlog=Backlog(share=0.24),
                  window_offered_rps=118.9, window_achieved_rps=90.1,
                  replayed=Replay(2340, 360, 0, 6.59, 136.3))
    burst = Step(0, "burst", None, True, 40.0, 400.0, [], 360, {"e2el_p95_ms": 800.0},
                 replayed=Replay(360, 360, 0, 1.0, 136.3))
    cap = CapacityRecord(request_throughput=15.0, low=15.0, high=117.0,
                         steps=(burst.record(), passed.record(), failed.record()))
    stored = json_data(cap)
    assert stored["steps"][1]["replayed"] == json_data(part)
    assert stored["steps"][1]["window_offered_rps"] == 16.5
    assert CapacityRecord.from_dict(stored) == cap
    columns = capacitytext.step_columns(cap, ["e2el_p95_ms"])
    rows = capacitytext.step_rows(cap, ["e2el_p95_ms"])
    assert len(columns) == len(rows[0]) and columns[-2] == "replayed"
    table = [dict(zip(columns, row, strict=True)) for row in rows]
    assert [(t["rate req/s"], t["offered req/s"], t["achieved req/s"]) for t in table] == [
        ("burst", "burst", "40"), ("15", "16.5", "16.4"), ("117", "119", "90.1")]
    assert [t["replayed"] for t in table] == ["360 (1x)", "118/360 (28 %)", "2340 (6.6x)"]
    assert capacitytext.rates(failed) == "119 req/s offered, 90.1 achieved"
    assert capacitytext.rates(burst) == "40 req/s"
    # a step recorded before: no replay, no window rates; the table shows its rate and the
    # whole step's achieved rate, with no replay column for a record that has none
    old = {k: v for k, v in stored["steps"][1].items()
           if k not in ("window_offered_rps", "window_achieved_rps", "replayed")}
    step = capacityrecord.StepRecord.from_dict(old)
    assert step.replayed is None and step.window_offered_rps is None and step.as_dict() == old
    before = CapacityRecord(low=15.0, steps=(step,))
    assert "replayed" not in capacitytext.step_columns(before, [])
    assert capacitytext.step_rows(before, [])[0][2:5] == ["15", "15", "13.9"]
