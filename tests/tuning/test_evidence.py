"""Losers known before launch: a configuration with no more front end than a trial the
front end limited below the best is not launched; nothing else is condemned on evidence."""

from __future__ import annotations

from typing import Any

from optuna.trial import TrialState

from autotune import _reasons as reasons
from autotune.measure import bottleneck as bn
from autotune.measure.measurement import Measurement
from autotune.tuning import study as study_mod
from autotune.tuning import trial as trial_mod
from autotune.tuning.policy.evidence import predicted_loser
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord
from tests import canned


def capacity_trial(number: int, low: float, high: float, kind: str,
                   flags: dict[str, Any] | None = None, high_open: bool = False
                   ) -> TrialRecord:
    cap = {"request_throughput": low, "low": low, "high": None if high_open else high,
           "bottleneck": {"kind": kind, "text": f"{kind} at the knee", "valid": True},
           "steps": [{"index": 0, "kind": "ceiling", "rate": low, "passed": True}]}
    return TrialRecord(number, TrialState.COMPLETE, values=(0.0,), flags=flags or {},
                       constraints={"slo:ttft_p95_ms": -1.0},
                       metrics=Measurement.of({"capacity": cap}))


DEFAULTS = capacity_trial(0, 68.0, 73.2, bn.FRONT_END)  # 1 API server: the front end, 68
BEST = capacity_trial(1, 91.5, 97.3, bn.ENGINE_CORE, {"api-server-count": 2})


def test_no_more_front_end_than_a_front_end_bound_loser_is_a_loser():
    why = predicted_loser({"max-num-seqs": 128, "enable-prefix-caching": False},
                          [DEFAULTS, BEST], BEST)
    assert why is not None and why.startswith("the front end limited #0 at ")
    assert "below the best (#1, " in why and "api-server-count 1, stream-interval 1" in why
    # the same front end spelled out, and fewer tokens per event (more events to write)
    assert predicted_loser({"api-server-count": 1, "stream-interval": 1}, [DEFAULTS, BEST],
                           BEST) is not None


def test_more_of_what_relieves_the_front_end_gets_launched():
    assert predicted_loser({"api-server-count": 2}, [DEFAULTS, BEST], BEST) is None
    assert predicted_loser({"stream-interval": 4}, [DEFAULTS, BEST], BEST) is None


def test_evidence_must_lie_below_the_best_beyond_its_interval():
    near = capacity_trial(0, 88.0, 92.0, bn.FRONT_END)  # overlaps the best's 91.5-97.3
    assert predicted_loser({}, [near, BEST], BEST) is None
    floor = capacity_trial(0, 68.0, 0.0, bn.FRONT_END, high_open=True)  # never failed
    assert predicted_loser({}, [floor, BEST], BEST) is None


def test_other_limits_carry_no_evidence_to_other_configurations():
    gpu = capacity_trial(0, 40.0, 44.0, bn.GPU)
    assert predicted_loser({}, [gpu, BEST], BEST) is None
    assert predicted_loser({}, [DEFAULTS], None) is None  # no best yet


def test_the_study_prunes_a_predicted_loser_without_launching_it(tmp_path):
    """The loop: vLLM's defaults (front-end bound, 68 req/s), then two API servers (91.5),
    then one API server again with other flags: pruned `predicted_below_best`, not
    launched (a grid sampler over the space gives the points in order)."""
    sc = canned.scenario(
        name="evidence", space={"api-server-count": {"choices": [2, 1]},
                                "max-num-seqs": {"choices": [8]}},
        workload={"kind": "random", "num_requests": 16, "input_len": 32, "output_len": 16,
                  "mode": "capacity"},
        baselines=[], relief={"enabled": False}, sampler={"name": "grid", "seed": 0})
    launched: list[dict[str, Any]] = []

    def runner(scenario, model, flags, trial_dir, **_):
        launched.append(dict(flags))
        servers = flags.get("api-server-count", 1)
        low, high, kind = (68.0, 73.2, bn.FRONT_END) if servers == 1 else \
            (91.5, 97.3, bn.ENGINE_CORE)
        cap = {"request_throughput": low, "output_throughput": low * 16, "low": low,
               "high": high, "bottleneck": {"kind": kind, "text": kind, "valid": True},
               "steps": []}
        summary = Measurement.of({"completed": 16, "failed": 0, "output_throughput": low * 16,
                                  "request_throughput": low, "p95_ttft_ms": 10.0,
                                  "capacity": cap})
        return trial_mod.Outcome(trial_mod.COMPLETE, summary=summary,
                                 facts=trial_mod.EngineRun(flags, timings={"startup_s": 0.0}))

    shared = study_mod.open_study(sc, f"sqlite:///{tmp_path / 'evidence.db'}")
    study_mod.loop(study_mod.RunContext(shared, sc, "/m", tmp_path / "evidence",
                                        runner=runner), trials=3)
    recs = records(shared.study)
    assert [f.get("api-server-count", 1) for f in launched] == [1, 2]  # defaults, then 2
    loser = recs[2]
    assert loser.flags.get("api-server-count") == 1
    assert loser.state == TrialState.PRUNED and loser.reason == reasons.PREDICTED_BELOW_BEST
    assert loser.launched is False and (loser.detail or "").startswith(
        "the front end limited #0")
