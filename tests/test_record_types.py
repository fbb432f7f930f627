"""The trial record's typed values (measures, quality verdict, start-up, capacity search)
read every committed study and give back exactly what it stored, key for key and in order:
reading a study changes nothing in it, and `show --json` says what the raw attributes say."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.cli import main as cli
from autotune.engine.log import Startup, StartupFigures
from autotune.measure import capacity
from autotune.measure.capacity import CapacityRecord, StepRecord
from autotune.tuning import record
from autotune.tuning import trial as trial_mod
from autotune.tuning.policy.objective import Measures
from autotune.tuning.quality import guardrail
from autotune.tuning.quality.guardrail import Quality
from autotune.tuning.record import TrialRecord

ROOT = Path(__file__).resolve().parent.parent
STUDIES = sorted((ROOT / "studies").rglob("*.db"))
TYPED = {"measures": Measures, "quality": Quality, "startup": Startup}


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
    for rec in record.records(optuna.load_study(study_name=None, storage=f"sqlite:///{db}")):
        a = raw[rec.number]
        assert isinstance(rec.startup, Startup)
        assert rec.measures is None or isinstance(rec.measures, Measures)
        assert rec.quality is None or isinstance(rec.quality, Quality)
        assert (rec.capacity is None) == (not _capacity(a))
        out = rec.as_dict()  # what `show --trial N --json` prints
        for key in TYPED:
            _same(out[key], a.get(key, {} if key == "startup" else None))
        assert json.dumps(out["metrics"]) == json.dumps(a.get("metrics") or {})
        # what a twin copies is what the trial stored
        if "startup" in a:
            _same(trial_mod.Facts.of_record(rec).fields()["startup"].as_dict(), a["startup"])


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
        for key in ("request_throughput", "output_throughput", "low", "high", "uncertainty",
                    "saturated", "stopped"):
            assert shown[key] == cap[key], key
        spread = cap["spread"] or 0.0
        low = cap["low"] or 0.0
        high = cap["high"] if cap["high"] is not None else low
        assert shown["interval"] == [low * (1 - spread), high * (1 + spread)]
        assert shown["steps"] == len(cap["steps"])
        assert shown["bottleneck"] == (cap.get("bottleneck") or {}).get("text")
    last = max(raw)  # and one trial in full: its stored fields as they are
    assert cli.main(["show", str(db), "--trial", str(last), "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    for key in (*TYPED, "metrics"):
        if raw[last].get(key) is not None:
            assert json.dumps(full[key]) == json.dumps(raw[last][key]), key


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
    assert guardrail.constraints(verdict) == {"quality": 1.0}  # a record of any version
    assert verdict.verdict is None and verdict.words() == "rejected" and verdict.short() == "0.500"

    assert Startup.from_dict({}).as_dict() == {}
    old = {"kv_cache_tokens": 1000, "compile_s": None}  # before the phases and async flag
    start = Startup.from_dict(old)
    assert start.kv_cache_tokens == 1000 and start.launch is None and start.phases == {}
    assert start.async_scheduling is None and start.as_dict() == old
    figures = StartupFigures(kv_cache_tokens=5)
    made = Startup(**figures.as_dict(), launch="cold", phases={"load": 1.0})
    assert made.as_dict() == {**figures.as_dict(), "launch": "cold", "phases": {"load": 1.0}}

    # a capacity record from before the steady window and the attribution
    burst = {"index": 0, "kind": "burst", "rate": None, "passed": True, "achieved_rps": 9.0,
             "output_throughput": 90.0, "violations": [], "requests": 16, "figures": {},
             "idle_wait_s": 0.0, "duration_s": 0.5}
    stored = {"request_throughput": 4.0, "low": 4.0, "high": 5.0, "spread": None,
              "uncertainty": 0.2, "steps": [burst]}
    cap = CapacityRecord.from_dict(stored)
    assert cap.as_dict() == stored and cap.steps[0].load == 9.0
    assert cap.steps[0].probes == {} and cap.steps[0].backlog == {}
    assert cap.limit is None and cap.limiting_step is None
    assert capacity.limit_text(cap) is None and capacity.limiting_probes(cap) == {}
    assert capacity.interval(cap) == (4.0, 5.0) and capacity.describe(cap).startswith("4 req/s")
    assert capacity.step_rows(cap, ["e2el_p95_ms"])[0][-2:] == ["-", "pass"]
    assert capacity.interval(CapacityRecord.from_dict({})) == (0.0, 0.0)
    assert capacity.describe(CapacityRecord.from_dict({})) == "no rate met the SLOs"


def test_write_takes_typed_values_and_dicts_alike():
    """`record.write` stores a typed value as its dict: the same attributes either way, and
    a twin of a record (the facts and values the study loop copies) writes what it read."""
    fields = {"measures": Measures(10.0, 20.0, 30.0),
              "quality": Quality(drift=0.0, agreement=1.0, passed=True,
                                 thresholds={"drift": 0.01, "agreement": 0.5}),
              "startup": Startup(kv_cache_tokens=64, launch="cold", phases={"load": 1.0}),
              "metrics": {"completed": 1}}
    plain = {k: v.as_dict() if hasattr(v, "as_dict") else v for k, v in fields.items()}
    study = optuna.create_study()
    typed_rec = record.add(study, values=[0.0], **fields)
    dict_rec = record.add(study, values=[0.0], **plain)
    twin = trial_mod.Facts.of_record(dict_rec).fields()  # what the study loop copies
    copy_rec = record.add(study, values=[0.0], **twin, metrics=dict_rec.metrics,
                          measures=dict_rec.measures, quality=dict_rec.quality)
    attrs = [t.user_attrs for t in study.get_trials()]
    assert attrs[0] == attrs[1]
    assert {k: attrs[2][k] for k in attrs[0]} == attrs[0]  # the copy adds its empty reason
    assert attrs[0]["quality"] == plain["quality"] and attrs[0]["quality_passed"] is True
    for key in TYPED:
        assert getattr(typed_rec, key) == getattr(dict_rec, key) == fields[key], key
    assert isinstance(dict_rec.quality, Quality)
    assert copy_rec.startup == fields["startup"] and copy_rec.measures == fields["measures"]
    bare = TrialRecord(number=0, state=optuna.trial.TrialState.COMPLETE)
    assert bare.startup.as_dict() == {} and bare.as_dict()["startup"] == {}
    assert trial_mod.Facts.of_record(bare).fields()["startup"].as_dict() == {}
