"""The capacity is what the engine achieved: searches over a simulated engine (Poisson and a
trace's time scale), the steps a search spends on a capacity too uncertain to rank by, a
step too short to judge measured again, and records written before read with the figure
their steps give."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest

from autotune._traces import load
from autotune.cli import main as cli
from autotune.measure import capacityrecord, capacitytext, searchplan, searchresult, workloads
from autotune.measure._steady import Backlog
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.searchresult import Step
from autotune.stored import json_data
from autotune.traffic import CapacitySpec, WorkloadSpec
from autotune.tuning.records.snapshot import records
from tests import azure, served
from tests.paths import ROOT

SPEC = CapacitySpec(tolerance=0.05, max_steps=10, repeats=2, min_step_s=20, extra_steps=0)


def _at_capacity(rec: CapacityRecord) -> list:
    return [s for s in rec.steps if s.passed and s.rate == rec.rate]


def test_a_poisson_search_reports_the_rate_its_capacity_steps_achieved():
    """An engine that takes 30 requests a second into service: the steps at the highest
    passing rate achieved what their windows say, and that (their mean) is the capacity;
    the rate the search offered is kept beside it, and the failing end of the bracket is
    what the lowest failing rate's window was offered."""
    engine = served.Search(30.0, peak=40.0, cap=SPEC)
    result = searchplan.plan(engine, SPEC)
    rec = searchresult.record(result, WorkloadSpec())
    at = _at_capacity(rec)
    assert len(at) == 2 and rec.rate == result.low
    achieved = statistics.fmean(s.window_achieved_rps for s in at)
    assert rec.request_throughput == pytest.approx(achieved) == rec.low
    assert rec.request_throughput != pytest.approx(rec.rate, rel=1e-3)  # not the nominal
    assert rec.offered_rps == pytest.approx(statistics.fmean(s.window_offered_rps for s in at))
    failing = [s for s in rec.steps if s.rate == result.high and not s.passed]
    assert rec.high == pytest.approx(statistics.fmean(s.window_offered_rps for s in failing))
    assert rec.output_throughput == pytest.approx(16 * achieved)  # 16 tokens a request
    assert all(s.window_achieved_rps >= 0.95 * s.window_offered_rps for s in at)
    lo, hi = capacityrecord.interval(rec)
    assert lo <= rec.request_throughput <= hi == pytest.approx(rec.high * (1 + rec.spread))
    assert rec.bracket == pytest.approx((rec.high - rec.low) / rec.high)
    assert capacitytext.achieved_text(rec) == (
        f"achieved {achieved:.3g} req/s of {rec.offered_rps:.3g} offered in the steady "
        f"windows of steps {at[0].index}, {at[1].index} (the search's rate "
        f"{rec.rate:.3g} req/s)")
    assert CapacityRecord.from_dict(json_data(rec)) == rec  # stored as measured
    assert json_data(rec)["too_uncertain"] is False


def test_a_trace_search_reports_the_time_scale_it_achieved(tmp_path):
    """A trace replayed on the same engine: its steps' busier stretches offer more than the
    search's rate, and the capacity is the pace the engine achieved there, as a time scale
    of the trace's own pace."""
    path = azure.write(tmp_path / "azure.csv")
    trace = load(path, 512)

    def due(rate: float, seconds: float, index: int) -> list[float]:
        scale = rate / trace.mean_rate
        return [at / scale for at, _ in trace.sample(math.ceil(rate * seconds))]

    engine = served.Search(30.0, peak=40.0, cap=SPEC, due=due)
    spec = WorkloadSpec(kind="trace", path=str(path), capacity=SPEC)
    result = searchplan.plan(engine, SPEC)
    rec = searchresult.record(result, spec)
    at = _at_capacity(rec)
    achieved = statistics.fmean(s.window_achieved_rps for s in at)
    pace = workloads.pace(spec)
    assert pace == pytest.approx(trace.mean_rate)
    assert rec.request_throughput == pytest.approx(achieved)
    assert rec.time_scale == pytest.approx(achieved / pace)
    assert rec.time_scale != pytest.approx(rec.rate / pace, rel=1e-3)
    assert f"{rec.time_scale:.3g}x the trace's recorded pace" in capacitytext.describe(rec)


class Stepper:
    """`measure` of canned steps: each passes up to `cap` req/s and achieves what
    `achieved(kind, rate, index)` says (None: a step with no window); `invalid` names
    the indices whose step is too short to judge. `asked` keeps (kind, rate, seconds)."""

    def __init__(self, cap: float, achieved=lambda kind, rate, index: None,
                 invalid: frozenset[int] = frozenset()):
        self.cap, self.achieved, self.invalid = cap, achieved, invalid
        self.asked: list[tuple[str, float | None, float | None]] = []

    def __call__(self, kind: str, rate: float | None, index: int,
                 seconds: float | None = None) -> Step:
        self.asked.append((kind, rate, seconds))
        load = 20.0 if rate is None else rate
        short = "10 arrivals in its window" if index in self.invalid else None
        ok = rate is not None and load <= self.cap and short is None
        got = self.achieved(kind, rate, index) if rate is not None else None
        summary = Measurement.of({"completed": 10, "total_output_tokens": 320})
        return Step(index, kind, rate, ok, load, 32 * (got or load),
                    [] if ok or short else ["ttft_p95_ms 900>500"], 10, summary=summary,
                    window_offered_rps=rate if got is not None else None,
                    window_achieved_rps=got, invalid=short)


