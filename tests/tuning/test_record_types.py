"""The trial record's typed values (measures, quality verdict, start-up, memory estimate,
speculation, worker, origin, capacity search) read every committed study and give back
exactly what it stored, key for key and in order: reading a study changes nothing in it,
and `show --json` says what the raw attributes say."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main as cli
from autotune.engine.log import Startup, StartupFigures
from autotune.measure import capacityrecord, capacitytext
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.speculation import Speculation
from autotune.measure.steprecord import StepRecord
from autotune.tuning import trial as trial_mod
from autotune.tuning.quality.verdict import Quality, constraints
from autotune.tuning.records import writers
from autotune.tuning.records.estimate import Estimate
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.origin import BASELINE, RELIEF, SAMPLER, Origin
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord
from autotune.tuning.records.worker import Worker
from tests import trials
from tests.paths import ROOT

STUDIES = sorted((ROOT / "studies").rglob("*.db"))
TYPED = {"measures": Measures, "quality": Quality, "startup": Startup,
         "memory_estimate": Estimate, "speculation": Speculation, "worker": Worker,
         "origin": Origin}


def _same(got: Any, stored: Any) -> None:
    """Equal, and the same JSON: the same keys in the same order."""
    assert got == stored
    assert json.dumps(got) == json.dumps(stored)


def _trials(db: Path) -> list[optuna.trial.FrozenTrial]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (name,) = optuna.get_all_study_names(f"sqlite:///{db}")
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials()


def _capacity(attrs: dict[str, Any]) -> dict[str, Any] | None:
    return (attrs.get("metrics") or {}).get("capacity")


def test_the_committed_studies_are_here():
    assert len(STUDIES) >= 10, STUDIES


@pytest.mark.parametrize("db", STUDIES, ids=[p.stem for p in STUDIES])
def test_every_stored_value_reads_and_writes_back_unchanged(db):
    for t in _trials(db):
        a = t.user_attrs
        for key, kind in TYPED.items():
            if a.get(key) is not None:
                _same(kind.from_dict(a[key]).as_dict(), a[key])
        if cap := _capacity(a):
            _same(CapacityRecord.from_dict(cap).as_dict(), cap)
            for step in cap["steps"]:
                _same(StepRecord.from_dict(step).as_dict(), step)


def test_the_studies_hold_every_kind_and_version():
    """The round trip above covers each typed value, and records of several versions."""
    seen: dict[str, int] = {}
    versions = set()
    for db in STUDIES:
        for t in _trials(db):
            a = t.user_attrs
            versions.add(a.get("record_version") or 1)
            for key in [k for k in TYPED if a.get(k) is not None] + \
                    (["capacity"] if _capacity(a) else []):
                seen[key] = seen.get(key, 0) + 1
            cap = _capacity(a) or {}
            if cap and "bottleneck_step" not in cap:
                seen["capacity before attribution"] = 1
            if a.get("startup") and "phases" not in a["startup"]:
                seen["start-up before phases"] = 1
    assert set(seen) == {*TYPED, "capacity", "capacity before attribution",
                         "start-up before phases"}, seen
    assert len(versions) > 1, versions


@pytest.mark.parametrize("db", STUDIES, ids=[p.stem for p in STUDIES])
def test_the_record_is_typed_and_gives_back_the_stored_dicts(db):
    raw = {t.number: t.user_attrs for t in _trials(db)}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for rec in records(optuna.load_study(study_name=None, storage=f"sqlite:///{db}")):
        a = raw[rec.number]
        assert isinstance(rec.startup, Startup)
        assert rec.measures is None or isinstance(rec.measures, Measures)
        assert rec.quality is None or isinstance(rec.quality, Quality)
        for key, kind in TYPED.items():
            assert getattr(rec, key) is None or isinstance(getattr(rec, key), kind), key
        assert (rec.capacity is None) == (not _capacity(a))
        out = rec.as_dict()  # what `show --trial N --json` prints
        for key in TYPED:
            _same(out[key], a.get(key, {} if key == "startup" else None))
        assert json.dumps(out["metrics"]) == json.dumps(a.get("metrics") or {})
        # what a twin copies is what the trial stored
        if "startup" in a:
            _same(trial_mod.EngineRun.of_record(rec).fields()["startup"].as_dict(), a["startup"])


@pytest.mark.parametrize("db", STUDIES, ids=[p.stem for p in STUDIES])
def test_show_json_is_what_the_raw_attributes_say(db, capsys):
    raw = {t.number: t.user_attrs for t in _trials(db)}
    assert cli.main(["show", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["trials"]
    assert [r["number"] for r in rows] == sorted(raw)
    for row in rows:
        a = raw[row["number"]]
        m, q = a.get("measures") or {}, a.get("quality") or {}
        assert (row["throughput"], row["latency_ms"], row["memory_mib"]) == \
            (m.get("throughput"), m.get("latency_ms"), m.get("memory_mib"))
        assert {k: row["quality"][k] for k in ("passed", "drift", "agreement", "verdict")} == \
            {k: q.get(k) for k in ("passed", "drift", "agreement", "verdict")}
        cap = _capacity(a)
        if not cap:
            assert row["capacity"] is None
            continue
        shown = row["capacity"]
        for key in ("saturated", "stopped"):
            assert shown[key] == cap[key], key
        # the capacity is what the steps at the stored (offered) rate achieved in their
        # steady windows, the failing end what its steps were offered: from the raw steps
        low, high = _achieved(cap, cap["low"], True), _achieved(cap, cap["high"], False)
        assert shown["request_throughput"] == pytest.approx(low or 0.0, rel=1e-12)
        assert shown["output_throughput"] == pytest.approx(
            cap["output_throughput"] * (low / cap["low"] if cap["low"] else 1.0), rel=1e-12)
        assert (shown["low"], shown["high"]) == pytest.approx((low, high), rel=1e-12)
        spread = cap["spread"] or 0.0
        lo = low or 0.0
        hi = high if high is not None else lo
        assert shown["interval"] == pytest.approx([lo * (1 - spread), hi * (1 + spread)])
        assert shown["steps"] == len(cap["steps"])
        assert shown["bottleneck"] == (cap.get("bottleneck") or {}).get("text")
    last = max(raw)  # and one trial in full: its stored fields as they are
    assert cli.main(["show", str(db), "--trial", str(last), "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    for key in (*TYPED, "metrics"):
        if raw[last].get(key) is not None:
            assert json.dumps(full[key]) == json.dumps(raw[last][key]), key


def _achieved(cap: dict[str, Any], rate: float | None, passed: bool) -> float | None:
    """From a stored record's raw steps at `rate`: what the passing ones achieved (as stored,
    else their window's arrivals less the queue's growth, per second), or what the failing
    ones were offered (likewise); `rate` itself where the steps kept no window."""
    if rate is None:
        return None
    got = [s.get("window_achieved_rps" if passed else "window_offered_rps")
           or (b["arrivals"] - (b["growth"] if passed else 0.0)) / s["window_s"]
           for s in cap["steps"] if s["rate"] == rate and s["kind"] != "burst"
           and s["passed"] == passed and (b := s.get("backlog")) and s.get("window_s")]
    return sum(got) / len(got) if got else rate


def test_empty_and_older_dicts_read_at_their_defaults():
    nothing = Measures.from_dict({})
    assert math.isnan(nothing.throughput) and nothing.memory_mib is None
    assert nothing.as_dict() == {}
    # unknown keys are ignored (and not written back); a record made in code has every field
    assert Measures.from_dict({"throughput": 2.0, "later": 1}).as_dict() == {"throughput": 2.0}
    assert Measures(1.0, 2.0, None).as_dict() == \
        {"throughput": 1.0, "latency_ms": 2.0, "memory_mib": None}
    assert Measures.from_dict(Measures(1.0, 2.0, 3.0).as_dict()) == Measures(1.0, 2.0, 3.0)

    failed = Quality.from_dict({"error": "RuntimeError: no reply"})
    assert failed.error == "RuntimeError: no reply" and not failed.checked
    assert failed.passed is None and failed.thresholds == {} and failed.worst == []
    assert failed.as_dict() == {"error": "RuntimeError: no reply"}
    verdict = Quality.from_dict({"drift": 0.5, "agreement": 0.4, "passed": False,
                                 "thresholds": {"drift": 0.1, "agreement": 0.5}})
    assert verdict.checked and verdict.made_reference is None
    assert constraints(verdict) == {"quality": 1.0}  # a record of any version
    assert verdict.verdict is None and verdict.words() == "rejected" and verdict.short() == "0.500"

    assert Startup.from_dict({}).as_dict() == {}
    old = {"kv_cache_tokens": 1000, "compile_s": None}  # before the phases and async flag
    start = Startup.from_dict(old)
    assert start.kv_cache_tokens == 1000 and start.launch is None and start.phases == {}
    assert start.async_scheduling is None and start.as_dict() == old
    figures = StartupFigures(kv_cache_tokens=5)
    made = Startup(**figures.as_dict(), launch="cold", phases={"load": 1.0})
    # a record made in code writes every field: no warm restart is stored as {}
    assert made.as_dict() == {**figures.as_dict(), "launch": "cold", "phases": {"load": 1.0},
                              "warm": {}}

    # a capacity record from before the steady window and the attribution
    burst = {"index": 0, "kind": "burst", "rate": None, "passed": True, "achieved_rps": 9.0,
             "output_throughput": 90.0, "violations": [], "requests": 16, "figures": {},
             "idle_wait_s": 0.0, "duration_s": 0.5}
    stored = {"request_throughput": 4.0, "low": 4.0, "high": 5.0, "spread": None,
              "uncertainty": 0.2, "steps": [burst]}
    cap = CapacityRecord.from_dict(stored)
    assert cap.as_dict() == stored and cap.steps[0].load == 9.0
    assert cap.steps[0].probes == {} and cap.steps[0].backlog is None
    assert cap.limit is None and cap.limiting_step is None
    assert capacityrecord.limit_text(cap) is None and capacityrecord.limiting_probes(cap) == {}
    assert capacityrecord.interval(cap) == (4.0, 5.0)
    assert capacitytext.describe(cap).startswith("4 req/s")
    assert capacitytext.step_rows(cap, ["e2el_p95_ms"])[0][-2:] == ["-", "pass"]
    assert capacityrecord.interval(CapacityRecord.from_dict({})) == (0.0, 0.0)
    assert capacitytext.describe(CapacityRecord.from_dict({})) == "no rate met the SLOs"


def test_a_rate_that_passed_and_then_failed_is_named_unrepeatable():
    """The steps of a real `bench --capacity` beside another pinned worker (2026-12-06): its
    sustained step at 9.54 req/s met the SLOs, the repeat of that rate did not, nor did any
    rate below it. The search then has no capacity, and the line says it could not repeat
    its own result."""
    steps = [{"kind": "burst", "rate": None, "passed": False},
             {"kind": "ceiling", "rate": 9.54, "passed": True},
             {"kind": "expand", "rate": 11.9, "passed": False},
             {"kind": "bisect", "rate": 10.7, "passed": False},
             {"kind": "repeat", "rate": 9.54, "passed": False},
             {"kind": "bisect", "rate": 7.63, "passed": False}]
    cap = CapacityRecord.from_dict({"low": None, "high": 7.63, "steps": steps})
    assert capacityrecord.unrepeated(cap) == [(9.54, 1, 2)]
    assert capacitytext.describe(cap) == (
        "no rate met the SLOs (fails at 7.63 req/s); unrepeatable: 9.54 req/s met them in 1 "
        "of 2 steps")
    # Passing at one rate and failing at another is a bracket, not an unrepeated result.
    steady = CapacityRecord.from_dict({"low": None, "high": 7.63, "steps": steps[:4]})
    assert capacityrecord.unrepeated(steady) == []
    assert capacitytext.describe(steady) == "no rate met the SLOs (fails at 7.63 req/s)"


def test_write_takes_typed_values_and_dicts_alike():
    """`writers.write` stores a typed value as its dict: the same attributes either way, and
    a twin of a record (the facts and values the study loop copies) writes what it read."""
    fields = {"measures": Measures(10.0, 20.0, 30.0),
              "quality": Quality(drift=0.0, agreement=1.0, passed=True,
                                 thresholds={"drift": 0.01, "agreement": 0.5}),
              "startup": Startup(kv_cache_tokens=64, launch="cold", phases={"load": 1.0}),
              "metrics": {"completed": 1}}
    plain = {k: v.as_dict() if hasattr(v, "as_dict") else v for k, v in fields.items()}
    study = optuna.create_study()
    typed_rec = trials.add(study, values=[0.0], **fields)
    dict_rec = trials.add(study, values=[0.0], **plain)
    twin = trial_mod.EngineRun.of_record(dict_rec).fields()  # what the study loop copies
    copy_rec = trials.add(study, values=[0.0], **twin, metrics=dict_rec.metrics,
                          measures=dict_rec.measures, quality=dict_rec.quality)
    attrs = [t.user_attrs for t in study.get_trials()]
    assert attrs[0] == attrs[1]
    assert {k: attrs[2][k] for k in attrs[0]} == attrs[0]  # the copy adds its empty reason
    assert attrs[0]["quality"] == plain["quality"] and attrs[0]["quality_passed"] is True
    for key in ("measures", "quality", "startup"):
        assert getattr(typed_rec, key) == getattr(dict_rec, key) == fields[key], key
    assert isinstance(dict_rec.quality, Quality)
    assert copy_rec.startup == fields["startup"] and copy_rec.measures == fields["measures"]
    bare = TrialRecord(number=0, state=optuna.trial.TrialState.COMPLETE)
    assert bare.startup.as_dict() == {} and bare.as_dict()["startup"] == {}
    assert trial_mod.EngineRun.of_record(bare).fields()["startup"].as_dict() == {}


# The four fields a record once kept as plain dicts, as an older autotune stored them: an
# estimate and a worker missing keys, a relief move's origin, and speculation from before
# `generated_tokens` was counted.
OLDER = {"memory_estimate": {"kv_capacity_tokens": 3840, "max_model_len": 2048,
                             "fits_one_sequence": True, "reason": ""},
         "worker": {"id": "vm-1", "host": "vm", "pid": 12},
         "origin": {"kind": RELIEF, "text": "relieves front_end of #0", "source": 0,
                    "bottleneck": "front_end", "knob": "api-server-count", "before": 1,
                    "after": 2},
         "speculation": {"drafts": 10, "draft_tokens": 40, "accepted_tokens": 25,
                         "accepted_per_position": [0.9, 0.6], "acceptance_rate": 0.625,
                         "mean_acceptance_length": 3.5}}


def test_older_dicts_of_the_newer_typed_fields_read_and_write_back_unchanged():
    study = optuna.create_study()
    trials.add(study, values=[0.0], **OLDER)
    stored = study.get_trials()[0].user_attrs
    rec = records(study)[0]
    est, worker, origin, spec = rec.memory_estimate, rec.worker, rec.origin, rec.speculation
    assert isinstance(est, Estimate) and est.kv_capacity_tokens == 3840
    assert est.weights_bytes == 0 and est.fits_workload is None  # missing: the defaults
    assert isinstance(worker, Worker) and (worker.id, worker.pid, worker.started) == \
        ("vm-1", 12, 0.0)
    assert rec.tried_because is origin and origin.short == \
        "relief #0 front_end: api-server-count 1->2"
    assert isinstance(spec, Speculation) and spec.generated_tokens == 0
    assert spec.acceptance_rate == 0.625 and spec.drafted_share is None
    assert stored["spec_acceptance_length"] == 3.5
    assert stored["tried_because"] == "relieves front_end of #0"
    out = rec.as_dict()  # `show --trial N --json`
    for key, old in OLDER.items():
        _same(stored[key], old)
        _same(out[key], old)
        _same(getattr(rec, key).as_dict(), old)
    _same(writers.queued_again(rec)["origin"], OLDER["origin"])
    # written again from the record (a twin's copy): the same JSON
    trials.add(study, values=[0.0], **{k: getattr(rec, k) for k in OLDER})
    again = study.get_trials()[1].user_attrs
    for key in (*OLDER, "tried_because", "spec_acceptance_rate", "spec_acceptance_length"):
        _same(again[key], stored[key])


def test_the_newer_typed_fields_made_in_code_write_what_they_always_wrote():
    """Every field, as `dataclasses.asdict` gave them: an origin without the figures its
    kind has not, speculation with its computed figures, and an empty object reads as
    none."""
    est = Estimate(1, 2, 3, 4, 5, 4, True, None, "")
    worker = Worker("w0", "host", 7, 1.5)
    baseline = Origin(BASELINE, "baseline vllm-defaults")
    spec = Speculation(8, 32, 20, [0.5], 40)
    study = optuna.create_study()
    trials.add(study, values=[0.0], memory_estimate=est, worker=worker, origin=baseline,
               speculation=spec)
    a = study.get_trials()[0].user_attrs
    _same(a["memory_estimate"], {"weights_bytes": 1, "kv_bytes_per_token": 2,
                                 "kv_budget_bytes": 3, "kv_capacity_tokens": 4,
                                 "max_model_len": 5, "longest_model_len": 4,
                                 "fits_one_sequence": True, "fits_workload": None,
                                 "reason": ""})
    _same(a["worker"], {"id": "w0", "host": "host", "pid": 7, "started": 1.5, "gpu": None})
    _same(a["origin"], {"kind": "baseline", "text": "baseline vllm-defaults"})
    _same(a["speculation"], {"drafts": 8, "draft_tokens": 32, "accepted_tokens": 20,
                             "accepted_per_position": [0.5], "generated_tokens": 40,
                             "acceptance_rate": 0.625, "mean_acceptance_length": 3.5,
                             "drafted_share": 0.5})
    rec = records(study)[0]
    assert (rec.memory_estimate, rec.worker, rec.origin, rec.speculation) == \
        (est, worker, baseline, spec)
    trials.add(study, values=[0.0], **{k: {} for k in OLDER})
    empty = records(study)[1]
    assert empty.memory_estimate is None and empty.worker is None and empty.origin is None
    assert empty.speculation is None and empty.tried_because.kind == SAMPLER
