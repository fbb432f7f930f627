"""The decision a study gives (`autotune.results._decision`): on committed studies, on studies
built record by record, and when there is none, `tune`'s last line and exit code."""

from __future__ import annotations

import json
import math
import shutil

import optuna
import pytest
from optuna.trial import TrialState

from autotune import _reasons as reasons
from autotune.cli import _tune as tune_cli
from autotune.cli.main import main
from autotune.measure import capacityrecord
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.results import _decision as decision
from autotune.results import cost
from autotune.results.summary import Summary
from autotune.tuning.records.snapshot import Snapshot, records
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord
from tests import trials
from tests.paths import ROOT

GUIDED = ROOT / "studies" / "qwen3-4b-h200-guided-2.db"


def _cap(low: float, high: float | None, spread: float = 0.0) -> dict:
    return {"request_throughput": low, "output_throughput": low * 100, "low": low, "high": high,
            "spread": spread, "uncertainty": 0.05}


def _study(*caps: dict | None, overrides: tuple[dict, ...] = ()) -> optuna.Study:
    """VLLM's defaults with the first capacity, then one searched trial per other one (its
    flags from `overrides`); weighted scores from the capacities."""
    st = optuna.create_study(study_name="s", directions=["maximize"])
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"},
                                  "objective": {"slos": {"e2el_p95_ms": 2500}}})
    for i, cap in enumerate(caps):
        flags = overrides[i - 1] if i else {}
        fields = {"baseline": DEFAULTS} if i == 0 else {}
        if cap is None:
            trials.add(st, TrialState.PRUNED, flags=flags, reason=reasons.OOM,
                       detail="CUDA out of memory", **fields)
            continue
        score = math.log(cap["low"] / caps[0]["low"]) if caps[0] else 0.0
        trials.add(st, values=[score], constraints={"slo": -1.0}, flags=flags,
                   metrics=Measurement.of({"capacity": cap, "output_throughput": cap["low"] * 100}),
                   measures={"throughput": cap["low"] * 100, "latency_ms": 100.0,
                             "memory_mib": 1000.0}, gain=math.exp(score) - 1, **fields)
    return st


def test_a_committed_h200_study_decides_by_its_capacity_ratio():
    found, none = decision.of_study(optuna.load_study(study_name="qwen3-4b-h200-guided-2",
                                                      storage=f"sqlite:///{GUIDED}"),
                                    cost.Price(), None)
    assert none is None and found is not None
    assert found.overrides == {"api-server-count": 2}
    assert found.ratio is not None and found.ratio.verdict == "gain"
    lines = found.lines()
    assert lines[0].startswith("decision: trial #1 ") and "--api-server-count 2" in lines[0]
    # the capacities are the rates achieved in the steady windows (91.5 and 68.2 req/s
    # offered by the search)
    assert lines[1].startswith("  capacity at SLO (TTFT p95 ≤ 500 ms, TPOT p95 ≤ 75 ms): 93 "
                               "req/s") and "1.34x vLLM defaults at 69.1 req/s" in lines[1]
    assert lines[-1].startswith("  score +0.0451")  # the weighted score last, by that name


def test_a_win_outside_the_noise_is_a_gain_with_its_interval():
    st = _study(_cap(10.0, 11.0), _cap(20.0, 21.0), overrides=({"max-num-seqs": 16},))
    found, _ = decision.of_study(st, cost.Price(), None)
    assert found is not None and found.trial == 1 and not found.is_reference
    ratio = found.ratio
    assert ratio is not None and ratio.ratio == pytest.approx(2.0)
    assert (ratio.low, ratio.high) == (pytest.approx(20 / 11), pytest.approx(2.1))
    assert "2.00x vLLM defaults at 10 req/s (1.82-2.10x: gain)" in found.lines()[1]


def test_a_tie_keeps_vllms_defaults_and_says_so():
    st = _study(_cap(10.0, 12.0), _cap(11.0, 12.5), overrides=({"max-num-seqs": 16},))
    found, _ = decision.of_study(st, cost.Price(), None)
    assert found is not None and found.trial == 0 and found.is_reference
    assert found.lines()[0].startswith("decision: keep vLLM's defaults (trial #0")
    assert "1.00x vLLM defaults: it is their own" in found.lines()[1]


