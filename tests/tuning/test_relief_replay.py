"""The replay case of `benchmarks/relief.py`: the measured H200 study `h200-guided-check`
returned as measured where it measured, and a roofline fitted to its steps elsewhere. These
checks keep the roofline true to the study it stands in for."""

from __future__ import annotations

import importlib.util
import random
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune.measure import bottleneck as bn
from autotune.tuning.records.origin import ABLATION
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord
from tests.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("relief_bench", ROOT / "benchmarks" / "relief.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["relief_bench"] = module
    spec.loader.exec_module(module)
    return module


def _study() -> list[TrialRecord]:
    db = ROOT / "studies" / "h200-guided-check.db"
    return records(optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}"))


def test_every_configuration_measured_to_the_end_is_replayed_as_measured(bench):
    surface = bench.REPLAY
    done = [r for r in _study() if r.state == TrialState.COMPLETE and r.capacity
            and r.capacity.low]
    keys = {surface.key(r.flags) for r in done}
    assert keys == set(surface.measured) and len(keys) == 6
    for r in done:
        assert surface.truth(r.flags) == pytest.approx(r.capacity.request_throughput)
    # vLLM's defaults come back with their measured steps, the limit read across the knee;
    # the capacity is what the steps at 50.1 req/s offered achieved
    out = bench.runner(surface, random.Random(0))(None, "m", {})
    cap = out.summary.capacity
    assert cap.low == pytest.approx(50.8, abs=0.1) and len(cap.steps) == 7
    assert cap.rate == pytest.approx(50.1, abs=0.1)
    assert cap.bottleneck.kind == bn.FRONT_END


def test_the_roofline_agrees_with_what_the_study_measured(bench):
    """Within 6 % of the capacity interval of every trial measured to the end (the interval
    starts at the rate the engine achieved, up to 3 % above the rate the search offered,
    which the roofline was fitted to), and under the rate at which each pruned trial's
    burst already failed."""
    from autotune.measure import capacityrecord

    for r in _study():
        if r.capacity is None or r.origin_kind == ABLATION and not r.capacity.low:
            continue
        model = bench._h200({**bench.REPLAY.defaults, **r.flags}).capacity()
        if r.capacity.low:
            lo, hi = capacityrecord.interval(r.capacity)
            assert lo * 0.94 <= model <= hi * 1.06, (r.number, lo, model, hi)
        elif r.capacity.max_request_throughput:
            assert model < r.capacity.max_request_throughput, r.number


def test_a_modelled_point_records_a_knee_named_by_contrast(bench):
    """Four API servers at 2,048-token chunks: the GPU limits; the engine core reads a full
    core on both sides of the knee, as measured, and is not what the contrast names."""
    flags = {"api-server-count": 4, "max-num-batched-tokens": 2048, "block-size": 32}
    out = bench.runner(bench.REPLAY, random.Random(0))(None, "m", flags)
    cap = out.summary.capacity
    assert cap.bottleneck.kind == bn.GPU
    assert "engine core" in cap.bottleneck.text and "not what broke" in cap.bottleneck.text
