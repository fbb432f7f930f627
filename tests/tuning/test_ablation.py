"""The ablation's decisions on hand-built capacities: which flags carry the gain, the
smallest tied configuration, and how its trials are kept (the engine path is
tests/tuning/test_explain_engine.py)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune._device import DeviceSeen
from autotune.errors import ConfigError
from autotune.measure.measurement import Measurement
from autotune.tuning import ablation, ranking
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.origin import ABLATION, Origin
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord
from tests.paths import ROOT

H200 = DeviceSeen("NVIDIA H200", 143771.0)


def cap(low: float | None, high: float | None) -> dict[str, Any]:
    return {"capacity": {"request_throughput": low or 0.0, "low": low, "high": high,
                         "spread": 0.0, "steps": []}}


def add(st: optuna.Study, flags: dict[str, Any], low: float | None, high: float | None,
        **more: Any) -> TrialRecord:
    state = TrialState.COMPLETE if low else TrialState.PRUNED
    return writers.append(st, state, [low or 0.0], {"slo": -1.0 if low else 1.0},
                          flags=flags, metrics=cap(low, high), device=H200,
                          engine_version="vllm-0.26.0",
                          measures={"throughput": (low or 0.0) * 100, "latency_ms": 300.0,
                                    "memory_mib": 1000.0}, **more)


@pytest.fixture
def study():
    st = optuna.create_study(study_name="abl", direction="maximize")
    studyrecord.set_engine_defaults(st, {"gpu-memory-utilization": 0.92})
    add(st, {}, 50.0, 55.0, baseline=DEFAULTS)  # 0: vLLM's defaults
    add(st, {"api-server-count": 4, "stream-interval": 8, "max-num-seqs": 1024,
             "gpu-memory-utilization": 0.92}, 80.0, 88.0)  # 1: the winner
    return st


def measuring(st: optuna.Study, outcomes: dict[frozenset[str], tuple[float | None, float]]):
    """`measure` that records each configuration with the capacity `outcomes` gives the
    set of the winner's real overrides it keeps."""
    calls: list[dict[str, Any]] = []

    def measure(flags: dict[str, Any], origin: Origin, again: bool) -> TrialRecord:
        calls.append(flags)
        kept = frozenset(k for k in ("api-server-count", "stream-interval") if k in flags)
        low, high = outcomes.get(kept, (80.0, 88.0))  # the winner's: its control
        return add(st, flags, low, high, origin=origin.as_dict())

    return measure, calls


def test_the_flag_that_does_not_matter_goes(study):
    winner = ranking.feasible_best(study)
    measure, calls = measuring(study, {
        frozenset({"stream-interval"}): (52.0, 56.0),  # without api-server-count: the defaults
        frozenset({"api-server-count"}): (78.0, 86.0),  # without stream-interval: tied
    })
    found = ablation.ablate(study, winner, measure)
    # the control (the winner again), then the two real overrides, one run each; flags at
    # vLLM's effective defaults (max-num-seqs 1024 on an H200, the parser's 0.92) stay
    assert len(calls) == 3 and calls[0] == winner.flags
    assert all("max-num-seqs" in c for c in calls)
    assert found.control is not None and found.control_tied
    parts = {p.flag: p for p in found.parts}
    api, si = parts["api-server-count"], parts["stream-interval"]
    assert not api.tied and si.tied
    assert api.share == pytest.approx((80 - 52) / 30)  # lost / gained, req/s
    assert (api.share_low, api.share_high) == (pytest.approx((80 - 56) / 30),
                                               pytest.approx((88 - 52) / 30))
    assert api.default == 1 and "of the gain" in api.words()
    assert found.minimal == parts["stream-interval"].trial
    assert found.minimal_flags == {"api-server-count": 4}
    assert "smallest configuration tied with #1" in "\n".join(found.lines())
    # kept in the study with their origin, and the smallest tied one is what ships
    ran = records(study)[found.minimal]
    assert ran.tried_because.kind == ABLATION and ran.tried_because.source == 1
    assert ran.tried_because.text == "ablation of #1: without stream-interval 8"
    assert ranking.choose(study).number == found.minimal


def test_flags_that_go_alone_but_not_together_go_one_after_another(study):
    winner = ranking.feasible_best(study)
    measure, calls = measuring(study, {
        frozenset({"stream-interval"}): (79.0, 87.0),  # each alone can go ...
        frozenset({"api-server-count"}): (77.0, 85.0),
        frozenset(): (50.0, 55.0),  # ... not both
    })
    found = ablation.ablate(study, winner, measure)
    # the control, one each, both together, then the second from the least loss
    assert len(calls) == 5 and found.together is not None
    assert calls[3].keys().isdisjoint({"api-server-count", "stream-interval"})
    assert found.minimal_flags == {"stream-interval": 8}


def test_a_run_pruned_below_the_winner_carries_at_least_its_gap(study):
    winner = ranking.feasible_best(study)
    measure, _ = measuring(study, {
        frozenset({"stream-interval"}): (None, 60.0),  # failed at 80 and at 64: pruned
        frozenset({"api-server-count"}): (81.0, 90.0),
    })
    found = ablation.ablate(study, winner, measure)
    api = next(p for p in found.parts if p.flag == "api-server-count")
    assert api.at_least and api.share is None
    assert api.share_low == pytest.approx((80 - 60) / 30)
    assert "at least 67%" in api.words()
    # the explanation reads back as it was stored
    studyrecord.store_explanation(study, 1, found.as_dict())
    assert ablation.stored(study, 1) == found
    assert ablation.latest(study) is not None