def test_a_bracket_too_wide_to_rank_by_is_bisected_further_with_longer_steps():
    """Four steps leave 5-10 req/s (±50 %): two more, each `max_step_s` long, bisect it to
    5-6.25, within the bound, and the record says how many steps went to it."""
    spec = CapacitySpec(tolerance=0.05, max_steps=4, repeats=1, max_step_s=45.0)
    engine = Stepper(5.5)
    result = searchplan.plan(engine, spec)
    assert engine.asked == [("burst", None, None), ("ceiling", 20.0, None),
                            ("bisect", 10.0, None), ("bisect", 5.0, None),
                            ("bisect", 7.5, 45.0), ("bisect", 6.25, 45.0)]
    assert (result.low, result.high, result.remeasured) == (5.0, 6.25, 2)
    rec = searchresult.record(result, WorkloadSpec())
    assert rec.remeasured == 2 and not rec.too_uncertain and rec.uncertainty == 0.2
    assert "measured again in 2 more steps" in capacitytext.describe(rec)
    # without them the record would have been too uncertain to rank by
    alone = searchresult.record(searchplan.plan(Stepper(5.5), spec.model_copy(
        update={"extra_steps": 0})), WorkloadSpec())
    assert alone.uncertainty == 0.5 and alone.too_uncertain and alone.remeasured == 0


def test_a_capacity_still_too_uncertain_after_its_extra_steps_says_so():
    spec = CapacitySpec(tolerance=0.05, max_steps=4, repeats=1, extra_steps=1)
    result = searchplan.plan(Stepper(6.0), spec)
    rec = searchresult.record(result, WorkloadSpec())
    assert (rec.low, rec.high, rec.remeasured) == (5.0, 7.5, 1)
    assert rec.too_uncertain and json_data(rec)["too_uncertain"] is True
    assert capacitytext.describe(rec).endswith(
        ", measured again in 1 more step: still too uncertain to rank by")
    from autotune.results.show import capacity_caveat
    assert capacity_caveat(rec) == "±33%: too uncertain to rank by, after 1 more step"


def test_repeats_that_disagree_are_measured_again_longer():
    """The bracket is narrow (10-10.3 req/s offered) but the capacity's two steps achieved
    10 and 6.8 req/s, a spread of 27 %: its rate is measured again, `max_step_s` long, until
    the spread is within the bound or the extra steps are spent."""
    got = {2: 10.0, 8: 6.8, 9: 9.7}

    def achieved(kind: str, rate: float, index: int) -> float:
        return got.get(index, rate)

    spec = CapacitySpec(tolerance=0.05, max_steps=9, repeats=2, max_step_s=30.0)
    engine = Stepper(10.2, achieved)
    result = searchplan.plan(engine, spec)
    assert engine.asked[7:] == [("bisect", 10.3125, None), ("repeat", 10.0, None),
                                ("longer", 10.0, 30.0)]
    rec = searchresult.record(result, WorkloadSpec())
    assert rec.remeasured == 1 and rec.request_throughput == pytest.approx(
        statistics.fmean([10.0, 6.8, 9.7]))
    assert rec.spread == pytest.approx(statistics.stdev([10.0, 6.8, 9.7])
                                       / rec.request_throughput) and rec.spread < 0.25


def test_a_step_too_short_to_judge_is_measured_again_with_twice_its_requests():
    spec = CapacitySpec(tolerance=0.3, max_steps=6, repeats=1)
    engine = Stepper(9.0, invalid=frozenset({2}))
    result = searchplan.plan(engine, spec)
    assert engine.asked[2:4] == [("bisect", 10.0, None), ("longer", 10.0, 2 * 10 / 10.0)]
    assert not result.steps[2].passed and result.steps[2].invalid
    assert result.best is not None and result.best.invalid is None
    rec = searchresult.record(result, WorkloadSpec())
    assert all(s.invalid is None for s in _at_capacity(rec))
    assert capacityrecord.unrepeated(rec) == []  # an invalid step is no verdict
    rows = capacitytext.step_rows(rec, [])
    assert rows[2][-1] == "invalid"


