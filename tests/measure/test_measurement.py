"""`Measurement`: a stored flat object read by `of` and written back unchanged; fields set
in code by name with `replace`, typed, each new one last; `autotune bench`'s report around
it (`benchrun.BenchReport`)."""

from __future__ import annotations

import json

import pytest

from autotune.engine.log import StartupFigures
from autotune.measure import bottleneck
from autotune.measure.benchrun import BenchReport, LaunchedEngine
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement, SentWorkload, WholeRun
from autotune.measure.probesummary import ClientLag, ProbeSummary
from autotune.traffic import WorkloadSpec

STORED = {"duration": 10.0, "completed": 8, "p95_ttft_ms": 120.5, "output_throughput": 90.0,
          "vllm_only_field": [1, 2], "capacity": {"rate": 4.0, "low": 4.0, "high": 5.0}}


def test_a_stored_object_reads_into_fields_and_writes_back_as_it_was():
    m = Measurement.of(STORED)
    assert m.completed == 8 and m.latencies == {"p95_ttft_ms": 120.5}
    assert m.other == {"vllm_only_field": [1, 2]}
    assert isinstance(m.capacity, CapacityRecord) and m.capacity.rate == 4.0
    assert m.value("p95_ttft_ms") == 120.5 and m.value("failed") is None  # not stored
    assert json.dumps(m.as_dict()) == json.dumps(STORED)


def test_replace_sets_named_fields_and_appends_new_ones_last():
    m = Measurement.of(STORED).replace(completed=9, stopped_after_probe="below_best")
    assert m.completed == 9 and m.stopped_after_probe == "below_best"
    assert list(m.as_dict()) == [*STORED, "stopped_after_probe"]
    assert Measurement.of(m.as_dict()) == m


def test_replace_refuses_a_name_that_is_not_a_field():
    """A flat key (a latency, a key vLLM added) is parsing's business, not a setter's."""
    with pytest.raises(TypeError, match="no field p95_ttft_ms, whatever"):
        Measurement.of(STORED).replace(p95_ttft_ms=1.0, whatever=2)


def test_the_bench_report_writes_the_measurement_then_engine_then_device():
    m = Measurement.of({"completed": 3})
    cpu = BenchReport(m, "cpu").as_dict()
    assert cpu == {"completed": 3, "device": {"name": "cpu"}}
    engine = LaunchedEngine(["vllm", "serve", "m"], 12.5, StartupFigures(), "vllm-0.1", "e.log")
    gpu = BenchReport(m, "NVIDIA H100", 81559.0, engine).as_dict()
    assert list(gpu) == ["completed", "engine", "device"]
    assert gpu["device"] == {"name": "NVIDIA H100", "memory_mib": 81559.0}
    assert gpu["engine"]["command"] == ["vllm", "serve", "m"]
    assert list(gpu["engine"])[:2] == ["command", "startup_s"]
    assert list(gpu["engine"])[-2:] == ["version", "log"]


def test_probes_are_typed_and_stored_as_they_were_read():
    """A measurement's probes are a `ProbeSummary`: a stored `{}` is one that saw nothing
    (false), a stored null none at all, and a figure a record lacks reads as the default."""
    stored = {"probes": {"preemptions": 2.0, "rss_mib_max": None, "api_servers": 2}}
    m = Measurement.of(stored)
    assert isinstance(m.probes, ProbeSummary) and m.probes.preemptions == 2.0
    assert m.probes.kv_cache_usage_max == 0.0 and m.probes.gpu_util_mean is None  # not stored
    assert m.as_dict() == stored
    assert not Measurement.of({"probes": {}}).probes
    assert Measurement.of({"probes": {}}).as_dict() == {"probes": {}}
    assert Measurement.of({"probes": None}).probes is None
    made = ProbeSummary(samples=3)  # made here: every figure, in the fields' order
    assert made and list(made.as_dict())[:2] == ["samples", "preemptions"]


def test_the_client_lag_is_typed_and_stored_as_it_was_read():
    """A measurement's `client` is a `ClientLag`: a stored `{}` (nothing measured) is false
    and written back as `{}`; one made with no figure is stored as `{}` too, as the plain
    figures were; the bottleneck reads its p99 as it read the stored key."""
    stored = {"client": {"lag_p50_ms": 0.4, "lag_p99_ms": 31.0, "lag_max_ms": 40.2}}
    m = Measurement.of(stored)
    assert isinstance(m.client, ClientLag) and m.client.lag_p99_ms == 31.0
    assert json.dumps(m.as_dict()) == json.dumps(stored)
    assert not Measurement.of({"client": {}}).client
    assert Measurement.of({"client": {}}).as_dict() == {"client": {}}
    assert Measurement.of({}).replace(client=ClientLag()).as_dict() == {"client": {}}
    assert bottleneck.attribute({}, m.client).kind == bottleneck.CLIENT
    assert bottleneck.attribute({}, ClientLag()).kind == bottleneck.NONE


def test_a_steps_whole_run_figures_are_typed_and_stored_as_before():
    """A capacity step keeps its whole step's figures beside the window's, in this order,
    a figure its run lacks as null."""
    run = Measurement.of({"completed": 30, "failed": 0, "duration": 9.5,
                          "request_throughput": 3.2, "p95_ttft_ms": 80.0})
    whole = WholeRun.of(run)
    assert whole.as_dict() == {"completed": 30, "failed": 0, "duration": 9.5,
                               "request_throughput": 3.2, "output_throughput": None}
    step = Measurement.of({"completed": 20}).replace(whole=whole)
    assert Measurement.of(json.loads(json.dumps(step.as_dict()))).whole == whole


def test_the_workload_sent_is_typed_and_keeps_the_keys_it_does_not_name():
    """A workload stored by another version of the spec (a field since dropped, fields not
    yet added) reads its typed fields and writes back the very object, in its order."""
    old = {"kind": "random", "dropped_knob": 3, "num_requests": 16, "range_ratio": 0.0,
           "capacity": {"max_steps": 6}, "ignore_eos": True}
    m = Measurement.of({"completed": 16, "workload": old})
    assert isinstance(m.workload, SentWorkload)
    assert (m.workload.kind, m.workload.num_requests, m.workload.input_len) == \
        ("random", 16, None)
    assert m.workload.rest == {"dropped_knob": 3, "capacity": {"max_steps": 6}}
    assert m.workload.same_lengths
    assert json.dumps(m.as_dict()) == json.dumps({"completed": 16, "workload": old})
    assert not SentWorkload.from_dict({**old, "range_ratio": 0.25}).same_lengths
    assert not SentWorkload.from_dict({"kind": "random"}).same_lengths  # ignore_eos unknown


def test_the_workload_sent_is_stored_as_the_spec_dumps_it():
    spec = WorkloadSpec(kind="random", num_requests=8, request_rate=2.5)
    sent = SentWorkload.of(spec)
    assert json.dumps(sent.as_dict()) == json.dumps(spec.model_dump(mode="json"))
    assert (sent.num_requests, sent.request_rate, sent.rest["capacity"]) == \
        (8, 2.5, spec.capacity.model_dump(mode="json"))
    # made in code with no dump behind it: its fields, then whatever it keeps
    assert list(SentWorkload(kind="chat", rest={"turns": 4}).as_dict())[-2:] == \
        ["mode", "turns"]
