"""The warm-restart check's arithmetic and launch plan, with canned runs (no engine): both
orders, each side's scenario, and warm over vLLM's with the pairs' interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.engine import compilecache
from autotune.engine.log import Startup
from autotune.measure.measurement import Measurement
from autotune.tuning import trial as trial_mod
from autotune.verify import warmcheck
from tests import canned


def test_the_order_swaps_every_pair():
    assert warmcheck.order(2) == [(0, "vllm"), (0, "warm"), (1, "warm"), (1, "vllm")]
    assert warmcheck.order(3)[-2:] == [(2, "vllm"), (2, "warm")]


def test_each_side_launches_as_it_should(tmp_path):
    sc = canned.scenario(engine={"flags": {"max-num-seqs": 8}, "compile_key": "bounded",
                                 "env": {"X": "1"}})
    sides = warmcheck.sides(sc, tmp_path)
    warm, own = sides["warm"], sides["vllm"]
    assert warm.engine.compile_cache == str((tmp_path / "compile-cache").resolve())
    assert warm.engine.compile_key == "bounded" and warm.engine.fork_engine_core
    assert own.engine.compile_cache == compilecache.VLLM and own.engine.compile_key == "vllm"
    assert not own.engine.fork_engine_core
    # vLLM's side keeps a cache of its own, as vLLM's default cache on a machine of its own
    assert own.engine.env == {"X": "1", compilecache.ROOT: str((tmp_path / "vllm-cache")
                                                               .resolve())}
    assert not warm.prune.enabled and not own.prune.enabled


def _outcome(capacity: float, kv: int, ttft: float, startup: float, cached: str,
             held: dict[str, Any]) -> trial_mod.Outcome:
    cap = {"request_throughput": capacity, "low": capacity, "high": capacity * 1.1,
           "steps": [{"index": 0, "kind": "burst", "passed": False},
                     {"index": 1, "kind": "ceiling", "rate": capacity, "passed": True,
                      "latencies": {"ttft_p95_ms": ttft, "tpot_p95_ms": 5.0}},
                     {"index": 2, "kind": "expand", "rate": capacity * 1.1, "passed": False,
                      "latencies": {"ttft_p95_ms": 9e3, "tpot_p95_ms": 50.0}}]}
    facts = trial_mod.EngineRun({}, timings={"startup_s": startup},
                                startup=Startup(kv_cache_tokens=kv, compile_cache=cached,
                                                warm=compilecache.WarmLaunch(held)))
    return trial_mod.Outcome(trial_mod.COMPLETE, summary=Measurement.of({"capacity": cap}),
                             facts=facts)


def test_figures_are_warm_over_vllm_per_pair_with_an_interval(tmp_path):
    launched: list[tuple[str, Path]] = []
    figures = {("vllm", 0): (10.0, 1000, 100.0, 40.0, "miss"),
               ("warm", 0): (10.5, 1000, 100.0, 45.0, "miss"),
               ("warm", 1): (9.8, 1000, 110.0, 20.0, "hit"),
               ("vllm", 1): (10.0, 1000, 100.0, 38.0, "hit")}

    def runner(scenario, model, flags, trial_dir):
        side = "vllm" if scenario.engine.compile_cache == "vllm" else "warm"
        pair = sum(1 for s, _ in launched if s == side)
        launched.append((side, trial_dir))
        held = {"max-num-batched-tokens": 2048} if side == "warm" else {}
        return _outcome(*figures[(side, pair)], held)

    check = warmcheck.run_check(canned.scenario(), "/m", {"max-num-seqs": 4}, 2, tmp_path,
                                runner=runner)
    assert [s for s, _ in launched] == ["vllm", "warm", "warm", "vllm"]
    assert [d.name for _, d in launched] == ["01-vllm", "02-warm", "03-warm", "04-vllm"]
    by = {f.name: f for f in check.figures}
    cap = by["capacity"]
    assert cap.per_pair == pytest.approx((1.05, 0.98))
    assert cap.ratio == pytest.approx((1.05 * 0.98) ** 0.5)
    assert cap.low < 1 < cap.high and cap.unchanged  # two pairs: a wide interval
    kv = by["KV cache tokens"]
    assert kv.per_pair == (1.0, 1.0) and kv.low == kv.high == 1.0 and kv.unchanged
    assert by["TTFT p95 at capacity"].per_pair == pytest.approx((1.0, 1.1))
    lines = check.lines()
    assert lines[0].startswith("capacity warm/vLLM 1.014 (95 % CI ")
    assert "warm: start-up 45.0, 20.0 s (median 32.5); compile cache miss, hit" in lines
    assert lines[-1] == "held by the warm side: --max-num-batched-tokens 2048"


def test_a_side_that_measured_nothing_gives_no_ratio(tmp_path):
    def runner(scenario, model, flags, trial_dir):
        if scenario.engine.compile_cache == "vllm":
            return trial_mod.Outcome(trial_mod.PRUNED, "oom")
        return _outcome(10.0, 1000, 100.0, 10.0, "hit", {})

    check = warmcheck.run_check(canned.scenario(), "/m", {}, 1, tmp_path, runner=runner)
    cap = next(f for f in check.figures if f.name == "capacity")
    assert cap.ratio is None and cap.text() == "capacity: not measured on both sides"
    assert check.runs[0].outcome == "pruned (oom)"
