"""Throughput per GPU against interactivity (`autotune.results.interactivity`): points of
hand-built records checked figure by figure, what old records lack said and left out, the
figure, `show --json` and the report's section; and the points of the committed guided H200
studies read back against the steps they came from. No engine."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune.measure.capacityrecord import StepRecord
from autotune.measure.measurement import Measurement
from autotune.results import interactivity
from autotune.results.interactivity import Interactivity
from autotune.results.report import page as report_page
from autotune.results.report import pergpu
from autotune.results.summary import Summary
from autotune.tuning.records.snapshot import Snapshot, records
from autotune.tuning.records.trialrecord import DEFAULTS
from tests import trials
from tests.paths import ROOT

# A fixed-length workload (every request 1,280 tokens in, 128 out) and one whose lengths vary.
FIXED = {"kind": "random", "range_ratio": 0.0, "ignore_eos": True}
VARYING = {"kind": "random", "range_ratio": 0.25, "ignore_eos": True}


def step(index: int, kind: str, rate: float | None, passed: bool, out: float,
         median: float | None = None, p95: float | None = None, total: float | None = None,
         figures: dict | None = None) -> dict:
    """A stored capacity step: with `median`, a record with per-step latencies; with
    `total`, one made since steps keep their total tokens."""
    s = {"index": index, "kind": kind, "rate": rate, "passed": passed,
         "achieved_rps": rate or 30.0, "output_throughput": out, "requests": 100,
         "figures": figures if figures is not None else ({"tpot_p95_ms": p95} if p95 else {})}
    if median is not None:
        s["latencies"] = {"tpot_median_ms": median, "tpot_p95_ms": p95, "ttft_p95_ms": 80.0}
    if total is not None:
        s["total_token_throughput"] = total
    return s


def study(*caps: tuple[float, list[dict], dict], workload: dict | None = None,
          cpu: bool = False) -> optuna.Study:
    """vLLM's defaults with the first (capacity, steps, flags), then one searched trial per
    other one; scores from the capacities, as `tune` stores them."""
    st = optuna.create_study(study_name="s", directions=["maximize"])
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"},
                                  "objective": {"slos": {"tpot_p95_ms": 75}}})
    for i, (low, steps, flags) in enumerate(caps):
        cap = {"request_throughput": low, "output_throughput": low * 128, "low": low,
               "high": low * 1.1, "uncertainty": 0.05, "steps": steps}
        metrics = Measurement.of({"capacity": cap, "completed": 10, "total_input_tokens": 12800,
                               "total_output_tokens": 1280, "workload": workload or FIXED})
        score = math.log(low / caps[0][0])
        trials.add(st, values=[score], constraints={"slo": -1.0}, flags=flags, metrics=metrics,
                   measures={"throughput": low * 128, "latency_ms": 20.0,
                             "memory_mib": 1000.0}, gain=math.exp(score) - 1,
                   device={"name": "cpu" if cpu else "NVIDIA H200"},
                   **({"baseline": DEFAULTS} if i == 0 else {}))
    return st


DEFAULT_STEPS = [step(0, "burst", None, False, 4000.0, 14.0, 17.0, 44000.0),
                 step(1, "ceiling", 40.0, False, 3600.0, 60.0, 90.0, 39600.0),
                 step(2, "bisect", 20.0, True, 2500.0, 10.0, 12.5, 27500.0)]
WINNER_STEPS = [step(0, "burst", None, False, 8000.0, 14.0, 17.0, 88000.0),
                step(1, "ceiling", 60.0, True, 7600.0, 40.0, 50.0, 83600.0),
                step(2, "expand", 75.0, False, 8000.0, 80.0, 100.0, 88000.0)]


def test_each_point_is_its_step_per_gpu_and_one_thousand_over_its_tpot():
    """The decision (tensor parallel 2) first, then vLLM's defaults; every step a point,
    the burst included (no rate); throughputs over the server's GPUs, interactivity 1000 /
    TPOT at the median and p95."""
    st = study((20.0, DEFAULT_STEPS, {}), (60.0, WINNER_STEPS, {"tensor-parallel-size": 2}))
    data = interactivity.of_study(st)
    assert data.per == "GPU" and data.note is None
    winner, defaults = data.curves
    assert (winner.trial, winner.role, winner.gpus) == (1, "decision", 2)
    assert (defaults.trial, defaults.role, defaults.gpus) == (0, "reference", 1)
    assert winner.label == "#1: the decision" and defaults.label == "vLLM defaults #0"
    assert [p.step for p in winner.points] == [0, 1, 2]
    burst, ceiling, _ = winner.points
    assert burst.rate is None and burst.load == 30.0 and burst.kind == "burst"
    assert (ceiling.rate, ceiling.passed) == (60.0, True)
    assert ceiling.output_per_gpu == 3800.0 and ceiling.total_per_gpu == 41800.0
    assert ceiling.total_from == "step"
    assert ceiling.interactivity_median == 25.0 and ceiling.interactivity_p95 == 20.0
    assert defaults.points[2].output_per_gpu == 2500.0
    assert defaults.points[2].interactivity_median == 100.0
    assert winner.missing == defaults.missing == () and data.lines() == []


def test_a_fixed_length_workload_derives_its_total_and_says_so():
    """Steps recorded before their total tokens: each total is its output x (input +
    output) / output tokens per request (1,280 + 128 over 128: 11), the same for every
    request of the workload."""
    old = [step(1, "bisect", 20.0, True, 2500.0, 10.0, 12.5)]
    data = interactivity.of_study(study((20.0, old, {}), (30.0, old, {"max-num-seqs": 64})))
    p = data.curves[0].points[0]
    assert p.total_per_gpu == pytest.approx(2500.0 * 11) and p.total_from == "workload"
    assert data.lines() == ["total tokens derived: the step's output tokens x (input + output) "
                            "/ output tokens per request, the same for every request of its "
                            "workload (#1, vLLM defaults #0)"]


def test_old_steps_keep_the_slos_p95_alone_and_varying_lengths_no_total():
    """Steps before the per-step latencies keep the SLO's TPOT p95 only: no median; a
    workload whose lengths vary gives no total; a step with no TPOT figure is left out."""
    old = [step(0, "burst", None, False, 900.0, p95=11.0),
           step(1, "bisect", 1.0, True, 400.0, p95=8.0),
           step(2, "bisect", 1.5, True, 600.0, figures={"e2el_p95_ms": 900.0})]
    data = interactivity.of_study(study((1.5, old, {}), workload=VARYING))
    (only,) = data.curves
    assert only.role == "decision = reference"
    assert only.label == "vLLM defaults #0: the decision"
    assert [p.step for p in only.points] == [0, 1]
    assert all(p.tpot_median_ms is None and p.interactivity_median is None
               and p.total_per_gpu is None and p.total_from is None for p in only.points)
    assert only.points[1].interactivity_p95 == 125.0
    assert only.missing == (
        "1 step(s) keep no TPOT figure",
        "median TPOT not stored: its steps predate the per-step latencies (p95 only, the "
        "SLO's figure)",
        "total tokens not stored per step, and its workload's requests vary in length: total "
        "left out")


def test_no_decision_draws_the_defaults_alone_and_the_cpu_build_is_per_engine():
    st = study((20.0, DEFAULT_STEPS, {"tensor-parallel-size": 2}), cpu=True)
    recs = records(Snapshot.of(st))
    data = Interactivity.of(recs, None, 0)
    assert data.per == "engine (CPU)" and [c.role for c in data.curves] == ["reference"]
    assert data.curves[0].gpus == 1 and data.curves[0].points[1].output_per_gpu == 3600.0
    assert data.note is not None and data.note.startswith("no decision")
    fig = pergpu.interactivity_figure(st)
    assert fig.layout.title.text == "Throughput per engine (CPU) against interactivity across load"
    none = Interactivity.of([], None, None)
    assert none.curves == () and "did not complete" in (none.note or "")


def test_a_trial_without_a_capacity_search_says_why_it_has_no_points():
    st = optuna.create_study(study_name="f", directions=["maximize"])
    trials.add(st, values=[0.0], constraints={"slo": -1.0}, baseline=DEFAULTS,
               metrics=Measurement.of({"output_throughput": 100.0, "median_tpot_ms": 10.0}),
               measures={"throughput": 100.0, "latency_ms": 10.0, "memory_mib": 1.0})
    (c,) = interactivity.of_study(st).curves
    assert c.points == () and c.missing == (
        "no capacity search: a fixed workload measures one load a trial",)
    page = report_page.build(st)  # the report says so in place of an empty chart
    assert ("<p class='note'>no capacity search: a fixed workload measures one load a trial "
            "(vLLM defaults #0).</p>") in page and 'id="interactivity"' not in page


def test_the_figure_show_json_and_the_report_carry_the_points():
    st = study((20.0, DEFAULT_STEPS, {}), (60.0, WINNER_STEPS, {"tensor-parallel-size": 2}))
    fig = pergpu.interactivity_figure(st)
    drawn = {(t.name, t.xaxis): (list(t.x), list(t.y)) for t in fig.data}
    # The burst is no steady state: the sustained steps only, in order of load.
    assert drawn[("#1: the decision, median TPOT", "x")] == ([25.0, 12.5], [3800.0, 4000.0])
    assert drawn[("#1: the decision, p95 TPOT", "x2")] == ([20.0, 10.0], [41800.0, 44000.0])
    assert drawn[("vLLM defaults #0, median TPOT", "x")] == ([100.0, 1000 / 60], [2500.0, 3600.0])
    hollow = [t for t in fig.data if t.name == "vLLM defaults #0, median TPOT"][0]
    assert list(hollow.marker.symbol) == ["circle", "circle-open"]
    data = Summary.of(st).as_json()["interactivity"]
    assert data["per"] == "GPU" and [c["trial"] for c in data["curves"]] == [1, 0]
    first = data["curves"][0]["points"][1]
    assert first == {"step": 1, "kind": "ceiling", "rate": 60.0, "load": 60.0, "passed": True,
                     "tpot_median_ms": 40.0, "tpot_p95_ms": 50.0, "output_per_gpu": 3800.0,
                     "total_per_gpu": 41800.0, "total_from": "step",
                     "interactivity_median": 25.0, "interactivity_p95": 20.0}
    page = report_page.build(st)
    assert "<h2>Throughput per GPU against interactivity</h2>" in page
    assert 'id="interactivity"' in page and "median_intvty" in page


@pytest.mark.parametrize("name, decided", [("h200-guided-check", 6),
                                           ("qwen3-4b-h200-guided-2", 1)])
def test_a_committed_h200_studys_points_are_its_stored_steps(name, decided):
    """Every point of the decision's and the defaults' curves read back against the step it
    came from: its rate and verdict, its TPOT median and p95 (1000 / TPOT), its output
    tokens/s on one GPU, and its total, 11 times the output for requests of 1,280 tokens in
    and 128 out, as the trial's capacity record says of its own throughputs."""
    st = optuna.load_study(study_name=name, storage=f"sqlite:///{ROOT / 'studies' / name}.db")
    data = Summary.of(st).interactivity
    assert data is not None and data.per == "GPU"
    assert [(c.trial, c.role, c.gpus) for c in data.curves] == [(decided, "decision", 1),
                                                                (0, "reference", 1)]
    by_number = {r.number: r for r in records(Snapshot.of(st))}
    for c in data.curves:
        cap = by_number[c.trial].capacity
        assert cap is not None and len(c.points) == len(cap.steps)
        assert cap.total_token_throughput / cap.output_throughput == pytest.approx(11)
        for p in c.points:
            s = cap.steps[p.step]
            assert (p.kind, p.rate, p.passed, p.load) == (s.kind, s.rate, s.passed, s.load)
            assert p.tpot_median_ms == s.latencies["tpot_median_ms"]
            assert p.tpot_p95_ms == s.latencies["tpot_p95_ms"] == s.figures["tpot_p95_ms"]
            assert p.interactivity_median == 1000 / s.latencies["tpot_median_ms"]
            assert p.output_per_gpu == s.output_throughput
            assert p.total_per_gpu == pytest.approx(11 * s.output_throughput)
            assert p.total_from == "workload"
    # The figure draws the same sustained points.
    fig = pergpu.interactivity_figure(st)
    drawn = {t.name: sorted(zip(t.x, t.y, strict=True)) for t in fig.data if t.xaxis == "x"}
    for c in data.curves:
        sustained = [p for p in c.points if p.rate is not None]
        assert drawn[f"{c.label}, median TPOT"] == sorted(
            (p.interactivity_median, p.output_per_gpu) for p in sustained)


