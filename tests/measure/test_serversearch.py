"""The capacity search on a live server, without one: a step is announced (its index, kind
and rate) before anything waits or is sent, so whatever stops it can name it."""

from __future__ import annotations

import logging

import pytest

from autotune.measure import serversearch
from autotune.measure.bench import Load
from autotune.measure.loadgen import Target
from autotune.traffic import WorkloadSpec


def test_a_step_is_announced_before_it_waits_or_sends(monkeypatch, caplog):
    def idle(coro, alive):
        coro.close()
        return 0.0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # a Ctrl-C while the step's requests are out

    monkeypatch.setattr(serversearch.watch, "run", idle)
    monkeypatch.setattr(serversearch.bench, "step", interrupted)
    load = Load(Target("http://127.0.0.1:9", "m", {}), WorkloadSpec(kind="random"), "m",
                tokenizer=object())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="autotune"), pytest.raises(KeyboardInterrupt):
        serversearch.search(load, {"e2el_p95_ms": 2500.0})
    notes = [(r.getMessage(), getattr(r, serversearch.STEP, None)) for r in caplog.records]
    assert notes == [("starting capacity step 0 (burst): 100 requests",
                      serversearch.StepNote("capacity step 0 (burst)", starts=True))]


def test_a_step_is_named_by_index_kind_and_rate():
    from autotune.measure.capacitytext import step_name

    assert step_name(4, "bisect", 5.1234) == "capacity step 4 (bisect) at 5.12 req/s"
    assert step_name(0, "burst", None) == "capacity step 0 (burst)"