def test_a_rate_that_needed_a_longer_step_is_repeated_at_that_length():
    """10 req/s was too short to judge at the spec's length and passed measured longer
    (2 s): its repeat is measured 2 s long too, not at the length already shown too short,
    which with the budget spent would have left the repeat no verdict."""
    spec = CapacitySpec(tolerance=0.3, max_steps=6, repeats=2, extra_steps=0)
    engine = Stepper(10.0, invalid=frozenset({2}))
    result = searchplan.plan(engine, spec)
    assert engine.asked == [("burst", None, None), ("ceiling", 20.0, None),
                            ("bisect", 10.0, None), ("longer", 10.0, 2.0),
                            ("bisect", 15.0, None), ("repeat", 10.0, 2.0)]
    assert result.low == 10.0 and result.best is not None and result.best.passed


def test_a_repeat_too_short_to_judge_is_no_verdict_against_its_rate():
    """The repeat at 10 req/s was too short to judge and no step was left to lengthen it:
    it neither confirms nor fails the rate, which stays the capacity (it used to count as a
    failed repeat, and the search, finding no passing rate below, reported none)."""
    spec = CapacitySpec(tolerance=0.3, max_steps=6, repeats=2, extra_steps=0)
    engine = Stepper(10.0, invalid=frozenset({5}))
    result = searchplan.plan(engine, spec)
    assert [k for k, _, _ in engine.asked] == ["burst", "ceiling", "bisect", "bisect",
                                               "bisect", "repeat"]
    assert result.steps[5].invalid and not result.steps[5].passed
    assert result.low == 10.0 and result.best is result.steps[2]
    assert result.stopped is None


def _old(steps: list[dict], low: float | None, high: float | None) -> dict:
    """A capacity record as autotune wrote it while the capacity was the search's rate."""
    return {"request_throughput": low or 0.0, "output_throughput": 32 * (low or 0.0),
            "total_token_throughput": 96 * (low or 0.0), "low": low, "high": high,
            "saturated": False, "bracket": (high - low) / high if low and high else None,
            "spread": 0.01, "uncertainty": (high - low) / high if low and high else None,
            "stopped": None, "steps": steps}


def _step(index: int, rate: float, passed: bool, arrivals: int | None = None,
          growth: float = 0.0) -> dict:
    out = {"index": index, "kind": "bisect", "rate": rate, "passed": passed,
           "achieved_rps": rate * 0.9, "output_throughput": 0.0, "violations": [],
           "requests": 100, "figures": {}}
    if arrivals is not None:  # a step with its window: the backlog, not its rates
        out.update(window_s=14.0, backlog={"growth": growth, "share": growth / arrivals,
                                           "arrivals": arrivals})
    return out


def test_a_record_written_before_reads_with_the_rate_its_steps_achieved():
    stored = _old([_step(0, 10.0, True, arrivals=147, growth=3.0),
                   _step(1, 12.0, False, arrivals=161, growth=30.0)], 10.0, 12.0)
    raw = CapacityRecord.from_dict(stored)
    assert raw.as_dict() == stored and raw.request_throughput == 10.0  # stored as it was
    now = capacityrecord.current(raw)
    assert now.request_throughput == pytest.approx((147 - 3) / 14) == now.low
    assert now.high == pytest.approx(161 / 14) and now.rate == 10.0
    assert now.offered_rps == pytest.approx(147 / 14)
    assert now.output_throughput == pytest.approx(32 * (147 - 3) / 14)
    assert now.spread == 0.01 and now.bracket == pytest.approx((161 - 144) / 161)
    assert capacityrecord.current(CapacityRecord.from_dict(json_data(now))) == now
    # steps with no window (before the steady window): the stored figure, said as such
    before = capacityrecord.current(CapacityRecord.from_dict(
        _old([_step(0, 10.0, True), _step(1, 12.0, False)], 10.0, 12.0)))
    assert (before.request_throughput, before.low, before.high) == (10.0, 10.0, 12.0)
    assert capacitytext.achieved_text(before) == (
        "10 req/s is the rate offered at step 0: these steps kept no steady window to "
        "measure what the engine achieved")


def test_the_committed_guided_study_shows_its_achieved_capacity(capsys):
    """`show --trial 1` of the H200 study: the rate achieved, what was offered, the
    search's rate; the stored record is unchanged."""
    db = ROOT / "studies" / "qwen3-4b-h200-guided-2.db"
    rec = records(optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}"))[1]
    cap = rec.capacity
    assert cap is not None and rec.metrics.capacity is not None
    assert rec.metrics.capacity.request_throughput == pytest.approx(91.54, abs=0.01)
    assert cap.rate == rec.metrics.capacity.low
    assert cap.request_throughput == pytest.approx(
        statistics.fmean(s.achieved for s in _at_capacity(cap)))
    assert cli.main(["show", str(db), "--trial", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"capacity at SLO: {capacitytext.describe(cap)}" in out
    assert (f"achieved {cap.request_throughput:.3g} req/s of {cap.offered_rps:.3g} offered in "
            "the steady windows of steps") in out
    assert isinstance(cap.steps[1].backlog, Backlog)