def test_the_decision_trades_interactivity_for_throughput_on_h200_guided_check():
    """What the chart shows there: at its capacity (81.6 req/s) the decision serves about
    1.5x the defaults' output tokens per GPU at theirs (50.1 req/s), each user at about a
    third of the speed (median TPOT 41.6 against 14.6 ms)."""
    st = optuna.load_study(study_name="h200-guided-check",
                           storage=f"sqlite:///{ROOT / 'studies' / 'h200-guided-check.db'}")
    winner, defaults = interactivity.of_study(st).curves
    at_cap = [p for p in winner.points if p.rate and round(p.rate, 1) == 81.6][0]
    theirs = [p for p in defaults.points if p.rate and round(p.rate, 1) == 50.1][0]
    assert at_cap.passed and theirs.passed
    assert at_cap.output_per_gpu / theirs.output_per_gpu == pytest.approx(1.53, abs=0.01)
    assert at_cap.interactivity_median == pytest.approx(24.0, abs=0.1)
    assert theirs.interactivity_median == pytest.approx(68.7, abs=0.1)


def test_a_step_record_keeps_its_total_tokens_when_made_now():
    """Steps the search records now keep the whole step's total tokens/s beside its output
    (`stepverdict.judge`, `vllmbench`); older ones read it as None."""
    assert StepRecord.from_dict({"index": 0}).total_token_throughput is None
    made = StepRecord(index=1, output_throughput=10.0, total_token_throughput=110.0)
    assert made.as_dict()["total_token_throughput"] == 110.0