def test_cost_and_replicas_ride_in_the_decision():
    st = _study(_cap(10.0, 11.0), _cap(20.0, 21.0), overrides=({"max-num-seqs": 16},))
    found, _ = decision.of_study(st, cost.Price(gpu_hour=3.6, source="--gpu-hour"), 50.0)
    assert found is not None and found.cost is not None
    assert "3 replica(s) of 1 GPU for 50 req/s (vLLM defaults: 5)" in found.cost
    assert "per million output tokens" in found.cost


def test_no_feasible_trial_names_the_shared_reason_and_the_fix():
    st = _study(None, None, None, overrides=({"max-num-seqs": 16}, {"max-num-seqs": 64}))
    found, none = decision.of_study(st, cost.Price(), None)
    assert found is None and none is not None
    line = none.line()
    assert line.startswith("no answer: 3 of 3 trials ended as oom (out of memory")
    assert "CUDA out of memory" in line and "fix: lower gpu-memory-utilization" in line
    summary = Summary.of(st)
    assert summary.decision is None and summary.no_answer == none
    assert tune_cli._answered(summary) == tune_cli.NO_ANSWER == 4
    assert summary.as_json()["no_answer"]["reason"] == reasons.OOM


def test_infeasible_trials_are_an_slo_missed():
    st = optuna.create_study(study_name="s", directions=["maximize"])
    trials.add(st, values=[0.0], constraints={"slo": 1.0}, flags={}, baseline=DEFAULTS,
               measures={"throughput": 1.0, "latency_ms": 1.0, "memory_mib": 1.0})
    none = decision.no_answer(records(st))
    assert none.reason == "SLO missed" and "loosen the SLO" in none.fix


def test_a_complete_capacity_search_without_a_rate_is_not_an_answer():
    """A study made before such trials were pruned: vLLM's defaults complete, their SLO
    figures met on the gentlest failing step, and no rate passed. It is not feasible, so no
    decision rests on it and `explain` refuses it before launching anything."""
    from autotune.errors import ConfigError
    from autotune.tuning import ablation

    st = optuna.create_study(study_name="s", directions=["maximize"])
    trials.add(st, values=[0.0], constraints={"slo": -1.0}, flags={}, baseline=DEFAULTS,
               metrics=Measurement.of({"capacity": {**_cap(0.0, 2.0), "low": None}}),
               measures={"throughput": 0.0, "latency_ms": 100.0, "memory_mib": 1000.0})
    rec = records(st)[0]
    assert rec.state == TrialState.COMPLETE and rec.constraints and not rec.feasible
    found, none = decision.of_study(st, cost.Price(), None)
    assert found is None and none is not None
    with pytest.raises(ConfigError, match="trial 0 is not a feasible completed trial"):
        ablation.target(st, 0)


def test_a_search_with_no_passing_rate_says_its_fix():
    st = optuna.create_study(study_name="s", directions=["maximize"])
    trials.add(st, TrialState.PRUNED, flags={}, baseline=DEFAULTS,
               reason=reasons.NO_PASSING_RATE)
    none = decision.no_answer(records(st))
    assert none.reason == reasons.NO_PASSING_RATE and "capacity.max_steps" in none.fix
    assert "met the SLOs while keeping pace" in none.line()