def test_every_flag_matters_and_the_winner_stays(study):
    winner = ranking.feasible_best(study)
    measure, calls = measuring(study, {
        frozenset({"stream-interval"}): (52.0, 56.0),
        frozenset({"api-server-count"}): (60.0, 66.0),
    })
    found = ablation.ablate(study, winner, measure)
    assert found.minimal == winner.number and len(calls) == 3
    assert "every flag matters" in found.lines()[-1]


def test_a_budget_that_ends_early_says_so(study):
    winner = ranking.feasible_best(study)
    measure, calls = measuring(study, {frozenset({"stream-interval"}): (52.0, 56.0)})
    left = iter([True, True, False])
    found = ablation.ablate(study, winner, measure, room=lambda: next(left))
    assert len(calls) == 2 and not found.complete  # the control and one flag
    assert "stopped before it was complete" in found.lines()[-1]


def test_only_a_capacity_trial_is_explained():
    st = optuna.create_study(study_name="fixed", direction="maximize")
    rec = writers.append(st, TrialState.COMPLETE, [1.0], {"slo": -1.0},
                         flags={"max-num-seqs": 8}, metrics=Measurement())
    with pytest.raises(ConfigError, match="no capacity at SLO"):
        ablation.ablate(st, rec, lambda flags, origin, again: rec)


def rejected(st: optuna.Study, flags: dict[str, Any], origin: Origin,
             low: float = 82.0) -> TrialRecord:
    """A completed run whose capacity is fine and whose answers the guardrail rejected."""
    return writers.append(st, TrialState.COMPLETE, [0.1], {"quality": 1.0, "slo": -1.0},
                          flags=flags, metrics=cap(low, low * 1.1), device=H200,
                          quality={"passed": False, "drift": 0.014, "verdict": "worse"},
                          measures={"throughput": low * 100, "latency_ms": 300.0,
                                    "memory_mib": 1000.0}, origin=origin.as_dict())


def test_a_run_the_guardrail_rejects_keeps_its_flag(study):
    """Without the flag the capacity was as high, but the guardrail judged the answers
    worse (while it passed the winner's own configuration again): the flag stays."""
    winner = ranking.feasible_best(study)

    def measure(flags: dict[str, Any], origin: Origin, again: bool) -> TrialRecord:
        if again:
            return add(study, flags, 80.0, 88.0, origin=origin.as_dict())
        if "stream-interval" in flags:  # without api-server-count: slower, feasible
            return add(study, flags, 52.0, 56.0, origin=origin.as_dict())
        return rejected(study, flags, origin)

    found = ablation.ablate(study, winner, measure)
    si = next(p for p in found.parts if p.flag == "stream-interval")
    assert not si.tied and si.rejected.startswith("quality")
    assert "stays: without it the run was rejected (quality" in si.words()
    assert found.minimal == winner.number and not found.quality_void


def test_a_reference_that_rejects_the_winner_itself_is_not_held_against_the_runs(study):
    """As on the H200 (h200-guided-check, 2026-12-02, a reference made on another lent
    machine): when the control, the winner's very configuration, fails the guardrail, the
    reference does not hold there, and a run rejected on quality alone can still tie."""
    winner = ranking.feasible_best(study)

    def measure(flags: dict[str, Any], origin: Origin, again: bool) -> TrialRecord:
        if again or "api-server-count" in flags:
            return rejected(study, flags, origin, 84.0)
        return add(study, flags, 52.0, 56.0, origin=origin.as_dict())

    found = ablation.ablate(study, winner, measure)
    assert found.quality_void and found.control_rejected.startswith("quality")
    assert found.minimal_flags == {"api-server-count": 4}
    assert any("its reference does not hold on this machine" in line for line in found.lines())


def test_explain_refuses_bad_input_in_one_line(tmp_path):
    """Before any engine: a missing study, a trial that does not exist."""
    import shutil
    import subprocess
    import sys

    db = tmp_path / "guided.db"
    shutil.copy(ROOT / "studies" / "h200-guided-check.db", db)
    for argv, message in ((["nosuch"], "no study database 'nosuch'"),
                          ([str(db), "--trial", "99"], "explain: no trial 99 (the study has")):
        proc = subprocess.run([sys.executable, "-m", "autotune", "explain", *argv,
                               "--studies-dir", str(tmp_path)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_winner_that_changes_nothing_launches_nothing_and_says_so():
    """vLLM's defaults won: there is no flag to take away, and no engine is started (the
    explanation said "every flag matters" and announced runs it never made)."""
    st = optuna.create_study(study_name="abl", direction="maximize")
    add(st, {}, 50.0, 55.0, baseline=DEFAULTS)
    winner = ablation.target(st)
    assert ablation.real_overrides(st, winner) == {}
    calls: list[Any] = []
    found = ablation.ablate(st, winner, lambda *a: calls.append(a))  # type: ignore[arg-type]
    assert calls == [] and found.minimal == winner.number
    assert found.lines() == ["trial #0 at 50.0 req/s changes nothing from vLLM's effective "
                             "defaults: no flag to take away, no engine launched"]