def test_show_puts_the_decision_on_its_first_lines(tmp_path, capsys):
    db = tmp_path / "s.db"
    shutil.copy(GUIDED, db)
    assert main(["show", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("decision: trial #1 ")
    assert any("1.34x vLLM defaults" in line for line in lines[1:5])
    assert main(["show", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"]["trial"] == 1 and data["decision"]["ratio"]["verdict"] == "gain"
    assert "no_answer" not in data


def test_the_ratio_of_two_capacity_records():
    a = CapacityRecord(request_throughput=20.0, low=20.0, high=22.0, spread=0.0)
    b = CapacityRecord(request_throughput=10.0, low=10.0, high=11.0, spread=0.0)
    r = capacityrecord.ratio(a, b)
    assert r is not None and (r.ratio, r.verdict) == (2.0, "gain")
    assert capacityrecord.ratio(b, a).verdict == "loss"  # type: ignore[union-attr]
    assert capacityrecord.ratio(a, CapacityRecord()) is None  # no capacity: no ratio


def test_a_floor_is_open_above_so_two_floors_are_not_ranked():
    """A search whose every sustained rate passed (max_expand 1 stops it at the burst's
    rate) never found where the SLOs break. Two such searches 0.1 % apart with one step
    each were "1.00x (1.00-1.00x: gain)" and decided on the configuration with an override
    (a CPU study, 2026-12-06); its capacity may lie anywhere above its last rate."""
    tuned = CapacityRecord(request_throughput=76.8, low=76.8, high=None, saturated=True)
    defaults = CapacityRecord(request_throughput=76.7, low=76.7, high=None, saturated=True)
    assert capacityrecord.bounds(tuned) == (76.8, None)
    assert capacityrecord.tied(tuned, defaults) and capacityrecord.tied(defaults, tuned)
    both = capacityrecord.ratio(tuned, defaults)
    assert both is not None and (both.low, both.high, both.verdict) == \
        (0.0, None, "within noise")
    assert both.text("vLLM defaults") == \
        "1.00x vLLM defaults at 76.7 req/s (unbounded: both floors: within noise)"
    # a floor above a bracket it clears: a gain with no upper bound ...
    bracketed = CapacityRecord(request_throughput=30.0, low=30.0, high=33.0, spread=0.1)
    above = capacityrecord.ratio(tuned, bracketed)
    assert above is not None and above.verdict == "gain" and above.high is None
    assert above.span() == f"at least {76.8 / 36.3:.2f}x"
    assert not capacityrecord.tied(tuned, bracketed)
    # ... and a bracket against a floor: never a gain, at most its high over the floor
    below = capacityrecord.ratio(bracketed, defaults)
    assert below is not None and below.low == 0.0 and below.verdict == "loss"
    assert below.span() == f"at most {33.0 * 1.1 / 76.7:.2f}x"
    assert capacityrecord.tied(CapacityRecord(request_throughput=80, low=80, high=90),
                               defaults)  # a floor at 76.7 may be anywhere above it


def test_a_record_of_the_defaults_reads_as_such():
    snap = Snapshot.of(_study(_cap(10.0, 11.0)))
    rec: TrialRecord = snap.trials[0]
    assert decision.capacity_ratio(rec, rec) is None  # itself: no ratio, "its own"


def _held_back(tmp_path, defaults_high: float = 11.8) -> str:
    """The held-back case's shape (issue 62), as a study database: vLLM's defaults at 8.87
    req/s (8.87-`defaults_high`), #1 (max-num-seqs 8, block-size 32) at 14.8 (14.8-18.5).
    #1's weighted score is the worse (-11.5 %: its TTFT p95 at its own, higher, capacity is
    longer), so the score would keep the defaults; capacity at SLO ranks #1 first."""
    url = f"sqlite:///{tmp_path / 'held.db'}"
    st = optuna.create_study(study_name="held", storage=url, direction="maximize")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"},
                                  "objective": {"slos": {"ttft_p95_ms": 500}}})
    for flags, (low, high), ttft, score in (
            ({}, (8.87, defaults_high), 120.0, 0.0),
            ({"max-num-seqs": 8, "block-size": 32}, (14.8, 18.5), 290.0, math.log(0.885))):
        cap = {"request_throughput": low, "output_throughput": low * 128, "low": low,
               "high": high, "spread": 0.0, "uncertainty": (high - low) / high, "rate": low}
        trials.add(st, values=[score], constraints={"slo": -1.0}, flags=flags,
                   metrics=Measurement.of({"capacity": cap, "output_throughput": low * 128,
                                        "p95_ttft_ms": ttft}),
                   measures={"throughput": low * 128, "latency_ms": ttft,
                             "memory_mib": 1000.0}, gain=math.exp(score) - 1,
                   command=["vllm", "serve", "/models/q"], engine_version="vllm-0.26.0",
                   device={"name": "NVIDIA H200"}, quality={"drift": 0.0, "passed": True},
                   **({} if flags else {"baseline": DEFAULTS}))
    return str(tmp_path / "held.db")


def test_the_faster_capacity_is_the_one_winner_of_every_view(tmp_path, capsys, monkeypatch):
    """Capacity at SLO decides, not the weighted score: the decision, `show`'s capacity
    table (first, no `=` and not `tied`), `show --json`, `export`, `validate` and
    `explain` all name #1, whose interval lies wholly above the defaults'."""
    from autotune.tuning import ablation, ranking
    from autotune.verify import validate

    db = _held_back(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # the whole table, the decision on unwrapped lines
    assert main(["show", db]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.startswith("decision: trial #1 (") and "--max-num-seqs 8 --block-size 32" in head
    assert "keep vLLM's defaults" not in out and "cannot separate" not in out
    assert "1.67x vLLM defaults at 8.87 req/s (1.25-2.09x: gain)" in out
    table = [line for line in out.splitlines() if "req/s" not in line and "│" in line]
    rows = [[cell.strip() for cell in line.split("│")[1:4]] for line in table
            if line.split("│")[2].strip() in ("0", "1")]
    assert rows == [["1", "1", ""], ["2", "0", "vllm-defaults"]]  # no `=` on either
    assert main(["show", db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"]["trial"] == 1 and data["decision"]["by"] == "capacity"
    assert [(r["number"], r["tied"]) for r in data["ranking"]] == [(1, False), (0, False)]
    assert all(t["tied_with_best"] is None for t in data["trials"])
    assert main(["export", db, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trial"] == 1
    st = optuna.load_study(study_name="held", storage=f"sqlite:///{db}")
    for policy in ("balanced", "max-throughput"):  # both are the capacity rule here
        assert ranking.choose(st, policy=policy).number == 1
    assert ranking.choose(st, policy="min-latency").number == 0
    assert validate.pick(st)[0].number == 1
    assert ablation.target(st).number == 1


def test_a_capacity_still_too_uncertain_cannot_be_told_apart_in_words(tmp_path):
    """The defaults' interval at ±40 % (8.87-14.8 req/s) after the search measured it
    again: it overlaps #1's, yet does not tie with it (which would keep the defaults);
    #1 is chosen, and the decision says the two cannot be told apart."""
    st = optuna.load_study(study_name="held", storage=f"sqlite:///{_held_back(tmp_path, 14.8)}")
    found, _ = decision.of_study(st, cost.Price(), None)
    assert found is not None and found.trial == 1
    assert found.ratio is not None and found.ratio.verdict == "within noise"
    said = found.lines()[2]
    assert said.startswith("  cannot be told apart from #0 (baseline vllm-defaults): their "
                           "intervals overlap, and a capacity is still too uncertain to "
                           "rank by (#0's ±40.1%")
    summary = Summary.of(st)
    assert [(r.number, r.tied, r.too_uncertain) for r in summary.ranking] == \
        [(1, False, False), (0, False, True)]


def test_a_fixed_workload_says_it_was_ranked_by_the_weighted_score():
    st = optuna.create_study(study_name="s", directions=["maximize"])
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}})  # no SLO: a fixed workload
    for score, flags in ((0.0, {}), (0.2, {"max-num-seqs": 16})):
        trials.add(st, values=[score], constraints={"slo": -1.0}, flags=flags,
                   measures={"throughput": 100.0 + score, "latency_ms": 100.0,
                             "memory_mib": 1000.0}, gain=math.exp(score) - 1,
                   **({} if flags else {"baseline": DEFAULTS}))
    found, _ = decision.of_study(st, cost.Price(), None)
    assert found is not None and found.trial == 1 and found.by == "score"
    assert found.lines()[0] == ("decision: trial #1 (sampler): --max-num-seqs 16; ranked by "
                                "the weighted score (a fixed workload measures no capacity "
                                "at SLO)")
